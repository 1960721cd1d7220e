//! Inputs a new user's captures and configs contain that once went wrong: each
//! test uses the input that showed the problem.

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn tmp(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name)
}

/// Runs flowshift; fails the test if it takes longer than `limit`.
fn flowshift_within(args: &[&str], limit: Duration) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_flowshift"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("runs");
    let t0 = Instant::now();
    while c.try_wait().unwrap().is_none() {
        if t0.elapsed() > limit {
            let _ = c.kill();
            panic!("flowshift {args:?} still running after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    c.wait_with_output().unwrap()
}

fn ok(o: &Output) -> (String, String) {
    let (out, err) = (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    );
    assert!(o.status.success(), "stdout: {out}\nstderr: {err}");
    (out, err)
}

/// A run's JSON report.
fn report(path: &std::path::Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Offsets of each record header in a classic pcap file.
fn records(b: &[u8]) -> Vec<usize> {
    let mut at = 24;
    let mut out = Vec::new();
    while at + 16 <= b.len() {
        out.push(at);
        let incl = u32::from_le_bytes(b[at + 8..at + 12].try_into().unwrap()) as usize;
        at += 16 + incl;
    }
    out
}

#[test]
fn a_packet_earlier_than_the_first_does_not_hang_a_timed_replay() {
    let p = tmp("backwards.pcap");
    ok(&flowshift_within(
        &[
            "gen",
            "-o",
            p.to_str().unwrap(),
            "--flows",
            "20",
            "--packets",
            "2000",
            "--rate",
            "1mpps",
        ],
        Duration::from_secs(60),
    ));
    // the 4th packet goes back to the epoch, the 10th before the 9th
    let mut b = std::fs::read(&p).unwrap();
    let r = records(&b);
    b[r[3]..r[3] + 8].fill(0);
    let ninth = b[r[8]..r[8] + 8].to_vec();
    b[r[9]..r[9] + 8].copy_from_slice(&ninth);
    let sec = u32::from_le_bytes(b[r[9]..r[9] + 4].try_into().unwrap());
    b[r[9]..r[9] + 4].copy_from_slice(&(sec - 1).to_le_bytes());
    std::fs::write(&p, &b).unwrap();
    for cmd in ["run", "sim"] {
        let json = tmp(&format!("backwards-{cmd}.json"));
        let o = flowshift_within(
            &[
                cmd,
                "--input",
                p.to_str().unwrap(),
                "--speed",
                "1",
                "--json",
                json.to_str().unwrap(),
            ],
            Duration::from_secs(60),
        );
        let (_, err) = ok(&o);
        assert!(
            err.contains("2 packets have a timestamp earlier than the packet before"),
            "{cmd}: {err}"
        );
        let rep = report(&json);
        assert_eq!(rep["packets_in"], 2000, "{cmd}");
        // 2 000 packets at 1 Mpps: the replay takes milliseconds, not ages
        assert!(
            rep["throughput"]["seconds"].as_f64().unwrap() < 5.0,
            "{cmd}"
        );
    }
}

/// An Ethernet + IPv4 + UDP frame of 10.0.0.1:5000 → 198.18.0.1:53 whose IP
/// packet is `ip_len` bytes, followed by `trailer` bytes of Ethernet trailer.
fn udp_frame(ip_len: u16, trailer: usize) -> Vec<u8> {
    let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00];
    let mut ip = vec![
        0x45, 0, 0, 0, 0, 1, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 198, 18, 0, 1,
    ];
    ip[2..4].copy_from_slice(&ip_len.to_be_bytes());
    let sum: u32 = ip
        .chunks(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum();
    let sum = (sum & 0xffff) + (sum >> 16);
    let ck = !((sum & 0xffff) + (sum >> 16)) as u16;
    ip[10..12].copy_from_slice(&ck.to_be_bytes());
    f.extend_from_slice(&ip);
    let udp_len = ip_len - 20;
    f.extend_from_slice(&5000u16.to_be_bytes());
    f.extend_from_slice(&53u16.to_be_bytes());
    f.extend_from_slice(&udp_len.to_be_bytes());
    f.extend_from_slice(&[0, 0]); // no UDP checksum
    f.resize(14 + usize::from(ip_len), 0x5a);
    f.resize(f.len() + trailer, 0);
    f
}

#[test]
fn frames_above_64_kib_are_written_whole() {
    let input = tmp("jumbo-in.pcap");
    let frames = [
        udp_frame(100, 0),
        udp_frame(60_000, 10_000), // 70 014 bytes
        udp_frame(100, 0),
    ];
    trace::write_pcap(
        &input,
        frames.iter().enumerate().map(|(i, f)| (i as u64 * 1000, f)),
    )
    .unwrap();
    let (output, json) = (tmp("jumbo-out.pcap"), tmp("jumbo.json"));
    ok(&flowshift_within(
        &[
            "run",
            "--input",
            input.to_str().unwrap(),
            "--output",
            output.to_str().unwrap(),
            "--json",
            json.to_str().unwrap(),
        ],
        Duration::from_secs(60),
    ));
    let rep = report(&json);
    let out = trace::read_pcap(&output).unwrap();
    assert_eq!(rep["packets_out"].as_u64().unwrap(), out.len() as u64);
    assert_eq!(out.len(), 3, "the default chain forwards all three");
    let mut lens: Vec<usize> = out.iter().map(|(_, f)| f.len()).collect();
    lens.sort_unstable();
    assert_eq!(lens, [114, 114, 70_014]);
    let r = trace::tshark::validate(&output).unwrap();
    assert_eq!(r.packets, 3, "{:?}", r.samples);
}

#[test]
fn two_runs_writing_one_output_leave_one_whole_file() {
    let dir = tmp("two-writers");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (a, b) = (dir.join("a.pcap"), dir.join("b.pcap"));
    for (p, n, seed) in [(&a, "3000", "1"), (&b, "5000", "2")] {
        ok(&flowshift_within(
            &[
                "gen",
                "-o",
                p.to_str().unwrap(),
                "--packets",
                n,
                "--flows",
                "100",
                "--seed",
                seed,
            ],
            Duration::from_secs(60),
        ));
    }
    let (out, json) = (dir.join("out.pcap"), dir.join("out.json"));
    let runs: Vec<_> = [&a, &b]
        .iter()
        .map(|input| {
            Command::new(env!("CARGO_BIN_EXE_flowshift"))
                .args(["run", "--input", input.to_str().unwrap()])
                .args(["--output", out.to_str().unwrap()])
                .args(["--json", json.to_str().unwrap()])
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for r in runs {
        let o = r.wait_with_output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    // one run's output, whole, and its own report beside it
    let t = trace::read_pcap(&out).unwrap();
    let rep = report(&json);
    assert!([3000, 5000].contains(&t.len()), "{} packets", t.len());
    // (each file is some run's whole file; the two may come from different runs)
    assert!([3000, 5000].contains(&rep["packets_in"].as_u64().unwrap()));
    let names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        names.iter().all(|n| !n.starts_with(".flowshift-")),
        "temporary files left: {names:?}"
    );
}

#[test]
fn an_unwritable_output_is_refused_before_the_run_and_leaves_nothing() {
    let dir = tmp("unwritable");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("report.json");
    let o = flowshift_within(
        &[
            "run",
            "--json",
            json.to_str().unwrap(),
            "--output",
            "/nonexistent-dir/out.pcap",
        ],
        Duration::from_secs(20),
    );
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("/nonexistent-dir/out.pcap cannot be written"),
        "{err}"
    );
    assert!(
        !err.contains("packets     in"),
        "refused only after running: {err}"
    );
    assert_eq!(
        std::fs::read_dir(&dir).unwrap().count(),
        0,
        "files left behind"
    );
}

#[test]
fn chain_check_takes_the_file_run_takes() {
    let p = tmp("with-run.toml");
    std::fs::write(
        &p,
        "[run]\nworkers = 2\n[[nf]]\nkind = \"firewall\"\nrules = \"allow any any -> any\"\n",
    )
    .unwrap();
    let o = flowshift_within(
        &["chain", "check", "--config", p.to_str().unwrap()],
        Duration::from_secs(20),
    );
    let (out, _) = ok(&o);
    assert!(out.contains("firewall"), "{out}");
    // and checks the [run] table as run does
    std::fs::write(&p, "[run]\nworkerz = 2\n[[nf]]\nkind = \"monitor\"\n").unwrap();
    let o = flowshift_within(
        &["chain", "check", "--config", p.to_str().unwrap()],
        Duration::from_secs(20),
    );
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("`run.workerz`: unknown field"), "{err}");
    assert_eq!(err.matches("unknown field").count(), 1, "said once: {err}");
}

#[test]
fn evictions_are_counted_in_the_report_by_run_and_sim_alike() {
    let (trace, cfg) = (tmp("evict.pcap"), tmp("evict.toml"));
    ok(&flowshift_within(
        &[
            "gen",
            "-o",
            trace.to_str().unwrap(),
            "--flows",
            "3000",
            "--packets",
            "30000",
        ],
        Duration::from_secs(60),
    ));
    std::fs::write(
        &cfg,
        "[table]\ncapacity = 64\npolicy = \"evict-unassured\"\nevict_min_age = \"0s\"\n\
         [[nf]]\nkind = \"firewall\"\nrules = \"allow any any -> any\"\n",
    )
    .unwrap();
    let mut evicted = Vec::new();
    for cmd in ["run", "sim"] {
        let json = tmp(&format!("evict-{cmd}.json"));
        let (out, _) = ok(&flowshift_within(
            &[
                cmd,
                "--input",
                trace.to_str().unwrap(),
                "--config",
                cfg.to_str().unwrap(),
                "--json",
                json.to_str().unwrap(),
            ],
            Duration::from_secs(120),
        ));
        let rep = report(&json);
        let n = rep["flows"]["evicted"].as_u64().unwrap();
        assert!(n > 0, "{cmd}: {}", rep["flows"]);
        assert!(out.contains(&format!("{n} evicted")), "{cmd}: {out}");
        evicted.push(n);
    }
    // a shard's flows arrive in the same order on any core: the same evictions
    assert_eq!(evicted[0], evicted[1], "run vs sim");
}

#[test]
fn tables_that_would_not_fit_are_refused_before_anything_is_allocated() {
    // 1 024 shards × 65 536 flows with a NAT: ≈ 13 GiB when full (it used to
    // take 24 GB before the first packet, in the NAT's port plan)
    let p = tmp("too-big.toml");
    std::fs::write(
        &p,
        "[steering]\nbuckets = 4096\nshards = 1024\n\
         [[nf]]\nkind = \"nat\"\ninternal = \"10.0.0.0/8\"\nexternal = [\"203.0.113.0/24\"]\n",
    )
    .unwrap();
    for cmd in ["run", "sim"] {
        let o = flowshift_within(
            &[cmd, "--config", p.to_str().unwrap(), "--memcap", "4GiB"],
            Duration::from_secs(20),
        );
        assert!(!o.status.success(), "{cmd}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains("1024 shards × 65536 flows")
                && err.contains("`steering.shards` × `table.capacity`")
                && err.contains("more than 4.0 GiB (--memcap)"),
            "{cmd}: {err}"
        );
    }
    let o = flowshift_within(&["run", "--memcap", "lots"], Duration::from_secs(20));
    assert!(String::from_utf8_lossy(&o.stderr).contains("`lots`: expected a size"));
}

#[test]
fn ctrl_c_mid_run_leaves_a_whole_output_capture_and_report() {
    // (also when it comes twice at once)
    let dir = tmp("ctrl-c");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (out, json) = (dir.join("out.pcap"), dir.join("report.json"));
    // the default trace played 1 000 times: far longer than the test waits
    let c = Command::new(env!("CARGO_BIN_EXE_flowshift"))
        .args(["run", "--loops", "1000"])
        .args(["--output", out.to_str().unwrap()])
        .args(["--json", json.to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // forwarding (and handling signals) once its output file holds more than
    // the capture's 24-byte header: packets have come out
    let t0 = Instant::now();
    while !std::fs::read_dir(&dir).unwrap().any(|e| {
        let e = e.unwrap();
        e.file_name().to_string_lossy().starts_with(".flowshift-")
            && e.metadata().is_ok_and(|m| m.len() > 24)
    }) {
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "the run never forwarded"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // twice in a row, as `timeout -s INT` delivers it (to the command and to
    // its process group): one request to stop, not a second Ctrl-C
    for _ in 0..2 {
        let k = Command::new("kill")
            .args(["-INT", &c.id().to_string()])
            .status()
            .unwrap();
        assert!(k.success());
    }
    let o = c.wait_with_output().unwrap();
    let (stdout, _) = ok(&o);
    let rep = report(&json);
    let written = trace::read_pcap(&out).expect("a whole capture");
    let pout = rep["packets_out"].as_u64().unwrap();
    assert!(pout > 0 && pout < 500_000 * 1000, "{pout}");
    assert_eq!(written.len() as u64, pout, "every forwarded packet written");
    assert!(stdout.contains("packets     in"), "{stdout}");
    let names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
}

#[test]
fn bad_configs_name_the_field_and_what_is_allowed() {
    let ids = |pcre: &str| {
        format!(
            "[[nf]]\nkind = \"ids\"\nrules = \"alert tcp any any -> any any (msg:\\\"x\\\"; pcre:\\\"{pcre}\\\"; sid:1;)\"\n"
        )
    };
    let cases: Vec<(&str, String, &[&str])> = vec![
        ("workers 0", "[run]\nworkers = 0\n[[nf]]\nkind = \"monitor\"\n".into(), &["workers = 0", "between 1 and"]),
        (
            "offload ratio 1.5",
            "[run]\noffloaders = 1\noffload_ratio = 1.5\n[[nf]]\nkind = \"monitor\"\n".into(),
            &["offload_ratio", "between 0 and 1"],
        ),
        ("unknown NF", "[[nf]]\nkind = \"natt\"\n".into(), &["unknown NF kind `natt`", "firewall, nat"]),
        (
            "missing rules file",
            "[[nf]]\nkind = \"firewall\"\nrules_file = \"/nonexistent/rules.acl\"\n".into(),
            &["`nf[0].rules_file`", "/nonexistent/rules.acl"],
        ),
        (
            "catastrophic regex",
            ids("/(a|aa)*(b|bb)*(c|cc)*(d|dd)*[a-z]{200}x/"),
            &["`nf[0].rules`", "size limit"],
        ),
        (
            "LB with no backends",
            "[[nf]]\nkind = \"lb\"\nsnat = [\"198.51.100.1\"]\n[[nf.service]]\nvip = \"192.0.2.1:80\"\nproto = \"tcp\"\nbackends = []\n".into(),
            &["`nf[0].service[0].backends`", "at least one backend"],
        ),
        (
            "NAT pool of one port",
            "[[nf]]\nkind = \"nat\"\ninternal = \"10.0.0.0/8\"\nexternal = [\"203.0.113.1\"]\nports = \"2000-2000\"\n".into(),
            &["`nf[0].ports`", "at least 2048 ports"],
        ),
        (
            "ring of one slot",
            "[run]\nring_size = 1\n[[nf]]\nkind = \"monitor\"\n".into(),
            &["ring_size", "between 2 and"],
        ),
        (
            "table memcap too small",
            "[table]\nmemcap = \"64KiB\"\n[[nf]]\nkind = \"firewall\"\nrules = \"allow any any -> any\"\n".into(),
            &["`table.memcap`", "the smallest memcap for this chain is"],
        ),
        (
            "emergency marks crossed",
            "[table]\nemergency_high = 0.5\nemergency_low = 0.7\n[[nf]]\nkind = \"monitor\"\n".into(),
            &["`table.emergency_low`", "0..emergency_high"],
        ),
    ];
    for (what, toml, want) in cases {
        let p = tmp("bad.toml");
        std::fs::write(&p, &toml).unwrap();
        let o = flowshift_within(
            &["run", "--config", p.to_str().unwrap()],
            Duration::from_secs(30),
        );
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{what}: accepted");
        for w in want {
            assert!(err.contains(w), "{what}: `{w}` not in {err}");
        }
        assert!(!err.contains("panicked"), "{what}: {err}");
    }
}

/// A SYN flood of spoofed sources (from `flowshift gen --syn-flood`) against a
/// chain whose tables are capped by `[table] memcap`: the run refuses what does
/// not fit (counted as `table_full`), accounts for every packet, and the
/// process grows by no more than the cap (plus the run's fixed buffers).
#[test]
fn a_syn_flood_stays_within_the_table_memcap() {
    let trace = tmp("flood.pcap");
    ok(&flowshift_within(
        &[
            "gen",
            "-o",
            trace.to_str().unwrap(),
            "--flows",
            "2000",
            "--packets",
            "40000",
            "--syn-flood",
            "300000",
            "--sizes",
            "fixed:64",
            "--rate",
            "1mpps",
        ],
        Duration::from_secs(60),
    ));
    let cfg = tmp("flood.toml");
    std::fs::write(
        &cfg,
        "[steering]\nshards = 16\n[table]\ncapacity = 1000000\nmemcap = \"8MiB\"\n\
         [[nf]]\nkind = \"firewall\"\nrules = \"allow any 10.0.0.0/8 -> any\"\n\
         [[nf]]\nkind = \"nat\"\ninternal = \"10.0.0.0/8\"\nexternal = [\"203.0.113.0/24\"]\n",
    )
    .unwrap();
    let json = tmp("flood.json");
    let (out, _) = ok(&flowshift_within(
        &[
            "run",
            "--config",
            cfg.to_str().unwrap(),
            "--input",
            trace.to_str().unwrap(),
            "--workers",
            "2",
            "--json",
            json.to_str().unwrap(),
        ],
        Duration::from_secs(120),
    ));
    assert!(out.contains("peak RSS"), "{out}");
    let r = report(&json);
    let n = |v: &serde_json::Value| v.as_u64().unwrap();
    assert_eq!(n(&r["packets_in"]), 340_000);
    let drops: u64 = r["drops"].as_object().unwrap().values().map(n).sum();
    assert_eq!(n(&r["packets_in"]), n(&r["packets_out"]) + drops);
    assert!(n(&r["drops"]["table_full"]) > 200_000, "{}", r["drops"]);
    let m = &r["memory"];
    assert!(n(&m["tables_at_capacity"]) <= 8 << 20, "{m}");
    let grew = n(&m["max_rss"]) - n(&m["rss_start"]);
    assert!(
        grew <= (8 << 20) + (24 << 20),
        "the run grew by {grew} bytes: {m}"
    );
}
