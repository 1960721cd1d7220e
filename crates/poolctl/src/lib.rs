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

pub mod args;
pub mod bgp;
pub mod groups;
pub mod layout;
pub mod nodes;
pub mod repair;
pub mod tenants;

use anyhow::{bail, Context};

/// `flowshift pool run`: checks what both controllers take, then runs the
/// pool with the controller `--routing` names.
pub fn run(a: args::RunArgs) -> anyhow::Result<()> {
    if !(2..=16).contains(&a.nodes) {
        bail!(
            "--nodes {}: a pool replicates across 2 to 16 nodes",
            a.nodes
        );
    }
    if a.prefix.is_empty() || a.prefix.len() > 6 {
        bail!("--prefix `{}`: 1 to 6 characters", a.prefix);
    }
    if a.workers == 0 || a.heartbeat_us == 0 {
        bail!("--workers and --heartbeat-us must be at least 1");
    }
    let duration = a
        .duration
        .as_deref()
        .map(|d| humantime::parse_duration(d).with_context(|| format!("--duration {d}")))
        .transpose()?;
    match a.routing {
        args::Routing::Bgp => bgp::run(&a, duration),
        args::Routing::Groups => groups::run(&a, duration),
    }
}
