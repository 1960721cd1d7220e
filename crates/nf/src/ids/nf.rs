//! The IDS NF: each flow's payload bytes, per direction and in arrival order, run
//! through the [`Matcher`] from the flow's saved DFA states; a match whose rule's
//! 5-tuple predicate covers the packet raises an alert and applies the rule's
//! action. No TCP reassembly: retransmitted or reordered segments are scanned as
//! they come.
//!
//! Alerts go, as eve-like JSON lines, through a bounded channel to a writer
//! thread (never a file write on the packet path; a full channel is a counted
//! `alerts_lost`). The blacklist is shared by every core: inserting (rare) copies
//! and swaps the set, checking (every packet) is one lock-free load.
//!
//! **Placement** (GranularNF's offloading component, [`crate::component`]):
//! `inline` scans on the worker, in the packet's processing. `core` splits the
//! IDS: the data component on the workers checks the blacklist and the flow's
//! dropped mark and hands a copy of the payload to the **pattern-matching
//! component** on a core of its own through a lock-free ring, never waiting for it
//! (a full ring is a counted `offload_lost`, and the flow's stream restarts after
//! the gap so bytes on either side of it are never matched together). The
//! component keeps the matcher states per flow and direction, raises the alerts,
//! marks dropped flows in a shared set and blacklists sources. Detection is then
//! asynchronous: the packet that completes a match is forwarded, and the flow is
//! dropped from the first packet after the component has scanned it.
//!
//! `auto` starts `cores` matching components and lets the director move the
//! matching between inline and 1…`cores` of them while traffic flows
//! ([`super::auto`]); flows follow by the hand-off protocol
//! ([`super::handoff`]).

use crate::NfMeta;
use core::net::IpAddr;
use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwap;
use crossbeam_channel::{Sender, TrySendError};
use serde_json::json;
use state::{Dir, FlowKey, Side};
use wire::FiveTuple;

use super::auto::{Auto, Meter, Sums};
pub use super::flow::IdsFlow;
use super::handoff::{Handoff, Moved, Recall, Returned};
use super::matcher::{Matcher, Progress, Stream};
use super::rules::{Action, Rule};
use crate::component::{Placement, Remote};
use crate::director::{CoreLoad, Decision};
use crate::{Ctx, DropCause, FlowState, Nf, NflowKey, Packet, StateKind, Verdict};

counters! {
    /// IDS counters.
    IdsCounters {
        /// Payload bytes scanned.
        scanned,
        /// Alerts raised.
        alerts,
        /// Alerts not written (the writer's channel was full).
        alerts_lost,
        /// Flows dropped by a rule.
        flows_dropped,
        /// Sources blacklisted.
        blacklisted,
        /// Payloads handed to the matching component (placement `core`).
        offloaded,
        /// Payloads not scanned because the component's ring was full.
        offload_lost,
        /// Flows leaving a component whose ring was full: their states there
        /// given up, their streams started again where they went.
        streams_restarted,
        /// Payloads the matching component took (placement `core`).
        component_jobs,
        /// The matching component's time on them (ns).
        component_ns,
    }
}

/// Counters of the matching component (one thread, read by reports).
#[derive(Default)]
struct ComponentCounters {
    scanned: AtomicU64,
    /// Jobs the component took and its time on them (what the director
    /// weighs a placement by).
    jobs: AtomicU64,
    busy_ns: AtomicU64,
    alerts: AtomicU64,
    alerts_lost: AtomicU64,
    flows_dropped: AtomicU64,
    blacklisted: AtomicU64,
}

/// What every instance and the component share: the rules of one
/// configuration, and (kept across live reloads) what the rules did.
struct Core {
    rules: Arc<Vec<Rule>>,
    matcher: Arc<Matcher>,
    /// Counts the live reloads: a flow's matcher states are of the rules of
    /// its generation, and start again under new ones.
    generation: u32,
    blacklist: Arc<ArcSwap<HashSet<IpAddr>>>,
    /// Flows a rule dropped, as marked by the matching component.
    dropped: Arc<ArcSwap<HashSet<FlowKey>>>,
    alerts: Option<Sender<String>>,
    idle_ns: u64,
    component: Arc<ComponentCounters>,
    /// The component holds off scanning (maintenance, tests).
    paused: Arc<AtomicBool>,
}

