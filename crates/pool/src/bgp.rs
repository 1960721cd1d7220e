//! The pool's routing by BGP (Sirius §3.2, App. A.1): each node announces
//! the prefixes it serves to the router in front of the pool (the ToR) — the
//! tenants' virtual IPs, reached by the node's front link, and its NAT pool,
//! reached by its back link — and so does the node's secondary, with a longer
//! AS path. The router prefers the shortest path, so a pair fails over by
//! itself: when the primary's announcement goes (its process dies, which kills
//! its BGP speaker; BFD times out; it drains), the secondary's is the best left.
//!
//! The AS-path rule also settles split brain: a node that lost its pair's
//! heartbeats and took itself for the survivor ([`Role::Promoted`]) announces
//! one prepend longer than an original primary, so while the primary still
//! announces, the router keeps sending it the traffic and the two copies of a
//! flow's state never both change.
//!
//! Rendered as configuration for BIRD 2 (`bird -c`): the router's speaker
//! ([`Router`]) and a node's ([`Node`]). Pure: text in, text out.

use std::fmt::Write as _;
use std::net::Ipv4Addr;

use ipnet::Ipv4Net;

use serde::{Deserialize, Serialize};

/// The router's AS number; its communities name a route's side.
pub const ROUTER_ASN: u32 = 65000;
/// Node `i`'s AS number.
pub fn node_asn(i: usize) -> u32 {
    65001 + i as u32
}

/// An IPv4 prefix, `a.b.c.d/len`; one with host bits set is refused (it
/// names no network a router would route as written).
pub fn network(s: &str) -> Result<Ipv4Net, String> {
    let n: Ipv4Net = s
        .parse()
        .map_err(|_| format!("`{s}`: expected an IPv4 prefix, a.b.c.d/len"))?;
    if n.trunc() != n {
        return Err(format!(
            "`{s}`: host bits are set (the prefix is {})",
            n.trunc()
        ));
    }
    Ok(n)
}

fn de_network<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Ipv4Net, D::Error> {
    network(&String::deserialize(d)?).map_err(serde::de::Error::custom)
}

/// A node's part for a prefix, which sets its AS path's length.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// The pair's primary: the shortest path.
    Primary,
    /// A secondary that lost its primary's heartbeats and took over: longer
    /// than a primary's (under split brain the primary keeps the traffic),
    /// shorter than a backup's.
    Promoted,
    /// The pair's secondary: used only once the primary's route is gone.
    Backup,
    /// A node serving another part of a split tenant (the tenant's packets
    /// reach it steered by the tenant's primary): used only once neither the
    /// primary's nor the backup's route is left.
    Part,
}

impl Role {
    /// Times the node prepends its AS number to the path.
    pub fn prepends(self) -> u8 {
        match self {
            Role::Primary => 0,
            Role::Promoted => 1,
            Role::Backup => 2,
            Role::Part => 3,
        }
    }
}

/// Which of a node's links a prefix is reached by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Side {
    /// Traffic from the clients (a tenant's virtual IPs).
    Front,
    /// Replies to the node's translated addresses (its NAT pool).
    Back,
}

impl Side {
    /// The community that tells the router the side: (ROUTER_ASN, 1 or 2).
    pub fn community(self) -> (u32, u32) {
        match self {
            Side::Front => (ROUTER_ASN, 1),
            Side::Back => (ROUTER_ASN, 2),
        }
    }
}

/// One announcement.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Announce {
    #[serde(deserialize_with = "de_network")]
    pub prefix: Ipv4Net,
    pub side: Side,
    pub role: Role,
}

/// Bidirectional forwarding detection between the router and a node: a
/// session is down after `multiplier` intervals without a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Bfd {
    pub interval_ms: u32,
    pub multiplier: u8,
}

impl Default for Bfd {
    /// 10 ms × 5: a silent node found in 50 ms. Measured on this 2-CPU
    /// machine (docs/MEASURED.md "The pool on BGP"): 2 ms × 3 took live
    /// nodes down under iperf3 load; 5 ms × 3 held under iperf3 but not under
    /// the failover test's 200 connections opening at once beside two busy
    /// loops (a session down in 4 of 20 rounds).
    fn default() -> Bfd {
        Bfd {
            interval_ms: 10,
            multiplier: 5,
        }
    }
}

