//! Longest-prefix-match routes compiled into a table of **disjoint** entries
//! (NFLOW/MVT §III-B, proactive composition): a route with more specific routes
//! inside it is cut into the prefixes that remain, so that exactly one entry
//! covers any address. A /24 with a /28 inside becomes five entries — the /28 and
//! the /25, /26, /27 and /28 that make up the rest of the /24. Any entry can then
//! live on any core without the others (a split of the original, entangled routes
//! misroutes: see the tests and the paper's Fig. 1).

use std::net::IpAddr;

use ipnet::IpNet;
use rustc_hash::FxHashMap;

/// A route: a prefix and the port (next hop) it leads to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Route {
    /// The prefix (host bits zero).
    pub prefix: IpNet,
    /// The port.
    pub port: u16,
}

/// Disjoint entries, one hash table per prefix length and address family, the
/// lengths holding most entries first. The entries being disjoint, the first
/// length whose table holds an address's prefix has its only match: no
/// priority comparison (NFLOW/MVT's point; `flowshift bench-mvt` measures it).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RouteTable {
    v4: Vec<(u8, FxHashMap<u32, u16>)>,
    v6: Vec<(u8, FxHashMap<u128, u16>)>,
    entries: Vec<Route>,
}

fn mask32(len: u8) -> u32 {
    if len == 0 {
        0
    } else {
        u32::MAX << (32 - u32::from(len))
    }
}

fn mask128(len: u8) -> u128 {
    if len == 0 {
        0
    } else {
        u128::MAX << (128 - u32::from(len))
    }
}

/// Adds `key` under `len` to per-length tables.
fn insert_at<K: std::hash::Hash + Eq>(
    t: &mut Vec<(u8, FxHashMap<K, u16>)>,
    len: u8,
    key: K,
    port: u16,
) {
    match t.iter_mut().find(|(l, _)| *l == len) {
        Some((_, m)) => {
            m.insert(key, port);
        }
        None => {
            let mut m = FxHashMap::default();
            m.insert(key, port);
            t.push((len, m));
        }
    }
}

/// A binary trie node over prefix bits.
#[derive(Default)]
struct Node {
    port: Option<u16>,
    child: [Option<Box<Node>>; 2],
}

fn bits(a: IpAddr) -> (u128, u8) {
    match a {
        IpAddr::V4(v) => (u128::from(u32::from(v)) << 96, 32),
        IpAddr::V6(v) => (u128::from(v), 128),
    }
}

fn net(v4: bool, value: u128, len: u8) -> IpNet {
    if v4 {
        let a = std::net::Ipv4Addr::from((value >> 96) as u32);
        IpNet::V4(ipnet::Ipv4Net::new(a, len).expect("len ≤ 32"))
    } else {
        IpNet::V6(ipnet::Ipv6Net::new(std::net::Ipv6Addr::from(value), len).expect("len ≤ 128"))
    }
}

impl RouteTable {
    /// Compiles routes (any order, overlapping allowed) into disjoint entries.
    /// Two routes for the same prefix to different ports are an error naming it.
    pub fn compile(routes: &[Route]) -> Result<RouteTable, String> {
        let mut roots = [Node::default(), Node::default()];
        for r in routes {
            let p = r.prefix.trunc();
            let (v, _) = bits(p.addr());
            let v4 = p.addr().is_ipv4();
            let mut n = &mut roots[usize::from(!v4)];
            for i in 0..p.prefix_len() {
                let b = ((v >> (127 - u32::from(i))) & 1) as usize;
                n = n.child[b].get_or_insert_with(Box::default);
            }
            match n.port {
                Some(q) if q != r.port => {
                    return Err(format!(
                        "route {p}: given twice, to port {q} and to port {}",
                        r.port
                    ))
                }
                _ => n.port = Some(r.port),
            }
        }
        let mut t = RouteTable::default();
        for (fam, root) in roots.iter().enumerate() {
            let v4 = fam == 0;
            let mut out = Vec::new();
            emit(root, 0, 0, None, v4, &mut out);
            for (value, len, port) in out {
                if v4 {
                    insert_at(&mut t.v4, len, (value >> 96) as u32, port);
                } else {
                    insert_at(&mut t.v6, len, value, port);
                }
                t.entries.push(Route {
                    prefix: net(v4, value, len),
                    port,
                });
            }
        }
        t.v4.sort_by_key(|(l, m)| (std::cmp::Reverse(m.len()), *l));
        t.v6.sort_by_key(|(l, m)| (std::cmp::Reverse(m.len()), *l));
        Ok(t)
    }

