//! Virtual reassembly of IPv4 datagrams: which flow a fragment belongs to.
//!
//! Only a datagram's first fragment carries the L4 header, so only it has a
//! flow key; the others must be steered, looked up and translated as that
//! flow's packets without being put back together (VPP's shallow virtual
//! reassembly; conntrack instead defragments and fragments again). The
//! [`Table`] remembers, per datagram (source, destination, protocol,
//! identification), the ports its first fragment carried, and hands them to
//! every other fragment of it. A fragment that arrives before its first one
//! is held until the first comes, then released after it (its datagram's
//! flow sees the first fragment first), or dropped when its datagram times
//! out.
//!
//! Bounded: at most [`Limits::datagrams`] datagrams are tracked and
//! [`Limits::held_bytes`] bytes held, each datagram takes at most
//! [`Limits::per_datagram`] fragments, and a datagram is forgotten
//! [`Limits::timeout_ns`] after its first fragment of any kind arrived, or as
//! soon as all its bytes have passed. A fragment that overlaps bytes already
//! seen of its datagram (a duplicate included) is dropped: overlapping
//! fragments are how reassembly is attacked (RFC 1858, RFC 3128). Every drop
//! has its [`Cause`].
//!
//! Pure: time is an argument, no clock, no thread.

use core::net::Ipv4Addr;
use std::collections::{HashMap, VecDeque};

use crate::parse::Fragment;

/// The bounds of a [`Table`].
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Datagrams tracked at once.
    pub datagrams: usize,
    /// Bytes of fragments held while waiting for their first fragment.
    pub held_bytes: usize,
    /// Fragments of one datagram.
    pub per_datagram: usize,
    /// How long a datagram is tracked after its first fragment of any kind
    /// arrived, ns.
    pub timeout_ns: u64,
}

impl Default for Limits {
    /// 4 096 datagrams, 4 MiB held, 64 fragments per datagram (a 64 KiB
    /// datagram in 1 500-byte frames is 45), 2 s.
    fn default() -> Limits {
        Limits {
            datagrams: 4096,
            held_bytes: 4 << 20,
            per_datagram: 64,
            timeout_ns: 2_000_000_000,
        }
    }
}

/// Why a fragment was dropped.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Cause {
    /// It overlaps bytes of its datagram already seen.
    Overlap,
    /// Its datagram's first fragment did not come in time.
    Timeout,
    /// A bound of the table was reached.
    Limit,
}

/// A datagram: source, destination, protocol, identification (RFC 791).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct DatagramKey {
    /// Source address.
    pub src: Ipv4Addr,
    /// Destination address.
    pub dst: Ipv4Addr,
    /// Protocol.
    pub proto: u8,
    /// Identification.
    pub id: u16,
}

/// A fragment as the table sees it.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Piece {
    /// Its datagram.
    pub key: DatagramKey,
    /// Where it goes in the datagram.
    pub frag: Fragment,
    /// Its payload bytes.
    pub len: usize,
    /// The bytes it holds while it waits.
    pub size: usize,
}

/// What to do with an offered fragment.
#[derive(Debug, PartialEq, Eq)]
pub enum Step<T, F> {
    /// Steer it as its datagram's flow `F` (what its first fragment gave).
    Go(F, T),
    /// It is its datagram's first fragment: steer it, then the fragments
    /// that waited for it (in arrival order), all with its ports.
    First(T, Vec<T>),
    /// Held until its first fragment comes.
    Held,
    /// Dropped.
    Drop(Cause, T),
}

struct Datagram<T, F> {
    /// The first fragment's flow, once it came.
    flow: Option<F>,
    /// When the datagram was first seen (its timeout starts there).
    born: u64,
    /// Byte ranges seen, `[start, end)`.
    seen: Vec<(u32, u32)>,
    /// The datagram's payload length, once its last fragment came.
    end: Option<u32>,
    /// Fragments waiting for the first one, with their sizes.
    held: Vec<(T, usize)>,
}

