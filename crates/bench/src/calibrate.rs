//! `flowshift calibrate`: measure the simulator's cost model on the real runtime,
//! on this machine, and write it as a model file.
//!
//! Every measurement is one worker replaying a generated trace as fast as it takes
//! packets; the cost of a packet is the worker's busy time over the packets it ran
//! (the fastest of three runs: noise only adds time). Traces have one packet per flow and are looped, so
//! the share of packets that create their flow is known exactly (1 / loops) and
//! its cost can be taken out:
//!
//! Base prices are measured on the workload (`--input`, or the trace `flowshift
//! run` generates by default), so they carry its packet sizes and protocols:
//!
//! - `nic_ns`: the NIC model's rate while it feeds a worker with an empty chain
//!   (the worker outpaces it), i.e. copy, parse, hash, steer and hand over;
//! - `nf_ns[kind]`: the full chain against the chain without that NF (chains
//!   with one NF: the chain against the empty chain), both run in memory on
//!   this thread in bursts of 32 over the workload's established-flow laps (a
//!   first lap creates the flows), interleaved, fastest lap of several rounds,
//!   and more rounds (up to three times as many) while noise leaves the chain
//!   without an NF no faster than the chain with it — a difference of a few ns
//!   is lost in the noise of two threaded runs; `overhead_ns`: the full chain in the runtime minus every
//!   NF's share — on this runtime mostly taking the packet over from the NIC
//!   model's core;
//! - `new_flow_ns`: the full chain on 128 K flows played once (every packet new)
//!   against the same flows played four times;
//! - `per_nf_ns`: the full chain in the per-NF layout against the shared one,
//!   in memory as the NF prices, per NF that looks its flow up itself;
//! - `flows`: the full chain against the number of flows (1 K … 256 K), relative
//!   to the smallest, with the new-flow share taken out;
//! - `shards`: the full chain against the number of shards (1 … 64) on 16 K flows,
//!   relative to one shard;
//! - `offload_ns`: one working and one offloading core with every flow offloaded:
//!   the offloading core's cost per packet above the chain's;
//! - `warm_ns_per_entry`: a lookup of a flow entry that is not in cache against
//!   one that is (1 M entries touched once in a scrambled order vs 1 K cycled): a
//!   moved entry starts cold on its new core. `message_ns` is kept from the
//!   bundled model.
//!
//! Both curves are made non-decreasing (a running maximum): on a noisy machine a
//! larger working set can measure a little cheaper, and the simulator should not
//! reward it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context};
use clap::Args;
use nf::{Chain, ChainConfig};
use runtime::{BalancerKind, RunConfig};
use sim::{Caches, CostModel, Curve};
use trace::{Generator, Trace, TraceSpec};

/// Options of `flowshift calibrate`.
#[derive(Args, Debug)]
pub struct CalibrateArgs {
    /// Configuration (TOML, as `run --config` takes it) whose chain's NFs to
    /// price; without it, the default chain (firewall → NAT → sequence check).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Where to write the model.
    #[arg(long, default_value = "out/cost-model.toml")]
    pub out: PathBuf,
    /// Fewer and shorter runs (a rough model in a few seconds).
    #[arg(long)]
    pub quick: bool,
    /// The workload whose packets set the base prices (sizes, protocols, flow
    /// mix): a pcap; without it, the trace `flowshift run` generates by default.
    #[arg(long)]
    pub input: Option<PathBuf>,
}

/// Per-packet busy time of one worker (ns) and the rate achieved (Mpps).
struct Sample {
    ns: f64,
    mpps: f64,
    offered_mpps: f64,
    offload_ns: Option<f64>,
}

fn flows_trace(flows: u32) -> anyhow::Result<Trace> {
    let spec = TraceSpec {
        flows,
        packets: u64::from(flows),
        alpha: 0.0,
        tcp_share: 0.0,
        active_flows: flows,
        sizes: trace::SizeDist::Fixed(64),
        ..TraceSpec::default()
    };
    Ok(Trace::from_generated(Generator::new(&spec)?))
}

struct Bench {
    packets: u64,
    repeat: usize,
}

