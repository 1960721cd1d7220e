//! The C baseline of `flowshift bench`: a plain open-addressing flow table
//! (`csrc/flowtable.c`), looked up with the same packets' keys and RSS hashes
//! as the chain, so the chain's cost can be read against the machine's limit
//! for one flow lookup.

use std::time::Instant;

use wire::FiveTuple;

#[repr(C)]
struct FsTable {
    _opaque: [u8; 0],
}

extern "C" {
    fn fs_table_new(keys: *const u64, hashes: *const u32, n: usize) -> *mut FsTable;
    fn fs_table_lookup(
        t: *const FsTable,
        keys: *const u64,
        hashes: *const u32,
        n: usize,
        burst: i32,
    ) -> usize;
    fn fs_table_free(t: *mut FsTable);
}

/// A 5-tuple packed into the baseline's 16-byte key (IPv4 only; other
/// families fold their addresses).
fn key(t: &FiveTuple) -> [u64; 2] {
    let a = |ip: std::net::IpAddr| match ip {
        std::net::IpAddr::V4(a) => u64::from(u32::from(a)),
        std::net::IpAddr::V6(a) => {
            let x = u128::from(a);
            (x as u64) ^ (x >> 64) as u64
        }
    };
    [
        a(t.src) << 32 | (a(t.dst) & 0xffff_ffff),
        u64::from(t.src_port) << 48 | u64::from(t.dst_port) << 32 | u64::from(t.proto),
    ]
}

/// The baseline's lookups of a packet sequence: the table holds every
/// distinct flow, then every packet is looked up (in bursts of 32 with
/// prefetching when `burst`), `laps` times. Returns the fastest lap's ns per
/// lookup; every lookup must find its flow.
pub fn lookup_ns(tuples: &[(FiveTuple, u32)], laps: u32, burst: bool) -> anyhow::Result<f64> {
    let mut keys = Vec::with_capacity(tuples.len() * 2);
    let mut hashes = Vec::with_capacity(tuples.len());
    for (t, h) in tuples {
        keys.extend_from_slice(&key(t));
        hashes.push(*h);
    }
    // one entry per distinct key (the table's insert keeps the last)
    // SAFETY: `keys` holds 2 × n and `hashes` n initialised values for the
    // call's duration; the C side only reads them.
    let t = unsafe { fs_table_new(keys.as_ptr(), hashes.as_ptr(), hashes.len()) };
    anyhow::ensure!(!t.is_null(), "the C baseline table could not be allocated");
    let mut best = f64::INFINITY;
    let mut found = 0;
    for _ in 0..laps.max(1) {
        let start = Instant::now();
        // SAFETY: `t` is the live table made above (freed only below); the
        // slices are as for `fs_table_new`.
        found = unsafe {
            fs_table_lookup(
                t,
                keys.as_ptr(),
                hashes.as_ptr(),
                hashes.len(),
                i32::from(burst),
            )
        };
        best = best.min(start.elapsed().as_nanos() as f64 / hashes.len().max(1) as f64);
    }
    // SAFETY: `t` came from `fs_table_new` and is not used after this.
    unsafe { fs_table_free(t) };
    anyhow::ensure!(
        found == hashes.len(),
        "the C baseline found {found} of {} flows",
        hashes.len()
    );
    Ok(best)
}
