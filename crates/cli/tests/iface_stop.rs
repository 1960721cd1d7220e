//! A run on interfaces that is stopped while frames wait in its sockets
//! accounts for every one of them: it says when it forwards, and after Ctrl-C
//! the frames it read are forwarded or dropped by cause, and those it left in
//! the sockets are counted as `unread_at_stop` (kernel and user steering,
//! AF_PACKET and AF_XDP; what an AF_XDP socket's full ring dropped is
//! `rx_overflow`) — `packets_in` covers all that
//! arrived, `packets_in == packets_out + sum(drops)`.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use netio::{netns, PacketSocket};

mod common;

fn tmp(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name)
}

/// A 64 B UDP frame of flow `i` from the client to the server.
fn frame(i: u32, dst: [u8; 6], src: [u8; 6]) -> Vec<u8> {
    use wire::repr::{EthernetRepr, IpRepr, Ipv4Repr, L4Repr, PacketRepr};
    PacketRepr {
        eth: EthernetRepr {
            src,
            dst,
            vlan: None,
        },
        ip: IpRepr::V4(Ipv4Repr {
            src: [10, 0, (i >> 8) as u8, i as u8].into(),
            dst: [198, 51, 100, 2].into(),
            dscp: 0,
            ecn: 0,
            ident: 0,
            dont_frag: false,
            ttl: 64,
            options: Vec::new(),
        }),
        l4: L4Repr::Udp {
            src_port: 1024 + i as u16,
            dst_port: 9,
        },
        payload: vec![0; 18],
    }
    .to_bytes()
}

fn mac(s: &str) -> [u8; 6] {
    let v: Vec<u8> = s
        .split(':')
        .map(|x| u8::from_str_radix(x, 16).unwrap())
        .collect();
    v.try_into().unwrap()
}

fn signal(pid: u32, sig: &str) {
    let k = Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .unwrap();
    assert!(k.success(), "kill {sig}");
}

#[test]
fn frames_left_in_the_sockets_at_stop_are_counted() {
    for (steer, io) in [
        ("kernel", "packet"),
        ("user", "packet"),
        ("kernel", "xdp"),
        ("user", "xdp"),
    ] {
        let Some(bed) = common::bed("fsstop") else {
            return;
        };
        let (unread, overflow) = stop_with_frames_waiting(&bed, steer, io);
        if steer == "kernel" && io == "packet" {
            // the working core reads at most its queue's length before it
            // sees the stop: most of what waited is left in the sockets
            assert!(unread > 0, "{io}: nothing counted unread");
        }
        if io == "xdp" {
            // an AF_XDP socket holds as many frames as it lends the kernel:
            // what came beyond was dropped there, and counted
            assert!(overflow > 0, "{steer}/{io}: no overflow counted");
        }
    }
}

