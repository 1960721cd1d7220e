//! `flowshift steer plan|sweep` as a user runs them: rules within the budget
//! that carry every packet of the trace, the sweep's rows beside RSS and RSS++,
//! and clear errors.

use std::path::PathBuf;
use std::process::{Command, Output};

mod common;

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
        // the generated trace's shape does nothing to a capture
        (
            vec!["plan", "--lifetimes", "equal"],
            "cannot be used with '--input",
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

/// A monitor counting per source host, steered by a plan's rules: the run and
/// the simulator give each core exactly the packets the plan weighed for it.
#[test]
fn a_plans_rules_steer_the_runtime_and_the_simulator() {
    let t = trace("rules");
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("steer-rules");
    std::fs::create_dir_all(&dir).unwrap();
    let plan = flowshift(&[
        "steer",
        "plan",
        "--input",
        t.to_str().unwrap(),
        "--cores",
        "2",
        "--budget",
        "8",
        "--json",
    ]);
    let plan_text = ok(&plan);
    std::fs::write(dir.join("plan.json"), &plan_text).unwrap();
    let plan: serde_json::Value = serde_json::from_str(&plan_text).unwrap();
    let want: Vec<u64> = plan["core_weight"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w.as_u64().unwrap())
        .collect();
    assert!(want.iter().all(|&w| w > 0), "{want:?}");
    let chain = dir.join("chain.toml");
    std::fs::write(
        &chain,
        "[steering]\nrules = \"plan.json\"\nshards = 16\n\n[[nf]]\nkind = \"monitor\"\nstate = \"exact\"\n",
    )
    .unwrap();
    let described = ok(&flowshift(&[
        "chain",
        "check",
        "--config",
        chain.to_str().unwrap(),
    ]));
    assert!(
        described.contains("steering: 8 ternary rules on src-ip:16-31"),
        "{described}"
    );
    // the bundled cost model has no monitor: give it one
    let model = dir.join("model.toml");
    let bundled = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../sim/default-model.toml"
    ))
    .unwrap();
    std::fs::write(&model, format!("{bundled}\nmonitor = 20.0\n")).unwrap();
    for (mode, extra) in [
        ("run", vec![]),
        ("sim", vec!["--model", model.to_str().unwrap()]),
    ] {
        let json = dir.join(format!("{mode}.json"));
        let mut args = vec![
            mode,
            "--config",
            chain.to_str().unwrap(),
            "--input",
            t.to_str().unwrap(),
            "--workers",
            "2",
            "--balancer",
            "static",
            "--json",
            json.to_str().unwrap(),
        ];
        args.extend(extra);
        ok(&flowshift(&args));
        let r: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        let got: Vec<u64> = r["per_core"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["packets"].as_u64().unwrap())
            .collect();
        assert_eq!(got, want, "{mode}");
        // the exact monitor's counters are shard-local: no flow entries
        assert_eq!(r["flows"]["created"], 0, "{mode}");
    }
    // a plan for more cores than the run has is named
    let o = flowshift(&[
        "run",
        "--config",
        chain.to_str().unwrap(),
        "--input",
        t.to_str().unwrap(),
        "--workers",
        "1",
    ]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("names core 1, but the run has 1 working cores"),
        "{err}"
    );
    // a chain whose state is per connection cannot be steered by header rules
    let fw = dir.join("fw.toml");
    std::fs::write(
        &fw,
        "[steering]\nrules = \"plan.json\"\n\n[[nf]]\nkind = \"firewall\"\nrules = \"allow any any -> any\"\n",
    )
    .unwrap();
    let o = flowshift(&["chain", "check", "--config", fw.to_str().unwrap()]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("steering.rules") && err.contains("bidirectional 5-tuple"),
        "{err}"
    );
}

