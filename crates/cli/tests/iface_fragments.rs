//! IPv4 fragments through FW → NAT on the netns bed, as a user meets them:
//! `ping -s 3000` and UDP datagrams of 4 000 bytes, which the kernels on both
//! sides send as three fragments each (the veths' MTU is 1 500), arrive whole
//! both ways, the server seeing the NAT's address; then a flood of fragments
//! whose first fragment never comes is dropped within the fragment table's
//! bounds, each one counted by cause, and pings still pass after it.

use std::net::{SocketAddr, UdpSocket};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use netio::netns;
use netio::testbed::{Bed, CLIENT, SERVER};

mod common;
use common::Running;

const PORT: u16 = 7321;
const DATAGRAMS: usize = 40;
const SIZE: usize = 4000;
const FLOOD: usize = 20_000;

fn tmp(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name)
}

/// A UDP echo server in the server namespace; sends each datagram's sender
/// (as the NAT mapped it) on the channel.
fn echo_server(bed: &Bed) -> std::sync::mpsc::Receiver<SocketAddr> {
    let ns = bed.server();
    let (tx, rx) = std::sync::mpsc::channel();
    let (ready, up) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        netns::enter(&ns).unwrap();
        let s = UdpSocket::bind((SERVER, PORT)).unwrap();
        ready.send(()).unwrap();
        let mut b = vec![0u8; 65_536];
        while let Ok((n, from)) = s.recv_from(&mut b) {
            let _ = tx.send(from);
            let _ = s.send_to(&b[..n], from);
        }
    });
    up.recv().unwrap();
    rx
}

/// Datagram k of the client's: `SIZE` bytes no two alike.
fn datagram(k: usize) -> Vec<u8> {
    (0..SIZE)
        .map(|i| (i * 7 + k * 13 + i / 251) as u8)
        .collect()
}

/// Sends `DATAGRAMS` datagrams of `SIZE` bytes from the client and returns
/// how many came back whole and equal.
fn udp_round_trips(bed: &Bed) -> usize {
    let ns = bed.client();
    std::thread::spawn(move || {
        netns::enter(&ns).unwrap();
        let s = UdpSocket::bind((CLIENT, 0)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let to = SocketAddr::new(SERVER.parse().unwrap(), PORT);
        let mut b = vec![0u8; 65_536];
        let mut whole = 0;
        for k in 0..DATAGRAMS {
            s.send_to(&datagram(k), to).unwrap();
            if let Ok(n) = s.recv(&mut b) {
                whole += usize::from(b[..n] == datagram(k)[..]);
            }
        }
        whole
    })
    .join()
    .unwrap()
}

/// `ping -c N -s 3000` from the client: the replies received.
fn pings(bed: &Bed, n: u32) -> u32 {
    let out = Command::new("ip")
        .args(["netns", "exec", &bed.client(), "ping", "-c"])
        .arg(n.to_string())
        .args(["-i", "0.2", "-W", "2", "-s", "3000", SERVER])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.contains("received"))
        .unwrap_or_else(|| panic!("ping said: {text}"));
    line.split(", ")
        .find_map(|p| p.strip_suffix(" received")?.parse().ok())
        .unwrap_or_else(|| panic!("ping said: {line}"))
}

