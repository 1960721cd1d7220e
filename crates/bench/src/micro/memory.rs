//! `flowshift bench`'s in-memory rows: the chain's own cost on one thread,
//! with the NIC model's work done at load time (every packet parsed, hashed
//! and in its buffer before the clock starts, as a NIC's DMA and RSS would
//! leave it), in bursts of 32 as a working core polls its queue. A first lap
//! creates every flow; the timed laps are the established-flow path. Beside
//! them, the C baseline's flow lookups over the same packets.

use std::path::Path;
use std::time::{Duration, Instant};

use nf::{Chain, ChainConfig, Packet, Shard, Verdict};
use trace::{Generator, SizeDist, TraceSpec};

/// One in-memory variant: a chain (TOML `[[nf]]` tables) at a number of flows.
#[derive(Clone, Copy, Debug)]
pub struct Variant {
    /// Its name in the table and in `--variant`.
    pub name: &'static str,
    /// The chain's `[[nf]]` tables.
    pub nfs: &'static str,
    /// Connections in its trace.
    pub flows: u32,
    /// Its tables' indexes allocated for their capacity at once (`[table]
    /// preallocate`), as they were before they grew with the flows.
    pub preallocate: bool,
    /// `[table] layout`: `shared` (one lookup a packet) or `per-nf` (each NF
    /// after the first looks the packet up in an index of its own).
    pub layout: &'static str,
    /// The NAT's mapping events logged (`run --nat-log`): queued per core
    /// and written as JSON lines by a thread beside the chain.
    pub log: bool,
}

const FW: &str = "[[nf]]\nkind = \"firewall\"\nrules = \"allow any 10.0.0.0/8 -> any\"\n";
const NAT: &str =
    "[[nf]]\nkind = \"nat\"\ninternal = \"10.0.0.0/8\"\nexternal = [\"203.0.113.0/24\"]\n";
const FW_NAT: &str = concat!(
    "[[nf]]\nkind = \"firewall\"\nrules = \"allow any 10.0.0.0/8 -> any\"\n",
    "[[nf]]\nkind = \"nat\"\ninternal = \"10.0.0.0/8\"\nexternal = [\"203.0.113.0/24\"]\n"
);

/// The variants at `flows` connections: the empty chain, the firewall and the
/// NAT alone, and firewall → NAT at 1 K, `flows` and `large` connections.
pub fn variants(flows: u32, large: u32) -> Vec<Variant> {
    let mut v = vec![
        Variant {
            name: "empty",
            nfs: "",
            flows,
            preallocate: false,
            layout: "shared",
            log: false,
        },
        Variant {
            name: "firewall",
            nfs: FW,
            flows,
            preallocate: false,
            layout: "shared",
            log: false,
        },
        Variant {
            name: "nat",
            nfs: NAT,
            flows,
            preallocate: false,
            layout: "shared",
            log: false,
        },
    ];
    let mut sizes = vec![1_000, flows, large];
    sizes.sort_unstable();
    sizes.dedup();
    for flows in sizes {
        v.push(Variant {
            name: "fw+nat",
            nfs: FW_NAT,
            flows,
            preallocate: false,
            layout: "shared",
            log: false,
        });
        // each NF finding its own flow, as the papers' baselines do
        v.push(Variant {
            name: "fw+nat/per-nf",
            nfs: FW_NAT,
            flows,
            preallocate: false,
            layout: "per-nf",
            log: false,
        });
        // the same chain with indexes at their capacity from the start
        v.push(Variant {
            name: "fw+nat/prealloc",
            nfs: FW_NAT,
            flows,
            preallocate: true,
            layout: "shared",
            log: false,
        });
    }
    v
}

/// A measured variant.
#[derive(Debug, serde::Serialize)]
pub struct MemRow {
    /// The chain (`empty`, `firewall`, `nat`, `fw+nat`) or the baseline
    /// (`c-table`, `c-table/burst32`: lookups only).
    pub chain: String,
    /// Connections in the trace.
    pub flows: u32,
    /// Packets per lap.
    pub packets: u64,
    /// ns per packet, fastest timed lap.
    pub ns_per_packet: f64,
    /// Million packets per second on this one thread (1 000 / ns).
    pub mpps: f64,
    /// Per packet, counted by callgrind with its cache simulation (with
    /// `--instructions`).
    pub counted: Option<Counted>,
    /// Resident bytes per live flow after the first lap (a process of its
    /// own: `flowshift bench --variant`).
    pub bytes_per_flow: Option<f64>,
    /// The first lap's longest burst of 32, µs (flows created, tables grown).
    pub fill_pause_us: Option<f64>,
    /// The first lap's median burst of 32, µs.
    pub fill_burst_us: Option<f64>,
    /// Index doublings over every shard during the first lap.
    pub index_grown: Option<u64>,
}