impl Bfd {
    /// What is wrong with it, if anything.
    pub fn check(&self) -> Result<(), String> {
        if !(1..=10_000).contains(&self.interval_ms) {
            return Err(format!("bfd interval {} ms: 1 to 10000", self.interval_ms));
        }
        if !(1..=255).contains(&self.multiplier) {
            return Err(format!("bfd multiplier {}: 1 to 255", self.multiplier));
        }
        Ok(())
    }

    fn bird(&self, iface: &str) -> String {
        format!(
            "protocol bfd {{\n  interface \"{iface}\" {{ min rx interval {i} ms; \
             min tx interval {i} ms; idle tx interval 1000 ms; multiplier {m}; }};\n}}\n",
            i = self.interval_ms,
            m = self.multiplier
        )
    }
}

/// BIRD's messages (sessions and BFD going up and down, with their reasons)
/// to its standard error, which its starter sends to a log file.
const LOG: &str = "log stderr all;\ndebug protocols { states };\n";

/// What both speakers' configurations start with: who wrote it, the router
/// id, the log, the interfaces, BFD on `iface`.
fn preamble(what: &str, id: Ipv4Addr, bfd: &Bfd, iface: &str) -> String {
    format!(
        "# flowshift pool {what}: written by flowshift, read by bird -c\n\
         router id {id};\n{LOG}protocol device {{ scan time 10; }}\n{}",
        bfd.bird(iface)
    )
}

/// BIRD's BGP timers: the first connection a second after the start, a
/// failed session retried after a second.
const TIMERS: &str = "  connect delay time 1;\n  connect retry time 1;\n  \
                      error wait time 1, 4;\n  hold time 9;\n  bfd on;\n";

/// A node's BGP speaker.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Node {
    /// Its address on the peering network (also its router id).
    pub local: Ipv4Addr,
    pub asn: u32,
    /// The router's address on the peering network.
    pub peer: Ipv4Addr,
    #[serde(default = "router_asn")]
    pub peer_asn: u32,
    /// The interface it peers by (BFD runs there).
    pub iface: String,
    #[serde(default)]
    pub bfd: Bfd,
    #[serde(default)]
    pub announce: Vec<Announce>,
    /// Other nodes' prefixes it may be asked to back up once the pool
    /// re-pairs after a failure (`backup<k>` and `promote<k>`, disabled).
    #[serde(default)]
    pub adopt: Vec<Adopt>,
}

/// Prefixes a node may back up later: another node's, as backup.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Adopt {
    /// That node's replication port (`[pool] listen`), which names it.
    pub from: std::net::SocketAddr,
    /// Its prefixes (role `backup`).
    pub announce: Vec<Announce>,
}

/// The static protocol holding `adopt[k]`'s prefixes as backup.
pub fn backup_protocol(k: usize) -> String {
    format!("backup{k}")
}

/// The static protocol holding `adopt[k]`'s prefixes promoted.
pub fn promote_protocol(k: usize) -> String {
    format!("promote{k}")
}

fn router_asn() -> u32 {
    ROUTER_ASN
}

/// The name of a node's static protocol holding its announcements: disabled,
/// it announces nothing (before its data path is ready; once drained).
pub const ANNOUNCE: &str = "announce";
/// The name of a node's static protocol holding its backup prefixes again,
/// announced promoted while it is enabled.
pub const PROMOTE: &str = "promote";
/// The name of a node's BGP session to the router.
pub const UPLINK: &str = "uplink";

impl Node {
    /// What is wrong with it, if anything.
    pub fn check(&self) -> Result<(), String> {
        self.bfd.check()?;
        if self.asn == self.peer_asn {
            return Err(format!(
                "asn {}: a node's AS is not the router's (eBGP)",
                self.asn
            ));
        }
        if self.iface.is_empty() || self.iface.contains(['"', '\n', ' ']) {
            return Err(format!("iface `{}`: not an interface name", self.iface));
        }
        let mut seen = std::collections::BTreeSet::new();
        for a in &self.announce {
            if a.role == Role::Promoted {
                return Err(format!(
                    "{}: a node is promoted while it runs (its primary silent), not by its \
                     config: announce it as `backup`",
                    a.prefix
                ));
            }
            if !seen.insert(a.prefix) {
                return Err(format!("{} is announced twice", a.prefix));
            }
        }
        for a in self.adopt.iter().flat_map(|d| &d.announce) {
            if a.role != Role::Backup {
                return Err(format!("{}: an adopted prefix is a backup", a.prefix));
            }
            if !seen.insert(a.prefix) {
                return Err(format!("{} is announced twice", a.prefix));
            }
        }
        Ok(())
    }