/// `FLOOD` later fragments of distinct datagrams, none of which ever sends
/// its first fragment, sent raw from the client's interface.
fn flood(bed: &Bed) {
    let (ns, iface) = (bed.client(), format!("{}c0", bed.prefix));
    std::thread::spawn(move || {
        netns::enter(&ns).unwrap();
        let sock = netio::PacketSocket::open_tx(&iface).unwrap();
        let src: std::net::Ipv4Addr = CLIENT.parse().unwrap();
        let dst: std::net::Ipv4Addr = SERVER.parse().unwrap();
        for k in 0..FLOOD {
            let mut f = vec![0u8; 14 + 20 + 1200];
            f[..6].fill(0xff);
            f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 9]);
            f[12..14].copy_from_slice(&[0x08, 0x00]);
            let ip = &mut f[14..34];
            ip[0] = 0x45;
            ip[2..4].copy_from_slice(&1220u16.to_be_bytes());
            ip[4..6].copy_from_slice(&(k as u16).to_be_bytes());
            // offset 1480 (185 units), more fragments
            ip[6..8].copy_from_slice(&(0x2000u16 | 185).to_be_bytes());
            ip[8] = 64;
            ip[9] = 17;
            ip[12..16].copy_from_slice(&src.octets());
            ip[16..20].copy_from_slice(&dst.octets());
            wire::Ipv4Packet::new_unchecked(&mut f[14..]).fill_checksum();
            while let Err(e) = sock.send(&f) {
                assert!(netio::no_buffer_space(&e), "sending the flood: {e}");
                std::thread::sleep(Duration::from_micros(100));
            }
        }
    })
    .join()
    .unwrap();
}

/// The peak resident memory of process `pid`, bytes.
fn peak_rss(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: u64 = s
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().strip_suffix("kB")?.trim().parse().ok())
        .expect("VmHWM in /proc/PID/status");
    kib << 10
}

#[test]
fn pings_and_udp_of_4000_bytes_arrive_whole_through_fw_nat_and_a_flood_stays_bounded() {
    let Some(bed) = common::bed("fsfr") else {
        return;
    };
    let peers = echo_server(&bed);
    let cfg = tmp("frag-chain.toml");
    std::fs::write(
        &cfg,
        "[[nf]]\nkind = \"firewall\"\nrules = \"\"\"\nallow udp 10.0.0.0/8 -> any\n\
         allow icmp 10.0.0.0/8 -> any\n\"\"\"\n\
         [[nf]]\nkind = \"nat\"\ninternal = \"10.0.0.0/8\"\nexternal = [\"203.0.113.0/24\"]\n",
    )
    .unwrap();
    let json = tmp("frag.json");
    let mut run = Running::start(&bed, &cfg, &["--json", json.to_str().unwrap()]);
    run.wait_forwarding();

    assert_eq!(pings(&bed, 5), 5, "pings of 3 000 bytes");
    assert_eq!(
        udp_round_trips(&bed),
        DATAGRAMS,
        "datagrams of {SIZE} bytes"
    );
    let seen: Vec<SocketAddr> = peers.try_iter().collect();
    assert_eq!(seen.len(), DATAGRAMS);
    assert!(
        seen.iter()
            .all(|a| a.ip().to_string().starts_with("203.0.113.")),
        "the server saw the NAT's address: {seen:?}"
    );

    let before = peak_rss(run.pid());
    flood(&bed);
    let grew = peak_rss(run.pid()) - before;
    eprintln!("peak RSS grew by {} KiB in the flood", grew >> 10);
    // the table holds at most 4 MiB of fragments; the flood was 25 MB
    assert!(grew < 16 << 20, "peak RSS grew by {grew} B in the flood");
    assert_eq!(pings(&bed, 3), 3, "pings after the flood");
    let out = run.interrupt();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let m = &r["malformed"];
    let count = |k: &str| m[k].as_u64().unwrap_or(0);
    // every fragment of the flood dropped, by cause: over the table's bounds
    // or timed out (the ones still held when the run stopped included), or
    // lost in the receive socket when the NIC model fell behind (which may
    // count another packet or two of the bed's)
    let overflow = r["drops"]["rx_overflow"].as_u64().unwrap_or(0);
    let dropped = count("fragment_limit") + count("fragment_timeout");
    assert!(
        dropped <= FLOOD as u64 && dropped + overflow >= FLOOD as u64,
        "{m}, rx_overflow {overflow}"
    );
    assert!(
        count("fragment_limit") > 0,
        "the flood outgrew the table: {m}"
    );
    assert_eq!(count("fragment_overlap") + count("fragment"), 0, "{m}");
    let nat = &r["nf"]["nat"];
    assert!(nat["mappings"].as_u64().unwrap() >= 2, "{nat}");
    common::assert_accounted(&r, "fragments");
}
