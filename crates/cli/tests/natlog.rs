//! `flowshift run --nat-log` as a provider uses it: every mapping the run's
//! NAT creates and deletes is a record — JSON lines read back and matched
//! against the report's counters, or IPFIX messages at a collector that
//! tshark's IPFIX dissector reads — and a queue too small for the rate loses
//! records only by count, never a packet.

use std::collections::HashMap;
use std::net::{Ipv4Addr, UdpSocket};
use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::Duration;

use wire::repr::{EthernetRepr, IpRepr, Ipv4Repr, L4Repr, PacketRepr};

fn tmp(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name)
}

fn flowshift(args: &[&str]) -> Output {
    let o = Command::new(env!("CARGO_BIN_EXE_flowshift"))
        .args(args)
        .output()
        .expect("runs");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    o
}

/// A FW → NAT chain whose mappings expire within milliseconds, so that a
/// short replay deletes mappings as well as creating them; `queue` events
/// per core for the logger.
fn config(name: &str, queue: usize) -> PathBuf {
    let p = tmp(name);
    std::fs::write(
        &p,
        format!(
            "[io]\nnat_log_queue = {queue}\n[table]\ntimer_tick = \"1ms\"\n\
             [[nf]]\nkind = \"firewall\"\nrules = \"allow any 10.0.0.0/8 -> any\"\n\
             [[nf]]\nkind = \"nat\"\ninternal = \"10.0.0.0/8\"\nexternal = [\"203.0.113.0/24\"]\n\
             [nf.timeouts]\ntcp_established = \"2ms\"\ntcp_transitory = \"2ms\"\nudp = \"2ms\"\nicmp = \"2ms\"\n"
        ),
    )
    .unwrap();
    p
}

/// A trace of `flows` connections, paced so that mappings expire while it
/// plays.
fn trace(name: &str, flows: u32) -> PathBuf {
    let p = tmp(name);
    flowshift(&[
        "gen",
        "-o",
        p.to_str().unwrap(),
        "--flows",
        &flows.to_string(),
        "--packets",
        &(flows * 10).to_string(),
        "--seed",
        "5",
    ]);
    p
}

/// The report's NAT counters.
fn nat(report: &PathBuf) -> HashMap<String, u64> {
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(report).unwrap()).unwrap();
    serde_json::from_value(r["nf"]["nat"].clone()).unwrap_or_else(|_| panic!("{}", r["nf"]))
}

/// A mapping as its records name it: (proto, inside, outside).
type Mapping = (u64, String, u64, String, u64);

#[test]
fn every_mapping_is_logged_as_json_lines_created_then_deleted() {
    let (cfg, t) = (
        config("natlog-json.toml", 65_536),
        trace("natlog.pcap", 3_000),
    );
    let (log, report) = (tmp("natlog.jsonl"), tmp("natlog.json"));
    let _ = std::fs::remove_file(&log);
    let o = flowshift(&[
        "run",
        "--config",
        cfg.to_str().unwrap(),
        "--input",
        t.to_str().unwrap(),
        "--workers",
        "2",
        "--speed",
        "0.5",
        "--nat-log",
        &format!("json:{}", log.display()),
        "--json",
        report.to_str().unwrap(),
    ]);
    let n = nat(&report);
    let text = std::fs::read_to_string(&log).unwrap();
    let mut live: HashMap<Mapping, i64> = HashMap::new();
    let (mut created, mut deleted) = (0u64, 0u64);
    for l in text.lines() {
        let v: serde_json::Value = serde_json::from_str(l).unwrap();
        let m: Mapping = (
            v["proto"].as_u64().unwrap(),
            v["int_addr"].as_str().unwrap().to_string(),
            v["int_port"].as_u64().unwrap(),
            v["ext_addr"].as_str().unwrap().to_string(),
            v["ext_port"].as_u64().unwrap(),
        );
        assert!(v["time_ms"].as_u64().unwrap() > 1_600_000_000_000, "{l}");
        let k = live.entry(m).or_default();
        match v["event"].as_str().unwrap() {
            "create" => {
                created += 1;
                *k += 1;
            }
            "delete" => {
                deleted += 1;
                *k -= 1;
                assert!(*k >= 0, "a delete before its create: {l}");
            }
            e => panic!("event {e}"),
        }
    }
    assert_eq!(n["log_lost"], 0);
    assert_eq!(created, n["mappings"], "{n:?}");
    assert_eq!(deleted, n["released"], "{n:?}");
    assert!(
        deleted > 100,
        "mappings expired while the trace played: {n:?}"
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(&format!("NAT log: {} records", created + deleted)),
        "{err}"
    );
}

