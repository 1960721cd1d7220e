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
        let rep: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        assert_eq!(rep["packets_in"], 2000, "{cmd}");
        // 2 000 packets at 1 Mpps: the replay takes milliseconds, not ages
        assert!(rep["throughput"]["seconds"].as_f64().unwrap() < 5.0, "{cmd}");
    }
}