/// Packets of `flows` connections (at least 6 per connection), 64 B each,
/// parsed and hashed by `chain`.
pub fn packets(chain: &Chain, flows: u32, packets: u64) -> anyhow::Result<Vec<Packet>> {
    let spec = TraceSpec {
        flows,
        // (every TCP connection needs 6 packets: handshake, data, teardown)
        packets: packets.max(6 * u64::from(flows)),
        active_flows: flows,
        sizes: SizeDist::Fixed(64),
        ..TraceSpec::default()
    };
    Generator::new(&spec)?
        .map(|p| {
            chain
                .packet(p.frame, p.ts_ns)
                .map_err(|(_, m)| anyhow::anyhow!("a generated frame is malformed: {m}"))
        })
        .collect()
}

/// The chain of a variant, its tables sized for its flows (16 shards, at most
/// half full).
pub fn chain(v: &Variant) -> anyhow::Result<Chain> {
    if v.nfs.is_empty() {
        return Ok(Chain::new(Vec::new(), nf::ChainOptions::default())?);
    }
    let capacity = (2 * v.flows as usize / 16).next_power_of_two().max(1024);
    let toml = format!(
        "[table]\ncapacity = {capacity}\npreallocate = {}\nlayout = \"{}\"\n{}",
        v.preallocate, v.layout, v.nfs
    );
    Ok(ChainConfig::from_toml(&toml)?.build(Path::new("."))?)
}

/// Puts `work` back to `pristine` without allocating (the NAT rewrote headers).
fn restore(work: &mut [Packet], pristine: &[Packet]) {
    for (w, p) in work.iter_mut().zip(pristine) {
        w.data.clear();
        w.data.extend_from_slice(&p.data);
        w.info = p.info;
        w.entry = None;
        w.dir = p.dir;
    }
}

/// The first lap, which creates the flows (not counted by `--instructions`),
/// each burst timed.
#[inline(never)]
fn first_lap(
    chain: &mut Chain,
    shards: &mut [Option<Shard>],
    work: &mut [Packet],
    out: &mut Vec<Verdict>,
) -> Vec<Duration> {
    let mut took = Vec::with_capacity(work.len() / 32 + 1);
    for burst in work.chunks_mut(32) {
        let now = burst[0].ts_ns;
        let t = Instant::now();
        chain.process_burst(shards, burst, now, out);
        took.push(t.elapsed());
    }
    took
}

/// A timed lap. Not inlined: `--instructions` counts exactly this function's
/// instructions.
#[inline(never)]
fn measured_lap(
    chain: &mut Chain,
    shards: &mut [Option<Shard>],
    work: &mut [Packet],
    offset_ns: u64,
    out: &mut Vec<Verdict>,
) {
    lap(chain, shards, work, offset_ns, out)
}

/// One lap through the chain in bursts of 32, time shifted by `offset_ns`
/// (the verdicts are the chain's counters' to count, outside the lap).
#[inline(always)]
fn lap(
    chain: &mut Chain,
    shards: &mut [Option<Shard>],
    work: &mut [Packet],
    offset_ns: u64,
    out: &mut Vec<Verdict>,
) {
    for burst in work.chunks_mut(32) {
        let now = burst[0].ts_ns + offset_ns;
        chain.process_burst(shards, burst, now, out);
    }
}

/// What [`measure`] found.
#[derive(Clone, Copy, Debug, Default)]
pub struct Measured {
    /// ns per packet, fastest timed lap.
    pub ns_per_packet: f64,
    /// The longest burst of the first lap (which creates the flows and grows
    /// the tables), µs: the packet path's longest pause.
    pub fill_pause_us: f64,
    /// The median burst of the first lap, µs.
    pub fill_burst_us: f64,
    /// Index doublings over every shard.
    pub index_grown: u64,
    /// Live flows after the first lap.
    pub flows: u64,
    /// This process's resident memory growth over the first lap, per live
    /// flow (the tables and the NFs' state; meaningful in a process of its
    /// own: `--variant`).
    pub rss_per_flow: f64,
    /// The first lap, ns per packet.
    pub first_lap_ns_per_packet: f64,
    /// Expiring every flow after the laps, ns per flow.
    pub expire_ns_per_flow: f64,
    /// With the NAT's events logged: (records written, lost to a full queue).
    pub logged: Option<(u64, u64)>,
}

