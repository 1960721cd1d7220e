//! The load balancer's control component (GranularNF §2, Fig. 5 left: the
//! *server selector*). The data component places a new flow by one lookup in its
//! service's Maglev table; the policy behind that lookup — which backends are
//! live — is the control component's: a *policy request* (backend up or down)
//! recomputes the service's whole table (M ≥ 65 537 entries: hundreds of µs to
//! milliseconds of work that evicts the data component's cache lines) and
//! publishes it with one pointer swap.
//!
//! Where that work runs is configuration ([`Placement`]):
//! - `inline` (a monolithic NF): requests wait in a queue inside the NF and the
//!   data component applies them on the worker before its next packet — the
//!   rebuild stalls the packet path; the report's `control_inline_ns` is that
//!   stall.
//! - `core`: a component thread applies them ([`Remote`]); the data component
//!   only ever loads the published table and never waits. `control_core_ns` is
//!   the component's time.
//!
//! Requests come from [`LbControl::request`] (any
//! thread: an operator, a health checker) or from the configuration's
//! `[[nf.health]]` schedule, which the data component plays when the chain's
//! clock reaches each entry's `at` (in `flowshift run`: time since the run
//! started) — GranularNF's "simulated policy configuration requests".
//! [`Service::set_healthy`] remains the direct call (it runs in the caller's
//! thread, whatever the placement).

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam_queue::ArrayQueue;

use super::service::Service;
use crate::component::{Placement, Remote};
use crate::director::{Decision, Director, DirectorConfig, Period};

/// A policy request: backend `backend` of service `service` goes up or down.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct PolicyRequest {
    /// Service index (configuration order).
    pub service: u16,
    /// Backend index in the service.
    pub backend: u16,
    /// Up (true) or down.
    pub up: bool,
}

/// A request the data component issues when the chain's clock reaches `at_ns`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Scheduled {
    /// Chain time (ns).
    pub at_ns: u64,
    /// The request.
    pub request: PolicyRequest,
}

/// What the control component did (shared by every core's instance; reported
/// once, by the merged instance).
#[derive(Default)]
pub(super) struct ControlStats {
    /// Requests accepted.
    pub requests: AtomicU64,
    /// Requests applied by a data component, on a worker.
    pub inline: AtomicU64,
    /// Time workers spent applying them (the packet path's stall).
    pub inline_ns: AtomicU64,
    /// Requests applied by the component thread.
    pub core: AtomicU64,
    /// The component thread's time applying them.
    pub core_ns: AtomicU64,
    /// Table entries that changed backend.
    pub entries_moved: AtomicU64,
    /// Requests that failed when applied (counted, never silent).
    pub failed: AtomicU64,
}

impl ControlStats {
    /// Applies `r` to `services`; returns the time it took.
    fn apply(&self, services: &[Service], r: PolicyRequest) -> u64 {
        let t = Instant::now();
        // Relaxed (all counters here): statistics, read after `settle`.
        match services[usize::from(r.service)].set_healthy(usize::from(r.backend), r.up) {
            Ok(n) => self.entries_moved.fetch_add(n as u64, Ordering::Relaxed),
            Err(_) => self.failed.fetch_add(1, Ordering::Relaxed),
        };
        t.elapsed().as_nanos() as u64
    }
}

const INLINE: u8 = 0;
const CORE: u8 = 1;

/// `placement = "auto"`: the director and what it last saw.
struct Auto {
    director: Director,
    /// Requests accepted, requests applied and their time (wherever they
    /// ran) at the last period's end.
    seen: (u64, u64, u64),
    /// A request's time, as last measured (ns).
    cost_ns: f64,
    /// When the last period ended (chain time).
    last_ns: u64,
}

