//! `flowshift compare`: the same chain and trace under several balancers and core
//! counts — on the runtime, or in the simulator with `--sim` — in one table
//! (imbalance, throughput, p99 latency per class, reordering, migrations), every
//! report as JSON, and plots (PNG and SVG): per-core load heatmaps, latency CDFs,
//! imbalance over time, migrations per balancer.
//!
//! A balancer may carry its own shard count, `name@shards` (e.g. `rsspp@128`,
//! `dyssect@16`, as in Dyssect's Use Case II). `--offloaders N` gives N of each
//! core count to offloading cores for the balancers that offload (dyssect,
//! random); the others use every core as a working core.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{bail, Context};
use clap::Args;
use runtime::RunReport;
use sim::Prepared;

use crate::plots::{self, Labeled};
use launch::run::{balancer_kind, setup, RunArgs, Setup};
use launch::sim::{prepare, simulate, ModelArg};

/// Options of `flowshift compare`: those of `flowshift run` (but `--balancers`
/// instead of `--balancer`, and no `--output`), the balancers and core counts.
#[derive(Args, Debug)]
pub struct CompareArgs {
    #[command(flatten)]
    pub run: RunArgs,
    /// Balancers, comma-separated, each optionally `name@shards`, and either
    /// followed by `/per-nf` to run the chain in the per-NF table layout (each
    /// NF its own lookup, as the papers' baselines).
    #[arg(long, default_value = "static,rsspp,dyssect")]
    pub balancers: String,
    /// Core counts to compare at, comma-separated [default: --workers].
    #[arg(long)]
    pub cores: Option<String>,
    /// Simulate instead of running (any core count).
    #[arg(long)]
    pub sim: bool,
    #[command(flatten)]
    pub model: ModelArg,
    /// Directory for the plots.
    #[arg(long, default_value = "out/compare")]
    pub plots: PathBuf,
    /// Write no plots.
    #[arg(long)]
    pub no_plots: bool,
}

/// `name` or `name@shards`.
/// A balancer spec: `name`, `name@shards`, either followed by `/per-nf` (the
/// chain in the per-NF layout, as the papers' baselines run their NFs).
fn parse_spec(spec: &str) -> anyhow::Result<(&str, Option<usize>, bool)> {
    let (spec_base, per_nf) = match spec.split_once('/') {
        None => (spec, false),
        Some((b, "per-nf")) => (b, true),
        Some((_, other)) => {
            bail!("`{spec}`: after / expected `per-nf` (the per-NF table layout), got `{other}`")
        }
    };
    match spec_base.split_once('@') {
        None => Ok((spec_base, None, per_nf)),
        Some((n, s)) => {
            let s: usize = s
                .parse()
                .ok()
                .filter(|s: &usize| s.is_power_of_two())
                .with_context(|| format!("`{spec}`: shards after @ must be a power of two"))?;
            Ok((n, Some(s), per_nf))
        }
    }
}

pub fn parse_list(s: &str) -> anyhow::Result<Vec<usize>> {
    s.split(',')
        .map(str::trim)
        .filter(|x| !x.is_empty())
        .map(|x| {
            x.parse::<usize>()
                .ok()
                .filter(|n| *n > 0)
                .with_context(|| format!("`{x}` in --cores: expected a positive number"))
        })
        .collect()
}

fn offloads(name: &str) -> bool {
    matches!(name, "dyssect" | "random")
}