/// A variant's fastest lap of `laps` (after a first lap that creates the
/// flows), ns per packet. Every packet must be forwarded: the bench measures
/// the path a packet takes through the whole chain.
pub fn measure(
    v: &Variant,
    pristine: &[Packet],
    chain: &mut Chain,
    laps: u32,
) -> anyhow::Result<Measured> {
    let mut work = pristine.to_vec();
    let rss0 = launch::memcap::process_bytes("VmRSS").unwrap_or(0);
    let mut shards: Vec<Option<Shard>> = chain.new_shards().into_iter().map(Some).collect();
    let mut m = Measured::default();
    let span = pristine
        .last()
        .map_or(0, |p| p.ts_ns.saturating_sub(pristine[0].ts_ns))
        + 1_000;
    let mut out = Vec::with_capacity(32);
    let mut best = Duration::MAX;
    let logger = v.log.then(|| {
        let hub = std::sync::Arc::new(nf::nat::EventHub::new(launch::natlog::QUEUE));
        chain.log_events(&hub);
        launch::natlog::json_to(std::io::sink(), hub)
    });
    for lap in 0..=u64::from(laps.max(1)) {
        restore(&mut work, pristine);
        let before = chain.counters().forwarded;
        let start = Instant::now();
        if lap == 0 {
            let bursts = first_lap(chain, &mut shards, &mut work, &mut out);
            let us = |d: Duration| d.as_nanos() as f64 / 1e3;
            m.fill_pause_us = us(bursts.iter().copied().max().unwrap_or_default());
            let mut b = bursts;
            b.sort_unstable();
            m.fill_burst_us = us(b.get(b.len() / 2).copied().unwrap_or_default());
            let tables = shards.iter().flatten().map(|s| &s.table);
            m.flows = tables.clone().map(|t| t.len() as u64).sum();
            m.index_grown = tables.map(|t| t.stats().index_grown).sum();
            let rss = launch::memcap::process_bytes("VmRSS").unwrap_or(0);
            m.rss_per_flow = rss.saturating_sub(rss0) as f64 / m.flows.max(1) as f64;
        } else {
            measured_lap(chain, &mut shards, &mut work, lap * span, &mut out);
        }
        let took = start.elapsed();
        let forwarded = chain.counters().forwarded - before;
        anyhow::ensure!(
            forwarded == work.len() as u64,
            "{}: {} of {} packets forwarded (counters: {:?})",
            v.name,
            forwarded,
            work.len(),
            chain.counters()
        );
        if lap > 0 {
            best = best.min(took);
        } else {
            m.first_lap_ns_per_packet = took.as_nanos() as f64 / work.len().max(1) as f64;
        }
    }
    m.ns_per_packet = best.as_nanos() as f64 / pristine.len().max(1) as f64;
    // every flow expires (past the longest timeout): every mapping deleted
    let last = pristine.last().map_or(0, |p| p.ts_ns);
    let end = last + (u64::from(laps.max(1)) + 2) * span + 4 * 3_600_000_000_000;
    let start = Instant::now();
    for s in shards.iter_mut().flatten() {
        chain.expire(s, end);
    }
    m.expire_ns_per_flow = start.elapsed().as_nanos() as f64 / m.flows.max(1) as f64;
    if let Some(l) = logger {
        let w = l.finish();
        let lost = chain
            .nfs()
            .iter()
            .flat_map(|n| n.counters())
            .filter(|(k, _)| *k == "log_lost")
            .map(|(_, v)| v)
            .sum();
        m.logged = Some((w.records, lost));
    }
    Ok(m)
}

/// The arguments of a child `flowshift bench --variant` running `v` alone.
fn variant_args(v: &Variant, packets: u64) -> Vec<String> {
    let flows = v.flows.to_string();
    [
        "bench",
        "--variant",
        v.name,
        "--flows",
        &flows,
        "--large-flows",
        &flows,
        "--packets",
        &packets.to_string(),
    ]
    .map(String::from)
    .to_vec()
}

/// What a child `flowshift bench --variant` measured.
#[derive(Clone, Copy, Debug, Default)]
pub struct InChild {
    /// Resident bytes per live flow after the first lap.
    pub rss_per_flow: f64,
    /// ns a packet, fastest of the laps after the first.
    pub ns_per_packet: f64,
}

/// Runs variant `v` in a child `flowshift bench --variant` (a fresh
/// process: no memory freed by another variant to reuse, no heap another
/// variant shaped) with `laps` timed laps after the one that makes the flows.
pub fn in_child(v: &Variant, packets: u64, laps: u32) -> anyhow::Result<InChild> {
    let out = std::process::Command::new(std::env::current_exe()?)
        .args(variant_args(v, packets))
        .args(["--laps", &laps.to_string()])
        .output()?;
    anyhow::ensure!(
        out.status.success(),
        "flowshift bench --variant {}: {}",
        v.name,
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse::<f64>().ok())
            .ok_or_else(|| {
                anyhow::anyhow!("flowshift bench --variant {} printed no {name}", v.name)
            })
    };
    Ok(InChild {
        rss_per_flow: field("rss_per_flow ")?,
        ns_per_packet: field("ns_per_packet ")?,
    })
}

