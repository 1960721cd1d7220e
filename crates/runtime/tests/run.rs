//! The runtime's invariants, on every change: per flow, packets leave in arrival
//! order (the sequence check counts 0 reordered); every packet offered is forwarded
//! or counted as dropped (in = out + drops, exactly); after any number of shard
//! moves every shard is on exactly one worker and every flow entry exists once.

use std::collections::HashSet;
use std::path::Path;
use std::time::Duration;

use nf::ChainConfig;
use runtime::{run, BalancerKind, RunConfig, RunOutcome};
use trace::{Generator, Pace, SizeDist, Trace, TraceSpec};

fn spec(flows: u32, packets: u64, alpha: f64) -> TraceSpec {
    TraceSpec {
        flows,
        packets,
        alpha,
        active_flows: flows / 4,
        sizes: SizeDist::Fixed(64),
        ..Default::default()
    }
}

fn trace(flows: u32, packets: u64, alpha: f64) -> Trace {
    Trace::from_generated(Generator::new(&spec(flows, packets, alpha)).unwrap())
}

fn check(o: &RunOutcome, shards: usize) {
    let r = &o.report;
    assert_eq!(
        r.packets_in,
        r.packets_out + r.dropped(),
        "in = out + drops: {:?}",
        r.drops
    );
    assert_eq!(r.reordered, 0, "no flow reordered");
    assert_eq!(o.held, 0, "no packet left held or pending");
    assert_eq!(o.leftover_leases, 0, "every offloaded flow came home");
    assert_eq!(r.drops["offload_state"], 0);
    let mut ids: Vec<usize> = o.shards.iter().map(|s| s.info.index).collect();
    ids.sort_unstable();
    assert_eq!(
        ids,
        (0..shards).collect::<Vec<_>>(),
        "every shard exactly once"
    );
    let mut keys = HashSet::new();
    let mut entries = 0;
    for s in &o.shards {
        for e in s.table.entries() {
            assert!(keys.insert(*s.table.key(e)), "a flow entry exists twice");
            assert!(!s.table.is_detached(e), "an entry still detached");
            entries += 1;
        }
    }
    assert_eq!(keys.len(), entries);
}

#[test]
fn static_run_forwards_everything_in_order() {
    let chain = ChainConfig::default_chain().build(Path::new(".")).unwrap();
    let t = trace(2_000, 40_000, 1.1);
    let o = run(
        &chain,
        &t,
        &RunConfig {
            workers: 2,
            pin: false,
            keep_output: true,
            ..Default::default()
        },
    )
    .unwrap();
    check(&o, chain.shard_count());
    assert_eq!(o.report.packets_in, 40_000);
    assert_eq!(
        o.report.packets_out, 40_000,
        "the default chain forwards the whole generated trace"
    );
    assert_eq!(o.output.len(), 40_000);
    assert_eq!(o.report.migrations["shard_moves"], 0);
    assert!(
        o.report.per_core.iter().all(|c| c.packets > 0),
        "both workers worked"
    );
}

#[test]
fn random_moves_keep_every_invariant() {
    let chain = ChainConfig::default_chain().build(Path::new(".")).unwrap();
    let t = trace(3_000, 30_000, 1.1);
    let cfg = RunConfig {
        workers: 3,
        balancer: BalancerKind::Random,
        period: Duration::from_micros(200),
        loops: 20,
        pin: false,
        ..Default::default()
    };
    let o = run(&chain, &t, &cfg).unwrap();
    check(&o, chain.shard_count());
    // the whole report, with --nocapture
    eprintln!("{}", serde_json::to_string_pretty(&o.report).unwrap());
    assert_eq!(o.report.packets_in, 600_000);
    assert!(
        o.report.migrations["shard_moves"] > 50,
        "{:?}",
        o.report.migrations
    );
    assert!(o.report.migrations["entries_moved"] > 0);
}

