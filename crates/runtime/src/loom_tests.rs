//! Model checking of the shard move with loom (`RUSTFLAGS="--cfg loom"`): a feeder,
//! a controller and two workers run the real handshake — the indirection-table
//! entry and the version published with `Release`, the feeder's acknowledgement —
//! and the real protocol state machines ([`Mover`], [`WorkerMoves`]), in every
//! interleaving loom explores (preemption bound 2). Queues and control channels are
//! modelled with loom mutexes.
//!
//! Checked in every interleaving: the flow's packets are processed in order, each
//! exactly once, by the worker that holds the shard; nothing is left held; the
//! shard ends on the new owner.

use std::collections::VecDeque;

use balance::migrate::{Command, Mover, Received, WorkerMoves};
use balance::ShardId;
use loom::sync::{Arc, Mutex};
use loom::thread;
use steer::IndirectionTable;

use crate::shared::Shared;

#[derive(Clone, Copy, Debug)]
struct Pkt {
    seq: u32,
}

enum Msg {
    Release { shard: ShardId, to: usize },
    Shard { shard: ShardId, state: Vec<u32> },
}

struct Sys {
    shared: Shared,
    queues: [Mutex<VecDeque<Pkt>>; 2],
    inbox: [Mutex<VecDeque<Msg>>; 2],
    arrived: Mutex<Vec<ShardId>>,
    /// Threads to wake: 0 and 1 the workers, 2 the controller. Waiting is
    /// `park` after checking the condition; every producer of work unparks its
    /// consumer (the real runtime polls instead; loom needs waits to be modelled).
    threads: Mutex<[Option<thread::Thread>; 3]>,
}

impl Sys {
    fn register(&self, i: usize) {
        self.threads.lock().unwrap()[i] = Some(thread::current());
    }

    /// No more wake-ups for thread `i` (it is about to join or exit; loom does not
    /// allow unparking a thread blocked in `join`).
    fn deregister(&self, i: usize) {
        self.threads.lock().unwrap()[i] = None;
    }

    fn wake(&self, i: usize) {
        if let Some(t) = &self.threads.lock().unwrap()[i] {
            t.unpark();
        }
    }
}

const PACKETS: u32 = 3;

/// The shard's state: the flow's sequence numbers, as processed.
fn process(state: &mut Vec<u32>, p: Pkt) {
    assert_eq!(
        p.seq as usize,
        state.len(),
        "packets of the flow processed in order, once each"
    );
    state.push(p.seq);
}

/// Sends the shard's state to its new owner and wakes it.
fn hand_over(sys: &Sys, shard: ShardId, to: u16, state: &mut Option<Vec<u32>>) {
    let st = state
        .take()
        .expect("handing over a shard this worker holds");
    sys.inbox[usize::from(to)]
        .lock()
        .unwrap()
        .push_back(Msg::Shard { shard, state: st });
    sys.wake(usize::from(to));
}

fn worker(sys: &Sys, me: usize) -> Option<Vec<u32>> {
    let owns = me == 0;
    let mut moves: WorkerMoves<Pkt> = WorkerMoves::new(if owns { vec![0] } else { vec![] });
    let mut state: Option<Vec<u32>> = owns.then(Vec::new);
    sys.register(me);
    loop {
        let msg = sys.inbox[me].lock().unwrap().pop_front();
        if let Some(m) = msg {
            match m {
                Msg::Release { shard, to } => {
                    let queued = sys.queues[me].lock().unwrap().len() as u64;
                    if let Some((s, to)) = moves.on_release(shard, to as u16, queued) {
                        hand_over(sys, s, to, &mut state);
                    }
                }
                Msg::Shard {
                    shard,
                    state: mut st,
                } => {
                    for p in moves.on_shard(shard) {
                        process(&mut st, p);
                    }
                    state = Some(st);
                    sys.arrived.lock().unwrap().push(shard);
                    sys.wake(2);
                }
            }
            continue;
        }
        let p = sys.queues[me].lock().unwrap().pop_front();
        match p {
            Some(p) => {
                if let Received::Process(p) = moves.on_packet(0, p) {
                    process(state.as_mut().expect("processing needs the shard"), p);
                }
                for (s, to) in moves.on_dequeued() {
                    hand_over(sys, s, to, &mut state);
                }
            }
            None => {
                // read the stop flag first (Acquire, pairing with the controller's
                // Release): after it, every packet ever pushed is visible in the
                // queue — the order the real worker uses
                let stopping = sys.shared.stopping();
                let idle = sys.queues[me].lock().unwrap().is_empty()
                    && sys.inbox[me].lock().unwrap().is_empty();
                if stopping && idle {
                    break;
                }
                if idle {
                    thread::park();
                }
            }
        }
    }
    sys.deregister(me);
    assert_eq!(moves.held(), 0, "nothing left held");
    state
}

