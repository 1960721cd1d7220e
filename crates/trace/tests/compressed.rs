//! Compressed captures (gzip, zstd) read as they go give the plain capture's
//! packets, pass after pass; a compressed capture cut short gives its packets
//! up to the cut, then an error that names the compression.

use std::io::Write;
use std::path::{Path, PathBuf};

use trace::{CaptureFile, CaptureReader, Compression, Source, Trace};

fn frames(n: usize) -> Vec<(u64, Vec<u8>)> {
    (0..n)
        .map(|i| {
            (
                1_000 * i as u64 + 5,
                vec![(i * 7) as u8; 60 + (i * 37) % 1400],
            )
        })
        .collect()
}

fn capture(ng: bool, n: usize) -> Vec<u8> {
    let f = frames(n);
    let it = f.iter().map(|(t, x)| (*t, &x[..]));
    if ng {
        trace::pcapng::write_pcapng_to(Vec::new(), it)
            .unwrap()
            .into_inner()
    } else {
        trace::pcap::write_pcap_to(Vec::new(), it)
            .unwrap()
            .into_inner()
    }
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(bytes).unwrap();
    e.finish().unwrap()
}

fn zstd(bytes: &[u8]) -> Vec<u8> {
    zstd::encode_all(bytes, 3).unwrap()
}

fn tmp(name: &str, bytes: &[u8]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("flowshift-compressed-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

/// Every packet of a pass, in chunks of 16 KiB.
fn pass(r: &mut CaptureReader<CaptureFile>) -> Vec<(u64, Vec<u8>)> {
    let mut got = Vec::new();
    loop {
        let mut c = Trace::new();
        let n = Source::fill(r, &mut c, 16 << 10).unwrap();
        if n == 0 {
            return got;
        }
        got.extend(c.iter().map(|(t, f)| (t, f.to_vec())));
    }
}

#[test]
fn gzip_and_zstd_captures_read_as_the_plain_one_pass_after_pass() {
    for ng in [false, true] {
        let plain = capture(ng, 2_000);
        let want = frames(2_000);
        // two gzip members one after the other (as `cat a.gz b.gz` makes)
        let half = plain.len() / 2;
        let members = [gzip(&plain[..half]), gzip(&plain[half..])].concat();
        for (name, bytes, kind) in [
            ("p", plain.clone(), Compression::None),
            ("p.gz", gzip(&plain), Compression::Gzip),
            ("two.gz", members, Compression::Gzip),
            ("p.zst", zstd(&plain), Compression::Zstd),
            // the name does not matter: the first bytes do
            ("misnamed.pcap", zstd(&plain), Compression::Zstd),
        ] {
            let p = tmp(&format!("{ng}-{name}"), &bytes);
            let mut r = CaptureReader::open(&p).unwrap();
            assert_eq!(r.compression(), kind, "{name}");
            for lap in 0..2 {
                let got = pass(&mut r);
                assert_eq!(got.len(), want.len(), "{name} ng {ng} lap {lap}");
                assert!(got == want, "{name} ng {ng} lap {lap}: the packets differ");
                Source::rewind(&mut r).unwrap();
            }
            assert_eq!(CaptureFile::len(&p).unwrap(), plain.len() as u64, "{name}");
            std::fs::remove_file(&p).unwrap();
        }
    }
}

fn read_until_error(p: &Path) -> (usize, String) {
    let mut r = CaptureReader::open(p).unwrap();
    let mut read = 0;
    loop {
        let mut c = Trace::new();
        match Source::fill(&mut r, &mut c, 16 << 10) {
            Ok(0) => panic!("{}: a broken capture reads to its end", p.display()),
            Ok(n) => read += n,
            Err(e) => return (read, e.to_string()),
        }
    }
}

#[test]
fn a_compressed_capture_cut_short_gives_its_packets_then_says_where() {
    let plain = capture(false, 2_000);
    for (name, packed) in [
        ("cut.pcap.gz", gzip(&plain)),
        ("cut.pcap.zst", zstd(&plain)),
    ] {
        let p = tmp(name, &packed[..packed.len() * 2 / 3]);
        let (read, msg) = read_until_error(&p);
        assert!(
            read > 1_000 && read < 2_000,
            "{name}: the packets before the cut ({read})"
        );
        let kind = if name.ends_with("gz") { "gzip" } else { "zstd" };
        assert!(
            msg.contains(&format!("its {kind} compression broke after")),
            "{name}: {msg}"
        );
        std::fs::remove_file(&p).unwrap();
    }
    // a corrupt byte in the middle of a gzip stream: its decoder, the
    // capture's parser (offsets count the capture's bytes, decompressed) or
    // the stream's checksum finds it
    let mut bad = gzip(&plain);
    let mid = bad.len() / 2;
    bad[mid] ^= 0x55;
    let p = tmp("corrupt.pcap.gz", &bad);
    let (read, msg) = read_until_error(&p);
    assert!(read < 2_000, "{read}");
    assert!(
        msg.contains("gzip compression broke") || msg.contains(": corrupt at byte offset"),
        "{msg}"
    );
    std::fs::remove_file(&p).unwrap();
}