/// A pre-steered replay (frames parsed and hashed before the run) forwards
/// the same packets, byte for byte, in order, with shards moving meanwhile;
/// looping it twice still marks each lap.
#[test]
fn a_presteered_replay_forwards_the_same_bytes() {
    let chain = ChainConfig::default_chain().build(Path::new(".")).unwrap();
    let t = trace(2_000, 40_000, 1.1);
    let live = RunConfig {
        workers: 2,
        keep_output: true,
        pin: false,
        loops: 2,
        balancer: BalancerKind::Random,
        period: Duration::from_micros(500),
        ..Default::default()
    };
    let base = run(&chain, &t, &live).unwrap();
    check(&base, chain.shard_count());
    let o = run(
        &chain,
        &t,
        &RunConfig {
            presteer: true,
            ..live
        },
    )
    .unwrap();
    check(&o, chain.shard_count());
    assert_eq!(o.report.packets_in, 80_000);
    assert_eq!(o.report.packets_out, base.report.packets_out);
    assert!(o.report.migrations["shard_moves"] > 0);
    let bytes = |o: &RunOutcome| {
        let mut v: Vec<Vec<u8>> = o.output.iter().map(|(_, b)| b.clone()).collect();
        v.sort_unstable();
        v
    };
    assert!(
        bytes(&o) == bytes(&base),
        "the same packets out, byte for byte"
    );
}

/// A NIC model whose frames several threads parse and hash in turn, steered
/// by one thread: the same packets out, byte for byte, each flow in order,
/// with shards moving meanwhile, over two laps, with bursts that do not
/// divide the trace; malformed frames are counted the same.
#[test]
fn parallel_nic_model_threads_forward_the_same_bytes() {
    let chain = ChainConfig::default_chain().build(Path::new(".")).unwrap();
    let g = trace(2_000, 30_000, 1.1);
    let mut t = Trace::new();
    for (i, (ts, f)) in g.iter().enumerate() {
        t.push(ts, f, f.len() as u32);
        if i % 997 == 0 {
            // a truncated IPv4 header
            t.push(ts, &f[..20], 20);
        }
    }
    let one = RunConfig {
        workers: 2,
        keep_output: true,
        pin: false,
        loops: 2,
        burst: 7,
        balancer: BalancerKind::Random,
        period: Duration::from_micros(500),
        ..Default::default()
    };
    let base = run(&chain, &t, &one).unwrap();
    check(&base, chain.shard_count());
    let malformed = base.report.drops["malformed"];
    assert_eq!(malformed, 2 * 31, "{:?}", base.report.drops);
    let bytes = |o: &RunOutcome| {
        let mut v: Vec<Vec<u8>> = o.output.iter().map(|(_, b)| b.clone()).collect();
        v.sort_unstable();
        v
    };
    for k in [2, 3] {
        let o = run(
            &chain,
            &t,
            &RunConfig {
                nic_threads: k,
                ..one.clone()
            },
        )
        .unwrap();
        check(&o, chain.shard_count());
        assert_eq!(o.report.packets_in, base.report.packets_in);
        assert_eq!(o.report.packets_out, base.report.packets_out);
        assert_eq!(o.report.drops["malformed"], malformed);
        assert!(o.report.migrations["shard_moves"] > 0);
        assert!(
            bytes(&o) == bytes(&base),
            "the same packets out, byte for byte ({k} threads)"
        );
    }
}

/// Flow offload with random ratio changes, offloading-core changes and shard moves
/// every 200 µs: every invariant holds, the offloading core does work, and every
/// forwarded packet has the same bytes as in a static run without offloading.
#[test]
fn offload_keeps_every_invariant_and_every_byte() {
    let chain = ChainConfig::default_chain().build(Path::new(".")).unwrap();
    let t = trace(3_000, 150_000, 1.1);
    let plain = RunConfig {
        workers: 2,
        keep_output: true,
        pin: false,
        ..Default::default()
    };
    let base = run(&chain, &t, &plain).unwrap();
    check(&base, chain.shard_count());
    let cfg = RunConfig {
        offloaders: 1,
        balancer: BalancerKind::Random,
        period: Duration::from_micros(200),
        ..plain
    };
    let o = run(&chain, &t, &cfg).unwrap();
    check(&o, chain.shard_count());
    let m = &o.report.migrations;
    assert!(m["offload_changes"] > 20, "{m:?}");
    assert!(m["flows_offloaded"] > 0 && m["flows_recalled"] > 0, "{m:?}");
    assert_eq!(o.report.cores["offloading"], 1);
    let off = &o.report.per_core[2];
    assert_eq!(off.role, "offloading");
    assert!(off.packets > 0, "the offloading core processed packets");
    assert_eq!(o.report.packets_out, base.report.packets_out);
    let bytes = |o: &RunOutcome| {
        let mut v: Vec<Vec<u8>> = o.output.iter().map(|(_, b)| b.clone()).collect();
        v.sort_unstable();
        v
    };
    assert!(
        bytes(&o) == bytes(&base),
        "the same packets out, byte for byte"
    );
    eprintln!("offload: {m:?}, offloading core {} packets", off.packets);
}