    /// BIRD 2's configuration; its announcements start disabled when
    /// `start_disabled`. Its backup prefixes are also in a second static
    /// protocol, [`PROMOTE`], disabled, preferred when enabled, whose routes
    /// go out promoted: enabling and disabling it promotes and demotes the
    /// node without reading the configuration again (which would restart
    /// its BFD session, and the router would close the BGP session).
    pub fn bird_config(&self, start_disabled: bool) -> String {
        let mut c = preamble("node", self.local, &self.bfd, &self.iface);
        let _ = writeln!(
            c,
            "protocol static {ANNOUNCE} {{\n  ipv4;\n  disabled {};",
            if start_disabled { "yes" } else { "no" }
        );
        for a in &self.announce {
            let _ = writeln!(c, "  route {} blackhole;", a.prefix);
        }
        c += "}\n";
        let _ = writeln!(
            c,
            "protocol static {PROMOTE} {{\n  ipv4 {{ preference 250; }};\n  disabled yes;"
        );
        for a in self.announce.iter().filter(|a| a.role == Role::Backup) {
            let _ = writeln!(c, "  route {} blackhole;", a.prefix);
        }
        c += "}\n";
        for (k, d) in self.adopt.iter().enumerate() {
            let channels = [
                (backup_protocol(k), "ipv4;"),
                (promote_protocol(k), "ipv4 { preference 250; };"),
            ];
            for (name, channel) in channels {
                let _ = writeln!(c, "protocol static {name} {{\n  {channel}\n  disabled yes;");
                for a in &d.announce {
                    let _ = writeln!(c, "  route {} blackhole;", a.prefix);
                }
                c += "}\n";
            }
        }
        let _ = writeln!(
            c,
            "protocol bgp {UPLINK} {{\n  local {} as {};\n  neighbor {} as {};\n{TIMERS}  \
             ipv4 {{\n    import none;\n    export filter {{",
            self.local, self.asn, self.peer, self.peer_asn
        );
        let prepends = |c: &mut String, role: Role| {
            for _ in 0..role.prepends() {
                let _ = write!(c, " bgp_path.prepend({});", self.asn);
            }
        };
        for a in &self.announce {
            let (x, y) = a.side.community();
            let _ = write!(c, "      if net = {} then {{", a.prefix);
            if a.role == Role::Backup {
                let _ = write!(c, " if proto = \"{PROMOTE}\" then {{");
                prepends(&mut c, Role::Promoted);
                let _ = write!(c, " }} else {{");
                prepends(&mut c, Role::Backup);
                let _ = write!(c, " }}");
            } else {
                prepends(&mut c, a.role);
            }
            let _ = writeln!(c, " bgp_community.add(({x}, {y})); accept; }}");
        }
        for (k, d) in self.adopt.iter().enumerate() {
            for a in &d.announce {
                let (x, y) = a.side.community();
                let _ = write!(
                    c,
                    "      if net = {} then {{ if proto = \"{}\" then {{",
                    a.prefix,
                    promote_protocol(k)
                );
                prepends(&mut c, Role::Promoted);
                let _ = write!(c, " }} else {{");
                prepends(&mut c, Role::Backup);
                let _ = writeln!(c, " }} bgp_community.add(({x}, {y})); accept; }}");
            }
        }
        c += "      reject;\n    };\n  };\n}\n";
        c
    }
}

/// What a node's speaker sees at one look (its watch's inputs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Seen {
    /// The node was told to drain (its first Ctrl-C or SIGTERM).
    pub drain: bool,
    /// A link of the node's has no carrier.
    pub link_down: bool,
    /// Its BGP session to the router: established, not, or not known (no
    /// answer from its BIRD this time).
    pub session_up: Option<bool>,
    /// The primary it backs up is silent (its pair heartbeats).
    pub primary_lost: bool,
}

/// Why a node withdraws every announcement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Withdraw {
    /// A planned drain: then the node stops.
    Drain,
    /// A link of its lost its carrier: it cannot deliver what it would get.
    LinkDown,
    /// Its session to the router went down after it had been up: the router
    /// gave its flows to its secondary, which has changed them since, so its
    /// own copies are stale and it must not take them back.
    SessionLost,
}

/// What the speaker does about what it saw.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Act {
    Withdraw(Withdraw),
    /// Announce the backed-up prefixes promoted (true) or as backup again.
    Promote(bool),
}

/// A node speaker's decisions (pure: inputs in, actions out): it withdraws
/// once, for good, on a drain, a link down or a lost session; it promotes
/// and demotes itself with its primary's silence while it announces.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Watch {
    withdrawn: Option<Withdraw>,
    promoted: bool,
    session_was_up: bool,
}

