//! `flowshift compare`: the same chain, trace and cores under several balancers,
//! one after the other, in one table — imbalance, throughput, p99 latency per
//! class, reordering, migrations — and optionally every report as JSON.

use anyhow::Context;
use clap::Args;

use crate::run::{balancer_kind, setup, RunArgs, Setup};

/// Options of `flowshift compare`: those of `flowshift run` (but `--balancers`
/// instead of `--balancer`, and no `--output`) and the balancers to compare.
#[derive(Args, Debug)]
pub struct CompareArgs {
    #[command(flatten)]
    pub run: RunArgs,
    /// Balancers, comma-separated.
    #[arg(long, default_value = "static,rsspp,dyssect")]
    pub balancers: String,
}

pub fn run(a: CompareArgs) -> anyhow::Result<()> {
    anyhow::ensure!(a.run.output.is_none(), "compare writes no --output pcap");
    anyhow::ensure!(
        a.run.balancer.is_none(),
        "compare takes --balancers a,b,c (not --balancer)"
    );
    let Setup {
        chain,
        mut cfg,
        trace,
        sec,
    } = setup(&a.run)?;
    cfg.progress = None;
    let mut reports = Vec::new();
    println!(
        "{:<9} {:>8} {:>9} {:>9} {:>8} {:>11} {:>11} {:>11} {:>7} {:>8} {:>8}",
        "balancer",
        "Mpps",
        "dropped",
        "reordered",
        "max/min",
        "p99 prio µs",
        "p99 reg µs",
        "p99.9 µs",
        "moves",
        "offload",
        "solver!"
    );
    for name in a
        .balancers
        .split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
    {
        cfg.balancer = balancer_kind(name, &sec)?;
        if name == "sprayer" && chain.has_per_flow_state() {
            println!("{name:<9} skipped: this chain keeps per-flow state (sprayer needs a stateless chain)");
            continue;
        }
        eprintln!("flowshift compare: running {name}…");
        let out = runtime::run(&chain, &trace, &cfg).with_context(|| name.to_string())?;
        let r = out.report;
        let l = &r.latency_ns;
        let solver = r.controller.get("dyssect_timeouts").copied().unwrap_or(0.0)
            + r.controller
                .get("dyssect_infeasible")
                .copied()
                .unwrap_or(0.0);
        println!(
            "{:<9} {:>8.3} {:>9} {:>9} {:>8.3} {:>11.1} {:>11.1} {:>11.1} {:>7} {:>8} {:>8}",
            name,
            r.throughput["mpps"],
            r.dropped(),
            r.reordered,
            r.imbalance["max_over_min"],
            l["priority"].p99 as f64 / 1e3,
            l["regular"].p99 as f64 / 1e3,
            l["all"].p999 as f64 / 1e3,
            r.migrations["shard_moves"],
            r.migrations["offload_changes"],
            solver
        );
        reports.push(r);
    }
    println!("(max/min: busiest over least busy core's load; solver!: Dyssect solves that timed out or were infeasible — the previous plan was kept)");
    if let Some(p) = &a.run.json {
        std::fs::write(p, serde_json::to_string_pretty(&reports)?)
            .with_context(|| format!("writing {}", p.display()))?;
    }
    Ok(())
}
