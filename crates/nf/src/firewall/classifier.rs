//! The ACL compiled into a disjoint classifier (NFLOW/MVT proactive composition):
//! the packet header space is cut into regions such that every packet falls in
//! exactly one, and each region carries the first-match verdict, so a lookup never
//! compares priorities.
//!
//! The cut follows Recursive Flow Classification (Gupta & McKeown, SIGCOMM'99):
//! each field's range is split into elementary intervals, intervals covered by the
//! same set of rules form one class; pairs of classes are combined through
//! cross-product tables, again merging combinations with equal rule sets; the last
//! table maps a combination to its first matching rule. Its cells are the MVT's
//! entries: disjoint by construction.

use std::collections::HashMap;

use super::acl::{Action, Fields, Rule, NO_PORT};

/// One field: elementary-interval starts and their class.
#[derive(Clone, Debug)]
struct Dim {
    starts: Vec<u128>,
    class: Vec<u32>,
}

impl Dim {
    #[inline]
    fn class_of(&self, v: u128) -> u32 {
        let i = self.starts.partition_point(|s| *s <= v) - 1;
        self.class[i]
    }
}

type Bits = Vec<u64>;

fn dim(ranges: &[(u128, u128)], max: u128) -> (Dim, Vec<Bits>) {
    let words = ranges.len().div_ceil(64).max(1);
    let mut pts = vec![0u128];
    for (lo, hi) in ranges {
        pts.push(*lo);
        if *hi < max {
            pts.push(hi + 1);
        }
    }
    pts.sort_unstable();
    pts.dedup();
    let mut ids: HashMap<Bits, u32> = HashMap::new();
    let mut classes: Vec<Bits> = Vec::new();
    let mut class = Vec::with_capacity(pts.len());
    for p in &pts {
        let mut b = vec![0u64; words];
        for (r, (lo, hi)) in ranges.iter().enumerate() {
            if lo <= p && p <= hi {
                b[r / 64] |= 1 << (r % 64);
            }
        }
        let id = *ids.entry(b.clone()).or_insert_with(|| {
            classes.push(b);
            (classes.len() - 1) as u32
        });
        class.push(id);
    }
    (Dim { starts: pts, class }, classes)
}

/// A cross-product table of two class sets.
#[derive(Clone, Debug)]
struct Cross {
    nb: usize,
    table: Vec<u32>,
}

fn cross(a: &[Bits], b: &[Bits]) -> (Cross, Vec<Bits>) {
    let mut ids: HashMap<Bits, u32> = HashMap::new();
    let mut classes: Vec<Bits> = Vec::new();
    let mut table = Vec::with_capacity(a.len() * b.len());
    for x in a {
        for y in b {
            let and: Bits = x.iter().zip(y).map(|(p, q)| p & q).collect();
            let id = *ids.entry(and.clone()).or_insert_with(|| {
                classes.push(and);
                (classes.len() - 1) as u32
            });
            table.push(id);
        }
    }
    (Cross { nb: b.len(), table }, classes)
}

impl Cross {
    #[inline]
    fn get(&self, a: u32, b: u32) -> u32 {
        self.table[a as usize * self.nb + b as usize]
    }
}

const NONE: u32 = u32::MAX;

fn p32(r: (u32, u32)) -> (u128, u128) {
    (u128::from(r.0), u128::from(r.1))
}

/// A compiled ACL. `classify` equals naive first-match over the rules.
#[derive(Clone, Debug)]
pub struct Classifier {
    rules: Vec<Rule>,
    default: Action,
    src: Dim,
    dst: Dim,
    sport: Dim,
    dport: Dim,
    proto: Dim,
    addrs: Cross,
    ports: Cross,
    l4: Cross,
    /// (address class, l4 class) → first matching rule or NONE
    last: Cross,
}

