//! What the simulator's tests share: a small generated workload on the default
//! chain.

use nf::{Chain, ChainConfig};
use trace::{Generator, Trace, TraceSpec};

/// A generated trace of `packets` packets over `flows` flows (Zipf `alpha`, a
/// fifth of them active at once) and the default chain (firewall → NAT →
/// seqcheck).
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
