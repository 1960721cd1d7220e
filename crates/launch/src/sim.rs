//! A run in the simulator: the cost model (`--model`, `--nic-mpps`), a trace
//! prepared for the model (each packet's NFLOW key and work), the residual
//! cost both Dyssect and the model must agree on, and the simulation itself —
//! for `flowshift sim`, `compare --sim` and `validate`.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::bail;
use clap::Args;
use sim::{CostModel, Prepared};

use crate::run::{balancer_kind, RunSection};

/// The cost model option shared by `sim`, `compare` and `validate`.
#[derive(Args, Debug, Clone)]
pub struct ModelArg {
    /// Cost model file written by `flowshift calibrate`; without it, the bundled
    /// model (measured on the development machine).
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// Model a hardware NIC of this many Mpps instead of the runtime's NIC-model
    /// thread (whose rate the model measured): the papers' machines steer in
    /// the NIC, so their cores, not the steering, are the limit.
    #[arg(long)]
    pub nic_mpps: Option<f64>,
}

impl ModelArg {
    pub fn load(&self) -> anyhow::Result<CostModel> {
        let mut m = match &self.model {
            Some(p) => CostModel::from_file(p)?,
            None => CostModel::default(),
        };
        if let Some(r) = self.nic_mpps {
            if !(r.is_finite() && r > 0.0) {
                bail!("--nic-mpps {r}: must be a positive rate");
            }
            m.nic_ns = 1e3 / r;
        }
        Ok(m)
    }
}

/// Runs the functional pass with a note on stderr (it runs the real chain).
pub fn prepare(chain: &nf::Chain, trace: &trace::Trace, dscp: u8) -> Prepared {
    let t = Instant::now();
    let p = Prepared::new(chain, trace, dscp);
    eprintln!(
        "flowshift: functional pass over {} packets in {:.2} s",
        trace.len(),
        t.elapsed().as_secs_f64()
    );
    p
}

/// Gives Dyssect's MILP the residual δ the cost model charges — the share of
/// an offloaded packet's cost left on its working core (the lookup and the
/// hand-off, `overhead_ns`, of the chain's cost) — unless `[run.dyssect]
/// residual` sets it; says which on stderr. Other balancers are untouched.
pub fn agree_residual(
    cfg: &mut runtime::RunConfig,
    sec: &RunSection,
    model: &CostModel,
    prep: &Prepared,
) -> anyhow::Result<()> {
    if cfg.balancer.name() != "dyssect" || cfg.offloaders == 0 {
        return Ok(());
    }
    let Ok(chain_ns) = model.chain_ns(&prep.kinds) else {
        return Ok(());
    };
    let delta = residual_of(model.overhead_ns, chain_ns);
    let mut with = sec.clone();
    let d = with.dyssect.get_or_insert_with(Default::default);
    if sec.dyssect_residual_set {
        eprintln!(
            "flowshift: Dyssect's MILP takes [run.dyssect] residual = {:.2}; the cost model leaves {delta:.2} \
             of an offloaded packet's cost on its working core",
            d.residual
        );
        return Ok(());
    }
    d.residual = delta;
    cfg.balancer = balancer_kind("dyssect", &with)?;
    eprintln!(
        "flowshift: Dyssect's MILP takes residual = {delta:.2} from the cost model (the share of an offloaded \
         packet's cost left on its working core); [run.dyssect] residual overrides it"
    );
    Ok(())
}

/// δ of a model: `overhead_ns` over the chain's cost, within [0, 1].
fn residual_of(overhead_ns: f64, chain_ns: f64) -> f64 {
    (overhead_ns / chain_ns.max(1e-9)).clamp(0.0, 1.0)
}

/// Simulates and says how fast the simulator went.
pub fn simulate(
    prep: &Prepared,
    trace: &trace::Trace,
    cfg: &runtime::RunConfig,
    model: &CostModel,
) -> anyhow::Result<sim::SimOutcome> {
    let t = Instant::now();
    let out = sim::simulate(prep, trace, cfg, model)?;
    let secs = t.elapsed().as_secs_f64();
    eprintln!(
        "flowshift: simulated {} packets ({} events) in {:.2} s: {:.1} M simulated packets/s",
        out.report.packets_in,
        out.events,
        secs,
        out.report.packets_in as f64 / secs.max(1e-9) / 1e6
    );
    if out.held != 0 || out.leftover_leases != 0 {
        bail!(
            "simulation ended with {} packets held and {} flows still offloaded: a migration did not complete",
            out.held,
            out.leftover_leases
        );
    }
    Ok(out)
}