impl Bench {
    fn measure(
        &self,
        chain: &Chain,
        trace: &Trace,
        loops: u32,
        offload: bool,
    ) -> anyhow::Result<Sample> {
        let mut runs = Vec::new();
        for _ in 0..self.repeat {
            let cfg = RunConfig {
                workers: 1,
                offloaders: usize::from(offload),
                offload_ratio: if offload { 1.0 } else { 0.0 },
                loops,
                balancer: BalancerKind::Static,
                period: Duration::from_millis(100),
                ..RunConfig::default()
            };
            let r = runtime::run(chain, trace, &cfg)?.report;
            let secs = r.throughput["seconds"];
            let per = |i: usize| {
                let c = &r.per_core[i];
                c.load * secs * 1e9 / c.packets.max(1) as f64
            };
            let off = offload.then(|| per(1));
            runs.push(Sample {
                ns: per(0),
                mpps: r.throughput["mpps"],
                offered_mpps: r.throughput["offered_mpps"],
                offload_ns: off,
            });
        }
        // noise (other tenants, interrupts) only adds time: keep the fastest run
        runs.sort_by(|a, b| a.ns.total_cmp(&b.ns));
        Ok(runs.swap_remove(0))
    }

    fn loops(&self, flows: u32) -> u32 {
        (self.packets / u64::from(flows)).clamp(1, 10_000) as u32
    }
}

/// Bytes of a workload capture calibration reads (its prices are per packet:
/// a longer capture's first packets price it; memory stays bounded).
const WORKLOAD_BYTES: usize = 256 << 20;

/// The first [`WORKLOAD_BYTES`] of frames of the capture at `p`, said so
/// when the capture has more.
fn workload(p: &std::path::Path) -> anyhow::Result<Trace> {
    let mut r = trace::CaptureReader::open(p)?;
    let mut t = Trace::new();
    r.fill(&mut t, WORKLOAD_BYTES)?;
    let mut more = Trace::new();
    if r.fill(&mut more, 1)? > 0 {
        eprintln!(
            "flowshift calibrate: {}: pricing its first {} packets ({} MiB of frames); the rest is not read",
            p.display(),
            t.len(),
            WORKLOAD_BYTES >> 20
        );
    }
    anyhow::ensure!(!t.is_empty(), "{}: the capture has no packet", p.display());
    Ok(t)
}

/// The NIC model's work per packet, ns: copy the frame, parse, hash, steer (what
/// the runtime's feeder does per packet besides pushing it), on this thread.
fn nic_cost(chain: &Chain, trace: &Trace, packets: u64) -> f64 {
    let table =
        steer::IndirectionTable::new(chain.buckets(), 1).expect("the chain's size is valid");
    let mut sink = 0u64;
    let n = packets.max(trace.len() as u64);
    let t = std::time::Instant::now();
    for k in 0..n {
        let i = (k % trace.len() as u64) as usize;
        if let Ok(p) = chain.packet(trace.frame(i).to_vec(), k) {
            sink = sink.wrapping_add(u64::from(table.queue_of(p.hash)));
            std::hint::black_box(&p);
        }
    }
    std::hint::black_box(sink);
    t.elapsed().as_nanos() as f64 / n as f64
}

/// The chain's cost per packet of established flows in memory, ns: the
/// workload's packets (parsed beforehand) in bursts of 32 through a fresh
/// chain, a first lap creating the flows (priced apart, as `new_flow_ns`) and
/// then `laps` more with time moving on, on this thread; the fastest of those
/// (the least disturbed by the rest of the machine).
pub(crate) fn in_memory_ns(chain: &mut Chain, trace: &Trace, laps: u32) -> f64 {
    if trace.is_empty() {
        return 0.0;
    }
    let span = trace.ts_ns(trace.len() - 1).saturating_sub(trace.ts_ns(0)) + 1_000;
    let lap: Vec<nf::Packet> = trace
        .iter()
        .filter_map(|(ts, f)| chain.packet(f.to_vec(), ts).ok())
        .collect();
    let mut shards: Vec<Option<nf::Shard>> = chain.new_shards().into_iter().map(Some).collect();
    let mut out = Vec::new();
    let mut best = f64::MAX;
    for l in 0..=u64::from(laps.max(1)) {
        let mut pkts = lap.clone();
        let t = std::time::Instant::now();
        for chunk in pkts.chunks_mut(32) {
            let now = chunk[0].ts_ns + l * span;
            chain.process_burst(&mut shards, chunk, now, &mut out);
        }
        let ns = t.elapsed().as_nanos() as f64 / pkts.len().max(1) as f64;
        if l > 0 {
            best = best.min(ns);
        }
        std::hint::black_box(&out);
    }
    best
}

