//! Rules re-planned while traffic flows (`steering.rule_key`, `--balancer
//! roger`) as a user runs them: the cells move between cores within the rule
//! budget, every source keeps its count across the moves (the exact monitor's
//! alerts match one core's), in the runtime, the simulator and on real
//! interfaces through the XDP program; and clear errors.

use std::path::{Path, PathBuf};
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

fn fails(o: &Output) -> String {
    assert!(!o.status.success(), "succeeded");
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn dir() -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("live-rules");
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn write(d: &Path, name: &str, text: &str) -> PathBuf {
    let p = d.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

/// `flowshift gen -o d/name ARGS…`'s trace.
fn gen(d: &Path, name: &str, args: &[&str]) -> PathBuf {
    let t = d.join(name);
    let mut all = vec!["gen", "-o", t.to_str().unwrap()];
    all.extend_from_slice(args);
    ok(&flowshift(&all));
    t
}

fn report(p: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

const CHAIN: &str = "[steering]\nrule_key = \"src-ip:26-31\"\n\n[[nf]]\nkind = \"monitor\"\n\
                     state = \"exact\"\nthreshold_packets = 40\n";

#[test]
fn live_rules_move_cells_and_every_source_keeps_its_count() {
    let d = dir();
    // elephants that live long: loads that persist from one period to the next
    let t = gen(
        &d,
        "persistent.pcap",
        &[
            "--flows",
            "2000",
            "--packets",
            "200000",
            "--lifetimes",
            "sized:1.0",
            "--seed",
            "3",
        ],
    );
    let chain = write(&d, "chain.toml", CHAIN);
    let described = ok(&flowshift(&[
        "chain",
        "check",
        "--config",
        chain.to_str().unwrap(),
    ]));
    assert!(
        described.contains("rules re-planned live on src-ip:26-31: 64 cells"),
        "{described}"
    );
    let run = |name: &str, workers: &str, balancer: &str, extra: &[&str]| {
        let json = d.join(format!("{name}.json"));
        let mut args = vec![
            "run",
            "--config",
            chain.to_str().unwrap(),
            "--input",
            t.to_str().unwrap(),
            "--workers",
            workers,
            "--balancer",
            balancer,
            "--json",
            json.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        ok(&flowshift(&args));
        report(&json)
    };
    let one = run("one", "1", "static", &["--loops", "3"]);
    let alerts = one["nf"]["monitor"]["alerts"].as_u64().unwrap();
    assert!(alerts > 10, "{}", one["nf"]);
    // a short period and the trace three times: many plans while it runs
    let live = run("live", "2", "roger", &["--period", "2ms", "--loops", "3"]);
    let c = &live["controller"];
    assert!(c["replans"].as_f64().unwrap() >= 1.0, "{c}");
    assert!(c["cell_moves"].as_f64().unwrap() >= 1.0, "{c}");
    assert!(c["max_nic_rules"].as_f64().unwrap() <= 32.0, "{c}");
    assert!(live["migrations"]["shard_moves"].as_u64().unwrap() >= 1);
    assert_eq!(live["packets_out"], 600_000);
    assert_eq!(live["reordered"], 0);
    // a source's count moved with its cell: one alert per source over the
    // threshold, as on one core (a count lost in a move would alert late or
    // twice)
    assert_eq!(live["nf"]["monitor"]["alerts"], alerts, "{}", live["nf"]);
    // the simulator runs the same balancer
    let model = d.join("model.toml");
    let bundled = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../sim/default-model.toml"
    ))
    .unwrap();
    std::fs::write(&model, format!("{bundled}\nmonitor = 20.0\n")).unwrap();
    let json = d.join("sim.json");
    ok(&flowshift(&[
        "sim",
        "--config",
        chain.to_str().unwrap(),
        "--input",
        t.to_str().unwrap(),
        "--workers",
        "4",
        "--balancer",
        "roger",
        "--period",
        "10ms",
        "--model",
        model.to_str().unwrap(),
        "--json",
        json.to_str().unwrap(),
    ]));
    let sim = report(&json);
    let c = &sim["controller"];
    assert!(c["replans"].as_f64().unwrap() >= 1.0, "{c}");
    assert!(c["max_nic_rules"].as_f64().unwrap() <= 32.0, "{c}");
    assert_eq!(sim["packets_out"], 200_000);
}

#[test]
fn live_rules_errors_are_named() {
    let d = dir();
    let t = gen(&d, "small.pcap", &["--flows", "50", "--packets", "2000"]);
    let run = |chain: &Path, extra: &[&str]| {
        let mut args = vec![
            "run",
            "--config",
            chain.to_str().unwrap(),
            "--input",
            t.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        fails(&flowshift(&args))
    };
    let plain = write(
        &d,
        "plain.toml",
        "[[nf]]\nkind = \"monitor\"\nstate = \"exact\"\n",
    );
    let e = run(&plain, &["--balancer", "roger"]);
    assert!(e.contains("set `steering.rule_key`"), "{e}");
    // a per-connection NF is refused once, naming the rule key (the run's
    // message says it once, not again as its own cause)
    let fw = write(
        &d,
        "fw.toml",
        "[steering]\nrule_key = \"src-ip:26-31\"\n\n[[nf]]\nkind = \"firewall\"\n\
         rules = \"allow any any -> any\"\n",
    );
    let e = run(&fw, &["--workers", "2"]);
    assert!(e.contains("steering.rule_key"), "{e}");
    assert_eq!(e.matches("keeps per-flow state").count(), 1, "{e}");
    let budget = write(
        &d,
        "budget.toml",
        &format!("{CHAIN}\n[run]\nbalancer = \"roger\"\nworkers = 4\n\n[run.roger]\nbudget = 2\n"),
    );
    let e = run(&budget, &[]);
    assert!(e.contains("[run.roger] budget 2"), "{e}");
    for (text, what) in [
        (
            CHAIN.replace("[steering]\n", "[steering]\nshards = 16\n"),
            "each of the key's 64 values is a shard",
        ),
        (
            CHAIN.replace("src-ip:26-31", "src-ip:20-31"),
            "live rules take at most 9",
        ),
        (
            CHAIN.replace("[steering]\n", "[steering]\nrules = \"plan.json\"\n"),
            "exclude each other",
        ),
        (
            "[steering]\nrule_key = \"src-ip:26-31\"\n\n[[nf]]\nkind = \"firewall\"\n\
             rules = \"allow any any -> any\"\n"
                .to_string(),
            "steering.rule_key",
        ),
    ] {
        let c = write(&d, "bad.toml", &text);
        let e = fails(&flowshift(&[
            "chain",
            "check",
            "--config",
            c.to_str().unwrap(),
        ]));
        assert!(e.contains(what), "{what}: {e}");
    }
}

/// On real interfaces the XDP program steers by the cells and the controller
/// rewrites their cores: the client (10.0.0.2) and the server
/// (198.51.100.2) fall in cells 2 and 1 of `src-ip:3-5`, both on core 0 at
/// the start, so a ping's requests and replies load core 0 alone until Roger
/// re-plans; then both cores carry them, and the ping loses nothing.
#[test]
fn live_rules_steer_frames_from_real_interfaces() {
    let Some(bed) = common::bed("fslr") else {
        return;
    };
    let d = dir();
    let chain = write(
        &d,
        "iface.toml",
        "[steering]\nrule_key = \"src-ip:3-5\"\n\n[[nf]]\nkind = \"monitor\"\nstate = \"exact\"\n",
    );
    for io in [&[][..], &["--io", "xdp", "--steer", "kernel"][..]] {
        let json = d.join("iface.json");
        let sock = d.join("iface.sock");
        let mut args = vec![
            "--control",
            sock.to_str().unwrap(),
            "--json",
            json.to_str().unwrap(),
            "--balancer",
            "roger",
            "--period",
            "50ms",
        ];
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
                "40",
                "-i",
                "0.02",
                "-W",
                "2",
            ])
            .arg(netio::testbed::SERVER)
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&ping.stdout);
        assert!(
            ping.status.success() && said.contains(" 40 received"),
            "{io:?}: {said}"
        );
        // an operator sees the rules the cells' cores need now
        let stats = flowshift(&["ctl", "--socket", sock.to_str().unwrap(), "stats"]);
        let stats = ok(&stats);
        let rules: f64 = stats
            .lines()
            .find_map(|l| l.strip_prefix("flowshift_balancer{counter=\"nic_rules\"} "))
            .unwrap_or_else(|| panic!("{io:?}: no rule count in {stats}"))
            .parse()
            .unwrap();
        assert!((2.0..=8.0).contains(&rules), "{io:?}: {rules}");
        let out = run.interrupt();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{io:?}: {stderr}");
        let r = report(&json);
        let c = &r["controller"];
        assert!(c["replans"].as_f64().unwrap() >= 1.0, "{io:?}: {c}");
        let per: Vec<u64> = r["per_core"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["packets"].as_u64().unwrap())
            .collect();
        assert!(per[0] >= 10 && per[1] >= 10, "{io:?}: {per:?}");
        assert_eq!(r["reordered"], 0, "{io:?}");
    }
}
