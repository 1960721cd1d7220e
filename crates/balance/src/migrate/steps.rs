//! The step log of the working-core machines: each input with its answer,
//! each action a driver took ([`Step`], [`Did`]), recorded in one global
//! order (`log`, with the `probe` feature). `checks` replays and checks it.

use super::actions::{Action, Due, Order, WorkingStart};
use super::offload::{EntryIdx, Recall, Route, Ticket};
use crate::{CoreId, ShardId};

/// One step of a working core's machine in the step log: an input with what it
/// answered, or an action the driver took from it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// The machine was created.
    Start(WorkingStart),
    /// [`WorkingCore::on_packet`]: run (`process`) or held.
    Packet {
        /// The packet's shard.
        shard: ShardId,
        /// True: run it now.
        process: bool,
    },
    /// [`WorkingCore::sample`].
    Sample {
        /// The shard.
        shard: ShardId,
        /// The flow.
        entry: EntryIdx,
    },
    /// [`WorkingCore::route`] and its answer (`offloadable`: what the chain said,
    /// if asked).
    Route {
        /// The shard.
        shard: ShardId,
        /// The flow, if the lookup found one.
        entry: Option<EntryIdx>,
        /// Its slice.
        slice: u32,
        /// Priority class.
        priority: bool,
        /// When.
        now_ns: u64,
        /// The chain's answer, if asked.
        offloadable: Option<bool>,
        /// The machine's answer.
        route: Route,
    },
    /// [`WorkingCore::pend`].
    Pend {
        /// The recall the packet waits for.
        ticket: Ticket,
        /// Its shard.
        shard: ShardId,
    },
    /// [`WorkingCore::handle_dequeued`].
    Dequeued(usize),
    /// [`WorkingCore::handle_release`].
    Release {
        /// The shard.
        shard: ShardId,
        /// The new owner.
        to: CoreId,
        /// Packets queued then.
        queued: u64,
    },
    /// [`WorkingCore::handle_shard`].
    Shard(ShardId),
    /// [`WorkingCore::handle_ratio`].
    Ratio {
        /// The shard.
        shard: ShardId,
        /// r_s.
        ratio: u32,
    },
    /// [`WorkingCore::handle_offloader`].
    Offloader(Option<CoreId>),
    /// [`WorkingCore::handle_returned`].
    Returned {
        /// The recall.
        ticket: Ticket,
        /// The flows that came back.
        entries: Vec<(ShardId, EntryIdx)>,
    },
    /// [`WorkingCore::handle_time`] and what fell due.
    Time {
        /// When.
        now_ns: u64,
        /// The next window's length.
        window_ns: u64,
        /// What fell due.
        due: Due,
    },
    /// [`WorkingCore::handle_stopping`].
    Stopping,
    /// An action the driver polled.
    Did(Did),
    /// The controller's plan applier was created (its steps are [`Step::Order`]).
    Controller,
    /// An order the plan applier gave.
    Order(Order),
}

/// An [`Action`] as logged (packets counted, not kept).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Did {
    /// [`Action::PushRecall`].
    PushRecall(Recall),
    /// [`Action::SendShard`].
    SendShard {
        /// The shard.
        shard: ShardId,
        /// The new owner.
        to: CoreId,
    },
    /// [`Action::RunHere`] with this many packets.
    RunHere(usize),
    /// [`Action::Arrived`].
    Arrived {
        /// The shard.
        shard: ShardId,
        /// Packets held for it.
        held: u64,
    },
}

impl Did {
    pub(super) fn of<P>(a: &Action<P>) -> Did {
        match a {
            Action::PushRecall(r) => Did::PushRecall(r.clone()),
            Action::SendShard { shard, to } => Did::SendShard {
                shard: *shard,
                to: *to,
            },
            Action::RunHere(p) => Did::RunHere(p.len()),
            Action::Arrived { shard, held } => Did::Arrived {
                shard: *shard,
                held: *held,
            },
        }
    }
}

/// The step log: every [`WorkingCore`]'s steps in one global order, recorded
/// while [`log::start`] is in force and only with the `probe` feature (tests
/// use it to check the drivers; without the feature nothing is recorded).
pub mod log {
    use super::{Step, WorkingStart};

    #[cfg(feature = "probe")]
    mod on {
        use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
        use std::sync::Mutex;

        use super::super::Step;

