//! A pool test bed on this machine (Sirius §3.1 in miniature): a client, a
//! router, N nodes and a server, each in its namespace.
//!
//! ```text
//!  {p}-c ── {p}c0 ─ {p}rc ┐            ┌─ {p}f0 ── {p}a0 [{p}-n0] {p}b0 ── {p}k0 ─┐
//!  10.0.0.2/24            │ {p}-r      ├─ {p}f1 ── {p}a1 [{p}-n1] {p}b1 ── {p}k1 ─┤
//!  {p}-s ── {p}s0 ─ {p}rs ┘ (router)   └─ …                                       ┘
//!  198.51.100.2/24
//! ```
//!
//! The router spreads flows over the nodes with the kernel's own ECMP: two
//! **resilient nexthop groups** of as many buckets, one over the nodes' front
//! links (client → server) and one over their back links (server → client),
//! with the same node in the same bucket of both, and a multipath hash over
//! addresses and ports that is the same for both directions (policy 3, fields
//! 0x37: the kernel orders the addresses and ports before hashing), so both
//! directions of a connection meet the same node. Policy rules pick the group
//! by the interface a packet came in by; a packet back from a node goes by the
//! main table. Each node runs a bump in the wire between its two links (e.g.
//! `flowshift run --iface {p}a{i},{p}b{i}`): frames leave a node with the
//! addresses the router gave them, so each router link takes the MAC address
//! the opposite link's static neighbour names. A node's NAT pool
//! (203.0.113.16·i/28) is routed to its back link, for replies to reach the
//! node that translated them. A third link per node joins a bridge in the
//! router's namespace: the sync network (10.77.0.0/24), for replication
//! between nodes and the controller's heartbeats.
//!
//! A pool controller changes the groups' members ([`PoolBed::set_members`]):
//! the kernel moves only the buckets of a member that leaves, to the others,
//! and the same way in both groups (checked by [`PoolBed::bucket_nodes`]). To
//! hand a failed node's buckets to its secondary only, it re-points the
//! node's member nexthops at the secondary's links ([`PoolBed::redirect`]).
//! It does not let a program set a bucket's member directly (iproute2 6.1 has
//! no `nexthop bucket set`; the kernel only lists buckets), so which buckets a
//! joining member takes is the kernel's choice.

use std::io;

use crate::netns::{exec, ip, mac};
use crate::testbed::{neighbour, quiet};

/// The client's address.
pub const CLIENT: &str = "10.0.0.2";
/// The server's address.
pub const SERVER: &str = "198.51.100.2";

/// Group ids of the two directions.
const FRONT: u32 = 1000;
const BACK: u32 = 2000;
/// The MAC address of the router's links to the nodes' fronts, and backs.
const FRONT_MAC: &str = "02:f5:00:00:00:0f";
const BACK_MAC: &str = "02:f5:00:00:00:0b";
/// UDP port of the nodes' replication (`[pool] listen`).
pub const SYNC_PORT: u16 = 7700;

/// The namespaces; deleted on drop.
#[derive(Debug)]
pub struct PoolBed {
    /// The prefix of every name.
    pub prefix: String,
    /// Nodes.
    pub nodes: usize,
    /// Router buckets (in each group).
    pub buckets: usize,
    /// Each node's weight in the groups (1 for nodes past the end): the
    /// kernel gives a member buckets in proportion.
    pub weights: Vec<u8>,
    /// How the router finds the nodes.
    pub routing: Routing,
    /// Virtual IPs the server answers at ([`Routing::Bgp`]).
    pub vips: usize,
}

/// How the bed's router sends traffic to the nodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Routing {
    /// Two resilient nexthop groups a controller sets (the flows of every
    /// address spread over all nodes).
    Groups,
    /// The routes the nodes announce by BGP to a speaker in the router's
    /// namespace (`pool::bgp`; the router's BIRD writes them to table
    /// [`BGP_TABLE`]): node `i` the primary of virtual IP [`PoolBed::vip`]`(i)`
    /// and of its NAT pool. Traffic from the client or the server that no
    /// announced route covers is unreachable, never routed past the nodes.
    Bgp,
}

/// Virtual IPs a bed on BGP can have (198.51.100.10 to .254).
pub const MAX_VIPS: usize = 245;

/// The router's kernel table for the routes BGP gives it.
pub const BGP_TABLE: u32 = 100;
/// The router's address on the sync network, where its BGP speaker peers.
pub const ROUTER_SYNC: &str = "10.77.0.254";