#[test]
fn timed_replay_accounts_for_every_packet() {
    let chain = ChainConfig::from_toml("[[nf]]\nkind = \"seqcheck\"\n")
        .unwrap()
        .build(Path::new("."))
        .unwrap();
    let t = trace(500, 20_000, 1.1);
    // 8-descriptor rings and a replay 1000× faster than the trace: some drops
    let cfg = RunConfig {
        workers: 2,
        ring_size: 8,
        pace: Pace::Timed { speed: 1000.0 },
        pin: false,
        ..Default::default()
    };
    let o = run(&chain, &t, &cfg).unwrap();
    check(&o, chain.shard_count());
    assert_eq!(o.report.packets_in, 20_000);
    assert_eq!(o.report.packets_out + o.report.drops["ring_full"], 20_000);
}

/// The balancers see the NIC model's per-queue drops (`Snapshot::core_drops`,
/// what Dyssect reads as a saturated core's lost arrivals): over the periods,
/// as many as the report's `ring_full`, less the last partial period's.
#[test]
fn queue_drops_reach_the_balancers_snapshot() {
    use std::sync::{Arc, Mutex};
    let chain = ChainConfig::from_toml("[[nf]]\nkind = \"seqcheck\"\n")
        .unwrap()
        .build(Path::new("."))
        .unwrap();
    let t = trace(500, 200_000, 1.1);
    let seen = Arc::new(Mutex::new((0u64, 0usize)));
    let s = seen.clone();
    let cfg = RunConfig {
        workers: 2,
        ring_size: 8,
        pace: Pace::Timed { speed: 50.0 },
        period: Duration::from_millis(5),
        pin: false,
        progress: Some(runspec::Progress(Arc::new(move |snap| {
            let mut g = s.lock().unwrap();
            g.0 += snap.core_drops.iter().sum::<u64>();
            g.1 = g.1.max(snap.core_drops.len());
        }))),
        ..Default::default()
    };
    let o = run(&chain, &t, &cfg).unwrap();
    let ring_full = o.report.drops["ring_full"];
    let (in_snapshots, width) = *seen.lock().unwrap();
    println!("ring_full {ring_full}, in the snapshots {in_snapshots}");
    assert_eq!(width, 2, "one count per working core");
    assert!(ring_full > 0, "the test needs drops");
    assert!(
        in_snapshots > 0 && in_snapshots <= ring_full,
        "{in_snapshots} of {ring_full}"
    );
}

