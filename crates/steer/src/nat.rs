//! What the NIC hashes for a NAT whose flows a plain 5-tuple hash would split
//! over cores: endpoint-independent mapping (RFC 4787 §4.1) and static port
//! forwards.
//!
//! A NAT with **endpoint-independent mapping** gives one inside endpoint the
//! same outside endpoint whatever the destination, and with
//! endpoint-independent filtering accepts any host's packets to it: every
//! flow of one mapping must reach the shard that holds the mapping. So
//! the NIC hashes a packet from the inside prefix on its source endpoint
//! (address and port, written where a destination goes, the rest zeros), and
//! a packet to one of the NAT's addresses on its destination endpoint; the
//! NAT picks an outside port whose hash lands in the inside endpoint's
//! bucket (`nf::nat::PortPlan`, over the destination-port field as for its
//! other mappings). ICMP echo is hashed on the address alone, as RSS does.
//!
//! A **port forward** fixes both endpoints, so their hashes cannot be made
//! to meet: the NIC hashes the forward's inside endpoint as its outside one
//! (a packet from it is hashed as the forward's inbound packets, reversed,
//! or with endpoint hashing as the outside endpoint) — what two exact-match
//! NIC rules (ntuple filters) per forward do on a real NIC.
//!
//! **Hairpinning**: a packet from the inside to one of the NAT's own
//! addresses is hashed on its destination endpoint, with or without endpoint
//! hashing, so it reaches the shard of the forward or mapping it is for; the
//! NAT gives its source an outside port whose hash lands in that same bucket,
//! so the answer, hashed on its destination endpoint too, comes back there.
//!
//! Pure: a function of the tuple.

use core::net::{IpAddr, Ipv4Addr};
use std::collections::HashMap;

use wire::FiveTuple;

use crate::Toeplitz;

/// A set of IPv4 addresses as sorted, disjoint ranges of consecutive ones
/// (a prefix's addresses make one): a NAT's addresses, for membership tests.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AddressSet(Vec<(u32, u32)>);

impl AddressSet {
    /// The set of `addrs` (in any order, duplicates allowed).
    pub fn new(addrs: &[Ipv4Addr]) -> AddressSet {
        let mut sorted: Vec<u32> = addrs.iter().map(|&a| u32::from(a)).collect();
        sorted.sort_unstable();
        let mut ranges: Vec<(u32, u32)> = Vec::new();
        for a in sorted {
            match ranges.last_mut() {
                Some((_, hi)) if a <= hi.saturating_add(1) => *hi = (*hi).max(a),
                _ => ranges.push((a, a)),
            }
        }
        AddressSet(ranges)
    }

    /// Whether `a` is in the set.
    #[inline]
    pub fn contains(&self, a: Ipv4Addr) -> bool {
        let a = u32::from(a);
        let r = &self.0;
        // the last range starting at or before `a`
        let i = r.partition_point(|&(lo, _)| lo <= a);
        i > 0 && a <= r[i - 1].1
    }
}

/// A NAT's steering: see the [module](self).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NatSteering {
    endpoint: bool,
    /// The inside prefix as (network, mask).
    inside: (u32, u32),
    /// The NAT's addresses.
    outside: AddressSet,
    /// (protocol, inside address, inside port) → outside endpoint.
    forwards: HashMap<(u8, Ipv4Addr, u16), (Ipv4Addr, u16)>,
}

/// A static port forward: `proto` packets to `outside` go to `inside`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct Forward {
    /// TCP or UDP.
    pub proto: u8,
    /// The NAT's address and port.
    pub outside: (Ipv4Addr, u16),
    /// The inside server's.
    pub inside: (Ipv4Addr, u16),
}

impl NatSteering {
    /// The steering of a NAT from `inside` (network, prefix length) to the
    /// addresses `outside`, with `endpoint`-independent mapping or not, and
    /// port forwards `forwards`.
    pub fn new(
        endpoint: bool,
        inside: (Ipv4Addr, u8),
        outside: &[Ipv4Addr],
        forwards: &[Forward],
    ) -> NatSteering {
        let mask = u32::MAX.checked_shl(32 - u32::from(inside.1)).unwrap_or(0);
        NatSteering {
            endpoint,
            inside: (u32::from(inside.0) & mask, mask),
            outside: AddressSet::new(outside),
            forwards: forwards
                .iter()
                .map(|f| ((f.proto, f.inside.0, f.inside.1), f.outside))
                .collect(),
        }
    }

    /// Whether flows are hashed on endpoints (endpoint-independent mapping).
    pub fn endpoint(&self) -> bool {
        self.endpoint
    }

    fn is_inside(&self, a: Ipv4Addr) -> bool {
        u32::from(a) & self.inside.1 == self.inside.0
    }

    fn is_outside(&self, a: Ipv4Addr) -> bool {
        self.outside.contains(a)
    }

