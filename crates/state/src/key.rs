//! The flow-table key: a compact, canonical bidirectional 5-tuple, so both
//! directions of a connection find the same entry.

use core::net::IpAddr;

use wire::FiveTuple;

/// Which endpoint of a [`FlowKey`] sent a packet.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Side {
    /// The lower endpoint sent it.
    Lo,
    /// The higher endpoint sent it.
    Hi,
}

/// A packet's direction relative to the flow entry: `Original` is the direction of
/// the packet that created the entry.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Default)]
pub enum Dir {
    /// Same direction as the first packet of the flow.
    #[default]
    Original,
    /// The opposite direction.
    Reply,
}

/// Canonical bidirectional key: endpoints ordered, 40 bytes as five 64-bit
/// words, compared and hashed word by word.
///
/// An IPv4 flow, the common case, fills the first two words and leaves the
/// other three 0: each endpoint as one 48-bit number `address << 16 | port`,
/// the lower one with the protocol above it (`lo | proto << 48`), then the
/// higher one. Any other flow has its addresses as 16 bytes (the
/// little-endian words of the lower address's bytes, the higher's) around
/// `lo_port | hi_port << 16 | proto << 32 | 1 << 63` in the second word: that
/// top bit, never set for IPv4, says from the first two words alone whether
/// the other three are 0, so an IPv4 key is compared and index-hashed on two
/// words.
#[derive(
    Copy, Clone, Debug, Eq, PartialOrd, Ord, Default, serde::Serialize, serde::Deserialize,
)]
#[repr(C)]
pub struct FlowKey {
    w: [u64; 5],
}

/// The second word's bit that marks a key of 16-byte addresses.
const WIDE: u64 = 1 << 63;

impl PartialEq for FlowKey {
    /// The words' equality: the first two, then the other three unless the
    /// key is an IPv4 one (without a call to `memcmp`).
    #[inline(always)]
    fn eq(&self, o: &FlowKey) -> bool {
        let [a, b, c, d, e] = self.w;
        let [f, g, h, i, j] = o.w;
        ((a ^ f) | (b ^ g)) == 0 && (b & WIDE == 0 || ((c ^ h) | (d ^ i) | (e ^ j)) == 0)
    }
}

impl core::hash::Hash for FlowKey {
    /// The words, as equality compares them.
    fn hash<H: core::hash::Hasher>(&self, h: &mut H) {
        self.w.hash(h);
    }
}

/// The address as a 128-bit integer (IPv4 as IPv4-mapped IPv6).
#[inline(always)]
fn bits(a: IpAddr) -> u128 {
    match a {
        IpAddr::V4(a) => 0xffff_0000_0000 | u128::from(u32::from(a)),
        IpAddr::V6(a) => u128::from(a),
    }
}

/// The two little-endian words of an address's 16 bytes (big-endian `a`).
#[inline(always)]
fn words(a: u128) -> (u64, u64) {
    let b = a.to_be_bytes();
    let w = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
    (w(0), w(8))
}

/// Bits of an IPv4 endpoint (`address << 16 | port`) in the first two words.
const ENDPOINT: u64 = (1 << 48) - 1;

impl FlowKey {
    /// The key of a tuple and which side sent it.
    #[inline]
    pub fn of(t: &FiveTuple) -> (FlowKey, Side) {
        if let (IpAddr::V4(s), IpAddr::V4(d)) = (t.src, t.dst) {
            // each endpoint one 48-bit number, so their order is one
            // comparison (the order of `of_wide`: address, then port)
            let a = u64::from(u32::from(s)) << 16 | u64::from(t.src_port);
            let b = u64::from(u32::from(d)) << 16 | u64::from(t.dst_port);
            let (lo, hi, side) = if a <= b {
                (a, b, Side::Lo)
            } else {
                (b, a, Side::Hi)
            };
            let k = FlowKey {
                w: [lo | u64::from(t.proto) << 48, hi, 0, 0, 0],
            };
            return (k, side);
        }
        Self::of_wide(t)
    }

