//! Sequence check: reads the per-connection sequence tag ([`wire::seqtag`]) that
//! `flowshift gen` puts in every packet and counts packets whose sequence number is
//! lower than the highest seen so far on their connection — reordering.
//!
//! NFLOW key: bidirectional 5-tuple (one counter for both directions, as the
//! generator numbers them). Every runtime test runs it.
//!
//! A looped replay writes its lap into the tag ([`wire::seqtag::relap`]): a packet
//! of another lap than the flow's last starts a new incarnation of the flow (counted
//! as a restart); within a lap, a lower sequence number is a reordering.

pub mod state;

pub use self::state::SeqState;
use crate::NfMeta;
use core::time::Duration;

use serde::Deserialize;

use crate::{Ctx, FlowState, Nf, NflowKey, Packet, StateKind, Verdict};

/// `[[nf]] kind = "seqcheck"`.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SeqCheckSection {
    /// Name in the chain.
    pub name: Option<String>,
    /// Parameters.
    #[serde(flatten)]
    pub cfg: SeqCheckConfig,
}

impl crate::fields::BuildNf for SeqCheckSection {
    fn build(
        &self,
        _: &crate::fields::Fields<'_>,
    ) -> Result<Box<dyn Nf>, crate::fields::ConfigError> {
        let name = self.name.clone().unwrap_or_else(|| "seqcheck".into());
        Ok(Box::new(SeqCheck::new(name, &self.cfg)))
    }
}

/// Parameters.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SeqCheckConfig {
    /// Idle time after which a connection's state is dropped.
    #[serde(with = "crate::fields::duration")]
    pub idle: Duration,
}

impl Default for SeqCheckConfig {
    fn default() -> Self {
        SeqCheckConfig {
            idle: Duration::from_secs(300),
        }
    }
}

counters! {
    /// Counters.
    SeqCounters {
        /// Tagged packets checked.
        checked,
        /// Packets with a lower tag than one already seen on their connection.
        reordered,
        /// Packets without a tag.
        untagged,
        /// A packet of a new lap on a flow already seen (a new incarnation).
        restarts,
    }
}

/// The sequence-check NF.
#[derive(Clone)]
pub struct SeqCheck {
    meta: NfMeta,
    idle_ns: u64,
    counters: SeqCounters,
}

impl SeqCheck {
    /// A sequence check.
    pub fn new(name: impl Into<String>, cfg: &SeqCheckConfig) -> SeqCheck {
        SeqCheck {
            meta: NfMeta::new(name, "seqcheck", NflowKey::BiFiveTuple, StateKind::PerFlow),
            idle_ns: cfg.idle.as_nanos() as u64,
            counters: SeqCounters::default(),
        }
    }

    /// This core's counters.
    pub fn stats(&self) -> &SeqCounters {
        &self.counters
    }
}

impl Nf for SeqCheck {
    fn meta(&self) -> &NfMeta {
        &self.meta
    }

    fn process(&mut self, cx: &mut Ctx<'_>, pkt: &mut Packet) -> Verdict {
        let Some(seq) = wire::seqtag::decode(pkt.payload()) else {
            self.counters.untagged += 1;
            return Verdict::Forward;
        };
        self.counters.checked += 1;
        match cx.get() {
            Some(FlowState::Seq(s)) => {
                if wire::seqtag::lap(seq) != wire::seqtag::lap(s.last) {
                    self.counters.restarts += 1;
                    s.last = seq;
                } else if seq < s.last {
                    self.counters.reordered += 1;
                } else {
                    s.last = seq;
                }
            }
            _ => cx.insert(FlowState::Seq(SeqState { last: seq })),
        }
        cx.set_timeout(self.idle_ns);
        Verdict::Forward
    }

    counted_nf!(SeqCheck);
}