    /// The hash the NIC gives `t`, or `None` where it is the plain one.
    #[inline]
    pub fn hash(&self, toeplitz: &Toeplitz, t: &FiveTuple) -> Option<u32> {
        let (IpAddr::V4(src), IpAddr::V4(dst)) = (t.src, t.dst) else {
            return None;
        };
        let ports = matches!(t.proto, wire::proto::TCP | wire::proto::UDP);
        let endpoint = |a: Ipv4Addr, p: u16| {
            Some(if ports {
                toeplitz.hash_v4_ports([0; 4], a.octets(), 0, p)
            } else {
                toeplitz.hash(&[
                    0,
                    0,
                    0,
                    0,
                    a.octets()[0],
                    a.octets()[1],
                    a.octets()[2],
                    a.octets()[3],
                ])
            })
        };
        if self.is_outside(dst) && (self.endpoint || self.is_inside(src)) {
            return endpoint(dst, t.dst_port);
        }
        if self.is_inside(src) && !self.is_inside(dst) {
            let fwd = ports
                .then(|| self.forwards.get(&(t.proto, src, t.src_port)))
                .flatten();
            return match (self.endpoint, fwd) {
                (true, Some(&(a, p))) => endpoint(a, p),
                (true, None) => endpoint(src, t.src_port),
                // as the forward's inbound packets, reversed
                (false, Some(&(a, p))) => {
                    Some(toeplitz.hash_v4_ports(dst.octets(), a.octets(), t.dst_port, p))
                }
                (false, None) => None,
            };
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RssKey;

    fn tuple(src: &str, dst: &str, sp: u16, dp: u16, proto: u8) -> FiveTuple {
        FiveTuple {
            src: src.parse().unwrap(),
            dst: dst.parse().unwrap(),
            src_port: sp,
            dst_port: dp,
            proto,
        }
    }

    #[test]
    fn endpoints_hash_alike_whatever_the_other_end() {
        let t = Toeplitz::new(RssKey::DEFAULT);
        let fwd = Forward {
            proto: 6,
            outside: ("203.0.113.1".parse().unwrap(), 8080),
            inside: ("10.0.0.5".parse().unwrap(), 80),
        };
        let n = NatSteering::new(
            true,
            ("10.0.0.0".parse().unwrap(), 8),
            &["203.0.113.1".parse().unwrap()],
            &[fwd],
        );
        let h = |s, d, sp, dp, pr| n.hash(&t, &tuple(s, d, sp, dp, pr));
        // one inside endpoint, two destinations
        let a = h("10.0.0.2", "198.51.100.1", 5000, 53, 17).unwrap();
        assert_eq!(Some(a), h("10.0.0.2", "198.51.100.9", 5000, 99, 17));
        assert_eq!(a, t.hash_v4_ports([0; 4], [10, 0, 0, 2], 0, 5000));
        // any host to one outside endpoint
        let b = h("192.0.2.1", "203.0.113.1", 7, 4000, 17).unwrap();
        assert_eq!(Some(b), h("192.0.2.77", "203.0.113.1", 8, 4000, 17));
        assert_eq!(b, t.hash_v4_ports([0; 4], [203, 0, 113, 1], 0, 4000));
        // inside to the NAT's own address: on the destination endpoint
        assert_eq!(Some(b), h("10.0.0.9", "203.0.113.1", 1, 4000, 17));
        // a forward's server hashes as its outside endpoint
        assert_eq!(
            h("10.0.0.5", "192.0.2.1", 80, 3333, 6),
            h("192.0.2.1", "203.0.113.1", 3333, 8080, 6)
        );
        // inside to inside, and outside to elsewhere, are hashed as usual
        assert_eq!(h("10.0.0.2", "10.0.0.3", 1, 2, 6), None);
        assert_eq!(h("192.0.2.1", "198.51.100.1", 1, 2, 6), None);
    }

    #[test]
    fn without_endpoint_hashing_only_forwards_change() {
        let t = Toeplitz::new(RssKey::DEFAULT);
        let fwd = Forward {
            proto: 17,
            outside: ("203.0.113.1".parse().unwrap(), 5353),
            inside: ("10.0.0.5".parse().unwrap(), 53),
        };
        let n = NatSteering::new(
            false,
            ("10.0.0.0".parse().unwrap(), 8),
            &["203.0.113.1".parse().unwrap()],
            &[fwd],
        );
        assert_eq!(n.hash(&t, &tuple("10.0.0.2", "192.0.2.1", 5, 53, 17)), None);
        assert_eq!(
            n.hash(&t, &tuple("192.0.2.1", "203.0.113.1", 9, 5353, 17)),
            None
        );
        // the server's reply hashes as the client's request did
        assert_eq!(
            n.hash(&t, &tuple("10.0.0.5", "192.0.2.1", 53, 9, 17)),
            Some(t.hash_v4_ports([192, 0, 2, 1], [203, 0, 113, 1], 9, 5353))
        );
        // hairpinning: on the destination endpoint, the forward's server too
        let e = t.hash_v4_ports([0; 4], [203, 0, 113, 1], 0, 5353);
        assert_eq!(
            n.hash(&t, &tuple("10.0.0.2", "203.0.113.1", 5, 5353, 17)),
            Some(e)
        );
        let e = t.hash_v4_ports([0; 4], [203, 0, 113, 1], 0, 7777);
        assert_eq!(
            n.hash(&t, &tuple("10.0.0.5", "203.0.113.1", 53, 7777, 17)),
            Some(e)
        );
    }
}