/// The datagrams under way. See the [module](self).
pub struct Table<T, F> {
    limits: Limits,
    datagrams: HashMap<DatagramKey, Datagram<T, F>>,
    /// Datagrams in the order they were first seen, with that time: the
    /// front is the next to time out.
    ages: VecDeque<(u64, DatagramKey)>,
    held_bytes: usize,
}

impl<T, F: Copy> Table<T, F> {
    /// An empty table within `limits`.
    pub fn new(limits: Limits) -> Table<T, F> {
        Table {
            limits,
            datagrams: HashMap::new(),
            ages: VecDeque::new(),
            held_bytes: 0,
        }
    }

    /// Datagrams tracked now.
    pub fn len(&self) -> usize {
        self.datagrams.len()
    }

    /// True when no datagram is tracked.
    pub fn is_empty(&self) -> bool {
        self.datagrams.is_empty()
    }

    /// Bytes of fragments held now.
    pub fn held_bytes(&self) -> usize {
        self.held_bytes
    }

    /// Offers `item`, fragment `piece`, arriving at `now`; `flow` is its own
    /// flow (the ports it carries) when it is a first fragment. Returns the
    /// step and how many held fragments timed out meanwhile: datagrams older
    /// than the timeout are forgotten first (see [`expire`](Self::expire)).
    pub fn offer(
        &mut self,
        piece: Piece,
        flow: Option<F>,
        item: T,
        now: u64,
    ) -> (Step<T, F>, usize) {
        let expired = self.expire(now);
        (self.step(piece, flow, item, now), expired)
    }

    fn step(&mut self, piece: Piece, flow: Option<F>, item: T, now: u64) -> Step<T, F> {
        let Piece {
            key,
            frag,
            len,
            size,
        } = piece;
        let (start, end) = (u32::from(frag.offset), u32::from(frag.offset) + len as u32);
        let fresh = !self.datagrams.contains_key(&key);
        if fresh {
            if self.datagrams.len() >= self.limits.datagrams {
                return Step::Drop(Cause::Limit, item);
            }
            self.datagrams.insert(
                key,
                Datagram {
                    flow: None,
                    born: now,
                    seen: Vec::new(),
                    end: None,
                    held: Vec::new(),
                },
            );
        }
        match self.admit(key, frag, (start, end), size, flow, item) {
            Ok(step) => {
                if fresh {
                    self.ages.push_back((now, key));
                }
                step
            }
            Err(drop) => {
                // a datagram is tracked from its first fragment let through
                if fresh {
                    self.datagrams.remove(&key);
                }
                drop
            }
        }
    }

    /// [`step`](Self::step) on the datagram `key`, which is tracked: the
    /// fragment's step, or its drop as an error.
    fn admit(
        &mut self,
        key: DatagramKey,
        frag: Fragment,
        (start, end): (u32, u32),
        size: usize,
        flow: Option<F>,
        item: T,
    ) -> Result<Step<T, F>, Step<T, F>> {
        let d = self.datagrams.get_mut(&key).expect("tracked");
        let beyond_end = d.end.is_some_and(|e| end > e || (!frag.more && end != e));
        if beyond_end || d.seen.iter().any(|&(s, e)| start < e && s < end) {
            return Err(Step::Drop(Cause::Overlap, item));
        }
        if !frag.more && d.seen.iter().any(|&(_, e)| e > end) {
            return Err(Step::Drop(Cause::Overlap, item));
        }
        if d.seen.len() >= self.limits.per_datagram {
            return Err(Step::Drop(Cause::Limit, item));
        }
        let step = match (flow, d.flow) {
            (Some(p), _) => {
                d.flow = Some(p);
                let held: Vec<T> = d
                    .held
                    .drain(..)
                    .map(|(t, n)| {
                        self.held_bytes -= n;
                        t
                    })
                    .collect();
                Step::First(item, held)
            }
            (None, Some(p)) => Step::Go(p, item),
            (None, None) => {
                if self.held_bytes + size > self.limits.held_bytes {
                    return Err(Step::Drop(Cause::Limit, item));
                }
                self.held_bytes += size;
                d.held.push((item, size));
                Step::Held
            }
        };
        d.seen.push((start, end));
        if !frag.more {
            d.end = Some(end);
        }
        // every byte passed: nothing more will come
        if let Some(e) = d.end {
            if d.flow.is_some() && d.seen.iter().map(|&(s, e)| e - s).sum::<u32>() == e {
                self.datagrams.remove(&key);
            }
        }
        Ok(step)
    }

