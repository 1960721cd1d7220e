//! flowshift's measurements: what its numbers come from.
//!
//! - [`micro`]: `flowshift bench` — runtime capacity, empty chain vs FW → NAT,
//!   1…N workers, beside a C flow table; memory per flow.
//! - [`kernel`]: `flowshift bench-kernel` — FW → NAT on real interfaces
//!   beside the kernel's nftables and routing, same bed, one run.
//! - [`mvt`]: `flowshift bench-mvt` — NFLOW/MVT's Figs. 5a–c.
//! - [`pool`]: `flowshift pool bench` — what replication costs.
//! - [`shards`]: `flowshift bench-shards` — Dyssect's Fig. 1, throughput
//!   against the number of shards on one core.
//! - [`calibrate`]: the simulator's cost model measured on this machine.
//! - [`validate`]: runtime vs simulator at 1 and 2 cores.
//! - [`compare`]: balancers and core counts on one trace; [`plots`].

pub mod calibrate;
pub mod compare;
pub mod kernel;
pub mod micro;
pub mod mvt;
pub mod plots;
pub mod pool;
pub mod shards;
pub mod validate;
pub mod xdp_cost;
