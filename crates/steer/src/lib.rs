//! The RSS model: what a NIC does to pick a receive queue for a packet.
//!
//! 1. [`Toeplitz`] hashes the steering fields ([`HashFields`]) with a 40-byte key
//!    ([`RssKey`]); the [`RssKey::SYMMETRIC`] key gives both directions of a flow
//!    the same hash.
//! 2. `bucket = hash & (B - 1)` selects one of B entries of the
//!    [`IndirectionTable`], whose entry names the queue. The table can be rewritten
//!    while packets are being steered.
//!
//! [`roger`] is the other way a NIC steers: ternary flow rules within a rule
//! budget (NFLOW/MVT's Roger).
//!
//! This crate is pure logic: no threads, no clocks, no I/O.
//!
//! ```
//! use steer::{RssKey, Toeplitz, IndirectionTable};
//!
//! // Microsoft's RSS verification vector: 66.9.149.187:2794 → 161.142.100.80:1766
//! let t = Toeplitz::new(RssKey::DEFAULT);
//! let h = t.hash_v4_ports([66, 9, 149, 187], [161, 142, 100, 80], 2794, 1766);
//! assert_eq!(h, 0x51ccc178);
//! // 128 buckets spread over 4 queues; the bucket is the hash's low bits
//! let table = IndirectionTable::new(128, 4).unwrap();
//! let q = table.queue_of(h);
//! assert_eq!(usize::from(q), table.bucket(h) % 4);
//! ```

#![forbid(unsafe_code)]

mod fields;
mod hasher;
mod indirection;
mod key;
pub mod nat;
pub mod roger;
mod sync;
mod toeplitz;

pub use fields::{hash_input, HashFields, HashInput};
pub use hasher::RssHasher;
pub use indirection::{IndirectionTable, TableSizeError, DEFAULT_SIZE, MAX_SIZE, MIN_SIZE};
pub use key::RssKey;
pub use toeplitz::{toeplitz_naive, Toeplitz, MAX_INPUT_LEN};