/// What touching a flow entry that is not in cache costs over one that is, ns:
/// lookups of 1 M entries each once in a scrambled order against lookups that
/// cycle over 1 K entries, in one flow table with the chain's slots. A shard or a
/// leased flow arriving at another core starts that cold.
fn cold_entry_cost(slots: usize) -> f64 {
    use state::{FlowKey, FlowTable, TableConfig};
    let n: u32 = 1 << 20;
    let cfg = TableConfig {
        capacity: n as usize,
        slots: slots.max(1),
        ..Default::default()
    };
    let mut table: FlowTable<Option<[u64; 4]>> = FlowTable::new(cfg);
    let reqs: Vec<_> = (0..n)
        .map(|i| {
            let tu = wire::FiveTuple {
                src: std::net::IpAddr::V4(std::net::Ipv4Addr::from(0x0a00_0000 | i)),
                dst: std::net::IpAddr::V4(std::net::Ipv4Addr::new(198, 18, 0, 1)),
                src_port: 1024 + (i % 60_000) as u16,
                dst_port: 443,
                proto: 6,
            };
            let (k, side) = FlowKey::of(&tu);
            (k, side, i.wrapping_mul(2_654_435_761))
        })
        .collect();
    for (k, side, h) in &reqs {
        // a full table is not expected at this size; a refused insert is skipped
        let _ = table.insert(*k, *side, *h, |_, _, _| {});
    }
    let time = |order: &mut dyn Iterator<Item = usize>, table: &mut FlowTable<Option<[u64; 4]>>| {
        let t = std::time::Instant::now();
        let (mut found, mut count) = (0usize, 0usize);
        for i in order {
            let (k, side, h) = &reqs[i];
            found += usize::from(table.lookup(k, *side, *h).is_some());
            count += 1;
        }
        std::hint::black_box(found);
        t.elapsed().as_nanos() as f64 / count.max(1) as f64
    };
    let cold = time(
        &mut (0..n as usize).map(|i| (i * 7_919) % n as usize),
        &mut table,
    );
    let warm = time(&mut (0..n as usize).map(|i| (i * 7_919) % 1024), &mut table);
    (cold - warm).max(0.0)
}

fn with_nfs(cfg: &ChainConfig, nf: Vec<nf::config::NfSection>) -> ChainConfig {
    ChainConfig { nf, ..cfg.clone() }
}

fn build(cfg: &ChainConfig, base: &Path) -> anyhow::Result<Chain> {
    Ok(cfg.build(base)?)
}

fn cache_bytes(level: u32) -> u64 {
    for i in 0..8 {
        let d = format!("/sys/devices/system/cpu/cpu0/cache/index{i}");
        let read = |f: &str| std::fs::read_to_string(format!("{d}/{f}")).unwrap_or_default();
        if read("level").trim() != level.to_string() || read("type").trim() == "Instruction" {
            continue;
        }
        let s = read("size");
        let s = s.trim();
        let (num, mul) = match s.strip_suffix('K') {
            Some(n) => (n, 1024),
            None => match s.strip_suffix('M') {
                Some(n) => (n, 1024 * 1024),
                None => (s, 1),
            },
        };
        if let Ok(n) = num.parse::<u64>() {
            return n * mul;
        }
    }
    0
}

fn monotone(points: Vec<(f64, f64)>) -> Curve {
    let mut m = 0.0f64;
    Curve(
        points
            .into_iter()
            .map(|(x, y)| {
                m = m.max(y);
                (x, m)
            })
            .collect(),
    )
}

fn say(what: &str, s: &Sample) {
    eprintln!(
        "flowshift calibrate: {what:<34} {:7.1} ns/packet  ({:.2} Mpps)",
        s.ns, s.mpps
    );
}

/// What every measurement of a calibration shares: the bench's size, the
/// chain on one shard and as the user gave it, where its paths resolve.
struct Calibration<'a> {
    bench: Bench,
    cfg: ChainConfig,
    user_cfg: ChainConfig,
    base: &'a Path,
    quick: bool,
}

