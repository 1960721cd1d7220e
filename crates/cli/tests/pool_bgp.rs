//! `flowshift pool run --routing bgp`: pairs that fail over by themselves,
//! through BGP routes the nodes announce to the router's BIRD, with no
//! controller. Node i announces its virtual IP 198.51.100.(10 + i) and its
//! NAT pool as their primary and node i − 1's as their backup (a longer AS
//! path); it replicates its flows' state to node i + 1.
//!
//! The first test runs 200 long downloads, spread over the virtual IPs of
//! four FW → NAT nodes, then: kills the controller (`kill -9`), kills node 0's
//! flowshift (`kill -9`; its BIRD dies with it), and drains node 2 (Ctrl-C: it
//! withdraws its routes, forwards a moment longer and stops). Every download
//! must go on byte-exact; the router's route changes are timed from the kill
//! with `ip monitor`, and the routes of the nodes that live never move (no
//! false failover). The second takes a node's front link down (the node
//! withdraws) and freezes another, its BIRD too (only BFD finds it): their
//! secondaries take the traffic.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant, SystemTime};

use netio::netns;
use netio::poolbed::PoolBed;

mod common;

const PORT: u16 = 7200;
/// Each download runs until its test says stop, CHUNK bytes every PACE.
const CHUNK: usize = 4_000;
const PACE: Duration = Duration::from_millis(16);

fn tmp(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name)
}

fn pattern(seed: u16, i: usize) -> u8 {
    (i as u32 * 13 + u32::from(seed)) as u8
}

/// The bed's namespaces and everything in them: removed on drop.
struct Pool {
    prefix: &'static str,
    nodes: usize,
    controller: Option<Child>,
    /// What the controller printed after the pool came up.
    later: Arc<Mutex<Vec<String>>>,
}