impl Classifier {
    /// Compiles `rules`; packets matching none get `default`.
    pub fn new(rules: Vec<Rule>, default: Action) -> Classifier {
        let pick = |f: fn(&Rule) -> (u128, u128)| rules.iter().map(f).collect::<Vec<_>>();
        let (src, src_c) = dim(&pick(|r| r.src), u128::MAX);
        let (dst, dst_c) = dim(&pick(|r| r.dst), u128::MAX);
        let (sport, sport_c) = dim(&pick(|r| p32(r.sport)), u128::from(NO_PORT));
        let (dport, dport_c) = dim(&pick(|r| p32(r.dport)), u128::from(NO_PORT));
        let (proto, proto_c) = dim(&pick(|r| p32(r.proto)), 255);
        let (addrs, addr_c) = cross(&src_c, &dst_c);
        let (ports, port_c) = cross(&sport_c, &dport_c);
        let (l4, l4_c) = cross(&port_c, &proto_c);
        let mut table = Vec::with_capacity(addr_c.len() * l4_c.len());
        for a in &addr_c {
            for b in &l4_c {
                let first = a
                    .iter()
                    .zip(b)
                    .enumerate()
                    .find_map(|(w, (x, y))| {
                        let m = x & y;
                        (m != 0).then(|| (w * 64) as u32 + m.trailing_zeros())
                    })
                    .unwrap_or(NONE);
                table.push(first);
            }
        }
        let last = Cross {
            nb: l4_c.len(),
            table,
        };
        Classifier {
            rules,
            default,
            src,
            dst,
            sport,
            dport,
            proto,
            addrs,
            ports,
            l4,
            last,
        }
    }

    /// The first matching rule's index, if any.
    #[inline]
    pub fn rule_of(&self, f: &Fields) -> Option<usize> {
        let a = self
            .addrs
            .get(self.src.class_of(f.src), self.dst.class_of(f.dst));
        let p = self.ports.get(
            self.sport.class_of(u128::from(f.sport)),
            self.dport.class_of(u128::from(f.dport)),
        );
        let l = self.l4.get(p, self.proto.class_of(u128::from(f.proto)));
        match self.last.get(a, l) {
            NONE => None,
            r => Some(r as usize),
        }
    }

    /// The action for a packet.
    #[inline]
    pub fn classify(&self, f: &Fields) -> Action {
        self.rule_of(f)
            .map_or(self.default, |r| self.rules[r].action)
    }

    /// The rules.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// Number of disjoint regions (MVT entries) of the compiled classifier.
    pub fn entries(&self) -> usize {
        self.last.table.len()
    }
}

#[cfg(test)]
mod tests {
    use super::super::acl::{first_match, parse_rules};
    use super::*;

    #[test]
    fn overlapping_rules_first_match_wins() {
        let rules = parse_rules(
            "deny tcp 10.1.0.0/16 -> any:22\nallow tcp 10.0.0.0/8 -> any\nallow udp any -> any:53\n",
        )
        .unwrap();
        let c = Classifier::new(rules.clone(), Action::Deny);
        let f = |s: &str, d: &str, p: u8, sp: u32, dp: u32| Fields {
            proto: u32::from(p),
            src: super::super::acl::addr128(s.parse().unwrap()),
            sport: sp,
            dst: super::super::acl::addr128(d.parse().unwrap()),
            dport: dp,
        };
        let cases = [
            (f("10.1.2.3", "1.1.1.1", 6, 999, 22), Action::Deny),
            (f("10.2.2.3", "1.1.1.1", 6, 999, 22), Action::Allow),
            (f("10.1.2.3", "1.1.1.1", 6, 999, 23), Action::Allow),
            (f("11.1.2.3", "1.1.1.1", 17, 999, 53), Action::Allow),
            (f("11.1.2.3", "1.1.1.1", 1, NO_PORT, NO_PORT), Action::Deny),
        ];
        for (fields, want) in cases {
            assert_eq!(c.classify(&fields), want, "{fields:?}");
            assert_eq!(c.rule_of(&fields), first_match(&rules, &fields));
        }
    }
}
