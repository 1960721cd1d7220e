//! What the simulator's tests share: a small generated workload on the default
//! chain, and a fixed cost model.

use nf::{Chain, ChainConfig};
use sim::CostModel;
use trace::{Generator, Trace, TraceSpec};

/// A fixed model (so recalibrating the bundled one changes no test): a hardware
/// NIC at 50 Mpps, ≈ 400 ns per packet of the default chain.
#[allow(dead_code)] // not every test file uses every helper
pub fn model() -> CostModel {
    CostModel::from_toml(
        r#"
        machine = "tests"
        entry_bytes = 256
        nic_ns = 20.0
        overhead_ns = 250.0
        new_flow_ns = 800.0
        flows = [[1024.0, 0.0], [262144.0, 100.0]]
        shards = [[1.0, 0.0], [64.0, 50.0]]
        warm_ns_per_entry = 50.0
        offload_ns = 30.0
        message_ns = 1000.0
        [caches]
        l1 = 32768
        l2 = 1048576
        llc = 33554432
        [nf_ns]
        firewall = 40.0
        nat = 60.0
        seqcheck = 30.0
        "#,
    )
    .expect("the test model loads")
}

/// A generated trace of `packets` packets over `flows` flows (Zipf `alpha`, a
/// fifth of them active at once) and the default chain (firewall → NAT →
/// seqcheck).
#[allow(dead_code)] // not every test file uses every helper
pub fn workload(flows: u32, packets: u64, alpha: f64) -> (Trace, Chain) {
    let spec = TraceSpec {
        flows,
        packets,
        alpha,
        active_flows: (flows / 5).max(1),
        ..TraceSpec::default()
    };
    let t = Trace::from_generated(Generator::new(&spec).expect("a valid spec"));
    let chain = ChainConfig::default_chain()
        .build(std::path::Path::new("."))
        .expect("the default chain builds");
    (t, chain)
}
