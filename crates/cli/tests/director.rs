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
    // the report lists both changes with their reasons, in order
    let placed = r["placements"]
        .as_array()
        .expect("placements in the report");
    let to: Vec<_> = placed.iter().map(|p| p["to"].as_str().unwrap()).collect();
    assert_eq!(to, ["core", "inline"], "{placed:?}");
    assert!(placed[0]["reason"]
        .as_str()
        .unwrap()
        .contains("saves the workers"));
    assert!(placed[0]["at_s"].as_f64().unwrap() < placed[1]["at_s"].as_f64().unwrap());
    assert!(out.contains("director    lb → core at"), "{out}");
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

/// The IDS's matching with `placement = "auto"` in a run: 1 400-byte
/// payloads at 20 000 a second cost the worker several percent, so the
/// director moves the matching to a core of its own while traffic flows,
/// says why, and the alerts are exactly those of an inline run over the same
/// trace, every packet out.
#[test]
fn the_director_moves_the_ids_matching_while_traffic_flows() {
    let trace = tmp("ids-dir.pcap");
    let o = flowshift(&[
        "gen",
        "-o",
        trace.to_str().unwrap(),
        "--flows",
        "500",
        "--packets",
        "30000",
        "--rate",
        "0.02mpps",
        "--tcp-share",
        "1.0",
        "--sizes",
        "fixed:1400",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let run = |placement: &str| {
        let cfg = tmp(&format!("ids-dir-{placement}.toml"));
        // generated payloads run through every byte value: 00 1f 3e once in 256
        std::fs::write(
            &cfg,
            format!(
                "[[nf]]\nkind = \"ids\"\nplacement = \"{placement}\"\n{}\
                 rules = 'alert tcp any any -> any any (msg:\"ramp\"; content:\"|00 1f 3e|\"; sid:1;)'\n",
                if placement == "auto" { "cores = 2\n" } else { "" }
            ),
        )
        .unwrap();
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
        ]);
        let (out, err) = (
            String::from_utf8_lossy(&o.stdout).to_string(),
            String::from_utf8_lossy(&o.stderr).to_string(),
        );
        assert!(o.status.success(), "{err}");
        assert!(out.contains("packets     in 30000  out 30000"), "{out}");
        let ids = out
            .lines()
            .find(|l| l.starts_with("nf ids"))
            .expect("the IDS's counters")
            .to_string();
        if placement == "auto" {
            // the report lists the change too
            assert!(out.contains("director    ids → core at"), "{out}");
        }
        (ids, err)
    };
    let count = |line: &str, name: &str| -> u64 {
        let at = line
            .find(&format!("{name} "))
            .unwrap_or_else(|| panic!("{name} in {line}"));
        line[at + name.len() + 1..]
            .split(|c: char| !c.is_ascii_digit())
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    let (inline, _) = run("inline");
    let (auto, err) = run("auto");
    let moved = err
        .lines()
        .find(|l| l.contains("director: ids matching → core"))
        .unwrap_or_else(|| panic!("no move to a core: {err}"));
    assert!(moved.contains("a core saves the workers"), "{moved}");
    assert!(count(&auto, "placement_changes") >= 1, "{auto}");
    assert!(count(&auto, "offloaded") > 10_000, "{auto}");
    assert!(!auto.contains("offload_lost") || count(&auto, "offload_lost") == 0);
    assert!(count(&inline, "alerts") > 20_000, "{inline}");
    assert_eq!(
        count(&inline, "alerts"),
        count(&auto, "alerts"),
        "{inline}\n{auto}"
    );
    assert_eq!(count(&inline, "scanned"), count(&auto, "scanned"));
}