/// The stress run: ≥ 10⁴ random shard moves and ≥ 10⁴ offload
/// changes (ratios and offloading cores) at a 1 ms period, 3 working cores and 1
/// offloading core on whatever cores there are, a skewed trace looped for 14 s at
/// full speed (the feeder waits on full rings, so nothing is dropped).
#[test]
fn stress_ten_thousand_moves() {
    let chain = ChainConfig::default_chain().build(Path::new(".")).unwrap();
    let t = trace(4_000, 30_000, 1.2);
    let cfg = RunConfig {
        workers: 3,
        offloaders: 1,
        balancer: BalancerKind::Random,
        period: Duration::from_millis(1),
        duration: Some(Duration::from_secs(14)),
        pin: false,
        ..Default::default()
    };
    let o = run(&chain, &t, &cfg).unwrap();
    check(&o, chain.shard_count());
    let m = &o.report.migrations;
    let moves = m["shard_moves"];
    assert!(moves >= 10_000, "{moves} moves");
    assert!(m["offload_changes"] >= 10_000, "{m:?}");
    assert!(m["flows_offloaded"] > 0 && m["packets_pended"] > 0, "{m:?}");
    assert_eq!(o.report.dropped(), 0);
    eprintln!(
        "stress: {moves} moves, {} offload changes, {} flows offloaded, {} recalled, {} packets pended, {} entries moved, {} packets (offloading core: {}), move p50 {} µs, max {} µs",
        m["offload_changes"],
        m["flows_offloaded"],
        m["flows_recalled"],
        m["packets_pended"],
        m["entries_moved"],
        o.report.packets_out,
        o.report.per_core[3].packets,
        o.report.controller["move_us_p50"],
        o.report.controller["move_us_max"]
    );
}

/// One scripted move while traffic flows: the shard's packets that reached the new
/// owner before the hand-over are held, then drained first; the report shows how
/// many, how long the move took, and the latency spike it caused.
#[test]
fn a_scripted_move_holds_then_drains() {
    // workers slower than the feeder (the monitor is costly), so queues fill up
    let mut cfg = ChainConfig::default_chain();
    cfg.nf.insert(
        2,
        ChainConfig::from_toml("[[nf]]\nkind = \"monitor\"\n")
            .unwrap()
            .nf
            .remove(0),
    );
    let chain = cfg.build(Path::new(".")).unwrap();
    let t = trace(2_000, 40_000, 1.0);
    let cfg = RunConfig {
        workers: 2,
        // a long queue at the old owner: its cycle lasts while the shard's new
        // packets keep arriving at the new owner
        ring_size: 65_536,
        balancer: BalancerKind::Script(vec![runtime::ScriptedMove {
            at: Duration::from_millis(5),
            shard: 0,
            to: 1,
        }]),
        period: Duration::from_millis(1),
        duration: Some(Duration::from_millis(400)),
        pin: false,
        ..Default::default()
    };
    // whether the new owner receives packets before the hand-over depends on the
    // scheduling of 4 threads on this machine: every attempt must keep every
    // invariant, and one of up to 20 attempts must show packets held (in the
    // whole suite on 2 CPUs an attempt holds none about 3 times in 4)
    let mut attempts = 0;
    let o = loop {
        attempts += 1;
        let o = run(&chain, &t, &cfg).unwrap();
        check(&o, chain.shard_count());
        assert_eq!(o.report.migrations["shard_moves"], 1);
        if o.report.migrations["packets_held"] > 0 || attempts == 20 {
            break o;
        }
    };
    let m = &o.report.migrations;
    assert!(
        m["packets_held"] > 0,
        "no packet held in {attempts} attempts: {m:?}"
    );
    let shard0 = o.shards.iter().find(|s| s.info.index == 0).unwrap();
    assert!(!shard0.table.is_empty(), "the flow table came along");
    let l = &o.report.latency_ns["all"];
    eprintln!(
        "scripted move: {} packets held then drained, move took {:.0} µs; latency p50 {} µs, p99.9 {} µs, max {} µs",
        m["packets_held"],
        o.report.controller["move_us_max"],
        l.p50 / 1000,
        l.p999 / 1000,
        l.max / 1000
    );
    assert!(l.max < 10_000_000_000, "latency spike bounded");
}

