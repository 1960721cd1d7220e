//! Any text as a chain configuration (and as a trace spec): parsed, every field
//! checked, the chain built; when its tables are small enough for the fuzzer's
//! memory limit, shards are made and a few packets run through it. Errors are
//! fine; a panic or a built chain that cannot run is not.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nf::{ChainConfig, Verdict};

/// Tables larger than this are not allocated here (the CLI's `--memcap` check
/// stands between a config and its tables).
const MAX_TABLE_BYTES: u64 = 64 << 20;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(spec) = toml::from_str::<trace::TraceSpec>(text) {
        let _ = spec.validate();
    }
    let Ok(cfg) = ChainConfig::from_toml(text) else {
        return;
    };
    let Ok(mut chain) = cfg.build(std::path::Path::new("/nonexistent")) else {
        return;
    };
    if chain.table_bytes_at_capacity() > MAX_TABLE_BYTES {
        return;
    }
    let mut shards = chain.new_shards();
    let mut forwarded = 0u64;
    for (i, frame) in SAMPLES.iter().enumerate() {
        let Ok(mut p) = chain.packet(frame.to_vec(), i as u64 * 1000) else {
            continue;
        };
        let s = chain.shard_of(p.hash);
        if let Verdict::Forward = chain.process(&mut shards[s], &mut p, i as u64 * 1000) {
            forwarded += 1;
            wire::parse(&p.data).expect("a forwarded packet parses");
        }
    }
    assert!(forwarded <= SAMPLES.len() as u64);
});

/// A TCP SYN 10.0.0.1:40000 → 198.18.0.1:80 and a UDP datagram back.
static SAMPLES: [&[u8]; 2] = [
    &[
        2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00, // ethernet
        0x45, 0, 0, 40, 0, 7, 0x40, 0, 64, 6, 0, 0, 10, 0, 0, 1, 198, 18, 0, 1, // ipv4
        0x9c, 0x40, 0, 80, 0, 0, 3, 0xe8, 0, 0, 0, 0, 0x50, 0x02, 0xff, 0xff, 0, 0, 0,
        0, // tcp
    ],
    &[
        2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 0x08, 0x00, // ethernet
        0x45, 0, 0, 32, 0, 7, 0x40, 0, 64, 17, 0, 0, 198, 18, 0, 1, 10, 0, 0, 1, // ipv4
        0, 53, 0x9c, 0x40, 0, 12, 0, 0, b'a', b'b', b'c', b'd', // udp
    ],
];
