//! The director in a run, as a user sees it: a load balancer with
//! `placement = "auto"` gets a burst of policy requests (a Maglev table
//! rebuilt every 10 ms); the director moves its control component to its
//! core, says why on standard error, moves it back when the requests stop,
//! and no packet is lost to either change.

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

#[test]
fn the_director_moves_the_control_component_while_traffic_flows() {
    let (trace, cfg, json) = (tmp("dir.pcap"), tmp("dir.toml"), tmp("dir.json"));
    let o = flowshift(&[
        "gen",
        "-o",
        trace.to_str().unwrap(),
        "--flows",
        "2000",
        "--packets",
        "200000",
        "--rate",
        "0.2mpps",
        "--tcp-share",
        "1.0",
        "--sizes",
        "fixed:128",
        "--server",
        "198.18.0.1:443",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mut toml = String::from(
        "[[nf]]\nkind = \"lb\"\nplacement = \"auto\"\nsnat = [\"192.0.2.10\", \"192.0.2.11\"]\n\
         [[nf.service]]\nvip = \"198.18.0.1:443\"\n\
         backends = [\"10.1.0.1:8443\", \"10.1.0.2:8443\", \"10.1.0.3:8443\", \"10.1.0.4:8443\"]\n",
    );
    for i in 0..60 {
        toml += &format!(
            "[[nf.health]]\nat = \"{}ms\"\nservice = \"198.18.0.1:443\"\nbackend = \"10.1.0.{}:8443\"\nup = {}\n",
            100 + 10 * i,
            (i / 2) % 4 + 1,
            i % 2 == 1
        );
    }
    std::fs::write(&cfg, toml).unwrap();
    let o = flowshift(&[
        "run",
        "--config",
        cfg.to_str().unwrap(),
        "--input",
        trace.to_str().unwrap(),
        "--speed",
        "1",
        "--workers",
        "1",
        "--json",
        json.to_str().unwrap(),
    ]);
    let (out, err) = (
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
    );
    assert!(o.status.success(), "{err}");
    let to_core = err
        .lines()
        .find(|l| l.contains("director: load balancer control → core"))
        .unwrap_or_else(|| panic!("no move to the core: {err}"));
    assert!(to_core.contains("saves the workers"), "{to_core}");
    assert!(
        err.contains("director: load balancer control → inline"),
        "back inline once the requests stop: {err}"
    );
    let lb = out
        .lines()
        .find(|l| l.starts_with("nf lb"))
        .expect("the LB's counters");
    assert!(lb.contains("placement_changes 2"), "{lb}");
    assert!(lb.contains("control_requests 60"), "{lb}");
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    // every packet accounted for; none dropped by the balancer (a full NIC
    // ring on a loaded machine is the machine's, counted apart)
    let drops = r["drops"].as_object().unwrap();
    for (cause, n) in drops {
        assert!(cause == "ring_full" || n == 0, "{cause}: {n}");
    }
    let dropped: u64 = drops.values().map(|v| v.as_u64().unwrap()).sum();
    assert_eq!(
        r["packets_in"].as_u64().unwrap(),
        r["packets_out"].as_u64().unwrap() + dropped
    );
}
