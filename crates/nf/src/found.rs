//! A run of a burst's packets whose flow entries the lookup found, handed to
//! each NF at once (vector style, as VPP's graph nodes take a frame): one call
//! per NF per run instead of one per packet, and inside it the NF's own
//! `process` called directly, so its slot accesses compile to plain loads and
//! stores.
//!
//! A run is the same as running the chain packet by packet: its packets are
//! consecutive in the burst, each of them has a live entry, no two share one
//! (a flow's next packet starts a new run), and NFs touch only their own slot
//! and shard-local state. So NF *j* on packet *k + 1* never sees anything NF
//! *i > j* did on packet *k*, and the order in which each NF sees a flow's
//! packets is the burst's.

use state::{EntryId, FlowTable};
use steer::RssHasher;

use crate::ctx::At;
use crate::{Ctx, FlowState, Packet, Shard, ShardInfo, ShardLocal, Verdict};

/// What a run needs of an NF (every [`Nf`](crate::Nf) is one): its common
/// case, and its whole processing of a packet.
pub trait RunNf {
    /// [`Nf::process_hit`](crate::Nf::process_hit).
    fn hit(&mut self, cx: &mut Ctx<'_>, pkt: &mut Packet) -> Option<Verdict>;
    /// [`Nf::process`](crate::Nf::process).
    fn whole(&mut self, cx: &mut Ctx<'_>, pkt: &mut Packet) -> Verdict;
}

/// A packet of a run: where it is in the burst, its shard and entry.
#[derive(Copy, Clone, Debug)]
pub(crate) struct Member {
    /// Index in the burst.
    pub pkt: u32,
    /// Its shard.
    pub shard: u32,
    /// Its flow entry.
    pub entry: EntryId,
    /// The shard's table was in emergency mode when the packet came.
    pub emergency: bool,
}

/// The packets of a run as one NF sees them ([`Nf::process_found`]).
pub struct Found<'a> {
    pub(crate) shards: &'a mut [Option<Shard>],
    pub(crate) pkts: &'a mut [Packet],
    pub(crate) members: &'a [Member],
    /// One per member: `Forward` until an NF drops the packet.
    pub(crate) verdicts: &'a mut [Verdict],
    pub(crate) nf: usize,
    pub(crate) now_ns: u64,
    pub(crate) hasher: &'a RssHasher,
    /// Some NF removed its state: the chain frees entries left empty.
    pub(crate) deleted: bool,
}

impl Found<'_> {
    /// Runs `nf` on each packet no earlier NF dropped, in burst order, with
    /// the same [`Ctx`] as a packet-by-packet run gives: its
    /// [`process_hit`](Nf::process_hit), and its [`process`](Nf::process) when
    /// that did not decide. The verdict is the packet's from now on.
    #[inline(always)]
    pub fn each<N: RunNf + ?Sized>(&mut self, nf: &mut N) {
        for (m, v) in self.members.iter().zip(self.verdicts.iter_mut()) {
            if *v != Verdict::Forward {
                continue;
            }
            let Some((shard, pkt, at)) =
                member(self.shards, self.pkts, m, self.nf, self.now_ns, self.hasher)
            else {
                continue;
            };
            let Some((here, table, [local])) = parts::<1>(shard, at) else {
                continue;
            };
            *v = step(nf, here, table, local, pkt, &mut self.deleted);
        }
    }

    /// [`each`](Self::each) for this NF (`a`) and the next (`b`) at once: each
    /// packet runs `a`, then `b` if `a` forwarded it, before the next packet
    /// runs — the order of a packet-by-packet run — with the packet, its shard,
    /// its NFs' shard-local state and its entry's row of slots found once for
    /// both. It is what a chain specialised for its NFs saves over running
    /// them one after the other.
    #[inline(always)]
    pub fn each2<A: RunNf + ?Sized, B: RunNf + ?Sized>(&mut self, a: &mut A, b: &mut B) {
        for k in 0..self.members.len() {
            if self.verdicts[k] == Verdict::Forward {
                self.pair(k, a, b, false);
            }
        }
    }

    /// Member `k` through NF `a` (unless `skip_a`: it forwarded the packet
    /// already) and then `b`, as [`each2`](Self::each2) runs it.
    #[inline(always)]
    fn pair<A: RunNf + ?Sized, B: RunNf + ?Sized>(
        &mut self,
        k: usize,
        a: &mut A,
        b: &mut B,
        skip_a: bool,
    ) {
        let (Some(m), Some(v)) = (self.members.get(k), self.verdicts.get_mut(k)) else {
            return;
        };
        let Some((shard, pkt, at)) =
            member(self.shards, self.pkts, m, self.nf, self.now_ns, self.hasher)
        else {
            return;
        };
        if let Some(verdict) = pair(a, b, shard, pkt, at, skip_a, &mut self.deleted) {
            *v = verdict;
        }
    }

    /// Packets in the run (dropped ones included).
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// True for a run of no packet.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }
}

/// Run member `m`'s shard, packet and entry as NFs from the `nf`-th on
/// see it; `None` (never, for a run the chain made) when the shard or the
/// packet is not there.
#[inline(always)]
pub(crate) fn member<'s>(
    shards: &'s mut [Option<Shard>],
    pkts: &'s mut [Packet],
    m: &Member,
    nf: usize,
    now_ns: u64,
    hasher: &'s RssHasher,
) -> Option<(&'s mut Shard, &'s mut Packet, Entry<'s>)> {
    let (Some(Some(shard)), Some(pkt)) = (
        shards.get_mut(m.shard as usize),
        pkts.get_mut(m.pkt as usize),
    ) else {
        debug_assert!(false, "a run's shard and packet are the core's");
        return None;
    };
    let at = Entry {
        nf,
        id: m.entry,
        emergency: m.emergency,
        now_ns,
        hasher,
    };
    Some((shard, pkt, at))
}

