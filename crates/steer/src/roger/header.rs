//! A rule over the chosen key bits as masks over the header fields
//! themselves: what a matcher that reads the fields from the frame (the XDP
//! program, a NIC's flow rule) compares, with no key to assemble.

use super::bits::{Field, KeyBits};
use super::cube::Cube;

/// Value and mask of each header field a rule matches (mask 0: any).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct HeaderMatch {
    /// IPv4 source address (value, mask).
    pub src: (u32, u32),
    /// IPv4 destination address.
    pub dst: (u32, u32),
    /// Source port.
    pub src_port: (u16, u16),
    /// Destination port.
    pub dst_port: (u16, u16),
    /// IP protocol.
    pub proto: (u8, u8),
}

impl HeaderMatch {
    /// The header masks of `cube` over the key `bits`.
    pub fn of(bits: &KeyBits, cube: &Cube) -> HeaderMatch {
        let n = bits.width();
        let mut m = HeaderMatch::default();
        // key bit positions from the most significant, slice by slice
        let mut at = 0u32;
        for s in bits.slices() {
            for b in s.first..=s.last {
                let q = n - 1 - (at + b - s.first);
                let fb = s.field.width() - 1 - b;
                if (cube.mask >> q) & 1 == 1 {
                    let v = (cube.value >> q) & 1;
                    match s.field {
                        Field::SrcIp => set32(&mut m.src, fb, v),
                        Field::DstIp => set32(&mut m.dst, fb, v),
                        Field::SrcPort => set16(&mut m.src_port, fb, v),
                        Field::DstPort => set16(&mut m.dst_port, fb, v),
                        Field::Proto => {
                            m.proto.1 |= 1 << fb;
                            m.proto.0 |= (v as u8) << fb;
                        }
                    }
                }
            }
            at += s.last - s.first + 1;
        }
        m
    }

    /// Whether a packet with these fields matches.
    pub fn matches(&self, src: u32, dst: u32, ports: (u16, u16), proto: u8) -> bool {
        src & self.src.1 == self.src.0
            && dst & self.dst.1 == self.dst.0
            && ports.0 & self.src_port.1 == self.src_port.0
            && ports.1 & self.dst_port.1 == self.dst_port.0
            && proto & self.proto.1 == self.proto.0
    }
}

fn set32(f: &mut (u32, u32), bit: u32, v: u64) {
    f.1 |= 1 << bit;
    f.0 |= (v as u32) << bit;
}

fn set16(f: &mut (u16, u16), bit: u32, v: u64) {
    f.1 |= 1 << bit;
    f.0 |= (v as u16) << bit;
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::net::IpAddr;
    use wire::FiveTuple;

    #[test]
    fn header_masks_match_what_the_key_matches() {
        let bits = KeyBits::parse("src-ip:28-31,dst-port:14-15,proto:7,dst-ip:0-1").unwrap();
        let n = bits.width();
        assert_eq!(n, 9);
        // every point cube and some with don't-cares
        let mut cubes: Vec<Cube> = (0..1u64 << n).map(|k| Cube::point(k, n)).collect();
        // (key: src 4 bits, dst-port 2, proto 1, dst 2)
        cubes.push(Cube::new(0b101000101, 0b111100111));
        cubes.push(Cube::new(0, 0));
        cubes.push(Cube::new(0b000011000, 0b000011000));
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..2000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let t = FiveTuple {
                src: IpAddr::from((x as u32).to_be_bytes()),
                dst: IpAddr::from(((x >> 32) as u32).to_be_bytes()),
                src_port: (x >> 7) as u16,
                dst_port: (x >> 23) as u16,
                proto: if x & 1 == 0 { 6 } else { 17 | (x as u8 & 0x80) },
            };
            let key = bits.key(&t).unwrap();
            let (IpAddr::V4(s), IpAddr::V4(d)) = (t.src, t.dst) else {
                unreachable!()
            };
            for c in &cubes {
                let m = HeaderMatch::of(&bits, c);
                assert_eq!(
                    m.matches(s.into(), d.into(), (t.src_port, t.dst_port), t.proto),
                    c.contains(key),
                    "{c:?} {t:?}"
                );
            }
        }
    }
}