/// The control component: where requests go, the schedule, the statistics.
///
/// Both paths exist when the component thread does (`core` and `auto`): the
/// inline queue that the data components drain and the thread's ring.
/// [`submit`](Self::submit) sends a request where the placement says, except
/// that while the other path still holds requests it keeps sending there, so
/// requests are applied in the order they were accepted across a change.
pub(super) struct Control {
    queue: ArrayQueue<PolicyRequest>,
    /// Set while one worker drains the queue, so another never waits on it.
    draining: AtomicBool,
    /// Requests in the inline queue or being applied from it.
    inline_pending: AtomicUsize,
    remote: Option<Remote<PolicyRequest>>,
    /// Where requests go now: `INLINE` or `CORE`.
    want: AtomicU8,
    configured: Placement,
    auto: Option<Mutex<Auto>>,
    /// When the director looks next (chain time; `u64::MAX`: never).
    next_look: AtomicU64,
    /// The director's decisions.
    pub(super) decisions: Mutex<Vec<Decision>>,
    pub(super) stats: Arc<ControlStats>,
    /// Room for queued requests.
    ring: usize,
    schedule: Vec<Scheduled>,
    /// Index of the next schedule entry not yet issued.
    next: AtomicUsize,
}

/// How often the director looks (chain time).
const DIRECTOR_PERIOD_NS: u64 = 10_000_000;

impl Control {
    /// A control component placed at `placement` with room for `ring` queued
    /// requests, playing `schedule` (sorted here by time, stable).
    pub(super) fn new(
        services: Arc<Vec<Service>>,
        placement: Placement,
        ring: usize,
        schedule: Vec<Scheduled>,
    ) -> Result<Control, String> {
        Control::with_stats(services, placement, ring, schedule, Arc::default())
    }

    /// [`new`](Self::new) counting into `stats`.
    fn with_stats(
        services: Arc<Vec<Service>>,
        placement: Placement,
        ring: usize,
        mut schedule: Vec<Scheduled>,
        stats: Arc<ControlStats>,
    ) -> Result<Control, String> {
        if ring == 0 {
            return Err("the control ring needs room for at least one request".into());
        }
        schedule.sort_by_key(|s| s.at_ns);
        let remote = match placement {
            Placement::Inline => None,
            Placement::Core | Placement::Auto => {
                let st = stats.clone();
                Some(
                    Remote::spawn("lb-control", ring, move |r| {
                        let ns = st.apply(&services, r);
                        // Relaxed: statistics.
                        st.core.fetch_add(1, Ordering::Relaxed);
                        st.core_ns.fetch_add(ns, Ordering::Relaxed);
                    })
                    .map_err(|e| format!("cannot start the control component: {e}"))?,
                )
            }
        };
        let auto = (placement == Placement::Auto).then(|| {
            Mutex::new(Auto {
                director: Director::new(DirectorConfig::default(), Placement::Inline),
                seen: (0, 0, 0),
                cost_ns: 0.0,
                last_ns: 0,
            })
        });
        Ok(Control {
            queue: ArrayQueue::new(ring),
            draining: AtomicBool::new(false),
            inline_pending: AtomicUsize::new(0),
            remote,
            want: AtomicU8::new(if placement == Placement::Core {
                CORE
            } else {
                INLINE
            }),
            configured: placement,
            next_look: AtomicU64::new(if auto.is_some() { 0 } else { u64::MAX }),
            auto,
            decisions: Mutex::new(Vec::new()),
            stats,
            ring,
            schedule,
            next: AtomicUsize::new(0),
        })
    }

    /// This component over `services` (a live reload's, in which every
    /// service and backend keeps its index): its placement, room, schedule
    /// (where it got to) and statistics go on; its thread is a new one.
    pub(super) fn carried(&self, services: Arc<Vec<Service>>) -> Result<Control, String> {
        let c = Control::with_stats(
            services,
            self.configured,
            self.ring,
            self.schedule.clone(),
            self.stats.clone(),
        )?;
        // Acquire: pairs with the AcqRel claim in `play`.
        c.next
            .store(self.next.load(Ordering::Acquire), Ordering::Relaxed);
        Ok(c)
    }