/// What the rules that fired on a packet did.
#[derive(Default)]
struct Outcome {
    alerts: u64,
    alerts_lost: u64,
    blocks: bool,
    blacklisted: bool,
}

impl Core {
    /// Applies the rules in `hits` (deduplicated here) to a packet `t` at `ts_ns`.
    fn apply(&self, hits: &mut Vec<u32>, t: &FiveTuple, ts_ns: u64) -> Outcome {
        let mut o = Outcome::default();
        // a rule fires at most once per packet (a regex like `x[0-9]+` matches
        // at every further digit)
        hits.sort_unstable();
        hits.dedup();
        for &r in hits.iter() {
            let rule = &self.rules[r as usize];
            if !rule
                .header
                .covers(t.proto, t.src, t.src_port, t.dst, t.dst_port)
            {
                continue;
            }
            let blocks = rule.action != Action::Alert;
            o.alerts += 1;
            if !self.alert(rule, t, ts_ns, blocks) {
                o.alerts_lost += 1;
            }
            o.blocks |= blocks;
            if rule.action == Action::Blacklist && !self.blacklist.load().contains(&t.src) {
                self.blacklist.rcu(|s| {
                    let mut s = HashSet::clone(s);
                    s.insert(t.src);
                    s
                });
                o.blacklisted = true;
            }
        }
        o
    }

    /// Queues an alert line; false when it was lost.
    fn alert(&self, r: &Rule, t: &FiveTuple, ts_ns: u64, blocked: bool) -> bool {
        let Some(tx) = &self.alerts else {
            return true;
        };
        let line = json!({
            "timestamp_ns": ts_ns,
            "event_type": "alert",
            "src_ip": t.src.to_string(),
            "src_port": t.src_port,
            "dest_ip": t.dst.to_string(),
            "dest_port": t.dst_port,
            "proto": match t.proto { 6 => "TCP".to_string(), 17 => "UDP".to_string(), p => p.to_string() },
            "alert": {
                "action": if blocked { "blocked" } else { "allowed" },
                "rule_action": r.action.name(),
                "signature_id": r.sid,
                "signature": r.msg,
            },
        })
        .to_string();
        match tx.try_send(line) {
            Ok(()) => true,
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => false,
        }
    }
}

/// A payload handed to the matching component.
struct ScanJob {
    /// The rules it is scanned by (its instance's, reloaded or not).
    core: Arc<Core>,
    key: FlowKey,
    side: Side,
    tuple: FiveTuple,
    ts_ns: u64,
    /// The direction's previous payload was lost: restart its stream.
    gap: bool,
    payload: Vec<u8>,
    /// The flow's states, moving here from a worker (installed first).
    moved: Option<Box<Moved>>,
    /// The flow's states are recalled to the workers: published here after
    /// each of its jobs from this one on.
    recall: Option<Arc<Handoff>>,
}

/// The matching component's state of one flow direction.
struct Scanned {
    st: Stream,
    pr: Progress,
    last_ns: u64,
    /// The rules' generation its states are of.
    generation: u32,
}

/// The matching component: runs on its own core, fed by every data component.
fn component() -> impl FnMut(ScanJob) + Send + 'static {
    let mut flows: HashMap<(FlowKey, Side), Scanned> = HashMap::new();
    // recalled flows: where their states go, their jobs since, the last one's time
    let mut returning: HashMap<FlowKey, (Arc<Handoff>, u64, u64)> = HashMap::new();
    let mut hits = Vec::new();
    let mut jobs = 0u64;
    move |job: ScanJob| {
        let core = job.core.clone();
        // Acquire: pairs with the Release store in `set_component_paused`.
        while core.paused.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_micros(200));
        }
        let t0 = std::time::Instant::now();
        if let Some(h) = &job.recall {
            returning.insert(job.key, (h.clone(), 0, job.ts_ns));
        }
        scan_job(&mut flows, &mut hits, &mut jobs, &job, &core);
        if let Some((h, seq, last)) = returning.get_mut(&job.key) {
            *seq += 1;
            *last = job.ts_ns;
            h.ready.store(Some(Arc::new(Returned {
                seq: *seq,
                states: states_of(&flows, job.key, &core),
            })));
        }
        if jobs.is_multiple_of(65_536) {
            returning.retain(|_, r| r.2.saturating_add(core.idle_ns) > job.ts_ns);
        }
        let c = &core.component;
        // Relaxed: statistics, read after `wait_idle`'s Acquire.
        c.jobs.fetch_add(1, Ordering::Relaxed);
        c.busy_ns
            .fetch_add(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
    }
}

