//! Per-packet shared updates against the delayed merge (GranularNF §4,
//! Fig. 8 left): `threads` threads at once, each with its own instance of one
//! chain over its share of the packets — the monitor's per-source counters,
//! and the UPF's usage counts (URRs) on GTP-U traffic of many UEs or one.
//! `strict` instances count every packet in counters they all share (an
//! atomic add each); `mergeable` (`merged`) ones count in their own and merge
//! every core's every [`MERGE_NS`] of wall time, as the runtime does; a
//! mergeable monitor with no threshold (the default) has nothing to merge,
//! its row the merge's cost. Rounds alternate the modes; rates are medians.

use std::sync::{Barrier, Mutex};
use std::time::{Duration, Instant};

use nf::{Chain, ChainConfig, Packet, Shard};

/// How often a `mergeable` thread merges (the runtime's period).
const MERGE_NS: u64 = 10_000_000;

/// One mode at one thread count on one traffic.
#[derive(Clone, Debug, serde::Serialize)]
pub struct SharedRow {
    /// The NF: `monitor` or `upf`.
    pub nf: &'static str,
    /// `many sources` (the generated flows' own) or `one source` (every
    /// packet counted on one source: every update on one shared line).
    pub traffic: String,
    /// `strict`, or `mergeable` (the monitor's name) / `merged` (the UPF's).
    pub mode: &'static str,
    /// Threads at once.
    pub threads: usize,
    /// Mpps over all threads, per round.
    pub mpps: Vec<f64>,
}

fn chain(nf: &str, mode: &str, ues: u32) -> anyhow::Result<Chain> {
    let toml = match nf {
        "upf" => format!(
            "[[nf]]\nkind = \"upf\"\nn3 = \"{}\"\naccounting = \"{mode}\"\n[nf.ues]\ncount = {ues}\n",
            wire::gtpu::UeRange::N3
        ),
        // no threshold: nothing reads the merged view, so nothing is merged
        _ if mode == "no threshold" => "[[nf]]\nkind = \"monitor\"\n".to_string(),
        _ => format!(
            "[[nf]]\nkind = \"monitor\"\nstate = \"{mode}\"\nthreshold_packets = 1000000000000\n"
        ),
    };
    Ok(ChainConfig::from_toml(&toml)?.build(std::path::Path::new("."))?)
}

/// `packets` as the UPF of `ues` UEs sees them (GTP-U uplink, plain
/// downlink), parsed and hashed by `chain`.
fn tunnelled(chain: &Chain, packets: &[Packet], ues: u32) -> anyhow::Result<Vec<Packet>> {
    let r = wire::gtpu::UeRange::new(ues);
    packets
        .iter()
        .map(|p| {
            chain
                .packet(trace::gtp::tunnel(&r, p.data.clone()), p.ts_ns)
                .map_err(|(_, m)| anyhow::anyhow!("a tunnelled frame is malformed: {m}"))
        })
        .collect()
}

/// `to` made the packet `from` again (its buffer kept): the UPF rewrites
/// frames, so each lap starts from the originals.
fn restore(to: &mut Packet, from: &Packet) {
    to.data.clear();
    to.data.extend_from_slice(&from.data);
    to.info = from.info;
    to.hash = from.hash;
    to.entry = None;
}

/// `laps` laps of `pkts`, split over `threads` threads, through instances of
/// `chain` (each burst restored from `pkts` first when the chain rewrites
/// frames); Mpps of the slowest thread's wall time.
fn one(
    chain: &Chain,
    pkts: &[Packet],
    threads: usize,
    laps: u32,
    rewrites: bool,
) -> anyhow::Result<f64> {
    let per = pkts.len() / threads;
    let barrier = Barrier::new(threads);
    let board: Mutex<Vec<Vec<Option<nf::Shared>>>> = Mutex::new(vec![Vec::new(); threads]);
    let took = std::thread::scope(|s| {
        let hands: Vec<_> = (0..threads)
            .map(|t| {
                let (barrier, board) = (&barrier, &board);
                let mine = &pkts[t * per..(t + 1) * per];
                let mut c = chain.instance();
                s.spawn(move || {
                    let mut shards: Vec<Option<Shard>> =
                        c.new_shards().into_iter().map(Some).collect();
                    let mut work = mine.to_vec();
                    let mut out = Vec::with_capacity(32);
                    barrier.wait();
                    let start = Instant::now();
                    let mut next_merge = MERGE_NS;
                    for lap in 0..u64::from(laps) {
                        for (i, burst) in work.chunks_mut(32).enumerate() {
                            if rewrites {
                                for (w, m) in burst.iter_mut().zip(&mine[i * 32..]) {
                                    restore(w, m);
                                }
                            }
                            let now = burst[0].ts_ns + lap * 1_000_000_000;
                            c.process_burst(&mut shards, burst, now, &mut out);
                            if i % 64 == 0 && start.elapsed().as_nanos() as u64 >= next_merge {
                                next_merge += MERGE_NS;
                                let mine = c.share();
                                let all = {
                                    let mut b = board.lock().unwrap_or_else(|p| p.into_inner());
                                    b[t] = mine;
                                    b.clone()
                                };
                                c.merge_shared(&all);
                            }
                        }
                    }
                    (start.elapsed(), c.counters().forwarded)
                })
            })
            .collect();
        hands
            .into_iter()
            .map(|h| h.join().expect("a bench thread panicked"))
            .collect::<Vec<(Duration, u64)>>()
    });
    let forwarded: u64 = took.iter().map(|t| t.1).sum();
    let expected = (per * threads) as u64 * u64::from(laps);
    anyhow::ensure!(
        forwarded == expected,
        "{forwarded} of {expected} packets forwarded"
    );
    let wall = took.iter().map(|t| t.0).max().unwrap_or_default();
    Ok(expected as f64 / wall.as_secs_f64() / 1e6)
}

