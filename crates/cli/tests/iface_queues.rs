//! Interfaces with several receive queues, as a multi-queue NIC has: with
//! AF_XDP flowshift opens a socket per queue (user steering: the NIC-model
//! thread reads them all; kernel steering: one per queue and working core,
//! the XDP program picking the core's), and downloads through FW → NAT over
//! a bed of 2-queue veth pairs arrive byte for byte while frames come in on
//! both queues of the client side (`ethtool -S`'s per-queue XDP counters).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};

use netio::testbed::{Bed, SERVER};

mod common;

const PORT: u16 = 7400;
const QUEUES: u32 = 2;

fn pattern(seed: u8) -> Vec<u8> {
    (0..200_000u32)
        .map(|i| (i.wrapping_mul(31) as u8) ^ seed)
        .collect()
}

/// A server answering each connection's first byte with its pattern.
fn server(bed: &Bed) {
    let ns = bed.server();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        netio::netns::enter(&ns).unwrap();
        let l = TcpListener::bind((SERVER, PORT)).unwrap();
        tx.send(()).unwrap();
        for s in l.incoming() {
            let Ok(mut s) = s else { return };
            std::thread::spawn(move || {
                let mut seed = [0u8; 1];
                if s.read_exact(&mut seed).is_ok() {
                    let _ = s.write_all(&pattern(seed[0]));
                }
            });
        }
    });
    rx.recv().unwrap();
}

/// Frames each receive queue of `dev` in namespace `ns` handed to XDP.
fn xdp_packets_per_queue(ns: &str, dev: &str) -> Vec<u64> {
    let out = std::process::Command::new("ip")
        .args(["netns", "exec", ns, "ethtool", "-S", dev])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    (0..QUEUES)
        .map(|q| {
            let key = format!("rx_queue_{q}_xdp_packets:");
            text.lines()
                .find_map(|l| {
                    let l = l.trim();
                    l.strip_prefix(&key)
                        .and_then(|v| v.trim().parse::<u64>().ok())
                })
                .unwrap_or_else(|| panic!("no {key} in ethtool -S {dev}:\n{text}"))
        })
        .collect()
}

#[test]
fn downloads_cross_two_queue_interfaces_over_af_xdp() {
    for steer in ["user", "kernel"] {
        let Some(bed) = netio::testbed::privileged(
            "the network namespace test bed",
            Bed::up_with_queues("fsmq", QUEUES),
        ) else {
            return;
        };
        let config = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("queues.toml");
        std::fs::write(
            &config,
            "[[nf]]\nkind = \"firewall\"\nrules = \"allow tcp 10.0.0.0/8 -> any\"\n\
             [[nf]]\nkind = \"nat\"\ninternal = \"10.0.0.0/8\"\nexternal = [\"203.0.113.0/24\"]\n",
        )
        .unwrap();
        server(&bed);
        let mut run = common::Running::start(&bed, &config, &["--io", "xdp", "--steer", steer]);
        run.wait_forwarding();
        let (a, _) = bed.ifaces();
        let before = xdp_packets_per_queue(&bed.middle(), &a);
        common::downloads(
            &bed.client(),
            SocketAddr::new(SERVER.parse().unwrap(), PORT),
            32,
            8,
            pattern,
        );
        let after = xdp_packets_per_queue(&bed.middle(), &a);
        let out = run.interrupt();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let per: Vec<u64> = after.iter().zip(&before).map(|(x, y)| x - y).collect();
        println!("--steer {steer}: frames per receive queue of {a}: {per:?}");
        // the client's flows spread over its transmit queues, and so over
        // the middle's receive queues: both carried downloads' ACKs
        assert!(per.iter().all(|&n| n > 100), "{per:?}");
        assert!(stdout.contains("reordered   0"), "{stdout}");
        if steer == "kernel" {
            // said once per interface: veth has no RSS table to rewrite
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(
                err.matches("no RSS table in its driver").count(),
                2,
                "{err}"
            );
        }
    }
}
