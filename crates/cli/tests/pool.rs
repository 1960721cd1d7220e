//! `flowshift pool plan` as a user runs it: a tenants file packed by every
//! heuristic within the node's capacity, a tenant larger than a node split,
//! and clear errors.

use std::path::PathBuf;
use std::process::{Command, Output};

fn flowshift(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_flowshift"))
        .args(args)
        .output()
        .expect("runs")
}

fn file(name: &str, text: &str) -> PathBuf {
    let p = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn tenants_are_packed_within_capacity_and_the_large_one_split() {
    let f = file(
        "tenants.toml",
        r#"
[node]
cps = 1000
flows = 1e9
pps = 1e12
gbps = 1000

[[tenant]]
name = "big"
cps = 2500
flows = 10

[[tenant]]
name = "half"
cps = 500
count = 4

[[tenant]]
name = "table7"
size = "FNI_XXS"
"#,
    );
    let o = flowshift(&["pool", "plan", "--tenants", f.to_str().unwrap(), "--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["tenants"], 6);
    // cps 2500 + 2000 + 50 000 (FNI_XXS) over 1 000 per node: 55 nodes' worth
    assert_eq!(v["lower_bound"], 55);
    for p in v["packings"].as_array().unwrap() {
        let nodes = p["packing"]["nodes"].as_array().unwrap();
        assert_eq!(p["nodes"].as_u64().unwrap() as usize, nodes.len());
        assert!(nodes.len() >= 55, "{p}");
        // "big" (tenant 0) in 3 parts on 3 nodes; FNI_XXS (5) in 50
        let parts_of = |t: u64| {
            nodes
                .iter()
                .filter(|n| n.as_array().unwrap().iter().any(|q| q["tenant"] == t))
                .count()
        };
        assert_eq!((parts_of(0), parts_of(5)), (3, 50), "{}", p["heuristic"]);
        for n in nodes {
            let cps: f64 = n
                .as_array()
                .unwrap()
                .iter()
                .map(|q| q["demand"]["cps"].as_f64().unwrap())
                .sum();
            assert!(cps <= 1000.0 + 1e-6, "{cps}");
        }
    }
    let text = flowshift(&["pool", "plan", "--mix", "small", "--count", "50", "--show"]);
    let out = String::from_utf8_lossy(&text.stdout);
    assert!(
        out.contains("lower bound") && out.contains("node   0:"),
        "{out}"
    );
}

#[test]
fn bad_tenants_are_named() {
    for (name, text, says) in [
        (
            "both.toml",
            "[[tenant]]\nname = \"x\"\nsize = \"FNI_M\"\ncps = 1\n",
            "not both",
        ),
        ("none.toml", "[[tenant]]\nname = \"x\"\n", "give a size"),
        (
            "neg.toml",
            "[[tenant]]\nname = \"x\"\ncps = -1\n",
            "finite and ≥ 0",
        ),
        ("empty.toml", "", "no [[tenant]]"),
        (
            "size.toml",
            "[[tenant]]\nname = \"x\"\nsize = \"FNI_XXL\"\n",
            "not a tenants file",
        ),
    ] {
        let f = file(name, text);
        let o = flowshift(&["pool", "plan", "--tenants", f.to_str().unwrap()]);
        assert!(!o.status.success(), "{name}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(says), "{name}: {err}");
    }
    let f = file(
        "never.toml",
        "[node]\ncps = 1\n[[tenant]]\nname = \"x\"\ncps = 2\n",
    );
    let o = flowshift(&[
        "pool",
        "plan",
        "--tenants",
        f.to_str().unwrap(),
        "--split",
        "never",
    ]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("2.00 nodes' worth of cps"));
    let o = flowshift(&["pool", "plan", "--split", "0"]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("--split 0"));
}

#[test]
fn the_simulated_pool_reports_a_failover_without_a_broken_connection() {
    let o = flowshift(&[
        "pool",
        "sim",
        "--connections",
        "100",
        "--packets",
        "150",
        "--kill",
        "2@10",
        "--back",
        "30",
        "--duration",
        "60",
        "--json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(r["broken"], 0, "{r}");
    assert_eq!(r["failovers"], 1, "{r}");
    assert_eq!(r["finished"], 100, "{r}");
    assert_eq!(r["packets_out"], 100 * 150, "{r}");
    let recovery = r["recovery_ns"].as_u64().unwrap();
    assert!(recovery > 0 && recovery < 5_000_000, "{r}");
    assert!(r["syncs"].as_u64().unwrap() >= 2, "{r}");
    for (args, says) in [
        (vec!["--kill", "5@1"], "the pool has nodes 0..2"),
        (vec!["--back", "3"], "--back needs --kill"),
        (
            vec!["--kill", "1@9", "--back", "2"],
            "--back must come after the kill",
        ),
        (vec!["--nodes", "1"], "at least 2"),
    ] {
        let mut v = vec!["pool", "sim"];
        v.extend(&args);
        let o = flowshift(&v);
        assert!(!o.status.success(), "{args:?}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(says), "{args:?}: {err}");
    }
}

#[test]
fn pool_run_refuses_bad_options_before_building_anything() {
    for (args, says) in [
        (vec!["--nodes", "1"], "2 to 16 nodes"),
        (vec!["--prefix", "toolong"], "1 to 6 characters"),
        (vec!["--restart-after", "soon"], "--restart-after soon"),
        (vec!["--duration", "x"], "--duration x"),
        (vec!["--weights", "2,1"], "--weights: 2 weights for 3 nodes"),
        (vec!["--weights", "2,0,1"], "--weights: `0` is not a weight"),
    ] {
        let mut v = vec!["pool", "run", "--out"];
        let out = std::env::temp_dir().join("flowshift-pool-run-bad");
        let out = out.to_str().unwrap().to_string();
        v.push(&out);
        v.extend(&args);
        let o = flowshift(&v);
        assert!(!o.status.success(), "{args:?}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(says), "{args:?}: {err}");
    }
}
