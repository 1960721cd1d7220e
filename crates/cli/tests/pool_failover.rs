//! `flowshift pool run`: Sirius's ping-pong replication and failover on real
//! Linux networking. Three flowshift nodes behind the pool bed's router
//! (`netio::poolbed`), FW → NAT, each node the secondary of the one before it
//! (a packet that creates or changes its flow's state leaves by the secondary,
//! which installs the flow's entry first; a flow whose copy is not yet
//! acknowledged has every packet copied). Node 0 weighs 2 in the router's
//! groups, the others 1: it holds half of the buckets, so it is the primary of
//! about half of the flows. 200 long downloads run through all three; node 0
//! is killed with `kill -9` mid-download; the pool's controller
//! (a heartbeat every millisecond: its port refuses once the process is gone)
//! redirects node 0's
//! buckets — and its NAT pool — to node 1, which holds the state of its flows,
//! and tells node 2 (whose secondary node 0 was) to replicate to node 1 from
//! then on; node 1 copies its table to node 2 and node 2 its table to node 1
//! (bulk sync), so every flow has two copies again. The controller restarts
//! node 0 a second after it found it down; once it answers, node 1 syncs its
//! table to it while the downloads go on, and then node 0 takes its buckets
//! and NAT pool back, and its predecessor replicates and syncs to it. Five
//! seconds after the pool is up, a spare fourth node joins: every node in the
//! ring syncs its table to it, then it becomes a member of the router's
//! groups and takes buckets from every node. The downloads run until a
//! second after both, every byte checked: 0 connections broken through the
//! failover, the rejoin and the join. Their times and each connection's
//! longest stalls are printed.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

use netio::netns;
use netio::poolbed::{PoolBed, SERVER};

mod common;

const PREFIX: &str = "fspf";
const PORT: u16 = 7100;
const NODES: usize = 3;
const CONNECTIONS: usize = 200;
/// Each download runs until the test says stop (a second after the join),
/// in CHUNK-byte pieces PACE apart: one that ends before, or with an error,
/// or with a wrong byte, broke.
static STOP: AtomicBool = AtomicBool::new(false);
const CHUNK: usize = 4_000;
const PACE: Duration = Duration::from_millis(16);

fn tmp(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name)
}

/// Byte `i` of a download seeded `seed`.
fn pattern(seed: u16, i: usize) -> u8 {
    (i as u32 * 13 + u32::from(seed)) as u8
}

/// The pool's process; on drop (a failed test) killed, and its bed deleted.
struct Pool(Option<Child>);

impl Drop for Pool {
    fn drop(&mut self) {
        if let Some(c) = &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
            for i in 0..=NODES {
                kill_node(i);
            }
            PoolBed::down(PREFIX, NODES + 1);
        }
    }
}

/// `kill -9` of every process in node `i`'s namespace.
fn kill_node(i: usize) {
    let out = Command::new("ip")
        .args(["netns", "pids", &format!("{PREFIX}-n{i}")])
        .output()
        .unwrap();
    for pid in String::from_utf8_lossy(&out.stdout).split_whitespace() {
        let _ = Command::new("kill").args(["-9", pid]).status();
    }
}

/// The server: each connection gets a pattern seeded by the client's first
/// two bytes, paced, until [`STOP`] (or a minute).
fn server() {
    let at = SocketAddr::new(SERVER.parse().unwrap(), PORT);
    common::server_until(&format!("{PREFIX}-s"), at, &STOP, (CHUNK, PACE), pattern);
}

/// When node 0 was killed, when the pool said it had its buckets back, and
/// when it said the spare had joined.
type Marks = Mutex<[Option<Duration>; 3]>;

