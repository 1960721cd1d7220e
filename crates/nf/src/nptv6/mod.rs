//! NPTv6 (RFC 6296): stateless IPv6-to-IPv6 network prefix translation. An
//! outbound packet's source prefix (`inside`) is replaced by `outside`, an
//! inbound packet's destination prefix the other way, and the 16-bit word
//! after a /48 (or shorter) prefix is adjusted so that the address's
//! one's-complement sum — and with it every transport checksum — is
//! unchanged: no checksum is recomputed, no state is kept, and the mapping
//! is one-to-one, so a site keeps its inside addresses whatever outside
//! prefix its provider gives. ICMPv6 errors inbound have the address inside
//! their quoted packet translated back too.
//!
//! Why NPTv6 rather than NAT64: flowshift's NAT keeps IPv4 sharing; what an
//! IPv6 site behind it needs is provider independence and multihoming, which
//! NPTv6 gives without per-flow state or port rewriting — so it runs on any
//! core, needs no steering and survives any shard move. NAT64 (RFC 6146)
//! would be a second stateful translator with its own pool and DNS64.
//!
//! ```toml
//! [[nf]]
//! kind = "nptv6"
//! inside = "fd01:203:405::/48"
//! outside = "2001:db8:1::/48"
//! ```

mod config;

pub use config::Nptv6Section;

use core::net::Ipv6Addr;

use ipnet::Ipv6Net;

use crate::{Ctx, DropCause, Nf, NfMeta, NflowKey, Packet, StateKind, Verdict};

counters! {
    /// Counters.
    Nptv6Counters {
        /// Packets whose source was translated inside → outside.
        outbound,
        /// Packets whose destination was translated outside → inside.
        inbound,
        /// ICMPv6 errors whose quoted packet was translated back as well.
        related,
        /// Packets neither from the inside prefix nor to the outside one
        /// (IPv4 included), passed untouched.
        passed,
    }
}

/// The one's-complement sum of 16-bit words.
fn add(a: u16, b: u16) -> u16 {
    let s = u32::from(a) + u32::from(b);
    ((s & 0xffff) + (s >> 16)) as u16
}

/// The one's-complement sum of a prefix's 16-bit words.
fn sum(p: &Ipv6Net) -> u16 {
    p.network().segments().iter().fold(0, |s, &w| add(s, w))
}

/// The translator: two prefixes of the same length (at most /48) and the
/// adjustment each way.
#[derive(Clone)]
pub struct Nptv6 {
    meta: NfMeta,
    inside: Ipv6Net,
    outside: Ipv6Net,
    /// Added to the subnet word going out (inside's sum minus outside's).
    adjust_out: u16,
    counters: Nptv6Counters,
}

impl Nptv6 {
    /// A translator between `inside` and `outside`: the same length, at
    /// most 48 bits (the adjustment goes in bits 48–63, RFC 6296 §3.4).
    pub fn new(
        name: impl Into<String>,
        inside: Ipv6Net,
        outside: Ipv6Net,
    ) -> Result<Nptv6, String> {
        if inside.prefix_len() != outside.prefix_len() {
            return Err(format!(
                "`{inside}` and `{outside}` differ in length: NPTv6 maps prefixes of one length"
            ));
        }
        if inside.prefix_len() > 48 {
            return Err(format!(
                "`{inside}`: prefixes longer than /48 are not supported (the adjustment \
                 takes bits 48–63)"
            ));
        }
        let (inside, outside) = (inside.trunc(), outside.trunc());
        if inside.contains(&outside.network()) || outside.contains(&inside.network()) {
            return Err(format!("`{inside}` and `{outside}` overlap"));
        }
        Ok(Nptv6 {
            meta: NfMeta::new(name, "nptv6", NflowKey::None, StateKind::Stateless),
            inside,
            outside,
            adjust_out: add(sum(&inside), !sum(&outside)),
            counters: Nptv6Counters::default(),
        })
    }

    /// `a` with its `from` prefix replaced by `to`'s and its subnet word
    /// adjusted by `adjust`; `None` when that word is 0xFFFF.
    pub fn map(a: Ipv6Addr, to: &Ipv6Net, adjust: u16) -> Option<Ipv6Addr> {
        let mut w = a.segments();
        if w[3] == 0xffff {
            return None;
        }
        let keep = u32::from(to.prefix_len());
        let mask = if keep == 0 {
            0
        } else {
            u128::MAX << (128 - keep)
        };
        let bits = (u128::from(Ipv6Addr::from(w)) & !mask) | (u128::from(to.network()) & mask);
        w = Ipv6Addr::from(bits).segments();
        w[3] = add(w[3], adjust);
        if w[3] == 0xffff {
            w[3] = 0;
        }
        Some(Ipv6Addr::from(w))
    }

    /// Outbound: an inside address as the outside sees it.
    pub fn outward(&self, a: Ipv6Addr) -> Option<Ipv6Addr> {
        Self::map(a, &self.outside, self.adjust_out)
    }