/// A flow's states at the component, by side (fresh streams where it has
/// none).
fn states_of(flows: &HashMap<(FlowKey, Side), Scanned>, key: FlowKey, core: &Core) -> Moved {
    let get = |side| {
        flows
            .get(&(key, side))
            .map_or((core.matcher.start(), Progress::default()), |s| {
                (s.st, s.pr.clone())
            })
    };
    let (lo, hi) = (get(Side::Lo), get(Side::Hi));
    Moved {
        st: [lo.0, hi.0],
        pr: [lo.1, hi.1],
    }
}

/// The component's work on one job: states moving here installed, the
/// flow's stream scanned on from its saved state, matches applied.
fn scan_job(
    flows: &mut HashMap<(FlowKey, Side), Scanned>,
    hits: &mut Vec<u32>,
    jobs: &mut u64,
    job: &ScanJob,
    core: &Arc<Core>,
) {
    *jobs += 1;
    if jobs.is_multiple_of(65_536) {
        // forget idle flows (packet time, like the flow tables' timers)
        flows.retain(|_, f| f.last_ns.saturating_add(core.idle_ns) > job.ts_ns);
    }
    if let Some(m) = &job.moved {
        for (i, side) in [Side::Lo, Side::Hi].into_iter().enumerate() {
            flows.insert(
                (job.key, side),
                Scanned {
                    st: m.st[i],
                    pr: m.pr[i].clone(),
                    last_ns: job.ts_ns,
                    generation: core.generation,
                },
            );
        }
    }
    if core.dropped.load().contains(&job.key) {
        return;
    }
    let f = flows.entry((job.key, job.side)).or_insert_with(|| Scanned {
        st: core.matcher.start(),
        pr: Progress::default(),
        last_ns: 0,
        generation: core.generation,
    });
    if job.gap || f.generation != core.generation {
        f.generation = core.generation;
        f.st = core.matcher.start();
        f.pr = Progress::default();
    }
    f.last_ns = job.ts_ns;
    hits.clear();
    core.matcher
        .feed(&mut f.st, &mut f.pr, &job.payload, |r| hits.push(r));
    let c = &core.component;
    // Relaxed (all below): statistics, read after `wait_idle`'s Acquire.
    c.scanned
        .fetch_add(job.payload.len() as u64, Ordering::Relaxed);
    if hits.is_empty() {
        return;
    }
    let o = core.apply(hits, &job.tuple, job.ts_ns);
    c.alerts.fetch_add(o.alerts, Ordering::Relaxed);
    c.alerts_lost.fetch_add(o.alerts_lost, Ordering::Relaxed);
    if o.blacklisted {
        c.blacklisted.fetch_add(1, Ordering::Relaxed);
    }
    if o.blocks && !core.dropped.load().contains(&job.key) {
        core.dropped.rcu(|s| {
            let mut s = HashSet::clone(s);
            s.insert(job.key);
            s
        });
        c.flows_dropped.fetch_add(1, Ordering::Relaxed);
        flows.remove(&(job.key, Side::Lo));
        flows.remove(&(job.key, Side::Hi));
    }
}

struct Shared {
    /// The placement configured.
    configured: Placement,
    /// The matching components, with placement `core` or `auto` (one per
    /// core).
    remotes: Vec<Remote<ScanJob>>,
    /// Components in use now (0: inline); changed live by
    /// [`Ids::set_cores`].
    active: AtomicUsize,
    /// With `auto`: the director (whoever takes the lock looks), the
    /// workers' counts for it, when it looks next (the runtime's time) and
    /// its decisions.
    auto: Option<Mutex<Auto>>,
    sums: Sums,
    next_look: AtomicU64,
    decisions: Mutex<Vec<Decision>>,
}

impl Shared {
    fn new(configured: Placement, remotes: Vec<Remote<ScanJob>>, active: usize) -> Shared {
        let auto = (configured == Placement::Auto).then(|| Mutex::new(Auto::new(remotes.len())));
        Shared {
            configured,
            remotes,
            active: AtomicUsize::new(active),
            auto,
            sums: Sums::default(),
            next_look: AtomicU64::new(super::auto::PERIOD_NS),
            decisions: Mutex::new(Vec::new()),
        }
    }