    /// The port for `addr` (`None`: no route covers it).
    pub fn lookup(&self, addr: IpAddr) -> Option<u16> {
        match addr {
            IpAddr::V4(v) => {
                let a = u32::from(v);
                self.v4
                    .iter()
                    .find_map(|(l, m)| m.get(&(a & mask32(*l))).copied())
            }
            IpAddr::V6(v) => {
                let a = u128::from(v);
                self.v6
                    .iter()
                    .find_map(|(l, m)| m.get(&(a & mask128(*l))).copied())
            }
        }
    }

    /// The disjoint entries.
    pub fn entries(&self) -> &[Route] {
        &self.entries
    }

    /// The entry covering `addr`, if any (its index in [`entries`](Self::entries)).
    pub fn entry_of(&self, addr: IpAddr) -> Option<usize> {
        self.entries.iter().position(|r| r.prefix.contains(&addr))
    }
}

/// Emits the disjoint prefixes under `n` (at `value`/`len`), `inherited` being the
/// port of the nearest route above.
fn emit(
    n: &Node,
    value: u128,
    len: u8,
    inherited: Option<u16>,
    v4: bool,
    out: &mut Vec<(u128, u8, u16)>,
) {
    let here = n.port.or(inherited);
    let width = if v4 { 32 } else { 128 };
    if n.child.iter().all(Option::is_none) || len == width {
        if let Some(p) = here {
            out.push((value, len, p));
        }
        return;
    }
    for (b, c) in n.child.iter().enumerate() {
        let v = value | ((b as u128) << (127 - u32::from(len)));
        match c {
            Some(c) => emit(c, v, len + 1, here, v4, out),
            None => {
                if let Some(p) = here {
                    out.push((v, len + 1, p));
                }
            }
        }
    }
}