    /// Inbound: an outside address as the inside has it.
    pub fn inward(&self, a: Ipv6Addr) -> Option<Ipv6Addr> {
        Self::map(a, &self.inside, !self.adjust_out)
    }
}

/// The address at `at` of `b` (16 bytes).
fn addr(b: &[u8], at: usize) -> Ipv6Addr {
    let mut o = [0u8; 16];
    o.copy_from_slice(&b[at..at + 16]);
    Ipv6Addr::from(o)
}

impl Nf for Nptv6 {
    fn meta(&self) -> &NfMeta {
        &self.meta
    }

    fn process(&mut self, _cx: &mut Ctx<'_>, pkt: &mut Packet) -> Verdict {
        let l4 = pkt.info.l4_offset.saturating_sub(pkt.info.l3_offset) as usize;
        let l3 = pkt.l3_mut();
        if l3.len() < 40 || l3[0] >> 4 != 6 {
            self.counters.passed += 1;
            return Verdict::Forward;
        }
        let (src, dst) = (addr(l3, 8), addr(l3, 24));
        let (at, to) = if self.inside.contains(&src) {
            (8, self.outward(src))
        } else if self.outside.contains(&dst) {
            (24, self.inward(dst))
        } else {
            self.counters.passed += 1;
            return Verdict::Forward;
        };
        let Some(to) = to else {
            return Verdict::Drop(DropCause::NptUnmappable);
        };
        l3[at..at + 16].copy_from_slice(&to.octets());
        if at == 8 {
            self.counters.outbound += 1;
            pkt.info.tuple.src = to.into();
            return Verdict::Forward;
        }
        self.counters.inbound += 1;
        pkt.info.tuple.dst = to.into();
        // an ICMPv6 error quoting an outbound packet: its source back inside
        // (checksum-neutral like the outer address, so the ICMPv6 checksum
        // holds)
        let quoted = l4 + 8;
        let l3 = pkt.l3_mut();
        if l3[6] == 58 && l3.len() >= quoted + 40 && (1..=4).contains(&l3[l4]) {
            let inner = addr(l3, quoted + 8);
            if self.outside.contains(&inner) {
                if let Some(back) = self.inward(inner) {
                    l3[quoted + 8..quoted + 24].copy_from_slice(&back.octets());
                    self.counters.related += 1;
                }
            }
        }
        Verdict::Forward
    }

    fn reload(&mut self, new: &dyn Nf) -> Result<(), String> {
        let n = new
            .as_any()
            .downcast_ref::<Nptv6>()
            .ok_or("not an NPTv6 translator")?;
        (self.inside, self.outside, self.adjust_out) = (n.inside, n.outside, n.adjust_out);
        Ok(())
    }

    counted_nf!(Nptv6);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn npt() -> Nptv6 {
        Nptv6::new(
            "npt",
            "fd01:203:405::/48".parse().unwrap(),
            "2001:db8:1::/48".parse().unwrap(),
        )
        .unwrap()
    }

    #[test]
    fn the_rfc_6296_example_maps_both_ways() {
        // RFC 6296 §3.6's example
        let n = npt();
        let inside: Ipv6Addr = "fd01:203:405:1::1234".parse().unwrap();
        let out = n.outward(inside).unwrap();
        assert_eq!(out, "2001:db8:1:d550::1234".parse::<Ipv6Addr>().unwrap());
        assert_eq!(n.inward(out), Some(inside));
    }

    #[test]
    fn the_sum_is_unchanged_and_0xffff_is_refused() {
        let n = npt();
        let total = |a: Ipv6Addr| a.segments().iter().fold(0u16, |s, &w| add(s, w));
        for sub in [0u16, 1, 0x1234, 0xfffe, 0x8000] {
            let a = Ipv6Addr::new(0xfd01, 0x203, 0x405, sub, 1, 2, 3, 4);
            let b = n.outward(a).unwrap();
            // one's complement: 0 and 0xffff are the same sum
            assert!(
                total(a) == total(b) || (total(a) | total(b)) == 0xffff,
                "{a} → {b}"
            );
            assert_eq!(n.inward(b), Some(a), "{a}");
        }
        assert_eq!(
            n.outward(Ipv6Addr::new(0xfd01, 0x203, 0x405, 0xffff, 0, 0, 0, 1)),
            None
        );
    }

    #[test]
    fn prefixes_must_match_and_fit() {
        let p = |s: &str| s.parse::<Ipv6Net>().unwrap();
        assert!(Nptv6::new("n", p("fd00::/48"), p("2001:db8::/56")).is_err());
        assert!(Nptv6::new("n", p("fd00::/56"), p("2001:db8::/56")).is_err());
        assert!(Nptv6::new("n", p("2001:db8::/32"), p("2001:db8::/32")).is_err());
        assert!(Nptv6::new("n", p("fd00::/32"), p("2001:db8::/32")).is_ok());
    }
}