    /// The component a flow's matching goes to now (none: inline).
    fn target(&self, key: &FlowKey) -> Option<usize> {
        // Relaxed: a flow reads it per packet and moves its own states by
        // the hand-off protocol (`handoff`); no other memory rides on it.
        let k = self.active.load(Ordering::Relaxed).min(self.remotes.len());
        (k > 0).then(|| key.mix() as usize % k)
    }

    fn wants_core(&self) -> bool {
        // Relaxed: see `target`.
        self.active.load(Ordering::Relaxed) > 0 && !self.remotes.is_empty()
    }
}

/// The IDS NF.
#[derive(Clone)]
pub struct Ids {
    meta: NfMeta,
    core: Arc<Core>,
    shared: Arc<Shared>,
    counters: IdsCounters,
    fired: Vec<u32>,
    /// With `auto`: this worker's scans and hand-overs for the director.
    meter: Meter,
}

/// Capacity of the alert channel.
const ALERT_QUEUE: usize = 65_536;

impl Ids {
    /// An IDS over `rules` (compiled here, once), writing alerts to `alerts` as
    /// JSON lines (appending; `None`: counted only). Flows idle for `idle_ns` are
    /// forgotten. Placement `inline`; see [`place`](Self::place).
    pub fn new(
        name: impl Into<String>,
        rules: Vec<Rule>,
        alerts: Option<&Path>,
        idle_ns: u64,
    ) -> Result<Ids, String> {
        let matcher = Matcher::new(&rules)?;
        let alerts = match alerts {
            None => None,
            Some(p) => {
                let f = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(p)
                    .map_err(|e| format!("alerts file {}: {e}", p.display()))?;
                let (tx, rx) = crossbeam_channel::bounded::<String>(ALERT_QUEUE);
                std::thread::Builder::new()
                    .name("ids-alerts".into())
                    .spawn(move || {
                        let mut w = std::io::BufWriter::new(f);
                        while let Ok(line) = rx.recv() {
                            let _ = writeln!(w, "{line}");
                            for line in rx.try_iter() {
                                let _ = writeln!(w, "{line}");
                            }
                            let _ = w.flush();
                        }
                    })
                    .map_err(|e| format!("alerts writer: cannot start it: {e}"))?;
                Some(tx)
            }
        };
        Ok(Ids {
            meta: NfMeta::new(name, "ids", NflowKey::BiFiveTuple, StateKind::PerFlow),
            core: Arc::new(Core {
                rules: Arc::new(rules),
                matcher: Arc::new(matcher),
                generation: 0,
                blacklist: Arc::new(ArcSwap::from_pointee(HashSet::new())),
                dropped: Arc::new(ArcSwap::from_pointee(HashSet::new())),
                alerts,
                idle_ns,
                component: Arc::default(),
                paused: Arc::default(),
            }),
            shared: Arc::new(Shared::new(Placement::Inline, Vec::new(), 0)),
            counters: IdsCounters::default(),
            fired: Vec::new(),
            meter: Meter::default(),
        })
    }

    /// Places the pattern matching: `Inline` (as built) or `Core`, a component
    /// thread fed through a ring of `ring` payloads. Call before instances are made.
    pub fn place(self, placement: Placement, ring: usize) -> Result<Ids, String> {
        self.place_on(placement, ring, 1)
    }

    /// [`place`](Self::place) with `cores` matching components for `Core`,
    /// each flow on one of them by its key; for `Auto`, up to `cores` of
    /// them as the director decides, starting inline.
    pub fn place_on(
        mut self,
        placement: Placement,
        ring: usize,
        cores: usize,
    ) -> Result<Ids, String> {
        let remotes: Vec<_> = match placement {
            Placement::Inline => Vec::new(),
            Placement::Core | Placement::Auto => (0..cores.max(1))
                .map(|i| {
                    Remote::spawn(&format!("{}-match{i}", self.meta.name), ring, component())
                        .map_err(|e| format!("starting the matching component: {e}"))
                })
                .collect::<Result<_, _>>()?,
        };
        let active = if placement == Placement::Core {
            remotes.len()
        } else {
            0
        };
        self.shared = Arc::new(Shared::new(placement, remotes, active));
        Ok(self)
    }

