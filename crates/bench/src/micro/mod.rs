//! `flowshift bench`: variants side by side in one run, on 64 B packets of many
//! flows. First the chain's own cost in memory on one thread ([`memory`]:
//! empty, firewall, NAT, firewall → NAT at 1 K / `--flows` / 1 M flows, beside a
//! plain C flow table's lookups), then the runtime's capacity: an empty chain vs
//! firewall → NAT at 1…N workers, and firewall → NAT with one offloading core
//! taking half of every shard's flows (r_s = 0.5). The empty chain shows what
//! the NIC model and the rings cost; the ratios show what the flow state and the
//! NFs cost, and what offloading buys.

mod baseline;
mod growth;
mod memory;
mod placement;
mod shared;

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
    /// Connections of the largest in-memory firewall → NAT variant (beside
    /// 1 000 and `--flows`).
    #[arg(long, default_value_t = 1_000_000)]
    pub large_flows: u32,
    /// Largest number of workers to try.
    #[arg(long, default_value_t = 2)]
    pub max_workers: usize,
    /// Write the results as JSON (`{"memory": [...], "runtime": [...]}`).
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Timed laps over the trace per in-memory variant (the fastest is kept).
    #[arg(long, default_value_t = 3)]
    pub laps: u32,
    /// Only the in-memory rows (no runtime runs).
    #[arg(long)]
    pub memory_only: bool,
    /// Rounds of the runtime rows: each round runs every row once, in
    /// turn, and each row reports its median rate (with the range) and the
    /// median of its per-round ratios to the empty chain — a busy host moves
    /// rates within minutes, a round's runs are seconds apart.
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Also count the instructions per packet of each in-memory variant with
    /// callgrind (valgrind; a minute or two per variant).
    #[arg(long)]
    pub instructions: bool,
    /// Run one in-memory variant (at `--flows`) for one timed lap and print
    /// its packet count: what `--instructions` runs under callgrind.
    #[arg(long, hide = true)]
    pub variant: Option<String>,
    /// Only compare the monitor's per-source counters shared by every core
    /// and updated on every packet (`strict`) with per-core counters merged
    /// every 10 ms (`mergeable`), at 1…`--max-workers` threads.
    #[arg(long)]
    pub shared_state: bool,
    /// Only sweep the IDS's matching inline against on its own core over
    /// invocation share × payload size (GranularNF Fig. 11), with the
    /// director's pick per cell (`--packets` per run, `--rounds`).
    #[arg(long)]
    pub placement: bool,
}

#[derive(serde::Serialize)]
struct Results {
    memory: Vec<memory::MemRow>,
    growth: Vec<growth::Growth>,
    nat_log: memory::LogCost,
    runtime: Vec<Row>,
}

#[derive(serde::Serialize)]
struct Row {
    chain: &'static str,
    /// `live`: the NIC-model thread parses and hashes every packet;
    /// `live/2`: two threads do, in turn (`run --nic-threads 2`), the
    /// NIC-model thread steers; `presteered`: that was done before the run
    /// (`run --presteer`).
    feeder: &'static str,
    /// `pool`: packet buffers go back from the cores to the NIC-model thread
    /// and are reused; `malloc`: one allocation per packet.
    buffers: &'static str,
    workers: usize,
    offloaders: usize,
    /// Times the trace was replayed (`run --loops`): after the first lap
    /// every flow has its entry (a closed TCP connection reopens it), so
    /// more laps weigh the established-flow path over flow creation.
    laps: u32,
    /// Rounds the row ran (`--rounds`); the rates are their median.
    rounds: usize,
    offered_mpps: f64,
    mpps: f64,
    mpps_min: f64,
    mpps_max: f64,
    mpps_per_worker: f64,
    /// Median over the rounds of the rate over the same round's empty chain
    /// with the same feeder.
    vs_empty: f64,
}

/// A runtime row to run: chain, offloading cores, feeder (0: live, 1:
/// presteered, 2: live with two parsing threads), buffer pool, laps.
struct Variant<'a> {
    name: &'static str,
    chain: &'a Chain,
    offloaders: usize,
    feeder: usize,
    recycle: bool,
    laps: u32,
}

/// The median of `x` (sorted in place); 0 for none.
pub(crate) fn median(x: &mut [f64]) -> f64 {
    x.sort_by(f64::total_cmp);
    x.get(x.len() / 2).copied().unwrap_or(0.0)
}

