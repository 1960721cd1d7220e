//! The shard-move protocol under random interleavings of a NIC feeder, a controller
//! (driving `PlanApplier`) and 2–4 workers (each driving a `WorkingCore`, the
//! machines the runtime and the simulator drive): per flow, packets are processed in order, exactly once, and only
//! by the worker that holds the flow's shard at that moment — over hundreds of
//! random schedules with many concurrent moves and a NIC that applies table
//! rewrites late.

use std::collections::{BTreeMap, HashMap, VecDeque};

use balance::migrate::{Action, Order, PlanApplier, Received, WorkingCore, WorkingStart};
use balance::{CoreId, Plan, ShardId, Version};
use proptest::prelude::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Pkt {
    flow: u32,
    seq: u32,
}

/// A shard's state: per flow, the last sequence number processed. Moved by value.
type ShardState = HashMap<u32, u32>;

enum Msg {
    Release { shard: ShardId, to: CoreId },
    Shard { shard: ShardId, state: ShardState },
}

struct Worker {
    queue: VecDeque<Pkt>,
    inbox: VecDeque<Msg>,
    core: WorkingCore<Pkt>,
    shards: BTreeMap<ShardId, ShardState>,
    processed: u64,
}

struct Params {
    seed: u64,
    workers: usize,
    shards: usize,
    flows: u32,
    per_flow: u32,
    move_prob: f64,
    nic_delay: f64,
}

struct Outcome {
    processed: u64,
    moves: u64,
    max_held: u64,
}

fn shard_of(flow: u32, shards: usize) -> ShardId {
    (flow.wrapping_mul(2_654_435_761) >> 7) as ShardId % shards as ShardId
}