/// NFLOW/MVT Figs. 5a–c side by side: every row present, every rate positive
/// (the dependent and MVT tables answer alike, or the bench fails).
#[test]
fn bench_mvt_prints_every_comparison() {
    let json = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("mvt.json");
    ok(&flowshift(&[
        "bench-mvt",
        "--ops",
        "20000",
        "--entries",
        "256",
        "--entangled",
        "0,0.5",
        "--sources",
        "1000",
        "--json",
        json.to_str().unwrap(),
    ]));
    let rows: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let rows = rows.as_array().unwrap();
    let fig = |f: &str| rows.iter().filter(|r| r["figure"] == f).count();
    assert_eq!((fig("5a"), fig("5b"), fig("5c")), (2, 2, 2));
    for r in rows {
        assert!(r["dependent_mops"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["mvt_mops"].as_f64().unwrap() > 0.0, "{r}");
    }
    let o = flowshift(&["bench-mvt", "--entangled", "2"]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("--entangled 2: a share in 0..=1"));
}

/// Rule steering on real interfaces: a plan sending frames from 10/8 to core 1
/// and frames from 198/8 to core 0 splits a ping's requests and replies over
/// the two cores (RSS's symmetric hash would keep both on one).
#[test]
fn a_plans_rules_steer_frames_from_real_interfaces() {
    let Some(bed) = common::bed("fsrl") else {
        return;
    };
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("steer-iface");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("plan.json"),
        r#"{"bits":"src-ip:0-7","rules":[{"value":"0xa","mask":"0xff","core":1},{"value":"0xc6","mask":"0xff","core":0}],"default_rule":true}"#,
    )
    .unwrap();
    let chain = dir.join("chain.toml");
    std::fs::write(
        &chain,
        "[steering]\nrules = \"plan.json\"\n\n[[nf]]\nkind = \"monitor\"\nstate = \"exact\"\n",
    )
    .unwrap();
    // in the NIC model, and in the kernel by the XDP program
    for io in [&[][..], &["--io", "xdp", "--steer", "kernel"][..]] {
        let json = dir.join("report.json");
        let mut args = vec!["--json", json.to_str().unwrap()];
        args.extend_from_slice(io);
        let mut run = common::Running::start(&bed, &chain, &args);
        run.wait_forwarding();
        let ping = Command::new("ip")
            .args([
                "netns",
                "exec",
                &bed.client(),
                "ping",
                "-c",
                "20",
                "-i",
                "0.05",
                "-W",
                "2",
            ])
            .arg(netio::testbed::SERVER)
            .output()
            .unwrap();
        assert!(
            ping.status.success(),
            "{io:?}: {}",
            String::from_utf8_lossy(&ping.stdout)
        );
        let out = run.interrupt();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{io:?}: {stderr}");
        let r: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        let per: Vec<u64> = r["per_core"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["packets"].as_u64().unwrap())
            .collect();
        // 20 requests on core 1, 20 replies on core 0 (and the odd IPv6
        // frame, which has no IPv4 source and goes by RSS)
        assert!(per[0] >= 20 && per[1] >= 20, "{io:?}: {per:?}");
        if !io.is_empty() {
            // the XDP program's per-bucket counters saw them (and a frame
            // it had put on the wrong core would have been held there, the
            // ping lost)
            let n = r["controller"]["kernel_bucket_packets"]
                .as_f64()
                .unwrap_or_else(|| panic!("no kernel counters: {}", r["controller"]));
            assert!(n >= 40.0, "{n}");
        }
    }
}

/// The generated trace's lifetimes reach the sweep: where connections live
/// equally long a period's heavy sources are gone in the next and a plan of
/// 16 rules loses most of its gain there; with the default lifetimes
/// (elephants live long) it keeps it.
#[test]
fn sweep_generates_the_lifetimes_asked_for() {
    let sweep = |lifetimes: Option<&str>| -> (f64, f64) {
        let mut args = vec![
            "steer",
            "sweep",
            "--cores",
            "8",
            "--flows",
            "8000",
            "--budgets",
            "16",
            "--json",
        ];
        if let Some(l) = lifetimes {
            args.extend(["--lifetimes", l]);
        }
        let v = json(&flowshift(&args));
        let r = &v["roger"][0]["imbalance"];
        (r["same"].as_f64().unwrap(), r["next"].as_f64().unwrap())
    };
    let (same, next) = sweep(Some("equal"));
    assert!(next > 1.4 * same, "equal: same {same} next {next}");
    let (same, next) = sweep(None);
    assert!(next < 1.1 * same, "default: same {same} next {next}");
}
