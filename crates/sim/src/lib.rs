//! flowshift's deterministic discrete-event simulator.
//!
//! It replays a trace through the runtime's NIC model (the same
//! [`steer::IndirectionTable`] and RSS hash), per-core bounded queues and the
//! controller, with **the same** balancers ([`balance::Balancer`], built from the
//! same [`runspec::BalancerKind`]) and **the same** migration state machines
//! ([`WorkingCore`](balance::migrate::WorkingCore) on each working core,
//! [`PlanApplier`](balance::migrate::PlanApplier) on the controller) as the
//! threaded runtime —
//! only time is modelled: each packet costs what the [`CostModel`] says, which
//! `flowshift calibrate` measures on the real runtime.
//!
//! Verdicts come from one functional pass of the real chain over the trace
//! ([`Prepared`]); the timing pass ([`simulate`]) is pure — no threads, clocks or
//! I/O — so the same inputs give the same report, bit for bit. Its report has the
//! runtime's schema (`mode = "sim"`), so the two compare field by field.
//!
//! What is modelled: NIC-model rate (`nic_ns` per packet, which is also how long
//! after its arrival stamp a packet is in its core's queue) and tail drops on full
//! queues (timed pace) or back-pressure (as-fast-as-possible pace); bursts of up to
//! `burst` packets per poll; per-packet service time from the chain, the core's
//! flow working set and shard count, new-flow set-up; shard moves (table rewrite
//! with the NIC update delay, queue cycling, hold queues, hand-over messages,
//! cache warm-up per moved entry); flow offloading (offload rings with
//! back-pressure, leases, recall markers, pending queues); the controller's rounds
//! and adaptive period. What is not: the time the balancer itself takes (plans
//! apply at the round's instant; `plan_us_*` are 0), flow-table expiry, contention
//! between cores for shared caches or memory bandwidth beyond the per-core curve,
//! and the sprayer balancer.
//!
//! ```
//! use runspec::{BalancerKind, RunConfig};
//! use sim::{simulate, CostModel, Prepared};
//! use trace::{Generator, Trace, TraceSpec};
//!
//! let spec = TraceSpec { flows: 500, packets: 20_000, alpha: 1.2, ..TraceSpec::default() };
//! let trace = Trace::from_generated(Generator::new(&spec).unwrap());
//! let chain = nf::ChainConfig::default_chain().build(std::path::Path::new(".")).unwrap();
//! let prep = Prepared::new(&chain, &trace, 46); // 46: the priority class's DSCP
//! // 8 simulated cores on a 2-core machine
//! let cfg = RunConfig { workers: 8, balancer: BalancerKind::Rsspp(Default::default()),
//!                       ..RunConfig::default() };
//! let a = simulate(&prep, &trace, &cfg, &CostModel::default()).unwrap();
//! let b = simulate(&prep, &trace, &cfg, &CostModel::default()).unwrap();
//! assert_eq!(a.report, b.report); // deterministic
//! assert_eq!(a.report.per_core.len(), 8);
//! assert_eq!(a.report.packets_in, a.report.packets_out + a.report.dropped());
//! ```

#![forbid(unsafe_code)]

mod cost;
mod engine;
mod prep;

pub use cost::{Caches, CostError, CostModel, Curve};
pub use prep::{PktInfo, Prepared};

use runspec::{RunConfig, RunReport};
use trace::Trace;

/// A simulation that cannot start.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// A parameter is out of range or unsupported.
    #[error("{0}")]
    Config(String),
    /// The cost model does not fit the chain.
    #[error(transparent)]
    Cost(#[from] CostError),
}

/// The report plus what tests need.
#[derive(Debug)]
pub struct SimOutcome {
    /// The report (`mode = "sim"`).
    pub report: RunReport,
    /// Packets still held or pending at the end (must be 0).
    pub held: u64,
    /// Flows still leased to an offloading core at the end (must be 0).
    pub leftover_leases: u64,
    /// Events processed.
    pub events: u64,
}

/// Simulates `cfg` on a prepared trace (see [`Prepared::new`]) with `model`.
pub fn simulate(
    prep: &Prepared,
    trace: &Trace,
    cfg: &RunConfig,
    model: &CostModel,
) -> Result<SimOutcome, SimError> {
    cfg.validate()
        .map_err(|e| SimError::Config(e.to_string()))?;
    let w = cfg.workers;
    if trace.is_empty() || prep.pkts.len() != trace.len() {
        return Err(SimError::Config(
            "the trace has no packet (or was not the one prepared)".into(),
        ));
    }
    engine::supported(&cfg.balancer).map_err(SimError::Config)?;
    // the NIC model, the working and the offloading cores each spin on a CPU
    let model = &model.time_shared(1 + w + cfg.offloaders);
    let chain_ns = model.chain_ns(&prep.kinds)? + prep.own_lookups as f64 * model.per_nf_ns;
    let eng = engine::Engine::new(prep, trace, cfg, model, chain_ns).map_err(SimError::Config)?;
    let (tally, counts) = eng.run();
    Ok(SimOutcome {
        held: counts.held_left,
        leftover_leases: counts.leased_left,
        events: counts.events,
        report: tally.report(cfg),
    })
}
