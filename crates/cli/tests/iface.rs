//! flowshift as a network function on real interfaces: `flowshift run --iface`
//! in the middle namespace of the test bed (client — flowshift — server), real
//! Linux TCP, UDP and ICMP endpoints on both sides, firewall → NAT → seqcheck.
//! Every download arrives byte for byte, the server sees only NAT pool
//! addresses, a connection the ACL denies fails, and Ctrl-C ends the run with a
//! complete report and nothing left loaded in the kernel — with shards moving
//! every few milliseconds too, without a single reordered packet (the client's
//! kernel sees no out-of-order segment), with the NIC model steering and with
//! the kernel steering (eBPF; the middle's receive work on one CPU, as a NIC
//! queue's), cores sending through a shared socket or their own transmit rings.
//! A run whose interface goes away ends with its report and an error. Skipped,
//! with a message, where the kernel refuses network namespaces.

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use netio::netns;
use netio::testbed::{Bed, CLIENT, SERVER};

mod common;
use common::Running;

/// The server's download port, every run's: a restarted NAT starts handing
/// out ports at a new place, so the connections the server still holds in
/// TIME_WAIT from the run before do not meet the new ones (the ports above
/// it, up to LAST, are allowed and listened on too).
const ALLOWED: u16 = 7001;
/// Runs (and download ports).
const RUNS: u16 = 3;
const DENIED: u16 = 7009;
const UDP: u16 = 7003;
const CONNECTIONS: usize = 48;
const BYTES: usize = 60_000;

fn tmp(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name)
}

/// The chain: TCP to ALLOWED, UDP and ICMP from the inside pass; the rest is
/// denied. NAT 10.0.0.0/8 → 203.0.113.0/24. Sequence check last. `io`: the
/// `[io]` table's lines.
fn config(test: &str, io: &str) -> PathBuf {
    // one file per test: tests run at the same time
    let p = tmp(&format!("iface-chain-{test}.toml"));
    std::fs::write(
        &p,
        format!(
            r#"
[io]
{io}
[[nf]]
kind = "firewall"
rules = """
allow tcp 10.0.0.0/8 -> any:{ALLOWED}-{LAST}
allow udp 10.0.0.0/8 -> any
allow icmp 10.0.0.0/8 -> any
"""
[[nf]]
kind = "nat"
internal = "10.0.0.0/8"
external = ["203.0.113.0/24"]
[[nf]]
kind = "seqcheck"
"#,
            LAST = ALLOWED + RUNS - 1
        ),
    )
    .unwrap();
    p
}

/// The server: each connection gets BYTES bytes of a pattern seeded by the
/// client's first byte; records every peer address; echoes UDP.
fn server(bed: &Bed, peers: Arc<Mutex<BTreeSet<IpAddr>>>) -> std::thread::JoinHandle<()> {
    let ns = bed.server();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let h = std::thread::spawn(move || {
        netns::enter(&ns).unwrap();
        let listeners: Vec<TcpListener> = (ALLOWED..ALLOWED + RUNS)
            .map(|port| TcpListener::bind((SERVER, port)).unwrap())
            .collect();
        let denied = TcpListener::bind((SERVER, DENIED)).unwrap();
        let udp = UdpSocket::bind((SERVER, UDP)).unwrap();
        ready_tx.send(()).unwrap();
        std::thread::spawn(move || {
            let mut buf = [0u8; 256];
            while let Ok((n, from)) = udp.recv_from(&mut buf) {
                let _ = udp.send_to(&buf[..n], from);
            }
        });
        std::thread::spawn(move || {
            // a connection here means the firewall let it through
            for s in denied.incoming() {
                drop(s);
            }
        });
        for tcp in listeners {
            let peers = peers.clone();
            std::thread::spawn(move || {
                for s in tcp.incoming() {
                    let mut s = s.unwrap();
                    peers.lock().unwrap().insert(s.peer_addr().unwrap().ip());
                    std::thread::spawn(move || {
                        let mut seed = [0u8; 1];
                        if s.read_exact(&mut seed).is_ok() {
                            let _ = s.write_all(&pattern(seed[0]));
                        }
                    });
                }
            });
        }
    });
    ready_rx.recv().unwrap();
    h
}

fn pattern(seed: u8) -> Vec<u8> {
    (0..BYTES)
        .map(|i| (i as u32 * 31 + u32::from(seed)) as u8)
        .collect()
}

