//! Model checking of the shard move with loom (`RUSTFLAGS="--cfg loom"`): a feeder,
//! a controller and two workers run the real handshake — the indirection-table
//! entry and the version published with `Release`, the feeder's acknowledgement —
//! and the real protocol state machines ([`PlanApplier`] on the controller,
//! [`WorkingCore`] on each worker — the ones the runtime and the simulator drive),
//! in every interleaving loom explores (preemption bound 2). Queues and control
//! channels are modelled with loom mutexes.
//!
//! Checked in every interleaving: the flow's packets are processed in order, each
//! exactly once, by the worker that holds the shard; nothing is left held; the
//! shard ends on the new owner.

use std::collections::VecDeque;

use balance::migrate::{Action, Order, PlanApplier, Received, WorkingCore, WorkingStart};
use balance::{Plan, ShardId};
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

/// Shards in the model (64 buckets, one shard each; shard 0 is bucket 0).
const SHARDS: usize = 64;

/// A working core's machine as the runtime starts it.
fn machine<P>(
    core: u16,
    owned: Vec<ShardId>,
    offloader: Option<u16>,
    ratio: u32,
) -> WorkingCore<P> {
    WorkingCore::new(WorkingStart {
        core,
        shards: SHARDS,
        owned,
        offloader,
        ratio,
        heaviest: false,
        now_ns: 0,
        window_ns: u64::MAX / 2,
    })
}

/// Carries out the machine's actions (no offloading in this model).
fn do_actions(sys: &Sys, core: &mut WorkingCore<Pkt>, state: &mut Option<Vec<u32>>) {
    while let Some(a) = core.poll_action() {
        match a {
            Action::SendShard { shard, to } => hand_over(sys, shard, to, state),
            Action::RunHere(pkts) => {
                for p in pkts {
                    process(state.as_mut().expect("held packets run with the shard"), p);
                }
            }
            Action::Arrived { shard, .. } => {
                sys.arrived.lock().unwrap().push(shard);
                sys.wake(2);
            }
            Action::PushRecall(_) => unreachable!("nothing is offloaded here"),
        }
    }
}

