//! The Internet checksum: full computation (RFC 1071) and incremental update
//! (RFC 1624), plus the IPv4 and IPv6 pseudo-headers of TCP, UDP and ICMPv6.
//!
//! Sums are kept in a `u64` accumulator of 16-bit big-endian words and folded at the
//! end, so long buffers never overflow and summing is order-independent.

use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Adds `data` as big-endian 16-bit words (an odd trailing byte is padded with zero)
/// to the unfolded accumulator `acc`.
#[inline]
pub fn add_bytes(mut acc: u64, data: &[u8]) -> u64 {
    let mut chunks = data.chunks_exact(8);
    for c in &mut chunks {
        // Four 16-bit words at a time; each word ≤ 0xffff so the u64 cannot overflow
        // for any buffer shorter than 2^48 bytes.
        acc += u64::from(u16::from_be_bytes([c[0], c[1]]))
            + u64::from(u16::from_be_bytes([c[2], c[3]]))
            + u64::from(u16::from_be_bytes([c[4], c[5]]))
            + u64::from(u16::from_be_bytes([c[6], c[7]]));
    }
    let rest = chunks.remainder();
    let mut pairs = rest.chunks_exact(2);
    for p in &mut pairs {
        acc += u64::from(u16::from_be_bytes([p[0], p[1]]));
    }
    if let [last] = pairs.remainder() {
        acc += u64::from(*last) << 8;
    }
    acc
}

/// Folds an accumulator into 16 bits with end-around carry (the one's-complement sum).
#[inline]
pub fn fold(mut acc: u64) -> u16 {
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc as u16
}

/// The Internet checksum of `data` (RFC 1071): the complement of the one's-complement sum.
#[inline]
pub fn checksum(data: &[u8]) -> u16 {
    !fold(add_bytes(0, data))
}

/// The unfolded sum of the IPv4 pseudo-header (RFC 9293 §3.1, RFC 768).
#[inline]
pub fn pseudo_header_v4(src: Ipv4Addr, dst: Ipv4Addr, protocol: u8, l4_len: u16) -> u64 {
    let acc = add_bytes(0, &src.octets());
    let acc = add_bytes(acc, &dst.octets());
    acc + u64::from(protocol) + u64::from(l4_len)
}

/// The unfolded sum of the IPv6 pseudo-header (RFC 8200 §8.1).
#[inline]
pub fn pseudo_header_v6(src: Ipv6Addr, dst: Ipv6Addr, next_header: u8, l4_len: u32) -> u64 {
    let acc = add_bytes(0, &src.octets());
    let acc = add_bytes(acc, &dst.octets());
    acc + u64::from(l4_len >> 16) + u64::from(l4_len & 0xffff) + u64::from(next_header)
}

/// The pseudo-header sum for either family. `src` and `dst` must be of one family;
/// a mixed pair sums as IPv6 with the IPv4 address mapped (never panics).
#[inline]
pub fn pseudo_header(src: IpAddr, dst: IpAddr, protocol: u8, l4_len: u32) -> u64 {
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => pseudo_header_v4(s, d, protocol, l4_len as u16),
        (s, d) => pseudo_header_v6(to_v6(s), to_v6(d), protocol, l4_len),
    }
}

fn to_v6(a: IpAddr) -> Ipv6Addr {
    match a {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    }
}

/// The checksum of an L4 segment (header with a zero checksum field, plus payload)
/// including its pseudo-header.
#[inline]
pub fn l4_checksum(src: IpAddr, dst: IpAddr, protocol: u8, segment: &[u8]) -> u16 {
    !fold(add_bytes(
        pseudo_header(src, dst, protocol, segment.len() as u32),
        segment,
    ))
}

/// Incremental update of a checksum when one 16-bit word changes from `old` to `new`
/// (RFC 1624, eqn. 3: `HC' = ~(~HC + ~m + m')`).
#[inline]
pub fn update_u16(check: u16, old: u16, new: u16) -> u16 {
    let acc = u64::from(!check) + u64::from(!old) + u64::from(new);
    !fold(acc)
}

/// Incremental update when a 32-bit field (an IPv4 address, a TCP sequence number)
/// changes.
#[inline]
pub fn update_u32(check: u16, old: u32, new: u32) -> u16 {
    let acc = u64::from(!check)
        + u64::from(!(old >> 16) as u16)
        + u64::from(!(old as u16))
        + u64::from((new >> 16) as u16)
        + u64::from(new as u16);
    !fold(acc)
}

/// Incremental update when an even-length byte field changes from `old` to `new`
/// (e.g. an IPv6 address). The slices must have the same, even length.
#[inline]
pub fn update_bytes(check: u16, old: &[u8], new: &[u8]) -> u16 {
    debug_assert_eq!(old.len(), new.len());
    debug_assert_eq!(old.len() % 2, 0);
    let mut acc = u64::from(!check);
    for (o, n) in old.chunks_exact(2).zip(new.chunks_exact(2)) {
        acc += u64::from(!u16::from_be_bytes([o[0], o[1]]));
        acc += u64::from(u16::from_be_bytes([n[0], n[1]]));
    }
    !fold(acc)
}

/// Incremental update of a **UDP** checksum: over IPv4 a zero checksum means "none"
/// and stays zero; a computed zero is sent as `0xffff` (RFC 768).
#[inline]
pub fn update_udp(check: u16, f: impl FnOnce(u16) -> u16) -> u16 {
    if check == 0 {
        return 0;
    }
    match f(check) {
        0 => 0xffff,
        c => c,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The example from RFC 1071 §3: the sum of these bytes is 0xddf2.
    #[test]
    fn rfc1071_example() {
        let data = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(fold(add_bytes(0, &data)), 0xddf2);
        assert_eq!(checksum(&data), !0xddf2);
    }

    /// A real IPv4 header (from a capture); its checksum field is 0xb861.
    #[test]
    fn known_ipv4_header() {
        let mut hdr = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0xb8, 0x61, 0xc0, 0xa8,
            0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
        ];
        assert_eq!(checksum(&hdr), 0, "a correct header sums to zero");
        hdr[10] = 0;
        hdr[11] = 0;
        assert_eq!(checksum(&hdr), 0xb861);
    }

    #[test]
    fn odd_length_pads_with_zero() {
        assert_eq!(fold(add_bytes(0, &[0x12, 0x34, 0x56])), 0x1234 + 0x5600);
    }

    #[test]
    fn incremental_matches_full_recompute() {
        let mut data: Vec<u8> = (0u8..40).map(|i| i.wrapping_mul(37)).collect();
        let before = checksum(&data);
        let old = u16::from_be_bytes([data[6], data[7]]);
        data[6] = 0xfe;
        data[7] = 0x01;
        assert_eq!(update_u16(before, old, 0xfe01), checksum(&data));

        let old32 = u32::from_be_bytes([data[12], data[13], data[14], data[15]]);
        let cur = checksum(&data);
        data[12..16].copy_from_slice(&0xdead_beefu32.to_be_bytes());
        assert_eq!(update_u32(cur, old32, 0xdead_beef), checksum(&data));

        let old_bytes = data[20..36].to_vec();
        let cur = checksum(&data);
        data[20..36].copy_from_slice(&[0xab; 16]);
        assert_eq!(update_bytes(cur, &old_bytes, &[0xab; 16]), checksum(&data));
    }

    #[test]
    fn udp_zero_checksum_stays_zero() {
        assert_eq!(update_udp(0, |c| update_u16(c, 1, 2)), 0);
        assert_eq!(update_udp(0x1234, |_| 0), 0xffff);
    }
}
