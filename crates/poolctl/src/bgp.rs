//! `flowshift pool run --routing bgp`: the pool as Sirius runs it (§3.2), its
//! failover in the nodes and the router, not in a controller. The bed's
//! router runs BIRD (started detached: it outlives this process); every node
//! runs its own (`[pool.bgp]`, dying with the node) and announces its virtual
//! IP and NAT pool as their primary, and its predecessor's as their backup
//! (a longer AS path), once it forwards. The router's best routes go to its
//! kernel. When a node dies, its BIRD dies with it and the router's session
//! closes (or BFD times out), the backup routes are the best left, and the
//! node's secondary — which holds the state of its flows — gets its traffic.
//!
//! This controller only provisions (the bed, the keys, the configs, the
//! nodes) and watches: it reports every session's changes as the router saw
//! them, and a `kill -9` of it stops nothing that runs.

use crate::layout::{adoptable, announcements, place, splits, Layout, Placed};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use netio::bird::{Control, Daemon, Tie};
use netio::poolbed::{PoolBed, BGP_TABLE, ROUTER_SYNC};
use pool::bgp::{node_asn, Bfd, Peer, Router};
use serde::Serialize;

use crate::args::RunArgs;
use crate::nodes::{node_config, start_node, sync, write_pool_key, Nodes};
use launch::file::{NodeFile, SpillSection};

/// Pair heartbeats' timeout: a node whose secondary is silent this long
/// sends its packets out unprotected. Live nodes were silent for up to 91 ms
/// on this loaded 2-CPU machine (`pool run`'s longest silence, with
/// downloads and two busy loops beside); a false loss costs protection, not
/// packets.
const PAIR_TIMEOUT_MS: u32 = 150;

/// A change of a router's session with a node, ms since the nodes were started.
#[derive(Clone, Debug, Serialize)]
pub struct SessionChange {
    pub node: usize,
    pub at_ms: f64,
    /// `up` (established) or `down`.
    pub to: &'static str,
    /// BIRD's words for it (`Established`, `Active … Socket: Connection
    /// closed`, `… BFD session down`).
    pub info: String,
}

/// The pool's report on BGP.
#[derive(Debug, Serialize)]
pub struct BgpReport {
    pub nodes: usize,
    pub bfd: Bfd,
    /// What the router saw, in order.
    pub sessions: Vec<SessionChange>,
    /// The tenants (`--plan`) and where they were placed.
    pub tenants: Vec<Placed>,
    /// The pool's re-pairings after failures, and the bulk syncs they
    /// ordered.
    pub repairs: Vec<crate::repair::RePair>,
    pub syncs: Vec<crate::repair::Synced>,
    /// Each node's run report (`null` for a node that did not end with one:
    /// killed).
    pub node_reports: Vec<serde_json::Value>,
}

/// The router's speaker for `bed`.
fn router(bed: &PoolBed, bfd: Bfd) -> Router {
    let ip = |s: String| s.parse().expect("the bed's addresses parse");
    Router {
        local: ip(ROUTER_SYNC.into()),
        iface: bed.sync_bridge(),
        bfd,
        table: BGP_TABLE,
        nodes: (0..bed.nodes)
            .map(|i| {
                let (front, back) = PoolBed::gateways(i);
                Peer {
                    addr: ip(PoolBed::sync_addr(i)),
                    asn: node_asn(i),
                    front: ip(front),
                    back: ip(back),
                }
            })
            .collect(),
    }
}

