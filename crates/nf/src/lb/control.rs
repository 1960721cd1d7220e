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

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_queue::ArrayQueue;

use super::service::Service;
use crate::component::{Placement, Remote};

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

enum Path {
    /// Requests for the data component to apply.
    Inline {
        queue: Box<ArrayQueue<PolicyRequest>>,
        /// Set while one worker drains the queue, so another never waits on it.
        draining: AtomicBool,
    },
    /// The component thread.
    Core(Remote<PolicyRequest>),
}

/// The control component: where requests go, the schedule, the statistics.
pub(super) struct Control {
    path: Path,
    pub(super) stats: Arc<ControlStats>,
    /// Room for queued requests.
    ring: usize,
    schedule: Vec<Scheduled>,
    /// Index of the next schedule entry not yet issued.
    next: AtomicUsize,
}

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
        let path = match placement {
            Placement::Inline => Path::Inline {
                queue: Box::new(ArrayQueue::new(ring)),
                draining: AtomicBool::new(false),
            },
            Placement::Core => {
                let st = stats.clone();
                Path::Core(
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
        Ok(Control {
            path,
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
            self.placement(),
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

    pub(super) fn placement(&self) -> Placement {
        match self.path {
            Path::Inline { .. } => Placement::Inline,
            Path::Core(_) => Placement::Core,
        }
    }

    /// Queues a (validated) request; `Err` when the ring is full.
    pub(super) fn submit(&self, r: PolicyRequest) -> Result<(), String> {
        let full = match &self.path {
            Path::Inline { queue, .. } => queue.push(r).is_err(),
            Path::Core(remote) => remote.submit(r).is_err(),
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
        match &self.path {
            Path::Inline { queue, .. } => queue.len(),
            Path::Core(remote) => remote.pending(),
        }
    }

    /// The time of the next schedule entry not yet issued (`u64::MAX`: none).
    pub(super) fn next_due(&self) -> u64 {
        // Acquire: pairs with the AcqRel claim in `play`.
        let i = self.next.load(Ordering::Acquire);
        self.schedule.get(i).map_or(u64::MAX, |s| s.at_ns)
    }

    /// The data component's hook, before each packet: issues the schedule's due
    /// entries (each exactly once, whichever worker gets there first) and, when
    /// placed inline, applies the queued requests. Never waits: if another worker
    /// is applying, this one goes on. Returns the next due time.
    #[inline]
    pub(super) fn poll(&self, services: &[Service], now_ns: u64, due: u64) -> u64 {
        let mut due = due;
        if now_ns >= due {
            due = self.play(now_ns);
        }
        if let Path::Inline { queue, draining } = &self.path {
            if !queue.is_empty()
                // Acquire: pairs with the Release store below — this drainer sees
                // the tables the previous one published (they are also published
                // through the tables' own pointer swaps).
                && draining
                    .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                while let Some(r) = queue.pop() {
                    let ns = self.stats.apply(services, r);
                    // Relaxed: statistics.
                    self.stats.inline.fetch_add(1, Ordering::Relaxed);
                    self.stats.inline_ns.fetch_add(ns, Ordering::Relaxed);
                }
                // Release: pairs with the Acquire exchange above.
                draining.store(false, Ordering::Release);
            }
        }
        due
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

    /// With placement `core`: waits (bounded) until the component has applied
    /// every accepted request. Inline: true when none is queued.
    pub(super) fn wait_idle(&self, timeout: Duration) -> bool {
        match &self.path {
            Path::Inline { queue, .. } => queue.is_empty(),
            Path::Core(remote) => remote.wait_idle(timeout),
        }
    }

    /// The statistics as report counters.
    pub(super) fn counters(&self) -> [(&'static str, u64); 8] {
        let s = &self.stats;
        // Relaxed: statistics (settled by `wait_idle` before a report).
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        [
            ("control_requests", l(&s.requests)),
            ("control_inline", l(&s.inline)),
            ("control_inline_ns", l(&s.inline_ns)),
            ("control_core", l(&s.core)),
            ("control_core_ns", l(&s.core_ns)),
            ("control_pending", self.pending() as u64),
            ("control_failed", l(&s.failed)),
            ("table_entries_moved", l(&s.entries_moved)),
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

    /// Where the control component runs.
    pub fn placement(&self) -> Placement {
        self.component.placement()
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