    /// Forgets every datagram; returns how many held fragments that dropped.
    pub fn clear(&mut self) -> usize {
        let n = self.datagrams.values().map(|d| d.held.len()).sum();
        self.datagrams.clear();
        self.ages.clear();
        self.held_bytes = 0;
        n
    }

    /// Forgets the datagrams first seen `timeout_ns` or more before `now`;
    /// returns how many held fragments that dropped ([`Cause::Timeout`]).
    pub fn expire(&mut self, now: u64) -> usize {
        let mut dropped = 0;
        while let Some(&(born, key)) = self.ages.front() {
            if now.saturating_sub(born) < self.limits.timeout_ns {
                break;
            }
            self.ages.pop_front();
            // (a datagram completed and seen again later has a newer birth)
            if self.datagrams.get(&key).is_some_and(|d| d.born == born) {
                let d = self.datagrams.remove(&key).expect("just found");
                dropped += d.held.len();
                self.held_bytes -= d.held.iter().map(|(_, n)| n).sum::<usize>();
            }
        }
        // completed datagrams leave their age behind: keep the queue bounded
        if self.ages.len() > 2 * self.limits.datagrams.max(self.datagrams.len()) {
            let live = &self.datagrams;
            self.ages
                .retain(|(born, key)| live.get(key).is_some_and(|d| d.born == *born));
        }
        dropped
    }
}