    /// The schedule, as (time, service, backend, up) with names.
    pub(super) fn schedule_named(&self, services: &[Service]) -> Vec<(u64, String, String, bool)> {
        self.schedule
            .iter()
            .map(|s| {
                let r = s.request;
                let svc = &services[usize::from(r.service)];
                (
                    s.at_ns,
                    format!("{}:{}/{}", svc.vip, svc.port, svc.proto),
                    svc.backends[usize::from(r.backend)].to_string(),
                    r.up,
                )
            })
            .collect()
    }

    /// Where requests go now (`auto`: where the director put them).
    pub(super) fn placement(&self) -> Placement {
        // Relaxed: a report.
        if self.want.load(Ordering::Relaxed) == CORE {
            Placement::Core
        } else {
            Placement::Inline
        }
    }

    /// The configured placement (`auto` included).
    pub(super) fn configured(&self) -> Placement {
        self.configured
    }

    /// Sends the requests accepted from now on to `p` (inline or core; the
    /// component thread must exist for core). The ones already accepted are
    /// applied first, wherever they wait.
    pub(super) fn set_placement(&self, p: Placement) -> Result<(), String> {
        let v = match p {
            Placement::Inline => INLINE,
            Placement::Core if self.remote.is_some() => CORE,
            _ => {
                return Err(format!(
                    "cannot place the control component `{}` now",
                    p.name()
                ))
            }
        };
        // Release: pairs with the Acquire load in `submit`.
        self.want.store(v, Ordering::Release);
        Ok(())
    }

