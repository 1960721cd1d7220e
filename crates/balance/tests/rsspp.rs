//! RSS++ on random instances where a balanced solution exists (many small shards):
//! the squared imbalance ends ≤ 1 %, never worse than before, and no core is
//! emptied.

use balance::balancers::{Rsspp, RssppConfig};
use balance::{Balancer, CoreId, Snapshot};
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]
    #[test]
    fn reaches_one_percent(
        cores in 2usize..12,
        loads in prop::collection::vec(0.0f64..0.02, 128),
        owners in prop::collection::vec(0u16..12, 128),
        skew in 0usize..3,
    ) {
        let owner: Vec<CoreId> = owners.iter().map(|o| o % cores as u16).collect();
        let mut loads = loads;
        // make some cores hot
        for (s, l) in loads.iter_mut().enumerate() {
            if (owner[s] as usize) < skew {
                *l *= 3.0;
            }
        }
        let mut core_load = vec![0.0; cores];
        for (s, &o) in owner.iter().enumerate() {
            core_load[usize::from(o)] += loads[s];
        }
        prop_assume!(core_load.iter().all(|l| *l <= 1.0 && *l > 0.05));
        let snap = Snapshot {
            period_ns: 100_000_000,
            shards: 128,
            workers: cores,
            owner: owner.clone(),
            bucket_packets: loads.iter().map(|l| (l * 1e7) as u64).collect(),
            core_load: core_load.clone(),
            ..Default::default()
        };
        let sq = |l: &[f64]| {
            let m = l.iter().sum::<f64>() / l.len() as f64;
            l.iter().map(|x| (x - m).powi(2)).sum::<f64>()
        };
        let mut b = Rsspp::new(RssppConfig::default());
        let plan = b.plan(&snap);
        let mut after = vec![0.0; cores];
        let mut o2 = owner.clone();
        for &(s, c) in &plan.moves {
            o2[usize::from(s)] = c;
        }
        for (s, &o) in o2.iter().enumerate() {
            after[usize::from(o)] += loads[s];
        }
        let (before, after_sq) = (sq(&core_load), sq(&after));
        prop_assert!(after_sq <= before + 1e-12, "{before} → {after_sq}");
        prop_assert!(after_sq <= 0.01, "{before} → {after_sq}: {:?} → {:?}", core_load, after);
        for c in 0..cores as u16 {
            if owner.iter().zip(&loads).any(|(o, l)| *o == c && *l > 0.0) {
                prop_assert!(o2.iter().zip(&loads).any(|(o, l)| *o == c && *l > 0.0), "core {c} emptied");
            }
        }
    }
}
