//! The NF trait and what an NF sees of flowshift while it processes a packet.

use core::any::Any;

use state::{Detached, EntryId, FlowKey, FlowTable, Side};
use steer::RssHasher;

use crate::{FlowState, Found, NflowKey, Packet, ShardLocal, StateKind, Verdict};

/// Which shard a context belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShardInfo {
    /// Shard index.
    pub index: usize,
    /// Number of shards (a power of two).
    pub count: usize,
    /// Indirection-table size − 1: the hash bits that select a bucket.
    pub bucket_mask: u32,
}

/// Where the packet's flow entry is: in its shard's table (the owner processes it)
/// or detached and leased to an offloading core.
pub(crate) enum At<'a> {
    /// In the table; `cell` is where this NF's slot of the entry is.
    Table {
        table: &'a mut FlowTable<Option<FlowState>>,
        cell: usize,
    },
    Detached(&'a mut Detached<Option<FlowState>>),
}

impl<'a> At<'a> {
    /// NF `nf`'s slot of entry `entry` in `table`.
    #[inline(always)]
    pub(crate) fn table(
        table: &'a mut FlowTable<Option<FlowState>>,
        entry: EntryId,
        nf: usize,
    ) -> At<'a> {
        let cell = table.cell(entry, nf);
        At::Table { table, cell }
    }
}

/// A flow entry's slots leased to an offloading core.
pub type Leased = Detached<Option<FlowState>>;

/// An NF's view of flowshift for one packet: its slot in the packet's flow entry
/// (Dyssect's `GetState / InsertState / DeleteState` with the NF's handle), its
/// shard-local state, the time and the RSS hasher.
///
/// On an offloading core the entry is detached from its table and the shard-local
/// state is not there (`local` is [`ShardLocal::None`]); the chain offloads only
/// flows whose NFs say they need neither ([`Nf::offloadable`]).
pub struct Ctx<'a> {
    pub(crate) at: At<'a>,
    /// The packet's flow entry.
    pub entry: EntryId,
    /// This NF's handle (its slot index).
    pub nf: usize,
    /// Current time, ns.
    pub now_ns: u64,
    /// This NF's shard-local state.
    pub local: &'a mut ShardLocal,
    /// The NIC model's hash function.
    pub hasher: &'a RssHasher,
    /// The shard.
    pub shard: ShardInfo,
    /// The shard's table is in emergency mode: unassured flows get short
    /// timeouts.
    pub emergency: bool,
    /// The NF removed its state ([`delete`](Self::delete)): the chain frees the
    /// entry if no NF keeps any.
    pub(crate) deleted: bool,
}