    /// The director's decisions so far (`auto`), with their reasons.
    pub fn decisions(&self) -> Vec<Decision> {
        self.shared
            .decisions
            .lock()
            .map(|d| d.clone())
            .unwrap_or_default()
    }

    /// The director's look at the period ending at `now_ns` (whoever takes
    /// the lock; nobody waits for it).
    #[cold]
    fn direct(&self, now_ns: u64) {
        let Some(Ok(mut a)) = self.shared.auto.as_ref().map(|m| m.try_lock()) else {
            return;
        };
        // Relaxed: a time to compare; the lock orders the rest.
        self.shared.next_look.store(
            now_ns.saturating_add(super::auto::PERIOD_NS),
            Ordering::Relaxed,
        );
        let taken = self.shared.sums.take();
        let c = &self.core.component;
        // Relaxed: statistics.
        let comp = (
            c.jobs.load(Ordering::Relaxed),
            c.busy_ns.load(Ordering::Relaxed),
        );
        let Some(d) = a.look(now_ns, &taken, comp) else {
            return;
        };
        if self.set_cores(d.cores).is_ok() {
            eprintln!(
                "flowshift: director: {} matching → {} at {:.3} s ({})",
                self.meta.name,
                Placement::cores_name(d.cores),
                now_ns as f64 / 1e9,
                d.reason
            );
            if let Ok(mut v) = self.shared.decisions.lock() {
                if v.len() < 1_000 {
                    v.push(d);
                }
            }
        }
    }

    /// Where the pattern matching runs (flows move as their packets come).
    pub fn placement(&self) -> Placement {
        if self.shared.wants_core() {
            Placement::Core
        } else {
            Placement::Inline
        }
    }

    /// Matching components in use now (0: inline).
    pub fn cores(&self) -> usize {
        // Relaxed: see `Shared::target`.
        self.shared
            .active
            .load(Ordering::Relaxed)
            .min(self.shared.remotes.len())
    }

    /// Moves the pattern matching while traffic flows onto `k` of the
    /// matching components started at build (0: inline): each flow's states
    /// follow at its next packet, without a payload skipped, scanned twice
    /// or out of order ([`super::handoff`]).
    pub fn set_cores(&self, k: usize) -> Result<(), String> {
        if k > self.shared.remotes.len() {
            return Err(format!(
                "{k} matching cores: {} were started (`placement = \"core\"`, `cores`)",
                self.shared.remotes.len()
            ));
        }
        // Relaxed: see `Shared::target`.
        self.shared.active.store(k, Ordering::Relaxed);
        Ok(())
    }

    /// [`set_cores`](Self::set_cores) with every component (`Core`) or none
    /// (`Inline`).
    pub fn set_placement(&self, p: Placement) -> Result<(), String> {
        match p {
            Placement::Inline => self.set_cores(0),
            Placement::Core if !self.shared.remotes.is_empty() => {
                self.set_cores(self.shared.remotes.len())
            }
            _ => Err(format!(
                "the IDS's matching cannot go `{}`: it was not placed `core` at start",
                p.name()
            )),
        }
    }

    /// The rules.
    pub fn rules(&self) -> &[Rule] {
        &self.core.rules
    }

    /// Memory of the compiled automata, bytes.
    pub fn matcher_memory(&self) -> usize {
        self.core.matcher.memory()
    }

    /// The blacklisted sources now.
    pub fn blacklist(&self) -> Vec<IpAddr> {
        self.core.blacklist.load().iter().copied().collect()
    }

    /// With placement `core`: waits until the component has scanned every payload
    /// handed to it so far (reports, tests); true at once when inline.
    pub fn wait_idle(&self, timeout: Duration) -> bool {
        self.shared.remotes.iter().all(|r| r.wait_idle(timeout))
    }

    /// Payloads waiting in the components' rings.
    pub fn component_pending(&self) -> usize {
        self.shared.remotes.iter().map(|r| r.pending()).sum()
    }

    /// Holds the matching component (payloads queue up, then are counted lost) or
    /// lets it go on: a maintenance window, e.g. while rules are swapped.
    pub fn set_component_paused(&self, paused: bool) {
        // Release: pairs with the component's Acquire load.
        self.core.paused.store(paused, Ordering::Release);
    }