/// Both modes of the monitor and of the UPF at 1…`max_threads` threads,
/// `rounds` rounds, printed as they come.
pub fn compare(
    flows: u32,
    packets: u64,
    laps: u32,
    rounds: usize,
    max_threads: usize,
) -> anyhow::Result<Vec<SharedRow>> {
    let ues = (flows / 10).max(1);
    let monitor = [
        chain("monitor", "mergeable", 0)?,
        chain("monitor", "strict", 0)?,
        chain("monitor", "no threshold", 0)?,
    ];
    let upf = [
        chain("upf", "merged", ues)?,
        chain("upf", "strict", ues)?,
        chain("upf", "merged", 1)?,
        chain("upf", "strict", 1)?,
    ];
    let many = super::memory::packets(&monitor[0], flows, packets)?;
    let mut one_source = many.clone();
    for p in &mut one_source {
        p.info.tuple.src = core::net::IpAddr::from([10, 0, 0, 1]);
    }
    let many_ues = tunnelled(&upf[0], &many, ues)?;
    let one_ue = tunnelled(&upf[2], &many, 1)?;
    let many_name = format!("{ues} UEs");
    // (nf, traffic, mode, chain, packets)
    let cases: Vec<(&str, &str, &str, &Chain, &[Packet])> = vec![
        ("monitor", "many sources", "mergeable", &monitor[0], &many),
        ("monitor", "many sources", "strict", &monitor[1], &many),
        (
            "monitor",
            "many sources",
            "no threshold",
            &monitor[2],
            &many,
        ),
        (
            "monitor",
            "one source",
            "mergeable",
            &monitor[0],
            &one_source,
        ),
        ("monitor", "one source", "strict", &monitor[1], &one_source),
        ("upf", &many_name, "merged", &upf[0], &many_ues),
        ("upf", &many_name, "strict", &upf[1], &many_ues),
        ("upf", "one UE", "merged", &upf[2], &one_ue),
        ("upf", "one UE", "strict", &upf[3], &one_ue),
    ];
    let mut rows: Vec<SharedRow> = Vec::new();
    for &(nf, traffic, mode, ..) in &cases {
        for threads in 1..=max_threads.max(1) {
            rows.push(SharedRow {
                nf,
                traffic: traffic.to_string(),
                mode,
                threads,
                mpps: Vec::new(),
            });
        }
    }
    for _ in 0..rounds.max(1) {
        for r in rows.iter_mut() {
            let &(nf, _, _, c, pkts) = cases
                .iter()
                .find(|k| k.0 == r.nf && k.1 == r.traffic && k.2 == r.mode)
                .expect("a row of a case");
            r.mpps
                .push(one(c, pkts, r.threads, laps.max(1), nf == "upf")?);
        }
    }
    print_rows(&rows, many.len(), flows, laps, rounds);
    Ok(rows)
}

fn print_rows(rows: &[SharedRow], packets: usize, flows: u32, laps: u32, rounds: usize) {
    println!(
        "shared state: the monitor's per-source counters, the UPF's usage counts; {packets} packets \
         of {flows} flows, {} laps, medians of {} rounds:",
        laps.max(1),
        rounds.max(1)
    );
    println!(
        "{:<8} {:<13} {:<12} {:>7} {:>9} {:>14}",
        "nf", "traffic", "mode", "threads", "Mpps", "÷ merged"
    );
    let med = |r: &SharedRow| super::median(&mut r.mpps.clone());
    for r in rows {
        let ratio = if r.mode == "strict" || r.mode == "no threshold" {
            rows.iter()
                .find(|o| {
                    o.nf == r.nf
                        && (o.mode == "mergeable" || o.mode == "merged")
                        && o.threads == r.threads
                        && o.traffic == r.traffic
                })
                .map_or(String::new(), |o| format!("{:.3}", med(r) / med(o)))
        } else {
            String::new()
        };
        println!(
            "{:<8} {:<13} {:<12} {:>7} {:>9.2} {:>14}",
            r.nf,
            r.traffic,
            r.mode,
            r.threads,
            med(r),
            ratio
        );
    }
}
