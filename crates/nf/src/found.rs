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

use state::{EntryId, FlowTable, Rearm, SlotMut};
use steer::RssHasher;

use crate::ctx::At;
use crate::firewall::Firewall;
use crate::nat::Nat;
use crate::{Ctx, FlowState, Nf, Packet, Shard, ShardInfo, ShardLocal, Verdict};

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

/// The packets of a run as one NF sees them ([`Nf::process_found`](crate::Nf::process_found)).
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
    pub fn each<N: Nf + ?Sized>(&mut self, nf: &mut N) {
        let i = self.nf;
        for (m, v) in self.members.iter().zip(self.verdicts.iter_mut()) {
            if *v != Verdict::Forward {
                continue;
            }
            let Some((at, table, [local], pkt)) =
                member::<1>(self.shards, self.pkts, m, i, self.now_ns, self.hasher)
            else {
                continue;
            };
            *v = step(nf, at, table, local, pkt, &mut self.deleted);
        }
    }

    /// [`each`](Self::each) for this NF (`a`) and the next (`b`) at once: each
    /// packet runs `a`, then `b` if `a` forwarded it, before the next packet
    /// runs — the order of a packet-by-packet run — with the packet, its shard,
    /// its NFs' shard-local state and its entry's row of slots found once for
    /// both. It is what a chain specialised for its NFs saves over running
    /// them one after the other.
    #[inline(always)]
    pub fn each2<A: Nf + ?Sized, B: Nf + ?Sized>(&mut self, a: &mut A, b: &mut B) {
        for k in 0..self.members.len() {
            if self.verdicts[k] == Verdict::Forward {
                self.pair(k, a, b, false);
            }
        }
    }

    /// [`each2`](Self::each2) for a firewall followed by a NAT (the chain's
    /// [`fused`](crate::Chain::fused) pair): each packet's common case — a
    /// tracked connection with a mapping — runs on the entry's two slots
    /// borrowed at once, without a context per NF; a packet that is not that
    /// case for one of them goes on as in `each2` from that NF on. Deadlines
    /// that moved earlier re-arm the entry's timer in the order a
    /// packet-by-packet run arms it (the firewall's first), after both ran.
    #[inline(always)]
    pub(crate) fn firewall_nat(&mut self, fw: &mut Firewall, nat: &mut Nat) {
        let (i, now) = (self.nf, self.now_ns);
        for k in 0..self.members.len() {
            if self.verdicts[k] != Verdict::Forward {
                continue;
            }
            let m = self.members[k];
            let (Some(Some(shard)), Some(pkt)) = (
                self.shards.get_mut(m.shard as usize),
                self.pkts.get_mut(m.pkt as usize),
            ) else {
                debug_assert!(false, "a run's shard and packet are the core's");
                continue;
            };
            let table = &mut shard.table;
            let cell = table.cell(m.entry, i);
            let (mut armed_fw, mut armed_nat) = (None, None);
            // (a hit that is not its NF's case changed nothing)
            let fused = match table.slots_at::<2>(cell) {
                Some([mut f, mut n]) => match fw.hit_slot(f.state, m.emergency, pkt) {
                    Some((Verdict::Forward, idle)) => {
                        armed_fw = refresh(&mut f, now, idle);
                        match nat.hit_slot(n.state, m.emergency, pkt) {
                            Some((v, idle)) => {
                                armed_nat = refresh(&mut n, now, idle);
                                Fused::Done(v)
                            }
                            None => Fused::FromNat,
                        }
                    }
                    Some((v, idle)) => {
                        armed_fw = refresh(&mut f, now, idle);
                        Fused::Done(v)
                    }
                    None => Fused::FromFirewall,
                },
                None => Fused::FromFirewall,
            };
            for r in [armed_fw, armed_nat].into_iter().flatten() {
                table.rearm(m.entry, r);
            }
            match fused {
                Fused::Done(v) => self.verdicts[k] = v,
                Fused::FromNat => self.pair(k, fw, nat, true),
                Fused::FromFirewall => self.pair(k, fw, nat, false),
            }
        }
    }

    /// Member `k` through NF `a` (unless `skip_a`: it forwarded the packet
    /// already) and then `b`, as [`each2`](Self::each2) runs it.
    #[inline(always)]
    fn pair<A: Nf + ?Sized, B: Nf + ?Sized>(
        &mut self,
        k: usize,
        a: &mut A,
        b: &mut B,
        skip_a: bool,
    ) {
        let i = self.nf;
        let (Some(m), Some(v)) = (self.members.get(k), self.verdicts.get_mut(k)) else {
            return;
        };
        let Some((mut at, table, [la, lb], pkt)) =
            member::<2>(self.shards, self.pkts, m, i, self.now_ns, self.hasher)
        else {
            return;
        };
        if !skip_a {
            *v = step(a, at, table, la, pkt, &mut self.deleted);
            if *v != Verdict::Forward {
                return;
            }
        }
        at.nf += 1;
        at.cell += 1;
        *v = step(b, at, table, lb, pkt, &mut self.deleted);
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

/// A slot's idle timeout from `now_ns` set, as `Ctx::set_timeout` sets it;
/// a deadline that moved earlier comes back to re-arm the entry's timer.
#[inline(always)]
fn refresh(
    slot: &mut SlotMut<'_, Option<FlowState>>,
    now_ns: u64,
    idle: Option<u64>,
) -> Option<Rearm> {
    idle.and_then(|t| slot.set_deadline(now_ns.saturating_add(t)))
}

/// How far a packet got through the fused firewall → NAT common case.
enum Fused {
    /// Both ran (or the firewall dropped it): its verdict.
    Done(Verdict),
    /// The firewall forwarded it; the NAT runs it as in `each2`.
    FromNat,
    /// Neither ran; both run it as in `each2`.
    FromFirewall,
}

/// A run member as [`member`] finds it for `N` NFs.
type Parts<'s, const N: usize> = (
    Here<'s>,
    &'s mut FlowTable<Option<FlowState>>,
    &'s mut [ShardLocal; N],
    &'s mut Packet,
);

