//! One run: build the rings, channels and table, start the threads, collect the
//! results into a [`RunReport`].

use std::collections::BTreeMap;
use std::sync::Arc;
use std::thread;

use balance::CoreId;

use crate::BalancerKind;
use hdrhistogram::Histogram;
use nf::{Chain, DropCause, Packet, Shard};
use rtrb::RingBuffer;
use steer::IndirectionTable;
use trace::{Schedule, Trace};
use wire::Malformed;

use crate::controller::Controller;
use crate::feeder::{feed, FeedOptions};
use crate::offloader::{Offloader, OffloaderResult, ToOffload};
use crate::report::{cdf, period_imbalance_median, Latency, LoadSample, PerCore, RunReport};
use crate::shared::{AbortOnPanic, Shared};
use crate::stats::WorkerStats;
use crate::worker::{Worker, WorkerResult};
use crate::RunConfig;

/// A run that cannot start.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// A parameter is out of range.
    #[error("{0}")]
    Config(String),
}

/// The report plus what tests and `--output` need.
pub struct RunOutcome {
    /// The report.
    pub report: RunReport,
    /// Forwarded packets (when kept), sorted by arrival time.
    pub output: Vec<(u64, Vec<u8>)>,
    /// Every shard, as the workers returned them.
    pub shards: Vec<Shard>,
    /// Packets still held when the run ended (must be 0).
    pub held: u64,
    /// Flow states still leased to an offloading core at the end (must be 0).
    pub leftover_leases: usize,
    /// Per controller period: (ns since start, busy share of each core).
    pub load_over_time: Vec<(u64, Vec<f64>)>,
}

