//! Moving load between cores: the migration protocols as pure state machines, and
//! the balancers (static, RSS++, Sprayer, random and scripted moves) that decide
//! what to move.
//!
//! Everything here is logic without threads, clocks or I/O, in the style of
//! `quinn-proto`: inputs are `on_*` calls, outputs are returned commands. The
//! threaded runtime, the simulator and the model-checking tests drive this same
//! code.

#![forbid(unsafe_code)]

pub mod balancers;
pub mod migrate;
pub mod probe;
pub mod snapshot;

pub use balancers::{Balancer, Plan, Snapshot};

/// A shard: a set of RSS buckets with one flow table (shard j holds buckets j,
/// j + S, j + 2S, …).
pub type ShardId = u16;
/// A core (worker) index; also the index of its NIC queue.
pub type CoreId = u16;
/// Version of the indirection table, bumped by every rewrite.
pub type Version = u64;
