//! A streamed replay ([`runtime::Input::Stream`]) forwards what the same
//! trace in memory does, byte for byte — over laps, with one or several
//! NIC-model threads, with shards moving, at a timed pace — while holding a
//! few chunks of it; a capture found truncated halfway replays its packets
//! up to the fault and ends the run with the reason.

use std::path::{Path, PathBuf};
use std::time::Duration;

use nf::ChainConfig;
use runtime::{run, run_on, BalancerKind, Input, RunConfig, RunOutcome};
use trace::{CaptureReader, Generated, Generator, SizeDist, Trace, TraceSpec};

fn spec(packets: u64) -> TraceSpec {
    TraceSpec {
        flows: 1_000,
        packets,
        active_flows: 300,
        sizes: SizeDist::Campus,
        seed: 11,
        ..Default::default()
    }
}

fn bytes(o: &RunOutcome) -> Vec<Vec<u8>> {
    let mut v: Vec<Vec<u8>> = o.output.iter().map(|(_, b)| b.clone()).collect();
    v.sort_unstable();
    v
}

fn capture(name: &str, t: &Trace) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("flowshift-stream-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    trace::write_capture(&p, t.iter()).unwrap();
    p
}

#[test]
fn a_streamed_capture_forwards_what_the_trace_in_memory_does() {
    let chain = ChainConfig::default_chain().build(Path::new(".")).unwrap();
    // campus sizes: 20 000 packets are several chunks of the reader's
    let t = Trace::from_generated(Generator::new(&spec(20_000)).unwrap());
    assert!(t.iter().map(|(_, f)| f.len()).sum::<usize>() > 3 * runtime::replay::CHUNK_BYTES);
    let pcap = capture("s.pcapng", &t);
    let cfg = RunConfig {
        workers: 2,
        keep_output: true,
        pin: false,
        loops: 2,
        burst: 7,
        balancer: BalancerKind::Random,
        period: Duration::from_micros(500),
        ..Default::default()
    };
    let base = run(&chain, &t, &cfg).unwrap();
    assert_eq!(base.report.packets_in, 40_000);
    for k in [1, 3] {
        let c = RunConfig {
            nic_threads: k,
            ..cfg.clone()
        };
        let src = Box::new(CaptureReader::open(&pcap).unwrap());
        let o = run_on(&chain, Input::Stream(src), &c).unwrap();
        assert_eq!(o.input_failure, None);
        assert_eq!(o.report.packets_in, base.report.packets_in, "{k} threads");
        assert_eq!(o.report.packets_out, base.report.packets_out);
        assert_eq!(o.report.reordered, 0);
        assert!(o.report.migrations["shard_moves"] > 0);
        assert!(bytes(&o) == bytes(&base), "byte for byte ({k} threads)");
        let s = o.streamed.expect("a streamed replay says what it read");
        assert_eq!((s.packets, s.laps), (20_000, 2));
    }
    // generated as it goes: the same packets as the generated trace
    let src = Box::new(Generated::new(&spec(20_000)).unwrap());
    let o = run_on(&chain, Input::Stream(src), &cfg).unwrap();
    assert!(
        bytes(&o) == bytes(&base),
        "a generated stream, byte for byte"
    );
    std::fs::remove_dir_all(pcap.parent().unwrap()).ok();
}

#[test]
fn a_timed_streamed_replay_takes_the_traces_time() {
    let chain = ChainConfig::default_chain().build(Path::new(".")).unwrap();
    let t = Trace::from_generated(Generator::new(&spec(6_000)).unwrap());
    // two laps of the trace played in 0.2 s each
    let speed = (t.duration_ns() as f64 / 1e9) / 0.2;
    let cfg = RunConfig {
        workers: 2,
        pin: false,
        loops: 2,
        pace: trace::Pace::Timed { speed },
        ..Default::default()
    };
    let src = Box::new(Generated::new(&spec(6_000)).unwrap());
    let started = std::time::Instant::now();
    let o = run_on(&chain, Input::Stream(src), &cfg).unwrap();
    let took = started.elapsed();
    let r = &o.report;
    assert_eq!(r.packets_in, 12_000);
    assert_eq!(r.packets_in, r.packets_out + r.dropped());
    assert!(
        took >= Duration::from_millis(380),
        "two laps of 0.2 s paced, not rushed: {took:?}"
    );
}

#[test]
fn a_capture_truncated_halfway_replays_up_to_the_fault_and_says_why() {
    let chain = ChainConfig::default_chain().build(Path::new(".")).unwrap();
    let t = Trace::from_generated(Generator::new(&spec(10_000)).unwrap());
    let pcap = capture("cut.pcap", &t);
    let len = std::fs::metadata(&pcap).unwrap().len();
    let f = std::fs::OpenOptions::new().write(true).open(&pcap).unwrap();
    f.set_len(len - 10).unwrap();
    let cfg = RunConfig {
        workers: 2,
        pin: false,
        ..Default::default()
    };
    let src = Box::new(CaptureReader::open(&pcap).unwrap());
    let o = run_on(&chain, Input::Stream(src), &cfg).unwrap();
    let why = o.input_failure.expect("the fault is reported");
    assert!(why.contains("truncated at byte offset"), "{why}");
    assert_eq!(
        o.report.packets_in, 9_999,
        "every whole packet before the fault"
    );
    std::fs::remove_dir_all(pcap.parent().unwrap()).ok();
}