    /// The key of a tuple of 16-byte addresses (IPv6, or families mixed:
    /// IPv4 as IPv4-mapped), and which side sent it.
    fn of_wide(t: &FiveTuple) -> (FlowKey, Side) {
        let (s, d) = (bits(t.src), bits(t.dst));
        let v6 = t.src.is_ipv6();
        let (lo, hi, lp, hp, side) = if (s, t.src_port) <= (d, t.dst_port) {
            (s, d, t.src_port, t.dst_port, Side::Lo)
        } else {
            (d, s, t.dst_port, t.src_port, Side::Hi)
        };
        let (l0, l1) = words(lo);
        let (h0, h1) = words(hi);
        let tail =
            u64::from(lp) | u64::from(hp) << 16 | u64::from(t.proto) << 32 | u64::from(v6) << 40;
        (
            FlowKey {
                w: [l0, tail | WIDE, l1, h0, h1],
            },
            side,
        )
    }

    /// True for a key of 16-byte addresses (not an IPv4 flow's).
    #[inline(always)]
    fn wide(&self) -> bool {
        self.w[1] & WIDE != 0
    }

    /// The key as every flow's addresses in 16 bytes (IPv4 as IPv4-mapped
    /// IPv6): the little-endian words of the lower address's bytes, the
    /// higher's, then `lo_port | hi_port << 16 | proto << 32 | v6 << 40`.
    /// [`mix`](Self::mix) hashes this form, so a flow's mix does not depend on
    /// how the key keeps it.
    fn canonical(&self) -> [u64; 5] {
        let [a, b, c, d, e] = self.w;
        if self.wide() {
            return [a, c, d, e, b & !WIDE];
        }
        // ::ffff:a.b.c.d: bytes 8..16 are 0, 0, 0xff, 0xff, a, b, c, d
        let mapped = |ep: u64| 0xffff_0000 | u64::from(((ep >> 16) as u32).swap_bytes()) << 32;
        let (lo, hi) = (a & ENDPOINT, b & ENDPOINT);
        let tail = (lo & 0xffff) | (hi & 0xffff) << 16 | (a >> 48) << 32;
        [0, mapped(lo), 0, mapped(hi), tail]
    }

    /// A software hash of the key (multiply-xor over the five 64-bit words
    /// of its [`canonical`](Self::canonical) form), for placing flows (the
    /// load balancer, the offload slices) when the RSS hash lacks entropy.
    #[inline]
    pub fn mix(&self) -> u32 {
        let mut h = 0x243f_6a88_85a3_08d3u64;
        for x in self.canonical() {
            h = (h ^ x).wrapping_mul(0x9e37_79b9_7f4a_7c15);
            h ^= h >> 29;
        }
        (h >> 32) as u32
    }

    /// A cheaper hash of the key than [`mix`](Self::mix), for a flow table's
    /// index: a 64 × 64 → 128-bit multiply folded (as wyhash does) of the two
    /// words of an IPv4 key; two of them for a wider key.
    #[inline]
    pub fn index_mix(&self) -> u32 {
        let [a, b, c, d, e] = self.w;
        let m = |x: u64, y: u64| {
            let p = u128::from(x) * u128::from(y);
            (p as u64) ^ (p >> 64) as u64
        };
        // (an IPv4 key's words have their top bytes 0, the constants' are
        // not: neither factor is ever 0)
        let y = if !self.wide() {
            m(a ^ 0xa076_1d64_78bd_642f, b ^ 0xe703_7ed1_a0b4_28db)
        } else {
            let x = m(
                c ^ a.rotate_left(29) ^ 0xa076_1d64_78bd_642f,
                e ^ d.rotate_left(29) ^ 0xe703_7ed1_a0b4_28db,
            );
            m(x ^ b ^ 0x8ebc_6af0_9c88_c6e3, 0x5899_65cc_7537_4cc3)
        };
        (y ^ y >> 32) as u32
    }

    /// The tuple of the packets `side` sends (the inverse of
    /// [`of`](Self::of): `FlowKey::of(t)` gives `(k, side)` and
    /// `k.tuple(side) == t`), for showing a flow to an operator.
    pub fn tuple(&self, side: Side) -> FiveTuple {
        let [a, b, c, d, e] = self.w;
        let (lo, hi, lp, hp) = if self.wide() {
            let addr = |x: u64, y: u64| {
                let mut bytes = [0u8; 16];
                bytes[..8].copy_from_slice(&x.to_le_bytes());
                bytes[8..].copy_from_slice(&y.to_le_bytes());
                let v6 = core::net::Ipv6Addr::from(bytes);
                // families mixed or IPv4 in a wide key: IPv4-mapped
                match (b >> 40) & 1 {
                    0 => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
                    _ => IpAddr::V6(v6),
                }
            };
            (addr(a, c), addr(d, e), b as u16, (b >> 16) as u16)
        } else {
            let ep = |x: u64| IpAddr::V4(core::net::Ipv4Addr::from(((x & ENDPOINT) >> 16) as u32));
            (ep(a), ep(b), a as u16, b as u16)
        };
        let (src, dst, src_port, dst_port) = match side {
            Side::Lo => (lo, hi, lp, hp),
            Side::Hi => (hi, lo, hp, lp),
        };
        FiveTuple {
            src,
            dst,
            src_port,
            dst_port,
            proto: self.proto(),
        }
    }