impl Watch {
    /// What to do about `seen`, at most one action a look (a drain first).
    pub fn look(&mut self, seen: Seen) -> Option<Act> {
        if seen.drain && self.withdrawn != Some(Withdraw::Drain) {
            // (a drain after another withdrawal still ends the node)
            self.withdrawn = Some(Withdraw::Drain);
            return Some(Act::Withdraw(Withdraw::Drain));
        }
        if self.withdrawn.is_some() {
            return None;
        }
        if seen.link_down {
            self.withdrawn = Some(Withdraw::LinkDown);
            return Some(Act::Withdraw(Withdraw::LinkDown));
        }
        match seen.session_up {
            Some(true) => self.session_was_up = true,
            Some(false) if self.session_was_up => {
                self.withdrawn = Some(Withdraw::SessionLost);
                return Some(Act::Withdraw(Withdraw::SessionLost));
            }
            _ => {}
        }
        if seen.primary_lost != self.promoted {
            self.promoted = seen.primary_lost;
            return Some(Act::Promote(self.promoted));
        }
        None
    }

    /// Why it withdrew, if it did.
    pub fn withdrawn(&self) -> Option<Withdraw> {
        self.withdrawn
    }
}

/// A node as the router peers with it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Peer {
    pub addr: Ipv4Addr,
    pub asn: u32,
    /// The next hop of its front prefixes (an address on the router's link
    /// to the node's front) and of its back prefixes.
    pub front: Ipv4Addr,
    pub back: Ipv4Addr,
}

/// The name of the router's session with node `i`.
pub fn session(i: usize) -> String {
    format!("node{i}")
}

/// The router's BGP speaker (the ToR of Sirius's Fig. 4).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Router {
    /// Its address on the peering network (also its router id).
    pub local: Ipv4Addr,
    /// The interface it peers by.
    pub iface: String,
    pub bfd: Bfd,
    /// The kernel routing table its best routes go to.
    pub table: u32,
    /// Node `i` is `nodes[i]`.
    pub nodes: Vec<Peer>,
}

