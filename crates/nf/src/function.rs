//! The network-function interface: the [`Nf`] trait every NF implements,
//! its fixed metadata ([`NfMeta`]), and what a run of found packets needs of
//! an NF ([`RunNf`], which every NF is).

use core::any::Any;
use std::sync::Arc;

use steer::RssHasher;

use crate::found::RunNf;
use crate::{Ctx, FlowState, Found, NflowKey, Packet, ShardInfo, ShardLocal, StateKind, Verdict};

/// A core's snapshot of an NF's shared state ([`Nf::share`]).
pub type Shared = std::sync::Arc<dyn Any + Send + Sync>;

/// A network function: logic only; flowshift owns the state.
///
/// One instance runs per core ([`instance`](Nf::instance)); per-flow state lives in
/// flow-entry slots reached through [`Ctx`]; shard-local state moves with its
/// shard; mergeable state lives in the instance and is merged with
/// [`merge_from`](Nf::merge_from), and live across cores by delayed merge
/// ([`share`](Nf::share), [`merge_shared`](Nf::merge_shared)).
pub trait Nf: Send + Any {
    /// What the NF is: its name, kind, NFLOW key, where its state lives and
    /// what it needs of the chain.
    fn meta(&self) -> &NfMeta;
    /// The NF's name in the chain (messages, counters).
    fn name(&self) -> &str {
        &self.meta().name
    }
    /// Its kind as in the `[[nf]]` table's `kind` (e.g. `firewall`): the simulator's
    /// cost model prices NFs by kind.
    fn kind(&self) -> &'static str {
        self.meta().kind
    }
    /// What a flow is for this NF.
    fn nflow(&self) -> NflowKey {
        self.meta().nflow
    }
    /// Where its state lives.
    fn state_kind(&self) -> StateKind {
        self.meta().state
    }
    /// True if the NF needs the L4 ports in the steering hash.
    fn needs_ports(&self) -> bool {
        self.meta().needs_ports
    }
    /// True if the NF adds alias keys to flow entries.
    fn needs_alias(&self) -> bool {
        self.meta().needs_alias
    }
    /// True if processing a packet may delete the NF's state
    /// ([`Ctx::delete`], or [`Ctx::take`] without putting it back), so that a
    /// flow's next packet may find no entry and make a new one. Then the chain
    /// never runs two packets of a flow NF by NF together.
    fn deletes_state(&self) -> bool {
        self.meta().deletes_state
    }
    /// True if the NF keeps state in its slot of the flow entry (so packets
    /// need a flow entry).
    fn keeps_entries(&self) -> bool {
        self.meta().entries
    }
    /// What the NIC must hash for this NF where a plain 5-tuple hash would
    /// split its flows (a NAT's endpoint-independent mappings and port
    /// forwards, `steer::nat`).
    fn nat_steering(&self) -> Option<Arc<steer::nat::NatSteering>> {
        None
    }
    /// The tunnel address whose G-PDUs the NIC must hash on the packet
    /// inside (a UPF's N3 address): then a UE's connection is one flow for
    /// steering, both ways. Default: none.
    fn gtp_steering(&self) -> Option<core::net::Ipv4Addr> {
        None
    }
    /// Called once the chain knows its steering: the NIC model's hasher and the
    /// bucket mask (e.g. the NAT precomputes its port plan here).
    fn bind(&mut self, _hasher: &RssHasher, _bucket_mask: u32) {}
    /// The NF's state for a new shard.
    fn shard_local(&self, _shard: &ShardInfo) -> ShardLocal {
        ShardLocal::None
    }
    /// Processes one packet.
    fn process(&mut self, cx: &mut Ctx<'_>, pkt: &mut Packet) -> Verdict;
    /// The common case of [`process`](Self::process), for a packet whose flow
    /// entry the lookup found: `Some(verdict)` when it could decide (with the
    /// same outcome as `process`), `None` to have `process` run the packet.
    /// Meant to be small and inlined into [`process_found`](Self::process_found)'s
    /// loop, with the rest of `process` out of line. Default: `None`.
    #[inline(always)]
    fn process_hit(&mut self, _cx: &mut Ctx<'_>, _pkt: &mut Packet) -> Option<Verdict> {
        None
    }
    /// Processes a run of a burst's packets whose flow entries the lookup
    /// found (see [`Found`]), in burst order, skipping those an earlier NF
    /// dropped. The default calls [`process_hit`](Self::process_hit), then
    /// [`process`](Self::process) when it did not decide, on each packet,
    /// directly (one dynamic call per run); an NF may work on the run as a
    /// whole instead, with the same outcome.
    fn process_found(&mut self, found: &mut Found<'_>) {
        found.each(self);
    }
    /// True if processing a packet of a flow whose slot holds `slot` needs neither
    /// this NF's shard-local state nor an alias key: then the flow may be processed
    /// on an offloading core, with its entry detached (Dyssect §II-B). Must stay true
    /// for as long as only processing changes the slot. Default: yes.
    fn offloadable(&self, _slot: Option<&FlowState>) -> bool {
        true
    }
    /// Packets the NF held back and now lets go (a UPF's buffered packets
    /// once their FAR forwards), in the order they are to leave: the driver
    /// asks after each burst and when idle, and sends them as forwarded —
    /// past the NFs after this one. Default: the NF holds none.
    fn take_released(&mut self, _out: &mut Vec<Packet>) {}
    /// The worker's running load ([`CoreLoad`](crate::director::CoreLoad)),
    /// given by the driver every timer period at `now_ns` (its clock): what a
    /// director that places the NF's component weighs (the IDS's
    /// `placement = "auto"`). Default: unused.
    fn core_load(&mut self, _now_ns: u64, _load: crate::director::CoreLoad) {}
    /// The director's changes of the NF's component placement so far
    /// (`placement = "auto"`), in order, with their reasons: a run's report
    /// lists them. Default: none.
    fn placements(&self) -> Vec<crate::director::Decision> {
        Vec::new()
    }
    /// Where the NF's component runs, as configured, in words (`flowshift
    /// chain check` prints it). Default: the NF has no component.
    fn placement(&self) -> Option<String> {
        None
    }
    /// Sends the NF's events (a NAT's mappings created and deleted) to
    /// `hub`, for a logger to drain. Default: the NF has none.
    fn log_events(&mut self, _hub: &std::sync::Arc<crate::nat::EventHub>) {}
    /// Takes back state that expired or was evicted (e.g. return a NAT port).
    fn release(&mut self, _local: &mut ShardLocal, _state: FlowState) {}
    /// Takes in state installed from another node (a pool's replica or bulk
    /// sync): e.g. a NAT mapping on this NAT's own address reserves its port.
    /// [`release`](Self::release) takes it back like any other.
    fn adopt(&mut self, _local: &mut ShardLocal, _state: &FlowState) {}
    /// Named counters of this instance, [`shared_counters`](Self::shared_counters)
    /// included: what the report reads from the instance the cores' ones
    /// were merged into.
    fn counters(&self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }
    /// The part of [`counters`](Self::counters) that counts state every
    /// core's instance shares (a component on a core of its own, a control
    /// plane): each instance reports it whole, so a reader adding up the
    /// cores' live counters takes it once.
    fn shared_counters(&self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }
    /// The names among [`counters`](Self::counters) that count what this
    /// instance alone has seen (distinct sources, alerts by source): the
    /// cores' values do not add up — a source two cores saw is one — so live
    /// they are read per core; the report counts them after merging.
    fn per_core_counters(&self) -> &'static [&'static str] {
        &[]
    }
    /// A fresh instance for another core, with the same configuration.
    fn instance(&self) -> Box<dyn Nf>;
    /// Waits (bounded) until the NF's components on other cores have finished what
    /// they were handed, so that its counters are final (before a report).
    fn settle(&self) {}
    /// Merges another core's instance of the same NF into this one (mergeable
    /// state and counters).
    fn merge_from(&mut self, _other: &dyn Nf) {}
    /// Delayed merge (GranularNF §4), live: this core's part of the NF's
    /// shared state, or what changed in it since its last share (none for an
    /// NF that shares nothing), which a driver hands, with every other
    /// core's latest, to [`merge_shared`](Self::merge_shared) on each core
    /// every merge period.
    fn share(&mut self) -> Option<Shared> {
        None
    }
    /// True if [`share`](Self::share) shares anything (a driver then sets
    /// up the merge).
    fn shares(&self) -> bool {
        false
    }
    /// Takes every core's snapshot (its own among them) as its merged view:
    /// decisions (thresholds) are made on it until the next merge.
    fn merge_shared(&mut self, _all: &[Shared]) {}
    /// A live reload: takes `new`'s configuration (an NF of the same kind,
    /// built from the new configuration file), keeping its own per-flow and
    /// per-shard state and its counters; the packets after it are judged by
    /// the new configuration. An error (nothing changed) for an NF whose
    /// configuration cannot change while traffic flows. Default: cannot.
    fn reload(&mut self, _new: &dyn Nf) -> Result<(), String> {
        Err(format!(
            "a {} cannot change while traffic flows (restart to apply it)",
            self.kind()
        ))
    }
}