    /// The data component of placement `core`: drop what is already known to be
    /// dropped, hand the payload over to the flow's component `at`, never wait.
    /// `Err` with the flow, its streams started again, when it is leaving `at`
    /// and `at`'s ring is full: a component that falls behind would
    /// otherwise never finish the flow's recall (its payloads go on to it
    /// until the recall completes), and every one of them lost would leave a
    /// gap anyway; so the flow gives up its states there and this payload
    /// starts its streams where the flow goes.
    fn process_data(
        &mut self,
        cx: &mut Ctx<'_>,
        pkt: &mut Packet,
        mut f: Box<IdsFlow>,
        at: usize,
    ) -> Result<Verdict, Box<IdsFlow>> {
        let (key, _) = FlowKey::of(&pkt.info.tuple);
        let dropped = self.core.dropped.load();
        if !dropped.is_empty() && dropped.contains(&key) {
            f.dropped = true;
            cx.insert(FlowState::Ids(f));
            return Ok(Verdict::Drop(DropCause::IdsDrop));
        }
        let leaving = self.shared.target(&key) != Some(at);
        let recall = (leaving && f.recall.is_none()).then(|| Arc::new(Handoff::default()));
        if !self.hand_over(&mut f, pkt, at, None, recall) {
            if leaving {
                self.counters.streams_restarted += 1;
                f.at = None;
                f.recall = None;
                f.gaps = 0;
                f.restart_streams(self.core.matcher.start());
                return Err(f);
            }
            let bit = 1u8 << u8::from(pkt.dir == Dir::Reply);
            self.counters.offload_lost += 1;
            self.meter.lost();
            f.gaps |= bit;
        }
        cx.insert(FlowState::Ids(f));
        cx.set_timeout(self.core.idle_ns);
        Ok(Verdict::Forward)
    }

    /// Hands the packet's payload to the component, with the flow's states
    /// moving there or a recall; true when the component took it (or there
    /// was nothing to hand over).
    fn hand_over(
        &mut self,
        f: &mut IdsFlow,
        pkt: &Packet,
        at: usize,
        moved: Option<Box<Moved>>,
        recall: Option<Arc<Handoff>>,
    ) -> bool {
        let payload = stream_bytes(pkt);
        if payload.is_empty() && moved.is_none() && recall.is_none() {
            return true;
        }
        let t0 = if self.shared.auto.is_some() && !payload.is_empty() {
            self.meter.hand_start()
        } else {
            None
        };
        let t = pkt.info.tuple;
        let (key, side) = FlowKey::of(&t);
        let bit = 1u8 << u8::from(pkt.dir == Dir::Reply);
        let job = ScanJob {
            core: self.core.clone(),
            key,
            side,
            tuple: t,
            ts_ns: pkt.ts_ns,
            gap: f.gaps & bit != 0,
            payload: payload.to_vec(),
            moved,
            recall: recall.clone(),
        };
        let took = self.shared.remotes[at].submit(job).is_ok();
        self.meter.hand_end(t0);
        if !took {
            return false;
        }
        self.counters.offloaded += u64::from(!payload.is_empty());
        f.gaps &= !bit;
        match (recall, f.recall.as_mut()) {
            (Some(handoff), _) => f.recall = Some(Recall { handoff, sent: 1 }),
            (None, Some(r)) => r.sent += 1,
            (None, None) => {}
        }
        true
    }