impl PoolBed {
    /// Builds the bed: names start with `prefix` (≤ 6 characters), `nodes`
    /// nodes (1..=16), `buckets` buckets per group.
    pub fn up(prefix: &str, nodes: usize, buckets: usize) -> io::Result<PoolBed> {
        Self::up_weighted(prefix, nodes, buckets, &[])
    }

    /// [`up`](Self::up) with node `i` weighing `weights[i]` in the groups (1
    /// for nodes past the end).
    pub fn up_weighted(
        prefix: &str,
        nodes: usize,
        buckets: usize,
        weights: &[u8],
    ) -> io::Result<PoolBed> {
        assert!(prefix.len() <= 6, "prefix too long for interface names");
        assert!((1..=16).contains(&nodes), "1 to 16 nodes");
        assert!(weights.iter().all(|w| *w > 0), "weights of at least 1");
        let bed = PoolBed {
            prefix: prefix.to_string(),
            nodes,
            buckets,
            weights: weights.to_vec(),
            routing: Routing::Groups,
            vips: 0,
        };
        bed.remove();
        bed.build()?;
        Ok(bed)
    }

    /// Builds the bed with [`Routing::Bgp`]: `nodes` nodes (1..=16), the
    /// server answering at `vips` virtual IPs (1..=[`MAX_VIPS`]). The routing
    /// daemons are the caller's to start (`pool::bgp` writes their
    /// configuration; the router's peers on [`sync_bridge`](Self::sync_bridge)
    /// at [`ROUTER_SYNC`]).
    pub fn up_bgp(prefix: &str, nodes: usize, vips: usize) -> io::Result<PoolBed> {
        assert!(prefix.len() <= 6, "prefix too long for interface names");
        assert!((1..=16).contains(&nodes), "1 to 16 nodes");
        assert!(
            (1..=MAX_VIPS).contains(&vips),
            "1 to {MAX_VIPS} virtual IPs"
        );
        let bed = PoolBed {
            prefix: prefix.to_string(),
            nodes,
            buckets: 0,
            weights: Vec::new(),
            routing: Routing::Bgp,
            vips,
        };
        bed.remove();
        bed.build()?;
        Ok(bed)
    }

    /// Virtual IP `t` (`Routing::Bgp`): an address of the server's that
    /// clients reach through the node that serves it (a tenant's, or node
    /// `t`'s when there are no tenants).
    pub fn vip(t: usize) -> String {
        format!("198.51.100.{}", 10 + t)
    }

    /// The next hop, in the router, of node `i`'s front link (traffic from
    /// the client) and of its back link (replies to its NAT pool).
    pub fn gateways(i: usize) -> (String, String) {
        (format!("10.8.{i}.2"), format!("10.9.{i}.2"))
    }

    /// The bridge of the sync network in the router's namespace.
    pub fn sync_bridge(&self) -> String {
        format!("{}br", self.prefix)
    }

    /// Node `i`'s link to the sync network, in its namespace.
    pub fn sync_iface(&self, i: usize) -> String {
        format!("{}y{i}", self.prefix)
    }

    /// The router's ends of node `i`'s front and back links.
    pub fn router_ifaces(&self, i: usize) -> (String, String) {
        (
            format!("{}f{i}", self.prefix),
            format!("{}k{i}", self.prefix),
        )
    }

    /// The client's namespace.
    pub fn client(&self) -> String {
        format!("{}-c", self.prefix)
    }

    /// The router's namespace.
    pub fn router(&self) -> String {
        format!("{}-r", self.prefix)
    }

    /// The server's namespace.
    pub fn server(&self) -> String {
        format!("{}-s", self.prefix)
    }

    /// Node `i`'s namespace.
    pub fn node(&self, i: usize) -> String {
        format!("{}-n{i}", self.prefix)
    }

    /// Node `i`'s links: front (towards the client), back (towards the server).
    pub fn node_ifaces(&self, i: usize) -> (String, String) {
        (
            format!("{}a{i}", self.prefix),
            format!("{}b{i}", self.prefix),
        )
    }

    /// Node `i`'s address on the sync network (its third link, `{p}y{i}`),
    /// where replicas and heartbeats go. The router's namespace is on it too,
    /// as `10.77.0.254` (a pool controller runs there).
    pub fn sync_addr(i: usize) -> String {
        format!("10.77.0.{}", i + 1)
    }

    /// Node `i`'s NAT pool.
    pub fn nat_pool(i: usize) -> String {
        format!("203.0.113.{}/28", 16 * i)
    }

