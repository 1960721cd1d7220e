//! The stateful firewall: a prioritised ACL decides which connections may open
//! (evaluated once, on a connection's first packet, through the compiled
//! [`Classifier`]); connection tracking admits the rest of a connection, and
//! replies only for tracked connections.
//!
//! NFLOW key: bidirectional 5-tuple. State: a [`Conn`] in the flow entry's slot.

pub mod acl;
pub mod classifier;
mod config;
pub mod conntrack;

use crate::NfMeta;
use std::sync::Arc;

pub use acl::{parse_rules, Action, Rule, RuleError};
pub use classifier::Classifier;
pub use config::FirewallSection;
pub use conntrack::{Conn, TcpState, Timeouts, TimeoutsNs};
use state::Dir;
use wire::parse::L4Info;

use crate::{Ctx, DropCause, FlowState, Nf, NflowKey, Packet, StateKind, Verdict};

counters! {
    /// Firewall counters.
    FirewallCounters {
        /// Connections admitted.
        opened,
        /// Packets denied by a rule (or the default).
        denied,
        /// Packets that do not fit their connection's state.
        invalid,
        /// Replies without a tracked connection.
        no_connection,
        /// ICMP errors about a tracked connection, passed (RELATED).
        related,
    }
}

/// The firewall NF.
#[derive(Clone)]
pub struct Firewall {
    meta: NfMeta,
    classifier: Arc<Classifier>,
    timeouts: Arc<TimeoutsNs>,
    counters: FirewallCounters,
}

impl Firewall {
    /// A firewall over compiled rules.
    pub fn new(name: impl Into<String>, classifier: Classifier, timeouts: Timeouts) -> Firewall {
        Firewall {
            meta: NfMeta::new(name, "firewall", NflowKey::BiFiveTuple, StateKind::PerFlow),
            classifier: Arc::new(classifier),
            timeouts: Arc::new(TimeoutsNs::of(&timeouts)),
            counters: FirewallCounters::default(),
        }
    }

    /// This core's counters.
    pub fn stats(&self) -> &FirewallCounters {
        &self.counters
    }

    /// [`process_hit`](Nf::process_hit) on the flow's slot itself: the
    /// verdict on a packet of a tracked connection (not an ICMP error) and
    /// the connection's idle timeout from now (none when the packet is
    /// dropped); `None`, with nothing changed, when the packet is not that
    /// case. The fused firewall → NAT loop calls it with the entry's slots
    /// borrowed once ([`Found`](crate::Found)).
    #[inline(always)]
    pub(crate) fn hit_slot(
        &mut self,
        slot: &mut Option<FlowState>,
        emergency: bool,
        pkt: &Packet,
    ) -> Option<(Verdict, Option<u64>)> {
        let l4 = pkt.info.l4;
        if let L4Info::IcmpError { .. } = l4 {
            return None;
        }
        let Some(FlowState::Conn(c)) = slot else {
            return None;
        };
        if c.reopened_by(pkt.dir, l4) {
            // a new connection on a closed one's tuple: judged by the rules
            // as any new connection is (they may have changed since)
            if self.classifier.classify(&acl::Fields::of(&pkt.info.tuple)) == Action::Deny {
                return Some((self.drop(DropCause::Policy), None));
            }
            self.counters.opened += 1;
        }
        Some(
            match c.update_timeout(pkt.dir, l4, &self.timeouts, emergency) {
                Ok(t) => (Verdict::Forward, Some(t)),
                Err(e) => (self.drop(e), None),
            },
        )
    }

    /// An ICMP error passes when it is about a connection (path MTU discovery
    /// needs it) and changes nothing in it; about no connection, it is invalid.
    #[cold]
    #[inline(never)]
    fn icmp_error(&mut self, cx: &mut Ctx<'_>) -> Verdict {
        if matches!(cx.get(), Some(FlowState::Conn(_))) {
            self.counters.related += 1;
            Verdict::Forward
        } else {
            self.drop(DropCause::CtInvalid)
        }
    }

    /// A packet of a flow with no connection: the ACL decides whether it may
    /// open one.
    #[inline(never)]
    fn open(&mut self, cx: &mut Ctx<'_>, pkt: &Packet) -> Verdict {
        if pkt.dir == Dir::Reply {
            return self.drop(DropCause::CtNoConnection);
        }
        if self.classifier.classify(&acl::Fields::of(&pkt.info.tuple)) == Action::Deny {
            return self.drop(DropCause::Policy);
        }
        match Conn::open(pkt.info.l4) {
            Ok(c) => {
                let t = c.timeout_ns_in(&self.timeouts, cx.emergency);
                cx.insert(FlowState::Conn(c));
                cx.set_timeout(t);
                self.counters.opened += 1;
                Verdict::Forward
            }
            Err(e) => self.drop(e),
        }
    }

    #[cold]
    fn drop(&mut self, c: DropCause) -> Verdict {
        match c {
            DropCause::Policy => self.counters.denied += 1,
            DropCause::CtNoConnection => self.counters.no_connection += 1,
            _ => self.counters.invalid += 1,
        }
        Verdict::Drop(c)
    }
}

impl Nf for Firewall {
    fn meta(&self) -> &NfMeta {
        &self.meta
    }

    fn process(&mut self, cx: &mut Ctx<'_>, pkt: &mut Packet) -> Verdict {
        if let L4Info::IcmpError { .. } = pkt.info.l4 {
            return self.icmp_error(cx);
        }
        match self.process_hit(cx, pkt) {
            Some(v) => v,
            None => self.open(cx, pkt),
        }
    }

    /// A packet of a tracked connection (not an ICMP error).
    #[inline(always)]
    fn process_hit(&mut self, cx: &mut Ctx<'_>, pkt: &mut Packet) -> Option<Verdict> {
        let emergency = cx.emergency;
        let hit = self.hit_slot(cx.slot(), emergency, pkt);
        cx.hit_done(hit)
    }

    fn reload(&mut self, new: &dyn Nf) -> Result<(), String> {
        let n = new
            .as_any()
            .downcast_ref::<Firewall>()
            .ok_or("not a firewall")?;
        // the rules judge new connections from now on; tracked ones keep
        // their state (as nftables' `ct state established` does)
        self.classifier = n.classifier.clone();
        self.timeouts = n.timeouts.clone();
        Ok(())
    }

    counted_nf!(Firewall);
}
