//! `flowshift run` on a capture larger than `replay_memory` streams it: the
//! same report as the capture held in memory, in a fraction of the memory;
//! a capture found truncated halfway ends the run with the offset and a
//! report of what came before; the default trace is generated as it is
//! replayed.

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

fn report(o: &Output, json: &PathBuf) -> serde_json::Value {
    assert!(
        o.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_str(&std::fs::read_to_string(json).unwrap()).unwrap()
}

#[test]
fn a_capture_larger_than_replay_memory_is_streamed_with_the_same_report() {
    let pcap = tmp("stream.pcap");
    let p = pcap.to_str().unwrap();
    let g = flowshift(&[
        "gen",
        "-o",
        p,
        "--flows",
        "800",
        "--packets",
        "60000",
        "--seed",
        "4",
    ]);
    assert!(g.status.success(), "{}", String::from_utf8_lossy(&g.stderr));
    let size = std::fs::metadata(&pcap).unwrap().len();
    assert!(size > 8 << 20, "several of the reader's chunks: {size} B");
    let mut reports = Vec::new();
    for (memory, name) in [("1GiB", "mem.json"), ("1MiB", "streamed.json")] {
        let json = tmp(name);
        let o = flowshift(&[
            "run",
            "--input",
            p,
            "--workers",
            "2",
            "--loops",
            "2",
            "--replay-memory",
            memory,
            "--json",
            json.to_str().unwrap(),
        ]);
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert_eq!(err.contains("streamed"), memory == "1MiB", "{err}");
        reports.push(report(&o, &json));
    }
    for field in ["packets_in", "packets_out", "reordered"] {
        assert_eq!(reports[0][field], reports[1][field], "{field}");
    }
    assert_eq!(reports[1]["packets_in"].as_u64(), Some(120_000));
    let rss = |r: &serde_json::Value| r["memory"]["max_rss"].as_u64().unwrap();
    assert!(
        rss(&reports[1]) + size < rss(&reports[0]) + (16 << 20),
        "streamed holds chunks, not the capture: {} vs {} B peak",
        rss(&reports[1]),
        rss(&reports[0])
    );

    // cut in the middle of a record near the end: the packets before it
    // are replayed, and the run says where the capture ends
    let cut = tmp("stream-cut.pcap");
    std::fs::copy(&pcap, &cut).unwrap();
    let f = std::fs::OpenOptions::new().write(true).open(&cut).unwrap();
    f.set_len(size - 7).unwrap();
    // streamed, and — a capture small enough to be held whole — read into
    // memory first: the same end, not a refusal before the first packet
    for memory in ["1MiB", "1GiB"] {
        let o = flowshift(&[
            "run",
            "--input",
            cut.to_str().unwrap(),
            "--replay-memory",
            memory,
        ]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "a truncated capture is an error");
        assert!(
            err.contains("the run ended early") && err.contains("truncated at byte offset"),
            "{memory}: {err}"
        );
        assert!(
            String::from_utf8_lossy(&o.stdout).contains("packets     in 59999"),
            "{memory}: the report covers every whole packet: {}",
            String::from_utf8_lossy(&o.stdout)
        );
    }
    for f in [pcap, cut] {
        std::fs::remove_file(f).ok();
    }
}

#[test]
fn the_default_trace_is_generated_as_it_is_replayed() {
    let json = tmp("default.json");
    let o = flowshift(&[
        "run",
        "--workers",
        "1",
        "--duration",
        "300ms",
        "--json",
        json.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(err.contains("generated as it is replayed"), "{err}");
    let r = report(&o, &json);
    assert!(r["packets_in"].as_u64().unwrap() > 1_000);
    assert!(
        r["memory"]["max_rss"].as_u64().unwrap() < 150 << 20,
        "the default run peaks under 150 MiB: {}",
        r["memory"]["max_rss"]
    );
}

#[test]
fn gzip_and_zstd_captures_replay_as_the_plain_one() {
    let pcap = tmp("packed.pcap");
    let p = pcap.to_str().unwrap();
    let g = flowshift(&["gen", "-o", p, "--flows", "300", "--packets", "20000"]);
    assert!(g.status.success(), "{}", String::from_utf8_lossy(&g.stderr));
    let plain = std::fs::read(&pcap).unwrap();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    std::io::Write::write_all(&mut gz, &plain).unwrap();
    let packed = [
        ("gzip", tmp("packed.pcap.gz"), gz.finish().unwrap()),
        (
            "zstd",
            tmp("packed.pcap.zst"),
            zstd::encode_all(&plain[..], 3).unwrap(),
        ),
    ];
    let run = |input: &str, name: &str| {
        let json = tmp(name);
        let args = ["run", "--input", input, "--workers", "2", "--loops", "2"];
        let o = flowshift(&[&args[..], &["--json", json.to_str().unwrap()]].concat());
        (
            String::from_utf8_lossy(&o.stderr).into_owned(),
            report(&o, &json),
        )
    };
    let (_, want) = run(p, "packed-plain.json");
    assert_eq!(want["packets_in"].as_u64(), Some(40_000));
    let stats = |input: &str| {
        let o = flowshift(&["trace", "stats", input]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let want_stats = stats(p);
    for (kind, path, bytes) in &packed {
        std::fs::write(path, bytes).unwrap();
        let input = path.to_str().unwrap();
        // replayed twice (the second lap opens the file again), streamed
        let (err, got) = run(input, &format!("packed-{kind}.json"));
        assert!(
            err.contains(&format!("{kind}-compressed, streamed")),
            "{err}"
        );
        for field in ["packets_in", "packets_out", "reordered"] {
            assert_eq!(got[field], want[field], "{kind}: {field}");
        }
        assert_eq!(stats(input), want_stats, "{kind}: trace stats");
        // held whole by the simulator: its size is counted first
        let o = flowshift(&["sim", "--input", input, "--workers", "2"]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{err}");
        assert!(err.contains("counting its size"), "{err}");
        assert!(
            String::from_utf8_lossy(&o.stdout).contains("packets     in 20000"),
            "{}",
            String::from_utf8_lossy(&o.stdout)
        );
        std::fs::remove_file(path).ok();
    }
    std::fs::remove_file(&pcap).ok();
}
