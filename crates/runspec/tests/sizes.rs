//! Every size of a run has bounds, checked before anything is allocated, with an
//! error naming the field: random integers never panic, and an accepted
//! configuration lays out its topology.

use std::time::Duration;

use proptest::prelude::*;
use runspec::{RunConfig, Topology, MAX_BURST, MAX_CORES, MAX_RING};

fn size() -> impl Strategy<Value = usize> {
    prop_oneof![
        0usize..5000,
        (0u32..64).prop_map(|k| 1usize.checked_shl(k).unwrap_or(usize::MAX)),
        any::<usize>(),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]
    #[test]
    fn any_sizes_are_an_error_naming_the_field_or_a_topology(
        workers in size(), offloaders in size(), ring_size in size(), burst in size(),
        ratio in prop_oneof![0.0f64..=1.0, any::<f64>()], period_ns in any::<u64>(),
        shards in 1usize..=4096,
    ) {
        let cfg = RunConfig {
            workers, offloaders, ring_size, burst, offload_ratio: ratio,
            period: Duration::from_nanos(period_ns),
            ..RunConfig::default()
        };
        match cfg.validate() {
            Err(e) => {
                let fields = ["workers", "offloaders", "ring_size", "burst", "offload_ratio", "period"];
                prop_assert!(fields.contains(&e.field), "{e}");
                let named = format!("run.{}", e.field);
                prop_assert!(e.to_string().starts_with(&named));
            }
            Ok(()) => {
                prop_assert!((1..=MAX_CORES).contains(&workers) && offloaders <= MAX_CORES);
                prop_assert!(ring_size <= MAX_RING && burst <= MAX_BURST);
                let t = Topology::new(&cfg, shards);
                prop_assert_eq!(t.owner.len(), shards);
                prop_assert!(t.owner.iter().all(|o| usize::from(*o) < workers));
            }
        }
    }
}

#[test]
fn out_of_range_sizes_name_their_field() {
    let ok = RunConfig::default();
    let cases = [
        (
            RunConfig {
                workers: 65_536,
                ..ok.clone()
            },
            "workers = 65536: must be between 1 and 1024",
        ),
        (
            RunConfig {
                ring_size: 1 << 62,
                ..ok.clone()
            },
            "ring_size = 4611686018427387904: must be between 2 and 1048576",
        ),
        (
            RunConfig {
                burst: 1_000_000_000,
                ..ok.clone()
            },
            "burst = 1000000000: must be between 1 and 4096",
        ),
        (
            RunConfig {
                period: Duration::ZERO,
                ..ok.clone()
            },
            "period = 0ns: must be at least 10µs",
        ),
    ];
    for (cfg, want) in cases {
        assert_eq!(
            cfg.validate().unwrap_err().to_string(),
            format!("run.{want}")
        );
    }
}
