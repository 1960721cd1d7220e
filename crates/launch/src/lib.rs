//! From a command line and a config file to a run: what `flowshift run`,
//! `sim` and the experiments built on them share.
//!
//! - [`run`]: `run`'s options and the config file's tables (`[run]`, `[io]`,
//!   `[pool]`), loaded and checked into a [`run::Setup`] (the chain, the
//!   runtime's `RunConfig`, the packets or interfaces); the run itself.
//! - [`sim`]: the same setup in the simulator, with a cost model.
//! - [`packets`]: where replayed packets come from and how they are held.
//! - [`output`]: files written whole (checked first, renamed into place).
//! - [`memcap`]: the memory cap, checked before anything is allocated.
//! - [`metrics`]: the Prometheus endpoint of `--metrics`.
//! - [`control`]: the control socket `flowshift ctl` talks to.
//! - [`natlog`]: NAT events logged as JSON lines or IPFIX (`--nat-log`).
//! - [`reload`]: live reload of the configuration (`ctl reload`, SIGHUP).
//! - [`speaker`]: a pool node's BGP speaker (`[pool.bgp]`).
//! - [`forwarding`]: waiting for a child `flowshift run` to forward.

#![forbid(unsafe_code)]

pub mod control;
pub mod file;
pub mod forwarding;
pub mod memcap;
pub mod metrics;
pub mod natlog;
pub mod output;
pub mod packets;
pub mod pfcp;
pub mod reload;
pub mod run;
pub mod sim;
pub mod speaker;