/// A run with `--steer STEER` frozen while frames arrive, then stopped as it
/// wakes: checks its report accounts for them; returns `unread_at_stop` and
/// `rx_overflow`.
fn stop_with_frames_waiting(bed: &netio::testbed::Bed, steer: &str, io: &str) -> (u64, u64) {
    let (a, b) = bed.ifaces();
    let c0 = format!("{}c0", bed.prefix);
    let s0 = format!("{}s0", bed.prefix);
    let config = tmp("iface-stop.toml");
    std::fs::write(
        &config,
        "[table]\ncapacity = 16384\n[[nf]]\nkind = \"firewall\"\n\
         rules = \"allow udp 10.0.0.0/8 -> any\"\n[[nf]]\nkind = \"nat\"\n\
         internal = \"10.0.0.0/8\"\nexternal = [\"203.0.113.0/24\"]\n",
    )
    .unwrap();
    let (json, log) = (tmp("iface-stop.json"), tmp("iface-stop.log"));
    let mut child = Command::new("ip")
        .args(["netns", "exec", &bed.middle()])
        .arg(env!("CARGO_BIN_EXE_flowshift"))
        .args([
            "run",
            "--iface",
            &format!("{a},{b}"),
            "--steer",
            steer,
            "--io",
            io,
        ])
        .args(["--workers", "1", "--balancer", "static", "--config"])
        .arg(&config)
        .arg("--json")
        .arg(&json)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let pid = child.id();
    // it says when it forwards
    let t0 = Instant::now();
    while !std::fs::read_to_string(&log)
        .unwrap()
        .contains("flowshift: forwarding")
    {
        assert!(child.try_wait().unwrap().is_none(), "the run ended early");
        assert!(t0.elapsed() < Duration::from_secs(30), "never forwarding");
        std::thread::sleep(Duration::from_millis(20));
    }
    // frozen, it reads nothing: what is sent waits in its sockets
    signal(pid, "-STOP");
    let before = netns::counter(&bed.middle(), &a, "rx_packets").unwrap();
    const SENT: u32 = 6000;
    let (dst, src) = (
        mac(&netns::mac(&bed.server(), &s0).unwrap()),
        mac(&netns::mac(&bed.client(), &c0).unwrap()),
    );
    let cli = bed.client();
    std::thread::spawn(move || {
        netns::enter(&cli).unwrap();
        let tx = PacketSocket::open_tx(&c0).unwrap();
        for i in 0..SENT {
            tx.send(&frame(i % 500, dst, src)).unwrap();
        }
    })
    .join()
    .unwrap();
    let t0 = Instant::now();
    while netns::counter(&bed.middle(), &a, "rx_packets").unwrap() < before + u64::from(SENT) {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "frames not arriving"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let arrived = netns::counter(&bed.middle(), &a, "rx_packets").unwrap() - before;
    // Ctrl-C lands as it wakes up
    signal(pid, "-INT");
    signal(pid, "-CONT");
    let t0 = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "did not stop");
        std::thread::sleep(Duration::from_millis(20));
    };
    let err = std::fs::read_to_string(&log).unwrap();
    assert!(status.success(), "{status}: {err}");
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let drops = r["drops"].as_object().unwrap();
    let dropped: u64 = drops.values().map(|v| v.as_u64().unwrap()).sum();
    let (pin, pout) = (
        r["packets_in"].as_u64().unwrap(),
        r["packets_out"].as_u64().unwrap(),
    );
    let unread = drops
        .get("unread_at_stop")
        .map_or(0, |v| v.as_u64().unwrap());
    println!(
        "--steer {steer} --io {io}: arrived {arrived}, in {pin}, out {pout}, unread at stop {unread}, {drops:?}"
    );
    assert_eq!(pin, pout + dropped, "in = out + drops: {drops:?}");
    // every frame that arrived while it was frozen is accounted for, and no
    // more than ever reached its interfaces (which also hear the odd IPv6
    // neighbour message)
    let ever: u64 = [&a, &b]
        .iter()
        .map(|d| netns::counter(&bed.middle(), d, "rx_packets").unwrap())
        .sum();
    assert!(
        pin >= u64::from(SENT) && pin <= ever,
        "{pin} in, {arrived} arrived while frozen, {ever} ever: {drops:?}"
    );
    let overflow = drops.get("rx_overflow").map_or(0, |v| v.as_u64().unwrap());
    (unread, overflow)
}

/// The XDP program ids attached to `dev` in namespace `ns` (`ip -d link`'s
/// `prog/xdp id N` or `xdp ... prog/xdp id N`).
fn xdp_programs(ns: &str, dev: &str) -> Vec<String> {
    let out = Command::new("ip")
        .args(["netns", "exec", ns, "ip", "-d", "link", "show", "dev", dev])
        .output()
        .unwrap();
    assert!(out.status.success(), "ip link show {dev}");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let words: Vec<&str> = text.split_whitespace().collect();
    words
        .windows(3)
        .filter(|w| w[0].starts_with("prog/xdp") && w[1] == "id")
        .map(|w| w[2].to_string())
        .collect()
}