    /// Where the flow's matching runs for this packet: its states moved to
    /// the component or back when the placement changed (`Ok(verdict)`:
    /// handed to the component), `Err` with the flow to scan it here.
    fn place_flow(
        &mut self,
        cx: &mut Ctx<'_>,
        pkt: &mut Packet,
        mut f: Box<IdsFlow>,
    ) -> Result<Verdict, Box<IdsFlow>> {
        let (key, side) = FlowKey::of(&pkt.info.tuple);
        let want = self.shared.target(&key);
        let d = usize::from(pkt.dir == Dir::Reply);
        let sd = usize::from(side == Side::Hi);
        if let Some(at) = f.at {
            let at = usize::from(at);
            if want == Some(at) {
                // a recall under way is given up: the states stay there
                f.recall = None;
                return self.process_data(cx, pkt, f, at);
            }
            match f.recall.as_ref().and_then(|r| r.take()) {
                Some(m) => {
                    // every payload handed over is scanned: the states are back
                    f.st[d] = m.st[sd];
                    f.st[1 - d] = m.st[1 - sd];
                    let pr = [m.pr[sd].clone(), m.pr[1 - sd].clone()];
                    f.progress = (!pr.iter().all(|p| p.is_empty())).then(|| Box::new(pr));
                    f.at = None;
                    f.recall = None;
                }
                None => match self.process_data(cx, pkt, f, at) {
                    Ok(v) => return Ok(v),
                    // its states there given up: fresh streams, placed below
                    Err(g) => f = g,
                },
            }
        }
        let Some(to) = want else {
            return Err(f);
        };
        // the states go with this packet's payload
        let pr = f.progress.take().map(|b| *b).unwrap_or_default();
        let mut moved = Moved::default();
        moved.st[sd] = f.st[d];
        moved.st[1 - sd] = f.st[1 - d];
        moved.pr[sd] = pr[d].clone();
        moved.pr[1 - sd] = pr[1 - d].clone();
        if self.hand_over(&mut f, pkt, to, Some(Box::new(moved)), None) {
            f.at = Some(to as u8);
            cx.insert(FlowState::Ids(f));
            cx.set_timeout(self.core.idle_ns);
            return Ok(Verdict::Forward);
        }
        // the ring is full: this packet is scanned here, the move waits
        f.progress = (!pr.iter().all(|p| p.is_empty())).then(|| Box::new(pr));
        Err(f)
    }
}

impl Nf for Ids {
    fn meta(&self) -> &NfMeta {
        &self.meta
    }

    fn process(&mut self, cx: &mut Ctx<'_>, pkt: &mut Packet) -> Verdict {
        let t = pkt.info.tuple;
        let core = self.core.clone();
        if core.blacklist.load().contains(&t.src) {
            return Verdict::Drop(DropCause::IdsBlacklisted);
        }
        let mut f = match cx.take() {
            // taken out and put back below (no allocation per packet)
            Some(FlowState::Ids(f)) => f,
            other => {
                debug_assert!(other.is_none(), "another NF's state in the IDS's slot");
                Box::new(IdsFlow {
                    st: [core.matcher.start(); 2],
                    generation: core.generation,
                    at: self.shared.target(&FlowKey::of(&t).0).map(|i| i as u8),
                    ..IdsFlow::default()
                })
            }
        };
        if f.generation != core.generation {
            // rules reloaded: the flow's streams start again under the new ones
            f.restart_streams(core.matcher.start());
            f.generation = core.generation;
        }
        if f.dropped {
            cx.insert(FlowState::Ids(f));
            return Verdict::Drop(DropCause::IdsDrop);
        }
        if !self.shared.remotes.is_empty() {
            f = match self.place_flow(cx, pkt, f) {
                Ok(v) => return v,
                Err(f) => f,
            };
        }
        let d = usize::from(pkt.dir == Dir::Reply);
        let payload = stream_bytes(pkt);
        self.counters.scanned += payload.len() as u64;
        self.fired.clear();
        let fired = &mut self.fired;
        let t0 = if self.shared.auto.is_some() && !payload.is_empty() {
            self.meter.scan_start()
        } else {
            None
        };
        match f.progress.as_deref_mut() {
            Some(pr) => {
                core.matcher
                    .feed(&mut f.st[d], &mut pr[d], payload, |r| fired.push(r));
                if pr.iter().all(|p| p.is_empty()) {
                    f.progress = None;
                }
            }
            None => {
                // an empty `Progress` does not allocate: only a flow with a rule
                // part-way gets its box
                let mut pr = Progress::default();
                core.matcher
                    .feed(&mut f.st[d], &mut pr, payload, |r| fired.push(r));
                if !pr.is_empty() {
                    let mut b: Box<[Progress; 2]> = Box::default();
                    b[d] = pr;
                    f.progress = Some(b);
                }
            }
        }
        self.meter.scan_end(t0);
        let mut verdict = Verdict::Forward;
        if !self.fired.is_empty() {
            let o = core.apply(&mut self.fired, &t, pkt.ts_ns);
            self.counters.alerts += o.alerts;
            self.counters.alerts_lost += o.alerts_lost;
            self.counters.blacklisted += u64::from(o.blacklisted);
            if o.blocks {
                f.dropped = true;
                self.counters.flows_dropped += 1;
                verdict = Verdict::Drop(DropCause::IdsDrop);
            }
        }
        cx.insert(FlowState::Ids(f));
        cx.set_timeout(core.idle_ns);
        verdict
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        let mut v = self.counters.list();
        crate::counters::add_named(&mut v, self.shared_counters());
        v
    }