/// Runs `chain` (as a template: each worker gets its own instance) on `trace`.
pub fn run(chain: &Chain, trace: &Trace, cfg: &RunConfig) -> Result<RunOutcome, RunError> {
    let w = cfg.workers;
    if w == 0 || w > usize::from(u16::MAX) {
        return Err(RunError::Config(format!(
            "workers = {w}: must be at least 1"
        )));
    }
    let o = cfg.offloaders;
    if o > usize::from(u16::MAX) {
        return Err(RunError::Config(format!("offloaders = {o}: too many")));
    }
    if !(0.0..=1.0).contains(&cfg.offload_ratio) {
        return Err(RunError::Config(format!(
            "offload_ratio = {}: must be between 0 and 1",
            cfg.offload_ratio
        )));
    }
    let ratio0 = if o > 0 {
        (cfg.offload_ratio * f64::from(balance::migrate::RATIO_ONE)).round() as u32
    } else {
        0
    };
    if cfg.ring_size < 2 || cfg.burst == 0 {
        return Err(RunError::Config(
            "ring_size must be ≥ 2 and burst ≥ 1".into(),
        ));
    }
    let spray = cfg.balancer == BalancerKind::Sprayer;
    if spray && chain.has_per_flow_state() {
        return Err(RunError::Config(format!(
            "the sprayer balancer sends a flow's packets to every core, which would split per-flow state: \
             only chains without per-flow state can run under it (this chain's per-flow NFs: {})",
            chain
                .nfs()
                .iter()
                .filter(|n| n.state_kind() == nf::StateKind::PerFlow)
                .map(|n| n.name().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    if spray && o > 0 {
        return Err(RunError::Config(
            "the sprayer balancer does not offload: use --offloaders 0".into(),
        ));
    }
    if trace.is_empty() {
        return Err(RunError::Config("the trace has no packet".into()));
    }
    let shards_n = chain.shard_count();
    let table =
        IndirectionTable::new(chain.buckets(), 1).map_err(|e| RunError::Config(e.to_string()))?;
    let owner: Vec<CoreId> = (0..shards_n).map(|s| (s % w) as CoreId).collect();
    for b in 0..table.len() {
        table.set(b, owner[b % shards_n]);
    }
    let shared = Arc::new(Shared::new(table));
    let (mut producers, mut consumers) = (Vec::new(), Vec::new());
    for _ in 0..w {
        let (p, c) = RingBuffer::<Packet>::new(cfg.ring_size);
        producers.push(p);
        consumers.push(c);
    }
    // one offload ring per (working core, offloading core)
    let mut offload_tx: Vec<Vec<rtrb::Producer<ToOffload>>> = (0..w).map(|_| Vec::new()).collect();
    let mut offload_rx: Vec<Vec<(CoreId, rtrb::Consumer<ToOffload>)>> =
        (0..o).map(|_| Vec::new()).collect();
    for (wi, tx) in offload_tx.iter_mut().enumerate() {
        for rx in offload_rx.iter_mut() {
            let (p, c) = RingBuffer::<ToOffload>::new(cfg.ring_size);
            tx.push(p);
            rx.push((wi as CoreId, c));
        }
    }
    let offload_core: Vec<Option<CoreId>> =
        (0..w).map(|i| (o > 0).then(|| (i % o) as CoreId)).collect();
    let (inbox_tx, inbox_rx): (Vec<_>, Vec<_>) =
        (0..w).map(|_| crossbeam_channel::unbounded()).unzip();
    let (ctl_tx, ctl_rx) = crossbeam_channel::unbounded();
    let mut per_worker: Vec<Vec<Option<Shard>>> = (0..w)
        .map(|_| (0..shards_n).map(|_| None).collect())
        .collect();
    if spray {
        // no flow affinity: every core has its own copy of every (stateless) shard
        for shards in per_worker.iter_mut() {
            for (s, shard) in chain.new_shards().into_iter().enumerate() {
                shards[s] = Some(shard);
            }
        }
    } else {
        for (s, shard) in chain.new_shards().into_iter().enumerate() {
            per_worker[s % w][s] = Some(shard);
        }
    }
    let cores = core_affinity::get_core_ids().unwrap_or_default();
    let stats: Vec<Arc<WorkerStats>> = (0..w + o)
        .map(|_| Arc::new(WorkerStats::new(chain.buckets(), shards_n)))
        .collect();
    // with a duration, loop (practically) forever and let the feeder stop on time
    let loops = if cfg.duration.is_some() {
        u32::MAX
    } else {
        cfg.loops.max(1)
    };
    let schedule = Schedule {
        pace: cfg.pace,
        loops,
    };
    let hasher = chain.hasher().clone();

    let (feeder, ctl, results, offloaded) = thread::scope(|sc| {
        let mut handles = Vec::new();
        for (i, ((shards, offload_rings), (ring, inbox))) in per_worker
            .into_iter()
            .zip(offload_tx)
            .zip(consumers.into_iter().zip(inbox_rx))
            .enumerate()
        {
            let worker = Worker {
                chain: chain.instance(),
                shards,
                ring,
                inbox,
                peers: inbox_tx.clone(),
                controller: ctl_tx.clone(),
                shared: shared.clone(),
                burst: cfg.burst,
                keep_output: cfg.keep_output,
                stats: stats[i].clone(),
                priority_dscp: cfg.priority_dscp,
                offload_rings,
                offload_target: offload_core[i],
                offload_ratio: ratio0,
                exit_order: spray,
                window_ns: cfg.period.as_nanos().max(1) as u64,
                heaviest: cfg.offload_select == crate::OffloadSelect::Heaviest,
            };
            let core = (cfg.pin && !cores.is_empty()).then(|| cores[i % cores.len()]);
            let guard = AbortOnPanic(shared.clone());
            handles.push(sc.spawn(move || {
                let _guard = guard;
                if let Some(c) = core {
                    core_affinity::set_for_current(c);
                }
                worker.run()
            }));
        }
        let mut offload_handles = Vec::new();
        for (k, rings) in offload_rx.into_iter().enumerate() {
            let off = Offloader {
                chain: chain.instance(),
                rings,
                workers: inbox_tx.clone(),
                shared: shared.clone(),
                burst: cfg.burst,
                keep_output: cfg.keep_output,
                stats: stats[w + k].clone(),
                priority_dscp: cfg.priority_dscp,
            };
            let core = (cfg.pin && !cores.is_empty()).then(|| cores[(w + k) % cores.len()]);
            let guard = AbortOnPanic(shared.clone());
            offload_handles.push(sc.spawn(move || {
                let _guard = guard;
                if let Some(c) = core {
                    core_affinity::set_for_current(c);
                }
                off.run()
            }));
        }
        let controller = Controller {
            shared: shared.clone(),
            workers: inbox_tx.clone(),
            inbox: ctl_rx,
            owner: owner.clone(),
            shards: shards_n,
            balancer: cfg.balancer.make(cfg.seed),
            period: cfg.period,
            nic_delay: cfg.nic_update_delay,
            stats: stats.clone(),
            offloaders: o,
            ratio: vec![ratio0; shards_n],
            offload_core: offload_core.clone(),
            progress: cfg.progress.clone(),
        };
        let guard = AbortOnPanic(shared.clone());
        let ctl = sc.spawn(move || {
            let _guard = guard;
            controller.run()
        });
        let duration = cfg.duration.map(|d| d.as_nanos() as u64);
        let queues = std::mem::take(&mut producers);
        // the NIC model gets its own core after the cores' (shared when there are
        // too few): left to the scheduler it may land on a worker's core
        let feeder_core = (cfg.pin && !cores.is_empty()).then(|| cores[(w + o) % cores.len()]);
        let feeder_shared = shared.clone();
        let hasher = &hasher;
        let guard = AbortOnPanic(shared.clone());
        let feeder = sc.spawn(move || {
            let _guard = guard;
            if let Some(c) = feeder_core {
                core_affinity::set_for_current(c);
            }
            feed(
                trace,
                hasher,
                &feeder_shared,
                queues,
                FeedOptions {
                    schedule,
                    burst: cfg.burst,
                    duration_ns: duration,
                    spray,
                },
            )
        });
        let feeder = feeder.join().expect("feeder thread");
        let ctl = ctl.join().expect("controller thread");
        let results: Vec<WorkerResult> = handles
            .into_iter()
            .map(|h| h.join().expect("worker thread"))
            .collect();
        let offloaded: Vec<OffloaderResult> = offload_handles
            .into_iter()
            .map(|h| h.join().expect("offloading-core thread"))
            .collect();
        (feeder, ctl, results, offloaded)
    });
    let elapsed_ns = shared.now_ns().max(1);

    // merge
    let mut results = results;
    let held: u64 = results.iter().map(|r| r.held).sum();
    let mut per_core: Vec<PerCore> = results
        .iter()
        .enumerate()
        .map(|(i, r)| PerCore {
            core: i,
            role: "working",
            load: r.busy_ns as f64 / (r.busy_ns + r.idle_ns).max(1) as f64,
            packets: r.chain.counters().packets,
            priority_packets: r.latency[0].len(),
        })
        .collect();
    per_core.extend(offloaded.iter().enumerate().map(|(k, r)| PerCore {
        core: w + k,
        role: "offloading",
        load: r.busy_ns as f64 / (r.busy_ns + r.idle_ns).max(1) as f64,
        packets: r.chain.counters().packets,
        priority_packets: r.latency[0].len(),
    }));
    let leftover: usize = offloaded.iter().map(|r| r.leftover).sum();
    let reordered_at_exit = spray.then(|| {
        let mut exits: Vec<_> = results
            .iter()
            .flat_map(|r| r.exit.iter().copied())
            .collect();
        exits.sort_by_key(|x| x.at_ns);
        let mut last: std::collections::HashMap<u32, u32> = Default::default();
        let mut late = 0u64;
        for x in exits {
            let m = last.entry(x.flow).or_insert(0);
            if x.seq < *m {
                late += 1;
            } else {
                *m = x.seq;
            }
        }
        late
    });
    let mut ostats = balance::migrate::OffloadStats::default();
    let mut offload_waits = 0;
    for r in &results {
        let s = &r.offload;
        ostats.leases += s.leases;
        ostats.recalled += s.recalled;
        ostats.recalls += s.recalls;
        ostats.pended += s.pended;
        offload_waits += r.offload_waits;
    }
    let hist = || Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).expect("valid bounds");
    let (mut latency, mut by_class) = (hist(), [hist(), hist()]);
    let mut output = Vec::new();
    let mut shards = Vec::new();
    for r in &mut results {
        for (c, h) in r.latency.iter().enumerate() {
            latency.add(h).expect("same bounds");
            by_class[c].add(h).expect("same bounds");
        }
        output.append(&mut r.output);
        shards.append(&mut r.shards);
    }
    let mut offloaded = offloaded;
    for r in &mut offloaded {
        for (c, h) in r.latency.iter().enumerate() {
            latency.add(h).expect("same bounds");
            by_class[c].add(h).expect("same bounds");
        }
        output.append(&mut r.output);
    }
    output.sort_by_key(|(ts, _)| *ts);
    let mut it = results.into_iter();
    let mut total = it.next().expect("at least one worker").chain;
    for r in it {
        total.merge_from(&r.chain);
    }
    for r in &offloaded {
        total.merge_from(&r.chain);
    }
    // components on their own cores finish what they were handed before counting
    for n in total.nfs() {
        n.settle();
    }
    let nf_counters: BTreeMap<String, BTreeMap<&'static str, u64>> = total
        .nfs()
        .iter()
        .map(|n| (n.name().to_string(), n.counters().into_iter().collect()))
        .collect();
    let c = total.counters().clone();
    let mut drops = BTreeMap::new();
    drops.insert("ring_full".to_string(), feeder.ring_full);
    drops.insert("malformed".to_string(), feeder.malformed.iter().sum());
    for cause in DropCause::ALL {
        drops.insert(cause.name().to_string(), c.dropped(cause));
    }
    let counter = |name: &str| -> u64 {
        total
            .nfs()
            .iter()
            .flat_map(|n| n.counters())
            .filter(|(k, _)| *k == name)
            .map(|(_, v)| v)
            .sum()
    };
    let (created, expired, active_max) = shards.iter().fold((0, 0, 0), |a, s| {
        let t = s.table.stats();
        (a.0 + t.inserted, a.1 + t.expired_slots, a.2 + t.max_len)
    });
    let pct = |v: &[u64], q: f64| -> f64 {
        if v.is_empty() {
            return 0.0;
        }
        let mut v = v.to_vec();
        v.sort_unstable();
        v[((v.len() - 1) as f64 * q) as usize] as f64 / 1e3
    };
    let loads: Vec<f64> = per_core.iter().map(|p| p.load).collect();
    let mean = loads.iter().sum::<f64>() / loads.len() as f64;
    let (lmax, lmin) = loads
        .iter()
        .fold((f64::MIN, f64::MAX), |a, l| (a.0.max(*l), a.1.min(*l)));
    let secs = elapsed_ns as f64 / 1e9;
    let out_bytes = if feeder.offered > 0 {
        feeder.bytes as f64 * c.forwarded as f64 / feeder.offered as f64
    } else {
        0.0
    };
    let report = RunReport {
        nf: nf_counters,
        schema: 1,
        mode: "run",
        balancer: cfg.balancer.name(),
        cores: BTreeMap::from([("working", w), ("offloading", o)]),
        packets_in: feeder.offered,
        packets_out: c.forwarded,
        drops,
        malformed: Malformed::ALL
            .iter()
            .filter(|m| feeder.malformed[**m as usize] > 0)
            .map(|m| (m.name().to_string(), feeder.malformed[*m as usize]))
            .collect(),
        reordered: counter("reordered") + reordered_at_exit.unwrap_or(0),
        reordered_at_exit,
        flows: BTreeMap::from([
            ("created", created),
            ("expired", expired),
            ("active_max", active_max),
        ]),
        throughput: BTreeMap::from([
            (
                "offered_mpps",
                feeder.offered as f64 / (feeder.duration_ns.max(1) as f64 / 1e9) / 1e6,
            ),
            ("mpps", c.forwarded as f64 / secs / 1e6),
            ("seconds", secs),
            ("gbps", out_bytes * 8.0 / secs / 1e9),
        ]),
        latency_ns: BTreeMap::from([
            ("all", Latency::of(&latency)),
            ("priority", Latency::of(&by_class[0])),
            ("regular", Latency::of(&by_class[1])),
        ]),
        latency_cdf: BTreeMap::from([
            ("all", cdf(&latency)),
            ("priority", cdf(&by_class[0])),
            ("regular", cdf(&by_class[1])),
        ]),
        migrations: BTreeMap::from([
            ("shard_moves", ctl.shard_moves),
            ("offload_changes", ctl.offload_changes),
            ("flows_offloaded", ostats.leases),
            ("flows_recalled", ostats.recalled),
            ("packets_pended", ostats.pended),
            ("offload_ring_waits", offload_waits),
            ("entries_moved", ctl.entries_moved),
            ("packets_held", ctl.packets_held),
        ]),
        controller: BTreeMap::from_iter(
            [
                ("rounds", ctl.rounds as f64),
                ("plan_us_p50", pct(&ctl.plan_ns, 0.5)),
                ("plan_us_max", pct(&ctl.plan_ns, 1.0)),
                ("move_us_p50", pct(&ctl.move_ns, 0.5)),
                ("move_us_max", pct(&ctl.move_ns, 1.0)),
            ]
            .into_iter()
            .chain(ctl.balancer.iter().copied()),
        ),
        per_core,
        imbalance: BTreeMap::from([
            ("max_over_min", if lmin > 0.0 { lmax / lmin } else { 0.0 }),
            (
                "squared",
                loads.iter().map(|l| (l - mean) * (l - mean)).sum(),
            ),
        ]),
        load_over_time: ctl
            .load_over_time
            .iter()
            .map(|(t, l)| LoadSample {
                t_ns: *t,
                load: l.clone(),
            })
            .collect(),
    };
    let mut report = report;
    let med = period_imbalance_median(&report.load_over_time, w);
    report.imbalance.insert("period_median", med);
    Ok(RunOutcome {
        report,
        output,
        shards,
        held,
        leftover_leases: leftover,
        load_over_time: ctl.load_over_time,
    })
}
