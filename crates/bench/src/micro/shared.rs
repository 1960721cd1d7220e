//! Per-packet shared updates against the delayed merge (GranularNF §4,
//! Fig. 8 left, with the monitor's per-source counters for the UPF's usage
//! counts): `threads` threads at once, each with its own instance of one
//! chain over its share of the packets. `strict` instances count every packet
//! in counters they all share (an atomic add each); `mergeable` ones count in
//! their own and merge every core's every [`MERGE_NS`] of wall time, as the
//! runtime does. Rounds alternate the modes; rates are medians.

use std::sync::{Barrier, Mutex};
use std::time::{Duration, Instant};

use nf::{Chain, ChainConfig, Packet, Shard};

/// How often a `mergeable` thread merges (the runtime's period).
const MERGE_NS: u64 = 10_000_000;

/// One mode at one thread count on one traffic.
#[derive(Clone, Debug, serde::Serialize)]
pub struct SharedRow {
    /// `many sources` (the generated flows' own) or `one source` (every
    /// packet counted on one source: every update on one shared line).
    pub traffic: &'static str,
    /// `strict` or `mergeable`.
    pub mode: &'static str,
    /// Threads at once.
    pub threads: usize,
    /// Mpps over all threads, per round.
    pub mpps: Vec<f64>,
}

fn chain(mode: &str) -> anyhow::Result<Chain> {
    Ok(ChainConfig::from_toml(&format!(
        "[[nf]]\nkind = \"monitor\"\nstate = \"{mode}\"\nthreshold_packets = 1000000000000\n"
    ))?
    .build(std::path::Path::new("."))?)
}

/// `laps` laps of `pkts`, split over `threads` threads, through instances of
/// `chain`; Mpps of the slowest thread's wall time.
fn one(chain: &Chain, pkts: &[Packet], threads: usize, laps: u32) -> anyhow::Result<f64> {
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

/// Both modes at 1…`max_threads` threads, `rounds` rounds, printed as they
/// come.
pub fn compare(
    flows: u32,
    packets: u64,
    laps: u32,
    rounds: usize,
    max_threads: usize,
) -> anyhow::Result<Vec<SharedRow>> {
    let modes = ["mergeable", "strict"];
    let chains = modes.map(chain);
    let [m, s] = chains;
    let chains = [m?, s?];
    let many = super::memory::packets(&chains[0], flows, packets)?;
    let mut one_source = many.clone();
    for p in &mut one_source {
        p.info.tuple.src = core::net::IpAddr::from([10, 0, 0, 1]);
    }
    let traffics = [("many sources", &many), ("one source", &one_source)];
    let mut rows: Vec<SharedRow> = Vec::new();
    for (traffic, _) in traffics {
        for threads in 1..=max_threads.max(1) {
            for mode in modes {
                rows.push(SharedRow {
                    traffic,
                    mode,
                    threads,
                    mpps: Vec::new(),
                });
            }
        }
    }
    for _ in 0..rounds.max(1) {
        for r in rows.iter_mut() {
            let c = &chains[usize::from(r.mode == "strict")];
            let pkts = if r.traffic == "one source" {
                &one_source
            } else {
                &many
            };
            r.mpps.push(one(c, pkts, r.threads, laps.max(1))?);
        }
    }
    println!(
        "shared state, monitor per-source counters, {} packets of {flows} flows, {} laps, medians of {} rounds:",
        many.len(),
        laps.max(1),
        rounds.max(1)
    );
    println!(
        "{:<13} {:<10} {:>7} {:>9} {:>14}",
        "traffic", "mode", "threads", "Mpps", "strict/merged"
    );
    for r in &rows {
        let med = |r: &SharedRow| super::median(&mut r.mpps.clone());
        let ratio = if r.mode == "strict" {
            rows.iter()
                .find(|o| o.mode == "mergeable" && o.threads == r.threads && o.traffic == r.traffic)
                .map_or(String::new(), |o| format!("{:.3}", med(r) / med(o)))
        } else {
            String::new()
        };
        println!(
            "{:<13} {:<10} {:>7} {:>9.2} {:>14}",
            r.traffic,
            r.mode,
            r.threads,
            med(r),
            ratio
        );
    }
    Ok(rows)
}