    /// The matching component's counters (every core's instance hands it
    /// payloads) and the director's choices.
    fn shared_counters(&self) -> Vec<(&'static str, u64)> {
        let mut v = Vec::new();
        if !self.shared.remotes.is_empty() {
            let c = &self.core.component;
            // Relaxed: statistics (see `wait_idle` for a settled read).
            let l = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
            v.extend([
                ("scanned", l(&c.scanned)),
                ("alerts", l(&c.alerts)),
                ("alerts_lost", l(&c.alerts_lost)),
                ("flows_dropped", l(&c.flows_dropped)),
                ("blacklisted", l(&c.blacklisted)),
                ("component_jobs", l(&c.jobs)),
                ("component_ns", l(&c.busy_ns)),
            ]);
        }
        if self.shared.auto.is_some() {
            let changes = self.shared.decisions.lock().map_or(0, |d| d.len());
            v.push(("placement_changes", changes as u64));
            v.push(("matching_cores", self.cores() as u64));
        }
        v
    }

    fn placements(&self) -> Vec<Decision> {
        self.decisions()
    }

    fn placement(&self) -> Option<String> {
        let cores = match self.shared.remotes.len() {
            1 => "a core".to_string(),
            n => format!("{n} cores"),
        };
        Some(match self.shared.configured {
            Placement::Inline => "matching inline".into(),
            Placement::Core => format!("matching on {cores}"),
            Placement::Auto => format!("matching placed by the director: inline or up to {cores}"),
        })
    }

    fn core_load(&mut self, now_ns: u64, load: CoreLoad) {
        if self.shared.auto.is_none() {
            return;
        }
        self.meter.add_to(&self.shared.sums, load);
        // Relaxed: a time to compare; `direct` takes the lock.
        if now_ns >= self.shared.next_look.load(Ordering::Relaxed) {
            self.direct(now_ns);
        }
    }

    fn instance(&self) -> Box<dyn Nf> {
        let mut n = self.clone();
        n.counters = IdsCounters::default();
        n.meter = Meter::default();
        Box::new(n)
    }

    fn settle(&self) {
        self.wait_idle(Duration::from_secs(10));
    }

    fn merge_from(&mut self, other: &dyn Nf) {
        if let Some(o) = other.as_any().downcast_ref::<Ids>() {
            self.counters.add(&o.counters);
        }
    }

    /// The rules (and alerts file, idle time) change live: flows keep their
    /// state, their streams start again under the new rules from their next
    /// payload; the blacklist and the flows already dropped stay.
    fn reload(&mut self, new: &dyn Nf) -> Result<(), String> {
        let n = new.as_any().downcast_ref::<Ids>().ok_or("not an IDS")?;
        if (n.shared.configured, n.shared.remotes.len())
            != (self.shared.configured, self.shared.remotes.len())
        {
            return Err("`placement` and `cores` cannot change live".into());
        }
        let (old, nc) = (&self.core, &n.core);
        // the same rules (a rules file read again, unchanged): streams go on
        let same = old.rules == nc.rules;
        self.core = Arc::new(Core {
            rules: if same {
                old.rules.clone()
            } else {
                nc.rules.clone()
            },
            matcher: if same {
                old.matcher.clone()
            } else {
                nc.matcher.clone()
            },
            generation: old.generation.wrapping_add(u32::from(!same)),
            blacklist: old.blacklist.clone(),
            dropped: old.dropped.clone(),
            alerts: nc.alerts.clone(),
            idle_ns: nc.idle_ns,
            component: old.component.clone(),
            paused: old.paused.clone(),
        });
        Ok(())
    }
}

/// The bytes a packet adds to its flow's stream: none for an ICMP error (its
/// payload quotes another packet's headers).
fn stream_bytes(pkt: &Packet) -> &[u8] {
    if matches!(pkt.info.l4, wire::parse::L4Info::IcmpError { .. }) {
        &[]
    } else {
        pkt.payload()
    }
}
