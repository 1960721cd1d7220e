//! Every generated pcap passes tshark: no malformed packet, no bad checksum, no
//! warning, and as many TCP handshakes as TCP flows generated. A corrupted copy is
//! caught, so the check itself is shown to work.

use std::path::PathBuf;

use trace::tshark::validate;
use trace::{write_pcap, Arrival, Generator, Rate, SizeDist, TraceSpec};

fn tmp(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name)
}

fn specs() -> Vec<(&'static str, TraceSpec)> {
    let base = TraceSpec {
        flows: 60,
        packets: 4000,
        active_flows: 16,
        ..Default::default()
    };
    vec![
        ("campus_v4", base.clone()),
        (
            "fixed64_v6_mix",
            TraceSpec {
                sizes: SizeDist::Fixed(64),
                ipv6_share: 0.5,
                seed: 7,
                ..base.clone()
            },
        ),
        (
            "imix_udp_priority",
            TraceSpec {
                sizes: SizeDist::Imix,
                tcp_share: 0.3,
                priority_share: 0.25,
                arrival: Arrival::OnOff {
                    on_us: 20,
                    off_us: 80,
                },
                rate: Rate::Mpps(2.0),
                seed: 9,
                ..base.clone()
            },
        ),
        (
            "all_tcp_alpha_0_6",
            TraceSpec {
                tcp_share: 1.0,
                alpha: 0.6,
                sizes: SizeDist::Fixed(1518),
                ..base
            },
        ),
    ]
}

#[test]
fn generated_traces_pass_tshark() {
    for (name, spec) in specs() {
        let gen = Generator::new(&spec).unwrap();
        let summary = gen.summary().clone();
        let path = tmp(&format!("{name}.pcap"));
        write_pcap(&path, gen.map(|p| (p.ts_ns, p.frame))).unwrap();
        let r = validate(&path).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.packets, spec.packets, "{name}");
        assert_eq!(r.bad_checksums, 0, "{name}: {:?}", r.samples);
        assert_eq!(
            r.good_checksums, spec.packets,
            "{name}: every packet verified"
        );
        assert_eq!(r.errors, 0, "{name}: {:?}", r.samples);
        assert_eq!(r.warnings, 0, "{name}: {:?}", r.samples);
        assert_eq!(r.syn_only, u64::from(summary.tcp_flows), "{name}");
    }
}

#[test]
fn tshark_check_catches_corruption() {
    let spec = TraceSpec {
        flows: 4,
        packets: 40,
        tcp_share: 1.0,
        ..Default::default()
    };
    let pkts: Vec<_> = Generator::new(&spec).unwrap().collect();
    let mut frames: Vec<(u64, Vec<u8>)> = pkts.into_iter().map(|p| (p.ts_ns, p.frame)).collect();
    frames[0].1[14 + 20 + 16] ^= 0x5a; // TCP checksum of packet 1
    frames[1].1[14 + 10] ^= 0x01; // IPv4 header checksum of packet 2
    frames[2].1.truncate(14 + 20 + 10); // cut inside the TCP header of packet 3
    let path = tmp("corrupted.pcap");
    write_pcap(&path, frames.iter().map(|(t, f)| (*t, &f[..]))).unwrap();
    let r = validate(&path).unwrap();
    assert_eq!(r.bad_checksums, 2, "{r:?}");
    assert!(r.errors >= 1, "the cut packet is malformed: {r:?}");
}