pub fn run(a: BenchArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        a.flows > 0 && a.large_flows > 0,
        "--flows and --large-flows must be at least 1"
    );
    if let Some(name) = &a.variant {
        let v = memory::variants(a.flows, a.large_flows)
            .into_iter()
            .find(|v| v.name == name.as_str() && v.flows == a.flows)
            .ok_or_else(|| anyhow::anyhow!("no in-memory variant {name}"))?;
        let mut chain = memory::chain(&v)?;
        let pkts = memory::packets(&chain, v.flows, a.packets)?;
        let m = memory::measure(&v, &pkts, &mut chain, a.laps)?;
        println!("packets {}", pkts.len());
        println!("rss_per_flow {:.1}", m.rss_per_flow);
        println!("fill_pause_us {:.0}", m.fill_pause_us);
        println!("ns_per_packet {:.2}", m.ns_per_packet);
        return Ok(());
    }
    if a.placement {
        let cells = placement::sweep(a.packets.min(1 << 22) as usize, a.rounds)?;
        if let Some(p) = &a.json {
            launch::output::json(p, &cells)?;
        }
        return Ok(());
    }
    if a.shared_state {
        let rows = shared::compare(a.flows, a.packets, a.laps, a.rounds, a.max_workers)?;
        if let Some(p) = &a.json {
            launch::output::json(p, &rows)?;
        }
        return Ok(());
    }
    let mem = in_memory(&a)?;
    let growth = growth::compare(
        &[a.flows, a.large_flows],
        a.packets,
        a.laps,
        a.rounds.max(3),
    )?;
    let nat_log = log_cost(&a)?;
    let rt = if a.memory_only {
        Vec::new()
    } else {
        in_runtime(&a)?
    };
    if let Some(p) = &a.json {
        launch::output::json(
            p,
            &Results {
                memory: mem,
                growth,
                nat_log,
                runtime: rt,
            },
        )?;
    }
    Ok(())
}

/// The in-memory rows, printed as they come.
fn in_memory(a: &BenchArgs) -> anyhow::Result<Vec<memory::MemRow>> {
    println!(
        "in memory, one thread, bursts of 32, established flows, 64 B (fastest of {} laps of {} packets):",
        a.laps.max(1),
        a.packets
    );
    println!(
        "{:<16} {:>9} {:>10} {:>9} {:>10} {:>13} {:>8} {:>8} {:>8} {:>12}",
        "chain",
        "flows",
        "ns/packet",
        "Mpps",
        "vs empty",
        "instr/packet",
        "L1 miss",
        "LL miss",
        "B/flow",
        "fill pause"
    );
    let mut rows: Vec<memory::MemRow> = Vec::new();
    let mut empty = 0.0;
    let instr_packets = a.packets.min(200_000);
    for v in memory::variants(a.flows, a.large_flows) {
        let mut chain = memory::chain(&v)?;
        let pkts = memory::packets(&chain, v.flows, a.packets)?;
        let m = memory::measure(&v, &pkts, &mut chain, a.laps)?;
        drop(chain);
        // resident bytes per flow, in a process of its own
        let per_flow = if v.name.starts_with("fw+nat") {
            Some(memory::rss_per_flow(&v, a.packets)?)
        } else {
            None
        };
        let instr = if a.instructions {
            Some(memory::instructions(&v, instr_packets)?)
        } else {
            None
        };
        let n = pkts.len() as u64;
        let mut push = |chain: String,
                        ns: f64,
                        counted: Option<memory::Counted>,
                        filled: Option<&memory::Measured>| {
            let r = memory::MemRow {
                chain,
                flows: v.flows,
                packets: n,
                ns_per_packet: ns,
                mpps: 1_000.0 / ns.max(1e-9),
                counted,
                bytes_per_flow: filled.and(per_flow),
                fill_pause_us: filled.map(|m| m.fill_pause_us),
                fill_burst_us: filled.map(|m| m.fill_burst_us),
                index_grown: filled.map(|m| m.index_grown),
            };
            if r.chain == "empty" {
                empty = r.mpps;
            }
            let c = |f: fn(&memory::Counted) -> f64, digits: usize| {
                r.counted
                    .as_ref()
                    .map_or("-".to_string(), |x| format!("{:.*}", digits, f(x)))
            };
            let opt = |x: Option<f64>, d: usize| x.map_or("-".to_string(), |x| format!("{x:.d$}"));
            println!(
                "{:<16} {:>9} {:>10.1} {:>9.2} {:>10.2} {:>13} {:>8} {:>8} {:>8} {:>12}",
                r.chain,
                r.flows,
                r.ns_per_packet,
                r.mpps,
                r.mpps / empty.max(1e-9),
                c(|x| x.instructions, 0),
                c(|x| x.l1_misses, 2),
                c(|x| x.ll_misses, 2),
                opt(r.bytes_per_flow, 0),
                r.fill_pause_us
                    .map_or("-".to_string(), |p| format!("{p:.0} µs")),
            );
            rows.push(r);
        };
        push(v.name.to_string(), m.ns_per_packet, instr, Some(&m));
        if v.name == "fw+nat" {
            // the machine's limit for the one flow lookup each packet needs
            let tuples: Vec<_> = pkts.iter().map(|p| (p.info.tuple, p.hash)).collect();
            drop(pkts);
            push(
                "c-table".into(),
                baseline::lookup_ns(&tuples, a.laps, false)?,
                None,
                None,
            );
            push(
                "c-table/burst32".into(),
                baseline::lookup_ns(&tuples, a.laps, true)?,
                None,
                None,
            );
        }
    }
    println!(
        "(c-table: a plain open-addressing table in C, one lookup per packet of the same trace and nothing else;\n \
         B/flow: resident bytes per live flow after the first lap, in a process of its own; fill pause: the longest \
         burst of 32 of the first lap, which creates the flows and grows the tables — /prealloc: indexes at capacity from the start)"
    );
    Ok(rows)
}