impl Pool {
    /// Waits up to `limit` for the controller to print a line containing
    /// `what`: the line.
    fn wait_for(&self, what: &str, limit: Duration) -> Option<String> {
        let t = Instant::now();
        while t.elapsed() < limit {
            if let Some(l) = self.later.lock().unwrap().iter().find(|l| l.contains(what)) {
                return Some(l.clone());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        None
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        if let Some(c) = &mut self.controller {
            let _ = c.kill();
            let _ = c.wait();
        }
        PoolBed::down(self.prefix, self.nodes);
    }
}

/// The pid of node `i`'s flowshift (not its BIRD).
fn node_pid(prefix: &str, i: usize) -> u32 {
    let out = Command::new("ip")
        .args(["netns", "pids", &format!("{prefix}-n{i}")])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .filter_map(|p| p.parse::<u32>().ok())
        .find(|p| {
            std::fs::read_to_string(format!("/proc/{p}/comm"))
                .is_ok_and(|c| c.trim() == "flowshift")
        })
        .unwrap_or_else(|| panic!("no flowshift in node {i}"))
}

/// Sends `sig` to `pid` (at once: no `kill` process to start first, so the
/// time taken before is the time it was sent).
fn signal(pid: u32, sig: libc::c_int) {
    // SAFETY: kill(2) takes plain integers.
    let r = unsafe { libc::kill(pid as libc::pid_t, sig) };
    assert_eq!(r, 0, "kill {pid}: {}", std::io::Error::last_os_error());
}

/// Starts the pool of `nodes` FW → NAT nodes; returns once it says every
/// session is up.
fn start(prefix: &'static str, nodes: usize, out: &str) -> Pool {
    start_with(prefix, nodes, out, &[]).0
}

/// [`start`] with more arguments; also returns the lines it printed up to
/// then.
fn start_with(prefix: &'static str, nodes: usize, out: &str, more: &[&str]) -> (Pool, Vec<String>) {
    let chain = tmp(&format!("{out}-chain.toml"));
    std::fs::write(
        &chain,
        format!(
            "[[nf]]\nkind = \"firewall\"\nrules = \"allow tcp 10.0.0.0/8 -> any:{PORT}\"\n\
             [[nf]]\nkind = \"nat\"\ninternal = \"10.0.0.0/8\"\nexternal = [\"192.0.2.1\"]\n"
        ),
    )
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_flowshift"))
        .args(["pool", "run", "--routing", "bgp", "--prefix", prefix])
        .args(["--nodes", &nodes.to_string()])
        .arg("--config")
        .arg(&chain)
        .arg("--out")
        .arg(tmp(out))
        .args(more)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let pool = Pool {
        prefix,
        nodes,
        controller: Some(child),
        later: Arc::new(Mutex::new(Vec::new())),
    };
    let t = Instant::now();
    let mut said = Vec::new();
    loop {
        let l = lines.next().expect("the pool came up").unwrap();
        if l.contains("every BGP session established") {
            break;
        }
        said.push(l);
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "the pool never came up"
        );
    }
    // the rest of its output, kept
    let later = pool.later.clone();
    std::thread::spawn(move || {
        for l in lines.map_while(Result::ok) {
            later.lock().unwrap().push(l);
        }
    });
    (pool, said)
}

/// The router's route changes, each with its wall-clock time (`ip -ts
/// monitor route`), as they come.
type Changes = Arc<Mutex<Vec<(SystemTime, String)>>>;

fn monitor(prefix: &str) -> (Child, Changes) {
    // (line-buffered: a pipe's full buffer would hold lines back until `ip`
    // is killed, and they would be lost)
    let mut m = Command::new("stdbuf")
        .args([
            "-oL",
            "ip",
            "-n",
            &format!("{prefix}-r"),
            "-ts",
            "monitor",
            "route",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = BufReader::new(m.stdout.take().unwrap()).lines();
    let changes: Changes = Arc::default();
    let c = changes.clone();
    std::thread::spawn(move || {
        for l in lines.map_while(Result::ok) {
            // `[2026-11-27T13:20:21.983246] Deleted …`
            let at = l
                .strip_prefix('[')
                .and_then(|l| l.split_once(']'))
                .and_then(|(t, rest)| Some((wall(t)?, rest.trim().to_string())));
            if let Some(a) = at {
                c.lock().unwrap().push(a);
            }
        }
    });
    (m, changes)
}

/// `YYYY-MM-DDTHH:MM:SS.ffffff` (local time: UTC here) as a `SystemTime`.
fn wall(t: &str) -> Option<SystemTime> {
    let (date, time) = t.split_once('T')?;
    let d: Vec<i64> = date
        .split('-')
        .map(|x| x.parse().ok())
        .collect::<Option<_>>()?;
    let (hms, frac) = time.split_once('.')?;
    let h: Vec<i64> = hms
        .split(':')
        .map(|x| x.parse().ok())
        .collect::<Option<_>>()?;
    // days from the civil date (Howard Hinnant's algorithm)
    let (y, m) = if d[1] <= 2 {
        (d[0] - 1, d[1] + 9)
    } else {
        (d[0], d[1] - 3)
    };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * m + 2) / 5 + d[2] - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400 + h[0] * 3600 + h[1] * 60 + h[2];
    let micros: u64 = format!("{frac:0<6}")[..6].parse().ok()?;
    Some(SystemTime::UNIX_EPOCH + Duration::from_secs(secs as u64) + Duration::from_micros(micros))
}

/// When `prefix`'s route first went by node `to`'s link at or after `from`,
/// ms after it.
fn rerouted(changes: &Changes, from: SystemTime, prefix: &str, via: &str) -> Option<f64> {
    changes
        .lock()
        .unwrap()
        .iter()
        .filter(|(t, l)| {
            *t >= from && l.starts_with(prefix) && l.contains(via) && !l.starts_with("Deleted")
        })
        .map(|(t, _)| t.duration_since(from).unwrap().as_secs_f64() * 1e3)
        .next()
}

/// Route changes of `prefix` at or after `from`: a node that neither died
/// nor drained has none (a false failover would be one).
fn changed(changes: &Changes, from: SystemTime, prefix: &str) -> Vec<String> {
    changes
        .lock()
        .unwrap()
        .iter()
        .filter(|(t, l)| {
            *t >= from
                && (l.starts_with(&format!("{prefix} "))
                    || l.starts_with(&format!("Deleted {prefix} ")))
        })
        .map(|(_, l)| l.clone())
        .collect()
}

/// A paced server at every address of namespace `ns`, until `stop`: each
/// connection's first two bytes seed its pattern.
fn server(ns: &str, stop: &'static AtomicBool) {
    let any = SocketAddr::new([0, 0, 0, 0].into(), PORT);
    common::server_until(ns, any, stop, (CHUNK, PACE), pattern);
}

/// `n` downloads from the client namespace, download c to virtual IP
/// c % vips; each thread's result once `stop` is set: true if it ran to the
/// server's close with every byte right.
fn downloads(
    prefix: &str,
    n: usize,
    vips: usize,
    stop: &'static AtomicBool,
) -> (Arc<Barrier>, Vec<std::thread::JoinHandle<bool>>) {
    let start = Arc::new(Barrier::new(n + 1));
    let hs = (0..n)
        .map(|c| {
            let start = start.clone();
            let ns = format!("{prefix}-c");
            std::thread::spawn(move || {
                netns::enter(&ns).unwrap();
                let to = SocketAddr::new(PoolBed::vip(c % vips).parse().unwrap(), PORT);
                let s = TcpStream::connect_timeout(&to, Duration::from_secs(5));
                // (every thread meets the others, connected or not)
                start.wait();
                let mut s = match s {
                    Ok(s) => s,
                    Err(e) => {
                        eprintln!("download {c} did not connect: {e}");
                        return false;
                    }
                };
                s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
                let seed = c as u16;
                s.write_all(&seed.to_be_bytes()).unwrap();
                let (mut got, mut right) = (0, true);
                let mut buf = [0u8; 16_384];
                loop {
                    match s.read(&mut buf) {
                        Ok(0) => break,
                        Ok(k) => {
                            right &= buf[..k]
                                .iter()
                                .enumerate()
                                .all(|(j, b)| *b == pattern(seed, got + j));
                            got += k;
                        }
                        Err(e) => {
                            eprintln!("download {c} broke after {got} bytes: {e}");
                            return false;
                        }
                    }
                }
                let whole = stop.load(Ordering::Relaxed);
                if !right || !whole {
                    eprintln!("download {c}: {got} bytes, right {right}, to the end {whole}");
                }
                right && whole
            })
        })
        .collect();
    (start, hs)
}

/// The traffic of a test: the router's route changes watched, the server,
/// and the downloads, running.
struct Traffic {
    mon: Child,
    changes: Changes,
    stop: &'static AtomicBool,
    downloads: Vec<std::thread::JoinHandle<bool>>,
    /// When every download had connected.
    began: SystemTime,
}

impl Traffic {
    /// Watches the routes, starts the server and `n` downloads over `vips`
    /// virtual IPs, and returns 300 ms after every one connected.
    fn begin(prefix: &str, n: usize, vips: usize, stop: &'static AtomicBool) -> Traffic {
        let (mon, changes) = monitor(prefix);
        server(&format!("{prefix}-s"), stop);
        let (start, downloads) = downloads(prefix, n, vips, stop);
        start.wait();
        let began = SystemTime::now();
        std::thread::sleep(Duration::from_millis(300));
        Traffic {
            mon,
            changes,
            stop,
            downloads,
            began,
        }
    }

    /// Stops the downloads (the server closes each) and the watch: how many
    /// broke.
    fn end(mut self) -> usize {
        self.stop.store(true, Ordering::Relaxed);
        let broken = self
            .downloads
            .drain(..)
            .map(|h| h.join().unwrap())
            .filter(|ok| !ok)
            .count();
        let _ = self.mon.kill();
        let _ = self.mon.wait();
        broken
    }
}

/// One pool at a time: the machine has two CPUs.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Probes the bed and BIRD; false (a skip, counted) where either is missing.
fn privileged(prefix: &str) -> bool {
    let Some(probe) = common::bed(prefix) else {
        return false;
    };
    drop(probe);
    netio::testbed::privileged(
        "BIRD, the pool's BGP speaker",
        netio::bird::program().ok_or("no `bird` program (apt install bird2)"),
    )
    .is_some()
}

/// Prints the end of every node's log, and its BIRD's, and the router's: what
/// a failed run leaves to read.
fn dump(out: &str, nodes: usize, changes: &Changes) {
    let dir = tmp(out);
    let mut files: Vec<String> = (0..nodes)
        .flat_map(|i| [format!("node{i}.log"), format!("node{i}.bird.log")])
        .collect();
    files.push("router.bird.log".into());
    for f in files {
        let t = std::fs::read_to_string(dir.join(&f)).unwrap_or_default();
        let lines: Vec<&str> = t.lines().collect();
        eprintln!("--- {f} (last lines)");
        for l in &lines[lines.len().saturating_sub(12)..] {
            eprintln!("{l}");
        }
    }
    eprintln!("--- the router's route changes");
    for (t, l) in changes.lock().unwrap().iter() {
        eprintln!("{t:?} {l}");
    }
}

/// Node `i`'s run report, once it ended.
fn report(out: &str, i: usize) -> serde_json::Value {
    let t = std::fs::read_to_string(tmp(out).join(format!("node{i}.json")))
        .unwrap_or_else(|e| panic!("node {i}'s report: {e}"));
    serde_json::from_str(&t).unwrap()
}

/// Eight tenants, two of which fill a node (`pool plan --tenants`).
const EIGHT_TENANTS: &str = "[node]\ncps = 100\npps = 100\nflows = 100\ngbps = 100\n\
     [[tenant]]\nname = \"t\"\ncps = 45\npps = 10\nflows = 10\ngbps = 10\ncount = 8\n";

/// A tenants file `name` holding `text`.
fn plan_file(name: &str, text: &str) -> PathBuf {
    let p = tmp(name);
    std::fs::write(&p, text).unwrap();
    p
}

/// Stops `nodes` of the pool whose output is in `out` (Ctrl-C: each drains
/// and writes its report) and returns their reports.
fn stop_for_reports(prefix: &str, out: &str, nodes: &[usize]) -> Vec<serde_json::Value> {
    for &i in nodes {
        signal(node_pid(prefix, i), libc::SIGINT);
    }
    let dir = tmp(out);
    for _ in 0..100 {
        if nodes
            .iter()
            .all(|i| std::fs::metadata(dir.join(format!("node{i}.json"))).is_ok())
        {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    // (a report is written whole before its file is renamed into place)
    std::thread::sleep(Duration::from_millis(200));
    nodes.iter().map(|&i| report(out, i)).collect()
}

#[test]
fn pairs_fail_over_by_bgp_with_the_controller_dead_and_a_drain_breaks_nothing() {
    const PREFIX: &str = "fspg";
    const NODES: usize = 4;
    const CONNECTIONS: usize = 200;
    static STOP: AtomicBool = AtomicBool::new(false);
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    if !privileged(PREFIX) {
        return;
    }
    let mut pool = start(PREFIX, NODES, "pool-bgp");
    let traffic = Traffic::begin(PREFIX, CONNECTIONS, NODES, &STOP);
    let (changes, began) = (traffic.changes.clone(), traffic.began);
    // the controller goes first: nothing it does is needed from here on
    let mut c = pool.controller.take().unwrap();
    c.kill().unwrap();
    c.wait().unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let n0 = node_pid(PREFIX, 0);
    let killed = SystemTime::now();
    signal(n0, libc::SIGKILL);
    std::thread::sleep(Duration::from_millis(500));
    let n2 = node_pid(PREFIX, 2);
    let drained = SystemTime::now();
    signal(n2, libc::SIGINT);
    std::thread::sleep(Duration::from_secs(2));
    let broken = traffic.end();
    let (g0, _) = PoolBed::gateways(1);
    let (g2, _) = PoolBed::gateways(3);
    let failover = rerouted(&changes, killed, &PoolBed::vip(0), &g0);
    let drain = rerouted(&changes, drained, &PoolBed::vip(2), &g2);
    println!(
        "{CONNECTIONS} downloads, {broken} broken; node 0's virtual IP by node 1 {failover:?} ms \
         after its kill -9, node 2's by node 3 {drain:?} ms after its drain began"
    );
    if broken > 0 || failover.is_none() || drain.is_none() {
        dump("pool-bgp", NODES, &changes);
    }
    let nat1 = rerouted(
        &changes,
        killed,
        &PoolBed::nat_pool(0),
        &PoolBed::gateways(1).1,
    );
    assert_eq!(broken, 0, "downloads broken");
    // nodes 1 and 3 lived: their own routes never moved
    for i in [1, 3] {
        for p in [PoolBed::vip(i), PoolBed::nat_pool(i)] {
            let c = changed(&changes, began, &p);
            assert!(c.is_empty(), "a false failover of node {i}: {c:?}");
        }
    }
    assert!(failover.is_some_and(|t| t < 1_000.0), "{failover:?}");
    assert!(
        nat1.is_some_and(|t| t < 1_000.0),
        "node 0's NAT pool: {nat1:?}"
    );
    assert!(drain.is_some_and(|t| t < 1_000.0), "{drain:?}");
    // the drained node ended on its own, with its report
    for _ in 0..100 {
        if std::fs::metadata(tmp("pool-bgp").join("node2.json")).is_ok() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let r2 = report("pool-bgp", 2);
    assert!(r2["packets_out"].as_u64().unwrap() > 100, "{r2}");
    // the others are stopped here (no controller is left to do it)
    let reports = stop_for_reports(PREFIX, "pool-bgp", &[1, 3]);
    for ((i, heir_of), r) in [(1, 0), (3, 2)].into_iter().zip(&reports) {
        let p = &r["pool"];
        // it installed the copies of its predecessor's flows, and then
        // carried them
        assert!(
            p["installed"].as_u64().unwrap() >= 3 * 10,
            "node {i} (heir of {heir_of}): {p}"
        );
        common::assert_accounted(r, &format!("node {i}"));
        assert_eq!(p["replica_bad"], 0, "node {i}");
    }
    drop(pool);
}

#[test]
fn a_node_that_loses_a_link_or_freezes_hands_its_traffic_to_its_secondary() {
    const PREFIX: &str = "fspl";
    const NODES: usize = 4;
    const CONNECTIONS: usize = 100;
    static STOP: AtomicBool = AtomicBool::new(false);
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    if !privileged(PREFIX) {
        return;
    }
    let pool = start(PREFIX, NODES, "pool-bgp-link");
    let traffic = Traffic::begin(PREFIX, CONNECTIONS, NODES, &STOP);
    let (changes, began) = (traffic.changes.clone(), traffic.began);
    // node 1's front link loses its carrier: its router end goes down
    let asked = SystemTime::now();
    netns::exec(
        &format!("{PREFIX}-r"),
        "ip",
        &["link", "set", &format!("{PREFIX}f1"), "down"],
    )
    .unwrap();
    // (timed from the command's end: on a loaded machine `ip` itself can
    // wait for the kernel's routing lock for seconds, the link still up)
    let down = SystemTime::now();
    let took = down.duration_since(asked).unwrap().as_secs_f64() * 1e3;
    std::thread::sleep(Duration::from_millis(300));
    // node 3 hangs, its BIRD too (a machine that stops): no session closes,
    // only BFD finds it silent
    let frozen: Vec<u32> = String::from_utf8_lossy(
        &Command::new("ip")
            .args(["netns", "pids", &format!("{PREFIX}-n3")])
            .output()
            .unwrap()
            .stdout,
    )
    .split_whitespace()
    .map(|p| p.parse().unwrap())
    .collect();
    let froze = SystemTime::now();
    for &p in &frozen {
        signal(p, libc::SIGSTOP);
    }
    std::thread::sleep(Duration::from_millis(1500));
    let broken = traffic.end();
    let moved = rerouted(&changes, asked, &PoolBed::vip(1), &PoolBed::gateways(2).0)
        .map(|t| (t - took).max(0.0));
    let silent = rerouted(&changes, froze, &PoolBed::vip(3), &PoolBed::gateways(0).0);
    println!(
        "{CONNECTIONS} downloads, {broken} broken; node 1's virtual IP by node 2 {moved:?} ms \
         after its link went down (`ip link set down` took {took:.1} ms); node 3's by node 0 \
         {silent:?} ms after it froze"
    );
    for &p in &frozen {
        signal(p, libc::SIGKILL);
    }
    if broken > 0 || moved.is_none() || silent.is_none() {
        dump("pool-bgp-link", NODES, &changes);
    }
    assert_eq!(broken, 0, "downloads broken");
    assert!(moved.is_some_and(|t| t < 1_000.0), "{moved:?}");
    // BFD's 5 × 10 ms (the default) and the router's reaction: found by
    // silence, not by a closed session
    assert!(
        silent.is_some_and(|t| (30.0..1_000.0).contains(&t)),
        "{silent:?}"
    );
    for i in [0, 2] {
        for p in [PoolBed::vip(i), PoolBed::nat_pool(i)] {
            let c = changed(&changes, began, &p);
            assert!(c.is_empty(), "a false failover of node {i}: {c:?}");
        }
    }
    let log = std::fs::read_to_string(tmp("pool-bgp-link").join("node1.log")).unwrap();
    assert!(
        log.contains(&format!("link {PREFIX}a1 down: announcements withdrawn")),
        "{log}"
    );
    drop(pool);
}

#[test]
fn under_split_brain_the_primary_keeps_the_traffic() {
    const PREFIX: &str = "fsps";
    const NODES: usize = 3;
    const CONNECTIONS: usize = 60;
    static STOP: AtomicBool = AtomicBool::new(false);
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    if !privileged(PREFIX) {
        return;
    }
    let pool = start(PREFIX, NODES, "pool-bgp-split");
    let traffic = Traffic::begin(PREFIX, CONNECTIONS, NODES, &STOP);
    let (changes, began) = (traffic.changes.clone(), traffic.began);
    // nodes 0 and 1 no longer hear each other; both still reach the router
    let n1 = format!("{PREFIX}-n1");
    let cut = tmp("pool-bgp-split-cut.nft");
    std::fs::write(
        &cut,
        format!(
            "table inet split {{\n chain i {{ type filter hook input priority 0; ip saddr {a} udp dport {p} drop; }}\n \
             chain o {{ type filter hook output priority 0; ip daddr {a} udp dport {p} drop; }}\n}}\n",
            a = PoolBed::sync_addr(0),
            p = netio::poolbed::SYNC_PORT
        ),
    )
    .unwrap();
    netns::exec(&n1, "nft", &["-f", cut.to_str().unwrap()]).unwrap();
    std::thread::sleep(Duration::from_millis(800));
    // the router has node 1's promoted route for node 0's virtual IP, and
    // still prefers node 0's
    let ctl = tmp("pool-bgp-split").join("router.bird.ctl");
    let routes = netio::bird::Control::connect(&ctl)
        .unwrap()
        .request(&format!("show route for {} all", PoolBed::vip(0)))
        .unwrap();
    netns::exec(&n1, "nft", &["delete", "table", "inet", "split"]).unwrap();
    std::thread::sleep(Duration::from_millis(800));
    let broken = traffic.end();
    println!("{CONNECTIONS} downloads, {broken} broken; the router's routes for node 0's virtual IP under split brain:\n{routes}");
    if broken > 0 {
        dump("pool-bgp-split", NODES, &changes);
    }
    assert_eq!(broken, 0, "downloads broken");
    let (a0, a1) = (pool::bgp::node_asn(0), pool::bgp::node_asn(1));
    assert!(
        routes.contains(&format!("BGP.as_path: {a1} {a1}\n")),
        "node 1 promoted: {routes}"
    );
    assert!(
        !routes.contains(&format!("BGP.as_path: {a1} {a1} {a1}\n")),
        "{routes}"
    );
    assert!(routes.contains(&format!("BGP.as_path: {a0}\n")), "{routes}");
    // node 0 kept its traffic throughout: its routes never moved, so its
    // flows' state changed on node 0 alone
    for p in [PoolBed::vip(0), PoolBed::nat_pool(0)] {
        let c = changed(&changes, began, &p);
        assert!(c.is_empty(), "node 0's traffic moved: {c:?}");
    }
    let log1 = std::fs::read_to_string(tmp("pool-bgp-split").join("node1.log")).unwrap();
    assert!(log1.contains("its prefixes announced promoted"), "{log1}");
    assert!(log1.contains("its prefixes announced as backup"), "{log1}");
    // node 0 found its secondary lost, sent its packets unprotected, then
    // replicated again
    let reports = stop_for_reports(PREFIX, "pool-bgp-split", &(0..NODES).collect::<Vec<_>>());
    let (r0, r1) = (&reports[0], &reports[1]);
    let p = &r0["pool"];
    assert!(p["secondary_lost"].as_u64().unwrap() >= 1, "{p}");
    assert!(
        r1["pool"]["primary_lost"].as_u64().unwrap() >= 1,
        "{}",
        r1["pool"]
    );
    drop(pool);
}

#[test]
fn a_plans_tenants_are_announced_by_their_pairs_and_fail_over_with_them() {
    const PREFIX: &str = "fspt";
    const NODES: usize = 4;
    const TENANTS: usize = 8;
    const CONNECTIONS: usize = 40;
    static STOP: AtomicBool = AtomicBool::new(false);
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    if !privileged(PREFIX) {
        return;
    }
    // two tenants fill a node: eight need all four
    let plan = plan_file("pool-bgp-plan.toml", EIGHT_TENANTS);
    let (pool, said) = start_with(
        PREFIX,
        NODES,
        "pool-bgp-plan",
        &["--plan", plan.to_str().unwrap()],
    );
    // `t#k at 198.51.100.x: node i, backed up by node j`
    let mut placed = vec![usize::MAX; TENANTS];
    for l in &said {
        let Some((vip, rest)) = l
            .split_once(" at ")
            .and_then(|(_, r)| r.split_once(": node "))
        else {
            continue;
        };
        let t: usize = vip.rsplit('.').next().unwrap().parse::<usize>().unwrap() - 10;
        placed[t] = rest.split(',').next().unwrap().parse().unwrap();
    }
    let mut per_node = [0; NODES];
    for &n in &placed {
        assert!(n < NODES, "every tenant placed: {said:?}");
        per_node[n] += 1;
    }
    assert_eq!(per_node, [2; NODES], "{said:?}");
    // each virtual IP goes by its node's front link
    let table = Command::new("ip")
        .args([
            "-n",
            &format!("{PREFIX}-r"),
            "route",
            "show",
            "table",
            "100",
        ])
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&table.stdout).to_string();
    for (t, &n) in placed.iter().enumerate() {
        let want = format!("{} via {} ", PoolBed::vip(t), PoolBed::gateways(n).0);
        assert!(table.contains(&want), "{want}: {table}");
    }
    let traffic = Traffic::begin(PREFIX, CONNECTIONS, TENANTS, &STOP);
    let changes = traffic.changes.clone();
    // node 1's tenants go to node 2 with it
    let killed = SystemTime::now();
    signal(node_pid(PREFIX, 1), libc::SIGKILL);
    std::thread::sleep(Duration::from_millis(1000));
    let broken = traffic.end();
    let moved: Vec<Option<f64>> = (0..TENANTS)
        .filter(|&t| placed[t] == 1)
        .map(|t| rerouted(&changes, killed, &PoolBed::vip(t), &PoolBed::gateways(2).0))
        .collect();
    println!(
        "{TENANTS} tenants on {NODES} nodes, {CONNECTIONS} downloads, {broken} broken; node 1's \
         tenants by node 2 {moved:?} ms after its kill -9"
    );
    if broken > 0 {
        dump("pool-bgp-plan", NODES, &changes);
    }
    assert_eq!(broken, 0, "downloads broken");
    assert!(
        moved.iter().all(|m| m.is_some_and(|t| t < 1_000.0)),
        "{moved:?}"
    );
    for (t, &n) in placed.iter().enumerate() {
        if n != 1 {
            let c = changed(&changes, killed, &PoolBed::vip(t));
            assert!(c.is_empty(), "tenant {t} of node {n} moved: {c:?}");
        }
    }
    drop(pool);
}

#[test]
fn a_node_past_its_capacity_spills_new_connections_to_another_pair_breaking_none() {
    const PREFIX: &str = "fsps";
    const NODES: usize = 4;
    const TENANTS: usize = 8;
    const CONNECTIONS: usize = 80;
    static STOP: AtomicBool = AtomicBool::new(false);
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    if !privileged(PREFIX) {
        return;
    }
    let plan = plan_file("pool-bgp-spill-plan.toml", EIGHT_TENANTS);
    // 20 connections a second a node (one a core every 100 ms): the 20 that
    // reach each node at once mostly spill to the node two ahead
    let (pool, _) = start_with(
        PREFIX,
        NODES,
        "pool-bgp-spill",
        &["--plan", plan.to_str().unwrap(), "--spill-capacity", "20"],
    );
    let traffic = Traffic::begin(PREFIX, CONNECTIONS, TENANTS, &STOP);
    let changes = traffic.changes.clone();
    std::thread::sleep(Duration::from_millis(1500));
    let broken = traffic.end();
    if broken > 0 {
        dump("pool-bgp-spill", NODES, &changes);
    }
    let pools: Vec<serde_json::Value> =
        stop_for_reports(PREFIX, "pool-bgp-spill", &(0..NODES).collect::<Vec<_>>())
            .into_iter()
            .map(|r| r["pool"].clone())
            .collect();
    let n = |i: usize, k: &str| pools[i][k].as_u64().unwrap();
    let spilled: Vec<u64> = (0..NODES).map(|i| n(i, "spilled")).collect();
    let steered_out: Vec<u64> = (0..NODES).map(|i| n(i, "steered_out")).collect();
    let steered_in: Vec<u64> = (0..NODES).map(|i| n(i, "steered_in")).collect();
    println!(
        "{CONNECTIONS} downloads over {TENANTS} tenants on {NODES} nodes taking 20 new \
         connections/s each: {broken} broken; connections spilled per node {spilled:?}, \
         packets steered out {steered_out:?}, in {steered_in:?}"
    );
    assert_eq!(broken, 0, "downloads broken");
    for i in 0..NODES {
        // each node kept some and passed the rest on, and the spilled
        // connections' later packets followed them
        assert!(spilled[i] >= 1, "node {i}: {spilled:?}");
        assert!(
            spilled[i] < (CONNECTIONS / NODES) as u64,
            "node {i} kept none: {spilled:?}"
        );
        assert!(steered_out[i] > spilled[i], "node {i}: {steered_out:?}");
        // what node i passed on, node i + 2 took in (a datagram the kernel
        // dropped under load is a lost packet, which TCP sends again)
        let took = steered_in[(i + 2) % NODES];
        assert!(
            took <= steered_out[i] && took * 100 >= steered_out[i] * 95,
            "{steered_in:?} {steered_out:?}"
        );
    }
    drop(pool);
}

#[test]
fn a_tenant_larger_than_a_node_is_split_by_hash_and_its_first_node_killed_breaks_nothing() {
    const PREFIX: &str = "fspx";
    const NODES: usize = 4;
    const TENANTS: usize = 5;
    const CONNECTIONS: usize = 100;
    static STOP: AtomicBool = AtomicBool::new(false);
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    if !privileged(PREFIX) {
        return;
    }
    // `big` takes one and a half nodes: two parts, each half of its
    // connections by hash
    let plan = plan_file(
        "pool-bgp-split-plan.toml",
        "[node]\ncps = 100\npps = 100\nflows = 100\ngbps = 100\n\
         [[tenant]]\nname = \"big\"\ncps = 150\npps = 20\nflows = 20\ngbps = 20\n\
         [[tenant]]\nname = \"t\"\ncps = 45\npps = 10\nflows = 10\ngbps = 10\ncount = 4\n",
    );
    let (pool, said) = start_with(
        PREFIX,
        NODES,
        "pool-bgp-parts",
        &["--plan", plan.to_str().unwrap()],
    );
    let line = said
        .iter()
        .find(|l| l.contains("big at "))
        .unwrap_or_else(|| panic!("{said:?}"));
    assert!(
        line.contains(&format!(
            "{}: node 0, backed up by node 1, split over nodes [0, 1]",
            PoolBed::vip(0)
        )),
        "{line}"
    );
    let traffic = Traffic::begin(PREFIX, CONNECTIONS, TENANTS, &STOP);
    let changes = traffic.changes.clone();
    std::thread::sleep(Duration::from_millis(500));
    // node 0 goes: node 1 holds both parts' state (part 0's as its
    // secondary, part 1's as its node) and gets the tenant's traffic
    let killed = SystemTime::now();
    signal(node_pid(PREFIX, 0), libc::SIGKILL);
    std::thread::sleep(Duration::from_millis(1000));
    let broken = traffic.end();
    let moved = rerouted(&changes, killed, &PoolBed::vip(0), &PoolBed::gateways(1).0);
    if broken > 0 {
        dump("pool-bgp-parts", NODES, &changes);
    }
    let p1 = stop_for_reports(PREFIX, "pool-bgp-parts", &[1, 2, 3])[0]["pool"].clone();
    println!(
        "{CONNECTIONS} downloads over {TENANTS} tenants, `big` split over nodes 0 and 1: \
         {broken} broken; node 0 killed, its routes at node 1 {moved:?} ms later; node 1 took \
         in {} packets node 0 steered to it",
        p1["steered_in"]
    );
    assert_eq!(broken, 0, "downloads broken");
    assert!(moved.is_some_and(|t| t < 1_000.0), "{moved:?}");
    // node 0 sent part 1's connections to node 1 until it died
    assert!(p1["steered_in"].as_u64().unwrap() > 0, "{p1}");
    drop(pool);
}

#[test]
fn after_a_failure_the_pool_re_pairs_and_a_second_failure_breaks_nothing() {
    const PREFIX: &str = "fspr";
    const NODES: usize = 4;
    const CONNECTIONS: usize = 200;
    static STOP: AtomicBool = AtomicBool::new(false);
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    if !privileged(PREFIX) {
        return;
    }
    let pool = start(PREFIX, NODES, "pool-bgp-repair");
    let traffic = Traffic::begin(PREFIX, CONNECTIONS, NODES, &STOP);
    let changes = traffic.changes.clone();
    // node 0 goes: node 1 takes its traffic; node 3, which replicated to
    // node 0, gets node 1 as its secondary
    signal(node_pid(PREFIX, 0), libc::SIGKILL);
    let limit = Duration::from_secs(10);
    let repaired = pool.wait_for("node 0 gone: node 3 replicates to node 1", limit);
    let synced = [
        pool.wait_for("node 3 synced node 1", limit),
        pool.wait_for("node 1 synced node 2", limit),
    ];
    // node 3's virtual IP is now backed up by node 1 (as a backup's path)
    let ctl = tmp("pool-bgp-repair").join("router.bird.ctl");
    let routes = netio::bird::Control::connect(&ctl)
        .unwrap()
        .request(&format!("show route for {} all", PoolBed::vip(3)))
        .unwrap();
    // then node 3 goes too: its flows are on node 1 by now
    let killed = SystemTime::now();
    signal(node_pid(PREFIX, 3), libc::SIGKILL);
    std::thread::sleep(Duration::from_millis(1000));
    let broken = traffic.end();
    let moved = rerouted(&changes, killed, &PoolBed::vip(3), &PoolBed::gateways(1).0);
    println!(
        "{CONNECTIONS} downloads over {NODES} nodes, node 0 killed, the pool re-paired \
         ({repaired:?}; {synced:?}), then node 3 killed: {broken} broken; node 3's virtual IP \
         at node 1 {moved:?} ms after"
    );
    if broken > 0 {
        dump("pool-bgp-repair", NODES, &changes);
    }
    assert!(repaired.is_some(), "{:?}", pool.later.lock().unwrap());
    assert!(
        synced.iter().all(Option::is_some),
        "{:?}",
        pool.later.lock().unwrap()
    );
    // (promoted or not: node 1 is promoted for what it took over, and may
    // have been when it was given node 3's prefixes — either path is
    // longer than node 3's own)
    let a1 = pool::bgp::node_asn(1);
    assert!(
        routes.contains("[node1 ") && routes.contains(&format!("BGP.as_path: {a1} {a1}")),
        "node 1 backs node 3 up: {routes}"
    );
    assert_eq!(broken, 0, "downloads broken");
    assert!(moved.is_some_and(|t| t < 1_000.0), "{moved:?}");
    drop(pool);
}
