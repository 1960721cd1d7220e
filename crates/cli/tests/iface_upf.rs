//! The UPF on real interfaces: in the test bed the client namespace plays
//! the UE and its gNB — the UE's TCP stack behind a TUN device, the gNB a
//! relay that tunnels what the UE sends in GTP-U to the UPF's N3 address and
//! hands the UE what comes back in its tunnel — and the server namespace is
//! the data network. An SMF in the middle namespace installs the session
//! over PFCP on the running UPF (the UPF chooses the uplink TEID); the
//! server sees plain TCP from the UE's address, downloads arrive byte for
//! byte, and the session's deletion reports the volumes that crossed.

use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use netio::netns::{self, exec};
use netio::testbed::{Bed, CLIENT, SERVER};
use nf::upf::pfcp::client::Smf;
use nf::upf::rules::{Action, Far, Interface, Pdr};
use wire::gtpu::{self, Gtpu};

mod common;
use common::Running;

const UE: Ipv4Addr = Ipv4Addr::new(10, 60, 0, 1);
const N3: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
const GNB_TEID: u32 = 0x77;
const PORT: u16 = 7201;
const PFCP: &str = "127.0.0.1:8805";

fn pattern(seed: u8) -> Vec<u8> {
    (0..40_000u32)
        .map(|i| (i as u8).wrapping_mul(seed | 1))
        .collect()
}

/// Opens TUN device `name` (made by `ip tuntap`) in the calling thread's
/// namespace: IP packets, no packet information header.
fn open_tun(name: &str) -> std::fs::File {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/net/tun")
        .unwrap();
    #[repr(C)]
    struct IfReq {
        name: [u8; 16],
        flags: libc::c_short,
        _pad: [u8; 22],
    }
    let mut req = IfReq {
        name: [0; 16],
        flags: (libc::IFF_TUN | libc::IFF_NO_PI) as libc::c_short,
        _pad: [0; 22],
    };
    req.name[..name.len()].copy_from_slice(name.as_bytes());
    // SAFETY: TUNSETIFF reads an ifreq, which `req` is laid out as (name,
    // flags, padding to its 40 bytes), and `f` is an open /dev/net/tun.
    let r = unsafe { libc::ioctl(f.as_raw_fd(), 0x4004_54ca, &mut req) };
    assert!(r >= 0, "TUNSETIFF: {}", std::io::Error::last_os_error());
    f
}

/// The UE's side: a TUN device `ue0` with the UE's address, the data
/// network routed through it, the UPF's N3 address reached over the wire
/// (its frames addressed to the server's MAC, as everything the bed's client
/// sends).
fn ue_side(bed: &Bed) {
    let c = bed.client();
    let smac = netns::mac(&bed.server(), &format!("{}s0", bed.prefix)).unwrap();
    let c0 = format!("{}c0", bed.prefix);
    for args in [
        vec!["tuntap", "add", "dev", "ue0", "mode", "tun"],
        vec!["addr", "add", "10.60.0.1/32", "dev", "ue0"],
        vec!["link", "set", "ue0", "mtu", "1400", "up"],
        vec![
            "route",
            "replace",
            "198.51.100.0/24",
            "dev",
            "ue0",
            "src",
            "10.60.0.1",
        ],
        vec!["route", "add", "192.0.2.1/32", "dev", &c0],
        vec![
            "neigh",
            "replace",
            "192.0.2.1",
            "lladdr",
            &smac,
            "dev",
            &c0,
            "nud",
            "permanent",
        ],
    ] {
        exec(&c, "ip", &args).unwrap();
    }
    exec(&c, "sysctl", &["-qw", "net.ipv4.conf.all.rp_filter=0"]).unwrap();
    exec(&c, "sysctl", &["-qw", "net.ipv4.conf.ue0.rp_filter=0"]).unwrap();
}

