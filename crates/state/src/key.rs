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

/// Canonical bidirectional key: endpoints ordered, addresses as 16 bytes
/// (IPv4-mapped for IPv4). 40 bytes as five 64-bit words (the little-endian
/// words of the lower address's bytes, the higher address's, then
/// `lo_port | hi_port << 16 | proto << 32 | v6 << 40`), compared and hashed
/// word by word.
#[derive(
    Copy, Clone, Debug, Eq, PartialOrd, Ord, Default, serde::Serialize, serde::Deserialize,
)]
#[repr(C)]
pub struct FlowKey {
    w: [u64; 5],
}

impl PartialEq for FlowKey {
    /// The words' equality, without a branch per word (nor a call to
    /// `memcmp`).
    #[inline(always)]
    fn eq(&self, o: &FlowKey) -> bool {
        let [a, b, c, d, e] = self.w;
        let [f, g, h, i, j] = o.w;
        ((a ^ f) | (b ^ g) | (c ^ h) | (d ^ i) | (e ^ j)) == 0
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

impl FlowKey {
    /// The key of a tuple and which side sent it.
    #[inline]
    pub fn of(t: &FiveTuple) -> (FlowKey, Side) {
        if let (IpAddr::V4(s), IpAddr::V4(d)) = (t.src, t.dst) {
            // the common case on 32-bit addresses: same key as below, each
            // endpoint as one 48-bit number (address, port), so the order of
            // the endpoints is one comparison
            let (so, dob) = (s.octets(), d.octets());
            let a = u64::from(u32::from_be_bytes(so)) << 16 | u64::from(t.src_port);
            let b = u64::from(u32::from_be_bytes(dob)) << 16 | u64::from(t.dst_port);
            // ::ffff:a.b.c.d: bytes 8..16 are 0, 0, 0xff, 0xff, a, b, c, d
            // (the address's bytes as they are, no swap back)
            let mapped = |o: [u8; 4]| 0xffff_0000 | u64::from(u32::from_le_bytes(o)) << 32;
            let (sm, dm) = (mapped(so), mapped(dob));
            let (lo, hi, lm, hm, side) = if a <= b {
                (a, b, sm, dm, Side::Lo)
            } else {
                (b, a, dm, sm, Side::Hi)
            };
            let tail = (lo & 0xffff) | (hi & 0xffff) << 16 | u64::from(t.proto) << 32;
            let k = FlowKey {
                w: [0, lm, 0, hm, tail],
            };
            return (k, side);
        }
        Self::of_any(t)
    }

    /// [`of`](Self::of) without its IPv4 shortcut: any address family.
    fn of_any(t: &FiveTuple) -> (FlowKey, Side) {
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
                w: [l0, l1, h0, h1, tail],
            },
            side,
        )
    }

    /// A software hash of the key (multiply-xor over its five 64-bit words), for
    /// indexing when the RSS hash lacks entropy.
    #[inline]
    pub fn mix(&self) -> u32 {
        let mut h = 0x243f_6a88_85a3_08d3u64;
        for x in self.w {
            h = (h ^ x).wrapping_mul(0x9e37_79b9_7f4a_7c15);
            h ^= h >> 29;
        }
        (h >> 32) as u32
    }

    /// A cheaper hash of the key than [`mix`](Self::mix), for a flow table's
    /// index: two 64 × 64 → 128-bit multiplies, each folded (as wyhash does).
    #[inline]
    pub fn index_mix(&self) -> u32 {
        let [a, b, c, d, e] = self.w;
        let m = |x: u64, y: u64| {
            let p = u128::from(x) * u128::from(y);
            (p as u64) ^ (p >> 64) as u64
        };
        let x = m(
            b ^ a.rotate_left(29) ^ 0xa076_1d64_78bd_642f,
            d ^ c.rotate_left(29) ^ 0xe703_7ed1_a0b4_28db,
        );
        let y = m(x ^ e ^ 0x8ebc_6af0_9c88_c6e3, 0x5899_65cc_7537_4cc3);
        (y ^ y >> 32) as u32
    }

    /// IP protocol of the flow.
    pub fn proto(&self) -> u8 {
        (self.w[4] >> 32) as u8
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::net::Ipv4Addr;

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

    #[test]
    fn ipv4_keys_are_the_mapped_ipv6_keys() {
        // the IPv4 shortcut builds the same words as the IPv4-mapped address
        let generic = FlowKey::of_any;
        let t = FiveTuple {
            src: IpAddr::V4(Ipv4Addr::new(192, 0, 2, 9)),
            dst: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
            src_port: 40000,
            dst_port: 80,
            proto: 17,
        };
        let (k, side) = FlowKey::of(&t);
        assert_eq!(side, Side::Hi);
        assert_eq!((k, side), generic(&t));
        assert_eq!(k.proto(), 17);
        let same_addr = FiveTuple {
            dst: t.src,
            dst_port: 1,
            ..t
        };
        assert_eq!(FlowKey::of(&same_addr).1, Side::Hi);
        assert_eq!(FlowKey::of(&same_addr), generic(&same_addr));
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..10_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let t = FiveTuple {
                src: IpAddr::V4(Ipv4Addr::from((x >> 32) as u32 & 0xff00_00ff)),
                dst: IpAddr::V4(Ipv4Addr::from(x as u32 & 0xff00_00ff)),
                src_port: (x >> 20) as u16 & 0x0f0f,
                dst_port: (x >> 40) as u16 & 0x0f0f,
                proto: (x >> 60) as u8,
            };
            assert_eq!(FlowKey::of(&t), generic(&t), "{t:?}");
        }
    }

    #[test]
    fn the_mix_of_a_key_is_its_bytes_mix() {
        // `mix` is what it was over the key's bytes (the load balancer's
        // placement and the offload slices depend on it)
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
