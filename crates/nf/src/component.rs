//! Components of an NF that run on another core (GranularNF §3): the NF is split
//! into a *data component*, which stays in the chain on the worker cores and
//! handles every packet, and a *control* or *offloading component* — here a
//! thread of its own — that the data components reach through a message ring.
//!
//! - [`Placement`] is configuration: `inline` (the NF does everything on the
//!   worker, no component thread), `core` (the component runs on its own
//!   core) or, where an NF supports it, `auto` (the director moves it between
//!   the two while traffic flows).
//! - [`Remote`] is the component thread and its ring. Any number of data
//!   components [`submit`](Remote::submit) jobs; the ring is a bounded lock-free
//!   MPMC queue, so a job is never waited for: when the ring is full `submit`
//!   hands the job back at once and the data component counts the loss. The
//!   queue is linearizable, so jobs submitted one after another (e.g. the packets
//!   of one flow, even when the flow moves to another worker in between, since
//!   the move orders the two workers' submissions) are handled in that order.
//! - The thread sleeps when the ring stays empty and is woken by the next
//!   submission; it stops (after handling what was queued) when the `Remote` is
//!   dropped.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_queue::ArrayQueue;

/// Where an NF's component runs (in a config, `inline` or `core`).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Placement {
    /// On the worker, inside the NF: no component thread.
    #[default]
    Inline,
    /// On a core of its own, reached through a ring.
    Core,
    /// Where the director ([`crate::director`]) decides, changed while traffic
    /// flows (the load balancer's control component).
    Auto,
}

impl Placement {
    /// Parses `inline` or `core`.
    pub fn parse(s: &str) -> Option<Placement> {
        match s {
            "inline" => Some(Placement::Inline),
            "core" => Some(Placement::Core),
            "auto" => Some(Placement::Auto),
            _ => None,
        }
    }

    /// `Inline` for 0 component cores, else `Core`.
    pub fn of_cores(k: usize) -> Placement {
        if k == 0 {
            Placement::Inline
        } else {
            Placement::Core
        }
    }

    /// A number of component cores in words, for messages and reports:
    /// `inline`, `core`, `3 cores`.
    pub fn cores_name(k: usize) -> String {
        match k {
            0 => "inline".into(),
            1 => "core".into(),
            k => format!("{k} cores"),
        }
    }

    /// The name in configs and reports.
    pub fn name(self) -> &'static str {
        match self {
            Placement::Inline => "inline",
            Placement::Core => "core",
            Placement::Auto => "auto",
        }
    }
}

struct Flags {
    stop: AtomicBool,
    sleeping: AtomicBool,
    submitted: AtomicU64,
    handled: AtomicU64,
}

/// A component thread and the ring that feeds it. See the module documentation.
pub struct Remote<J: Send + 'static> {
    ring: Arc<ArrayQueue<J>>,
    flags: Arc<Flags>,
    thread: Option<JoinHandle<()>>,
}

