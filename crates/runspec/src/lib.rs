//! What a flowshift run is and what it reports, shared by the threaded runtime
//! (`flowshift run`) and the simulator (`flowshift sim`) so that both accept the
//! same configurations, start from the same topology and write the same report.
//!
//! - [`RunConfig`]: the run's parameters; [`RunConfig::validate`] checks them
//!   once for both drivers.
//! - [`Topology`]: who owns which shard at the start, each working core's
//!   offloading core, the starting offload ratio.
//! - [`RunReport`]: the report schema (`--json`), built by [`Tally::report`] from
//!   what a driver counted.
//!
//! ```
//! use runspec::{RunConfig, Topology};
//!
//! let cfg = RunConfig { workers: 3, offloaders: 1, offload_ratio: 0.5, ..RunConfig::default() };
//! cfg.validate().unwrap();
//! let top = Topology::new(&cfg, 8);
//! assert_eq!(top.owner, vec![0, 1, 2, 0, 1, 2, 0, 1]);
//! assert_eq!(top.owned(2), vec![2, 5]);
//! assert_eq!(top.offload_core, vec![Some(0), Some(0), Some(0)]);
//! assert_eq!(top.ratio, balance::migrate::RATIO_ONE / 2);
//!
//! let bad = RunConfig { workers: 0, ..RunConfig::default() };
//! assert_eq!(bad.validate().unwrap_err().to_string(), "run.workers = 0: must be between 1 and 1024");
//! ```

#![forbid(unsafe_code)]

mod config;
pub mod control;
pub mod metrics;
mod report;
mod tally;
mod topology;

pub use config::{
    BalancerKind, ConfigError, Flag, MakeBalancer, OffloadSelect, OutputTap, Progress, Ready,
    Replica, RunConfig, ScriptedMove, SpillTo, SplitTenant, Stop, MAX_BURST, MAX_CORES,
    MAX_NIC_THREADS, MAX_RING, PAIR_BEAT_MS,
};
pub use report::{
    cdf, period_imbalance_median, period_packet_imbalance_median, Drops, Latency, LoadSample,
    PerCore, Placed, RunReport, IMBALANCE_WINDOW_NS,
};
pub use tally::{latency_histogram, Tally};
pub use topology::Topology;