/// `CONNECTIONS` downloads from the client namespace, 8 at a time; each must
/// arrive whole.
fn downloads(bed: &Bed, port: u16) {
    let to = SocketAddr::new(SERVER.parse().unwrap(), port);
    common::downloads(&bed.client(), to, CONNECTIONS, 8, pattern);
}

/// UDP echo, ICMP echo and a denied connection, from the client namespace.
fn other_traffic(bed: &Bed) {
    let ns = bed.client();
    let t = Instant::now();
    std::thread::spawn(move || {
        netns::enter(&ns).unwrap();
        let udp = UdpSocket::bind((CLIENT, 0)).unwrap();
        udp.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
        udp.send_to(b"hello", (SERVER, UDP)).unwrap();
        let mut buf = [0u8; 16];
        let (n, _) = udp.recv_from(&mut buf).expect("the UDP echo comes back");
        assert_eq!(&buf[..n], b"hello");
        let to = SocketAddr::new(SERVER.parse().unwrap(), DENIED);
        assert!(
            TcpStream::connect_timeout(&to, Duration::from_millis(800)).is_err(),
            "the ACL denies this port"
        );
    })
    .join()
    .unwrap();
    println!("udp + denied {:?}", t.elapsed());
    let t = Instant::now();
    let ping = Command::new("ip")
        .args([
            "netns",
            "exec",
            &bed.client(),
            "ping",
            "-n",
            "-c",
            "3",
            "-i",
            "0.2",
            "-W",
            "2",
            SERVER,
        ])
        .output()
        .unwrap();
    println!(
        "ping {:?}: {}",
        t.elapsed(),
        String::from_utf8_lossy(&ping.stdout)
            .lines()
            .rev()
            .nth(1)
            .unwrap_or("")
    );
    assert!(
        ping.status.success(),
        "ICMP echo: {}",
        String::from_utf8_lossy(&ping.stdout)
    );
}

/// The client kernel's out-of-order segments and retransmissions.
fn tcp_counters(bed: &Bed) -> (u64, u64) {
    let read = |file: &str, key: &str| -> u64 {
        let out = Command::new("ip")
            .args(["netns", "exec", &bed.client(), "cat", file])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let lines: Vec<&str> = text.lines().collect();
        for pair in lines.chunks(2) {
            let (names, values): (Vec<&str>, Vec<&str>) = (
                pair[0].split_whitespace().collect(),
                pair[1].split_whitespace().collect(),
            );
            if let Some(i) = names.iter().position(|n| *n == key) {
                return values[i].parse().unwrap();
            }
        }
        panic!("{key} not in {file}");
    };
    (
        read("/proc/net/netstat", "TCPOFOQueue"),
        read("/proc/net/snmp", "RetransSegs"),
    )
}

/// `tx`: how cores send (`sendmmsg`, `ring`), or `xdp` for AF_XDP in and
/// out.
fn start(bed: &Bed, balancer: &str, (steer, tx): (&str, &str), json: &Path) -> Running {
    // the interface settings by flags, or by the config's [io] table
    let (flag, key) = if tx == "xdp" {
        ("--io", "backend")
    } else {
        ("--tx", "tx")
    };
    let io = format!("steer = \"{steer}\"\n{key} = \"{tx}\"\nmetrics = \"127.0.0.1:19100\"");
    let (io, flags) = if balancer == "static" {
        (
            String::new(),
            vec!["--steer", steer, flag, tx, "--metrics", "127.0.0.1:19100"],
        )
    } else {
        (io, vec![])
    };
    let mut args = vec![
        "--balancer",
        balancer,
        "--period",
        "5ms",
        "--json",
        json.to_str().unwrap(),
    ];
    args.extend(flags);
    let mut child = Running::start(
        bed,
        &config(&format!("fw-nat-{balancer}-{steer}-{tx}"), &io),
        &args,
    );
    child.wait_forwarding();
    // and a UDP echo crosses it
    let ns = bed.client();
    let t0 = Instant::now();
    std::thread::spawn(move || {
        netns::enter(&ns).unwrap();
        let udp = UdpSocket::bind((CLIENT, 0)).unwrap();
        udp.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let mut buf = [0u8; 8];
        loop {
            udp.send_to(b"up?", (SERVER, UDP)).unwrap();
            if udp.recv_from(&mut buf).is_ok() {
                return;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "flowshift never forwarded"
            );
        }
    })
    .join()
    .unwrap();
    child
}

