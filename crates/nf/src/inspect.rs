//! A flow entry as an operator sees it (`flowshift ctl flows`, as
//! `conntrack -L` shows one): its tuple in the direction of its first packet,
//! the tuple the chain translated it to (a NAT's mapping), each NF's state
//! and the time it has left; and an entry deleted on request
//! (`conntrack -D`), each NF's state released as expiry releases it.

use state::EntryId;
use wire::FiveTuple;

use crate::chain::Chain;
use crate::shard::Shard;

/// One NF's part of a flow entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NfView {
    /// The NF's name in the chain.
    pub nf: String,
    /// Its per-flow state (`None`: it keeps none for this flow).
    pub state: Option<String>,
    /// ns before the state expires unless a packet refreshes it (0: no
    /// deadline).
    pub left_ns: u64,
}

/// A flow entry, readable.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EntryView {
    /// The tuple of the packet that created the entry.
    pub orig: FiveTuple,
    /// The original direction's tuple as it left the chain, when an NF
    /// translated it (the NAT's mapping).
    pub translated: Option<FiveTuple>,
    /// Both directions were seen.
    pub assured: bool,
    /// ns since the flow's last packet left, when one has (by the stamps
    /// the exit-order check keeps).
    pub idle_ns: Option<u64>,
    /// ns since the entry was made.
    pub age_ns: u64,
    /// Its NF states are with an offloading core at the moment (not shown,
    /// and the entry is not deleted while they are).
    pub offloaded: bool,
    /// One per NF of the chain.
    pub nfs: Vec<NfView>,
}

impl Chain {
    /// The view of live entry `id` of `shard` at `now_ns`.
    pub fn view(&self, shard: &Shard, id: EntryId, now_ns: u64) -> EntryView {
        let image = shard.table.image(id, now_ns);
        let offloaded = shard.table.is_detached(id);
        let nfs = self
            .nfs
            .iter()
            .zip(&image.slots)
            .map(|(nf, (st, left))| NfView {
                nf: nf.name().to_string(),
                state: st.as_ref().map(ToString::to_string),
                left_ns: *left,
            })
            .collect();
        EntryView {
            orig: image.key.tuple(image.orig),
            translated: image.alias.map(|(k, side, _, _)| k.tuple(side)),
            assured: image.assured,
            idle_ns: match shard.table.last_exit(id) {
                0 => None,
                t => Some(now_ns.saturating_sub(t)),
            },
            age_ns: now_ns.saturating_sub(shard.table.born(id)),
            offloaded,
            nfs,
        }
    }

    /// Deletes live entry `id` of `shard`, releasing each NF's state (a
    /// NAT's port goes back to its pool) as expiry does; false (and nothing
    /// done) while its states are with an offloading core.
    pub fn delete(&mut self, shard: &mut Shard, id: EntryId) -> bool {
        if !shard.table.is_live(id) || shard.table.is_detached(id) {
            return false;
        }
        let Shard { table, locals, .. } = shard;
        for (i, nf) in self.nfs.iter_mut().enumerate() {
            if let Some(st) = table.clear_slot(id, i) {
                nf.release(&mut locals[i], st);
            }
        }
        table.remove(id);
        true
    }
}
