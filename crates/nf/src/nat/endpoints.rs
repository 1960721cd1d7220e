//! A shard's endpoint-independent mappings (RFC 4787 §4.1): an inside
//! endpoint's one outside endpoint, shared by all its flows, and the way
//! back for endpoint-independent filtering. Every flow of a mapping is in
//! the shard that made it (the NIC hashes both endpoints of a mapping into
//! one bucket, `steer::nat`), so the table is the shard's own, like its
//! ports. A mapping lives while a flow holds it; the last one to end
//! gives its port back.

use core::net::Ipv4Addr;

use rustc_hash::FxHashMap;

/// An inside endpoint: protocol, address, port.
type Inside = (u8, Ipv4Addr, u16);

/// An outside endpoint: protocol, index of the NAT's address, port.
type Outside = (u8, u16, u16);

#[derive(Debug, Clone, Copy)]
struct Mapping {
    outside: (u16, u16),
    flows: u32,
}

/// The mappings of one shard.
#[derive(Debug, Default)]
pub struct Endpoints {
    by_inside: FxHashMap<Inside, Mapping>,
    by_outside: FxHashMap<Outside, (Ipv4Addr, u16)>,
}

impl Endpoints {
    /// The outside endpoint (address index, port) of an inside one.
    pub fn outside(&self, proto: u8, addr: Ipv4Addr, port: u16) -> Option<(u16, u16)> {
        self.by_inside.get(&(proto, addr, port)).map(|m| m.outside)
    }

    /// The inside endpoint an outside one (address index, port) maps to.
    pub fn inside(&self, proto: u8, ext_idx: u16, port: u16) -> Option<(Ipv4Addr, u16)> {
        self.by_outside.get(&(proto, ext_idx, port)).copied()
    }

    /// One more flow holds the mapping of the inside endpoint to the
    /// outside one (made if new); true when it was new.
    pub fn hold(&mut self, proto: u8, inside: (Ipv4Addr, u16), outside: (u16, u16)) -> bool {
        let m = self
            .by_inside
            .entry((proto, inside.0, inside.1))
            .or_insert(Mapping { outside, flows: 0 });
        m.flows += 1;
        if m.flows == 1 {
            self.by_outside
                .insert((proto, outside.0, outside.1), inside);
        }
        m.flows == 1
    }

    /// A flow of the inside endpoint's mapping ended: `Some(true)` when
    /// it was the last (the port is free again), `Some(false)` while others
    /// hold it, `None` for no such mapping.
    pub fn release(&mut self, proto: u8, addr: Ipv4Addr, port: u16) -> Option<bool> {
        let k = (proto, addr, port);
        let m = self.by_inside.get_mut(&k)?;
        m.flows -= 1;
        if m.flows > 0 {
            return Some(false);
        }
        let o = m.outside;
        self.by_inside.remove(&k);
        self.by_outside.remove(&(proto, o.0, o.1));
        Some(true)
    }

    /// Mappings held.
    pub fn len(&self) -> usize {
        self.by_inside.len()
    }

    /// True when no mapping is held.
    pub fn is_empty(&self) -> bool {
        self.by_inside.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mapping_lives_while_a_flow_holds_it() {
        let mut e = Endpoints::default();
        let a: Ipv4Addr = "10.0.0.2".parse().unwrap();
        assert!(e.hold(17, (a, 5000), (0, 40000)));
        assert!(!e.hold(17, (a, 5000), (0, 40000)));
        assert_eq!(e.outside(17, a, 5000), Some((0, 40000)));
        assert_eq!(e.inside(17, 0, 40000), Some((a, 5000)));
        assert_eq!(e.outside(6, a, 5000), None, "TCP and UDP are apart");
        assert_eq!(e.release(17, a, 5000), Some(false));
        assert_eq!(e.release(17, a, 5000), Some(true));
        assert_eq!(e.release(17, a, 5000), None);
        assert!(e.is_empty() && e.inside(17, 0, 40000).is_none());
    }
}