fn worker(sys: &Sys, me: usize) -> Option<Vec<u32>> {
    let owns = me == 0;
    let mut core: WorkingCore<Pkt> =
        machine(me as u16, if owns { vec![0] } else { vec![] }, None, 0);
    let mut state: Option<Vec<u32>> = owns.then(Vec::new);
    sys.register(me);
    loop {
        let msg = sys.inbox[me].lock().unwrap().pop_front();
        if let Some(m) = msg {
            match m {
                Msg::Release { shard, to } => {
                    let queued = sys.queues[me].lock().unwrap().len() as u64;
                    core.handle_release(shard, to as u16, queued);
                }
                Msg::Shard { shard, state: st } => {
                    state = Some(st);
                    core.handle_shard(shard);
                }
            }
            do_actions(sys, &mut core, &mut state);
            continue;
        }
        let p = sys.queues[me].lock().unwrap().pop_front();
        match p {
            Some(p) => {
                if let Received::Process(p) = core.on_packet(0, p) {
                    process(state.as_mut().expect("processing needs the shard"), p);
                }
                core.handle_dequeued(1);
                do_actions(sys, &mut core, &mut state);
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
    assert_eq!(core.held(), 0, "nothing left held");
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
            shared: Shared::new(table, 2),
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
        let owner = (0..SHARDS).map(|s| (s % 2) as u16).collect();
        let mut apply = PlanApplier::new(owner, 0, vec![None, None], 0);
        let plan = Plan {
            moves: vec![(0, 1)],
            ..Plan::default()
        };
        let [Order::Rewrite { shard, to, version }] = apply.apply(&plan, 0)[..] else {
            unreachable!()
        };
        sys.shared.table.set(usize::from(shard), to);
        sys.shared.publish_version(version);
        loop {
            let mut progressed = false;
            for c in apply.on_nic_seen(sys.shared.feeder_seen()) {
                if let Order::Release { from, shard, to } = c {
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
                assert!(apply.on_arrived(s, 0, 0, 0));
                progressed = true;
            }
            if sys.shared.feeder_done() && apply.in_flight() == 0 {
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

/// Model checking of the offload-ratio change (Dyssect Alg. 2–3 as flowshift does
/// them: lease, recall marker, pending queue): a feeder, the working core, its
/// offloading core and the controller. The working core runs the real
/// [`WorkingCore`]; r_s starts at 1 (the flow is leased with its first packet),
/// the controller lowers it to 0 (a recall) and raises it again (a new lease) while
/// packets flow. The flow's state is a value that moves between the two cores.
///
/// Checked in every interleaving: the flow's packets are processed in order, each
/// exactly once, always by the core that holds the state; nothing is left pending;
/// the state ends at home.
mod offload {
    use std::collections::VecDeque;

    use balance::migrate::offload::Ticket;
    use balance::migrate::{Action, Received, Route, WorkingCore, RATIO_ONE};
    use loom::sync::{Arc, Condvar, Mutex};
    use loom::thread;
    use steer::IndirectionTable;

    use super::{machine, process, Pkt, PACKETS};
    use crate::shared::Shared;

    enum ToWorking {
        SetRatio(u32),
        Returned { ticket: Ticket, state: Vec<u32> },
    }

    enum Job {
        Packet { p: Pkt, lease: Option<Vec<u32>> },
        Recall { ticket: Ticket },
    }

    struct Sys {
        shared: Shared,
        nic: Mutex<VecDeque<Pkt>>,
        inbox: Mutex<VecDeque<ToWorking>>,
        ring: Mutex<VecDeque<Job>>,
        working_done: Mutex<bool>,
        /// Wake-up flags of the working core (0) and the offloading core (1), with a
        /// condition variable: a wake is never lost (loom's `unpark` of a thread
        /// blocked on a mutex is consumed by that mutex, unlike std's token).
        woken: Mutex<[bool; 2]>,
        cv: Condvar,
    }

    impl Sys {
        fn wake(&self, i: usize) {
            self.woken.lock().unwrap()[i] = true;
            self.cv.notify_all();
        }
        /// Blocks until woken since the last wait returned.
        fn wait(&self, i: usize) {
            let mut w = self.woken.lock().unwrap();
            while !w[i] {
                w = self.cv.wait(w).unwrap();
            }
            w[i] = false;
        }
    }

    /// Carries out the working core's actions.
    fn do_actions(sys: &Sys, core: &mut WorkingCore<Pkt>, state: &mut Option<Vec<u32>>) {
        while let Some(a) = core.poll_action() {
            match a {
                Action::PushRecall(r) => {
                    sys.ring
                        .lock()
                        .unwrap()
                        .push_back(Job::Recall { ticket: r.ticket });
                    sys.wake(1);
                }
                Action::RunHere(pkts) => {
                    for p in pkts {
                        process(state.as_mut().expect("pending packets run at home"), p);
                    }
                }
                Action::SendShard { .. } | Action::Arrived { .. } => {
                    unreachable!("no shard moves here")
                }
            }
        }
    }

    fn working(sys: &Sys) -> Option<Vec<u32>> {
        let mut core: WorkingCore<Pkt> = machine(0, vec![0], Some(1), RATIO_ONE);
        // the flow's entry exists (a hit) and its state is at home
        let mut state: Option<Vec<u32>> = Some(Vec::new());
        loop {
            let msg = sys.inbox.lock().unwrap().pop_front();
            if let Some(m) = msg {
                match m {
                    ToWorking::SetRatio(r) => core.handle_ratio(0, r),
                    ToWorking::Returned { ticket, state: st } => {
                        assert!(state.is_none(), "the state is in one place");
                        state = Some(st);
                        core.handle_returned(ticket, &[(0, 0)]);
                    }
                }
                do_actions(sys, &mut core, &mut state);
                continue;
            }
            let p = sys.nic.lock().unwrap().pop_front();
            match p {
                Some(p) => {
                    let Received::Process(p) = core.on_packet(0, p) else {
                        unreachable!("the shard stays here")
                    };
                    match core.route(0, Some(0), 0, false, 0, || true) {
                        Route::Local => process(state.as_mut().expect("the state is home"), p),
                        Route::Offload { lease, .. } => {
                            let lease = lease.then(|| state.take().expect("leased from home"));
                            sys.ring.lock().unwrap().push_back(Job::Packet { p, lease });
                            sys.wake(1);
                        }
                        Route::Pend(t) => core.pend(t, 0, p),
                    }
                    core.handle_dequeued(1);
                    do_actions(sys, &mut core, &mut state);
                }
                None => {
                    // stop flag first (Acquire): then every packet pushed is visible
                    let stopping = sys.shared.stopping();
                    let idle =
                        sys.nic.lock().unwrap().is_empty() && sys.inbox.lock().unwrap().is_empty();
                    if stopping && idle {
                        if core.finished() {
                            break;
                        }
                        core.handle_stopping();
                        do_actions(sys, &mut core, &mut state);
                    }
                    if idle {
                        sys.wait(0);
                    }
                }
            }
        }
        assert_eq!(core.held(), 0, "nothing left pending");
        *sys.working_done.lock().unwrap() = true;
        sys.wake(1);
        state
    }

    fn offloading(sys: &Sys) {
        let mut held: Option<Vec<u32>> = None;
        loop {
            let job = sys.ring.lock().unwrap().pop_front();
            match job {
                Some(Job::Packet { p, lease }) => {
                    if let Some(l) = lease {
                        assert!(held.is_none(), "leased twice");
                        held = Some(l);
                    }
                    process(
                        held.as_mut().expect("an offloaded packet finds its state"),
                        p,
                    );
                }
                Some(Job::Recall { ticket }) => {
                    let state = held.take().expect("a recalled flow is here");
                    sys.inbox
                        .lock()
                        .unwrap()
                        .push_back(ToWorking::Returned { ticket, state });
                    sys.wake(0);
                }
                None => {
                    let done = *sys.working_done.lock().unwrap();
                    if done && sys.ring.lock().unwrap().is_empty() {
                        break;
                    }
                    sys.wait(1);
                }
            }
        }
        assert!(held.is_none(), "every leased state went home");
    }

    #[test]
    fn offload_ratio_change_under_every_interleaving() {
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(2);
        b.max_branches = 50_000;
        b.check(|| {
            let sys = Arc::new(Sys {
                shared: Shared::new(IndirectionTable::new(64, 1).unwrap(), 2),
                nic: Mutex::new(VecDeque::new()),
                inbox: Mutex::new(VecDeque::new()),
                ring: Mutex::new(VecDeque::new()),
                working_done: Mutex::new(false),
                woken: Mutex::new([false, false]),
                cv: Condvar::new(),
            });
            let feeder = {
                let sys = sys.clone();
                thread::spawn(move || {
                    for seq in 0..PACKETS {
                        sys.nic.lock().unwrap().push_back(Pkt { seq });
                        sys.wake(0);
                    }
                })
            };
            let w = {
                let sys = sys.clone();
                thread::spawn(move || working(&sys))
            };
            let o = {
                let sys = sys.clone();
                thread::spawn(move || offloading(&sys))
            };
            // the controller: r_s down to 0, then up again, while packets flow
            for r in [0, RATIO_ONE] {
                sys.inbox.lock().unwrap().push_back(ToWorking::SetRatio(r));
                sys.wake(0);
            }
            feeder.join().unwrap();
            sys.shared.stop();
            sys.wake(0);
            let state = w.join().unwrap();
            o.join().unwrap();
            assert_eq!(
                state.expect("the state ends at home"),
                (0..PACKETS).collect::<Vec<_>>(),
                "every packet processed, in order"
            );
        });
    }
}