    /// IP protocol of the flow.
    pub fn proto(&self) -> u8 {
        if self.wide() {
            (self.w[1] >> 32) as u8
        } else {
            (self.w[0] >> 48) as u8
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::net::Ipv4Addr;

    proptest::proptest! {
        #[test]
        fn a_key_gives_back_each_sides_tuple(
            s in proptest::prelude::any::<[u8; 16]>(),
            d in proptest::prelude::any::<[u8; 16]>(),
            sp: u16, dp: u16, proto: u8, v6: bool,
        ) {
            let (src, dst) = if v6 {
                (IpAddr::from(s), IpAddr::from(d))
            } else {
                (
                    IpAddr::from([s[0], s[1], s[2], s[3]]),
                    IpAddr::from([d[0], d[1], d[2], d[3]]),
                )
            };
            let t = FiveTuple { src, dst, src_port: sp, dst_port: dp, proto };
            let (k, side) = FlowKey::of(&t);
            proptest::prop_assert_eq!(k.tuple(side), t);
            let other = if side == Side::Lo { Side::Hi } else { Side::Lo };
            proptest::prop_assert_eq!(k.tuple(other), t.reversed());
        }
    }

    #[test]
    fn both_directions_one_key() {
        let t = FiveTuple {
            src: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
            dst: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
            src_port: 1,
            dst_port: 2,
            proto: 6,
        };
        let (a, sa) = FlowKey::of(&t);
        let (b, sb) = FlowKey::of(&t.reversed());
        assert_eq!(a, b);
        assert_ne!(sa, sb);
        assert_eq!(core::mem::size_of::<FlowKey>(), 40);
    }

    /// Random tuples from `x`'s xorshift sequence, with few distinct
    /// addresses and ports so that endpoints and whole tuples repeat.
    fn tuples(mut x: u64, n: usize, v6: bool) -> Vec<FiveTuple> {
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let (s, d) = ((x >> 32) as u32 & 0xff00_00ff, x as u32 & 0xff00_00ff);
                let addr = |a: u32| {
                    if v6 {
                        IpAddr::V6(core::net::Ipv6Addr::new(
                            0x2001,
                            0xdb8,
                            0,
                            (a >> 24) as u16,
                            0,
                            0,
                            0,
                            a as u16,
                        ))
                    } else {
                        IpAddr::V4(Ipv4Addr::from(a))
                    }
                };
                FiveTuple {
                    src: addr(s),
                    dst: addr(d),
                    src_port: (x >> 20) as u16 & 0x0f0f,
                    dst_port: (x >> 40) as u16 & 0x0f0f,
                    proto: (x >> 60) as u8,
                }
            })
            .collect()
    }

    #[test]
    fn ipv4_keys_are_the_mapped_ipv6_keys_in_two_words() {
        // the IPv4 key orders the endpoints as the 16-byte form of their
        // IPv4-mapped addresses does, and is that key in canonical form
        let t = FiveTuple {
            src: IpAddr::V4(Ipv4Addr::new(192, 0, 2, 9)),
            dst: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
            src_port: 40000,
            dst_port: 80,
            proto: 17,
        };
        let (k, side) = FlowKey::of(&t);
        assert_eq!(side, Side::Hi);
        assert!(!k.wide());
        assert_eq!(k.w[2..], [0, 0, 0]);
        let (w, wside) = FlowKey::of_wide(&t);
        assert!(w.wide());
        assert_eq!((k.canonical(), side), (w.canonical(), wside));
        assert_eq!((k.proto(), w.proto()), (17, 17));
        let same_addr = FiveTuple {
            dst: t.src,
            dst_port: 1,
            ..t
        };
        assert_eq!(FlowKey::of(&same_addr).1, Side::Hi);
        for t in tuples(0x9e37_79b9_7f4a_7c15, 10_000, false) {
            let (k, side) = FlowKey::of(&t);
            let (w, wside) = FlowKey::of_wide(&t);
            assert_eq!((k.canonical(), side), (w.canonical(), wside), "{t:?}");
            assert_eq!(k.proto(), t.proto);
            assert_eq!(k.mix(), w.mix());
        }
    }

