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

use core::any::Any;
use core::net::IpAddr;
use std::collections::HashSet;
use std::io::Write;
use std::path::Path;
use std::sync::Arc;

use arc_swap::ArcSwap;
use crossbeam_channel::{Sender, TrySendError};
use serde_json::json;
use state::Dir;

use super::matcher::{Matcher, Progress, Stream};
use super::rules::{Action, Rule};
use crate::{Ctx, DropCause, FlowState, Nf, NflowKey, Packet, StateKind, Verdict};

/// The IDS's per-flow state: the matcher's states per direction, how far each
/// direction got through multi-piece rules (allocated only once one is part-way),
/// and whether a rule dropped the flow.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IdsFlow {
    /// Original and reply direction.
    pub st: [Stream; 2],
    /// Multi-piece rules part-way, per direction.
    pub progress: Option<Box<[Progress; 2]>>,
    /// A `drop` or `blacklist` rule fired: every later packet is dropped.
    pub dropped: bool,
}

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
    }
}

struct Shared {
    rules: Vec<Rule>,
    matcher: Matcher,
    blacklist: ArcSwap<HashSet<IpAddr>>,
    alerts: Option<Sender<String>>,
    idle_ns: u64,
}

/// The IDS NF.
#[derive(Clone)]
pub struct Ids {
    name: String,
    shared: Arc<Shared>,
    counters: IdsCounters,
    fired: Vec<u32>,
}

/// Capacity of the alert channel.
const ALERT_QUEUE: usize = 65_536;

impl Ids {
    /// An IDS over `rules` (compiled here, once), writing alerts to `alerts` as
    /// JSON lines (appending; `None`: counted only). Flows idle for `idle_ns` are
    /// forgotten.
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
                    .map_err(|e| format!("{}: {e}", p.display()))?;
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
                    .map_err(|e| format!("starting the alert writer: {e}"))?;
                Some(tx)
            }
        };
        Ok(Ids {
            name: name.into(),
            shared: Arc::new(Shared {
                rules,
                matcher,
                blacklist: ArcSwap::from_pointee(HashSet::new()),
                alerts,
                idle_ns,
            }),
            counters: IdsCounters::default(),
            fired: Vec::new(),
        })
    }

    /// The rules.
    pub fn rules(&self) -> &[Rule] {
        &self.shared.rules
    }

    /// Memory of the compiled automata, bytes.
    pub fn matcher_memory(&self) -> usize {
        self.shared.matcher.memory()
    }

    /// The blacklisted sources now.
    pub fn blacklist(&self) -> Vec<IpAddr> {
        self.shared.blacklist.load().iter().copied().collect()
    }

    fn alert(&mut self, r: &Rule, pkt: &Packet, blocked: bool) {
        self.counters.alerts += 1;
        let Some(tx) = &self.shared.alerts else {
            return;
        };
        let t = pkt.info.tuple;
        let line = json!({
            "timestamp_ns": pkt.ts_ns,
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
            Ok(()) => {}
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                self.counters.alerts_lost += 1
            }
        }
    }
}

impl Nf for Ids {
    fn name(&self) -> &str {
        &self.name
    }

    fn kind(&self) -> &'static str {
        "ids"
    }

    fn nflow(&self) -> NflowKey {
        NflowKey::BiFiveTuple
    }

    fn state_kind(&self) -> StateKind {
        StateKind::PerFlow
    }

    fn process(&mut self, cx: &mut Ctx<'_>, pkt: &mut Packet) -> Verdict {
        let t = pkt.info.tuple;
        let shared = self.shared.clone();
        if shared.blacklist.load().contains(&t.src) {
            return Verdict::Drop(DropCause::IdsBlacklisted);
        }
        let mut f = match cx.get() {
            // taken out and put back below (no allocation per packet)
            Some(FlowState::Ids(f)) => core::mem::take(f),
            _ => IdsFlow {
                st: [shared.matcher.start(); 2],
                progress: None,
                dropped: false,
            },
        };
        if f.dropped {
            cx.insert(FlowState::Ids(f));
            return Verdict::Drop(DropCause::IdsDrop);
        }
        let d = usize::from(pkt.dir == Dir::Reply);
        let payload = pkt.payload();
        self.counters.scanned += payload.len() as u64;
        self.fired.clear();
        let fired = &mut self.fired;
        match f.progress.as_deref_mut() {
            Some(pr) => {
                shared
                    .matcher
                    .feed(&mut f.st[d], &mut pr[d], payload, |r| fired.push(r));
                if pr.iter().all(|p| p.is_empty()) {
                    f.progress = None;
                }
            }
            None => {
                // an empty `Progress` does not allocate: only a flow with a rule
                // part-way gets its box
                let mut pr = Progress::default();
                shared
                    .matcher
                    .feed(&mut f.st[d], &mut pr, payload, |r| fired.push(r));
                if !pr.is_empty() {
                    let mut b: Box<[Progress; 2]> = Box::default();
                    b[d] = pr;
                    f.progress = Some(b);
                }
            }
        }
        let mut verdict = Verdict::Forward;
        // a rule fires at most once per packet (a regex like `x[0-9]+` matches
        // at every further digit)
        let mut hits = core::mem::take(&mut self.fired);
        hits.sort_unstable();
        hits.dedup();
        for &r in &hits {
            let rule = &shared.rules[r as usize];
            if !rule
                .header
                .covers(t.proto, t.src, t.src_port, t.dst, t.dst_port)
            {
                continue;
            }
            let blocks = rule.action != Action::Alert;
            self.alert(rule, pkt, blocks);
            if blocks && !f.dropped {
                f.dropped = true;
                self.counters.flows_dropped += 1;
                verdict = Verdict::Drop(DropCause::IdsDrop);
            }
            if rule.action == Action::Blacklist && !shared.blacklist.load().contains(&t.src) {
                shared.blacklist.rcu(|s| {
                    let mut s = HashSet::clone(s);
                    s.insert(t.src);
                    s
                });
                self.counters.blacklisted += 1;
            }
        }
        self.fired = hits;
        cx.insert(FlowState::Ids(f));
        cx.set_timeout(shared.idle_ns);
        verdict
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        self.counters.list()
    }

    fn instance(&self) -> Box<dyn Nf> {
        let mut n = self.clone();
        n.counters = IdsCounters::default();
        Box::new(n)
    }

    fn merge_from(&mut self, other: &dyn Nf) {
        if let Some(o) = other.as_any().downcast_ref::<Ids>() {
            self.counters.add(&o.counters);
        }
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
