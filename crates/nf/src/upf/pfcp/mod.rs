//! PFCP (TS 29.244), the N4 protocol by which an SMF installs a UPF's
//! sessions: the message header ([`msg`]), information elements ([`ie`]),
//! the rules they carry ([`codec`]), the UPF's endpoint ([`server`], pure:
//! `flowshift run` gives it a socket) and an SMF's side ([`client`]) for
//! tests and tools.

pub mod client;
pub mod codec;
pub mod ie;
pub mod msg;
pub mod server;

pub use server::{Endpoint, ServerStats, Settings};