/// What logging the NAT's events costs the packet path
/// ([`memory::log_cost`]), printed.
fn log_cost(a: &BenchArgs) -> anyhow::Result<memory::LogCost> {
    let c = memory::log_cost(a.flows, a.packets, a.laps, a.rounds.max(3))?;
    println!(
        "NAT event log (`run --nat-log`: queued per core, written as JSON lines by a thread beside the chain), \
         fw+nat at {} flows, rate with the log / without, median of {} rounds side by side: \
         first lap (every mapping created and logged) {:.3}, established laps {:.3}, expiry (every mapping \
         deleted and logged) {:.3}; {} records a round, {} lost",
        c.flows,
        a.rounds.max(3),
        c.first_lap,
        c.established,
        c.expiry,
        c.records,
        c.lost
    );
    Ok(c)
}

/// The runtime rows, printed as they come.
fn in_runtime(a: &BenchArgs) -> anyhow::Result<Vec<Row>> {
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
    // the same chain as the papers' baselines run it: each NF its own lookup
    let mut per_nf_cfg = fw_nat_cfg.clone();
    per_nf_cfg.table.layout = nf::Layout::PerNf;
    let per_nf = per_nf_cfg.build(Path::new("."))?;
    let mut rows: Vec<Row> = Vec::new();
    let rounds = a.rounds.max(1);
    let v = |name, chain, offloaders, feeder, recycle, laps| Variant {
        name,
        chain,
        offloaders,
        feeder,
        recycle,
        laps,
    };
    let variants = [
        v("empty", &empty, 0, 0, true, 1),
        v("empty", &empty, 0, 1, true, 1),
        v("empty", &empty, 0, 2, true, 1),
        v("fw+nat", &fw_nat, 0, 0, true, 1),
        v("fw+nat", &fw_nat, 0, 0, false, 1),
        v("fw+nat", &fw_nat, 0, 1, true, 1),
        v("fw+nat", &fw_nat, 0, 1, false, 1),
        v("fw+nat", &fw_nat, 0, 1, true, 4),
        v("fw+nat", &fw_nat, 0, 2, true, 1),
        v("fw+nat", &fw_nat, 1, 1, true, 1),
        v("fw+nat/per-nf", &per_nf, 0, 0, true, 1),
        v("fw+nat/per-nf", &per_nf, 0, 1, true, 1),
    ];
    println!(
        "\nthe runtime: a NIC-model thread feeding working cores through rings \
         (median of {rounds} rounds, each running every row in turn):"
    );
    println!(
        "{:<14} {:>10} {:>7} {:>4} {:>7} {:>10} {:>13} {:>10} {:>15} {:>13} {:>9}",
        "chain",
        "feeder",
        "buffers",
        "laps",
        "workers",
        "offloaders",
        "offered Mpps",
        "Mpps",
        "Mpps range",
        "Mpps/worker",
        "vs empty"
    );
    for w in 1..=a.max_workers.max(1) {
        // per variant, per round: (Mpps, offered Mpps)
        let mut got = vec![Vec::with_capacity(rounds); variants.len()];
        for round in 0..rounds {
            eprintln!(
                "flowshift bench: {w} worker(s), round {} of {rounds}…",
                round + 1
            );
            for (x, out) in variants.iter().zip(got.iter_mut()) {
                out.push(runtime_once(x, w, &trace)?);
            }
        }
        for (x, runs) in variants.iter().zip(&got) {
            let row = row_of(x, runs, &variants, &got, w, rounds);
            rows.push(row);
        }
    }
    println!(
        "(one feeder thread plays the NIC: when \"offered\" ≈ \"Mpps\" for the empty chain, the feeder is the limit; \
         \"presteered\" rows had every packet parsed and hashed before the run, \"live/2\" rows two threads parsing in turn \
         for the NIC-model thread, \"vs empty\" is the median of each round's rate over that round's empty chain \
         with the same feeder, \"laps\" > 1 replays the trace so that most packets find their flow; \
         this machine has {} cores for feeder, workers and controller)",
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
    );
    Ok(rows)
}

