//! PFCP (TS 29.244), the N4 protocol by which an SMF installs a UPF's
//! sessions: the message header ([`msg`]), information elements ([`ie`]),
//! the rules they carry ([`codec`]), the UPF's endpoint ([`server`]) and
//! an SMF's side ([`client`]) for tests and `flowshift pfcp`.

pub mod client;
pub mod codec;
pub mod ie;
pub mod msg;
pub mod server;

pub use server::{Endpoint, Server, Settings};