/// One download: bytes right; the longest gap between reads after the kill
/// (until the rejoin or the join), over the second after the rejoin, and
/// over the second after the join, ms.
fn download(seed: u16, start: &Barrier, t0: Instant, marks: &Marks) -> (bool, [f64; 3]) {
    let to = SocketAddr::new(SERVER.parse().unwrap(), PORT);
    let mut s = TcpStream::connect_timeout(&to, Duration::from_secs(5))
        .unwrap_or_else(|e| panic!("connection {seed}: {e}"));
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    start.wait();
    s.write_all(&seed.to_be_bytes()).unwrap();
    let (mut got, mut right) = (0, true);
    let mut buf = [0u8; 16_384];
    let mut last = t0.elapsed();
    let mut gaps = [Duration::ZERO; 3];
    let ms = |g: [Duration; 3]| g.map(|d| d.as_secs_f64() * 1e3);
    let second = Duration::from_secs(1);
    loop {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                right &= buf[..n]
                    .iter()
                    .enumerate()
                    .all(|(k, b)| *b == pattern(seed, got + k));
                got += n;
                let now = t0.elapsed();
                let [k, b, j] = *marks.lock().unwrap();
                // the failover's window ends with the first of the others
                let end = [b, j].into_iter().flatten().min();
                if let Some(k) = k.filter(|&k| now > k && end.is_none_or(|e| now <= e)) {
                    gaps[0] = gaps[0].max(now - last.max(k));
                }
                for (g, m) in [(1, b), (2, j)] {
                    if m.is_some_and(|m| now > m && now < m + second) {
                        gaps[g] = gaps[g].max(now - last);
                    }
                }
                last = now;
            }
            Err(e) => {
                eprintln!("download {seed} broke after {got} bytes: {e}");
                return (false, ms(gaps));
            }
        }
    }
    // the server closes only once told to stop
    let whole = STOP.load(Ordering::Relaxed);
    if !right || !whole {
        eprintln!(
            "download {seed}: {got} bytes, right: {right}, ended before the stop: {}",
            !whole
        );
    }
    (right && whole, ms(gaps))
}