        // Relaxed: a switch and an id counter; the steps themselves are ordered
        // by the mutex.
        pub static RECORDING: AtomicBool = AtomicBool::new(false);
        pub static NEXT_ID: AtomicU64 = AtomicU64::new(1);
        pub static LOG: Mutex<Vec<(u64, Step)>> = Mutex::new(Vec::new());

        pub fn push(id: u64, s: Step) {
            LOG.lock().unwrap_or_else(|e| e.into_inner()).push((id, s));
        }

        pub fn recording() -> bool {
            RECORDING.load(Relaxed)
        }

        pub fn next_id() -> u64 {
            NEXT_ID.fetch_add(1, Relaxed)
        }
    }

    /// Starts recording (clears the log). No-op without the `probe` feature.
    pub fn start() {
        #[cfg(feature = "probe")]
        {
            on::LOG.lock().unwrap_or_else(|e| e.into_inner()).clear();
            on::RECORDING.store(true, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Stops recording and returns the steps, in the order they happened:
    /// (machine id, step). Empty without the `probe` feature.
    pub fn take() -> Vec<(u64, Step)> {
        #[cfg(feature = "probe")]
        {
            on::RECORDING.store(false, std::sync::atomic::Ordering::Relaxed);
            std::mem::take(&mut *on::LOG.lock().unwrap_or_else(|e| e.into_inner()))
        }
        #[cfg(not(feature = "probe"))]
        Vec::new()
    }

    pub(in crate::migrate) fn new_machine(_start: &WorkingStart) -> u64 {
        #[cfg(feature = "probe")]
        if on::recording() {
            let id = on::next_id();
            on::push(id, Step::Start(_start.clone()));
            return id;
        }
        0
    }

    pub(in crate::migrate) fn new_controller() -> u64 {
        #[cfg(feature = "probe")]
        if on::recording() {
            let id = on::next_id();
            on::push(id, Step::Controller);
            return id;
        }
        0
    }

    /// Logs a step of machine `id` (0: not recorded).
    #[inline]
    pub(in crate::migrate) fn step(_id: u64, _s: impl FnOnce() -> Step) {
        #[cfg(feature = "probe")]
        if _id != 0 && on::recording() {
            on::push(_id, _s());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::migrate::checks::check_drivers;
    use crate::migrate::RATIO_ONE;

    fn start(core: CoreId, owned: Vec<ShardId>) -> Step {
        Step::Start(WorkingStart {
            core,
            shards: 2,
            owned,
            offloader: None,
            ratio: RATIO_ONE,
            heaviest: false,
            now_ns: 0,
            window_ns: 1_000_000_000,
        })
    }

    fn hand_over_log() -> Vec<(u64, Step)> {
        vec![
            (1, start(0, vec![0])),
            (2, start(1, vec![])),
            (
                2,
                Step::Packet {
                    shard: 0,
                    process: false,
                },
            ),
            (2, Step::Dequeued(1)),
            (
                1,
                Step::Release {
                    shard: 0,
                    to: 1,
                    queued: 0,
                },
            ),
            (1, Step::Did(Did::SendShard { shard: 0, to: 1 })),
            (2, Step::Shard(0)),
            (2, Step::Did(Did::RunHere(1))),
            (2, Step::Did(Did::Arrived { shard: 0, held: 1 })),
        ]
    }

    #[test]
    fn a_faithful_log_passes() {
        let ex = check_drivers(&hand_over_log()).unwrap();
        assert_eq!(
            (ex.machines, ex.hand_overs, ex.held, ex.packets),
            (2, 1, 1, 1)
        );
    }

    #[test]
    fn driver_mistakes_are_caught() {
        // the receiving driver forgot to run the held packets
        let mut l = hand_over_log();
        l.remove(7);
        assert!(check_drivers(&l).unwrap_err().contains("Arrived"));
        // a packet taken but never reported dequeued (queue cycling would stall)
        let mut l = hand_over_log();
        l.remove(3);
        assert!(check_drivers(&l).unwrap_err().contains("reported dequeued"));
        // a shard delivered to the wrong core
        let mut l = hand_over_log();
        l[5] = (1, Step::Did(Did::SendShard { shard: 0, to: 0 }));
        assert!(check_drivers(&l).is_err());
        // the driver sent the shard although the machine did not say so
        let mut l = hand_over_log();
        l.swap(4, 5);
        assert!(check_drivers(&l).is_err());
    }
}
