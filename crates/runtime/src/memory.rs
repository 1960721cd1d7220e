//! What a run's own structures take, besides the flow tables: the rings
//! between its threads, the packet buffers that can wait in them, and each
//! core's counters and histograms — estimated from the configuration alone,
//! so that a configuration whose parts are each within their bounds but
//! whose product is not (256 working × 256 offloading cores, a million-slot
//! ring) is refused by name before anything is allocated.

use nf::{Chain, Packet};

use crate::messages::ToOffload;
use crate::RunConfig;

/// Bytes a waiting packet's buffer is counted at (buffers of up to this
/// size are recycled).
const BUFFER: u64 = 2048;

/// One part of a run's memory: what it is (the fields that size it) and its
/// bytes at most.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Part {
    /// What it is and the fields that size it.
    pub what: &'static str,
    /// Bytes.
    pub bytes: u64,
}

/// The run's structures at their largest, by part (the flow tables apart:
/// [`nf::Chain::table_bytes_at_capacity`]).
pub fn parts(cfg: &RunConfig, chain: &Chain) -> Vec<Part> {
    let (w, o) = (cfg.workers as u64, cfg.offloaders as u64);
    let ring = cfg.ring_size as u64;
    let buckets = chain.buckets() as u64;
    let shards = chain.shard_count() as u64;
    let packet = std::mem::size_of::<Packet>() as u64;
    let job = std::mem::size_of::<ToOffload>() as u64;
    let histogram = runspec::latency_histogram().distinct_values() as u64 * 8;
    let mut parts = vec![
        Part {
            what: "NIC queues and the packets they hold (`workers` × `ring_size`)",
            bytes: w * ring * (packet + BUFFER),
        },
        Part {
            what: "offload rings and their packets (`workers` × `offloaders` × `ring_size`)",
            bytes: w * o * ring * (job + BUFFER),
        },
        Part {
            what:
                "per-core counters and histograms ((`workers` + `offloaders`) × `steering.buckets`)",
            bytes: (w + o)
                * ((3 * buckets + shards * balance::migrate::heavy::K as u64) * 8
                    + 2 * histogram
                    + 2 * buckets * 8),
        },
    ];
    if cfg.recycle {
        parts.push(Part {
            what: "packet buffers coming back to the NIC model ((`workers` + `offloaders`) × `ring_size`)",
            bytes: (w + o) * ring * (24 + BUFFER),
        });
    }
    parts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_product_of_the_cores_is_counted() {
        let chain = nf::ChainConfig::default_chain()
            .build(std::path::Path::new("."))
            .unwrap();
        let small = RunConfig::default();
        let big = RunConfig {
            workers: 256,
            offloaders: 256,
            ..RunConfig::default()
        };
        let sum = |c: &RunConfig| parts(c, &chain).iter().map(|p| p.bytes).sum::<u64>();
        assert!(sum(&small) < 64 << 20, "{} B", sum(&small));
        // 65 536 offload rings of 1 024 jobs
        assert!(sum(&big) > 64 << 30, "{} B", sum(&big));
        let worst = parts(&big, &chain)
            .into_iter()
            .max_by_key(|p| p.bytes)
            .unwrap();
        assert!(worst.what.contains("offloaders"), "{}", worst.what);
    }
}
