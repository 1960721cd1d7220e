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
/// (IPv4-mapped for IPv4). 40 bytes, compared with one `memcmp`.
#[derive(
    Copy,
    Clone,
    Debug,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Default,
    serde::Serialize,
    serde::Deserialize,
)]
#[repr(C)]
pub struct FlowKey {
    lo_addr: [u8; 16],
    hi_addr: [u8; 16],
    lo_port: u16,
    hi_port: u16,
    proto: u8,
    v6: bool,
    _pad: [u8; 2],
}

/// The address as a 128-bit integer (IPv4 as IPv4-mapped IPv6).
#[inline(always)]
fn bits(a: IpAddr) -> u128 {
    match a {
        IpAddr::V4(a) => 0xffff_0000_0000 | u128::from(u32::from(a)),
        IpAddr::V6(a) => u128::from(a),
    }
}

impl FlowKey {
    /// The key of a tuple and which side sent it.
    #[inline]
    pub fn of(t: &FiveTuple) -> (FlowKey, Side) {
        if let (IpAddr::V4(s), IpAddr::V4(d)) = (t.src, t.dst) {
            // the common case on 32-bit addresses: same key as below
            let (s, d) = (u32::from(s), u32::from(d));
            let (lo, hi, lp, hp, side) = if (s, t.src_port) <= (d, t.dst_port) {
                (s, d, t.src_port, t.dst_port, Side::Lo)
            } else {
                (d, s, t.dst_port, t.src_port, Side::Hi)
            };
            let mapped = |a: u32| {
                let mut b = [0u8; 16];
                b[10] = 0xff;
                b[11] = 0xff;
                b[12..].copy_from_slice(&a.to_be_bytes());
                b
            };
            let k = FlowKey {
                lo_addr: mapped(lo),
                hi_addr: mapped(hi),
                lo_port: lp,
                hi_port: hp,
                proto: t.proto,
                v6: false,
                _pad: [0; 2],
            };
            return (k, side);
        }
        let (s, d) = (bits(t.src), bits(t.dst));
        let v6 = t.src.is_ipv6();
        let (lo, hi, lp, hp, side) = if (s, t.src_port) <= (d, t.dst_port) {
            (s, d, t.src_port, t.dst_port, Side::Lo)
        } else {
            (d, s, t.dst_port, t.src_port, Side::Hi)
        };
        let k = FlowKey {
            lo_addr: lo.to_be_bytes(),
            hi_addr: hi.to_be_bytes(),
            lo_port: lp,
            hi_port: hp,
            proto: t.proto,
            v6,
            _pad: [0; 2],
        };
        (k, side)
    }

    /// A software hash of the key (multiply-xor over its five 64-bit words), for
    /// indexing when the RSS hash lacks entropy.
    #[inline]
    pub fn mix(&self) -> u32 {
        let w = |b: &[u8]| u64::from_le_bytes(b.try_into().expect("8 bytes"));
        let (a, b) = (&self.lo_addr, &self.hi_addr);
        let tail = u64::from(self.lo_port)
            | u64::from(self.hi_port) << 16
            | u64::from(self.proto) << 32
            | u64::from(self.v6) << 40;
        let mut h = 0x243f_6a88_85a3_08d3u64;
        for x in [w(&a[..8]), w(&a[8..]), w(&b[..8]), w(&b[8..]), tail] {
            h = (h ^ x).wrapping_mul(0x9e37_79b9_7f4a_7c15);
            h ^= h >> 29;
        }
        (h >> 32) as u32
    }

    /// IP protocol of the flow.
    pub fn proto(&self) -> u8 {
        self.proto
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
        // the IPv4 shortcut builds the same bytes as the IPv4-mapped address
        let t = FiveTuple {
            src: IpAddr::V4(Ipv4Addr::new(192, 0, 2, 9)),
            dst: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
            src_port: 40000,
            dst_port: 80,
            proto: 17,
        };
        let (k, side) = FlowKey::of(&t);
        assert_eq!(side, Side::Hi);
        assert_eq!(k.lo_addr, bits(t.dst).to_be_bytes());
        assert_eq!(k.hi_addr, bits(t.src).to_be_bytes());
        assert_eq!(
            (k.lo_port, k.hi_port, k.proto, k.v6),
            (80, 40000, 17, false)
        );
        let same_addr = FiveTuple {
            dst: t.src,
            dst_port: 1,
            ..t
        };
        assert_eq!(FlowKey::of(&same_addr).1, Side::Hi);
    }
}
