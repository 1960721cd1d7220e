//! The threaded runtime: a thin driver that runs the pure pieces on real threads.
//!
//! - **Feeder** (the NIC model): replays a preloaded trace — timed at a speed factor
//!   (a full ring drops and counts, as a NIC does) or as fast as workers take packets
//!   (the feeder waits on a full ring) — computes each packet's RSS hash, steers it
//!   through the live indirection table into the worker's bounded SPSC ring, and
//!   stamps its arrival time.
//! - **Working cores** (one thread each): poll their ring in bursts, look every
//!   packet up and run the chain ([`nf::Chain::process_burst_routed`]) on the shards
//!   they own, send offloaded flows to their offloading core through
//!   [`balance::migrate::WorkingOffload`], and take part in shard moves through
//!   [`balance::migrate::WorkerMoves`].
//! - **Offloading cores** (Dyssect): poll one ring per working core round-robin and
//!   run the chain on the leased flow states ([`nf::Chain::process_leased`]); at a
//!   recall marker they send the states back.
//! - **Controller**: every period asks the balancer for a plan — shard moves (driven
//!   through [`balance::migrate::Mover`], with an optional NIC update delay),
//!   offload ratios and offloading cores — and sends it to the cores.
//!
//! Shards move between threads by value (a message carrying the boxed shard), and
//! an offloaded flow's state moves by value with its first offloaded packet and
//! back with a recall, so state is never shared: no lock on the packet path. A
//! thread that panics aborts the run (the others stop waiting on it) and the panic
//! surfaces when the run joins its threads.
//!
//! ```
//! use runtime::{run, BalancerKind, RunConfig};
//! use trace::{Generator, Trace, TraceSpec};
//!
//! let spec = TraceSpec { flows: 200, packets: 20_000, ..TraceSpec::default() };
//! let trace = Trace::from_generated(Generator::new(&spec).unwrap());
//! let chain = nf::ChainConfig::default_chain().build(std::path::Path::new(".")).unwrap();
//! let cfg = RunConfig {
//!     workers: 2,
//!     balancer: BalancerKind::Random, // moves a shard every period
//!     period: std::time::Duration::from_millis(1),
//!     pin: false,
//!     ..RunConfig::default()
//! };
//! let out = run(&chain, &trace, &cfg).unwrap();
//! let r = &out.report;
//! assert_eq!(r.packets_in, r.packets_out + r.dropped());
//! assert_eq!(r.reordered, 0);
//! ```

#![forbid(unsafe_code)]

mod backoff;
mod buffers;
mod bulk;
mod carried;
mod controller;
mod error;
#[cfg(test)]
mod faults;
mod feeder;
mod fragments;
mod inspect;
mod kernel;
pub mod memory;
mod merge;
mod messages;
mod offloader;
mod parsers;
mod ports;
pub mod protocol;
pub mod replay;
mod replica;
mod run;
mod sealed;
mod shared;
mod sink;
mod spill;
mod stats;
mod sync;
mod worker;

#[cfg(all(test, loom))]
mod loom_tests;
#[cfg(all(test, not(loom)))]
mod order_tests;

pub use ports::Steering;
pub use run::{run, run_on, Input, RunError, RunOutcome};
pub use runspec::{
    cdf, period_imbalance_median, BalancerKind, ConfigError, Drops, Latency, LoadSample,
    MakeBalancer, OffloadSelect, OutputTap, PerCore, Progress, Ready, RunConfig, RunReport,
    ScriptedMove, Stop,
};
