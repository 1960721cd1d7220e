//! What an NF sees of flowshift while it processes a packet ([`Ctx`]).

use state::{Detached, EntryId, FlowKey, FlowTable, Side};
use steer::RssHasher;

use crate::{FlowState, Packet, ShardInfo, ShardLocal, Verdict};

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
    /// the packet's bucket), under the hash the NIC gives them. False on an
    /// offloading core.
    pub fn alias_rewritten(&mut self, pkt: &Packet) -> bool {
        let t = pkt.info.tuple;
        let (key, side) = FlowKey::of(&t);
        // (the same as the tuple's own with a symmetric hash; not with a
        // NAT's endpoint hashing, `steer::nat`)
        let hash = self.hasher.hash(&t.reversed());
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
