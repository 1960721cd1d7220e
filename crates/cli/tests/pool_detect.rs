//! `flowshift pool run`'s failure detector with its defaults, on a loaded
//! machine: 3 nodes, 50 parallel paced downloads through them, two busy
//! loops beside (one per CPU of the 2-CPU machine), several runs: no live
//! node is taken for dead, every download arrives whole. Then a node is
//! `kill -9`ed mid-download: it is found gone (its heartbeat port refuses),
//! its secondary takes its flows, it is restarted and rejoins, and no
//! download breaks.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use netio::netns;
use netio::poolbed::{PoolBed, SERVER};

mod common;

const PREFIX: &str = "fspd";
const PORT: u16 = 7200;
const NODES: usize = 3;
const DOWNLOADS: usize = 50;
/// Each download: this many chunks of CHUNK bytes, PACE apart (≈ 3 s).
const CHUNKS: usize = 60;
const CHUNK: usize = 4_000;
const PACE: Duration = Duration::from_millis(50);
/// Loaded runs without a kill (`FLOWSHIFT_POOL_RUNS` changes it).
const RUNS: usize = 10;

fn tmp(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name)
}

fn pattern(seed: u8, i: usize) -> u8 {
    (i as u32 * 7 + u32::from(seed)) as u8
}

/// Spins on each CPU until dropped.
struct Busy(Arc<AtomicBool>, Vec<std::thread::JoinHandle<()>>);

impl Busy {
    fn start(n: usize) -> Busy {
        let stop = Arc::new(AtomicBool::new(false));
        let hs = (0..n)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    let mut x = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
                    }
                })
            })
            .collect();
        Busy(stop, hs)
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
        for h in self.1.drain(..) {
            let _ = h.join();
        }
    }
}

/// The paced server in the bed's server namespace.
fn server() {
    common::paced_server(
        &format!("{PREFIX}-s"),
        SocketAddr::new(SERVER.parse().unwrap(), PORT),
        (CHUNKS, CHUNK, PACE),
        pattern,
    );
}

/// The downloads, all at once; how many arrived whole.
fn downloads(kill_after: Option<Duration>) -> usize {
    let hs: Vec<_> = (0..DOWNLOADS)
        .map(|k| {
            std::thread::spawn(move || {
                netns::enter(&format!("{PREFIX}-c")).unwrap();
                let to = SocketAddr::new(SERVER.parse().unwrap(), PORT);
                let Ok(mut s) = TcpStream::connect_timeout(&to, Duration::from_secs(5)) else {
                    return false;
                };
                s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
                if s.write_all(&[k as u8]).is_err() {
                    return false;
                }
                let mut got = Vec::new();
                let _ = s.read_to_end(&mut got);
                got.len() == CHUNKS * CHUNK
                    && got
                        .iter()
                        .enumerate()
                        .all(|(i, b)| *b == pattern(k as u8, i))
            })
        })
        .collect();
    if let Some(after) = kill_after {
        std::thread::sleep(after);
        let out = Command::new("ip")
            .args(["netns", "pids", &format!("{PREFIX}-n0")])
            .output()
            .unwrap();
        for pid in String::from_utf8_lossy(&out.stdout).split_whitespace() {
            let _ = Command::new("kill").args(["-9", pid]).status();
        }
    }
    hs.into_iter()
        .filter(|_| true)
        .map(|h| h.join().unwrap())
        .filter(|ok| *ok)
        .count()
}

/// One run of the pool with its defaults for `seconds`; its report.
fn run(seconds: u64, kill_after: Option<Duration>) -> (usize, serde_json::Value, String) {
    let chain = tmp("pool-detect-chain.toml");
    std::fs::write(
        &chain,
        format!(
            "[[nf]]\nkind = \"firewall\"\nrules = \"allow tcp 10.0.0.0/8 -> any:{PORT}\"\n\
             [[nf]]\nkind = \"nat\"\ninternal = \"10.0.0.0/8\"\nexternal = [\"192.0.2.1\"]\n"
        ),
    )
    .unwrap();
    let json = tmp("pool-detect.json");
    let _ = std::fs::remove_file(&json);
    let mut child = Command::new(env!("CARGO_BIN_EXE_flowshift"))
        .args(["pool", "run", "--prefix", PREFIX, "--nodes", "3"])
        .args(["--duration", &format!("{seconds}s")])
        .arg("--config")
        .arg(&chain)
        .arg("--out")
        .arg(tmp("pool-detect"))
        .arg("--json")
        .arg(&json)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let t = Instant::now();
    let mut printed = Vec::new();
    loop {
        let l = lines.next().expect("the pool came up").unwrap();
        let up = l.contains("nodes up");
        printed.push(l);
        if up {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "the pool never came up"
        );
    }
    server();
    let whole = downloads(kill_after);
    printed.extend(lines.map_while(Result::ok));
    let st = child.wait().unwrap();
    assert!(st.success(), "{st}\n{}", printed.join("\n"));
    PoolBed::down(PREFIX, NODES);
    let r = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    (whole, r, printed.join("\n"))
}

#[test]
fn no_live_node_is_failed_over_and_a_killed_one_is_found_and_recovered() {
    let Some(probe) = common::bed(PREFIX) else {
        return;
    };
    drop(probe);
    let runs = std::env::var("FLOWSHIFT_POOL_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(RUNS);
    let busy = Busy::start(2);
    let mut silences = Vec::new();
    for k in 0..runs {
        let (whole, r, printed) = run(6, None);
        assert!(
            printed.contains("no server is started: run one"),
            "{printed}"
        );
        let f = r["failovers"].as_array().unwrap();
        assert!(f.is_empty(), "run {k}: a live node failed over\n{printed}");
        assert_eq!(whole, DOWNLOADS, "run {k}: downloads broken\n{printed}");
        let longest = r["longest_silence_ms"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap())
            .fold(0.0, f64::max);
        silences.push(longest);
    }
    println!(
        "{runs} loaded runs, no false failover; longest silence of a live node per run, ms: {silences:.1?}"
    );
    // a node killed 1 s into the downloads (its restart, start-up and sync
    // take seconds on this machine while the suite's fuzzing runs beside)
    let (whole, r, printed) = run(14, Some(Duration::from_secs(1)));
    drop(busy);
    println!("{printed}");
    let f = r["failovers"].as_array().unwrap();
    assert_eq!(f.len(), 1, "{printed}");
    assert_eq!(
        (f[0]["node"].as_u64(), f[0]["why"].as_str()),
        (Some(0), Some("gone"))
    );
    let found = f[0]["detected_ms"].as_f64().unwrap() - f[0]["last_seen_ms"].as_f64().unwrap();
    assert!(found >= 0.0, "found {found} ms after its last answer");
    let j = r["rejoins"].as_array().unwrap();
    assert_eq!(j.len(), 1, "node 0 restarted and rejoined\n{printed}");
    assert_eq!(
        whole, DOWNLOADS,
        "downloads broken by the failover\n{printed}"
    );
}