    fn build(&self) -> io::Result<()> {
        self.build_ends()?;
        for i in 0..self.nodes {
            self.build_node(i)?;
        }
        match self.routing {
            Routing::Bgp => self.route_by_bgp(),
            _ => self.route_by_groups(),
        }
    }

    /// The client, the router and the server, their links, the router's
    /// forwarding and its bridge for the sync network.
    fn build_ends(&self) -> io::Result<()> {
        let p = &self.prefix;
        let (c, r, s) = (self.client(), self.router(), self.server());
        let (c0, rc, rs, s0) = (
            format!("{p}c0"),
            format!("{p}rc"),
            format!("{p}rs"),
            format!("{p}s0"),
        );
        for ns in [&c, &r, &s] {
            ip(&["netns", "add", ns])?;
            exec(ns, "ip", &["link", "set", "lo", "up"])?;
        }
        ip(&[
            "link", "add", &c0, "netns", &c, "type", "veth", "peer", "name", &rc, "netns", &r,
        ])?;
        ip(&[
            "link", "add", &s0, "netns", &s, "type", "veth", "peer", "name", &rs, "netns", &r,
        ])?;
        for (ns, dev) in [(&c, &c0), (&r, &rc), (&r, &rs), (&s, &s0)] {
            quiet(ns, dev)?;
        }
        exec(
            &c,
            "ip",
            &["addr", "add", &format!("{CLIENT}/24"), "dev", &c0],
        )?;
        exec(&c, "ip", &["route", "add", "default", "via", "10.0.0.1"])?;
        exec(
            &s,
            "ip",
            &["addr", "add", &format!("{SERVER}/24"), "dev", &s0],
        )?;
        exec(
            &s,
            "ip",
            &["route", "add", "default", "via", "198.51.100.1"],
        )?;
        exec(&r, "ip", &["addr", "add", "10.0.0.1/24", "dev", &rc])?;
        exec(&r, "ip", &["addr", "add", "198.51.100.1/24", "dev", &rs])?;
        for kv in [
            "net.ipv4.ip_forward=1",
            "net.ipv4.fib_multipath_hash_policy=3",
            "net.ipv4.fib_multipath_hash_fields=0x0037",
            "net.ipv4.conf.all.rp_filter=0",
            "net.ipv4.conf.default.rp_filter=0",
        ] {
            exec(&r, "sysctl", &["-qw", kv])?;
        }
        let br = format!("{p}br");
        exec(&r, "ip", &["link", "add", &br, "type", "bridge"])?;
        exec(&r, "ip", &["link", "set", &br, "up"])?;
        // the controller's address on the sync network
        exec(&r, "ip", &["addr", "add", "10.77.0.254/24", "dev", &br])?;
        Ok(())
    }

    /// Node `i`: its namespace, its front and back links to the router with
    /// their next hops, and its link to the sync network.
    fn build_node(&self, i: usize) -> io::Result<()> {
        let p = &self.prefix;
        let r = self.router();
        let n = self.node(i);
        let (a, b) = self.node_ifaces(i);
        let (f, k) = (format!("{p}f{i}"), format!("{p}k{i}"));
        ip(&["netns", "add", &n])?;
        exec(&n, "ip", &["link", "set", "lo", "up"])?;
        ip(&[
            "link", "add", &f, "netns", &r, "type", "veth", "peer", "name", &a, "netns", &n,
        ])?;
        ip(&[
            "link", "add", &k, "netns", &r, "type", "veth", "peer", "name", &b, "netns", &n,
        ])?;
        for (ns, dev) in [(&r, &f), (&r, &k), (&n, &a), (&n, &b)] {
            quiet(ns, dev)?;
        }
        // a frame sent on f leaves a node by b unchanged: it must be
        // addressed to k, and the other way round; every node's front
        // links share one address and its back links another, so a frame
        // its secondary sends out for a node is accepted too
        exec(&r, "ip", &["link", "set", &f, "address", FRONT_MAC])?;
        exec(&r, "ip", &["link", "set", &k, "address", BACK_MAC])?;
        let (fmac, kmac) = (mac(&r, &f)?, mac(&r, &k)?);
        let (fgw, kgw) = Self::gateways(i);
        neighbour(&r, &fgw, &kmac, &f)?;
        neighbour(&r, &kgw, &fmac, &k)?;
        if self.routing == Routing::Bgp {
            // BGP's next hops must be on a network of the router's
            exec(
                &r,
                "ip",
                &["addr", "add", &format!("10.8.{i}.1/24"), "dev", &f],
            )?;
            exec(
                &r,
                "ip",
                &["addr", "add", &format!("10.9.{i}.1/24"), "dev", &k],
            )?;
        }
        let (fid, kid) = (
            (FRONT + 1 + i as u32).to_string(),
            (BACK + 1 + i as u32).to_string(),
        );
        exec(
            &r,
            "ip",
            &[
                "nexthop", "add", "id", &fid, "via", &fgw, "dev", &f, "onlink",
            ],
        )?;
        exec(
            &r,
            "ip",
            &[
                "nexthop", "add", "id", &kid, "via", &kgw, "dev", &k, "onlink",
            ],
        )?;
        // the sync network: the node's third link, on a bridge in the
        // router's namespace, for replication and heartbeats
        let (y, z) = (format!("{p}y{i}"), format!("{p}z{i}"));
        ip(&[
            "link", "add", &y, "netns", &n, "type", "veth", "peer", "name", &z, "netns", &r,
        ])?;
        exec(&r, "ip", &["link", "set", &z, "master", &format!("{p}br")])?;
        exec(&r, "ip", &["link", "set", &z, "up"])?;
        exec(&n, "ip", &["link", "set", &y, "up"])?;
        exec(
            &n,
            "ip",
            &[
                "addr",
                "add",
                &format!("{}/24", Self::sync_addr(i)),
                "dev",
                &y,
            ],
        )?;
        if self.routing == Routing::Bgp {
            return Ok(());
        }
        // the node's NAT pool comes back to it
        exec(
            &r,
            "ip",
            &[
                "route",
                "add",
                &Self::nat_pool(i),
                "nhid",
                &kid,
                "table",
                "20",
            ],
        )?;
        Ok(())
    }

