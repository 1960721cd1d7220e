//! The NIC's hash function as configured: a Toeplitz key plus the fields it covers.

use std::sync::Arc;

use wire::FiveTuple;

use crate::nat::NatSteering;
use crate::roger::RuleSteering;
use crate::{hash_input, HashFields, RssKey, Toeplitz};

/// Computes the RSS hash of a packet's 5-tuple, as the NIC model does.
#[derive(Clone, Debug)]
pub struct RssHasher {
    toeplitz: Toeplitz,
    fields: HashFields,
    rules: Option<Arc<RuleSteering>>,
    nat: Option<Arc<NatSteering>>,
    gtp: Option<core::net::Ipv4Addr>,
}

impl RssHasher {
    /// A hasher for `key` over `fields`.
    pub fn new(key: RssKey, fields: HashFields) -> RssHasher {
        RssHasher {
            toeplitz: Toeplitz::new(key),
            fields,
            rules: None,
            nat: None,
            gtp: None,
        }
    }

    /// The same hasher hashing a G-PDU to `n3` (a UPF's tunnel address) on
    /// the packet it carries, as a GTP-aware NIC does: a UE's uplink and
    /// downlink packets of one connection land in one bucket, and the uplink
    /// spreads over the buckets instead of following the one gNB–UPF tuple.
    pub fn with_gtp(mut self, n3: core::net::Ipv4Addr) -> RssHasher {
        self.gtp = Some(n3);
        self
    }

    /// The tunnel address whose G-PDUs it hashes inside, if any.
    pub fn gtp(&self) -> Option<core::net::Ipv4Addr> {
        self.gtp
    }

    /// The steering hash of a parsed frame: [`hash`](Self::hash) of its
    /// 5-tuple, or of the tuple inside when it is a G-PDU to the hasher's
    /// tunnel address ([`with_gtp`](Self::with_gtp)).
    #[inline]
    pub fn hash_frame(&self, t: &FiveTuple, l4_payload: &[u8]) -> u32 {
        if let Some(n3) = self.gtp {
            if t.proto == wire::proto::UDP
                && t.dst_port == wire::gtpu::PORT
                && t.dst == core::net::IpAddr::V4(n3)
            {
                if let Some(inner) = wire::gtpu::inner_tuple(l4_payload) {
                    return self.hash(&inner);
                }
            }
        }
        self.hash(t)
    }

    /// The same hasher hashing a NAT's endpoints where it says
    /// ([`NatSteering`]: endpoint-independent mapping, port forwards).
    pub fn with_nat(mut self, nat: Arc<NatSteering>) -> RssHasher {
        self.nat = Some(nat);
        self
    }

    /// The NAT steering it hashes by, if any.
    pub fn nat(&self) -> Option<&NatSteering> {
        self.nat.as_deref()
    }

    /// The same hasher steering by ternary rules: the bucket bits of every hash
    /// name the rule the packet matches (see [`RuleSteering`]).
    pub fn with_rules(mut self, rules: Arc<RuleSteering>) -> RssHasher {
        self.rules = Some(rules);
        self
    }

    /// The rules it steers by, if any.
    pub fn rules(&self) -> Option<&RuleSteering> {
        self.rules.as_deref()
    }

    /// The fields hashed.
    pub fn fields(&self) -> HashFields {
        self.fields
    }

    /// The table-driven Toeplitz behind it.
    pub fn toeplitz(&self) -> &Toeplitz {
        &self.toeplitz
    }

    /// The steering hash of `t`: its RSS hash, whose bucket bits name the
    /// matching rule when the hasher steers by rules.
    #[inline]
    pub fn hash(&self, t: &FiveTuple) -> u32 {
        if let Some(h) = self.nat.as_ref().and_then(|n| n.hash(&self.toeplitz, t)) {
            return h;
        }
        let h = self.rss(t);
        match &self.rules {
            None => h,
            Some(r) => r.steer(t, h),
        }
    }

    /// The RSS hash of `t`.
    #[inline]
    pub fn rss(&self, t: &FiveTuple) -> u32 {
        if let (HashFields::IpPorts, core::net::IpAddr::V4(s), core::net::IpAddr::V4(d)) =
            (self.fields, t.src, t.dst)
        {
            if matches!(t.proto, wire::proto::TCP | wire::proto::UDP) {
                return self
                    .toeplitz
                    .hash_v4_ports(s.octets(), d.octets(), t.src_port, t.dst_port);
            }
        }
        self.toeplitz.hash(hash_input(t, self.fields).as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::net::{IpAddr, Ipv4Addr};

    #[test]
    fn fast_path_equals_generic() {
        let h = RssHasher::new(RssKey::DEFAULT, HashFields::IpPorts);
        let t = FiveTuple {
            src: IpAddr::V4(Ipv4Addr::new(66, 9, 149, 187)),
            dst: IpAddr::V4(Ipv4Addr::new(161, 142, 100, 80)),
            src_port: 2794,
            dst_port: 1766,
            proto: 6,
        };
        assert_eq!(h.hash(&t), 0x51ccc178);
        let ip = RssHasher::new(RssKey::DEFAULT, HashFields::Ip);
        assert_eq!(ip.hash(&t), 0x323e8fc2);
        let src = RssHasher::new(RssKey::SYMMETRIC, HashFields::SrcIp);
        let mut other = t;
        other.dst = IpAddr::V4(Ipv4Addr::new(1, 2, 3, 4));
        other.src_port = 9;
        assert_eq!(src.hash(&t), src.hash(&other));
    }
}
