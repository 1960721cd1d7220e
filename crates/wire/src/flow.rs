//! Flow keys: the directional 5-tuple and the canonical bidirectional key that both
//! directions of a connection share.
//!
//! For ICMP echo the identifier stands in both port positions, so the reversed
//! tuple of a request is exactly the tuple of its reply. Other ICMP messages and
//! protocols without ports use port 0.

use core::net::IpAddr;

/// A directional 5-tuple.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FiveTuple {
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// Source port (ICMP echo: the identifier).
    pub src_port: u16,
    /// Destination port (ICMP echo: the identifier).
    pub dst_port: u16,
    /// IP protocol number.
    pub proto: u8,
}

impl FiveTuple {
    /// The tuple of the opposite direction.
    pub fn reversed(&self) -> FiveTuple {
        FiveTuple {
            src: self.dst,
            dst: self.src,
            src_port: self.dst_port,
            dst_port: self.src_port,
            proto: self.proto,
        }
    }

    /// The canonical bidirectional key and which way this tuple goes along it.
    pub fn canonical(&self) -> (BiFlowKey, Direction) {
        let a = (self.src, self.src_port);
        let b = (self.dst, self.dst_port);
        if a <= b {
            (
                BiFlowKey {
                    lo: a,
                    hi: b,
                    proto: self.proto,
                },
                Direction::LoToHi,
            )
        } else {
            (
                BiFlowKey {
                    lo: b,
                    hi: a,
                    proto: self.proto,
                },
                Direction::HiToLo,
            )
        }
    }
}

/// A connection key equal for both directions: the endpoints in a fixed order.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BiFlowKey {
    /// The lower endpoint (address, port).
    pub lo: (IpAddr, u16),
    /// The higher endpoint.
    pub hi: (IpAddr, u16),
    /// IP protocol number.
    pub proto: u8,
}

/// Which way a packet goes along its [`BiFlowKey`].
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Direction {
    /// From the lower endpoint to the higher one.
    LoToHi,
    /// From the higher endpoint to the lower one.
    HiToLo,
}

impl BiFlowKey {
    /// The directional tuple for `dir`.
    pub fn tuple(&self, dir: Direction) -> FiveTuple {
        let (s, d) = match dir {
            Direction::LoToHi => (self.lo, self.hi),
            Direction::HiToLo => (self.hi, self.lo),
        };
        FiveTuple {
            src: s.0,
            dst: d.0,
            src_port: s.1,
            dst_port: d.1,
            proto: self.proto,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::net::Ipv4Addr;

    #[test]
    fn both_directions_share_the_key() {
        let t = FiveTuple {
            src: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 9)),
            dst: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
            src_port: 5000,
            dst_port: 80,
            proto: 6,
        };
        let (k1, d1) = t.canonical();
        let (k2, d2) = t.reversed().canonical();
        assert_eq!(k1, k2);
        assert_ne!(d1, d2);
        assert_eq!(k1.tuple(d1), t);
        assert_eq!(k2.tuple(d2), t.reversed());
    }
}