    #[test]
    fn keys_are_equal_exactly_when_their_flows_are() {
        // every word counts: IPv4 keys on their two, wider keys on all five
        // (the addresses' last bytes are in the words past the first two);
        // tuples of 2 048 kinds, so many are the same or one bit apart
        let narrow = |t: FiveTuple| FiveTuple {
            src_port: t.src_port & 3,
            dst_port: t.dst_port & 3,
            proto: t.proto & 1,
            ..t
        };
        let few = |a: IpAddr| match a {
            IpAddr::V4(a) => IpAddr::V4(Ipv4Addr::from(u32::from(a) & 0x0100_0003)),
            IpAddr::V6(a) => IpAddr::V6((u128::from(a) & !0xfffc_0000_0000_0000_fffc).into()),
        };
        for v6 in [false, true] {
            let ts: Vec<_> = tuples(0x2545_f491_4f6c_dd1d, 3_000, v6)
                .into_iter()
                .map(|t| FiveTuple {
                    src: few(t.src),
                    dst: few(t.dst),
                    ..narrow(t)
                })
                .collect();
            for (i, a) in ts.iter().enumerate().step_by(3) {
                let (ka, _) = FlowKey::of(a);
                assert_eq!(ka.wide(), v6);
                assert_eq!(ka.proto(), a.proto);
                for b in &ts[i..] {
                    let (kb, _) = FlowKey::of(b);
                    let same = a == b || *a == b.reversed();
                    assert_eq!(ka == kb, same, "{a:?} {b:?}");
                    if same {
                        assert_eq!(ka.index_mix(), kb.index_mix());
                    }
                }
            }
        }
    }

    #[test]
    fn index_mix_spreads_near_keys() {
        // 2^16 IPv4 flows that differ in one endpoint's port and address's
        // last byte only: their index hashes are (nearly) all distinct and
        // fill 1 024 home buckets evenly (the table's index takes the top
        // bits of a Fibonacci product of the hash)
        let mut seen = std::collections::HashSet::new();
        let mut buckets = vec![0u32; 1024];
        for i in 0..1u32 << 16 {
            let t = FiveTuple {
                src: IpAddr::V4(Ipv4Addr::new(10, 0, 0, (i >> 8) as u8)),
                dst: IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)),
                src_port: 1024 + (i & 0xff) as u16,
                dst_port: 443,
                proto: 6,
            };
            let h = FlowKey::of(&t).0.index_mix();
            seen.insert(h);
            buckets[((u64::from(h).wrapping_mul(0x9e37_79b9_7f4a_7c15)) >> 54) as usize] += 1;
        }
        assert!(seen.len() >= (1 << 16) - 4, "{} distinct", seen.len());
        // 64 a bucket on average: a uniform hash keeps every bucket within
        // ±40 % of it (7 standard deviations)
        let (lo, hi) = (buckets.iter().min().unwrap(), buckets.iter().max().unwrap());
        assert!(*lo >= 38 && *hi <= 90, "buckets between {lo} and {hi}");
    }

    #[test]
    fn the_mix_of_a_key_is_its_bytes_mix() {
        // `mix` is what it was over the canonical key's bytes (the load
        // balancer's placement and the offload slices depend on it)
        let t = FiveTuple {
            src: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
            dst: IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)),
            src_port: 4321,
            dst_port: 80,
            proto: 6,
        };
        let mut bytes = [0u8; 40];
        bytes[10] = 0xff;
        bytes[11] = 0xff;
        bytes[12..16].copy_from_slice(&[10, 0, 0, 2]);
        bytes[26] = 0xff;
        bytes[27] = 0xff;
        bytes[28..32].copy_from_slice(&[192, 0, 2, 1]);
        bytes[32..34].copy_from_slice(&4321u16.to_le_bytes());
        bytes[34..36].copy_from_slice(&80u16.to_le_bytes());
        bytes[36] = 6;
        let mut h = 0x243f_6a88_85a3_08d3u64;
        for c in bytes.chunks(8) {
            let x = u64::from_le_bytes(c.try_into().unwrap());
            h = (h ^ x).wrapping_mul(0x9e37_79b9_7f4a_7c15);
            h ^= h >> 29;
        }
        assert_eq!(FlowKey::of(&t).0.mix(), (h >> 32) as u32);
    }
}