#[test]
fn shard_move_under_every_interleaving() {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(2);
    // workers and the controller poll (as they do for real), so executions are long
    b.max_branches = 50_000;
    b.check(|| {
        // 64 buckets, 64 shards: shard 0 is bucket 0, on worker 0
        let table = IndirectionTable::new(64, 1).unwrap();
        let sys = Arc::new(Sys {
            shared: Shared::new(table),
            queues: [Mutex::new(VecDeque::new()), Mutex::new(VecDeque::new())],
            inbox: [Mutex::new(VecDeque::new()), Mutex::new(VecDeque::new())],
            arrived: Mutex::new(Vec::new()),
            threads: Mutex::new([None, None, None]),
        });
        sys.register(2);
        let feeder = {
            let sys = sys.clone();
            thread::spawn(move || {
                for seq in 0..PACKETS {
                    let v = sys.shared.version();
                    let q = usize::from(sys.shared.table.queue_of(0));
                    sys.queues[q].lock().unwrap().push_back(Pkt { seq });
                    sys.shared.ack_version(v);
                    sys.wake(q);
                    sys.wake(2);
                }
                sys.shared.finish_feeding();
                sys.wake(2);
            })
        };
        let workers: Vec<_> = (0..2)
            .map(|w| {
                let sys = sys.clone();
                thread::spawn(move || worker(&sys, w))
            })
            .collect();
        // the controller, on this thread: move shard 0 from worker 0 to worker 1
        let mut mover = Mover::new(0);
        let Ok(Command::Rewrite { shard, to, version }) = mover.begin(0, 0, 1) else {
            unreachable!()
        };
        sys.shared.table.set(usize::from(shard), to);
        sys.shared.publish_version(version);
        loop {
            let mut progressed = false;
            for c in mover.on_feeder_seen(sys.shared.feeder_seen()) {
                if let Command::Release { from, shard, to } = c {
                    sys.inbox[usize::from(from)]
                        .lock()
                        .unwrap()
                        .push_back(Msg::Release {
                            shard,
                            to: usize::from(to),
                        });
                    sys.wake(usize::from(from));
                    progressed = true;
                }
            }
            let arrived: Vec<ShardId> = sys.arrived.lock().unwrap().drain(..).collect();
            for s in arrived {
                assert!(mover.on_arrived(s));
                progressed = true;
            }
            if sys.shared.feeder_done() && mover.in_flight() == 0 {
                sys.shared.stop();
                sys.wake(0);
                sys.wake(1);
                break;
            }
            // an unpark sent since the checks above makes this return at once
            if !progressed {
                thread::park();
            }
        }
        sys.deregister(2);
        feeder.join().unwrap();
        let states: Vec<_> = workers.into_iter().map(|h| h.join().unwrap()).collect();
        assert!(states[0].is_none(), "the old owner gave the shard away");
        let st = states[1].clone().expect("the new owner holds the shard");
        assert_eq!(
            st,
            (0..PACKETS).collect::<Vec<_>>(),
            "every packet processed, in order"
        );
    });
}