/// Variant `x`'s row at `w` workers from its rounds (`runs`: Mpps, offered
/// Mpps), its ratio to the same round's empty chain with the same feeder;
/// printed.
fn row_of(
    x: &Variant<'_>,
    runs: &[(f64, f64)],
    variants: &[Variant<'_>],
    got: &[Vec<(f64, f64)>],
    w: usize,
    rounds: usize,
) -> Row {
    // the same round's empty chain with this feeder
    let base = variants
        .iter()
        .position(|b| b.name == "empty" && b.feeder == x.feeder)
        .map(|b| &got[b]);
    let mut mpps: Vec<f64> = runs.iter().map(|r| r.0).collect();
    let mut offered: Vec<f64> = runs.iter().map(|r| r.1).collect();
    let mut ratios: Vec<f64> = match base {
        Some(b) => runs
            .iter()
            .zip(b)
            .map(|(r, e)| if e.0 > 0.0 { r.0 / e.0 } else { 0.0 })
            .collect(),
        None => Vec::new(),
    };
    let (lo, hi) = mpps
        .iter()
        .fold((f64::INFINITY, 0.0f64), |(l, h), &m| (l.min(m), h.max(m)));
    let m = median(&mut mpps);
    let row = Row {
        chain: x.name,
        feeder: ["live", "presteered", "live/2"][x.feeder],
        buffers: if x.recycle { "pool" } else { "malloc" },
        workers: w,
        offloaders: x.offloaders,
        laps: x.laps,
        rounds,
        offered_mpps: median(&mut offered),
        mpps: m,
        mpps_min: lo,
        mpps_max: hi,
        mpps_per_worker: m / w as f64,
        vs_empty: median(&mut ratios),
    };
    println!(
        "{:<14} {:>10} {:>7} {:>4} {:>7} {:>10} {:>13.3} {:>10.3} {:>15} {:>13.3} {:>9.2}",
        row.chain,
        row.feeder,
        row.buffers,
        row.laps,
        row.workers,
        row.offloaders,
        row.offered_mpps,
        row.mpps,
        format!("{lo:.2}–{hi:.2}"),
        row.mpps_per_worker,
        row.vs_empty
    );
    row
}

/// One run of variant `x` on `workers` workers: (Mpps, offered Mpps).
fn runtime_once(x: &Variant<'_>, workers: usize, trace: &Trace) -> anyhow::Result<(f64, f64)> {
    let cfg = RunConfig {
        workers,
        offloaders: x.offloaders,
        offload_ratio: if x.offloaders > 0 { 0.5 } else { 0.0 },
        balancer: BalancerKind::Static,
        presteer: x.feeder == 1,
        nic_threads: if x.feeder == 2 { 2 } else { 1 },
        recycle: x.recycle,
        loops: x.laps,
        ..RunConfig::default()
    };
    let out = runtime::run(x.chain, trace, &cfg)?;
    let r = &out.report;
    anyhow::ensure!(
        r.packets_in == r.packets_out + r.dropped() && r.reordered == 0,
        "counts do not balance or packets were reordered"
    );
    Ok((r.throughput["mpps"], r.throughput["offered_mpps"]))
}
