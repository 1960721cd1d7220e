//! What a held-out probe found in replays and on the command line, each
//! with the input that showed it: Ctrl-C during a paced replay's quiet gap,
//! one timestamp a day ahead, core counts whose product would not fit,
//! header-only captures, a config of run settings alone, rates in Mb/s, a
//! record longer than the capture's snap length, run errors before the
//! capture is read.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn tmp(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name)
}

fn flowshift(args: &[&str], limit: Duration) -> Output {
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

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn ok(o: &Output) -> (String, String) {
    let (out, err) = text(o);
    assert!(o.status.success(), "stdout: {out}\nstderr: {err}");
    (out, err)
}

fn report(path: &Path) -> serde_json::Value {
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

/// A generated capture of `packets` packets at 1 Mpps.
fn capture(name: &str, packets: u32) -> PathBuf {
    let p = tmp(name);
    let n = packets.to_string();
    ok(&flowshift(
        &[
            "gen",
            "-o",
            p.to_str().unwrap(),
            "--flows",
            "20",
            "--packets",
            &n,
            "--rate",
            "1mpps",
        ],
        Duration::from_secs(60),
    ));
    p
}

/// Adds `secs` to the timestamps of records `from..` of the pcap at `p`.
fn shift(p: &Path, from: usize, to: Option<usize>, secs: u32) {
    let mut b = std::fs::read(p).unwrap();
    let r = records(&b);
    for &at in &r[from..to.unwrap_or(r.len())] {
        let s = u32::from_le_bytes(b[at..at + 4].try_into().unwrap());
        b[at..at + 4].copy_from_slice(&(s + secs).to_le_bytes());
    }
    std::fs::write(p, &b).unwrap();
}

#[test]
fn ctrl_c_ends_a_paced_replay_waiting_out_a_quiet_gap() {
    // half the packets, then 30 s of quiet, then the rest
    let p = capture("gap.pcap", 1_000);
    shift(&p, 500, None, 30);
    let json = tmp("gap.json");
    let c = Command::new(env!("CARGO_BIN_EXE_flowshift"))
        .args(["run", "--input", p.to_str().unwrap(), "--speed", "1"])
        .args(["--json", json.to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(2));
    let t = Instant::now();
    let k = Command::new("kill")
        .args(["-INT", &c.id().to_string()])
        .status()
        .unwrap();
    assert!(k.success());
    let o = c.wait_with_output().unwrap();
    let stopped = t.elapsed();
    let (out, _) = ok(&o);
    assert!(
        stopped < Duration::from_secs(2),
        "stopped {stopped:?} after Ctrl-C"
    );
    assert!(out.contains("packets     in"), "{out}");
    let r = report(&json);
    assert_eq!(r["packets_in"], 500, "the packets before the gap");
}

#[test]
fn one_timestamp_a_day_ahead_delays_nothing() {
    let p = capture("day-ahead.pcap", 1_000);
    shift(&p, 500, Some(501), 86_400);
    for cmd in ["run", "sim"] {
        let json = tmp(&format!("day-ahead-{cmd}.json"));
        let o = flowshift(
            &[
                cmd,
                "--input",
                p.to_str().unwrap(),
                "--speed",
                "1",
                "--json",
                json.to_str().unwrap(),
            ],
            Duration::from_secs(30),
        );
        let (_, err) = ok(&o);
        assert!(
            err.contains("1 packets have a timestamp more than 60 s after the packet before")
                && err.contains("1 packets have a timestamp earlier than the packet before"),
            "{cmd}: {err}"
        );
        let r = report(&json);
        assert_eq!(r["packets_in"], 1_000, "{cmd}");
        assert!(
            r["throughput"]["seconds"].as_f64().unwrap() < 5.0,
            "{cmd}: {}",
            r["throughput"]
        );
    }
}

#[test]
fn core_counts_whose_product_would_not_fit_are_refused_by_name() {
    let p = capture("cores.pcap", 2_000);
    let t = Instant::now();
    let o = flowshift(
        &[
            "run",
            "--input",
            p.to_str().unwrap(),
            "--workers",
            "256",
            "--offloaders",
            "256",
        ],
        Duration::from_secs(20),
    );
    assert!(!o.status.success());
    let (_, err) = text(&o);
    assert!(
        err.contains("offload rings") && err.contains("`workers` × `offloaders` × `ring_size`"),
        "{err}"
    );
    assert!(t.elapsed() < Duration::from_secs(10));
    // a ring of the largest size on the default cores fits, and runs
    let cfg = tmp("big-ring.toml");
    std::fs::write(&cfg, "[run]\nring_size = 1048576\n").unwrap();
    let (_, err) = ok(&flowshift(
        &[
            "run",
            "--input",
            p.to_str().unwrap(),
            "--config",
            cfg.to_str().unwrap(),
        ],
        Duration::from_secs(60),
    ));
    // a file of run settings alone runs them on the default chain
    assert!(err.contains("has no [[nf]]: the default chain"), "{err}");
    std::fs::write(&cfg, "[run]\nring_size = 1048577\n").unwrap();
    let o = flowshift(
        &[
            "run",
            "--input",
            p.to_str().unwrap(),
            "--config",
            cfg.to_str().unwrap(),
        ],
        Duration::from_secs(20),
    );
    assert!(!o.status.success());
    assert!(text(&o)
        .1
        .contains("run.ring_size = 1048577: must be between 2 and 1048576"));
}

#[test]
fn run_errors_come_before_the_capture_is_read() {
    // the capture does not exist: the error about the run comes first
    let o = flowshift(
        &["run", "--input", "/nonexistent/none.pcap", "--workers", "0"],
        Duration::from_secs(20),
    );
    assert!(!o.status.success());
    assert!(text(&o).1.contains("run.workers = 0"), "{}", text(&o).1);
}

#[test]
fn header_only_captures_replay_whole() {
    let full = tmp("whole.pcap");
    ok(&flowshift(
        &[
            "gen",
            "-o",
            full.to_str().unwrap(),
            "--flows",
            "500",
            "--packets",
            "20000",
        ],
        Duration::from_secs(60),
    ));
    let cut = tmp("header-only.pcap");
    let e = Command::new("editcap")
        .args(["-s", "96", full.to_str().unwrap(), cut.to_str().unwrap()])
        .status()
        .expect("editcap (wireshark-common, installed by scripts/deps.sh)");
    assert!(e.success());
    let mut out = Vec::new();
    for p in [&full, &cut] {
        let json = tmp("header-only.json");
        let (_, err) = ok(&flowshift(
            &[
                "run",
                "--input",
                p.to_str().unwrap(),
                "--json",
                json.to_str().unwrap(),
            ],
            Duration::from_secs(60),
        ));
        let r = report(&json);
        assert_eq!(r["drops"]["malformed"], 0, "{}: {err}", p.display());
        out.push((r["packets_out"].as_u64().unwrap(), err));
    }
    assert_eq!(out[0].0, 20_000);
    assert_eq!(
        out[1].0, out[0].0,
        "every packet the whole capture forwards"
    );
    assert!(
        out[1]
            .1
            .contains("frames were cut by the capture's snap length"),
        "{}",
        out[1].1
    );
}

#[test]
fn a_record_longer_than_the_snap_length_is_read_as_tshark_reads_it() {
    let p = capture("snaplen.pcap", 200);
    let mut b = std::fs::read(&p).unwrap();
    // the header says frames were cut at 40 bytes; the records are whole
    b[16..20].copy_from_slice(&40u32.to_le_bytes());
    std::fs::write(&p, &b).unwrap();
    let json = tmp("snaplen.json");
    ok(&flowshift(
        &[
            "run",
            "--input",
            p.to_str().unwrap(),
            "--json",
            json.to_str().unwrap(),
        ],
        Duration::from_secs(30),
    ));
    assert_eq!(report(&json)["packets_in"], 200);
    let t = Command::new("tshark")
        .args(["-r", p.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(t.status.success());
}

#[test]
fn rates_in_megabits_and_kilopackets() {
    for (rate, seconds) in [("50mbps", 0.33), ("100kpps", 0.2)] {
        let p = tmp("rate.pcap");
        ok(&flowshift(
            &[
                "gen",
                "-o",
                p.to_str().unwrap(),
                "--flows",
                "10",
                "--packets",
                "20000",
                "--sizes",
                "fixed:100",
                "--rate",
                rate,
            ],
            Duration::from_secs(30),
        ));
        let t = trace::read_pcap(&p).unwrap();
        let d = t.duration_ns() as f64 / 1e9;
        // 20 000 frames of 104 B on the wire at 50 Mb/s: 0.33 s; at 100 kpps: 0.2 s
        assert!((d / seconds - 1.0).abs() < 0.05, "{rate}: {d} s");
    }
}
