//! `flowshift pool run`: a Sirius pool on this machine. It builds the pool
//! bed (`netio::poolbed`: client — router — N nodes — server, in network
//! namespaces), starts one `flowshift run` per node with the chain and
//! ping-pong replication to the next node (`[pool]`), and is the pool's
//! controller: a heartbeat to every node each period (`pool::detect`), and
//! for a node that misses them, failover as `pool::ring` says — its buckets
//! and NAT pool to its secondary (`PoolBed::redirect`), and its predecessor
//! told to replicate to that secondary from then on. Runs until Ctrl-C or
//! `--duration`, then stops the nodes and prints the pool's report.

use std::io::Write;
use std::net::{SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Args;
use netio::poolbed::{PoolBed, SYNC_PORT};
use pool::detect::Detector;
use pool::ring::Ring;
use serde::Serialize;

/// Options of `flowshift pool run`.
#[derive(Args, Debug)]
pub struct RunArgs {
    /// Nodes in the pool (each the secondary of the one before it).
    #[arg(long, default_value_t = 3)]
    pub nodes: usize,
    /// The chain every node runs (`[[nf]]` tables; each NAT's `external` is
    /// replaced by the node's own pool, 203.0.113.16·i/28) [default: a
    /// firewall admitting 10.0.0.0/8 outbound, then a NAT].
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Working cores per node.
    #[arg(long, default_value_t = 1)]
    pub workers: usize,
    /// Buckets of the router's resilient nexthop groups.
    #[arg(long, default_value_t = 64)]
    pub buckets: usize,
    /// Heartbeat period, µs; a node that misses `--missed` in a row is down.
    #[arg(long, default_value_t = 1000)]
    pub heartbeat_us: u64,
    /// Heartbeats a node may miss. Few find a dead node fast (Sirius: ≈ 5 ms)
    /// but take a busy one for dead on a machine whose CPUs the nodes share,
    /// and a live node failed over takes the flows it had adopted with it.
    #[arg(long, default_value_t = 10)]
    pub missed: u32,
    /// Namespace and interface prefix (at most 6 characters).
    #[arg(long, default_value = "fsp")]
    pub prefix: String,
    /// Where the nodes' configs, logs and reports go.
    #[arg(long, default_value = "out/pool")]
    pub out: PathBuf,
    /// Stop after this long (e.g. 30s) instead of at Ctrl-C.
    #[arg(long)]
    pub duration: Option<String>,
    /// Write the pool's report as JSON.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// A failover, ms since the pool was up.
#[derive(Clone, Debug, Serialize)]
pub struct Failover {
    pub node: usize,
    /// Its last answer.
    pub last_seen_ms: f64,
    /// Found down.
    pub detected_ms: f64,
    /// Its buckets and NAT pool reach its secondary.
    pub redirected_ms: f64,
    /// Its predecessor replicates to its secondary.
    pub re_ringed_ms: f64,
    /// The node that took its flows.
    pub heir: usize,
}

/// The pool's report.
#[derive(Debug, Serialize)]
pub struct PoolReport {
    pub nodes: usize,
    /// Each node's run report (`null` for a node that was killed).
    pub node_reports: Vec<serde_json::Value>,
    pub failovers: Vec<Failover>,
}

fn sync(i: usize) -> SocketAddr {
    SocketAddr::new(
        PoolBed::sync_addr(i).parse().expect("an address"),
        SYNC_PORT,
    )
}

/// Node `i`'s config: the chain with its NAT pool, replicating to node i + 1
/// (with `replicate`).
pub(crate) fn node_config(
    chain: Option<&Path>,
    i: usize,
    nodes: usize,
    replicate: bool,
) -> anyhow::Result<String> {
    let mut t: toml::Table = match chain {
        Some(p) => {
            let text =
                std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
            toml::from_str(&text).with_context(|| p.display().to_string())?
        }
        None => toml::from_str(
            "[[nf]]\nkind = \"firewall\"\nrules = \"allow any 10.0.0.0/8 -> any\"\n\
             [[nf]]\nkind = \"nat\"\ninternal = \"10.0.0.0/8\"\nexternal = []\n",
        )
        .expect("the default chain parses"),
    };
    for k in ["io", "pool"] {
        if t.remove(k).is_some() {
            eprintln!("flowshift pool: the chain's [{k}] table is the pool's to set: ignored");
        }
    }
    if let Some(toml::Value::Array(nfs)) = t.get_mut("nf") {
        for nf in nfs {
            if let Some(nf) = nf.as_table_mut() {
                if nf.get("kind").and_then(toml::Value::as_str) == Some("nat") {
                    nf.insert(
                        "external".into(),
                        toml::Value::Array(vec![PoolBed::nat_pool(i).into()]),
                    );
                }
            }
        }
    }
    if replicate {
        let mut pool = toml::Table::new();
        pool.insert("listen".into(), sync(i).to_string().into());
        pool.insert("secondary".into(), sync((i + 1) % nodes).to_string().into());
        t.insert("pool".into(), toml::Value::Table(pool));
    }
    Ok(toml::to_string(&t)?)
}

/// Starts node `i` with `workers` working cores, its config, log and report
/// `node{i}.toml`, `.log`, `.json` in `dir`.
pub(crate) fn start_node(
    bed: &PoolBed,
    dir: &Path,
    workers: usize,
    i: usize,
) -> anyhow::Result<Child> {
    let (f, b) = bed.node_ifaces(i);
    let log = std::fs::File::create(dir.join(format!("node{i}.log")))?;
    use std::os::unix::process::CommandExt;
    Command::new("ip")
        .args(["netns", "exec", &bed.node(i)])
        .arg(std::env::current_exe()?)
        .args(["run", "--iface", &format!("{f},{b}")])
        .args(["--workers", &workers.to_string()])
        .arg("--config")
        .arg(dir.join(format!("node{i}.toml")))
        .arg("--json")
        .arg(dir.join(format!("node{i}.json")))
        .stdout(Stdio::null())
        .stderr(log)
        // a group of its own: a terminal's Ctrl-C reaches the controller,
        // which stops each node once (a second SIGINT ends a run at once)
        .process_group(0)
        .spawn()
        .with_context(|| format!("starting node {i}"))
}

/// The nodes' processes: on an early return, killed (their bed goes too).
struct Nodes(Vec<Option<Child>>);

impl Drop for Nodes {
    fn drop(&mut self) {
        for c in self.0.iter_mut().flatten() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Sends `what` to node `i` until it answers (or `tries` are spent).
fn order(sock: &UdpSocket, i: usize, what: &[u8], tries: u32) -> bool {
    let mut buf = [0u8; 16];
    for _ in 0..tries {
        let _ = sock.send_to(what, sync(i));
        let until = Instant::now() + Duration::from_millis(5);
        while Instant::now() < until {
            if let Ok((n, from)) = sock.recv_from(&mut buf) {
                if from == sync(i) && &buf[..n] == runtime::ALIVE {
                    return true;
                }
            } else {
                std::thread::sleep(Duration::from_micros(100));
            }
        }
    }
    false
}

pub fn run(a: RunArgs) -> anyhow::Result<()> {
    if !(2..=16).contains(&a.nodes) {
        bail!(
            "--nodes {}: a pool replicates across 2 to 16 nodes",
            a.nodes
        );
    }
    if a.prefix.is_empty() || a.prefix.len() > 6 {
        bail!("--prefix `{}`: 1 to 6 characters", a.prefix);
    }
    if a.workers == 0 || a.heartbeat_us == 0 {
        bail!("--workers and --heartbeat-us must be at least 1");
    }
    let duration = a
        .duration
        .as_deref()
        .map(|d| humantime::parse_duration(d).with_context(|| format!("--duration {d}")))
        .transpose()?;
    std::fs::create_dir_all(&a.out).with_context(|| a.out.display().to_string())?;
    for i in 0..a.nodes {
        let text = node_config(a.config.as_deref(), i, a.nodes, true)?;
        std::fs::write(a.out.join(format!("node{i}.toml")), text)?;
        let _ = std::fs::remove_file(a.out.join(format!("node{i}.json")));
    }
    // a config the nodes would refuse fails here, before the bed is built
    crate::run::load(Some(&a.out.join("node0.toml")))?;
    let stop = crate::run::stop_on_signals()?;
    let bed = PoolBed::up(&a.prefix, a.nodes, a.buckets)
        .context("building the pool bed (needs root: network namespaces)")?;
    let mut nodes = Nodes(Vec::new());
    for i in 0..a.nodes {
        nodes.0.push(Some(start_node(&bed, &a.out, a.workers, i)?));
    }
    // the controller lives on the sync network, in the router's namespace
    let router = bed.router();
    let sock = std::thread::scope(|s| {
        s.spawn(|| -> anyhow::Result<UdpSocket> {
            netio::netns::enter(&router)?;
            let sock = UdpSocket::bind(("10.77.0.254", 0))?;
            sock.set_nonblocking(true)?;
            Ok(sock)
        })
        .join()
        .expect("binding thread")
    })?;
    let period = Duration::from_micros(a.heartbeat_us);
    let mut det = Detector::new(a.nodes, period.as_nanos() as u64, a.missed);
    let mut ring = Ring::new(&(0..a.nodes as u16).collect::<Vec<_>>(), a.buckets);
    // which node's links each node's buckets point at now
    let mut carrier: Vec<usize> = (0..a.nodes).collect();
    let mut failovers = Vec::new();
    let t0 = Instant::now();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let mut up_at: Option<Instant> = None;
    let mut next_status = Instant::now();
    let mut buf = [0u8; 16];
    while !stop.0.load(Ordering::Relaxed) {
        let now = t0.elapsed();
        if up_at.is_none() && now > Duration::from_secs(30) {
            bail!(
                "the nodes did not answer within 30 s (see {}/node*.log)",
                a.out.display()
            );
        }
        if let (Some(u), Some(d)) = (up_at, duration) {
            if u.elapsed() >= d {
                break;
            }
        }
        for i in 0..a.nodes {
            if !det.is_down(i as u16) {
                let _ = sock.send_to(runtime::HEARTBEAT, sync(i));
            }
        }
        let until = Instant::now() + period;
        while Instant::now() < until {
            match sock.recv_from(&mut buf) {
                Ok((n, from)) if &buf[..n] == runtime::ALIVE => {
                    if let Some(i) = (0..a.nodes).find(|i| sync(*i) == from) {
                        det.alive(i as u16, t0.elapsed().as_nanos() as u64);
                    }
                }
                _ => std::thread::sleep(Duration::from_micros(50)),
            }
        }
        if up_at.is_none() && det.all_up() {
            up_at = Some(Instant::now());
            println!(
                "flowshift pool: {} nodes up; traffic from the client namespace `{}` \
                 (10.0.0.2) to the server `{}` (198.51.100.2); Ctrl-C to stop",
                a.nodes,
                bed.client(),
                bed.server()
            );
            let _ = std::io::stdout().flush();
        }
        for dead in det.check(t0.elapsed().as_nanos() as u64) {
            let detected = t0.elapsed();
            let d = usize::from(dead);
            let pairings = ring.fail(dead);
            let Some(heir) = pairings.iter().find(|p| p.adopt.contains(&dead)) else {
                eprintln!("flowshift pool: node {d} is down and no node is left to take over");
                continue;
            };
            let heir = usize::from(heir.node);
            for (n, c) in carrier.iter_mut().enumerate() {
                if *c == d {
                    bed.redirect(n, heir)
                        .with_context(|| format!("redirecting node {n} to {heir}"))?;
                    *c = heir;
                }
            }
            let redirected = t0.elapsed();
            for p in pairings.iter().filter(|p| usize::from(p.node) != heir) {
                if let Some(s) = p.secondary {
                    let mut o = runtime::NEW_SECONDARY.to_vec();
                    o.extend_from_slice(sync(usize::from(s)).to_string().as_bytes());
                    if !order(&sock, usize::from(p.node), &o, 20) {
                        eprintln!(
                            "flowshift pool: node {} did not take its new secondary",
                            p.node
                        );
                    }
                }
            }
            let f = Failover {
                node: d,
                last_seen_ms: det.last(dead).map_or(0.0, |t| t as f64 / 1e6),
                detected_ms: ms(detected),
                redirected_ms: ms(redirected),
                re_ringed_ms: ms(t0.elapsed()),
                heir,
            };
            println!(
                "flowshift pool: node {d} down (last answer at {:.1} ms): found after {:.1} ms, \
                 its buckets at node {heir} after {:.1} ms, re-ringed after {:.1} ms",
                f.last_seen_ms,
                f.detected_ms - f.last_seen_ms,
                f.redirected_ms - f.last_seen_ms,
                f.re_ringed_ms - f.last_seen_ms
            );
            let _ = std::io::stdout().flush();
            failovers.push(f);
        }
        if up_at.is_some() && Instant::now() >= next_status {
            next_status = Instant::now() + Duration::from_secs(1);
            let live: Vec<String> = (0..a.nodes)
                .map(|i| format!("n{i} {}", if det.is_down(i as u16) { "down" } else { "up" }))
                .collect();
            eprint!(
                "\r{:8.1} s  {}  failovers {}   ",
                ms(t0.elapsed()) / 1e3,
                live.join("  "),
                failovers.len()
            );
        }
    }
    eprintln!();
    // the nodes end with their reports
    for c in nodes.0.iter().flatten() {
        let _ = Command::new("kill")
            .args(["-INT", &c.id().to_string()])
            .status();
    }
    let mut reports = Vec::new();
    for i in 0..a.nodes {
        let mut c = nodes.0[i].take().expect("every node was started");
        let st = c.wait()?;
        let path = a.out.join(format!("node{i}.json"));
        let r = std::fs::read_to_string(&path)
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or(serde_json::Value::Null);
        if r.is_null() && !det.is_down(i as u16) {
            eprintln!("flowshift pool: node {i} ended ({st}) without a report (see its log)");
        }
        reports.push(r);
    }
    let report = PoolReport {
        nodes: a.nodes,
        node_reports: reports,
        failovers,
    };
    print_report(&report);
    if let Some(p) = &a.json {
        crate::output::json(p, &report)?;
    }
    drop(bed);
    Ok(())
}

fn print_report(r: &PoolReport) {
    println!("node  packets in  out        replicated  installed  unprotected  drops");
    for (i, n) in r.node_reports.iter().enumerate() {
        if n.is_null() {
            println!("{i:<5} (down: no report)");
            continue;
        }
        let drops: u64 = n["drops"]
            .as_object()
            .map(|d| d.values().filter_map(|v| v.as_u64()).sum())
            .unwrap_or(0);
        let p = &n["pool"];
        println!(
            "{i:<5} {:<11} {:<10} {:<11} {:<10} {:<12} {}",
            n["packets_in"],
            n["packets_out"],
            p["replicated"],
            p["installed"],
            p["unprotected"],
            drops
        );
    }
    for f in &r.failovers {
        println!(
            "failover: node {} → node {}: found {:.1} ms after its last answer, \
             traffic at node {} after {:.1} ms",
            f.node,
            f.heir,
            f.detected_ms - f.last_seen_ms,
            f.heir,
            f.redirected_ms - f.last_seen_ms
        );
    }
}
