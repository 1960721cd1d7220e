//! Any bytes as a capture file (pcap in either byte order and time resolution,
//! or pcapng): an error or a trace, never a panic, and never more packets than
//! the file has bytes for (frames cut by a snap length are filled to their
//! original length, up to `MAX_FILLED` each, and counted).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|bytes: &[u8]| {
    if let Ok(t) = trace::parse_capture(bytes) {
        let mut total = 0usize;
        let mut count = 0usize;
        let mut last = 0u64;
        for (ts, frame) in t.iter() {
            assert!(ts >= last, "timestamps are clamped to never go back");
            last = ts;
            total += frame.len();
            count += 1;
        }
        // Every record has a header of at least 16 bytes.
        assert!(count <= bytes.len() / 16);
        let filled = t.filled() as usize;
        assert!(filled <= count);
        assert!(total <= bytes.len() + filled * trace::pcap::MAX_FILLED as usize);
    }
});
