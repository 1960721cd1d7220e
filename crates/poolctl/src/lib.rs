//! A Sirius pool of real nodes on this machine (`flowshift pool run`): the
//! pool bed's namespaces, one `flowshift run` per node, and the controller.
//!
//! - [`groups`]: the pool with a controller of its own (heartbeats, failover
//!   by re-pointing the router, bulk syncs, a failed node's rejoin), and what
//!   both controllers share (node configs, keys, starting nodes).
//! - [`bgp`]: the pool on BGP, as Sirius runs it — failover in the nodes and
//!   the router; the controller provisions and watches.
//! - [`repair`]: the BGP pool's re-pairing after a failure.
//! - [`tenants`]: tenants and node capacity, for `pool plan` and `--plan`.
//!
//! The decisions are `pool`'s (pure: `ring`, `detect`, `jobs`, `bgp`,
//! `spill`); this crate runs the processes and sockets around them.

#![forbid(unsafe_code)]

pub mod bgp;
pub mod groups;
pub mod layout;
pub mod repair;
pub mod tenants;
