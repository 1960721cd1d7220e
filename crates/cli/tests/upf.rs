//! The UPF as a user runs it: `flowshift gen --gtp-ues` makes N3/N6
//! traffic that tshark dissects as GTP-U, `flowshift run` with a UPF serving
//! the same UEs decapsulates every uplink packet and tunnels every downlink
//! one to the gNB with its UE's TEID, nothing dropped, and bad input gets a
//! clear error.

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::{Command, Output};

fn flowshift(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_flowshift"))
        .args(args)
        .output()
        .expect("runs")
}

fn tmp(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name)
}

fn ok(o: &Output) -> String {
    assert!(
        o.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Per packet: GTP TEID (empty when none), IP sources and destinations (outer
/// first), malformed marks, expert severities.
fn dissect(p: &std::path::Path) -> Vec<Vec<String>> {
    let fields = [
        "gtp.teid",
        "ip.src",
        "ip.dst",
        "_ws.malformed",
        "_ws.expert.severity",
    ];
    let rows = trace::tshark::dissect(p, &["gtp"], &fields).unwrap_or_else(|e| panic!("{e}"));
    for r in &rows {
        assert!(r[3].is_empty(), "{}: malformed: {r:?}", p.display());
        assert!(
            !r[4].split(',').any(|s| s == "8388608"),
            "{}: error: {r:?}",
            p.display()
        );
    }
    rows
}

#[test]
fn generated_n3_traffic_goes_through_the_upf_both_ways() {
    let (input, output, cfg) = (tmp("upf-in.pcap"), tmp("upf-out.pcap"), tmp("upf.toml"));
    let said = ok(&flowshift(&[
        "gen",
        "-o",
        input.to_str().unwrap(),
        "--gtp-ues",
        "50",
        "--flows",
        "300",
        "--packets",
        "20000",
    ]));
    assert!(said.contains("[nf.ues] count = 50"), "{said}");
    let rows = dissect(&input);
    let up_in = rows.iter().filter(|r| !r[0].is_empty()).count();
    assert!(up_in > 5_000 && up_in < 15_000, "{up_in} G-PDUs");
    for r in rows.iter().filter(|r| !r[0].is_empty()) {
        // outer gNB → UPF, inner from a UE
        assert!(r[1].starts_with("192.0.2.2,10.60.0."), "{r:?}");
    }

    std::fs::write(
        &cfg,
        "[[nf]]\nkind = \"upf\"\nn3 = \"192.0.2.1\"\n[nf.ues]\ncount = 50\n",
    )
    .unwrap();
    let report = ok(&flowshift(&[
        "run",
        "--config",
        cfg.to_str().unwrap(),
        "--input",
        input.to_str().unwrap(),
        "--output",
        output.to_str().unwrap(),
        "--workers",
        "2",
        "--balancer",
        "rsspp",
        "--period",
        "5ms",
    ]));
    assert!(
        report.contains("in 20000  out 20000  dropped 0"),
        "{report}"
    );
    let rows = dissect(&output);
    assert_eq!(rows.len(), 20_000);
    let (mut up, mut down) = (0, 0);
    let first = u32::from(Ipv4Addr::new(10, 60, 0, 1));
    for r in &rows {
        if r[0].is_empty() {
            // uplink, tunnel off: from the UE, not from the gNB
            up += 1;
            assert!(r[1].starts_with("10.60.0."), "{r:?}");
        } else {
            // downlink in the UE's own tunnel: UPF → gNB, TEID 0x01000001 + i
            down += 1;
            assert!(r[1].starts_with("192.0.2.1,"), "{r:?}");
            assert!(r[2].starts_with("192.0.2.2,10.60.0."), "{r:?}");
            let ue: Ipv4Addr = r[2].split(',').nth(1).unwrap().parse().unwrap();
            let teid = u32::from_str_radix(r[0].trim_start_matches("0x"), 16).unwrap();
            assert_eq!(teid, 0x0100_0001 + (u32::from(ue) - first), "{r:?}");
        }
    }
    assert_eq!((up, down), (up_in, 20_000 - up_in));
    let counters: HashMap<&str, u64> = report
        .lines()
        .find(|l| l.starts_with("nf upf"))
        .expect("the UPF's counters")
        .split(',')
        .filter_map(|kv| {
            let mut w = kv.split_whitespace().rev();
            let n = w.next()?.parse().ok()?;
            Some((w.next()?, n))
        })
        .collect();
    assert_eq!(counters["decapsulated"], up as u64, "{report}");
    assert_eq!(counters["encapsulated"], down as u64, "{report}");
}

#[test]
fn bad_upf_input_gets_a_clear_error() {
    let o = flowshift(&[
        "gen",
        "-o",
        tmp("x.pcap").to_str().unwrap(),
        "--gtp-ues",
        "0",
    ]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("--gtp-ues 0: 0 UEs"));
    let cfg = tmp("upf-bad.toml");
    for (text, says) in [
        ("n3 = \"192.0.2.1\"\nbuffer = 0", "buffer"),
        ("n3 = \"192.0.2\"", "n3"),
        (
            "n3 = \"192.0.2.1\"\n[nf.ues]\ncount = 10\nteid = 4294967295",
            "ues",
        ),
        ("n3 = \"192.0.2.1\"\npfcp = \"127.0.0.1:99999\"", "pfcp"),
    ] {
        std::fs::write(&cfg, format!("[[nf]]\nkind = \"upf\"\n{text}\n")).unwrap();
        let o = flowshift(&["run", "--config", cfg.to_str().unwrap()]);
        assert!(!o.status.success(), "{text}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(says), "{text}: {err}");
    }
    // a PFCP address another socket holds: the run does not start
    let taken = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let at = taken.local_addr().unwrap();
    std::fs::write(
        &cfg,
        format!("[[nf]]\nkind = \"upf\"\nn3 = \"192.0.2.1\"\npfcp = \"{at}\"\n"),
    )
    .unwrap();
    let o = flowshift(&["run", "--config", cfg.to_str().unwrap()]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(&format!("the PFCP endpoint of `upf` at {at}")),
        "{err}"
    );
}