/// Node `i`'s config: `node_config`'s, and its speaker.
fn config(
    a: &RunArgs,
    bed: &PoolBed,
    i: usize,
    key: &Path,
    bfd: Bfd,
    layout: &Layout,
) -> anyhow::Result<NodeFile> {
    let mut f = node_config(a.config.as_deref(), i, bed.nodes, true, Some(key))?;
    let pool = f.pool.as_mut().expect("node_config writes [pool]");
    pool.bgp = Some(pool::bgp::Node {
        local: PoolBed::sync_addr(i).parse()?,
        asn: node_asn(i),
        peer: ROUTER_SYNC.parse()?,
        peer_asn: pool::bgp::ROUTER_ASN,
        iface: bed.sync_iface(i),
        bfd,
        announce: announcements(i, layout),
        adopt: adoptable(i, layout),
    });
    // with no controller to re-ring it, a node finds a lost secondary itself,
    // and a lost primary
    pool.pair_timeout_ms = Some(PAIR_TIMEOUT_MS);
    pool.primary = Some(sync((i + bed.nodes - 1) % bed.nodes));
    if let Some(capacity) = a.spill_capacity {
        let vips: Vec<std::net::IpAddr> = layout.vips[i]
            .iter()
            .filter(|t| !layout.parts.contains_key(t))
            .map(|&t| PoolBed::vip(t).parse().expect("an address"))
            .collect();
        if !vips.is_empty() {
            pool.spill = Some(SpillSection {
                // the node two ahead is in another pair (i and i + 1 are one)
                to: sync((i + 2) % bed.nodes),
                vips,
                capacity,
                linger_ms: Some(a.spill_linger_ms),
            });
        }
    }
    pool.split = splits(i, layout);
    Ok(f)
}