/// Resident bytes per live flow of variant `v` after its first lap
/// ([`in_child`]).
pub fn rss_per_flow(v: &Variant, packets: u64) -> anyhow::Result<f64> {
    Ok(in_child(v, packets, 1)?.rss_per_flow)
}

/// What callgrind counts per packet of a lap.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct Counted {
    /// Instructions.
    pub instructions: f64,
    /// First-level data cache misses (reads and writes).
    pub l1_misses: f64,
    /// Last-level cache misses (data reads and writes): trips to memory.
    pub ll_misses: f64,
}

/// Instructions and simulated cache misses per packet of one variant's
/// established-flow lap, counted by callgrind (`--cache-sim=yes`, the
/// machine's cache sizes) in a child `flowshift bench --variant`: one lap,
/// the flows made in an uncounted lap before it.
pub fn instructions(v: &Variant, packets: u64) -> anyhow::Result<Counted> {
    let exe = std::env::current_exe()?;
    let out = std::process::Command::new("valgrind")
        .args([
            "--tool=callgrind",
            "--cache-sim=yes",
            "--callgrind-out-file=/dev/null",
            "--toggle-collect=*measured_lap*",
        ])
        .arg(&exe)
        .args(variant_args(v, packets))
        .output()
        .map_err(|e| {
            anyhow::anyhow!("--instructions needs valgrind (apt install valgrind): {e}")
        })?;
    let err = String::from_utf8_lossy(&out.stderr);
    anyhow::ensure!(out.status.success(), "callgrind run of {}: {err}", v.name);
    // "Collected : Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw"
    let events: Vec<f64> = err
        .lines()
        .find_map(|l| l.split_once("Collected :").map(|(_, n)| n.to_string()))
        .map(|n| {
            n.split_whitespace()
                .filter_map(|x| x.replace(',', "").parse().ok())
                .collect()
        })
        .unwrap_or_default();
    anyhow::ensure!(
        !events.is_empty(),
        "no instruction count in callgrind's output: {err}"
    );
    // (callgrind leaves trailing zero counts out)
    let mut events = events;
    events.resize(9, 0.0);
    // the child prints the packets of its lap
    let n = String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| {
            l.strip_prefix("packets ")
                .and_then(|n| n.trim().parse::<u64>().ok())
        })
        .ok_or_else(|| anyhow::anyhow!("the callgrind run of {} printed no packet count", v.name))?
        .max(1) as f64;
    Ok(Counted {
        instructions: events[0] / n,
        l1_misses: (events[4] + events[5]) / n,
        ll_misses: (events[7] + events[8]) / n,
    })
}

/// What logging the NAT's events costs the packet path, as rates with the
/// log over rates without (medians over `rounds` rounds, each measuring
/// firewall → NAT without and with the log in turn, on the same packets):
/// the lap that creates every flow, the established laps, and the expiry
/// that deletes every mapping. With the records written and lost.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct LogCost {
    /// Connections.
    pub flows: u32,
    /// Rate ratio on the first lap (every mapping created and logged).
    pub first_lap: f64,
    /// Rate ratio on the established laps (nothing logged).
    pub established: f64,
    /// Rate ratio of the expiry (every mapping deleted and logged).
    pub expiry: f64,
    /// Records the logger wrote in the last round.
    pub records: u64,
    /// Records lost to a full queue, over every round.
    pub lost: u64,
}

/// Measures [`LogCost`] at `flows` connections.
pub fn log_cost(flows: u32, count: u64, laps: u32, rounds: usize) -> anyhow::Result<LogCost> {
    let off = Variant {
        name: "fw+nat",
        nfs: FW_NAT,
        flows,
        preallocate: false,
        layout: "shared",
        log: false,
    };
    let on = Variant {
        name: "fw+nat/log",
        log: true,
        ..off
    };
    let pkts = packets(&chain(&off)?, flows, count)?;
    let mut ratios: [Vec<f64>; 3] = Default::default();
    let mut cost = LogCost {
        flows,
        ..LogCost::default()
    };
    for _ in 0..rounds.max(1) {
        let a = measure(&off, &pkts, &mut chain(&off)?, laps)?;
        let b = measure(&on, &pkts, &mut chain(&on)?, laps)?;
        ratios[0].push(a.first_lap_ns_per_packet / b.first_lap_ns_per_packet);
        ratios[1].push(a.ns_per_packet / b.ns_per_packet);
        ratios[2].push(a.expire_ns_per_flow / b.expire_ns_per_flow);
        let (records, lost) = b.logged.unwrap_or_default();
        cost.records = records;
        cost.lost += lost;
    }
    let [f, e, x] = &mut ratios;
    cost.first_lap = super::median(f);
    cost.established = super::median(e);
    cost.expiry = super::median(x);
    Ok(cost)
}
