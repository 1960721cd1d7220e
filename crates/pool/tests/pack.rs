//! Every packing of random tenants: no node over capacity in any resource, each
//! tenant's parts adding up to its demand on distinct nodes, never fewer nodes
//! than the lower bound.

use pool::{lower_bound, pack, Demand, FnicSize, Heuristic, Mix, Split};
use proptest::prelude::*;

fn tenant() -> impl Strategy<Value = Demand> {
    (0.0..4e6f64, 0.0..4e7f64, 0.0..2e7f64, 0.0..300f64).prop_map(|(cps, pps, flows, gbps)| {
        Demand {
            cps,
            pps,
            flows,
            gbps,
        }
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn packings_respect_capacity_and_cover_every_tenant(
        tenants in prop::collection::vec(tenant(), 0..40),
        all in 1usize..4,
    ) {
        let cap = FnicSize::card();
        for h in Heuristic::ALL {
            for split in [Split::Oversize, Split::All(all)] {
                let p = pack(&tenants, &cap, h, split).unwrap();
                prop_assert!(p.nodes.len() >= p.lower_bound);
                prop_assert_eq!(p.lower_bound, lower_bound(&tenants, &cap));
                for load in p.loads(&cap) {
                    prop_assert!(load.iter().all(|x| *x <= 1.0 + 1e-9), "{:?}", load);
                }
                for (i, t) in tenants.iter().enumerate() {
                    let mut sum = [0.0f64; 4];
                    let mut nodes = Vec::new();
                    let mut parts = Vec::new();
                    for (n, ps) in p.nodes.iter().enumerate() {
                        for q in ps.iter().filter(|q| q.tenant == i) {
                            let v = q.demand.vec();
                            for d in 0..4 {
                                sum[d] += v[d];
                            }
                            nodes.push(n);
                            parts.push((q.part, q.of));
                        }
                    }
                    let want = t.vec();
                    for d in 0..4 {
                        prop_assert!((sum[d] - want[d]).abs() <= 1e-6 * want[d].max(1.0));
                    }
                    let mut distinct = nodes.clone();
                    distinct.dedup();
                    prop_assert_eq!(distinct.len(), nodes.len(), "parts share a node");
                    parts.sort_unstable();
                    let of = parts[0].1;
                    prop_assert_eq!(parts, (0..of).map(|k| (k, of)).collect::<Vec<_>>());
                }
            }
        }
    }
}

/// Mostly small fNICs: the best heuristic within a quarter of the bound (the
/// sizes use different resources — cps for M and L, flows for the smallest —
/// so no packing reaches the sum-of-resources bound exactly).
#[test]
fn small_fnics_pack_near_the_bound() {
    let cap = FnicSize::card();
    let t: Vec<Demand> = Mix::Small
        .draw(400, 1)
        .into_iter()
        .map(|s| s.demand())
        .collect();
    let best = Heuristic::ALL
        .iter()
        .map(|&h| pack(&t, &cap, h, Split::Oversize).unwrap().nodes.len())
        .min()
        .unwrap();
    let bound = lower_bound(&t, &cap);
    assert!(
        best as f64 <= 1.25 * bound as f64,
        "best {best}, bound {bound}"
    );
}
