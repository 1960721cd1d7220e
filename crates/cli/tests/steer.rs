//! `flowshift steer plan|sweep` as a user runs them: rules within the budget
//! that carry every packet of the trace, the sweep's rows beside RSS and RSS++,
//! and clear errors.

use std::path::PathBuf;
use std::process::{Command, Output};

fn flowshift(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_flowshift"))
        .args(args)
        .output()
        .expect("runs")
}

fn ok(o: &Output) -> String {
    assert!(
        o.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn trace(name: &str) -> PathBuf {
    let p = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("steer-{name}.pcap"));
    ok(&flowshift(&[
        "gen",
        "-o",
        p.to_str().unwrap(),
        "--flows",
        "400",
        "--packets",
        "30000",
        "--alpha",
        "1.2",
    ]));
    p
}

fn json(o: &Output) -> serde_json::Value {
    serde_json::from_str(&ok(o)).expect("JSON")
}

#[test]
fn plans_carry_every_packet_within_the_budget() {
    let t = trace("plan");
    let input = t.to_str().unwrap();
    for (reduce, max_rules) in [("tree", 8), ("closest", 7)] {
        let v = json(&flowshift(&[
            "steer", "plan", "--input", input, "--budget", "8", "--cores", "4", "--reduce", reduce,
            "--json",
        ]));
        let rules = v["rules"].as_array().unwrap();
        assert!(
            !rules.is_empty() && rules.len() <= max_rules,
            "{reduce}: {v}"
        );
        let per_core: Vec<u64> = v["core_weight"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| w.as_u64().unwrap())
            .collect();
        assert_eq!(per_core.len(), 4);
        // every packet of the trace is in one rule (30 000 and the handshakes)
        let total: u64 = per_core.iter().sum();
        let by_rule: u64 = rules.iter().map(|r| r["weight"].as_u64().unwrap()).sum();
        assert_eq!(total, by_rule);
        assert!(total >= 30_000, "{total}");
        for r in rules {
            assert!(r["core"].as_u64().unwrap() < 4);
            assert_eq!(r["ternary"].as_str().unwrap().len(), 16);
        }
        let imb = v["imbalance"].as_f64().unwrap();
        let max = *per_core.iter().max().unwrap() as f64;
        assert!((imb - max * 4.0 / total as f64).abs() < 1e-9);
    }
    let text = ok(&flowshift(&[
        "steer", "plan", "--input", input, "--budget", "4", "--cores", "2",
    ]));
    assert!(text.contains("imbalance (max / mean)") && text.contains("tiling the key space"));
}

#[test]
fn the_sweep_sets_rule_budgets_beside_rss_and_rsspp() {
    let t = trace("sweep");
    let v = json(&flowshift(&[
        "steer",
        "sweep",
        "--input",
        t.to_str().unwrap(),
        "--cores",
        "4",
        "--budgets",
        "2,8,64",
        "--periods",
        "3",
        "--json",
    ]));
    for k in ["rss", "rsspp"] {
        for half in ["same", "next"] {
            assert!(v[k][half].as_f64().unwrap() >= 1.0, "{v}");
        }
    }
    let rows = v["roger"].as_array().unwrap();
    assert_eq!(rows.len(), 3);
    let imb: Vec<f64> = rows
        .iter()
        .map(|r| r["imbalance"]["same"].as_f64().unwrap())
        .collect();
    for (r, budget) in rows.iter().zip([2u64, 8, 64]) {
        assert!(r["rules"].as_u64().unwrap() <= budget);
        // the rules tile the key space: no packet takes the default
        assert_eq!(r["default_share"].as_f64().unwrap(), 0.0);
    }
    // two rules cannot feed four cores; more rules balance at least as well
    assert!(imb[0] >= 2.0, "{imb:?}");
    assert!(imb[2] <= imb[1] && imb[1] < imb[0], "{imb:?}");
}

#[test]
fn bad_steer_options_are_named() {
    let t = trace("bad");
    let input = t.to_str().unwrap();
    for (args, says) in [
        (vec!["plan", "--bits", "src-mac"], "unknown field `src-mac`"),
        (vec!["plan", "--budget", "1"], "at least 2"),
        (vec!["plan", "--cores", "0"], "--cores must be at least 1"),
        (vec!["sweep", "--reta", "100"], "--reta 100"),
        (vec!["sweep", "--periods", "1"], "--periods 1: at least 2"),
        (
            vec!["plan", "--bits", "src-ip:0-40"],
            "src-ip has bits 0-31",
        ),
    ] {
        let mut v = vec!["steer"];
        v.extend(&args);
        v.extend(["--input", input]);
        let o = flowshift(&v);
        assert!(!o.status.success(), "{args:?} succeeded");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(says), "{args:?}: {err}");
    }
}