    /// Queues a (validated) request; `Err` when the ring is full.
    pub(super) fn submit(&self, r: PolicyRequest) -> Result<(), String> {
        // Acquire: pairs with the Release store in `set_placement`.
        let core = self.want.load(Ordering::Acquire) == CORE;
        let remote = self.remote.as_ref().filter(|rm| {
            if core {
                // Acquire: pairs with the Release decrement after an inline
                // request is applied (it is done before this one goes on).
                self.inline_pending.load(Ordering::Acquire) == 0
            } else {
                rm.submitted() > rm.handled()
            }
        });
        let full = match remote {
            Some(rm) => rm.submit(r).is_err(),
            None => {
                // AcqRel: counted before it can be popped (see the decrement).
                self.inline_pending.fetch_add(1, Ordering::AcqRel);
                let full = self.queue.push(r).is_err();
                if full {
                    self.inline_pending.fetch_sub(1, Ordering::AcqRel);
                }
                full
            }
        };
        if full {
            return Err("the control ring is full; retry later".into());
        }
        // Relaxed: a statistic.
        self.stats.requests.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Requests accepted but not applied yet.
    pub(super) fn pending(&self) -> usize {
        // Acquire: pairs with the Release decrement after an inline apply.
        self.inline_pending.load(Ordering::Acquire)
            + self
                .remote
                .as_ref()
                .map_or(0, |r| (r.submitted() - r.handled()) as usize)
    }

    /// The time of the next schedule entry not yet issued (`u64::MAX`: none).
    pub(super) fn next_due(&self) -> u64 {
        // Acquire: pairs with the AcqRel claim in `play`.
        let i = self.next.load(Ordering::Acquire);
        self.schedule.get(i).map_or(u64::MAX, |s| s.at_ns)
    }

    /// The data component's hook, before each packet: issues the schedule's due
    /// entries (each exactly once, whichever worker gets there first), applies
    /// the inline queue's requests, and with `auto` lets the director look
    /// once a period. Never waits: if another worker is applying or
    /// directing, this one goes on. Returns the next due time.
    #[inline]
    pub(super) fn poll(&self, services: &[Service], now_ns: u64, due: u64) -> u64 {
        let mut due = due;
        if now_ns >= due {
            due = self.play(now_ns);
        }
        if !self.queue.is_empty()
            // Acquire: pairs with the Release store below — this drainer sees
            // the tables the previous one published (they are also published
            // through the tables' own pointer swaps).
            && self
                .draining
                .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
        {
            while let Some(r) = self.queue.pop() {
                let ns = self.stats.apply(services, r);
                // Relaxed: statistics.
                self.stats.inline.fetch_add(1, Ordering::Relaxed);
                self.stats.inline_ns.fetch_add(ns, Ordering::Relaxed);
                // Release: pairs with the Acquire loads in `submit` and
                // `pending` (the request is applied).
                self.inline_pending.fetch_sub(1, Ordering::Release);
            }
            // Release: pairs with the Acquire exchange above.
            self.draining.store(false, Ordering::Release);
        }
        // Relaxed: a time to compare; the director's state is under its lock.
        if now_ns >= self.next_look.load(Ordering::Relaxed) {
            self.direct(now_ns);
        }
        due
    }

    /// The director's look at the last period (whoever takes the lock).
    #[cold]
    fn direct(&self, now_ns: u64) {
        let Some(Ok(mut a)) = self.auto.as_ref().map(|m| m.try_lock()) else {
            return;
        };
        // Relaxed: the time alone; the lock orders the rest.
        self.next_look
            .store(now_ns.saturating_add(DIRECTOR_PERIOD_NS), Ordering::Relaxed);
        let s = &self.stats;
        // Relaxed: statistics, deltas over a period.
        let l = |x: &AtomicU64| x.load(Ordering::Relaxed);
        let now = (
            l(&s.requests),
            l(&s.inline) + l(&s.core),
            l(&s.inline_ns) + l(&s.core_ns),
        );
        // the rate is of the requests that came (a component that falls
        // behind applies fewer than came); their cost is what the applied
        // ones took, or the last one measured
        let applied = now.1 - a.seen.1;
        if applied > 0 {
            a.cost_ns = (now.2 - a.seen.2) as f64 / applied as f64;
        }
        let jobs = now.0 - a.seen.0;
        let period = Period {
            len_ns: now_ns.saturating_sub(a.last_ns),
            jobs,
            job_ns: (jobs as f64 * a.cost_ns) as u64,
        };
        a.seen = now;
        a.last_ns = now_ns;
        if period.len_ns == 0 || now_ns < DIRECTOR_PERIOD_NS {
            return;
        }
        if let Some(d) = a.director.observe(now_ns, &period) {
            if self.set_placement(d.to).is_ok() {
                eprintln!(
                    "flowshift: director: load balancer control → {} at {:.3} s ({})",
                    d.to.name(),
                    now_ns as f64 / 1e9,
                    d.reason
                );
                if let Ok(mut v) = self.decisions.lock() {
                    if v.len() < 1_000 {
                        v.push(d);
                    }
                }
            }
        }
    }

    fn play(&self, now_ns: u64) -> u64 {
        loop {
            // Acquire: pairs with the AcqRel claim below.
            let i = self.next.load(Ordering::Acquire);
            let Some(s) = self.schedule.get(i) else {
                return u64::MAX;
            };
            if s.at_ns > now_ns {
                return s.at_ns;
            }
            // AcqRel: one worker claims entry i; the others see the new index.
            if self
                .next
                .compare_exchange(i, i + 1, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
                && self.submit(s.request).is_err()
            {
                // Relaxed: a statistic (a full ring loses the entry, counted).
                self.stats.failed.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Waits (bounded) until the component thread has applied every request
    /// it accepted; true when, besides, the inline queue is empty (the data
    /// components apply it before their next packet).
    pub(super) fn wait_idle(&self, timeout: Duration) -> bool {
        let remote = self.remote.as_ref().is_none_or(|r| r.wait_idle(timeout));
        // Acquire: pairs with the Release decrement after an inline apply.
        remote && self.inline_pending.load(Ordering::Acquire) == 0
    }

    /// The statistics as report counters.
    pub(super) fn counters(&self) -> [(&'static str, u64); 10] {
        let s = &self.stats;
        // Relaxed: statistics (settled by `wait_idle` before a report).
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let changes = self.decisions.lock().map_or(0, |d| d.len() as u64);
        [
            ("control_requests", l(&s.requests)),
            ("control_inline", l(&s.inline)),
            ("control_inline_ns", l(&s.inline_ns)),
            ("control_core", l(&s.core)),
            ("control_core_ns", l(&s.core_ns)),
            ("control_pending", self.pending() as u64),
            ("control_failed", l(&s.failed)),
            ("table_entries_moved", l(&s.entries_moved)),
            (
                "control_on_core",
                u64::from(self.placement() == Placement::Core),
            ),
            ("placement_changes", changes),
        ]
    }
}

/// The control side of a load balancer: health changes while traffic flows.
/// Cheap to clone; usable from any thread.
#[derive(Clone)]
pub struct LbControl {
    pub(super) services: Arc<Vec<Service>>,
    pub(super) component: Arc<Control>,
}

impl LbControl {
    /// The services, in configuration order.
    pub fn services(&self) -> &[Service] {
        &self.services
    }

    /// Finds a backend by `VIP:port` of its service and its own `addr:port`.
    pub fn find(&self, vip: &str, backend: &str) -> Result<(usize, usize), String> {
        let s = self
            .services
            .iter()
            .position(|s| format!("{}:{}", s.vip, s.port) == vip)
            .ok_or_else(|| format!("no service `{vip}`"))?;
        let b = self.services[s]
            .backends
            .iter()
            .position(|b| b.to_string() == backend)
            .ok_or_else(|| format!("service `{vip}` has no backend `{backend}`"))?;
        Ok((s, b))
    }

    /// Sends a policy request (backend `backend` of service `service` up or down)
    /// to the control component, wherever it is placed (see the module's description);
    /// returns once it is queued. `Err` on a bad index or a full ring.
    pub fn request(&self, service: usize, backend: usize, up: bool) -> Result<(), String> {
        let s = self
            .services
            .get(service)
            .ok_or_else(|| format!("service {service}: there are {}", self.services.len()))?;
        if backend >= s.backends.len() {
            return Err(format!(
                "backend {backend}: the service has {}",
                s.backends.len()
            ));
        }
        self.component.submit(PolicyRequest {
            service: service as u16,
            backend: backend as u16,
            up,
        })
    }

    /// Where the control component runs now (with `auto`, where the
    /// director put it).
    pub fn placement(&self) -> Placement {
        self.component.placement()
    }

    /// Moves the control component (`inline`, or `core` when it was
    /// configured `core` or `auto`): requests accepted from now on go there,
    /// after the ones already accepted.
    pub fn set_placement(&self, p: Placement) -> Result<(), String> {
        self.component.set_placement(p)
    }

    /// The director's decisions so far (`auto`), with their reasons.
    pub fn decisions(&self) -> Vec<Decision> {
        self.component
            .decisions
            .lock()
            .map(|d| d.clone())
            .unwrap_or_default()
    }

    /// Requests accepted and not applied yet.
    pub fn pending(&self) -> usize {
        self.component.pending()
    }

    /// With placement `core`, waits (bounded) until every accepted request is
    /// applied; inline, true when none is queued (the data component applies them
    /// before its next packet).
    pub fn wait_idle(&self, timeout: Duration) -> bool {
        self.component.wait_idle(timeout)
    }

    /// Marks a backend up or down now, in the caller's thread, whatever the
    /// placement (see [`Service::set_healthy`]).
    pub fn set_healthy(&self, service: usize, backend: usize, up: bool) -> Result<usize, String> {
        self.services
            .get(service)
            .ok_or_else(|| format!("service {service}: there are {}", self.services.len()))?
            .set_healthy(backend, up)
    }
}