/// The controller's snapshots: per-bucket packet counts and per-core counts agree
/// (up to the publication skew of a few bursts) and loads are fractions.
#[test]
fn snapshots_count_what_the_workers_process() {
    use std::sync::{Arc, Mutex};
    let chain = ChainConfig::default_chain().build(Path::new(".")).unwrap();
    let t = trace(2_000, 30_000, 1.1);
    let snaps: Arc<Mutex<Vec<balance::Snapshot>>> = Arc::default();
    let sink = snaps.clone();
    let cfg = RunConfig {
        workers: 2,
        period: Duration::from_millis(2),
        duration: Some(Duration::from_millis(300)),
        progress: Some(runtime::Progress(Arc::new(move |s: &balance::Snapshot| {
            sink.lock().unwrap().push(s.clone())
        }))),
        pin: false,
        ..Default::default()
    };
    let o = run(&chain, &t, &cfg).unwrap();
    check(&o, chain.shard_count());
    let snaps = snaps.lock().unwrap();
    assert!(snaps.len() > 20, "{} snapshots", snaps.len());
    let mut total = 0;
    for s in snaps.iter() {
        assert_eq!(s.bucket_packets.len(), chain.buckets());
        assert_eq!(s.bucket_priority.len(), chain.buckets());
        assert_eq!(s.core_queue.len(), 2);
        assert!(s
            .bucket_priority
            .iter()
            .zip(&s.bucket_packets)
            .all(|(p, a)| p <= a));
        assert_eq!(
            s.shard_packets().iter().sum::<u64>(),
            s.bucket_packets.iter().sum::<u64>()
        );
        let (b, c): (u64, u64) = (s.bucket_packets.iter().sum(), s.core_packets.iter().sum());
        // buckets are published per packet, core totals per burst, and the controller
        // reads one after the other at both ends of the period: up to two bursts
        // per worker at each end
        assert!(b.abs_diff(c) <= 2 * 2 * 2 * 32, "buckets {b} vs cores {c}");
        assert!(s.core_load.iter().all(|l| (0.0..=1.0).contains(l)));
        total += b;
    }
    assert!(total > 0 && total <= o.report.packets_in);
    assert_eq!(o.load_over_time.len(), snaps.len());
}

/// Workers drive the idle timeouts: with a 2 ms idle time and a replay spread over
/// ≈ 300 ms, flows that ended expire during the run and their entries are freed.
#[test]
fn idle_flows_expire_during_a_run() {
    let chain = ChainConfig::from_toml(
        "[table]\ntimer_tick = \"1ms\"\n[[nf]]\nkind = \"seqcheck\"\nidle = \"2ms\"\n",
    )
    .unwrap()
    .build(Path::new("."))
    .unwrap();
    let t = trace(2_000, 20_000, 1.1);
    let speed = (t.duration_ns() as f64 / 1e9) / 0.3;
    let cfg = RunConfig {
        workers: 2,
        pace: Pace::Timed { speed },
        pin: false,
        ..Default::default()
    };
    let o = run(&chain, &t, &cfg).unwrap();
    check(&o, chain.shard_count());
    let f = &o.report.flows;
    assert!(f["expired"] > 500, "{f:?}");
    let live: usize = o.shards.iter().map(|s| s.table.len()).sum();
    assert!(
        (live as u64) < f["created"],
        "entries were freed: {live} live of {}",
        f["created"]
    );
}