impl Calibration<'_> {
    /// Each NF kind's price in memory: the chain with it against the chain
    /// without it, interleaved, fastest of several rounds each (more rounds
    /// only while noise hides an NF); and the chain's own in-memory cost.
    fn nf_prices(&self, work: &Trace) -> anyhow::Result<(f64, BTreeMap<String, f64>)> {
        let (cfg, base) = (&self.cfg, self.base);
        let laps = (self.bench.packets / work.len().max(1) as u64).clamp(3, 20) as u32;
        let mut chains = vec![("chain".to_string(), cfg.clone())];
        for (i, sec) in cfg.nf.iter().enumerate() {
            let mut rest = cfg.nf.clone();
            rest.remove(i);
            let kind = build(&with_nfs(cfg, vec![sec.clone()]), base)?.nfs()[0]
                .kind()
                .to_string();
            chains.push((kind, with_nfs(cfg, rest)));
        }
        let mut best = vec![f64::MAX; chains.len()];
        let rounds = self.bench.repeat + 2;
        for round in 0..3 * rounds {
            // after the planned rounds, more only while noise hides an NF (the
            // chain without it no faster than the chain with it)
            let hidden: Vec<bool> = (0..chains.len())
                .map(|i| i > 0 && best[0] <= best[i])
                .collect();
            if round >= rounds && !hidden.contains(&true) {
                break;
            }
            for (i, (_, c)) in chains.iter().enumerate() {
                if round >= rounds && i > 0 && !hidden[i] {
                    continue;
                }
                let mut chain = if c.nf.is_empty() {
                    Chain::new(Vec::new(), nf::ChainOptions::default())?
                } else {
                    build(c, base)?
                };
                best[i] = best[i].min(in_memory_ns(&mut chain, work, laps));
            }
        }
        eprintln!(
            "flowshift calibrate: {:<34} {:7.1} ns/packet (in memory, one thread)",
            "chain, workload", best[0]
        );
        let mut nf_ns = BTreeMap::new();
        for (i, (kind, _)) in chains.iter().enumerate().skip(1) {
            eprintln!(
                "flowshift calibrate: {:<34} {:7.1} ns/packet (in memory, one thread)",
                format!("chain without {kind}"),
                best[i]
            );
            *nf_ns.entry(kind.clone()).or_insert(0.0) += (best[0] - best[i]).max(0.0);
        }
        Ok((best[0], nf_ns))
    }

    /// The per-NF layout's extra cost per packet and NF that looks its flow
    /// up itself: the chain in that layout against the shared one, in memory
    /// on this thread over the workload's established-flow laps, interleaved,
    /// fastest lap of the rounds. 0 for a chain with no such NF.
    fn per_nf_ns(&self, work: &Trace) -> anyhow::Result<f64> {
        let (cfg, base) = (&self.cfg, self.base);
        let mut per_nf = cfg.clone();
        per_nf.table.layout = nf::Layout::PerNf;
        let own = build(&per_nf, base)?.own_lookups();
        if own == 0 {
            return Ok(0.0);
        }
        let laps = (self.bench.packets / work.len().max(1) as u64).clamp(3, 20) as u32;
        let mut best = [f64::MAX; 2];
        for _ in 0..self.bench.repeat + 2 {
            for (i, c) in [cfg, &per_nf].into_iter().enumerate() {
                let mut chain = build(c, base)?;
                best[i] = best[i].min(in_memory_ns(&mut chain, work, laps));
            }
        }
        let ns = (best[1] - best[0]).max(0.0) / own as f64;
        eprintln!(
            "flowshift calibrate: {:<34} {:7.1} ns/packet ({:.1} shared, {:.1} per-NF, {own} own lookups)",
            "per-NF layout, per own lookup", ns, best[0], best[1]
        );
        Ok(ns)
    }

    /// A new flow's extra cost: many new flows once against the same flows
    /// four times.
    fn new_flow_ns(&self) -> anyhow::Result<f64> {
        let f_new = if self.quick { 32_768 } else { 131_072 };
        let t_new = flows_trace(f_new)?;
        let mut c = self.cfg.clone();
        c.table.capacity = Some(c.table.capacity().max(2 * f_new as usize));
        let big = build(&c, self.base)?;
        let once = self.bench.measure(&big, &t_new, 1, false)?;
        say(&format!("chain, {} K new flows", f_new / 1024), &once);
        let four = self.bench.measure(&big, &t_new, 4, false)?;
        say(&format!("chain, {} K flows × 4", f_new / 1024), &four);
        Ok(((once.ns - four.ns) * 4.0 / 3.0).max(0.0))
    }

    /// The extra cost per packet against the working set (flows), beyond
    /// the smallest's.
    fn flows_curve(&self, t_small: &Trace, new_flow_ns: f64) -> anyhow::Result<Curve> {
        let sizes: &[u32] = if self.quick {
            &[1024, 16_384]
        } else {
            &[1024, 4096, 16_384, 65_536, 262_144]
        };
        let mut pts = Vec::new();
        let mut base_cost = None;
        for &f in sizes {
            let t = if f == SMALL {
                t_small.clone()
            } else {
                flows_trace(f)?
            };
            let loops = self.bench.loops(f).max(2);
            // room for every flow in the one shard
            let mut c = self.cfg.clone();
            c.table.capacity = Some(c.table.capacity().max(2 * f as usize));
            let ch = build(&c, self.base)?;
            let s = self.bench.measure(&ch, &t, loops, false)?;
            say(&format!("chain, {} K flows", f / 1024), &s);
            let cost = s.ns - new_flow_ns / f64::from(loops);
            let b = *base_cost.get_or_insert(cost);
            pts.push((f64::from(f), (cost - b).max(0.0)));
        }
        Ok(monotone(pts))
    }

    /// The extra cost per packet against the shards per core, beyond one's.
    fn shards_curve(&self) -> anyhow::Result<Curve> {
        let shard_counts: &[usize] = if self.quick {
            &[1, 16]
        } else {
            &[1, 4, 16, 64]
        };
        let f_sh = 16_384;
        let t_sh = flows_trace(f_sh)?;
        let mut pts = Vec::new();
        let mut one_shard = None;
        for &s_n in shard_counts {
            let mut c = self.user_cfg.clone();
            c.steering.shards = Some(s_n);
            c.steering.buckets = Some(c.steering.buckets().max(s_n));
            let ch = build(&c, self.base)?;
            let s = self
                .bench
                .measure(&ch, &t_sh, self.bench.loops(f_sh).max(2), false)?;
            say(&format!("chain, {s_n} shards, 16 K flows"), &s);
            let b = *one_shard.get_or_insert(s.ns);
            pts.push((s_n as f64, (s.ns - b).max(0.0)));
        }
        Ok(monotone(pts))
    }

    /// What a packet costs the offloading core beyond the working core's
    /// price for it.
    fn offload_ns(
        &self,
        full: &Chain,
        work: &Trace,
        l_work: u32,
        whole_ns: f64,
    ) -> anyhow::Result<f64> {
        let s = self.bench.measure(full, work, l_work, true)?;
        // three threads (NIC model, working and offloading core) share the CPUs:
        // with fewer CPUs, take the time sharing out
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
        let share = (cpus / 3.0).min(1.0);
        let off = s.offload_ns.unwrap_or(whole_ns) * share;
        eprintln!(
            "flowshift calibrate: {:<34} {off:7.1} ns/packet on the offloading core",
            "chain offloaded, workload"
        );
        Ok((off - whole_ns).max(0.0))
    }
}

