//! `flowshift sim`: the run `flowshift run` would do, in the simulator — same
//! flags, same config file, same report (`mode = "sim"`), plus the per-core load
//! over time — at any number of cores, with a cost model measured by
//! `flowshift calibrate`.

use anyhow::bail;
use clap::Args;
use launch::packets::Hold;
use launch::run::{setup, RunArgs, Setup};
use launch::sim::{agree_residual, prepare, simulate, ModelArg};

use super::report::{print_load_over_time, print_report};

/// Options of `flowshift sim`: those of `flowshift run` (no `--output`) and the model.
#[derive(Args, Debug)]
pub struct SimArgs {
    #[command(flatten)]
    pub run: RunArgs,
    #[command(flatten)]
    pub model: ModelArg,
}

pub fn run(a: SimArgs) -> anyhow::Result<()> {
    if a.run.output.is_some() {
        bail!("the simulator forwards no real packets: --output is for `flowshift run`");
    }
    if let Some(p) = &a.run.json {
        launch::output::check(p)?;
    }
    let Setup {
        chain,
        mut cfg,
        packets,
        ifaces,
        sec,
        ..
    } = setup(&a.run, Hold::Memory)?;
    let trace = packets.into_trace();
    if ifaces.is_some() {
        anyhow::bail!("`sim` simulates a trace: --iface is for `flowshift run`");
    }
    cfg.progress = None;
    let model = a.model.load()?;
    eprintln!(
        "flowshift: simulating {} packets, {} working + {} offloading cores, balancer {}",
        trace.len(),
        cfg.workers,
        cfg.offloaders,
        cfg.balancer.name()
    );
    let prep = prepare(&chain, &trace, cfg.priority_dscp);
    agree_residual(&mut cfg, &sec, &model, &prep)?;
    let out = simulate(&prep, &trace, &cfg, &model)?;
    print_report(&out.report);
    print_load_over_time(&out.report);
    if let Some(p) = &a.run.json {
        launch::output::json(p, &out.report)?;
    }
    Ok(())
}
