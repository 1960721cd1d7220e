//! The NIC model's fragment stage: an IPv4 fragment is steered as a packet of
//! its datagram's flow. A first fragment carries its flow's ports and is
//! steered as any packet; a later one gets the flow of its first fragment
//! ([`wire::fragments`]: virtual reassembly) and is hashed again with it, so
//! it reaches the core that holds the flow's state and every NF sees it as
//! the flow's ([`wire::L4Info::Fragment`]). A fragment that came before its
//! first one waits, then leaves right after it, stamped with the first
//! fragment's arrival (the time it could be steered). Drops are counted by
//! cause among the NIC model's `malformed` counters; fragments still waiting
//! when the run stops count as timed out.

use nf::Packet;
use steer::RssHasher;
use wire::fragments::{Cause, DatagramKey, Limits, Piece, Step, Table};
use wire::{FiveTuple, Malformed};

/// Counters of the NIC model's drops by cause.
pub(crate) type Drops = [u64; Malformed::ALL.len()];

/// The datagrams under way at one NIC model.
pub(crate) struct Fragments {
    table: Table<Packet, FiveTuple>,
}

impl Default for Fragments {
    fn default() -> Fragments {
        Fragments {
            table: Table::new(Limits::default()),
        }
    }
}

impl Fragments {
    /// Hands `p` to `go` (which says whether the run goes on), or, for a
    /// fragment, what its datagram's state says: `p` and the fragments
    /// that waited for it, or nothing while it waits. Returns false when a
    /// `go` did.
    #[inline(always)]
    pub fn pass(
        &mut self,
        p: Packet,
        hasher: &RssHasher,
        drops: &mut Drops,
        mut go: impl FnMut(Packet) -> bool,
    ) -> bool {
        if p.info.fragment {
            self.fragment(p, hasher, drops, &mut go)
        } else {
            go(p)
        }
    }

    #[cold]
    #[inline(never)]
    fn fragment(
        &mut self,
        p: Packet,
        hasher: &RssHasher,
        drops: &mut Drops,
        go: &mut dyn FnMut(Packet) -> bool,
    ) -> bool {
        let l3 = p.info.l3_offset as usize;
        // (parse saw a whole IPv4 header there)
        let ip = wire::Ipv4Packet::new_unchecked(&p.data[l3..]);
        let f = wire::Fragment::of(&ip);
        let key = DatagramKey {
            src: ip.src_addr(),
            dst: ip.dst_addr(),
            proto: ip.protocol(),
            id: f.id,
        };
        let len = (p.info.l3_end - p.info.l4_offset) as usize;
        let flow = (f.offset == 0).then_some(p.info.tuple);
        // (what it holds is its buffer, whatever the frame's length)
        let size = p.data.capacity();
        let now = p.ts_ns;
        let piece = Piece {
            key,
            frag: f,
            len,
            size,
        };
        let (step, expired) = self.table.offer(piece, flow, p, now);
        drops[Malformed::FragmentTimeout as usize] += expired as u64;
        match step {
            Step::Go(flow, mut p) => {
                later(&mut p, flow, hasher);
                go(p)
            }
            Step::First(p, held) => {
                let (flow, at) = (p.info.tuple, p.ts_ns);
                if !go(p) {
                    return false;
                }
                for mut h in held {
                    later(&mut h, flow, hasher);
                    h.ts_ns = at;
                    if !go(h) {
                        return false;
                    }
                }
                true
            }
            Step::Held => true,
            Step::Drop(c, _) => {
                let m = match c {
                    Cause::Overlap => Malformed::FragmentOverlap,
                    Cause::Timeout => Malformed::FragmentTimeout,
                    Cause::Limit => Malformed::FragmentLimit,
                };
                drops[m as usize] += 1;
                true
            }
        }
    }

    /// Forgets the datagrams timed out by `now`, counting the fragments that
    /// still waited for their first.
    pub fn tick(&mut self, now: u64, drops: &mut Drops) {
        if !self.table.is_empty() {
            drops[Malformed::FragmentTimeout as usize] += self.table.expire(now) as u64;
        }
    }

    /// The run stops: fragments still waiting for their first are counted
    /// as timed out.
    pub fn finish(&mut self, drops: &mut Drops) {
        drops[Malformed::FragmentTimeout as usize] += self.table.clear() as u64;
    }
}

/// A later fragment takes its datagram's `flow` (its own addresses are the
/// flow's: only an ICMP error's differ, and its later fragments are the
/// error's packets too) and the hash that goes with it.
fn later(p: &mut Packet, flow: FiveTuple, hasher: &RssHasher) {
    p.info.tuple = flow;
    p.hash = hasher.hash(&flow);
}

#[cfg(test)]
mod tests {
    use super::*;
    use wire::repr::{EthernetRepr, IpRepr, Ipv4Repr, L4Repr, PacketRepr};

    /// A UDP datagram of `n` payload bytes from port `sport`, split into
    /// fragments of at most `mtu` IP bytes.
    fn fragments(sport: u16, n: usize, mtu: usize) -> Vec<Vec<u8>> {
        let whole = PacketRepr {
            eth: EthernetRepr {
                src: [2, 0, 0, 0, 0, 1],
                dst: [2, 0, 0, 0, 0, 2],
                vlan: None,
            },
            ip: IpRepr::V4(Ipv4Repr {
                src: "10.0.0.1".parse().unwrap(),
                dst: "192.0.2.9".parse().unwrap(),
                dscp: 0,
                ecn: 0,
                ident: sport,
                dont_frag: false,
                ttl: 64,
                options: vec![],
            }),
            l4: L4Repr::Udp {
                src_port: sport,
                dst_port: 53,
            },
            payload: vec![7; n],
        }
        .to_bytes();
        wire::fragments::split(&whole, mtu)
    }

    #[test]
    fn later_fragments_are_steered_with_their_first_ones_flow() {
        let hasher = RssHasher::new(steer::RssKey::DEFAULT, steer::HashFields::IpPorts);
        let mut fr = Fragments::default();
        let mut drops: Drops = [0; Malformed::ALL.len()];
        let mut out = Vec::new();
        let frames = fragments(4000, 4000, 1500);
        assert_eq!(frames.len(), 3);
        // the last arrives first, then the first, then the middle one
        for (i, at) in [(2, 10), (0, 20), (1, 30)] {
            let p = Packet::new_fragmentable(frames[i].clone(), at, &hasher).unwrap();
            assert!(fr.pass(p, &hasher, &mut drops, |p| {
                out.push(p);
                true
            }));
        }
        let whole = Packet::new_fragmentable(frames[0].clone(), 0, &hasher).unwrap();
        let got: Vec<_> = out
            .iter()
            .map(|p| {
                (
                    wire::Fragment::of(&wire::Ipv4Packet::new_unchecked(&p.data[14..])).offset,
                    p.ts_ns,
                    p.hash,
                    p.info.tuple,
                )
            })
            .collect();
        let (h, t) = (whole.hash, whole.info.tuple);
        assert_eq!(t.src_port, 4000);
        assert_eq!(got, vec![(0, 20, h, t), (2960, 20, h, t), (1480, 30, h, t)]);
        assert_eq!(drops.iter().sum::<u64>(), 0);
        // a lone later fragment waits, and is counted when the run stops
        let p = Packet::new_fragmentable(fragments(5000, 4000, 1500)[1].clone(), 40, &hasher);
        fr.pass(p.unwrap(), &hasher, &mut drops, |_| unreachable!());
        fr.finish(&mut drops);
        assert_eq!(drops[Malformed::FragmentTimeout as usize], 1);
    }
}