#[test]
fn a_killed_node_fails_over_and_rejoins_breaking_no_connection() {
    let Some(probe) = common::bed(PREFIX) else {
        return;
    };
    drop(probe);
    let chain = tmp("pool-failover-chain.toml");
    std::fs::write(
        &chain,
        format!(
            "[[nf]]\nkind = \"firewall\"\nrules = \"allow tcp 10.0.0.0/8 -> any:{PORT}\"\n\
             [[nf]]\nkind = \"nat\"\ninternal = \"10.0.0.0/8\"\nexternal = [\"192.0.2.1\"]\n"
        ),
    )
    .unwrap();
    let json = tmp("pool-failover.json");
    let _ = std::fs::remove_file(&json);
    let mut child = Command::new(env!("CARGO_BIN_EXE_flowshift"))
        .args(["pool", "run", "--prefix", PREFIX, "--nodes", "3"])
        // node 0, to be killed, is the primary of half of the flows
        .args(["--weights", "2,1,1"])
        // the detector's defaults: a heartbeat every millisecond, a node
        // whose process is gone found by its port's refusals
        .args([
            "--restart-after",
            "1s",
            "--spares",
            "1",
            "--join-after",
            "5s",
        ])
        .arg("--config")
        .arg(&chain)
        .arg("--out")
        .arg(tmp("pool-failover"))
        .arg("--json")
        .arg(&json)
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(tmp("pool-failover.err")).unwrap())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut pool = Pool(Some(child));
    let t_up = Instant::now();
    loop {
        let l = lines.next().expect("the pool came up").unwrap();
        if l.contains("nodes up") {
            break;
        }
        assert!(
            t_up.elapsed() < Duration::from_secs(60),
            "the pool never came up"
        );
    }
    let t0 = Instant::now();
    let marks: Arc<Marks> = Arc::new(Mutex::new([None, None, None]));
    // the rest of the pool's output, as it comes
    let out = Arc::new(Mutex::new(Vec::new()));
    let (o, m) = (out.clone(), marks.clone());
    std::thread::spawn(move || {
        for l in lines.map_while(Result::ok) {
            if l.contains("rejoined") {
                m.lock().unwrap()[1] = Some(t0.elapsed());
            }
            if l.contains("node 3 joined") {
                m.lock().unwrap()[2] = Some(t0.elapsed());
            }
            o.lock().unwrap().push(l);
        }
    });
    server();
    let start = Arc::new(Barrier::new(CONNECTIONS + 1));
    let hs: Vec<_> = (0..CONNECTIONS)
        .map(|c| {
            let (start, marks) = (start.clone(), marks.clone());
            std::thread::spawn(move || {
                netns::enter(&format!("{PREFIX}-c")).unwrap();
                download(c as u16, &start, t0, &marks)
            })
        })
        .collect();
    // every connection is established, then the downloads run for a while
    start.wait();
    std::thread::sleep(Duration::from_millis(150));
    marks.lock().unwrap()[0] = Some(t0.elapsed());
    kill_node(0);
    // the downloads go on until a second after node 0 has its buckets back
    // and the spare has joined
    let waited = Instant::now();
    while marks.lock().unwrap()[1..].iter().any(Option::is_none)
        && waited.elapsed() < Duration::from_secs(30)
    {
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_secs(1));
    STOP.store(true, Ordering::Relaxed);
    let results: Vec<(bool, [f64; 3])> = hs.into_iter().map(|h| h.join().unwrap()).collect();
    let broken = results.iter().filter(|r| !r.0).count();
    let spread = |k: usize| {
        let mut g: Vec<f64> = results.iter().map(|r| r.1[k]).collect();
        g.sort_by(f64::total_cmp);
        format!(
            "p50 {:.1} ms, p90 {:.1} ms, max {:.1} ms",
            g[g.len() / 2],
            g[g.len() * 9 / 10],
            g[g.len() - 1]
        )
    };
    // the pool ends at Ctrl-C with its report
    let mut child = pool.0.take().unwrap();
    let k = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(k.success());
    let st = child.wait().unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let printed = out.lock().unwrap().join("\n");
    println!(
        "{CONNECTIONS} connections, {broken} broken; longest gap per connection after the \
         kill: {}; in the second after the rejoin: {}; after the join: {} (the server writes \
         every {} ms)\n{printed}",
        spread(0),
        spread(1),
        spread(2),
        PACE.as_millis()
    );
    assert!(st.success(), "{st}");
    assert_eq!(broken, 0, "connections broken");
    // into a file, the status is a line when it changes, not a terminal's
    // line rewritten in place
    let err = std::fs::read_to_string(tmp("pool-failover.err")).unwrap();
    assert!(!err.contains('\r'), "{err}");
    let status: Vec<&str> = err.lines().filter(|l| l.contains("failovers")).collect();
    assert!(
        status[0].contains("n0 up") && status[0].contains("failovers 0"),
        "{err}"
    );
    assert!(status.iter().any(|l| l.contains("failovers 1")), "{err}");
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let start: Vec<u64> = r["start_buckets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b.as_u64().unwrap())
        .collect();
    assert_eq!(start, [32, 16, 16], "node 0 held half of the 64 buckets");
    let f = &r["failovers"];
    assert_eq!(f.as_array().unwrap().len(), 1, "{f}");
    assert_eq!(
        (f[0]["node"].as_u64(), f[0]["heir"].as_u64()),
        (Some(0), Some(1))
    );
    // found gone (exiting, exited, or its heartbeat port refused) — or, on
    // a machine too loaded to look in time, silent (pool_detect.rs holds the
    // detector to `gone`); found within a second either way
    assert!(f[0]["why"] == "gone" || f[0]["why"] == "silent", "{f}");
    let found = f[0]["detected_ms"].as_f64().unwrap() - f[0]["last_seen_ms"].as_f64().unwrap();
    assert!((0.0..1000.0).contains(&found), "found after {found} ms");
    // node 0 came back: node 1 synced it, then it took its buckets back
    let j = &r["rejoins"];
    assert_eq!(j.as_array().unwrap().len(), 1, "{j}");
    assert_eq!(
        (j[0]["node"].as_u64(), j[0]["from"].as_u64()),
        (Some(0), Some(1))
    );
    assert!(j[0]["restarted_ms"].as_f64().is_some(), "{j}");
    let syncs = r["syncs"].as_array().unwrap();
    let sync = |from: u64, to: u64, purpose: &str| {
        syncs
            .iter()
            .find(|y| y["from"] == from && y["to"] == to && y["purpose"] == purpose)
            .unwrap_or_else(|| panic!("no sync {from} → {to} ({purpose}): {syncs:?}"))
    };
    // node 1 held its own connections and node 0's: three quarters of them
    let back = sync(1, 0, "hand-back");
    assert!(back["done_ms"].as_f64().is_some(), "{back}");
    assert!(back["copies"].as_u64().unwrap() >= 100, "{back}");
    // after the failover, node 1 (the heir) and node 2 (re-ringed to it)
    // synced their new secondaries
    for (from, to) in [(1, 2), (2, 1)] {
        let y = sync(from, to, "new-secondary");
        assert!(y["done_ms"].as_f64().is_some(), "{y}");
        assert!(y["copies"].as_u64().unwrap() >= 30, "{y}");
    }
    // and every sync finished (the rejoined node's predecessor's among
    // them: node 2, or node 3 when it joined first)
    for y in syncs {
        assert!(y["done_ms"].as_f64().is_some(), "{y}");
    }
    assert!(
        syncs
            .iter()
            .any(|y| y["to"] == 0 && y["purpose"] == "new-secondary"),
        "{syncs:?}"
    );
    // the spare joined once every node had synced it, and carried traffic
    let j = &r["joins"];
    assert_eq!(j.as_array().unwrap().len(), 1, "{j}");
    assert_eq!(j[0]["node"].as_u64(), Some(3));
    assert!(j[0]["buckets"].as_u64().unwrap() > 0, "{j}");
    // (from every node in the ring then: 1 and 2, and 0 once it is back)
    let from: Vec<u64> = syncs
        .iter()
        .filter(|y| y["to"] == 3 && y["purpose"] == "join")
        .map(|y| y["from"].as_u64().unwrap())
        .collect();
    assert!(from.contains(&1) && from.contains(&2), "{syncs:?}");
    let n3 = &r["node_reports"][3];
    assert!(
        n3["pool"]["synced"].as_u64().unwrap() >= 150,
        "{}",
        n3["pool"]
    );
    assert!(n3["packets_out"].as_u64().unwrap() > 500, "{n3}");
    let n0 = &r["node_reports"][0];
    assert!(
        n0["pool"]["synced"].as_u64().unwrap() >= 100,
        "node 0: {}",
        n0["pool"]
    );
    // and carried its connections after it
    assert!(n0["packets_out"].as_u64().unwrap() > 1_000, "{n0}");
    for i in 0..=NODES {
        let n = &r["node_reports"][i];
        common::assert_accounted(n, &format!("node {i}"));
        assert_eq!(n["pool"]["replica_bad"], 0, "node {i}");
        assert_eq!(n["pool"]["sync_bad"], 0, "node {i}");
        // replication lag: a copy acknowledged within a second (p50)
        let lag = n["pool"]["lag_p50_us"].as_u64();
        assert!(
            lag.is_some_and(|l| l < 1_000_000),
            "node {i}: {}",
            n["pool"]
        );
        if i == 0 || i == NODES {
            continue;
        }
        // the secondary acknowledged copies
        assert!(
            n["pool"]["acked"].as_u64().unwrap() > 0,
            "node {i}: {}",
            n["pool"]
        );
        // node 0 was the primary of connections (node 1 installed their
        // changes: a handshake is three), node 1 of others (node 2 did)
        assert!(
            n["pool"]["installed"].as_u64().unwrap() >= 3 * 5,
            "node {i}: {}",
            n["pool"]
        );
        // node 2 replicated to node 0 until it was re-ringed (a few packets
        // at most go out unprotected in between); node 1's secondary lived
        let unprotected = n["pool"]["unprotected"].as_u64().unwrap();
        assert!(
            unprotected <= if i == 1 { 0 } else { 10 },
            "node {i}: {}",
            n["pool"]
        );
    }
}