/// Latency is reported for all packets and per class (the priority DSCP vs the rest).
#[test]
fn latency_per_class() {
    let chain = ChainConfig::default_chain().build(Path::new(".")).unwrap();
    let spec = TraceSpec {
        flows: 400,
        packets: 20_000,
        priority_share: 0.2,
        sizes: SizeDist::Fixed(64),
        ..Default::default()
    };
    let t = Trace::from_generated(Generator::new(&spec).unwrap());
    let o = run(
        &chain,
        &t,
        &RunConfig {
            workers: 2,
            pin: false,
            ..Default::default()
        },
    )
    .unwrap();
    check(&o, chain.shard_count());
    let l = &o.report.latency_ns;
    assert!(l["priority"].p50 > 0 && l["regular"].p50 > 0, "{l:?}");
    assert!(l["all"].max >= l["priority"].max.max(l["regular"].max));
    // without a priority class, its percentiles are zero
    let plain = trace(400, 20_000, 1.1);
    let o = run(
        &chain,
        &plain,
        &RunConfig {
            workers: 2,
            pin: false,
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(o.report.latency_ns["priority"].p50, 0);
}

/// Priority-class flows are never offloaded: with every shard's ratio at 1, the
/// offloading core processes regular packets only.
#[test]
fn priority_flows_are_never_offloaded() {
    let chain = ChainConfig::default_chain().build(Path::new(".")).unwrap();
    let spec = TraceSpec {
        flows: 1_000,
        packets: 40_000,
        priority_share: 0.3,
        sizes: SizeDist::Fixed(64),
        ..Default::default()
    };
    let t = Trace::from_generated(Generator::new(&spec).unwrap());
    let cfg = RunConfig {
        workers: 2,
        offloaders: 1,
        offload_ratio: 1.0,
        pin: false,
        ..Default::default()
    };
    let o = run(&chain, &t, &cfg).unwrap();
    check(&o, chain.shard_count());
    let cores = &o.report.per_core;
    let off = &cores[2];
    assert!(
        off.packets > 10_000,
        "the offloading core took the regular flows: {cores:?}"
    );
    assert_eq!(off.priority_packets, 0, "{cores:?}");
    assert!(
        cores[0].priority_packets + cores[1].priority_packets > 5_000,
        "{cores:?}"
    );
}

/// A slow NIC (the indirection-table rewrite takes effect 30 ms late) delays the
/// move, not its correctness.
#[test]
fn nic_update_delay_delays_the_move() {
    let chain = ChainConfig::default_chain().build(Path::new(".")).unwrap();
    let t = trace(2_000, 20_000, 1.1);
    let cfg = RunConfig {
        workers: 2,
        balancer: BalancerKind::Script(vec![runtime::ScriptedMove {
            at: Duration::from_millis(5),
            shard: 3,
            to: 0,
        }]),
        period: Duration::from_millis(1),
        nic_update_delay: Duration::from_millis(30),
        duration: Some(Duration::from_millis(200)),
        pin: false,
        ..Default::default()
    };
    let o = run(&chain, &t, &cfg).unwrap();
    check(&o, chain.shard_count());
    assert_eq!(o.report.migrations["shard_moves"], 1);
    let took = o.report.controller["move_us_max"];
    assert!(took >= 30_000.0, "the move took {took} µs");
}

/// Sprayer ignores flows: it refuses a chain with per-flow state, and with a
/// stateless chain it balances packets evenly but reorders flows — counted at the
/// exit (0 with a single core, where nothing can overtake).
#[test]
fn sprayer_balances_packets_and_reorders_flows() {
    let fw = ChainConfig::default_chain().build(Path::new(".")).unwrap();
    let t = trace(2_000, 60_000, 1.1);
    let cfg = RunConfig {
        workers: 2,
        balancer: BalancerKind::Sprayer,
        pin: false,
        ..Default::default()
    };
    let e = run(&fw, &t, &cfg).err().expect("refused").to_string();
    assert!(e.contains("firewall") && e.contains("per-flow"), "{e}");
    let mon = ChainConfig::from_toml("[[nf]]\nkind = \"monitor\"\nstate = \"mergeable\"\n")
        .unwrap()
        .build(Path::new("."))
        .unwrap();
    let o = run(&mon, &t, &cfg).unwrap();
    let r = &o.report;
    assert_eq!(r.packets_in, r.packets_out + r.dropped());
    let late = r.reordered_at_exit.expect("measured under sprayer");
    assert_eq!(r.reordered, late);
    let (a, b) = (r.per_core[0].packets as f64, r.per_core[1].packets as f64);
    assert!(
        (a / b - 1.0).abs() < 0.1,
        "packets spread evenly: {a} vs {b}"
    );
    eprintln!(
        "sprayer: {late} packets reordered at the exit of {}",
        r.packets_out
    );
    let one = run(&mon, &t, &RunConfig { workers: 1, ..cfg }).unwrap();
    assert_eq!(one.report.reordered_at_exit, Some(0));
}

/// Heaviest-first offload selection: the same ratio offloads far fewer flows than
/// hash slices but a large share of the traffic (the elephants), and the snapshot
/// carries each shard's heavy-flow shares.
#[test]
fn heaviest_first_offloads_the_elephants() {
    use std::sync::{Arc, Mutex};
    let chain = ChainConfig::default_chain().build(Path::new(".")).unwrap();
    // connections that live equally long: an elephant sends fast while it
    // lives, so an epoch's heaviest flows are the elephants
    let t = Trace::from_generated(
        Generator::new(&TraceSpec {
            lifetimes: trace::Lifetimes::Equal,
            ..spec(3_000, 200_000, 1.3)
        })
        .unwrap(),
    );
    let heavy_seen = Arc::new(Mutex::new(0usize));
    let seen = heavy_seen.clone();
    let base = RunConfig {
        workers: 2,
        offloaders: 1,
        offload_ratio: 0.5,
        period: Duration::from_millis(5),
        pin: false,
        progress: Some(runtime::Progress(Arc::new(move |s: &balance::Snapshot| {
            *seen.lock().unwrap() += s.shard_heavy.iter().filter(|h| !h.is_empty()).count();
        }))),
        ..Default::default()
    };
    let hash = run(&chain, &t, &base).unwrap();
    check(&hash, chain.shard_count());
    let heavy = run(
        &chain,
        &t,
        &RunConfig {
            offload_select: runtime::OffloadSelect::Heaviest,
            ..base
        },
    )
    .unwrap();
    check(&heavy, chain.shard_count());
    let per_flow = |o: &RunOutcome| {
        o.report.per_core[2].packets as f64 / o.report.migrations["flows_offloaded"].max(1) as f64
    };
    eprintln!(
        "hash: {} flows offloaded, {} packets on the offloading core; heaviest: {} flows, {} packets",
        hash.report.migrations["flows_offloaded"],
        hash.report.per_core[2].packets,
        heavy.report.migrations["flows_offloaded"],
        heavy.report.per_core[2].packets
    );
    assert!(
        heavy.report.per_core[2].packets > 20_000,
        "{:?}",
        heavy.report.per_core
    );
    // the elephants first: more of the traffic on the offloading core, with
    // fewer flows leased per packet there (beyond the elephants the ratio is
    // made up by slices of the other flows, so how many mice follow depends
    // on timing: 5× on a quiet machine, under 3× on a loaded one)
    assert!(
        heavy.report.per_core[2].packets as f64 > 1.5 * hash.report.per_core[2].packets as f64,
        "{:?} vs {:?}",
        heavy.report.per_core,
        hash.report.per_core
    );
    assert!(
        per_flow(&heavy) > 2.0 * per_flow(&hash),
        "{} vs {}",
        per_flow(&heavy),
        per_flow(&hash)
    );
    assert!(
        *heavy_seen.lock().unwrap() > 0,
        "snapshots carry heavy-flow shares"
    );
}

/// The IDS's pattern matching on a core of its own (GranularNF's offloading
/// component) under random shard moves: the component sees each flow's payloads
/// in order even when the flow changes worker, so it raises exactly the alerts an
/// inline IDS raises; the report carries the IDS's counters (the cost of the
/// placement: payloads handed over, none lost with a large ring).
#[test]
fn offloaded_ids_under_moves_alerts_like_inline() {
    // the generator's payload bytes are i·31 + k: the pair 00 1f and the triple
    // 00 1f 3e occur in some packets, and across packet boundaries of a flow
    let ids = |placement: &str| {
        format!(
            "[[nf]]\nkind = \"ids\"\nplacement = \"{placement}\"\nring = 65536\nrules = '''\n\
             alert udp any any <> any any (msg:\"pair\"; content:\"|00 1f|\"; sid:1;)\n\
             alert tcp any any <> any any (msg:\"pair\"; content:\"|00 1f|\"; sid:2;)\n\
             alert ip any any <> any any (msg:\"triple\"; content:\"|00|\"; content:\"|1f 3e|\"; sid:3;)\n'''\n\
             [[nf]]\nkind = \"seqcheck\"\n"
        )
    };
    let t = trace(2_000, 20_000, 1.1);
    let cfg = RunConfig {
        workers: 2,
        balancer: BalancerKind::Random,
        period: Duration::from_micros(200),
        loops: 3,
        pin: false,
        ..Default::default()
    };
    let mut alerts = Vec::new();
    for placement in ["inline", "core"] {
        let chain = ChainConfig::from_toml(&ids(placement))
            .unwrap()
            .build(Path::new("."))
            .unwrap();
        let o = run(&chain, &t, &cfg).unwrap();
        check(&o, chain.shard_count());
        let k = &o.report.nf["ids"];
        if placement == "core" {
            assert_eq!(k["offloaded"], o.report.packets_in, "{k:?}");
            assert_eq!(k["offload_lost"], 0);
            assert!(o.report.migrations["shard_moves"] > 0);
        } else {
            assert_eq!(k["offloaded"], 0);
        }
        alerts.push(k["alerts"]);
    }
    assert!(alerts[0] > 1_000, "{alerts:?}");
    assert_eq!(alerts[0], alerts[1]);
}

/// The load balancer's control component in a run (2 workers, random shard
/// moves): the `[[nf.health]]` schedule is played once whichever worker reaches
/// each entry's time first, the requests are applied where the component is
/// placed, and the report's `nf` counters show where the control work ran and
/// what it cost.
#[test]
fn lb_control_component_in_a_run() {
    let lb = |placement: &str| {
        format!(
            "[[nf]]\nkind = \"lb\"\nplacement = \"{placement}\"\nsnat = [\"192.0.2.10\"]\n\
             [[nf.service]]\nvip = \"10.0.0.100:80\"\nbackends = [\"10.1.0.1:80\", \"10.1.0.2:80\"]\n\
             [[nf.health]]\nat = \"0ms\"\nservice = \"10.0.0.100:80\"\nbackend = \"10.1.0.1:80\"\nup = false\n\
             [[nf.health]]\nat = \"1ms\"\nservice = \"10.0.0.100:80\"\nbackend = \"10.1.0.1:80\"\nup = true\n"
        )
    };
    let t = trace(500, 20_000, 1.1);
    let cfg = RunConfig {
        workers: 2,
        balancer: BalancerKind::Random,
        period: Duration::from_micros(200),
        loops: 2,
        pin: false,
        ..Default::default()
    };
    for placement in ["inline", "core"] {
        let chain = ChainConfig::from_toml(&lb(placement))
            .unwrap()
            .build(Path::new("."))
            .unwrap();
        let o = run(&chain, &t, &cfg).unwrap();
        check(&o, chain.shard_count());
        let k = &o.report.nf["lb"];
        assert_eq!(k["control_requests"], 2, "{k:?}");
        assert_eq!(k["control_failed"], 0);
        let (here, other) = if placement == "core" {
            ("control_core", "control_inline")
        } else {
            ("control_inline", "control_core")
        };
        assert_eq!(
            (k[here], k[other], k["control_pending"]),
            (2, 0, 0),
            "{k:?}"
        );
        assert!(k["table_entries_moved"] > 0);
        // the generated trace never addresses the VIP: every packet passed
        assert_eq!(k["passed"], o.report.packets_in);
    }
}

/// The run's threads carry their role in their names (what `ps -L` and the
/// kernel's per-thread scheduler statistics show), read while they run.
#[test]
fn the_run_threads_are_named_by_role() {
    use std::sync::{Arc, Mutex};
    let chain = ChainConfig::default_chain().build(Path::new(".")).unwrap();
    let t = trace(200, 20_000, 1.1);
    let seen = Arc::new(Mutex::new(Vec::<String>::new()));
    let s = seen.clone();
    // (read at the controller's rounds: every thread is running by then;
    // the trace loops for 100 ms so that there are rounds)
    let cfg = RunConfig {
        workers: 2,
        offloaders: 1,
        pin: false,
        duration: Some(Duration::from_millis(100)),
        period: Duration::from_millis(2),
        progress: Some(runspec::Progress(Arc::new(move |_| {
            let mut names = s.lock().unwrap();
            for task in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
                if let Ok(n) = std::fs::read_to_string(task.path().join("comm")) {
                    names.push(n.trim().to_string());
                }
            }
        }))),
        ..Default::default()
    };
    run(&chain, &t, &cfg).unwrap();
    let names = seen.lock().unwrap();
    for want in [
        "working-0",
        "working-1",
        "offloading-0",
        "controller",
        "nic-model",
    ] {
        assert!(names.iter().any(|n| n == want), "{want} not in {names:?}");
    }
}