/// A found flow entry as the NFs from the `nf`-th on see it.
#[derive(Copy, Clone)]
pub(crate) struct Entry<'a> {
    /// The first NF's index in the chain.
    pub nf: usize,
    /// The entry.
    pub id: EntryId,
    /// The shard's table was in emergency mode when the packet came.
    pub emergency: bool,
    /// The time the NFs see, ns.
    pub now_ns: u64,
    /// The chain's RSS hasher (a NAT mapping a new flow steers its reply).
    pub hasher: &'a RssHasher,
}

/// NF `a` (the `at.nf`-th; unless `skip_a`: it forwarded the packet
/// already) and then `b` on a packet whose entry the lookup found, as a
/// packet-by-packet run takes it; `None` (never, for a chain's shard) when
/// the shard has no shard-local state for them.
#[inline(always)]
pub(crate) fn pair<A: RunNf + ?Sized, B: RunNf + ?Sized>(
    a: &mut A,
    b: &mut B,
    shard: &mut Shard,
    pkt: &mut Packet,
    at: Entry<'_>,
    skip_a: bool,
    deleted: &mut bool,
) -> Option<Verdict> {
    let (mut here, table, [la, lb]) = parts::<2>(shard, at)?;
    if !skip_a {
        let v = step(a, here, table, la, pkt, deleted);
        if v != Verdict::Forward {
            return Some(v);
        }
    }
    here.nf += 1;
    here.cell += 1;
    Some(step(b, here, table, lb, pkt, deleted))
}

/// What [`parts`] finds for `N` NFs.
type Parts<'s, const N: usize> = (
    Here<'s>,
    &'s mut FlowTable<Option<FlowState>>,
    &'s mut [ShardLocal; N],
);

/// What NFs `at.nf..at.nf + N` need of a shard for a found entry: the
/// first one's context but for the table and its shard-local state, the
/// shard's table and the NFs' shard-local states. `None` (never, for a
/// chain's shard) when the NFs have no shard-local state there.
#[inline(always)]
fn parts<'s, const N: usize>(shard: &'s mut Shard, at: Entry<'s>) -> Option<Parts<'s, N>> {
    let Shard {
        info,
        table,
        locals,
        ..
    } = shard;
    let Some(locals) = locals
        .get_mut(at.nf..at.nf + N)
        .and_then(|l| <&mut [ShardLocal; N]>::try_from(l).ok())
    else {
        debug_assert!(false, "a chain's shard has its NFs' shard-local state");
        return None;
    };
    let here = Here {
        nf: at.nf,
        cell: table.cell(at.id, at.nf),
        entry: at.id,
        now_ns: at.now_ns,
        hasher: at.hasher,
        shard: info,
        emergency: at.emergency,
    };
    Some((here, table, locals))
}

/// What a packet's context is made of besides the table and the NF's
/// shard-local state (the shard's description by reference: copied into a
/// context only when one is made).
#[derive(Copy, Clone)]
struct Here<'a> {
    nf: usize,
    cell: usize,
    entry: EntryId,
    now_ns: u64,
    hasher: &'a RssHasher,
    shard: &'a ShardInfo,
    emergency: bool,
}

impl<'a> Here<'a> {
    #[inline(always)]
    fn ctx<'b>(
        self,
        table: &'b mut FlowTable<Option<FlowState>>,
        local: &'b mut ShardLocal,
    ) -> Ctx<'b>
    where
        'a: 'b,
    {
        Ctx {
            at: At::Table {
                table,
                cell: self.cell,
            },
            entry: self.entry,
            nf: self.nf,
            now_ns: self.now_ns,
            local,
            hasher: self.hasher,
            shard: *self.shard,
            emergency: self.emergency,
            deleted: false,
        }
    }
}

/// One NF on one packet of a run: its [`process_hit`](Nf::process_hit), and
/// its [`process`](Nf::process) out of line when that did not decide; sets
/// `deleted` when the NF removed its state.
#[inline(always)]
fn step<N: RunNf + ?Sized>(
    nf: &mut N,
    at: Here<'_>,
    table: &mut FlowTable<Option<FlowState>>,
    local: &mut ShardLocal,
    pkt: &mut Packet,
    deleted: &mut bool,
) -> Verdict {
    // (two contexts: the first stays in registers, the second is made only
    // when `process` runs)
    let mut cx = at.ctx(&mut *table, &mut *local);
    if let Some(verdict) = nf.hit(&mut cx, pkt) {
        *deleted |= cx.deleted;
        return verdict;
    }
    let (verdict, d) = slow(nf, at.ctx(table, local), pkt);
    *deleted |= d;
    verdict
}

/// [`Nf::process`] on one packet of a run, out of the loop; and whether the NF
/// deleted its state.
#[inline(never)]
fn slow<N: RunNf + ?Sized>(nf: &mut N, mut cx: Ctx<'_>, pkt: &mut Packet) -> (Verdict, bool) {
    let verdict = nf.whole(&mut cx, pkt);
    (verdict, cx.deleted)
}
