//! The chain's fused firewall → NAT pair (`Chain::fused`): a tracked
//! connection with a mapping runs both NFs on its entry's two slots
//! borrowed at once, without a context per NF; anything else goes on NF by
//! NF as a packet-by-packet run takes it.

use state::{Rearm, SlotMut};

use crate::firewall::Firewall;
use crate::found::{member, pair, Entry, Found};
use crate::nat::Nat;
use crate::{FlowState, Packet, Shard, Verdict};

/// [`Found::each2`] for a firewall followed by a NAT (the chain's
/// [`fused`](crate::Chain::fused) pair), each packet through
/// [`firewall_nat`].
#[inline(always)]
pub(crate) fn run(found: &mut Found<'_>, fw: &mut Firewall, nat: &mut Nat) {
    for (m, v) in found.members.iter().zip(found.verdicts.iter_mut()) {
        if *v != Verdict::Forward {
            continue;
        }
        let Some((shard, pkt, at)) = member(
            found.shards,
            found.pkts,
            m,
            found.nf,
            found.now_ns,
            found.hasher,
        ) else {
            continue;
        };
        *v = firewall_nat(fw, nat, shard, pkt, at, &mut found.deleted);
    }
}

/// A firewall (NF `at.nf`) and then a NAT on a packet whose entry `at.id`
/// the lookup found, as a packet-by-packet run takes it: the common case —
/// a tracked connection with a mapping — runs on the entry's two slots
/// borrowed at once, without a context per NF; a packet that is not that
/// case for one of them goes on through [`pair`] from that NF on. Deadlines
/// that moved earlier re-arm the entry's timer in the order a
/// packet-by-packet run arms it (the firewall's first), after both ran.
/// Sets `deleted` when an NF removed its state.
#[inline(always)]
pub(crate) fn firewall_nat(
    fw: &mut Firewall,
    nat: &mut Nat,
    shard: &mut Shard,
    pkt: &mut Packet,
    at: Entry<'_>,
    deleted: &mut bool,
) -> Verdict {
    let now = at.now_ns;
    let table = &mut shard.table;
    let cell = table.cell(at.id, at.nf);
    let (mut armed_fw, mut armed_nat) = (None, None);
    // (a hit that is not its NF's case changed nothing)
    let fused = match table.slots_at::<2>(cell) {
        Some([mut f, mut n]) => match fw.hit_slot(f.state, at.emergency, pkt) {
            Some((Verdict::Forward, idle)) => {
                armed_fw = refresh(&mut f, now, idle);
                match nat.hit_slot(n.state, at.emergency, pkt) {
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
    if let Some(r) = armed_fw {
        table.rearm(at.id, r);
    }
    if let Some(r) = armed_nat {
        table.rearm(at.id, r);
    }
    let skip_fw = match fused {
        Fused::Done(v) => return v,
        Fused::FromNat => true,
        Fused::FromFirewall => false,
    };
    pair(fw, nat, shard, pkt, at, skip_fw, deleted).unwrap_or(Verdict::Forward)
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
    /// The firewall forwarded it; the NAT runs it through [`pair`].
    FromNat,
    /// Neither ran; both run it through [`pair`].
    FromFirewall,
}
