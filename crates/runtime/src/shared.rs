//! What the feeder, the workers and the controller share: the indirection table and
//! a few atomics. Each ordering names the operation it pairs with.

use std::sync::atomic::Ordering;
use std::time::Instant;

use balance::Version;
use steer::IndirectionTable;

use crate::sync::{AtomicBool, AtomicU64};

pub(crate) struct Shared {
    pub table: IndirectionTable,
    /// Table version, bumped by the controller after rewriting entries.
    version: AtomicU64,
    /// The last version the feeder steered a whole burst with (`u64::MAX` once it
    /// has finished: no packet can be steered by any table any more).
    feeder_seen: AtomicU64,
    feeder_done: AtomicBool,
    stop: AtomicBool,
    aborted: AtomicBool,
    /// Why the input failed (an interface that went away): the run then ends
    /// as if stopped, and reports it.
    input_failure: std::sync::OnceLock<String>,
    pub start: Instant,
    /// The wall clock (ns since the epoch) at `start`: kernel receive times
    /// are on it.
    wall_start_ns: u64,
    /// Per working core's queue, packets the NIC model dropped because it
    /// was full (a NIC's per-queue drop counter: the balancers' `core_drops`).
    queue_drops: Box<[crate::sync::AtomicU64]>,
}

/// The wall clock, ns since the epoch.
fn wall_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// Aborts the run if the thread holding it panics, so the other threads stop
/// waiting for it (instead of spinning forever on its ring) and the panic surfaces
/// when the run joins its threads.
pub(crate) struct AbortOnPanic(pub std::sync::Arc<Shared>);

impl Drop for AbortOnPanic {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.abort();
        }
    }
}

impl Shared {
    /// State shared by a run's threads, steering by `table`, with a drop counter
    /// for each of `queues` working cores' queues.
    pub fn new(table: IndirectionTable, queues: usize) -> Shared {
        Shared {
            table,
            version: AtomicU64::new(0),
            feeder_seen: AtomicU64::new(0),
            feeder_done: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            aborted: AtomicBool::new(false),
            input_failure: std::sync::OnceLock::new(),
            start: Instant::now(),
            wall_start_ns: wall_ns(),
            queue_drops: (0..queues)
                .map(|_| crate::sync::AtomicU64::new(0))
                .collect(),
        }
    }

    /// The NIC model dropped a packet for queue `q`, full.
    pub fn count_queue_drop(&self, q: usize) {
        if let Some(c) = self.queue_drops.get(q) {
            // Relaxed: a counter the controller reads once a period; it
            // orders no other memory and pairs with nothing
            c.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Packets dropped so far for each of the first `queues` queues.
    pub fn queue_drops(&self, queues: usize) -> Vec<u64> {
        self.queue_drops
            .iter()
            .take(queues)
            // Relaxed: see `count_queue_drop`
            .map(|c| c.load(std::sync::atomic::Ordering::Relaxed))
            .collect()
    }

    /// A kernel receive time (wall clock ns, [`netio::RxBatch::stamp`]) on
    /// the runtime's clock; none (0): now.
    pub fn kernel_time(&self, stamp: u64) -> u64 {
        if stamp == 0 {
            return self.now_ns();
        }
        stamp.saturating_sub(self.wall_start_ns)
    }

    /// Ends the input (the first failure is kept).
    pub fn fail_input(&self, why: String) {
        let _ = self.input_failure.set(why);
    }

    /// Why the input failed, if it did.
    pub fn input_failure(&self) -> Option<&String> {
        self.input_failure.get()
    }

    /// ns since the run started: the runtime's clock for arrival stamps and NF time.
    pub fn now_ns(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }

    /// Controller: publish a table version after rewriting its entries.
    /// `Release` pairs with the `Acquire` in [`version`](Self::version): a feeder that
    /// sees `v` also sees the entries written before.
    pub fn publish_version(&self, v: Version) {
        self.version.store(v, Ordering::Release);
    }

    /// Feeder: the table version to steer the next burst with (see `publish_version`).
    pub fn version(&self) -> Version {
        self.version.load(Ordering::Acquire)
    }

    /// Feeder: every packet steered with a table older than `v` has been pushed.
    /// `Release` pairs with the `Acquire` in [`feeder_seen`](Self::feeder_seen): the
    /// controller that sees `v` (and the worker it then signals) sees those pushes.
    pub fn ack_version(&self, v: Version) {
        self.feeder_seen.store(v, Ordering::Release);
    }

    /// Controller: the last version the feeder acknowledged.
    pub fn feeder_seen(&self) -> Version {
        self.feeder_seen.load(Ordering::Acquire)
    }

    /// Feeder: all packets pushed. `Release` pairs with the `Acquire` in
    /// [`feeder_done`](Self::feeder_done).
    pub fn finish_feeding(&self) {
        self.feeder_seen.store(u64::MAX, Ordering::Release);
        self.feeder_done.store(true, Ordering::Release);
    }

    /// Controller: has the feeder finished?
    pub fn feeder_done(&self) -> bool {
        self.feeder_done.load(Ordering::Acquire)
    }

    /// Controller: no packet and no move will come any more. `Release` pairs with
    /// the `Acquire` in [`stopping`](Self::stopping): a worker that sees it sees the
    /// feeder's last pushes and the controller's last messages.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Release);
    }

    /// Worker: drain and exit?
    pub fn stopping(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    /// A thread panicked: everyone gives up. Nothing is published through it, so
    /// `Relaxed` (paired with the `Relaxed` load in [`aborted`](Self::aborted)).
    pub fn abort(&self) {
        self.aborted.store(true, Ordering::Relaxed);
    }

    /// Has a thread panicked?
    pub fn aborted(&self) -> bool {
        self.aborted.load(Ordering::Relaxed)
    }
}
