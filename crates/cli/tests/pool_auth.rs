//! Nobody but the pool speaks on its sync network: in a running `flowshift
//! pool run` (its messages sealed with the key it made), datagrams sent to a
//! node's replication port from the router's namespace — a re-ring order
//! (`Repr::NewSecondary`) and a replica message carrying a frame to the server, bare and
//! sealed with a wrong key, and a genuine heartbeat sent twice — change
//! nothing: no copy reaches the forged address, no frame reaches the server,
//! the genuine heartbeat is answered once and its replay not, every refusal
//! is counted by cause in the node's report, and the downloads through the
//! pool arrive whole.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use netio::netns;
use netio::poolbed::{PoolBed, SERVER, SYNC_PORT};
use pool::auth::{Key, Open, Seal};
use pool::protocol::Repr;

mod common;

const PREFIX: &str = "fspa";
const NODES: usize = 2;
const PORT: u16 = 7300;
/// Where a forged re-ring order points the node's copies.
const TRAP: &str = "10.77.0.254:39999";
/// The port of the server a forged replica's frame is addressed to.
const FORGED_DPORT: u16 = 7999;
const DOWNLOADS: usize = 20;
const CHUNKS: usize = 40;
const CHUNK: usize = 4_000;
const PACE: Duration = Duration::from_millis(50);
/// Each forged message is sent this many times.
const TIMES: u64 = 20;

fn tmp(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name)
}

fn pattern(seed: u8, i: usize) -> u8 {
    (i as u32 * 13 + u32::from(seed)) as u8
}

fn now_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64
}

/// A UDP socket bound in namespace `ns` at `at`, counting what it receives
/// until `stop`.
fn counter(ns: &str, at: &str, stop: Arc<AtomicBool>) -> Arc<AtomicU64> {
    let got = Arc::new(AtomicU64::new(0));
    let (g, ns, at) = (got.clone(), ns.to_string(), at.to_string());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        netns::enter(&ns).unwrap();
        let s = UdpSocket::bind(at.as_str()).unwrap();
        s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
        tx.send(()).unwrap();
        let mut b = [0u8; 2048];
        while !stop.load(Ordering::Relaxed) {
            if s.recv(&mut b).is_ok() {
                g.fetch_add(1, Ordering::Relaxed);
            }
        }
    });
    rx.recv().unwrap();
    got
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

/// A 64 B UDP frame from the client to the server's `FORGED_DPORT`.
fn forged_frame() -> Vec<u8> {
    use wire::repr::{EthernetRepr, IpRepr, Ipv4Repr, L4Repr, PacketRepr};
    PacketRepr {
        eth: EthernetRepr {
            src: [2, 0, 0, 0, 0, 1],
            dst: [2, 0, 0, 0, 0, 2],
            vlan: None,
        },
        ip: IpRepr::V4(Ipv4Repr {
            src: [10, 0, 0, 2].into(),
            dst: SERVER.parse().unwrap(),
            dscp: 0,
            ecn: 0,
            ident: 0,
            dont_frag: false,
            ttl: 64,
            options: Vec::new(),
        }),
        l4: L4Repr::Udp {
            src_port: 4444,
            dst_port: FORGED_DPORT,
        },
        payload: b"forged".to_vec(),
    }
    .to_bytes()
}

/// A replica message as a node's core writes it: the port, the copy's
/// number, an (empty) entry, the frame.
fn replica_message(frame: &[u8]) -> Vec<u8> {
    Repr::Copy {
        port: 0,
        seq: 7,
        entry: b"",
        frame,
    }
    .to_vec()
}

/// What the attacker in the router's namespace sees: answers to the
/// genuine heartbeat and to its replay.
struct Attack {
    first_answered: bool,
    replay_answered: bool,
}

