//! Live metrics against the report of the same run: after the run, the
//! scraped NF counters equal the report's (each core's own counts added up,
//! a control plane every core shares counted once), and counts that are
//! each core's own (a monitor's distinct sources) are read per core, never
//! added into a total that would count a source once per core that saw it.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use nf::ChainConfig;
use runspec::metrics::Metrics;
use runtime::{run, BalancerKind, RunConfig};
use trace::{Generator, SizeDist, Trace, TraceSpec};

const CHAIN: &str = r#"
[steering]
shards = 16
[[nf]]
kind = "lb"
snat = ["192.0.2.10"]
placement = "core"
[[nf.service]]
vip = "10.0.0.100:80"
backends = ["10.1.0.1:8080", "10.1.0.2:8080"]
[[nf]]
kind = "monitor"
"#;

/// The exposition's series and values.
fn series(text: &str) -> BTreeMap<String, u64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (k, v) = l.rsplit_once(' ')?;
            Some((k.to_string(), v.parse::<f64>().ok()? as u64))
        })
        .collect()
}

#[test]
fn scraped_nf_counters_agree_with_the_report() {
    let cfg = ChainConfig::from_toml(CHAIN).unwrap();
    let chain = cfg.build(Path::new(".")).unwrap();
    let spec = TraceSpec {
        flows: 2_000,
        packets: 40_000,
        active_flows: 500,
        sizes: SizeDist::Fixed(64),
        ..Default::default()
    };
    let t = Trace::from_generated(Generator::new(&spec).unwrap());
    let metrics = Arc::new(Metrics::default());
    let o = run(
        &chain,
        &t,
        &RunConfig {
            workers: 2,
            pin: false,
            // flows change cores: a source is then seen by both
            balancer: BalancerKind::Random,
            period: std::time::Duration::from_millis(2),
            metrics: Some(metrics.clone()),
            ..Default::default()
        },
    )
    .unwrap();
    assert!(o.report.migrations["shard_moves"] > 0, "shards moved");
    let live = series(&metrics.render());
    let total = |nf: &str, k: &str| {
        live.get(&format!(
            "flowshift_nf_total{{nf=\"{nf}\",counter=\"{k}\"}}"
        ))
    };

    let lb = &o.report.nf["lb"];
    assert_eq!(lb["control_on_core"], 1);
    for (k, v) in lb {
        assert_eq!(total("lb", k), Some(v), "lb {k}");
    }
    assert!(lb["passed"] > 0, "the generated flows pass the balancer");

    let mon = &o.report.nf["monitor"];
    let per_core: Vec<u64> = (0..2)
        .map(|c| {
            live[&format!("flowshift_nf_core{{nf=\"monitor\",counter=\"sources\",core=\"{c}\"}}")]
        })
        .collect();
    assert_eq!(
        total("monitor", "sources"),
        None,
        "no summed distinct count"
    );
    assert!(
        per_core.iter().sum::<u64>() > mon["sources"],
        "sources seen by both cores: {per_core:?} against {}",
        mon["sources"]
    );
    assert!(per_core.iter().all(|&n| n > 0 && n <= mon["sources"]));
    assert_eq!(total("monitor", "dropped"), Some(&mon["dropped"]));
}