/// Longest-prefix match over a plain list of routes (the reference, and what one
/// instance of a naively split table does with its share).
pub fn lpm(routes: &[Route], addr: IpAddr) -> Option<u16> {
    routes
        .iter()
        .filter(|r| r.prefix.contains(&addr))
        .max_by_key(|r| r.prefix.prefix_len())
        .map(|r| r.port)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(p: &str, port: u16) -> Route {
        Route {
            prefix: p.parse().unwrap(),
            port,
        }
    }

    /// NFLOW/MVT Fig. 1: "16.0.0.0/24 0" and "16.0.0.0/28 1" split over two
    /// instances, packets to 16.0.0.0–16.0.0.15 sprayed over them.
    #[test]
    fn naive_split_misroutes_and_disjoint_entries_do_not() {
        let routes = [r("16.0.0.0/24", 0), r("16.0.0.0/28", 1)];
        let addrs: Vec<IpAddr> = (0..16u8)
            .map(|i| IpAddr::V4(std::net::Ipv4Addr::new(16, 0, 0, i)))
            .collect();
        // naive: each instance holds one original route; steering knows nothing
        // of the rules (sprays by address)
        let instances = [vec![routes[0]], vec![routes[1]]];
        let mut misrouted = 0;
        for (i, a) in addrs.iter().enumerate() {
            let got = lpm(&instances[i % 2], *a);
            assert_eq!(lpm(&routes, *a), Some(1), "LPM sends {a} to port 1");
            misrouted += usize::from(got != Some(1));
        }
        assert_eq!(misrouted, 8, "half the packets leave on port 0");
        // MVT: disjoint entries; any entry on any instance; a packet goes to the
        // instance holding the one entry that covers it
        let t = RouteTable::compile(&routes).unwrap();
        let want: Vec<IpNet> = [
            "16.0.0.0/28",
            "16.0.0.16/28",
            "16.0.0.32/27",
            "16.0.0.64/26",
            "16.0.0.128/25",
        ]
        .iter()
        .map(|s| s.parse().unwrap())
        .collect();
        let mut got: Vec<IpNet> = t.entries().iter().map(|e| e.prefix).collect();
        got.sort();
        let mut want_sorted = want.clone();
        want_sorted.sort();
        assert_eq!(
            got, want_sorted,
            "a /24 with a /28 inside is five disjoint prefixes"
        );
        let per_instance: Vec<Vec<Route>> = (0..2)
            .map(|k| {
                t.entries()
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| i % 2 == k)
                    .map(|(_, e)| *e)
                    .collect()
            })
            .collect();
        for a in &addrs {
            let owner = t.entry_of(*a).unwrap() % 2;
            assert_eq!(lpm(&per_instance[owner], *a), Some(1), "{a}");
            assert_eq!(t.lookup(*a), Some(1));
        }
        assert_eq!(t.lookup("16.0.0.200".parse().unwrap()), Some(0));
        assert_eq!(t.lookup("16.0.1.1".parse().unwrap()), None);
    }

    #[test]
    fn compiled_table_equals_longest_prefix_match() {
        // random nested routes, v4 and v6: every address answers as plain LPM
        let mut routes = vec![r("0.0.0.0/0", 9), r("::/0", 9)];
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for i in 0..300u16 {
            let len = (next() % 33) as u8;
            let a = std::net::Ipv4Addr::from((next() as u32) & 0x0aff_ffff);
            routes.push(Route {
                prefix: IpNet::V4(ipnet::Ipv4Net::new(a, len).unwrap().trunc()),
                port: i,
            });
            let len6 = (next() % 129) as u8;
            let a6 = std::net::Ipv6Addr::from(
                (u128::from(next()) << 64 | u128::from(next())) & !(0xffffu128 << 112)
                    | (0x2001u128 << 112),
            );
            routes.push(Route {
                prefix: IpNet::V6(ipnet::Ipv6Net::new(a6, len6).unwrap().trunc()),
                port: 1000 + i,
            });
        }
        // the same prefix twice keeps the first port (dedupe like a config would)
        let mut seen = std::collections::HashSet::new();
        routes.retain(|r| seen.insert(r.prefix));
        let t = RouteTable::compile(&routes).unwrap();
        // disjoint: no two entries share an address
        let e = t.entries();
        for (i, a) in e.iter().enumerate() {
            for b in &e[i + 1..] {
                assert!(
                    !a.prefix.contains(&b.prefix.network())
                        && !b.prefix.contains(&a.prefix.network()),
                    "{} and {} overlap",
                    a.prefix,
                    b.prefix
                );
            }
        }
        for _ in 0..20_000 {
            let a = IpAddr::V4(std::net::Ipv4Addr::from((next() as u32) & 0x0aff_ffff));
            assert_eq!(t.lookup(a), lpm(&routes, a), "{a}");
            let a6 = IpAddr::V6(std::net::Ipv6Addr::from(
                (u128::from(next()) << 64 | u128::from(next())) & !(0xffffu128 << 112)
                    | (0x2001u128 << 112),
            ));
            assert_eq!(t.lookup(a6), lpm(&routes, a6), "{a6}");
        }
    }

    #[test]
    fn conflicting_duplicates_are_named() {
        let e = RouteTable::compile(&[r("10.0.0.0/8", 1), r("10.0.0.0/8", 2)]).unwrap_err();
        assert!(e.contains("10.0.0.0/8"), "{e}");
    }
}