    /// With BGP routing: the server answers at every virtual IP, and the
    /// router's clients' and server's traffic follows the BGP table.
    fn route_by_bgp(&self) -> io::Result<()> {
        let p = &self.prefix;
        let (r, s) = (self.router(), self.server());
        let (rc, rs, s0) = (format!("{p}rc"), format!("{p}rs"), format!("{p}s0"));
        // the server answers at every virtual IP
        let vips: String = (0..self.vips)
            .map(|t| format!("addr add {}/32 dev {s0}\n", Self::vip(t)))
            .collect();
        batch(&s, &vips)?;
        let t = BGP_TABLE.to_string();
        for iif in [&rc, &rs] {
            exec(&r, "ip", &["rule", "add", "iif", iif, "lookup", &t])?;
        }
        // what no node announces goes nowhere (not past the nodes by
        // the main table)
        exec(
            &r,
            "ip",
            &[
                "route",
                "add",
                "unreachable",
                "default",
                "table",
                &t,
                "metric",
                "4000",
            ],
        )
    }

    /// With the groups controller: the resilient nexthop groups carry the
    /// client's and the server's traffic.
    fn route_by_groups(&self) -> io::Result<()> {
        let p = &self.prefix;
        let r = self.router();
        let (rc, rs) = (format!("{p}rc"), format!("{p}rs"));
        self.groups("add", &(0..self.nodes).collect::<Vec<_>>())?;
        exec(&r, "ip", &["rule", "add", "iif", &rc, "lookup", "10"])?;
        exec(&r, "ip", &["rule", "add", "iif", &rs, "lookup", "20"])?;
        exec(
            &r,
            "ip",
            &[
                "route",
                "add",
                "198.51.100.0/24",
                "nhid",
                &FRONT.to_string(),
                "table",
                "10",
            ],
        )?;
        exec(
            &r,
            "ip",
            &[
                "route",
                "add",
                "10.0.0.0/24",
                "nhid",
                &BACK.to_string(),
                "table",
                "20",
            ],
        )?;
        Ok(())
    }

    /// Makes `nodes` the members of both groups (each with its weight).
    pub fn set_members(&self, nodes: &[usize]) -> io::Result<()> {
        self.groups("replace", nodes)
    }

    /// `ip nexthop VERB` of both resilient groups with `nodes` as members.
    fn groups(&self, verb: &str, nodes: &[usize]) -> io::Result<()> {
        // both groups by one `ip` process (a join waits for it)
        let batch: String = [FRONT, BACK]
            .iter()
            .map(|base| {
                let members: Vec<String> = nodes
                    .iter()
                    .map(|&n| {
                        let id = base + 1 + n as u32;
                        match self.weights.get(n) {
                            Some(&w) if w > 1 => format!("{id},{w}"),
                            _ => id.to_string(),
                        }
                    })
                    .collect();
                format!(
                    "nexthop {verb} id {base} group {} type resilient buckets {} idle_timer 0\n",
                    members.join("/"),
                    self.buckets
                )
            })
            .collect();
        self.batch(&batch)
            .map_err(|e| io::Error::other(format!("setting the groups' members: {e}")))
    }