pub fn run(a: CompareArgs) -> anyhow::Result<()> {
    anyhow::ensure!(a.run.output.is_none(), "compare writes no --output pcap");
    anyhow::ensure!(
        a.run.balancer.is_none(),
        "compare takes --balancers a,b,c (not --balancer)"
    );
    if let Some(p) = &a.run.json {
        launch::output::check(p)?;
    }
    // where the plots go is made before the runs, not found unusable after
    if !a.no_plots {
        std::fs::create_dir_all(&a.plots).with_context(|| {
            format!(
                "creating {} for the plots (or --no-plots)",
                a.plots.display()
            )
        })?;
    }
    let Setup {
        chain,
        chain_cfg,
        base,
        mut cfg,
        packets,
        sec,
        ifaces,
        ..
    } = setup(&a.run, launch::packets::Hold::Memory)?;
    let trace = packets.into_trace();
    if ifaces.is_some() {
        anyhow::bail!("`compare` replays a trace: --iface is for `flowshift run`");
    }
    cfg.progress = None;
    let model = if a.sim { Some(a.model.load()?) } else { None };
    let cores = match &a.cores {
        Some(c) => parse_list(c)?,
        None => vec![cfg.workers],
    };
    let specs: Vec<&str> = a
        .balancers
        .split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .collect();
    if specs.is_empty() {
        bail!("--balancers is empty");
    }
    let offloaders = cfg.offloaders;
    let ratio0 = cfg.offload_ratio;
    // chains and functional passes per shard count, built once
    let mut chains: BTreeMap<(usize, bool), nf::Chain> = BTreeMap::new();
    let mut preps: BTreeMap<(usize, bool), Prepared> = BTreeMap::new();
    let default_shards = chain.shard_count();
    let default_per_nf = chain_cfg.table.layout == nf::Layout::PerNf;
    chains.insert((default_shards, default_per_nf), chain);
    print_header();
    let mut reports: Vec<(String, RunReport)> = Vec::new();
    for &n in &cores {
        for spec in &specs {
            let (name, shards, per_nf) = parse_spec(spec)?;
            let key = (shards.unwrap_or(default_shards), per_nf || default_per_nf);
            if let std::collections::btree_map::Entry::Vacant(e) = chains.entry(key) {
                let mut c = chain_cfg.clone();
                c.steering.shards = Some(key.0);
                c.steering.buckets = Some(c.steering.buckets().max(key.0));
                if key.1 {
                    c.table.layout = nf::Layout::PerNf;
                }
                e.insert(c.build(&base).with_context(|| spec.to_string())?);
            }
            let chain = &chains[&key];
            cfg.balancer = balancer_kind(name, &sec)?;
            if name == "sprayer" && chain.has_per_flow_state() {
                println!("{spec:<18} skipped: this chain keeps per-flow state (sprayer needs a stateless chain)");
                continue;
            }
            if let Err(e) = launch::run::roger_fits(name, chain, &sec, n) {
                println!("{spec:<18} skipped at {n} cores: {e}");
                continue;
            }
            let o = if offloads(name) { offloaders } else { 0 };
            if o >= n {
                bail!("{spec} at {n} cores: {o} offloading cores leave no working core");
            }
            cfg.offloaders = o;
            cfg.workers = n - o;
            cfg.offload_ratio = if o > 0 { ratio0 } else { 0.0 };
            let label = if cores.len() > 1 {
                format!("{spec} {n}c")
            } else {
                spec.to_string()
            };
            let r = match &model {
                Some(m) => {
                    preps
                        .entry(key)
                        .or_insert_with(|| prepare(chain, &trace, cfg.priority_dscp));
                    eprintln!("flowshift compare: simulating {label}…");
                    launch::sim::agree_residual(&mut cfg, &sec, m, &preps[&key])?;
                    simulate(&preps[&key], &trace, &cfg, m)
                        .with_context(|| label.clone())?
                        .report
                }
                None => {
                    eprintln!("flowshift compare: running {label}…");
                    runtime::run(chain, &trace, &cfg)
                        .with_context(|| label.clone())?
                        .report
                }
            };
            print_row(spec, n, &r);
            reports.push((label, r));
        }
    }
    write_outputs(&a, &reports)?;
    Ok(())
}

/// The table's header.
fn print_header() {
    println!(
        "{:<18} {:>5} {:>8} {:>9} {:>9} {:>8} {:>8} {:>8} {:>10} {:>10} {:>10} {:>7} {:>8} {:>7}",
        "balancer",
        "cores",
        "Mpps",
        "dropped",
        "reordered",
        "max/min",
        "imb med",
        "pkt med",
        "prio p99",
        "prio p99.5",
        "reg p99",
        "moves",
        "offload",
        "solver!"
    );
}

/// The table's legend, the reports as JSON, the plots.
fn write_outputs(a: &CompareArgs, reports: &[(String, RunReport)]) -> anyhow::Result<()> {
    println!(
        "(max/min: busiest over least busy core's load over the run; imb med: median over 10 ms windows of \
         (max − min) / min of the working cores' loads; pkt med: the same of the packets their queues delivered, \
         RSS++ Fig. 12's measure; latencies in µs; solver!: Dyssect rounds with no feasible plan \
         in time, which kept the previous plan)"
    );
    if let Some(p) = &a.run.json {
        let all: Vec<&RunReport> = reports.iter().map(|(_, r)| r).collect();
        launch::output::json(p, &all)?;
    }
    if !a.no_plots && !reports.is_empty() {
        let runs: Vec<Labeled<'_>> = reports
            .iter()
            .map(|(label, report)| Labeled {
                label: label.clone(),
                report,
            })
            .collect();
        let files = plots::write_all(&a.plots, &runs)?;
        eprintln!(
            "flowshift compare: wrote {} plots (PNG and SVG) to {}",
            files.len() / 2,
            a.plots.display()
        );
    }
    Ok(())
}

fn print_row(spec: &str, cores: usize, r: &RunReport) {
    let l = &r.latency_ns;
    let solver = r.controller.get("dyssect_kept").copied().unwrap_or(0.0);
    let us = |v: u64| v as f64 / 1e3;
    println!(
        "{:<18} {:>5} {:>8.3} {:>9} {:>9} {:>8.3} {:>7.1}% {:>7.1}% {:>10.1} {:>10.1} {:>10.1} {:>7} {:>8} {:>7}",
        spec,
        cores,
        r.throughput["mpps"],
        r.dropped(),
        r.reordered,
        r.imbalance["max_over_min"],
        100.0 * r.imbalance.get("period_median").copied().unwrap_or(0.0),
        100.0
            * r.imbalance
                .get("period_median_packets")
                .copied()
                .unwrap_or(0.0),
        us(l["priority"].p99),
        us(l["priority"].p995),
        us(l["regular"].p99),
        r.migrations["shard_moves"],
        r.migrations["offload_changes"],
        solver
    );
}