pub fn run(a: &RunArgs, duration: Option<Duration>) -> anyhow::Result<()> {
    if a.spares > 0 || a.weights.is_some() {
        bail!("--routing bgp: --spares and --weights are for --routing groups");
    }
    if a.spill_capacity.is_some() && a.nodes < 4 {
        bail!("--spill-capacity: spilling goes to another pair, which takes 4 nodes or more");
    }
    let bfd = Bfd {
        interval_ms: a.bfd_interval_ms,
        multiplier: a.bfd_multiplier,
    };
    bfd.check().map_err(|e| anyhow::anyhow!("--{e}"))?;
    if netio::bird::program().is_none() {
        bail!("--routing bgp runs BIRD 2 on the router and every node: install it (apt install bird2)");
    }
    std::fs::create_dir_all(&a.out).with_context(|| a.out.display().to_string())?;
    let out = std::fs::canonicalize(&a.out)?;
    let (layout, tenants) = tenants(a)?;
    let stop = launch::run::stop_on_signals()?;
    let (bed, mut nodes, ctl, key) = provision(a, &out, bfd, &layout, tenants.len())?;
    let t0 = Instant::now();
    let mut seen = Sessions::new(&ctl, a.nodes, t0)?;
    let mut repair = crate::repair::Repair::new(&bed, &key, &layout, out.clone(), t0)?;
    let mut up_at: Option<Instant> = None;
    while !stop.0.load(Ordering::Relaxed) {
        if let (Some(u), Some(d)) = (up_at, duration) {
            if u.elapsed() >= d {
                break;
            }
        }
        if up_at.is_none() && t0.elapsed() > Duration::from_secs(30) {
            bail!(
                "the nodes' BGP sessions were not all established within 30 s (see {}/*.log)",
                out.display()
            );
        }
        let was = seen.up.clone();
        seen.look(up_at.is_some())?;
        if up_at.is_some() {
            // a node gone: the pool re-pairs without it
            for i in (0..a.nodes).filter(|&i| was[i] && !seen.up[i]) {
                repair.down(i);
            }
            repair.tick();
        }
        if up_at.is_none() && seen.all_up(&layout) {
            up_at = Some(Instant::now());
            for t in &tenants {
                let split = match &t.parts[..] {
                    [] => String::new(),
                    p => format!(", split over nodes {p:?}"),
                };
                println!(
                    "flowshift pool: {} at {}: node {}, backed up by node {}{split}",
                    t.tenant, t.vip, t.node, t.backup
                );
            }
            println!(
                "flowshift pool: {} nodes up, every BGP session established (BFD {} ms × {}); \
                 the server answers at the virtual IPs above from the client namespace `{}`; \
                 Ctrl-C to stop",
                a.nodes,
                bfd.interval_ms,
                bfd.multiplier,
                bed.client()
            );
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let report = BgpReport {
        nodes: a.nodes,
        bfd,
        sessions: seen.changes,
        tenants,
        repairs: repair.repairs,
        syncs: repair.syncs,
        node_reports: stop_nodes(&mut nodes, &out),
    };
    print_report(&report);
    if let Some(p) = &a.json {
        launch::output::json(p, &report)?;
    }
    drop(bed);
    Ok(())
}

/// The virtual IPs each node serves, and the tenants (`--plan`, or one per
/// node) in the order of their virtual IPs.
fn tenants(a: &RunArgs) -> anyhow::Result<(Layout, Vec<Placed>)> {
    let (layout, names) = match &a.plan {
        Some(p) => place(p, a.nodes)?,
        None => (
            Layout {
                vips: (0..a.nodes).map(|i| vec![i]).collect(),
                parts: Default::default(),
            },
            (0..a.nodes).map(|i| format!("node{i}")).collect(),
        ),
    };
    let mut tenants: Vec<(usize, Placed)> = layout
        .vips
        .iter()
        .enumerate()
        .flat_map(|(i, ts)| ts.iter().map(move |&t| (i, t)))
        .map(|(i, t)| {
            let p = Placed {
                tenant: names[t].clone(),
                vip: PoolBed::vip(t),
                node: i,
                backup: (i + 1) % a.nodes,
                parts: layout.parts.get(&t).cloned().unwrap_or_default(),
            };
            (t, p)
        })
        .collect();
    tenants.sort_by_key(|(t, _)| *t);
    Ok((layout, tenants.into_iter().map(|(_, p)| p).collect()))
}

/// Builds the bed, writes the nodes' configs, starts the router's BIRD
/// (detached: it outlives this controller; the bed's removal ends it) and
/// the nodes: the bed, the nodes, the router's control socket.
fn provision(
    a: &RunArgs,
    out: &Path,
    bfd: Bfd,
    layout: &Layout,
    n_vips: usize,
) -> anyhow::Result<(PoolBed, Nodes, PathBuf, pool::auth::Key)> {
    let (key_file, key) = write_pool_key(out)?;
    let bed = PoolBed::up_bgp(&a.prefix, a.nodes, n_vips)
        .context("building the pool bed (needs root: network namespaces)")?;
    for i in 0..a.nodes {
        config(a, &bed, i, &key_file, bfd, layout)?.write(&out.join(format!("node{i}.toml")))?;
        for old in ["json", "log", "bird.log"] {
            let _ = std::fs::remove_file(out.join(format!("node{i}.{old}")));
        }
    }
    let conf = out.join("router.bird.conf");
    std::fs::write(&conf, router(&bed, bfd).bird_config())?;
    netio::bird::check(&conf)?;
    let ctl = out.join("router.bird.ctl");
    Daemon::start(
        &conf,
        &ctl,
        &out.join("router.bird.log"),
        Some(&bed.router()),
        Tie::Detached,
    )
    .context("starting the router's BIRD")?
    .detach();
    let mut nodes = Nodes(Vec::new());
    for i in 0..a.nodes {
        nodes.0.push(Some(start_node(&bed, out, a.workers, i)?));
    }
    Ok((bed, nodes, ctl, key))
}

/// The router's sessions as this controller sees them.
struct Sessions {
    c: Control,
    up: Vec<bool>,
    t0: Instant,
    changes: Vec<SessionChange>,
}

impl Sessions {
    fn new(ctl: &Path, nodes: usize, t0: Instant) -> anyhow::Result<Sessions> {
        Ok(Sessions {
            c: Control::connect(ctl)?,
            up: vec![false; nodes],
            t0,
            changes: Vec::new(),
        })
    }

    /// Notes every session that came up or went down since the last look
    /// (and says so, `loud`).
    fn look(&mut self, loud: bool) -> anyhow::Result<()> {
        let now = Instant::now();
        for p in self.c.protocols()? {
            let Some(i) = p
                .name
                .strip_prefix("node")
                .and_then(|n| n.parse::<usize>().ok())
                .filter(|&i| i < self.up.len())
            else {
                continue;
            };
            if p.established() != self.up[i] {
                self.up[i] = !self.up[i];
                let to = if self.up[i] { "up" } else { "down" };
                if loud {
                    println!("flowshift pool: node {i}'s session {to} ({})", p.info);
                }
                self.changes.push(SessionChange {
                    node: i,
                    at_ms: (now - self.t0).as_secs_f64() * 1e3,
                    to,
                    info: p.info,
                });
            }
        }
        Ok(())
    }

    /// True once every session is established and every node's routes —
    /// its own virtual IPs and NAT pool, and its predecessor's — are in the
    /// router's table.
    fn all_up(&mut self, layout: &Layout) -> bool {
        let n = self.up.len();
        if !self.up.iter().all(|&u| u) {
            return false;
        }
        for i in 0..n {
            let want = announcements(i, layout).len();
            // (an answer BIRD cannot give yet: not up yet)
            if self.c.routes_from(&pool::bgp::session(i)).unwrap_or(0) < want {
                return false;
            }
        }
        true
    }
}

/// Drains every node (Ctrl-C) and waits for it: their reports (`null` for
/// one that ended without: killed).
fn stop_nodes(nodes: &mut Nodes, out: &Path) -> Vec<serde_json::Value> {
    let mut reports = Vec::new();
    for (i, (st, r)) in nodes.stop(out).into_iter().enumerate() {
        if r.is_null() {
            eprintln!("flowshift pool: node {i} ended ({st}) without a report (see its log)");
        }
        reports.push(r);
    }
    reports
}

fn print_report(report: &BgpReport) {
    crate::nodes::print_nodes(&report.node_reports);
    let lost = |k: &str| {
        report
            .node_reports
            .iter()
            .map(|n| n["pool"][k].as_u64().unwrap_or(0).to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    println!(
        "pair heartbeats: secondary found silent per node: {}; primary found silent: {}",
        lost("secondary_lost"),
        lost("primary_lost")
    );
    println!("the router's sessions (ms since the nodes were started):");
    for s in &report.sessions {
        println!(
            "{:>10.1} ms  node {}  session {:<4}  {}",
            s.at_ms, s.node, s.to, s.info
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pool::bgp::{Announce, Role};

    /// Four nodes; tenant 0 split over nodes 0 and 2, tenants 1–3 one a node.
    fn layout() -> Layout {
        Layout {
            vips: vec![vec![0], vec![1], vec![2], vec![3]],
            parts: [(0, vec![0, 2])].into_iter().collect(),
        }
    }

    #[test]
    fn a_split_tenant_is_announced_by_its_pair_and_its_other_parts_nodes() {
        let l = layout();
        let vip0 = |a: &Announce| a.prefix.to_string() == format!("{}/32", PoolBed::vip(0));
        let role = |i| {
            announcements(i, &l)
                .into_iter()
                .filter(vip0)
                .map(|a| a.role)
                .collect::<Vec<_>>()
        };
        assert_eq!(role(0), vec![Role::Primary]);
        assert_eq!(role(1), vec![Role::Backup]);
        assert_eq!(role(2), vec![Role::Part]);
        assert_eq!(role(3), vec![]);
        // every node's speaker takes its announcements (none twice)
        for i in 0..4 {
            let n = pool::bgp::Node {
                local: PoolBed::sync_addr(i).parse().unwrap(),
                asn: node_asn(i),
                peer: ROUTER_SYNC.parse().unwrap(),
                peer_asn: pool::bgp::ROUTER_ASN,
                iface: "x".into(),
                bfd: Bfd::default(),
                announce: announcements(i, &l),
                adopt: adoptable(i, &l),
            };
            n.check().unwrap();
            // every other node's prefixes but its primary's are adoptable
            assert_eq!(n.adopt.len(), 2);
        }
    }

    #[test]
    fn the_first_part_and_its_backup_steer_the_other_parts_and_a_part_node_does_not() {
        let l = layout();
        let parts = |i| {
            splits(i, &l)
                .into_iter()
                .map(|v| (v.local, v.parts))
                .collect::<Vec<_>>()
        };
        let both = vec![sync(0), sync(2)];
        assert_eq!(parts(0), vec![(0, both.clone())]);
        assert_eq!(parts(1), vec![(0, both)], "its backup, once promoted");
        assert!(parts(2).is_empty(), "a part's node serves what it is sent");
        assert!(parts(3).is_empty());
        // a backup that also serves a part holds both parts' state: no split
        let mut l = l;
        l.parts.insert(0, vec![0, 1]);
        assert!(splits(1, &l).is_empty());
    }
}
