//! pcapng as Wireshark's tools write it: files converted by `editcap`, written by
//! `tshark`, merged from captures of different timestamp resolutions by
//! `mergecap` (two interfaces, µs and ns), cut by a snap length (pcapng and pcap)
//! — read back with
//! the same frames and timestamps as the pcap they came from. flowshift's own
//! pcapng output is read by tshark.

use std::path::{Path, PathBuf};
use std::process::Command;

use trace::tshark::validate;
use trace::{read_pcap, write_capture, write_pcap, Generator, Trace, TraceSpec};

fn tmp(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name)
}

fn tool(name: &str, args: &[&str]) {
    let out = Command::new(name)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{name} (installed by scripts/deps.sh with tshark): {e}"));
    assert!(
        out.status.success(),
        "{name} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// A generated trace written as a nanosecond pcap.
fn source(name: &str, seed: u64) -> (Trace, PathBuf) {
    let spec = TraceSpec {
        flows: 40,
        packets: 600,
        seed,
        ..TraceSpec::default()
    };
    let t = Trace::from_generated(Generator::new(&spec).unwrap());
    let path = tmp(name);
    write_pcap(&path, t.iter()).unwrap();
    (t, path)
}

fn same(a: &Trace, b: &Trace, ts_unit_ns: u64) {
    assert_eq!(a.len(), b.len());
    for i in 0..a.len() {
        assert_eq!(a.frame(i), b.frame(i), "frame {i}");
        assert_eq!(a.orig_len(i), b.orig_len(i), "frame {i}");
        assert_eq!(
            a.ts_ns(i) / ts_unit_ns,
            b.ts_ns(i) / ts_unit_ns,
            "timestamp {i}"
        );
    }
}

#[test]
fn pcapng_from_editcap_and_tshark_reads_like_the_pcap() {
    let (t, pcap) = source("ng-src.pcap", 3);
    let by_editcap = tmp("ng-editcap.pcapng");
    tool("editcap", &["-F", "pcapng", s(&pcap), s(&by_editcap)]);
    same(&t, &read_pcap(&by_editcap).unwrap(), 1);
    let by_tshark = tmp("ng-tshark.pcapng");
    tool(
        "tshark",
        &["-r", s(&pcap), "-F", "pcapng", "-w", s(&by_tshark)],
    );
    same(&t, &read_pcap(&by_tshark).unwrap(), 1);
}

#[test]
fn interfaces_keep_their_own_timestamp_resolution() {
    let (a, a_ns) = source("ng-a.pcap", 5);
    let (b, b_ns) = source("ng-b.pcap", 6);
    // b as a microsecond pcap; merged with a (nanoseconds): two interfaces
    let b_us = tmp("ng-b-us.pcap");
    tool("editcap", &["-F", "pcap", s(&b_ns), s(&b_us)]);
    let merged = tmp("ng-merged.pcapng");
    tool(
        "mergecap",
        &["-F", "pcapng", "-w", s(&merged), s(&a_ns), s(&b_us)],
    );
    let m = read_pcap(&merged).unwrap();
    assert_eq!(m.len(), a.len() + b.len());
    // every packet of each input, at its own resolution, in time order
    let mut want: Vec<(u64, Vec<u8>)> = a
        .iter()
        .map(|(t, f)| (t, f.to_vec()))
        .chain(b.iter().map(|(t, f)| (t / 1000 * 1000, f.to_vec())))
        .collect();
    want.sort_by_key(|x| x.0);
    let mut got: Vec<(u64, Vec<u8>)> = m.iter().map(|(t, f)| (t, f.to_vec())).collect();
    got.sort_by_key(|x| x.0);
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(&want) {
        assert_eq!(g.0, w.0, "timestamps in each interface's resolution");
    }
    let mut gf: Vec<&Vec<u8>> = got.iter().map(|x| &x.1).collect();
    let mut wf: Vec<&Vec<u8>> = want.iter().map(|x| &x.1).collect();
    gf.sort();
    wf.sort();
    assert_eq!(gf, wf, "the same frames");
}

/// A frame cut by a snap length keeps its original length: its captured
/// bytes, then zeros up to that length (so it parses and runs as the whole
/// frame would), counted as filled.
#[test]
fn a_snap_length_cuts_frames_but_keeps_their_length() {
    let (t, pcap) = source("ng-snap-src.pcap", 8);
    for (format, name) in [
        ("pcapng", "ng-snap.pcapng"),
        ("nsecpcap", "ng-snap-ns.pcap"),
        ("pcap", "ng-snap-us.pcap"),
    ] {
        let cut = tmp(name);
        tool("editcap", &["-F", format, "-s", "96", s(&pcap), s(&cut)]);
        let c = read_pcap(&cut).unwrap_or_else(|e| panic!("{format}: {e}"));
        assert_eq!(c.len(), t.len(), "{format}");
        let cut_frames = (0..t.len()).filter(|&i| t.frame(i).len() > 96).count();
        assert!(cut_frames > 0);
        assert_eq!(c.filled(), cut_frames as u64, "{format}");
        for i in 0..t.len() {
            let n = t.frame(i).len().min(96);
            assert_eq!(c.frame(i).len(), t.frame(i).len(), "{format}");
            assert_eq!(&c.frame(i)[..n], &t.frame(i)[..n], "{format}");
            assert!(c.frame(i)[n..].iter().all(|b| *b == 0), "{format}");
            assert_eq!(c.orig_len(i), t.orig_len(i), "{format}");
            assert_eq!(c.ts_ns(i) / 1000, t.ts_ns(i) / 1000, "{format}");
        }
    }
}

#[test]
fn own_pcapng_output_passes_tshark_and_reads_back() {
    let (t, _) = source("ng-own-src.pcap", 9);
    let path = tmp("ng-own.pcapng");
    assert_eq!(write_capture(&path, t.iter()).unwrap(), t.len() as u64);
    let head = std::fs::read(&path).unwrap();
    assert_eq!(&head[..4], &trace::pcapng::MAGIC, "written as pcapng");
    same(&t, &read_pcap(&path).unwrap(), 1);
    let r = validate(&path).unwrap();
    assert_eq!(r.packets, t.len() as u64, "{r:?}");
    assert_eq!((r.bad_checksums, r.warnings, r.errors), (0, 0, 0), "{r:?}");
}

#[test]
fn truncated_and_foreign_pcapng_are_named() {
    let (t, _) = source("ng-trunc-src.pcap", 10);
    let path = tmp("ng-trunc.pcapng");
    write_capture(&path, t.iter()).unwrap();
    let mut bytes = std::fs::read(&path).unwrap();
    bytes.truncate(bytes.len() - 7);
    let cut = tmp("ng-trunc-cut.pcapng");
    std::fs::write(&cut, &bytes).unwrap();
    let e = read_pcap(&cut).unwrap_err().to_string();
    assert!(e.contains("truncated at byte offset"), "{e}");
    // a Linux cooked capture: not Ethernet, named
    let sll = tmp("ng-sll.pcapng");
    tool(
        "editcap",
        &["-F", "pcapng", "-T", "linux-sll", s(&path), s(&sll)],
    );
    let e = read_pcap(&sll).unwrap_err().to_string();
    assert!(e.contains("link type"), "{e}");
}