    /// Runs `commands` by one `ip -batch` in the router's namespace.
    fn batch(&self, commands: &str) -> io::Result<()> {
        batch(&self.router(), commands)
    }

    /// Sends node `from`'s traffic to node `to` instead, bucket for bucket:
    /// `from`'s member nexthops are re-pointed at `to`'s links, so every
    /// bucket of `from` — and only those — now reaches `to` (its secondary,
    /// which holds the state of its flows), in both directions at once.
    pub fn redirect(&self, from: usize, to: usize) -> io::Result<()> {
        let p = &self.prefix;
        // both rewrites by one `ip` process (a failover waits for it)
        let batch: String = [(FRONT, "f", "10.8"), (BACK, "k", "10.9")]
            .iter()
            .map(|(base, side, gw)| {
                format!(
                    "nexthop replace id {} via {gw}.{to}.2 dev {p}{side}{to} onlink\n",
                    base + 1 + from as u32
                )
            })
            .collect();
        self.batch(&batch)
            .map_err(|e| io::Error::other(format!("redirecting node {from} to {to}: {e}")))
    }

    /// The node of every bucket of each group (front, back), read back from
    /// the kernel.
    pub fn bucket_nodes(&self) -> io::Result<(Vec<usize>, Vec<usize>)> {
        Ok((self.group_buckets(FRONT)?, self.group_buckets(BACK)?))
    }

    fn group_buckets(&self, base: u32) -> io::Result<Vec<usize>> {
        let out = std::process::Command::new("ip")
            .args([
                "-n",
                &self.router(),
                "nexthop",
                "bucket",
                "show",
                "id",
                &base.to_string(),
            ])
            .output()?;
        if !out.status.success() {
            return Err(io::Error::other(
                String::from_utf8_lossy(&out.stderr).into_owned(),
            ));
        }
        let mut v = vec![usize::MAX; self.buckets];
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let w: Vec<&str> = line.split_whitespace().collect();
            let field = |name: &str| {
                w.iter()
                    .position(|x| *x == name)
                    .and_then(|i| w.get(i + 1))
                    .and_then(|x| x.parse::<usize>().ok())
            };
            if let (Some(i), Some(nh)) = (field("index"), field("nhid")) {
                if i < v.len() {
                    v[i] = nh - (base as usize + 1);
                }
            }
        }
        Ok(v)
    }

    /// Moves node `from`'s NAT pool route to node `to` (its replies go there).
    pub fn move_nat_pool(&self, from: usize, to: usize) -> io::Result<()> {
        exec(
            &self.router(),
            "ip",
            &[
                "route",
                "replace",
                &Self::nat_pool(from),
                "nhid",
                &(BACK + 1 + to as u32).to_string(),
                "table",
                "20",
            ],
        )
    }

    /// Leaves the bed up after this value is gone (`scripts/pool.sh up`).
    pub fn keep(self) {
        std::mem::forget(self);
    }

    /// Deletes the bed of `nodes` nodes with names starting with `prefix`.
    pub fn down(prefix: &str, nodes: usize) {
        PoolBed {
            prefix: prefix.to_string(),
            nodes,
            buckets: 0,
            weights: Vec::new(),
            routing: Routing::Groups,
            vips: 0,
        }
        .remove();
    }

    fn remove(&self) {
        let mut names = vec![self.client(), self.router(), self.server()];
        names.extend((0..self.nodes).map(|i| self.node(i)));
        for ns in names {
            // what still runs there (a routing daemon, a node) goes first: a
            // namespace deleted under it would live on with it
            crate::netns::kill_all(&ns);
            let _ = ip(&["netns", "del", &ns]);
        }
    }
}

impl Drop for PoolBed {
    fn drop(&mut self) {
        self.remove();
    }
}

/// Runs `commands` by one `ip -batch` in namespace `ns`.
fn batch(ns: &str, commands: &str) -> io::Result<()> {
    let mut child = std::process::Command::new("ip")
        .args(["-n", ns, "-batch", "-"])
        .stdin(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()?;
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().expect("piped");
        stdin.write_all(commands.as_bytes())?;
    }
    let out = child.wait_with_output()?;
    if !out.status.success() {
        return Err(io::Error::other(
            String::from_utf8_lossy(&out.stderr).trim().to_string(),
        ));
    }
    Ok(())
}