impl dyn Nf {
    /// For `merge_from` implementations to downcast `other`.
    pub fn as_any(&self) -> &dyn Any {
        self
    }
}

/// What an NF is, fixed when it is built (the [`Nf`] trait's metadata).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NfMeta {
    /// Its name in the chain.
    pub name: String,
    /// Its kind, as in the `[[nf]]` table's `kind`.
    pub kind: &'static str,
    /// What a flow is for it.
    pub nflow: NflowKey,
    /// Where its state lives.
    pub state: StateKind,
    /// It needs the L4 ports in the steering hash.
    pub needs_ports: bool,
    /// It adds alias keys to flow entries.
    pub needs_alias: bool,
    /// Processing a packet may delete its state.
    pub deletes_state: bool,
    /// It keeps state in its slot of the flow entry.
    pub entries: bool,
}

impl NfMeta {
    /// An NF called `name` of `kind`: no ports or alias keys needed, no
    /// state deleted while processing, flow entries kept when its state is
    /// per flow.
    pub fn new(
        name: impl Into<String>,
        kind: &'static str,
        nflow: NflowKey,
        state: StateKind,
    ) -> NfMeta {
        NfMeta {
            name: name.into(),
            kind,
            nflow,
            state,
            needs_ports: false,
            needs_alias: false,
            deletes_state: false,
            entries: state == StateKind::PerFlow,
        }
    }

    /// It needs the L4 ports in the steering hash.
    pub fn with_ports(mut self) -> NfMeta {
        self.needs_ports = true;
        self
    }

    /// It adds alias keys to flow entries.
    pub fn with_alias(mut self) -> NfMeta {
        self.needs_alias = true;
        self
    }

    /// Processing a packet may delete its state.
    pub fn deleting_state(mut self) -> NfMeta {
        self.deletes_state = true;
        self
    }

    /// Its per-flow state lives in shard-local state, not in flow entries.
    pub fn without_entries(mut self) -> NfMeta {
        self.entries = false;
        self
    }
}

impl<T: Nf + ?Sized> RunNf for T {
    #[inline(always)]
    fn hit(&mut self, cx: &mut Ctx<'_>, pkt: &mut Packet) -> Option<Verdict> {
        self.process_hit(cx, pkt)
    }

    #[inline(always)]
    fn whole(&mut self, cx: &mut Ctx<'_>, pkt: &mut Packet) -> Verdict {
        self.process(cx, pkt)
    }
}