/// Sends the forged messages to node 0's replication port, and a genuine
/// heartbeat (sealed with `key`) twice.
fn attack(router: &str, key: &Key) -> Attack {
    let (router, key) = (router.to_string(), key.clone());
    std::thread::spawn(move || {
        netns::enter(&router).unwrap();
        let s = UdpSocket::bind("10.77.0.254:0").unwrap();
        s.set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        let node0: SocketAddr = format!("{}:{SYNC_PORT}", PoolBed::sync_addr(0))
            .parse()
            .unwrap();
        let mut wrong = Seal::new(Key::new([0x5a; 32]), 77);
        let order = Repr::NewSecondary {
            to: TRAP.parse().unwrap(),
        }
        .to_vec();
        let replica = replica_message(&forged_frame());
        for _ in 0..TIMES {
            // bare, as before the pool had keys
            s.send_to(&order, node0).unwrap();
            s.send_to(&replica, node0).unwrap();
            // sealed, with a key that is not the pool's
            s.send_to(&wrong.sealed(now_us(), &order), node0).unwrap();
            s.send_to(&wrong.sealed(now_us(), &replica), node0).unwrap();
            std::thread::sleep(Duration::from_millis(20));
        }
        // a genuine heartbeat: answered; the same datagram again: not
        let mut genuine = Seal::new(key.clone(), 78);
        let beat = genuine.sealed(now_us(), &Repr::Heartbeat.to_vec());
        let mut open = Open::new(Some(&key), now_us() - 1_000_000);
        let mut b = [0u8; 256];
        let mut answered = |s: &UdpSocket| -> bool {
            let t = Instant::now();
            while t.elapsed() < Duration::from_millis(300) {
                match s.recv(&mut b) {
                    Ok(n) => {
                        let body = open.open(now_us(), &b[..n]);
                        if body.map(pool::protocol::parse) == Ok(Ok(Repr::Alive)) {
                            return true;
                        }
                    }
                    Err(_) => return false,
                }
            }
            false
        };
        s.send_to(&beat, node0).unwrap();
        let first_answered = answered(&s);
        s.send_to(&beat, node0).unwrap();
        let replay_answered = answered(&s);
        Attack {
            first_answered,
            replay_answered,
        }
    })
    .join()
    .unwrap()
}

#[test]
fn forged_and_replayed_pool_messages_change_nothing_and_are_counted() {
    let Some(probe) = common::bed(PREFIX) else {
        return;
    };
    drop(probe);
    let chain = tmp("pool-auth-chain.toml");
    std::fs::write(
        &chain,
        "[[nf]]\nkind = \"firewall\"\nrules = \"allow any 10.0.0.0/8 -> any\"\n\
         [[nf]]\nkind = \"nat\"\ninternal = \"10.0.0.0/8\"\nexternal = [\"192.0.2.1\"]\n",
    )
    .unwrap();
    let (json, out) = (tmp("pool-auth.json"), tmp("pool-auth"));
    let _ = std::fs::remove_file(&json);
    let mut child = Command::new(env!("CARGO_BIN_EXE_flowshift"))
        .args(["pool", "run", "--prefix", PREFIX, "--nodes", "2"])
        .args(["--duration", "8s", "--config"])
        .arg(&chain)
        .arg("--out")
        .arg(&out)
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
        assert!(t.elapsed() < Duration::from_secs(60), "never up");
    }
    // the key `pool run` made is its owner's alone
    let key_path = out.join("pool.key");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&key_path).unwrap().permissions().mode();
    assert_eq!(mode & 0o077, 0, "pool.key mode {mode:o}");
    let key = Key::parse(&std::fs::read_to_string(&key_path).unwrap()).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let router = format!("{PREFIX}-r");
    let trapped = counter(&router, TRAP, stop.clone());
    let forged_out = counter(
        &format!("{PREFIX}-s"),
        &format!("{SERVER}:{FORGED_DPORT}"),
        stop.clone(),
    );
    server();
    let downloads: Vec<_> = (0..DOWNLOADS)
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
    std::thread::sleep(Duration::from_millis(300));
    let seen = attack(&router, &key);
    let whole = downloads
        .into_iter()
        .map(|h| h.join().unwrap())
        .filter(|ok| *ok)
        .count();
    printed.extend(lines.map_while(Result::ok));
    let st = child.wait().unwrap();
    stop.store(true, Ordering::Relaxed);
    std::thread::sleep(Duration::from_millis(100));
    PoolBed::down(PREFIX, NODES);
    let text = printed.join("\n");
    println!("{text}");
    assert!(st.success(), "{st}\n{text}");
    assert_eq!(whole, DOWNLOADS, "downloads broken\n{text}");
    assert!(seen.first_answered, "a genuine heartbeat was not answered");
    assert!(!seen.replay_answered, "a replayed heartbeat was answered");
    assert_eq!(
        trapped.load(Ordering::Relaxed),
        0,
        "copies reached the forged re-ring address"
    );
    assert_eq!(
        forged_out.load(Ordering::Relaxed),
        0,
        "a forged replica's frame left the node"
    );
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let p = &r["node_reports"][0]["pool"];
    let n = |k: &str| p[k].as_u64().unwrap_or(0);
    println!("node 0's pool report: {p}");
    // bare messages are not envelopes; sealed ones fail their tag
    assert!(n("refused_malformed") >= 2 * TIMES, "{p}");
    assert!(n("refused_bad_tag") >= 2 * TIMES, "{p}");
    assert_eq!(n("refused_replayed"), 1, "{p}");
    // replication ran while all this happened, and was acknowledged
    assert!(n("replicated") > 0 && n("acked") > 0, "{p}");
    assert_eq!(n("acks_refused"), 0, "{p}");
}