/// `kill -9` of a run with the AF_XDP backend leaves no XDP program on its
/// interfaces: the programs are held by BPF links, which the kernel releases
/// with the process (user and kernel steering load different programs).
#[test]
fn kill_9_leaves_no_xdp_program() {
    for steer in ["user", "kernel"] {
        let Some(bed) = common::bed("fskx") else {
            return;
        };
        let (a, b) = bed.ifaces();
        let config = tmp("iface-kill.toml");
        std::fs::write(
            &config,
            "[[nf]]\nkind = \"firewall\"\nrules = \"allow udp 10.0.0.0/8 -> any\"\n",
        )
        .unwrap();
        let log = tmp("iface-kill.log");
        let mut child = Command::new("ip")
            .args(["netns", "exec", &bed.middle()])
            .arg(env!("CARGO_BIN_EXE_flowshift"))
            .args(["run", "--iface", &format!("{a},{b}"), "--io", "xdp"])
            .args(["--steer", steer, "--workers", "1", "--config"])
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        common::wait_forwarding(&log, &mut child);
        for dev in [&a, &b] {
            assert_eq!(
                xdp_programs(&bed.middle(), dev).len(),
                1,
                "--steer {steer}: no XDP program on {dev} while running"
            );
        }
        signal(child.id(), "-KILL");
        let status = child.wait().unwrap();
        assert!(!status.success(), "killed: {status}");
        // the kernel frees the links once the process's files are closed,
        // which `wait` has seen happen
        let t0 = Instant::now();
        for dev in [&a, &b] {
            loop {
                let left = xdp_programs(&bed.middle(), dev);
                if left.is_empty() {
                    break;
                }
                assert!(
                    t0.elapsed() < Duration::from_secs(5),
                    "--steer {steer}: XDP program {left:?} left on {dev} after kill -9"
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

/// The AF_XDP sockets' memory is sized by `[io] xdp_frames` and `xdp_ring`,
/// counted against the memory cap before anything is mapped (refused by
/// name), and reported in the run's memory line and JSON.
#[test]
fn xdp_memory_is_capped_and_reported() {
    let Some(bed) = common::bed("fsxm") else {
        return;
    };
    let (a, b) = bed.ifaces();
    let config = tmp("iface-xdp-mem.toml");
    std::fs::write(
        &config,
        "[table]\ncapacity = 1024\n[io]\nxdp_frames = 8192\nxdp_ring = 1024\n\
         [[nf]]\nkind = \"firewall\"\nrules = \"allow udp 10.0.0.0/8 -> any\"\n",
    )
    .unwrap();
    let run = |extra: &[&str], json: &std::path::Path| {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &bed.middle()])
            .arg(env!("CARGO_BIN_EXE_flowshift"))
            .args(["run", "--iface", &format!("{a},{b}"), "--io", "xdp"])
            .args(["--workers", "1", "--config"])
            .arg(&config)
            .arg("--json")
            .arg(json)
            .args(extra);
        c
    };
    // two interfaces of one queue each: a UMEM of 8192 × 2 KiB (16 MiB) and
    // its rings per queue, above a 24 MiB cap
    let json = tmp("iface-xdp-mem.json");
    let out = run(&["--memcap", "24MiB"], &json).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("AF_XDP UMEM and rings"), "{err}");
    assert!(err.contains("xdp_frames"), "{err}");
    // within the cap it runs, and says what it mapped
    let log = tmp("iface-xdp-mem.log");
    let mut child = run(&[], &json)
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    common::wait_forwarding(&log, &mut child);
    signal(child.id(), "-INT");
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        std::fs::read_to_string(&log).unwrap()
    );
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let ring = 1024u64;
    let per_queue = 8192 * 2048 + 2 * ring * 8 + 2 * ring * 16;
    assert_eq!(r["memory"]["xdp_umem"].as_u64(), Some(2 * per_queue), "{r}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("AF_XDP UMEM and rings 32.1 MiB"),
        "{stdout}"
    );
}
