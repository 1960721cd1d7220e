//! The NAT's RFC 4787 behaviours through FW → NAT on the netns bed, with
//! real sockets on both sides and two working cores:
//! - endpoint-independent mapping: one inside UDP socket sending to two
//!   servers is seen by both at the same outside address and port;
//! - endpoint-independent filtering: a third server socket it never sent to
//!   reaches it at that address and port;
//! - a port forward: an outside host reaches a TCP server inside, data both
//!   ways;
//! - hairpinning: an inside host reaches that server by the forward's
//!   outside address, and the server sees the NAT's address.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::path::PathBuf;
use std::process::Command;
use std::sync::mpsc;
use std::time::Duration;

use netio::netns;
use netio::testbed::{Bed, CLIENT, SERVER};

mod common;
use common::Running;

/// The NAT's address.
const NAT: &str = "203.0.113.1";
/// A second server address, beside `SERVER`.
const SERVER2: &str = "198.51.100.3";
/// A second inside address, beside `CLIENT`.
const CLIENT2: &str = "10.0.0.3";
const UDP: u16 = 7401;
const FORWARD: u16 = 80;
const INSIDE: u16 = 8080;

fn tmp(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name)
}

fn sh(ns: &str, args: &[&str]) {
    let s = Command::new("ip")
        .args(["netns", "exec", ns])
        .args(args)
        .status()
        .unwrap();
    assert!(s.success(), "{ns}: {args:?}");
}

fn mac(ns: &str, dev: &str) -> String {
    let out = Command::new("ip")
        .args(["netns", "exec", ns, "cat"])
        .arg(format!("/sys/class/net/{dev}/address"))
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// The second addresses, and the inside's way to the NAT's address (through
/// flowshift, addressed to the server side's MAC as all its frames are).
fn extend(bed: &Bed) {
    let (c, s) = (bed.client(), bed.server());
    let (c0, s0) = (format!("{}c0", bed.prefix), format!("{}s0", bed.prefix));
    let smac = mac(&s, &s0);
    sh(
        &s,
        &["ip", "addr", "add", &format!("{SERVER2}/24"), "dev", &s0],
    );
    sh(
        &c,
        &["ip", "addr", "add", &format!("{CLIENT2}/24"), "dev", &c0],
    );
    // (from the second inside address: the hairpinned client)
    sh(
        &c,
        &[
            "ip",
            "route",
            "add",
            &format!("{NAT}/32"),
            "dev",
            &c0,
            "src",
            CLIENT2,
        ],
    );
    for a in [SERVER2, NAT] {
        sh(
            &c,
            &[
                "ip",
                "neigh",
                "replace",
                a,
                "lladdr",
                &smac,
                "dev",
                &c0,
                "nud",
                "permanent",
            ],
        );
    }
}

/// Runs `f` in namespace `ns` on a thread of its own.
fn inside<T: Send + 'static>(ns: String, f: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::spawn(move || {
        netns::enter(&ns).unwrap();
        f()
    })
    .join()
    .unwrap()
}

/// UDP sockets at both server addresses that report each sender and echo.
fn udp_servers(bed: &Bed) -> mpsc::Receiver<(String, SocketAddr)> {
    let (tx, rx) = mpsc::channel();
    for at in [SERVER, SERVER2] {
        let (ns, tx) = (bed.server(), tx.clone());
        let (ready, up) = mpsc::channel();
        std::thread::spawn(move || {
            netns::enter(&ns).unwrap();
            let s = UdpSocket::bind((at, UDP)).unwrap();
            ready.send(()).unwrap();
            let mut b = [0u8; 1500];
            while let Ok((n, from)) = s.recv_from(&mut b) {
                let _ = tx.send((at.to_string(), from));
                let _ = s.send_to(&b[..n], from);
            }
        });
        up.recv().unwrap();
    }
    rx
}

/// A TCP server inside at `CLIENT:INSIDE`: reports each peer, echoes.
fn tcp_server(bed: &Bed) -> mpsc::Receiver<SocketAddr> {
    common::echo_server(
        &bed.client(),
        SocketAddr::new(CLIENT.parse().unwrap(), INSIDE),
    )
}