/// An Ethernet frame holding an IPv4 packet split as a router with an MTU
/// of `mtu` bytes does (RFC 791): fragments of a multiple of 8 payload
/// bytes but the last, the header (options too) copied into each, offsets,
/// more-fragments flags, lengths and header checksums set. A frame that is
/// not IPv4, or whose packet fits, comes back alone. For tests and traces.
pub fn split(frame: &[u8], mtu: usize) -> Vec<Vec<u8>> {
    let Ok(info) = crate::parse(frame) else {
        return vec![frame.to_vec()];
    };
    let (l3, l4, end) = (
        info.l3_offset as usize,
        info.l4_offset as usize,
        info.l3_end as usize,
    );
    let hl = l4 - l3;
    if info.ip_version != crate::parse::IpVersion::V4 || end - l3 <= mtu || mtu < hl + 8 {
        return vec![frame.to_vec()];
    }
    let step = (mtu - hl) / 8 * 8;
    let body = &frame[l4..end];
    body.chunks(step)
        .enumerate()
        .map(|(i, part)| {
            let mut f = frame[..l4].to_vec();
            f.extend_from_slice(part);
            let more = (i + 1) * step < body.len();
            let off = (i * step / 8) as u16 | if more { 0x2000 } else { 0 };
            f[l3 + 2..l3 + 4].copy_from_slice(&((hl + part.len()) as u16).to_be_bytes());
            f[l3 + 6..l3 + 8].copy_from_slice(&off.to_be_bytes());
            crate::Ipv4Packet::new_unchecked(&mut f[l3..]).fill_checksum();
            f
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(id: u16) -> DatagramKey {
        DatagramKey {
            src: Ipv4Addr::new(10, 0, 0, 1),
            dst: Ipv4Addr::new(192, 0, 2, 1),
            proto: 17,
            id,
        }
    }

    fn piece(key: DatagramKey, frag: Fragment, len: usize, size: usize) -> Piece {
        Piece {
            key,
            frag,
            len,
            size,
        }
    }

    fn frag(offset: u16, more: bool) -> Fragment {
        Fragment {
            id: 0,
            offset,
            more,
        }
    }

    #[test]
    fn split_cuts_as_a_router_does() {
        use crate::repr::{EthernetRepr, IpRepr, Ipv4Repr, L4Repr, PacketRepr};
        let frame = |n: usize| {
            PacketRepr {
                eth: EthernetRepr {
                    src: [2, 0, 0, 0, 0, 1],
                    dst: [2, 0, 0, 0, 0, 2],
                    vlan: None,
                },
                ip: IpRepr::V4(Ipv4Repr {
                    src: Ipv4Addr::new(10, 0, 0, 1),
                    dst: Ipv4Addr::new(192, 0, 2, 1),
                    dscp: 0,
                    ecn: 0,
                    ident: 77,
                    dont_frag: false,
                    ttl: 64,
                    options: vec![],
                }),
                l4: L4Repr::Udp {
                    src_port: 1,
                    dst_port: 2,
                },
                payload: (0..n).map(|i| i as u8).collect(),
            }
            .to_bytes()
        };
        let whole = frame(4000);
        let parts = split(&whole, 1500);
        let got: Vec<(Fragment, usize)> = parts
            .iter()
            .map(|f| {
                let ip = crate::Ipv4Packet::new_checked(&f[14..]).unwrap();
                assert!(ip.verify_checksum());
                assert!(crate::parse_fragmentable(f).unwrap().fragment);
                (Fragment::of(&ip), ip.payload().len())
            })
            .collect();
        let at = |offset, more| Fragment {
            id: 77,
            offset,
            more,
        };
        assert_eq!(
            got,
            [
                (at(0, true), 1480),
                (at(1480, true), 1480),
                (at(2960, false), 1048)
            ]
        );
        let body: Vec<u8> = parts.iter().flat_map(|f| f[34..].to_vec()).collect();
        assert_eq!(body, whole[34..]);
        // a packet that fits is left whole
        assert_eq!(split(&frame(100), 1500), [frame(100)]);
    }

    #[test]
    fn in_order_fragments_get_the_first_ones_ports_and_the_datagram_ends() {
        let mut t: Table<char, (u16, u16)> = Table::new(Limits::default());
        let (s, _) = t.offer(
            piece(key(1), frag(0, true), 1480, 1514),
            Some((5, 53)),
            'a',
            0,
        );
        assert_eq!(s, Step::First('a', vec![]));
        let (s, _) = t.offer(piece(key(1), frag(1480, true), 1480, 1514), None, 'b', 1);
        assert_eq!(s, Step::Go((5, 53), 'b'));
        let (s, _) = t.offer(piece(key(1), frag(2960, false), 1048, 1082), None, 'c', 2);
        assert_eq!(s, Step::Go((5, 53), 'c'));
        assert!(
            t.is_empty(),
            "a datagram whose bytes all passed is forgotten"
        );
    }

    #[test]
    fn fragments_before_their_first_are_held_then_released_after_it() {
        let mut t: Table<char, (u16, u16)> = Table::new(Limits::default());
        assert_eq!(
            t.offer(piece(key(1), frag(1480, true), 8, 50), None, 'z', 0)
                .0,
            Step::Held
        );
        assert_eq!(t.clear(), 1);
        assert_eq!(
            t.offer(piece(key(2), frag(2960, false), 1048, 1100), None, 'c', 0)
                .0,
            Step::Held
        );
        assert_eq!(
            t.offer(piece(key(2), frag(1480, true), 1480, 1500), None, 'b', 1)
                .0,
            Step::Held
        );
        assert_eq!(t.held_bytes(), 2600);
        let (s, _) = t.offer(
            piece(key(2), frag(0, true), 1480, 1500),
            Some((7, 9)),
            'a',
            2,
        );
        assert_eq!(s, Step::First('a', vec!['c', 'b']));
        assert_eq!(t.held_bytes(), 0);
        assert!(t.is_empty());
    }

    #[test]
    fn overlaps_and_duplicates_are_dropped() {
        let mut t: Table<char, (u16, u16)> = Table::new(Limits::default());
        t.offer(
            piece(key(3), frag(0, true), 1480, 1500),
            Some((1, 2)),
            'a',
            0,
        );
        let (s, _) = t.offer(piece(key(3), frag(1000, true), 1480, 1500), None, 'x', 1);
        assert_eq!(s, Step::Drop(Cause::Overlap, 'x'));
        let (s, _) = t.offer(
            piece(key(3), frag(0, true), 1480, 1500),
            Some((1, 2)),
            'd',
            1,
        );
        assert_eq!(s, Step::Drop(Cause::Overlap, 'd'));
        // a last fragment that ends before bytes already seen
        t.offer(piece(key(4), frag(2960, true), 8, 100), None, 'h', 0);
        let (s, _) = t.offer(piece(key(4), frag(1480, false), 16, 100), None, 'y', 1);
        assert_eq!(s, Step::Drop(Cause::Overlap, 'y'));
    }

    #[test]
    fn held_fragments_time_out_and_are_counted() {
        let lim = Limits {
            timeout_ns: 100,
            ..Limits::default()
        };
        let mut t: Table<char, (u16, u16)> = Table::new(lim);
        t.offer(piece(key(5), frag(1480, true), 1480, 1500), None, 'b', 0);
        t.offer(piece(key(6), frag(1480, true), 1480, 1500), None, 'b', 50);
        assert_eq!(t.expire(99), 0);
        assert_eq!(t.expire(100), 1);
        assert_eq!(t.len(), 1);
        // the first fragment of the expired datagram starts it anew
        let (s, expired) = t.offer(
            piece(key(5), frag(0, true), 1480, 1500),
            Some((1, 2)),
            'a',
            160,
        );
        assert_eq!((s, expired), (Step::First('a', vec![]), 1));
        assert_eq!(t.held_bytes(), 0);
    }

    #[test]
    fn a_flood_stays_within_its_bounds() {
        let lim = Limits {
            datagrams: 100,
            held_bytes: 50 * 1500,
            per_datagram: 8,
            timeout_ns: 1_000_000,
        };
        let mut t: Table<u32, (u16, u16)> = Table::new(lim);
        let (mut held, mut limit, mut expired) = (0, 0, 0);
        for i in 0..100_000u32 {
            // later fragments only, of ever new datagrams, never completed
            let k = DatagramKey {
                id: i as u16,
                src: Ipv4Addr::from(i >> 16),
                ..key(0)
            };
            let (s, e) = t.offer(
                piece(k, frag(1480, true), 1480, 1500),
                None,
                i,
                u64::from(i) * 100,
            );
            expired += e;
            match s {
                Step::Held => held += 1,
                Step::Drop(Cause::Limit, _) => limit += 1,
                other => panic!("{other:?}"),
            }
            assert!(t.len() <= 100 && t.held_bytes() <= 50 * 1500);
            // only datagrams that hold a fragment are tracked
            assert_eq!(t.len(), t.held_bytes() / 1500);
            assert!(t.ages.len() <= 200);
        }
        // every held fragment either timed out or is still held
        assert_eq!(held, expired + t.held_bytes() / 1500);
        assert!(limit > 0 && held > 0);
        // one datagram's fragments are bounded too
        let mut t: Table<u16, (u16, u16)> = Table::new(lim);
        let got: Vec<_> = (0..20u16)
            .map(|i| {
                t.offer(piece(key(9), frag(i * 8, true), 8, 50), None, i, 0)
                    .0
            })
            .collect();
        assert_eq!(got.iter().filter(|s| **s == Step::Held).count(), 8);
    }
}
