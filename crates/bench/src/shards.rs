//! `flowshift bench-shards`: Dyssect's Fig. 1 as an experiment — one core
//! runs a chain (a NAT, as the paper's) over a Zipf trace of many flows in
//! bursts of 32, in memory on this thread, once per number of shards, and
//! the throughput is set against one shard's.
//!
//! Each shard keeps its own flow table, sized for its share of the flows
//! (twice the flows over the shards, at least 1 024 entries), so every
//! variant holds the same flows in about the same memory and only how they
//! are split differs. Each round runs every shard count once, in turn; a
//! row reports its median rate over the rounds and the median of its
//! per-round ratios to one shard (a busy host moves rates within minutes, a
//! round's runs are seconds apart). The paper also plots instructions per
//! cycle and cache misses; this VM's `perf` has no hardware counters, so
//! only the throughput is measured.

use std::path::PathBuf;

use anyhow::{bail, Context};
use clap::Args;
use nf::ChainConfig;
use serde::Serialize;
use trace::{Generator, Trace, TraceSpec};

use crate::micro::median;

/// Options of `flowshift bench-shards`.
#[derive(Args, Debug)]
pub struct BenchShardsArgs {
    /// Connections in the generated trace (the paper: one million).
    #[arg(long, default_value_t = 1_000_000)]
    pub flows: u32,
    /// Packets in the generated trace (64 B UDP).
    #[arg(long, default_value_t = 2_000_000)]
    pub packets: u64,
    /// Zipf exponent of the flows' sizes (the paper: 1.1, as its CAIDA trace).
    #[arg(long, default_value_t = 1.1)]
    pub alpha: f64,
    /// Shard counts to run (powers of two).
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8,16,32,64,128")]
    pub shards: Vec<usize>,
    /// Chain configuration (TOML, as `run --config` takes it; its `[steering]
    /// shards`, `buckets` and `[table] capacity` are set by each row); without
    /// it, a NAT alone.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Rounds: each runs every shard count once.
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Timed laps over the trace per run (the fastest is kept), after a first
    /// lap that creates the flows.
    #[arg(long, default_value_t = 2)]
    pub laps: u32,
    /// Write the rows as JSON.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// One shard count's result.
#[derive(Debug, Serialize)]
struct Row {
    shards: usize,
    /// Entries each shard's table holds.
    capacity_per_shard: usize,
    /// Median over the rounds, Mpps.
    mpps: f64,
    /// Slowest and fastest round, Mpps.
    range: (f64, f64),
    /// Median of the per-round ratios to one shard (the first row).
    vs_first: f64,
}

/// The chain NAT alone: the paper's single NF.
const NAT: &str = r#"
[[nf]]
kind = "nat"
internal = "10.0.0.0/8"
external = ["203.0.113.0/24"]
"#;

pub fn run(a: BenchShardsArgs) -> anyhow::Result<()> {
    if a.flows == 0 || a.packets == 0 || a.rounds == 0 || a.laps == 0 {
        bail!("--flows, --packets, --rounds and --laps must be at least 1");
    }
    if a.shards.is_empty() || a.shards.iter().any(|s| !s.is_power_of_two()) {
        bail!("--shards takes powers of two, e.g. 1,2,4,8");
    }
    let (cfg, base) = match &a.config {
        Some(p) => ChainConfig::from_file(p)?,
        None => (ChainConfig::from_toml(NAT)?, PathBuf::from(".")),
    };
    let spec = TraceSpec {
        flows: a.flows,
        packets: a.packets,
        alpha: a.alpha,
        active_flows: a.flows,
        // UDP: one packet can be a flow (TCP flows need their handshake)
        tcp_share: 0.0,
        sizes: trace::SizeDist::Fixed(64),
        ..TraceSpec::default()
    };
    eprintln!(
        "flowshift bench-shards: generating {} packets of {} flows (Zipf α {})…",
        a.packets, a.flows, a.alpha
    );
    let t = Trace::from_generated(Generator::new(&spec)?);
    let capacity = |s: usize| (2 * a.flows as usize / s).next_power_of_two().max(1024);
    let configs: Vec<ChainConfig> = a
        .shards
        .iter()
        .map(|&s| {
            let mut c = cfg.clone();
            c.steering.shards = Some(s);
            c.steering.buckets = Some(c.steering.buckets().max(s));
            c.table.capacity = Some(capacity(s));
            c
        })
        .collect();
    // every variant is accepted before the first is timed
    for (c, s) in configs.iter().zip(&a.shards) {
        c.build(&base)
            .with_context(|| format!("the chain with {s} shards"))?;
    }
    let mut mpps = vec![Vec::new(); configs.len()];
    for r in 0..a.rounds {
        for (i, c) in configs.iter().enumerate() {
            eprintln!(
                "flowshift bench-shards: round {} of {}, {} shard(s)…",
                r + 1,
                a.rounds,
                a.shards[i]
            );
            // a fresh chain per run: its tables start empty
            let mut chain = c.build(&base)?;
            let ns = crate::calibrate::in_memory_ns(&mut chain, &t, a.laps);
            mpps[i].push(1e3 / ns);
        }
    }
    let rows: Vec<Row> = a
        .shards
        .iter()
        .enumerate()
        .map(|(i, &s)| {
            let mut ratios: Vec<f64> = (0..a.rounds).map(|r| mpps[i][r] / mpps[0][r]).collect();
            let mut rates = mpps[i].clone();
            let mpps = median(&mut rates);
            Row {
                shards: s,
                capacity_per_shard: capacity(s),
                mpps,
                // sorted by the median
                range: (rates[0], rates[rates.len() - 1]),
                vs_first: median(&mut ratios),
            }
        })
        .collect();
    print(&a, &rows);
    if let Some(p) = &a.json {
        launch::output::json(p, &rows)?;
    }
    Ok(())
}

fn print(a: &BenchShardsArgs, rows: &[Row]) {
    println!(
        "Dyssect Fig. 1: one core, {} over {} flows (Zipf α {}), bursts of 32, in memory; medians of {} round(s)",
        if a.config.is_some() { "the chain" } else { "a NAT" },
        a.flows,
        a.alpha,
        a.rounds
    );
    println!(
        "{:>7} {:>16} {:>9} {:>19} {:>12}",
        "shards", "entries/shard", "Mpps", "range", "vs 1st row"
    );
    for r in rows {
        println!(
            "{:>7} {:>16} {:>9.2} {:>8.2} … {:>8.2} {:>11.1}%",
            r.shards,
            r.capacity_per_shard,
            r.mpps,
            r.range.0,
            r.range.1,
            100.0 * r.vs_first
        );
    }
}