/// Connects to `to`, sends 64 KiB and reads them back.
fn echo_tcp(to: SocketAddr) -> bool {
    let mut s = TcpStream::connect_timeout(&to, Duration::from_secs(5))
        .unwrap_or_else(|e| panic!("connecting to {to}: {e}"));
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let data: Vec<u8> = (0..65_536u32).map(|i| (i * 31 % 251) as u8).collect();
    let reader = {
        let mut s = s.try_clone().unwrap();
        std::thread::spawn(move || {
            let mut got = vec![0u8; 65_536];
            s.read_exact(&mut got).map(|_| got)
        })
    };
    s.write_all(&data).unwrap();
    reader.join().unwrap().is_ok_and(|got| got == data)
}

#[test]
fn endpoint_independent_mapping_filtering_port_forward_and_hairpinning() {
    let Some(bed) = common::bed("fsnb") else {
        return;
    };
    extend(&bed);
    let peers = udp_servers(&bed);
    let accepted = tcp_server(&bed);
    let cfg = tmp("nat-behaviour.toml");
    std::fs::write(
        &cfg,
        format!(
            "[[nf]]\nkind = \"firewall\"\nrules = \"\"\"\nallow any 10.0.0.0/8 -> any\n\
             allow udp any -> {NAT}\nallow tcp any -> {NAT}:{FORWARD}\n\"\"\"\n\
             [[nf]]\nkind = \"nat\"\ninternal = \"10.0.0.0/8\"\nexternal = [\"{NAT}\"]\n\
             mapping = \"endpoint-independent\"\nfiltering = \"endpoint-independent\"\n\
             forwards = [\"tcp {NAT}:{FORWARD} -> {CLIENT}:{INSIDE}\"]\n"
        ),
    )
    .unwrap();
    let json = tmp("nat-behaviour.json");
    let mut run = Running::start(&bed, &cfg, &["--json", json.to_str().unwrap()]);
    run.wait_forwarding();

    // one inside socket, two servers: one outside endpoint
    let sock = inside(bed.client(), || {
        let s = UdpSocket::bind((CLIENT, 5555)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
        let mut b = [0u8; 64];
        for to in [SERVER, SERVER2] {
            s.send_to(b"hello", (to, UDP)).unwrap();
            let (n, from) = s.recv_from(&mut b).unwrap();
            assert_eq!(
                (&b[..n], from.ip().to_string()),
                (&b"hello"[..], to.to_string())
            );
        }
        s
    });
    let seen: Vec<(String, SocketAddr)> = peers.try_iter().collect();
    assert_eq!(seen.len(), 2, "{seen:?}");
    let outside = seen[0].1;
    assert_eq!(outside.ip().to_string(), NAT, "{seen:?}");
    assert_eq!(
        seen[1].1, outside,
        "both servers see one endpoint: {seen:?}"
    );

    // a server socket the inside one never sent to reaches it there
    inside(bed.server(), move || {
        let s = UdpSocket::bind((SERVER, UDP + 1)).unwrap();
        s.send_to(b"unsolicited", outside).unwrap();
    });
    let got = inside(bed.client(), move || {
        let mut b = [0u8; 64];
        let (n, from) = sock.recv_from(&mut b).unwrap();
        (b[..n].to_vec(), from)
    });
    assert_eq!(got.0, b"unsolicited");
    assert_eq!(got.1, SocketAddr::new(SERVER.parse().unwrap(), UDP + 1));

    // the port forward: two connections from outside
    let to = SocketAddr::new(NAT.parse().unwrap(), FORWARD);
    for k in 0..2 {
        assert!(inside(bed.server(), move || echo_tcp(to)), "forward {k}");
        let peer = accepted.recv_timeout(Duration::from_secs(1)).unwrap();
        assert_eq!(peer.ip().to_string(), SERVER, "the server sees the client");
    }

    // hairpinning: an inside host (the second address) to the forward's
    // outside endpoint
    assert!(
        inside(bed.client(), move || echo_tcp(to)),
        "hairpinned connection"
    );
    let peer = accepted.recv_timeout(Duration::from_secs(1)).unwrap();
    assert_eq!(
        peer.ip().to_string(),
        NAT,
        "the server sees the NAT's address"
    );

    let out = run.interrupt();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let nat = &r["nf"]["nat"];
    assert!(nat["hairpinned"].as_u64().unwrap() > 10, "{nat}");
    common::assert_accounted(&r, "nat behaviour");
}
