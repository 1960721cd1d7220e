//! Delayed merge in the runtime (GranularNF §4): a `mergeable` monitor's
//! threshold is checked against every core's counts as of the last merge, so
//! a source whose flows RSS spreads over two cores is caught although
//! neither core alone sees it pass the threshold; the `exact` monitor,
//! steered by source, catches it too, and so does the `strict` monitor,
//! whose counters every core updates on every packet; with the merge left
//! out (a threshold above what the run can merge in time) nobody does.

use std::path::Path;

use nf::ChainConfig;
use runtime::{run, RunConfig};
use trace::Trace;

/// `flows` UDP flows from one source, `per` packets each, round robin.
fn one_source(flows: u16, per: u32) -> Trace {
    use wire::repr::{EthernetRepr, IpRepr, Ipv4Repr, L4Repr, PacketRepr};
    let mut t = Trace::new();
    let mut ts = 0;
    for _ in 0..per {
        for f in 0..flows {
            let frame = PacketRepr {
                eth: EthernetRepr {
                    src: [2, 0, 0, 0, 0, 1],
                    dst: [2, 0, 0, 0, 0, 2],
                    vlan: None,
                },
                ip: IpRepr::V4(Ipv4Repr {
                    src: [10, 9, 9, 9].into(),
                    dst: [198, 51, 100, 7].into(),
                    dscp: 0,
                    ecn: 0,
                    ident: 0,
                    dont_frag: false,
                    ttl: 64,
                    options: Vec::new(),
                }),
                l4: L4Repr::Udp {
                    src_port: 1000 + f,
                    dst_port: 53,
                },
                payload: vec![0; 18],
            }
            .to_bytes();
            let len = frame.len() as u32;
            t.push(ts, &frame, len);
            ts += 1_000;
        }
    }
    t
}

fn alerts(state: &str, threshold: u64, trace: &Trace) -> (u64, Vec<u64>) {
    let chain = ChainConfig::from_toml(&format!(
        "[[nf]]\nkind = \"monitor\"\nname = \"mon\"\nstate = \"{state}\"\n\
         threshold_packets = {threshold}\naction = \"alert\"\n"
    ))
    .unwrap()
    .build(Path::new("."))
    .unwrap();
    let rc = RunConfig {
        workers: 2,
        ..RunConfig::default()
    };
    let o = run(&chain, trace, &rc).unwrap();
    let per_core: Vec<u64> = o.report.per_core.iter().map(|c| c.packets).collect();
    (o.report.nf["mon"]["alerts"], per_core)
}

#[test]
fn a_source_spread_over_two_cores_passes_the_merged_threshold() {
    // 64 flows × 4 000 packets: 256 000 packets from one source, spread by
    // RSS over both working cores
    let t = one_source(64, 4_000);
    let total = t.len() as u64;
    // above what either core sees alone, well below the sum
    let threshold = total * 3 / 4;
    let (merged, per_core) = alerts("mergeable", threshold, &t);
    println!("packets per core {per_core:?}, threshold {threshold}");
    assert!(
        per_core.iter().all(|&p| p < threshold),
        "one core saw it all: {per_core:?}"
    );
    assert_eq!(
        merged, 1,
        "each core passes it on the merged view: one source"
    );
    // the exact monitor (steered by source: one core) agrees
    let (exact, _) = alerts("exact", threshold, &t);
    assert_eq!(exact, 1);
    // strict shared counters (every packet counted where every core sees
    // it at once) agree
    let (strict, _) = alerts("strict", threshold, &t);
    assert_eq!(
        strict, 1,
        "each core passes it on the shared counts: one source"
    );
    // above the total: no alert from any
    let (none, _) = alerts("mergeable", total + 1, &t);
    assert_eq!(none, 0);
    let (none, _) = alerts("strict", total + 1, &t);
    assert_eq!(none, 0);
}

/// Strict shared counters see the other core's packets at once: with a
/// threshold just below the total, the alert comes although the last merge
/// is older than the last packets (where the mergeable monitor can miss it).
#[test]
fn strict_counters_see_every_packet_at_once() {
    let t = one_source(64, 400);
    let total = t.len() as u64;
    let (strict, per_core) = alerts("strict", total - 2, &t);
    assert!(per_core.iter().all(|&p| p > 0), "{per_core:?}");
    assert!(strict >= 1, "the last packets pass the shared count");
}
