//! `flowshift bench`: the runtime's capacity, variants side by side in one run —
//! an empty chain vs firewall → NAT, at 1…N workers, and firewall → NAT with one
//! offloading core taking half of every shard's flows (r_s = 0.5), on 64 B packets
//! of many flows. The empty chain shows what the NIC model and the rings cost; the
//! ratios show what the flow state and the NFs cost, and what offloading buys.

use std::path::{Path, PathBuf};

use clap::Args;
use nf::{Chain, ChainConfig, ChainOptions};
use runtime::{BalancerKind, RunConfig};
use trace::{Generator, SizeDist, Trace, TraceSpec};

/// Options of `flowshift bench`.
#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Connections in the generated trace.
    #[arg(long, default_value_t = 100_000)]
    pub flows: u32,
    /// Packets in the generated trace (64 B each).
    #[arg(long, default_value_t = 2_000_000)]
    pub packets: u64,
    /// Largest number of workers to try.
    #[arg(long, default_value_t = 2)]
    pub max_workers: usize,
    /// Write the results as JSON.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

#[derive(serde::Serialize)]
struct Row {
    chain: &'static str,
    workers: usize,
    offloaders: usize,
    offered_mpps: f64,
    mpps: f64,
    mpps_per_worker: f64,
    vs_empty: f64,
}

pub fn run(a: BenchArgs) -> anyhow::Result<()> {
    let spec = TraceSpec {
        flows: a.flows,
        packets: a.packets,
        active_flows: a.flows,
        sizes: SizeDist::Fixed(64),
        ..TraceSpec::default()
    };
    eprintln!(
        "flowshift bench: generating {} packets of {} flows (64 B)…",
        a.packets, a.flows
    );
    let trace = Trace::from_generated(Generator::new(&spec)?);
    let empty = Chain::new(Vec::new(), ChainOptions::default())?;
    let fw_nat_cfg = ChainConfig::from_toml(
        "[table]\ncapacity = 65536\n[[nf]]\nkind = \"firewall\"\nrules = \"allow any 10.0.0.0/8 -> any\"\n\
         [[nf]]\nkind = \"nat\"\ninternal = \"10.0.0.0/8\"\nexternal = [\"203.0.113.0/24\"]\n",
    )?;
    let fw_nat = fw_nat_cfg.build(Path::new("."))?;
    let mut rows: Vec<Row> = Vec::new();
    println!(
        "{:<10} {:>7} {:>10} {:>13} {:>10} {:>13} {:>9}",
        "chain", "workers", "offloaders", "offered Mpps", "Mpps", "Mpps/worker", "vs empty"
    );
    for w in 1..=a.max_workers.max(1) {
        let mut base = 0.0;
        for (name, chain, offloaders) in [
            ("empty", &empty, 0),
            ("fw+nat", &fw_nat, 0),
            ("fw+nat", &fw_nat, 1),
        ] {
            let cfg = RunConfig {
                workers: w,
                offloaders,
                offload_ratio: if offloaders > 0 { 0.5 } else { 0.0 },
                balancer: BalancerKind::Static,
                ..RunConfig::default()
            };
            let out = runtime::run(chain, &trace, &cfg)?;
            let r = &out.report;
            anyhow::ensure!(
                r.packets_in == r.packets_out + r.dropped() && r.reordered == 0,
                "counts do not balance or packets were reordered"
            );
            let mpps = r.throughput["mpps"];
            if name == "empty" {
                base = mpps;
            }
            let row = Row {
                chain: name,
                workers: w,
                offloaders,
                offered_mpps: r.throughput["offered_mpps"],
                mpps,
                mpps_per_worker: mpps / w as f64,
                vs_empty: if base > 0.0 { mpps / base } else { 0.0 },
            };
            println!(
                "{:<10} {:>7} {:>10} {:>13.3} {:>10.3} {:>13.3} {:>9.2}",
                row.chain,
                row.workers,
                row.offloaders,
                row.offered_mpps,
                row.mpps,
                row.mpps_per_worker,
                row.vs_empty
            );
            rows.push(row);
        }
    }
    println!(
        "(one feeder thread plays the NIC: when \"offered\" ≈ \"Mpps\" for the empty chain, the feeder is the limit; \
         this machine has {} cores for feeder, workers and controller)",
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
    );
    if let Some(p) = &a.json {
        crate::output::json(p, &rows)?;
    }
    Ok(())
}