/// The run's live metrics, scraped from inside its namespace.
fn scrape(bed: &Bed) -> String {
    let ns = bed.middle();
    std::thread::spawn(move || {
        netns::enter(&ns).unwrap();
        let mut s = TcpStream::connect(("127.0.0.1", 19100)).unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        let mut text = String::new();
        s.read_to_string(&mut text).unwrap();
        text
    })
    .join()
    .unwrap()
}

/// The value of a metric line starting with `prefix`.
fn metric(text: &str, prefix: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {prefix} in\n{text}"))
}

/// Ctrl-C: the run ends, reports, exits 0.
fn sigint_and_report(running: Running, json: &Path) -> (String, serde_json::Value) {
    let out = running.interrupt();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "exit {:?}: {}\n{}",
        out.status,
        stdout,
        String::from_utf8_lossy(&out.stderr)
    );
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(json).unwrap()).unwrap();
    (stdout, r)
}

fn check_report(r: &serde_json::Value) {
    let drops = common::drops(r);
    let (pin, pout) = (
        r["packets_in"].as_u64().unwrap(),
        r["packets_out"].as_u64().unwrap(),
    );
    assert_eq!(pin, pout + drops, "in = out + drops: {}", r["drops"]);
    assert_eq!(r["reordered"], 0);
    // offered over the time frames were taken in (a few thousand packets in
    // a few seconds), whoever took them
    let offered = r["throughput"]["offered_mpps"].as_f64().unwrap();
    assert!(offered > 0.0 && offered < 1.0, "offered {offered} Mpps");
    assert!(
        pout > (CONNECTIONS * BYTES / 1500) as u64,
        "{pout} packets out"
    );
}

#[test]
fn fw_nat_on_real_interfaces_static_then_moving_shards() {
    let Some(bed) = common::bed("fsif") else {
        return;
    };
    // (the middle's interfaces have no receive packet steering: the runs
    // turn it on, so a flow's frames reach them in the order they came)
    let peers = Arc::new(Mutex::new(BTreeSet::new()));
    let srv = server(&bed, peers.clone());
    let mut ofo = Vec::new();
    // (balancer, steering, how cores send): moving shards with each core
    // sending through its own transmit ring, and with all sharing a socket;
    // over AF_XDP, steered by the NIC model and by the XDP program
    let runs = [
        ("static", "user", "sendmmsg"),
        ("random", "user", "ring"),
        ("random", "kernel", "sendmmsg"),
        ("random", "user", "xdp"),
        ("random", "kernel", "xdp"),
    ];
    for (balancer, steer, tx) in runs {
        let port = ALLOWED;
        let json = tmp(&format!("iface-{balancer}-{steer}-{tx}.json"));
        let _ = std::fs::remove_file(&json);
        let before = tcp_counters(&bed);
        let t = Instant::now();
        let child = start(&bed, balancer, (steer, tx), &json);
        let t_start = t.elapsed();
        downloads(&bed, port);
        let t_dl = t.elapsed();
        other_traffic(&bed);
        let t_other = t.elapsed();
        // live metrics while it runs (published every 10 ms)
        std::thread::sleep(Duration::from_millis(150));
        let m = scrape(&bed);
        assert!(m.starts_with("HTTP/1.1 200"), "{m}");
        assert!(metric(&m, "flowshift_packets_total{what=\"forwarded\"}") > 1000.0);
        assert!(metric(&m, "flowshift_nf_total{nf=\"nat\",counter=\"mappings\"}") >= 48.0);
        assert!(metric(&m, "flowshift_core_load{core=\"1\",role=\"working\"}") >= 0.0);
        assert!(metric(&m, "flowshift_latency_seconds_count") > 1000.0);
        if balancer == "random" {
            assert!(metric(&m, "flowshift_migrations_total{what=\"shard_moves\"}") > 0.0);
        }
        // the kernel steering program, or one XDP program per interface, is
        // loaded while the run lasts, and gone with it (nothing pinned,
        // nothing attached elsewhere)
        let (program, want) = match (steer, tx) {
            (_, "xdp") => (netio::xdp::program_name(child.pid()), 2),
            ("kernel", _) => (netio::steering::program_name(child.pid()), 1),
            _ => (netio::steering::program_name(child.pid()), 0),
        };
        let loaded = || netio::bpf::loaded_named(&program).unwrap();
        assert_eq!(loaded(), want, "{program}");
        let (stdout, r) = sigint_and_report(child, &json);
        assert_eq!(loaded(), 0, "{program} still loaded after the run");
        println!(
            "{balancer}/{steer}/{tx}: started {t_start:?}, downloads done {t_dl:?}, other {t_other:?}, stopped {:?}",
            t.elapsed()
        );
        let after = tcp_counters(&bed);
        println!("{balancer}/{steer}/{tx}: {stdout}");
        check_report(&r);
        if balancer == "random" {
            assert!(
                r["migrations"]["shard_moves"].as_u64().unwrap() > 10,
                "{}",
                r["migrations"]
            );
        }
        if steer == "kernel" {
            // the balancer's bucket counts came from the kernel program, which
            // counts every IPv4 frame it steers: those read, those a socket
            // dropped and those left in it at stop (all in packets_in), and
            // none that were not IPv4 (`unsteered` if read; left unread, the
            // odd neighbour message is not told apart)
            let counted = r["controller"]["kernel_bucket_packets"]
                .as_f64()
                .expect("kernel_bucket_packets in the report") as u64;
            let pin = r["packets_in"].as_u64().unwrap();
            let unsteered = r["drops"]["unsteered"].as_u64().unwrap_or(0);
            let unread = r["drops"]["unread_at_stop"].as_u64().unwrap_or(0);
            assert!(
                counted + unread.min(16) >= pin - unsteered && counted <= pin - unsteered + 16,
                "kernel counted {counted}, packets in {pin}, unsteered {unsteered}, unread at stop {unread}"
            );
        } else {
            assert!(r["controller"].get("kernel_bucket_packets").is_none());
        }
        ofo.push((
            format!("{balancer}/{steer}/{tx}"),
            after.0 - before.0,
            after.1 - before.1,
        ));
    }
    println!("client TCP (out-of-order queued, retransmitted): {ofo:?}");
    for (b, o, _) in &ofo {
        assert_eq!(*o, 0, "{b}: the client's kernel saw segments out of order");
    }
    // the server saw only NAT pool addresses
    let seen = peers.lock().unwrap().clone();
    assert!(!seen.is_empty());
    for ip in &seen {
        let IpAddr::V4(v4) = ip else { panic!("{ip}") };
        assert_eq!(v4.octets()[..3], [203, 0, 113], "the server saw {ip}");
    }
    drop(srv);
}