/// The gNB: UE packets from the TUN device up the tunnel with `teid`, the
/// tunnel's packets down to the TUN device. Runs until `stop`.
fn gnb(bed: &Bed, teid: u32, stop: Arc<AtomicBool>) -> Vec<std::thread::JoinHandle<()>> {
    let ns = bed.client();
    let stop2 = stop.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    let ns2 = ns.clone();
    let up = std::thread::spawn(move || {
        netns::enter(&ns2).unwrap();
        let tun = open_tun("ue0");
        let sock = UdpSocket::bind((CLIENT, gtpu::PORT)).unwrap();
        sock.set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        // SAFETY: dup(2) of an open descriptor; the copy is owned below.
        let down_tun = unsafe { OwnedFd::from_raw_fd(libc::dup(tun.as_raw_fd())) };
        tx.send((sock.try_clone().unwrap(), std::fs::File::from(down_tun)))
            .unwrap();
        let mut buf = vec![0u8; 2048];
        let mut pfd = libc::pollfd {
            fd: tun.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // Relaxed: a flag alone
        while !stop.load(Ordering::Relaxed) {
            // SAFETY: one pollfd, valid for the call.
            if unsafe { libc::poll(&mut pfd, 1, 100) } <= 0 {
                continue;
            }
            let n = match std::io::Read::read(&mut &tun, &mut buf) {
                Ok(n) if n > 0 => n,
                _ => continue,
            };
            let mut pdu = vec![0u8; 8 + n];
            gtpu::emit_header(&mut pdu, teid, None, n);
            pdu[8..].copy_from_slice(&buf[..n]);
            let _ = sock.send_to(&pdu, (N3, gtpu::PORT));
        }
    });
    let (sock, tun) = rx.recv().unwrap();
    let down = std::thread::spawn(move || {
        let mut buf = vec![0u8; 2048];
        // Relaxed: a flag alone
        while !stop2.load(Ordering::Relaxed) {
            // (the socket's 100 ms timeout wakes the loop)
            let Ok(n) = sock.recv(&mut buf) else { continue };
            let Ok(g) = Gtpu::parse(&buf[..n]) else {
                continue;
            };
            assert_eq!(g.teid, GNB_TEID, "the UPF tunnels to the gNB's TEID");
            let _ = std::io::Write::write(&mut &tun, &buf[g.header_len..8 + g.length]);
        }
    });
    vec![up, down]
}

/// The SMF: association, then a session whose uplink TEID the UPF chooses.
fn establish(ns: &str) -> (Smf, u64, u32) {
    netns::enter(ns).unwrap();
    let mut smf = Smf::new(PFCP.parse().unwrap(), Ipv4Addr::LOCALHOST).unwrap();
    assert!(smf.associate().unwrap().accepted());
    let gnb: Ipv4Addr = CLIENT.parse().unwrap();
    let r = smf
        .establish(1, |r| {
            r.create_pdr(
                &Pdr {
                    id: 1,
                    precedence: 10,
                    source: Interface::Access,
                    teid: None,
                    ue: Some(UE),
                    sdf: None,
                    remove_outer: true,
                    far: 1,
                    qers: vec![],
                    urrs: vec![1],
                },
                Some(1),
            )
            .create_pdr(
                &Pdr {
                    id: 2,
                    precedence: 10,
                    source: Interface::Core,
                    teid: None,
                    ue: Some(UE),
                    sdf: None,
                    remove_outer: false,
                    far: 2,
                    qers: vec![],
                    urrs: vec![1],
                },
                None,
            )
            .create_far(&Far {
                id: 1,
                action: Action::Forward,
                tunnel: None,
            })
            .create_far(&Far {
                id: 2,
                action: Action::Forward,
                tunnel: Some((GNB_TEID, gnb)),
            })
            .create_urr(1);
        })
        .unwrap();
    assert!(r.accepted(), "{r:?}");
    (smf, r.seid.unwrap(), r.created[0].1)
}

#[test]
fn a_ue_downloads_through_the_upf_over_real_interfaces() {
    let Some(bed) = common::bed("fsupf") else {
        return;
    };
    let cfg = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("iface-upf.toml");
    std::fs::write(
        &cfg,
        format!("[[nf]]\nkind = \"upf\"\nn3 = \"{N3}\"\npfcp = \"{PFCP}\"\n"),
    )
    .unwrap();
    let mut run = Running::start(&bed, &cfg, &[]);
    run.wait_forwarding();
    let middle = bed.middle();
    let (mut smf, seid, teid) = std::thread::spawn(move || establish(&middle))
        .join()
        .unwrap();
    ue_side(&bed);
    let stop = Arc::new(AtomicBool::new(false));
    let relay = gnb(&bed, teid, stop.clone());

    let server: SocketAddr = format!("{SERVER}:{PORT}").parse().unwrap();
    let (peers_tx, peers) = std::sync::mpsc::channel();
    common::serve_each_peer(&bed.server(), server, peers_tx, pattern);
    common::downloads(&bed.client(), server, 8, 2, pattern);
    let seen: Vec<SocketAddr> = peers.try_iter().collect();
    assert_eq!(seen.len(), 8);
    assert!(
        seen.iter().all(|p| p.ip() == std::net::IpAddr::V4(UE)),
        "the data network sees the UE: {seen:?}"
    );

    let smf_ns = bed.middle();
    let r = std::thread::spawn(move || {
        netns::enter(&smf_ns).unwrap();
        // the delayed merge publishes within its 10 ms period
        std::thread::sleep(Duration::from_millis(50));
        smf.delete(seid).unwrap()
    })
    .join()
    .unwrap();
    assert!(r.accepted(), "{r:?}");
    let (_, vol) = r.usage[0];
    assert!(vol.dl_bytes >= 8 * 40_000, "{vol:?}");
    assert!(vol.ul_packets >= 8 * 3, "{vol:?}");
    stop.store(true, Ordering::Relaxed);
    let out = run.interrupt();
    let err = String::from_utf8_lossy(&out.stderr);
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{err}\n{report}");
    let upf = report
        .lines()
        .find(|l| l.starts_with("nf upf"))
        .expect("UPF counters");
    assert!(
        upf.contains("decapsulated") && upf.contains("encapsulated"),
        "{upf}"
    );
    drop(bed);
    for h in relay {
        let _ = h.join();
    }
}
