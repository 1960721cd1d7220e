//! The threaded runtime: a thin driver that runs the pure pieces on real threads.
//!
//! - **Feeder** (the NIC model): replays a preloaded trace — timed at a speed factor
//!   (a full ring drops and counts, as a NIC does) or as fast as workers take packets
//!   (the feeder waits on a full ring) — computes each packet's RSS hash, steers it
//!   through the live indirection table into the worker's bounded SPSC ring, and
//!   stamps its arrival time.
//! - **Workers** (one thread per core): poll their ring in bursts, run the chain
//!   ([`nf::Chain::process_burst`]) on the shards they own, and take part in shard
//!   moves through [`balance::migrate::WorkerMoves`].
//! - **Controller**: every period asks the balancer for moves and drives them through
//!   [`balance::migrate::Mover`].
//!
//! Shards move between threads by value (a message carrying the boxed shard), so a
//! flow table is never shared: no lock on the packet path.

mod config;
mod controller;
mod feeder;
mod offloader;
mod report;
mod run;
mod shared;
mod stats;
mod sync;
mod worker;

#[cfg(all(test, loom))]
mod loom_tests;

pub use config::{BalancerKind, Progress, RunConfig, ScriptedMove};
pub use report::{Drops, Latency, PerCore, RunReport};
pub use run::{run, RunError, RunOutcome};