/// What NFs `nf..nf + N` need of run member `m`: the first one's context
/// but for the table and its shard-local state, the shard's table, the NFs'
/// shard-local states and the packet. `None` (never, for a run the chain
/// made) when the shard, the NFs or the packet are not there.
#[inline(always)]
fn member<'s, const N: usize>(
    shards: &'s mut [Option<Shard>],
    pkts: &'s mut [Packet],
    m: &Member,
    nf: usize,
    now_ns: u64,
    hasher: &'s RssHasher,
) -> Option<Parts<'s, N>> {
    let Some(Shard {
        info,
        table,
        locals,
        ..
    }) = shards.get_mut(m.shard as usize).and_then(Option::as_mut)
    else {
        debug_assert!(false, "a run's shard is the core's");
        return None;
    };
    let (Some(locals), Some(pkt)) = (
        locals
            .get_mut(nf..nf + N)
            .and_then(|l| <&mut [ShardLocal; N]>::try_from(l).ok()),
        pkts.get_mut(m.pkt as usize),
    ) else {
        debug_assert!(false, "a run's packet and NFs exist");
        return None;
    };
    let at = Here {
        nf,
        cell: table.cell(m.entry, nf),
        entry: m.entry,
        now_ns,
        hasher,
        shard: info,
        emergency: m.emergency,
    };
    Some((at, table, locals, pkt))
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
fn step<N: Nf + ?Sized>(
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
    if let Some(verdict) = nf.process_hit(&mut cx, pkt) {
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
fn slow<N: Nf + ?Sized>(nf: &mut N, mut cx: Ctx<'_>, pkt: &mut Packet) -> (Verdict, bool) {
    let verdict = nf.process(&mut cx, pkt);
    (verdict, cx.deleted)
}
