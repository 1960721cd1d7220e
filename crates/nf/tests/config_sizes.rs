//! Every size in a chain configuration has bounds, checked when the chain is
//! built, with an error naming the field: random integers in every numeric field
//! never panic and never allocate beyond the bounds (building a chain allocates
//! its NFs' tables; flow tables are allocated per run).

use std::path::Path;

use nf::ChainConfig;
use proptest::prelude::*;

/// A value for a numeric field: small, near a power of two, or anything.
fn size() -> impl Strategy<Value = u64> {
    prop_oneof![
        0u64..70_000,
        (0u32..64).prop_map(|k| 1u64 << k),
        (0u32..64).prop_map(|k| (1u64 << k).wrapping_sub(1)),
        any::<u64>(),
    ]
}

/// The chain with every numeric field set, one NF of each kind that has sizes.
fn chain(v: &[u64; 11]) -> String {
    format!(
        r#"
[steering]
buckets = {}
shards = {}
[table]
capacity = {}
fast_entries = {}
[[nf]]
kind = "monitor"
cms_width = {}
cms_depth = {}
hll_bits = {}
threshold_packets = {}
[[nf]]
kind = "lb"
snat = ["198.51.100.1"]
table_size = {}
ring = {}
[[nf.service]]
vip = "192.0.2.1:80"
backends = ["10.1.0.1:80", "10.1.0.2:80"]
[[nf]]
kind = "ids"
rules = "alert tcp any any -> any 80 (content:\"x\"; sid:1;)"
ring = {}
"#,
        v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], v[9], v[10]
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]
    #[test]
    fn any_integer_in_any_field_is_an_error_or_a_chain(v in prop::array::uniform11(size())) {
        let text = chain(&v);
        // integers above i64 are not TOML: the parser names them
        match ChainConfig::from_toml(&text) {
            Err(e) => prop_assert!(!e.to_string().is_empty()),
            Ok(c) => match c.build(Path::new(".")) {
                Err(e) => {
                    let e = e.to_string();
                    prop_assert!(e.starts_with('`'), "names the field: {e}");
                }
                Ok(chain) => prop_assert!(chain.shard_count() <= 4096),
            },
        }
    }
}

#[test]
fn the_bounds_name_their_fields() {
    let base = [128u64, 16, 65_536, 0, 2048, 4, 12, 0, 65_537, 1024, 16_384];
    let cases: [(usize, u64, &str); 9] = [
        (0, 8192, "`steering.buckets`"),
        (1, 256, "`steering.shards`"),
        (2, 1 << 25, "`table.capacity`"),
        (3, 1 << 21, "`table.fast_entries`"),
        (4, 1 << 25, "`nf[0].cms_width`"),
        (5, 17, "`nf[0].cms_depth`"),
        (8, 4_294_967_311, "`nf[1].table_size`"),
        (9, 1 << 21, "`nf[1].ring`"),
        (10, 1 << 21, "`nf[2].ring`"),
    ];
    for (i, v, want) in cases {
        let mut vals = base;
        vals[i] = v;
        let e = ChainConfig::from_toml(&chain(&vals))
            .unwrap()
            .build(Path::new("."))
            .err()
            .unwrap_or_else(|| panic!("{want} = {v} accepted"))
            .to_string();
        assert!(e.starts_with(want), "{want}: {e}");
    }
    // capacity × shards bounded too
    let mut vals = base;
    vals[0] = 4096;
    vals[1] = 4096;
    vals[2] = 1 << 20;
    let e = ChainConfig::from_toml(&chain(&vals))
        .unwrap()
        .build(Path::new("."))
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("flow entries in all"), "{e}");
    ChainConfig::from_toml(&chain(&base))
        .unwrap()
        .build(Path::new("."))
        .unwrap();
}

/// Shards the file leaves unset scale with the working cores (16 per core),
/// with flows per shard shrinking so the tables hold as many flows in all;
/// what the file sets stays.
#[test]
fn unset_shards_scale_with_the_cores() {
    let nf = "[[nf]]\nkind = \"seqcheck\"\n";
    let fit = |toml: &str, workers: usize| {
        let mut c = nf::ChainConfig::from_toml(toml).unwrap();
        c.fit_cores(workers);
        let chain = c.build(std::path::Path::new(".")).unwrap();
        (chain.shard_count(), chain.buckets(), chain.table_capacity())
    };
    assert_eq!(fit(nf, 1), (16, 128, 65_536));
    assert_eq!(fit(nf, 2), (32, 128, 32_768));
    assert_eq!(fit(nf, 8), (128, 128, 8_192));
    assert_eq!(fit(nf, 16), (256, 256, 4_096));
    assert_eq!(
        fit(&format!("[steering]\nshards = 16\n{nf}"), 8),
        (16, 128, 65_536)
    );
    assert_eq!(
        fit(&format!("[table]\ncapacity = 1000\n{nf}"), 8),
        (128, 128, 1_000)
    );
    // without the cores known, the defaults
    let c = nf::ChainConfig::from_toml(nf).unwrap();
    let chain = c.build(std::path::Path::new(".")).unwrap();
    assert_eq!((chain.shard_count(), chain.table_capacity()), (16, 65_536));
}

/// A NAT whose pool cannot give every shard a port per bucket group takes
/// fewer scaled shards rather than refusing the run; set shards are refused.
#[test]
fn scaled_shards_halve_to_what_a_small_nat_pool_takes() {
    let nat = "[[nf]]\nkind = \"nat\"\ninternal = \"10.0.0.0/8\"\nexternal = [\"203.0.113.1/32\"]\nports = \"1024-65535\"\n";
    let mut c = nf::ChainConfig::from_toml(nat).unwrap();
    // 16 cores would be 256 shards × 256 buckets = 65 536 > 64 512 ports
    let chain = c.build_for_cores(std::path::Path::new("."), 16).unwrap();
    assert_eq!(chain.shard_count(), 128);
    assert_eq!(chain.table_capacity(), 8_192);
    let mut set =
        nf::ChainConfig::from_toml(&format!("[steering]\nshards = 256\nbuckets = 256\n{nat}"))
            .unwrap();
    let Err(e) = set.build_for_cores(std::path::Path::new("."), 16) else {
        panic!("256 shards over one address accepted");
    };
    assert!(e.to_string().contains("ports"), "{e}");
}