#[test]
fn a_queue_too_small_loses_records_by_count_never_a_packet() {
    let (cfg, t) = (
        config("natlog-small.toml", 1),
        trace("natlog-s.pcap", 3_000),
    );
    let (log, report) = (tmp("natlog-s.jsonl"), tmp("natlog-s.json"));
    let _ = std::fs::remove_file(&log);
    flowshift(&[
        "run",
        "--config",
        cfg.to_str().unwrap(),
        "--input",
        t.to_str().unwrap(),
        "--workers",
        "2",
        "--nat-log",
        &format!("json:{}", log.display()),
        "--json",
        report.to_str().unwrap(),
    ]);
    let n = nat(&report);
    let lines = std::fs::read_to_string(&log).unwrap().lines().count() as u64;
    assert!(n["log_lost"] > 0, "{n:?}");
    assert_eq!(
        lines + n["log_lost"],
        n["mappings"] + n["released"],
        "{n:?}"
    );
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert_eq!(
        r["packets_in"], r["packets_out"],
        "no packet dropped: {}",
        r["drops"]
    );
}

/// A UDP frame from the exporter to the collector carrying `payload`.
fn frame(payload: &[u8], port: u16) -> Vec<u8> {
    PacketRepr {
        eth: EthernetRepr {
            src: [2, 0, 0, 0, 0, 1],
            dst: [2, 0, 0, 0, 0, 2],
            vlan: None,
        },
        ip: IpRepr::V4(Ipv4Repr {
            src: Ipv4Addr::LOCALHOST,
            dst: Ipv4Addr::LOCALHOST,
            dscp: 0,
            ecn: 0,
            ident: 1,
            dont_frag: true,
            ttl: 64,
            options: vec![],
        }),
        l4: L4Repr::Udp {
            src_port: 40_000,
            dst_port: port,
        },
        payload: payload.to_vec(),
    }
    .to_bytes()
}

#[test]
fn ipfix_records_reach_a_collector_and_tshark_reads_every_one() {
    let collector = UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = collector.local_addr().unwrap().port();
    collector
        .set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let got = std::thread::spawn(move || {
        let mut msgs = Vec::new();
        let mut buf = vec![0u8; 65_536];
        // until the run has been quiet for a while
        let mut quiet = 0;
        while quiet < 20 {
            match collector.recv(&mut buf) {
                Ok(k) => {
                    msgs.push(buf[..k].to_vec());
                    quiet = 0;
                }
                Err(_) => quiet += 1,
            }
        }
        msgs
    });
    let (cfg, t) = (
        config("natlog-ipfix.toml", 65_536),
        trace("natlog-i.pcap", 2_000),
    );
    let report = tmp("natlog-i.json");
    flowshift(&[
        "run",
        "--config",
        cfg.to_str().unwrap(),
        "--input",
        t.to_str().unwrap(),
        "--workers",
        "2",
        "--speed",
        "0.5",
        "--nat-log",
        &format!("ipfix:127.0.0.1:{port}"),
        "--json",
        report.to_str().unwrap(),
    ]);
    let n = nat(&report);
    let msgs = got.join().unwrap();
    let pcap = tmp("natlog-ipfix.pcap");
    trace::pcap::write_pcap(
        &pcap,
        msgs.iter()
            .enumerate()
            .map(|(i, m)| (i as u64 * 1_000, frame(m, port))),
    )
    .unwrap();
    let out = Command::new("tshark")
        .args(["-r", pcap.to_str().unwrap()])
        .args(["-d", &format!("udp.port=={port},cflow")])
        .args(["-T", "fields", "-E", "occurrence=a", "-E", "aggregator=;"])
        .args(["-e", "cflow.nat_event", "-e", "_ws.expert"])
        .output()
        .expect("tshark (installed by scripts/deps.sh)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let (mut create, mut delete) = (0u64, 0u64);
    for line in text.lines() {
        let (events, expert) = line.split_once('\t').unwrap_or((line, ""));
        assert!(expert.is_empty(), "tshark's expert info: {line}");
        for e in events.split(';').filter(|e| !e.is_empty()) {
            match e {
                "8" => create += 1,
                "9" => delete += 1,
                other => panic!("natEvent {other}"),
            }
        }
    }
    assert_eq!(n["log_lost"], 0);
    assert_eq!((create, delete), (n["mappings"], n["released"]), "{n:?}");
    assert!(delete > 0);
    // and the addresses tshark reads are the NAT's
    let addrs = Command::new("tshark")
        .args(["-r", pcap.to_str().unwrap()])
        .args(["-d", &format!("udp.port=={port},cflow")])
        .args(["-T", "fields", "-E", "occurrence=f"])
        .args([
            "-e",
            "cflow.srcaddr",
            "-e",
            "cflow.post_natsource_ipv4_address",
        ])
        .output()
        .unwrap();
    for line in String::from_utf8_lossy(&addrs.stdout).lines() {
        let (inside, outside) = line.split_once('\t').unwrap();
        assert!(inside.starts_with("10."), "{line}");
        assert!(outside.starts_with("203.0.113."), "{line}");
    }
}