#[test]
fn a_run_whose_interface_goes_away_ends_with_its_report_and_an_error() {
    let cfg = config("gone", "");
    // a TPACKET_V3 ring makes no system call while frames flow: it must notice
    // too
    for (steer, rx) in [
        ("user", "recvmmsg"),
        ("kernel", "recvmmsg"),
        ("user", "ring"),
        ("user", "xdp"),
        ("kernel", "xdp"),
    ] {
        // each round deletes an interface: a bed of its own
        let Some(bed) = common::bed("fsgo") else {
            return;
        };
        let (a, _) = bed.ifaces();
        let io = if rx == "xdp" {
            ["--io", "xdp"]
        } else {
            ["--rx", rx]
        };
        let mut run = Running::start(&bed, &cfg, &["--steer", steer, io[0], io[1]]);
        run.wait_forwarding();
        // deleting one end of a veth pair deletes both
        netns::exec(&bed.middle(), "ip", &["link", "del", &a]).unwrap();
        let out = run
            .wait_for(Duration::from_secs(15))
            .unwrap_or_else(|| panic!("{steer}: the run went on without its interface"));
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        assert!(!out.status.success(), "{steer}: exit 0\n{stdout}\n{stderr}");
        assert!(
            stderr.contains("the run ended early") && stderr.contains(&format!("interface {a}")),
            "{steer}: {stderr}"
        );
        assert!(
            stdout.contains("packets     in"),
            "{steer}: no report\n{stdout}"
        );
        // this bed's interfaces have one receive queue and no receive
        // packet steering: the run turns it on, and says so (an XDP program
        // takes frames before it would act)
        assert_eq!(
            stderr.contains(&format!(
                "interface `{a}` has one receive queue: receive packet steering on for the run"
            )),
            rx != "xdp",
            "{steer}/{rx}: {stderr}"
        );
    }
}
