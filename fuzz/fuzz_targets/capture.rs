//! Any bytes as a capture file (pcap in either byte order and time resolution,
//! or pcapng): an error or a trace, never a panic, and never more packets than
//! the file has bytes for.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|bytes: &[u8]| {
    if let Ok(t) = trace::parse_capture(bytes) {
        let mut total = 0usize;
        let mut last = 0u64;
        for (ts, frame) in t.iter() {
            assert!(ts >= last, "timestamps are clamped to never go back");
            last = ts;
            total += frame.len();
        }
        assert!(total <= bytes.len());
    }
});