impl Router {
    /// BIRD 2's configuration: a session per node whose routes go by the
    /// node's front or back link as their community says, the best of each
    /// prefix (the shortest AS path) to the kernel table.
    pub fn bird_config(&self) -> String {
        let mut c = preamble("router", self.local, &self.bfd, &self.iface);
        let _ = writeln!(
            c,
            "protocol kernel {{\n  ipv4 {{ import none; export all; }};\n  kernel table {};\n}}",
            self.table
        );
        let (fx, fy) = Side::Front.community();
        let (bx, by) = Side::Back.community();
        for (i, n) in self.nodes.iter().enumerate() {
            let _ = writeln!(
                c,
                "protocol bgp {} {{\n  local {} as {ROUTER_ASN};\n  neighbor {} as {};\n{TIMERS}  \
                 ipv4 {{\n    export none;\n    import filter {{\n      \
                 if ({fx}, {fy}) ~ bgp_community then {{ gw = {}; accept; }}\n      \
                 if ({bx}, {by}) ~ bgp_community then {{ gw = {}; accept; }}\n      \
                 reject;\n    }};\n  }};\n}}",
                session(i),
                self.local,
                n.addr,
                n.asn,
                n.front,
                n.back
            );
        }
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(announce: Vec<Announce>) -> Node {
        Node {
            local: "10.77.0.1".parse().unwrap(),
            asn: node_asn(0),
            peer: "10.77.0.254".parse().unwrap(),
            peer_asn: ROUTER_ASN,
            iface: "fspy0".into(),
            bfd: Bfd::default(),
            announce,
            adopt: Vec::new(),
        }
    }

    #[test]
    fn an_adopted_nodes_prefixes_wait_disabled_as_backup_and_promoted() {
        let mut n = node(vec![Announce {
            prefix: "198.51.100.10/32".parse().unwrap(),
            side: Side::Front,
            role: Role::Primary,
        }]);
        n.adopt = vec![Adopt {
            from: "10.77.0.3:7700".parse().unwrap(),
            announce: vec![Announce {
                prefix: "198.51.100.12/32".parse().unwrap(),
                side: Side::Front,
                role: Role::Backup,
            }],
        }];
        n.check().unwrap();
        let c = n.bird_config(true);
        for p in ["backup0", "promote0"] {
            let at = c
                .find(&format!("protocol static {p} {{"))
                .unwrap_or_else(|| panic!("{c}"));
            let body = &c[at..at + c[at..].find("\n}\n").unwrap()];
            assert!(
                body.contains("disabled yes;") && body.contains("198.51.100.12/32"),
                "{body}"
            );
        }
        assert!(
            c.contains("protocol static promote0 {\n  ipv4 { preference 250; };"),
            "{c}"
        );
        // promoted one prepend, else a backup's two
        let line = c
            .lines()
            .find(|l| l.contains("if net = 198.51.100.12/32"))
            .unwrap();
        assert_eq!(
            line.trim(),
            "if net = 198.51.100.12/32 then { if proto = \"promote0\" then { \
             bgp_path.prepend(65001); } else { bgp_path.prepend(65001); \
             bgp_path.prepend(65001); } bgp_community.add((65000, 1)); accept; }"
        );
        // an adopted prefix is a backup, and never one the node announces
        n.adopt[0].announce[0].role = Role::Primary;
        assert!(n.check().is_err());
        n.adopt[0].announce[0].role = Role::Backup;
        n.adopt[0].announce[0].prefix = "198.51.100.10/32".parse().unwrap();
        assert!(n.check().unwrap_err().contains("twice"));
    }

    #[test]
    fn prefixes_with_host_bits_or_without_a_length_are_refused() {
        assert_eq!(
            network("203.0.113.16/28").unwrap().to_string(),
            "203.0.113.16/28"
        );
        let e = network("203.0.113.17/28").unwrap_err();
        assert!(
            e.contains("host bits") && e.contains("203.0.113.16/28"),
            "{e}"
        );
        assert!(network("1.2.3.4/33").is_err());
        assert!(network("1.2.3/8").is_err());
    }

    #[test]
    fn a_primary_is_preferred_to_a_promoted_node_and_that_to_a_backup() {
        assert!(Role::Primary.prepends() < Role::Promoted.prepends());
        assert!(Role::Promoted.prepends() < Role::Backup.prepends());
        assert!(Role::Backup.prepends() < Role::Part.prepends());
    }

    #[test]
    fn a_node_prepends_by_role_and_tags_by_side() {
        let n = node(vec![
            Announce {
                prefix: "198.51.100.10/32".parse().unwrap(),
                side: Side::Front,
                role: Role::Primary,
            },
            Announce {
                prefix: "203.0.113.32/28".parse().unwrap(),
                side: Side::Back,
                role: Role::Backup,
            },
        ]);
        n.check().unwrap();
        let c = n.bird_config(true);
        assert!(c.contains("disabled yes;"), "{c}");
        assert!(c.contains("route 198.51.100.10/32 blackhole;"), "{c}");
        let line = |p: &str| c.lines().find(|l| l.contains(p)).unwrap().to_string();
        let front = line("if net = 198.51.100.10/32");
        assert_eq!(front.matches("prepend").count(), 0, "{front}");
        assert!(front.contains("(65000, 1)"), "{front}");
        let back = line("if net = 203.0.113.32/28");
        assert_eq!(back.matches("bgp_path.prepend(65001)").count(), 3, "{back}");
        assert!(back.contains("(65000, 2)"), "{back}");
        // a backup prefix is also in the promote protocol, and goes out with
        // one prepend from there
        assert!(c.contains("protocol static promote {"), "{c}");
        let promote = &c[c.find("protocol static promote {").unwrap()..];
        let promote = &promote[..promote.find("\n}").unwrap()];
        assert!(
            promote.contains("route 203.0.113.32/28 blackhole;"),
            "{promote}"
        );
        assert!(!promote.contains("198.51.100.10"), "{promote}");
        assert!(
            back.contains("if proto = \"promote\" then { bgp_path.prepend(65001); } else {"),
            "{back}"
        );
    }

    #[test]
    fn a_node_that_cannot_peer_is_refused() {
        let a = Announce {
            prefix: "198.51.100.10/32".parse().unwrap(),
            side: Side::Front,
            role: Role::Primary,
        };
        assert!(node(vec![a, a]).check().unwrap_err().contains("twice"));
        let mut n = node(vec![a]);
        n.asn = ROUTER_ASN;
        assert!(n.check().unwrap_err().contains("eBGP"));
        let mut n = node(vec![a]);
        n.bfd.interval_ms = 0;
        assert!(n.check().unwrap_err().contains("bfd interval"));
        let mut n = node(vec![a]);
        n.iface = "a\"b".into();
        assert!(n.check().is_err());
    }

    #[test]
    fn the_router_sets_each_nodes_next_hops_by_side() {
        let r = Router {
            local: "10.77.0.254".parse().unwrap(),
            iface: "fspbr".into(),
            bfd: Bfd::default(),
            table: 100,
            nodes: (0..2)
                .map(|i| Peer {
                    addr: Ipv4Addr::new(10, 77, 0, i as u8 + 1),
                    asn: node_asn(i),
                    front: Ipv4Addr::new(10, 8, i as u8, 2),
                    back: Ipv4Addr::new(10, 9, i as u8, 2),
                })
                .collect(),
        };
        let c = r.bird_config();
        assert!(c.contains("kernel table 100;"));
        assert!(c.contains("protocol bgp node1 {"));
        assert!(c.contains("neighbor 10.77.0.2 as 65002;"));
        assert!(c.contains("gw = 10.8.1.2;"));
        assert!(c.contains("gw = 10.9.1.2;"));
        assert!(c.contains("min rx interval 10 ms"));
    }

    #[test]
    fn a_speaker_withdraws_once_for_good_and_promotes_only_while_it_announces() {
        let seen = Seen::default();
        let mut w = Watch::default();
        // a session that never came up is starting, not lost
        assert_eq!(
            w.look(Seen {
                session_up: Some(false),
                ..seen
            }),
            None
        );
        assert_eq!(
            w.look(Seen {
                session_up: Some(true),
                ..seen
            }),
            None
        );
        // the primary silent, then beating again
        let lost = Seen {
            primary_lost: true,
            session_up: Some(true),
            ..seen
        };
        assert_eq!(w.look(lost), Some(Act::Promote(true)));
        assert_eq!(w.look(lost), None);
        assert_eq!(
            w.look(Seen {
                session_up: None,
                ..seen
            }),
            Some(Act::Promote(false))
        );
        // an unknown session state is no loss
        assert_eq!(
            w.look(Seen {
                session_up: None,
                ..seen
            }),
            None
        );
        // the session lost after it was up: withdrawn for good
        let gone = Seen {
            session_up: Some(false),
            ..seen
        };
        assert_eq!(w.look(gone), Some(Act::Withdraw(Withdraw::SessionLost)));
        assert_eq!(w.withdrawn(), Some(Withdraw::SessionLost));
        assert_eq!(
            w.look(Seen {
                session_up: Some(true),
                ..seen
            }),
            None,
            "not back"
        );
        assert_eq!(w.look(lost), None, "no promotion once withdrawn");
        assert_eq!(
            w.look(Seen {
                link_down: true,
                ..seen
            }),
            None,
            "once"
        );
        // a drain still ends it
        let drain = Seen {
            drain: true,
            ..seen
        };
        assert_eq!(w.look(drain), Some(Act::Withdraw(Withdraw::Drain)));
        assert_eq!(w.look(drain), None);

        let mut w = Watch::default();
        assert_eq!(
            w.look(Seen {
                link_down: true,
                primary_lost: true,
                ..seen
            }),
            Some(Act::Withdraw(Withdraw::LinkDown)),
            "a link down before a promotion"
        );
        assert_eq!(
            w.look(Seen {
                primary_lost: true,
                ..seen
            }),
            None
        );
        let mut w = Watch::default();
        assert_eq!(
            w.look(Seen {
                drain: true,
                link_down: true,
                ..seen
            }),
            Some(Act::Withdraw(Withdraw::Drain)),
            "a drain first"
        );
    }

    #[test]
    fn a_node_reads_from_toml() {
        let n: Node = toml::from_str(
            "local = \"10.77.0.1\"\nasn = 65001\npeer = \"10.77.0.254\"\niface = \"y0\"\n\
             bfd = { interval_ms = 20, multiplier = 3 }\n\
             [[announce]]\nprefix = \"198.51.100.10/32\"\nside = \"front\"\nrole = \"backup\"\n",
        )
        .unwrap();
        assert_eq!(n.peer_asn, ROUTER_ASN);
        assert_eq!(n.announce[0].role, Role::Backup);
        assert_eq!(n.bfd.multiplier, 3);
        let e = toml::from_str::<Node>(
            "local = \"10.77.0.1\"\nasn = 65001\npeer = \"10.77.0.254\"\niface = \"y0\"\n\
             [[announce]]\nprefix = \"198.51.100.11/24\"\nside = \"front\"\nrole = \"primary\"\n",
        )
        .unwrap_err();
        assert!(e.to_string().contains("host bits"), "{e}");
    }
}