fn run(p: &Params) -> Outcome {
    let mut rng = ChaCha8Rng::seed_from_u64(p.seed);
    // the trace: flows interleaved at random, each in sequence order
    let mut next_seq = vec![0u32; p.flows as usize];
    let mut trace = Vec::new();
    let mut live: Vec<u32> = (0..p.flows).collect();
    while !live.is_empty() {
        let i = rng.gen_range(0..live.len());
        let f = live[i];
        trace.push(Pkt {
            flow: f,
            seq: next_seq[f as usize],
        });
        next_seq[f as usize] += 1;
        if next_seq[f as usize] == p.per_flow {
            live.swap_remove(i);
        }
    }
    // shard s starts on worker s mod W
    let mut table: Vec<CoreId> = (0..p.shards).map(|s| (s % p.workers) as CoreId).collect();
    let mut version: Version = 0;
    let mut workers: Vec<Worker> = (0..p.workers)
        .map(|w| {
            let mine: Vec<ShardId> = (0..p.shards as ShardId)
                .filter(|s| table[*s as usize] as usize == w)
                .collect();
            Worker {
                queue: VecDeque::new(),
                inbox: VecDeque::new(),
                core: WorkingCore::new(WorkingStart {
                    core: w as CoreId,
                    shards: p.shards,
                    owned: mine.clone(),
                    offloader: None,
                    ratio: 0,
                    heaviest: false,
                    now_ns: 0,
                    window_ns: u64::MAX / 2,
                }),
                shards: mine.iter().map(|s| (*s, ShardState::new())).collect(),
                processed: 0,
            }
        })
        .collect();
    let mut apply = PlanApplier::new(table.clone(), 0, vec![None; p.workers], 0);
    let mut arrived: VecDeque<ShardId> = VecDeque::new();
    // the NIC's copy of the table (applied late with probability nic_delay per step)
    let mut nic_table = table.clone();
    let mut nic_version: Version = 0;
    let mut fed = 0usize;
    let (mut moves_begun, mut max_held) = (0u64, 0u64);

    let process = |w: &mut Worker, pkt: Pkt, shard: ShardId| {
        let st = w
            .shards
            .get_mut(&shard)
            .expect("processing a shard this worker does not hold");
        let last = st.get(&pkt.flow).copied();
        let want = last.map_or(0, |l| l + 1);
        assert_eq!(
            pkt.seq, want,
            "flow {} out of order or duplicated",
            pkt.flow
        );
        st.insert(pkt.flow, pkt.seq);
        w.processed += 1;
    };

    let total = trace.len() as u64;
    for _step in 0..10_000_000u64 {
        let done_feeding = fed == trace.len();
        let idle = done_feeding
            && apply.in_flight() == 0
            && arrived.is_empty()
            && workers
                .iter()
                .all(|w| w.queue.is_empty() && w.inbox.is_empty());
        if idle {
            break;
        }
        match rng.gen_range(0..10) {
            // NIC: maybe apply the current table, then steer one packet with its copy
            0..=2 => {
                if !rng.gen_bool(p.nic_delay) {
                    nic_table.clone_from(&table);
                    nic_version = version;
                }
                if fed < trace.len() {
                    let pkt = trace[fed];
                    fed += 1;
                    let q = nic_table[shard_of(pkt.flow, p.shards) as usize];
                    workers[q as usize].queue.push_back(pkt);
                }
            }
            // controller
            3 => {
                for c in apply.on_nic_seen(nic_version) {
                    match c {
                        Order::Release { from, shard, to } => workers[from as usize]
                            .inbox
                            .push_back(Msg::Release { shard, to }),
                        other => panic!("unexpected {other:?}"),
                    }
                }
                while let Some(s) = arrived.pop_front() {
                    assert!(
                        apply.on_arrived(s, 0, 0, 0),
                        "arrival of a shard that was not moving"
                    );
                }
                if !done_feeding && rng.gen_bool(p.move_prob) {
                    let s = rng.gen_range(0..p.shards) as ShardId;
                    let to = rng.gen_range(0..p.workers) as CoreId;
                    let plan = Plan {
                        moves: vec![(s, to)],
                        ..Plan::default()
                    };
                    for o in apply.apply(&plan, 0) {
                        let Order::Rewrite {
                            shard,
                            to,
                            version: v,
                        } = o
                        else {
                            panic!("unexpected {o:?}")
                        };
                        table[shard as usize] = to;
                        version = v;
                        moves_begun += 1;
                    }
                }
            }
            // a worker: a control message first, else one packet
            _ => {
                let w = rng.gen_range(0..p.workers);
                if let Some(m) = workers[w].inbox.pop_front() {
                    match m {
                        Msg::Release { shard, to } => {
                            let qlen = workers[w].queue.len() as u64;
                            workers[w].core.handle_release(shard, to, qlen);
                        }
                        Msg::Shard { shard, state } => {
                            let wk = &mut workers[w];
                            assert!(
                                wk.shards.insert(shard, state).is_none(),
                                "shard {shard} on two cores"
                            );
                            wk.core.handle_shard(shard);
                        }
                    }
                } else if let Some(pkt) = workers[w].queue.pop_front() {
                    let shard = shard_of(pkt.flow, p.shards);
                    let wk = &mut workers[w];
                    if let Received::Process(pkt) = wk.core.on_packet(shard, pkt) {
                        process(wk, pkt, shard);
                    }
                    max_held = max_held.max(wk.core.held());
                    wk.core.handle_dequeued(1);
                }
                // what the machine says to do
                let mut sends = Vec::new();
                let wk = &mut workers[w];
                while let Some(a) = wk.core.poll_action() {
                    match a {
                        Action::SendShard { shard, to } => {
                            let state = wk
                                .shards
                                .remove(&shard)
                                .expect("handing over a shard this worker holds");
                            sends.push((to, Msg::Shard { shard, state }));
                        }
                        Action::RunHere(held) => {
                            for pkt in held {
                                let shard = shard_of(pkt.flow, p.shards);
                                process(wk, pkt, shard);
                            }
                        }
                        Action::Arrived { shard, .. } => arrived.push_back(shard),
                        Action::PushRecall(r) => panic!("nothing offloaded: {r:?}"),
                    }
                }
                for (to, m) in sends {
                    workers[to as usize].inbox.push_back(m);
                }
            }
        }
    }
    let processed: u64 = workers.iter().map(|w| w.processed).sum();
    assert_eq!(processed, total, "every packet processed exactly once");
    assert!(workers
        .iter()
        .all(|w| w.core.held() == 0 && w.core.finished()));
    // each shard is on exactly one worker, the one the table names, and every flow
    // ended at its last packet
    for s in 0..p.shards as ShardId {
        let holders: Vec<usize> = (0..p.workers)
            .filter(|w| workers[*w].shards.contains_key(&s))
            .collect();
        assert_eq!(holders, vec![table[s as usize] as usize], "shard {s}");
    }
    for w in &workers {
        for st in w.shards.values() {
            assert!(st.values().all(|last| *last == p.per_flow - 1));
        }
    }
    assert_eq!(apply.stats().move_ns.len() as u64, moves_begun);
    assert_eq!(apply.stats().shard_moves, moves_begun);
    Outcome {
        processed,
        moves: moves_begun,
        max_held,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]
    #[test]
    fn random_schedules_keep_order_and_ownership(
        seed in any::<u64>(),
        workers in 2usize..=4,
        shards in prop_oneof![Just(4usize), Just(8), Just(16)],
        move_prob in 0.05f64..0.9,
        nic_delay in prop_oneof![Just(0.0f64), 0.0f64..0.95],
    ) {
        let o = run(&Params { seed, workers, shards, flows: 24, per_flow: 30, move_prob, nic_delay });
        prop_assert_eq!(o.processed, 24 * 30);
    }
}

#[test]
fn many_moves_with_a_slow_nic() {
    let o = run(&Params {
        seed: 7,
        workers: 3,
        shards: 8,
        flows: 200,
        per_flow: 200,
        move_prob: 0.5,
        nic_delay: 0.9,
    });
    assert_eq!(o.processed, 40_000);
    assert!(o.moves > 1_000, "{} moves", o.moves);
    assert!(o.max_held > 0, "packets were held during moves");
}