impl Ctx<'_> {
    /// This NF's state for the packet's flow (`GetState`).
    #[inline]
    pub fn get(&mut self) -> Option<&mut FlowState> {
        match &mut self.at {
            At::Table { table, cell } => table.slot_at(*cell).as_mut(),
            At::Detached(d) => d.slots[self.nf].as_mut(),
        }
    }

    /// This NF's slot for the packet's flow, empty or not (an NF's
    /// `hit_slot` works on it).
    #[inline]
    pub(crate) fn slot(&mut self) -> &mut Option<FlowState> {
        match &mut self.at {
            At::Table { table, cell } => table.slot_at(*cell),
            At::Detached(d) => &mut d.slots[self.nf],
        }
    }

    /// Finishes an NF's `hit_slot` on [`slot`](Self::slot): sets the idle
    /// timeout it gave, if any, and returns its verdict (`None`: not the
    /// hit's case, nothing to set).
    #[inline(always)]
    pub(crate) fn hit_done(&mut self, hit: Option<(Verdict, Option<u64>)>) -> Option<Verdict> {
        let (verdict, idle) = hit?;
        if let Some(t) = idle {
            self.set_timeout(t);
        }
        Some(verdict)
    }

    /// Stores state for the packet's flow (`InsertState`).
    #[inline]
    pub fn insert(&mut self, s: FlowState) {
        match &mut self.at {
            At::Table { table, cell } => *table.slot_at(*cell) = Some(s),
            At::Detached(d) => d.slots[self.nf] = Some(s),
        }
    }

    /// Takes this NF's state out to work on it, to be put back with
    /// [`insert`](Self::insert) (its deadline and alias key stay); if it is
    /// not put back, the entry is freed once no NF keeps any state.
    #[inline]
    pub fn take(&mut self) -> Option<FlowState> {
        self.deleted = true;
        match &mut self.at {
            At::Table { table, cell } => table.slot_at(*cell).take(),
            At::Detached(d) => d.slots[self.nf].take(),
        }
    }

    /// Removes this NF's state (`DeleteState`); the entry is freed once every NF
    /// has removed its own.
    #[inline]
    pub fn delete(&mut self) -> Option<FlowState> {
        self.deleted = true;
        match &mut self.at {
            At::Table { table, .. } => table.clear_slot(self.entry, self.nf),
            At::Detached(d) => {
                // the owner drops the alias key this slot owned when it re-attaches
                d.deadlines[self.nf] = 0;
                d.slots[self.nf].take()
            }
        }
    }

    /// Expire this NF's state `idle_ns` from now unless refreshed.
    #[inline]
    pub fn set_timeout(&mut self, idle_ns: u64) {
        let at = self.now_ns.saturating_add(idle_ns);
        match &mut self.at {
            At::Table { table, cell } => table.set_deadline_at(self.entry, *cell, at),
            At::Detached(d) => d.deadlines[self.nf] = at,
        }
    }

    /// Makes packets of a second key reach this entry, for as long as this NF
    /// keeps its state (see [`FlowTable::add_alias`]).
    ///
    /// Only the shard's owner changes its table: an NF whose packet may add an
    /// alias must say so in [`Nf::offloadable`], and on an offloading core the call
    /// is refused (`false`).
    pub fn add_alias(&mut self, key: FlowKey, side: Side, hash: u32) -> bool {
        match &mut self.at {
            At::Table { table, .. } => {
                table.add_alias(self.entry, self.nf, key, side, hash);
                true
            }
            At::Detached(_) => {
                debug_assert!(false, "add_alias on an offloading core");
                false
            }
        }
    }

    /// Makes the packet's tuple as an NF rewrote it a second key of its entry
    /// ([`add_alias`](Self::add_alias)): the replies to it find the entry with
    /// the single lookup, in this same shard (the rewrite kept the reply in
    /// the packet's bucket). False on an offloading core.
    pub fn alias_rewritten(&mut self, pkt: &Packet) -> bool {
        let t = pkt.info.tuple;
        let (key, side) = FlowKey::of(&t);
        let hash = self.hasher.hash(&t);
        debug_assert_eq!(
            hash & self.shard.bucket_mask,
            pkt.hash & self.shard.bucket_mask,
            "reply bucket"
        );
        self.add_alias(key, side, hash)
    }

    /// True once the flow has seen both directions.
    pub fn is_assured(&self) -> bool {
        match &self.at {
            At::Table { table, .. } => table.is_assured(self.entry),
            At::Detached(d) => d.assured,
        }
    }
}

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
    /// Takes back state that expired or was evicted (e.g. return a NAT port).
    fn release(&mut self, _local: &mut ShardLocal, _state: FlowState) {}
    /// Takes in state installed from another node (a pool's replica or bulk
    /// sync): e.g. a NAT mapping on this NAT's own address reserves its port.
    /// [`release`](Self::release) takes it back like any other.
    fn adopt(&mut self, _local: &mut ShardLocal, _state: &FlowState) {}
    /// Named counters of this instance (summed across cores by the reader).
    fn counters(&self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }
    /// A fresh instance for another core, with the same configuration.
    fn instance(&self) -> Box<dyn Nf>;
    /// Waits (bounded) until the NF's components on other cores have finished what
    /// they were handed, so that its counters are final (before a report).
    fn settle(&self) {}
    /// Merges another core's instance of the same NF into this one (mergeable
    /// state and counters).
    fn merge_from(&mut self, _other: &dyn Nf) {}
    /// Delayed merge (GranularNF §4), live: a snapshot of this core's part of
    /// the NF's shared state (none for an NF that shares nothing), which a
    /// driver hands, with every other core's, to [`merge_shared`](Self::merge_shared)
    /// on each core every merge period.
    fn share(&self) -> Option<Shared> {
        None
    }
    /// Takes every core's snapshot (its own among them) as its merged view:
    /// decisions (thresholds) are made on it until the next merge.
    fn merge_shared(&mut self, _all: &[Shared]) {}
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
