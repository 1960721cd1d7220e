//! IPv4 fragments through `flowshift run` on a capture, FW → NAT, the NIC
//! model on one thread, on two parser threads and pre-steered: 40 UDP
//! datagrams of 4 000 bytes, each in three fragments, a third of them with
//! their last fragment first, a duplicate fragment and an orphan one. Every
//! datagram leaves whole: its fragments, put back together, carry the
//! original payload from the NAT's address, with a UDP checksum that holds
//! over the translated datagram (and tshark, which reassembles, agrees);
//! the duplicate and the orphan are counted by cause.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::Command;

use wire::repr::{EthernetRepr, IpRepr, Ipv4Repr, L4Repr, PacketRepr};

const DATAGRAMS: usize = 40;
const SIZE: usize = 4000;

fn tmp(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name)
}

fn payload(k: usize) -> Vec<u8> {
    (0..SIZE).map(|i| (i * 13 + k * 7 + i / 97) as u8).collect()
}

/// Datagram `k` as one frame, then split as a router with a 1 500-byte MTU
/// does (20-byte IPv4 header, no options).
fn fragments(k: usize) -> Vec<Vec<u8>> {
    let whole = PacketRepr {
        eth: EthernetRepr {
            src: [2, 0, 0, 0, 0, 1],
            dst: [2, 0, 0, 0, 0, 2],
            vlan: None,
        },
        ip: IpRepr::V4(Ipv4Repr {
            src: Ipv4Addr::new(10, 0, 0, 1 + (k % 5) as u8),
            dst: Ipv4Addr::new(198, 18, 0, 1),
            dscp: 0,
            ecn: 0,
            ident: 1000 + k as u16,
            dont_frag: false,
            ttl: 64,
            options: vec![],
        }),
        l4: L4Repr::Udp {
            src_port: 5000 + k as u16,
            dst_port: 53,
        },
        payload: payload(k),
    }
    .to_bytes();
    wire::fragments::split(&whole, 1500)
}

/// The capture: every datagram's fragments, a third last-first, one
/// duplicated, and one fragment whose datagram never sends its first.
fn capture() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for k in 0..DATAGRAMS {
        let mut f = fragments(k);
        if k % 3 == 0 {
            f.rotate_right(1);
        }
        if k == 7 {
            // (before the last: once all its bytes passed, a datagram is
            // forgotten, and a late copy waits for a first that never comes)
            let dup = f[1].clone();
            f.insert(2, dup);
        }
        out.extend(f);
    }
    let orphan = fragments(DATAGRAMS + 1).swap_remove(1);
    out.push(orphan);
    out
}

/// A datagram's source, destination and fragments (offset, bytes).
type Pieces = (Ipv4Addr, Ipv4Addr, Vec<(u16, Vec<u8>)>);

/// Puts the forwarded fragments back together: datagram id → (source, the
/// IP payload).
fn reassemble(path: &std::path::Path) -> BTreeMap<u16, (Ipv4Addr, Vec<u8>)> {
    let t = trace::read_pcap(path).unwrap();
    let mut parts: BTreeMap<u16, Pieces> = BTreeMap::new();
    for (_, f) in t.iter() {
        let ip = wire::Ipv4Packet::new_checked(&f[14..]).unwrap();
        assert!(ip.verify_checksum(), "IP checksum of a forwarded fragment");
        let e = parts
            .entry(ip.ident())
            .or_insert((ip.src_addr(), ip.dst_addr(), Vec::new()));
        e.2.push((ip.frag_offset(), ip.payload().to_vec()));
    }
    parts
        .into_iter()
        .map(|(id, (src, dst, mut p))| {
            p.sort();
            let body: Vec<u8> = p.into_iter().flat_map(|(_, b)| b).collect();
            // the UDP checksum covers the whole datagram and the addresses
            assert!(
                wire::UdpPacket::new_unchecked(&body).verify_checksum(src.into(), dst.into()),
                "UDP checksum of datagram {id}"
            );
            (id, (src, body))
        })
        .collect()
}

#[test]
fn fragmented_datagrams_leave_whole_and_translated_on_every_nic_model() {
    let input = tmp("frag-in.pcap");
    let frames = capture();
    trace::write_pcap(
        &input,
        frames.iter().enumerate().map(|(i, f)| (i as u64 * 1000, f)),
    )
    .unwrap();
    let cfg = tmp("frag-replay.toml");
    std::fs::write(
        &cfg,
        "[[nf]]\nkind = \"firewall\"\nrules = \"allow udp 10.0.0.0/8 -> any\"\n\
         [[nf]]\nkind = \"nat\"\ninternal = \"10.0.0.0/8\"\nexternal = [\"203.0.113.0/28\"]\n",
    )
    .unwrap();
    for (name, extra) in [
        ("one", &[][..]),
        ("parsers", &["--nic-threads", "2"][..]),
        ("presteer", &["--presteer"][..]),
    ] {
        let (out, json) = (
            tmp(&format!("frag-out-{name}.pcap")),
            tmp(&format!("frag-{name}.json")),
        );
        let o = Command::new(env!("CARGO_BIN_EXE_flowshift"))
            .args(["run", "--config", cfg.to_str().unwrap()])
            .args(["--input", input.to_str().unwrap()])
            .args(["--output", out.to_str().unwrap()])
            .args(["--json", json.to_str().unwrap(), "--workers", "2"])
            .args(extra)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let r: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        let m = &r["malformed"];
        assert_eq!(
            (
                m["fragment_overlap"].as_u64(),
                m["fragment_timeout"].as_u64()
            ),
            (Some(1), Some(1)),
            "{name}: {m}"
        );
        assert_eq!(
            r["packets_out"].as_u64(),
            Some(3 * DATAGRAMS as u64),
            "{name}"
        );
        let got = reassemble(&out);
        assert_eq!(got.len(), DATAGRAMS, "{name}");
        for (k, (id, (src, body))) in got.iter().enumerate() {
            assert_eq!(*id, 1000 + k as u16);
            assert_eq!(src.octets()[..3], [203, 0, 113], "{name}: translated");
            assert_eq!(body.len(), 8 + SIZE);
            assert_eq!(body[8..], payload(k)[..], "{name}: datagram {k}");
        }
        if name == "one" {
            let v = trace::tshark::validate(&out).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(
                (v.bad_checksums, v.errors, v.warnings),
                (0, 0, 0),
                "{:?}",
                v.samples
            );
        }
    }
}