/// Flows of the small working set (the base of the flows curve).
const SMALL: u32 = 1024;

/// The machine line of a model measured here.
fn machine(a: &CalibrateArgs) -> String {
    format!(
        "measured by `flowshift calibrate{}` on {} ({} CPUs){}",
        if a.quick { " --quick" } else { "" },
        std::fs::read_to_string("/etc/hostname")
            .unwrap_or_default()
            .trim(),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        a.config
            .as_ref()
            .map(|p| format!(", chain {}", p.display()))
            .unwrap_or_default()
    )
}

pub fn run(a: CalibrateArgs) -> anyhow::Result<()> {
    // where the model goes is checked before minutes of measuring
    if let Some(dir) = a.out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    launch::output::check(&a.out)?;
    // the same file `run` takes: its `[run]` table (if any) does not change prices
    let (user_cfg, _, base) = launch::run::load(a.config.as_deref())?;
    // prices are per packet on one shard (the shard term is measured on its own)
    let mut cfg = user_cfg.clone();
    cfg.steering.shards = Some(1);
    let full = build(&cfg, &base)?;
    if !full.has_per_flow_state() {
        bail!("calibrate needs a chain with per-flow state (its flow and shard terms are about flow tables)");
    }
    let bench = if a.quick {
        Bench {
            packets: 300_000,
            repeat: 2,
        }
    } else {
        Bench {
            packets: 1_000_000,
            repeat: 3,
        }
    };
    let cal = Calibration {
        bench,
        cfg,
        user_cfg,
        base: &base,
        quick: a.quick,
    };
    let bench = &cal.bench;
    let t_small = flows_trace(SMALL)?;
    let l_small = bench.loops(SMALL);
    // first touches of memory, thread start-up: not part of any price
    for _ in 0..2 {
        let _ = bench.measure(&full, &t_small, l_small, false)?;
    }

    // the workload: base prices are per packet of it
    let work = match &a.input {
        Some(p) => workload(p)?,
        None => Trace::from_generated(Generator::new(&TraceSpec::default())?),
    };
    let l_work = bench.loops(work.len().min(u32::MAX as usize) as u32);
    // the NIC model's rate while it feeds a worker that outpaces it (an empty
    // chain): copying, parsing and hashing, and handing packets to another core
    let empty = Chain::new(Vec::new(), nf::ChainOptions::default())?;
    let e = bench.measure(&empty, &work, l_work, false)?;
    let nic_ns = 1e3 / e.offered_mpps.max(1e-3);
    eprintln!(
        "flowshift calibrate: {:<34} {nic_ns:7.1} ns/packet (NIC model, {:.2} Mpps offered)",
        "empty chain, workload", e.offered_mpps
    );
    let isolated = nic_cost(&full, &work, bench.packets);
    eprintln!(
        "flowshift calibrate: {:<34} {isolated:7.1} ns/packet (for reference: parse, hash, steer on one thread)",
        "NIC model alone"
    );

    let whole = bench.measure(&full, &work, l_work, false)?;
    say("chain, workload", &whole);
    let (_, nf_ns) = cal.nf_prices(&work)?;
    let overhead = (whole.ns - nf_ns.values().sum::<f64>()).max(0.0);
    let new_flow_ns = cal.new_flow_ns()?;
    let per_nf_ns = cal.per_nf_ns(&work)?;
    let flows = cal.flows_curve(&t_small, new_flow_ns)?;
    let shards = cal.shards_curve()?;
    let offload_ns = cal.offload_ns(&full, &work, l_work, whole.ns)?;

    let warm = cold_entry_cost(full.nfs().len());
    eprintln!(
        "flowshift calibrate: {:<34} {warm:7.1} ns per entry (cold flow-table entry over a warm one)",
        "migration warm-up"
    );
    let bundled = CostModel::default();
    let per_flow_nfs = full
        .nfs()
        .iter()
        .filter(|n| n.state_kind() == nf::StateKind::PerFlow)
        .count() as u64;
    let model = CostModel {
        machine: machine(&a),
        caches: Caches {
            l1: cache_bytes(1),
            l2: cache_bytes(2),
            llc: cache_bytes(3),
        },
        entry_bytes: 64 * (1 + per_flow_nfs),
        nic_ns,
        overhead_ns: overhead,
        nf_ns,
        new_flow_ns,
        per_nf_ns,
        warm_ns_per_entry: warm,
        flows,
        shards,
        offload_ns,
        message_ns: bundled.message_ns,
        cpus: 0,
    };
    // a model that does not load is a bug here, not the user's
    let text = model.to_toml();
    CostModel::from_toml(&text).context("the measured model does not check")?;
    launch::output::atomically(&a.out, |t| Ok(std::fs::write(t, &text)?))?;
    print!("{text}");
    eprintln!(
        "flowshift calibrate: wrote {} (use it with `flowshift sim --model {}`)",
        a.out.display(),
        a.out.display()
    );
    Ok(())
}