impl<J: Send + 'static> Remote<J> {
    /// Starts the component thread `name`, which calls `handle(job)` for every job
    /// in submission order, with a ring of `capacity` jobs.
    pub fn spawn(
        name: &str,
        capacity: usize,
        mut handle: impl FnMut(J) + Send + 'static,
    ) -> std::io::Result<Remote<J>> {
        let ring = Arc::new(ArrayQueue::new(capacity.max(1)));
        let flags = Arc::new(Flags {
            stop: AtomicBool::new(false),
            sleeping: AtomicBool::new(false),
            submitted: AtomicU64::new(0),
            handled: AtomicU64::new(0),
        });
        let (r, f) = (ring.clone(), flags.clone());
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                let mut idle = 0u32;
                loop {
                    if let Some(job) = r.pop() {
                        idle = 0;
                        handle(job);
                        // Release: pairs with the Acquire in `handled()`, so a
                        // reader that sees the count also sees the job's effects.
                        f.handled.fetch_add(1, Ordering::Release);
                        continue;
                    }
                    // Acquire: pairs with the Release store in `Drop`; every job
                    // pushed before the stop was visible is popped first (the
                    // ring was just seen empty).
                    if f.stop.load(Ordering::Acquire) {
                        break;
                    }
                    idle += 1;
                    if idle < 64 {
                        std::hint::spin_loop();
                        continue;
                    }
                    // SeqCst: orders this store before the re-check of the ring
                    // below, against the submitter's push then SeqCst load of
                    // `sleeping` — one of the two sees the other, so a job is never
                    // left unseen while the thread sleeps (the timeout bounds it
                    // anyway).
                    f.sleeping.store(true, Ordering::SeqCst);
                    if r.is_empty() && !f.stop.load(Ordering::SeqCst) {
                        std::thread::park_timeout(Duration::from_millis(1));
                    }
                    f.sleeping.store(false, Ordering::SeqCst);
                }
            })?;
        Ok(Remote {
            ring,
            flags,
            thread: Some(thread),
        })
    }

    /// Queues a job without waiting: `Err(job)` when the ring is full.
    #[inline]
    pub fn submit(&self, job: J) -> Result<(), J> {
        self.ring.push(job)?;
        // Relaxed: a statistic; `wait_idle` compares it with `handled` only after
        // the submitter's own later operations.
        self.flags.submitted.fetch_add(1, Ordering::Relaxed);
        // SeqCst: see the thread's `sleeping` store.
        if self.flags.sleeping.load(Ordering::SeqCst) {
            if let Some(t) = &self.thread {
                t.thread().unpark();
            }
        }
        Ok(())
    }

    /// Jobs waiting in the ring.
    pub fn pending(&self) -> usize {
        self.ring.len()
    }

    /// The ring's capacity.
    pub fn capacity(&self) -> usize {
        self.ring.capacity()
    }

    /// Jobs accepted so far.
    pub fn submitted(&self) -> u64 {
        self.flags.submitted.load(Ordering::Relaxed)
    }

    /// Jobs handled so far.
    pub fn handled(&self) -> u64 {
        // Acquire: pairs with the Release increment after each job.
        self.flags.handled.load(Ordering::Acquire)
    }

    /// Waits until every job submitted so far has been handled (for reports and
    /// tests); false on timeout.
    pub fn wait_idle(&self, timeout: Duration) -> bool {
        let want = self.submitted();
        let t = Instant::now();
        while self.handled() < want {
            if t.elapsed() > timeout {
                return false;
            }
            if let Some(th) = &self.thread {
                th.thread().unpark();
            }
            std::thread::sleep(Duration::from_micros(100));
        }
        true
    }
}

impl<J: Send + 'static> Drop for Remote<J> {
    fn drop(&mut self) {
        // Release: pairs with the thread's Acquire load; it drains the ring first.
        self.flags.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[test]
    fn jobs_are_handled_in_order_from_many_submitters() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = seen.clone();
        let r = Arc::new(
            Remote::spawn("test-component", 1024, move |j: (u32, u32)| {
                s.lock().unwrap().push(j)
            })
            .unwrap(),
        );
        let mut hs = Vec::new();
        for w in 0..3u32 {
            let r = r.clone();
            hs.push(std::thread::spawn(move || {
                let mut lost = 0;
                for i in 0..20_000u32 {
                    if r.submit((w, i)).is_err() {
                        lost += 1;
                    }
                }
                lost
            }));
        }
        let lost: u32 = hs.into_iter().map(|h| h.join().unwrap()).sum();
        assert!(r.wait_idle(Duration::from_secs(10)));
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len() as u64, r.handled());
        assert_eq!(seen.len() as u32 + lost, 60_000);
        // per submitter, in submission order
        for w in 0..3 {
            let mine: Vec<u32> = seen.iter().filter(|j| j.0 == w).map(|j| j.1).collect();
            assert!(mine.windows(2).all(|p| p[0] < p[1]), "submitter {w}");
        }
    }

    #[test]
    fn a_full_ring_hands_the_job_back_at_once_and_drop_drains() {
        let gate = Arc::new(AtomicBool::new(false));
        let count = Arc::new(AtomicU64::new(0));
        let (g, c) = (gate.clone(), count.clone());
        let r = Remote::spawn("test-component", 4, move |_: u32| {
            while !g.load(Ordering::Acquire) {
                std::thread::yield_now();
            }
            c.fetch_add(1, Ordering::Relaxed);
        })
        .unwrap();
        // the thread holds one job, the ring four more; then submissions fail fast
        let mut accepted = 0;
        let t = Instant::now();
        for i in 0..100 {
            if r.submit(i).is_ok() {
                accepted += 1;
            }
        }
        assert!(t.elapsed() < Duration::from_secs(1));
        assert!((4..=5).contains(&accepted), "{accepted}");
        assert_eq!(r.submit(1000), Err(1000));
        gate.store(true, Ordering::Release);
        drop(r);
        assert_eq!(count.load(Ordering::Relaxed), accepted);
    }
}
