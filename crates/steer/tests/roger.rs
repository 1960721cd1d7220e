//! Roger's plans checked against brute force on small keys: rules disjoint,
//! within the budget, covering the space (tree) or the seen keys (closest), each
//! core receiving the weight the plan says, the assignment optimal where it can
//! be enumerated, and the sifted BDD's DSOP equal to the on-set.

use proptest::prelude::*;
use steer::roger::{enumerated_optimum, plan, sift, sum_squares, Bdd, Reduce, RogerParams, Route};

fn params(bits: u32, budget: usize, cores: u16, reduce: Reduce) -> RogerParams {
    RogerParams {
        bits,
        budget,
        cores,
        sift_work: u64::MAX,
        reduce,
    }
}

fn cases() -> impl Strategy<Value = (u32, Vec<(u64, u64)>, usize, u16)> {
    (3u32..=9).prop_flat_map(|bits| {
        (
            Just(bits),
            prop::collection::vec((0..1u64 << bits, 1u64..1000), 1..40),
            2usize..=16,
            1u16..=5,
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn plans_route_every_key_as_they_say((bits, points, budget, cores) in cases()) {
        for reduce in [Reduce::Tree, Reduce::Closest] {
            let p = plan(&points, &params(bits, budget, cores, reduce)).unwrap();
            let t = &p.table;
            prop_assert!(t.nic_rules() <= budget, "{} rules over budget {budget}", t.nic_rules());
            prop_assert_eq!(t.default_rule, reduce == Reduce::Closest);
            // every key of the space: at most one rule (exactly one for a tiling)
            for key in 0..1u64 << bits {
                let matching = t.rules.iter().filter(|r| r.cube.contains(key)).count();
                prop_assert!(matching <= 1, "key {key:b} matches {matching} rules");
                if reduce == Reduce::Tree {
                    prop_assert_eq!(matching, 1, "key {:b} uncovered", key);
                }
            }
            // every seen key takes a rule; the cores get the weights the plan says
            let mut core_w = vec![0u64; usize::from(cores)];
            let mut rule_w = vec![0u64; t.rules.len()];
            for &(k, w) in &points {
                match t.route(k) {
                    Route::Rule { rule, core } => {
                        core_w[usize::from(core)] += w;
                        rule_w[rule] += w;
                    }
                    Route::Default => prop_assert!(false, "seen key {k:b} took the default"),
                }
            }
            prop_assert_eq!(&core_w, &p.core_weight);
            prop_assert_eq!(&rule_w, &p.rule_weight);
            // the assignment is the least-variance one where it can be enumerated
            if t.rules.len() <= 6 && cores <= 3 {
                let got = sum_squares(&p.rule_weight, &assign_of(&p), usize::from(cores));
                prop_assert_eq!(got, enumerated_optimum(&p.rule_weight, usize::from(cores)));
            }
            // a budget of one rule per distinct key and more reaches the finest cut
            let distinct = {
                let mut k: Vec<u64> = points.iter().map(|p| p.0).collect();
                k.sort_unstable();
                k.dedup();
                k.len()
            };
            if reduce == Reduce::Tree && budget >= distinct {
                prop_assert_eq!(t.rules.len(), distinct);
            }
        }
    }

    #[test]
    fn the_sifted_dsop_is_the_on_set((bits, points, _b, _c) in cases()) {
        let keys: Vec<u64> = points.iter().map(|p| p.0).collect();
        let s = sift(&keys, bits, u64::MAX);
        prop_assert!(s.paths_after <= s.paths_before);
        let bdd = Bdd::build(&keys, bits, &s.order);
        prop_assert_eq!(bdd.one_paths(), s.paths_after);
        let cubes = bdd.dsop(&points);
        prop_assert_eq!(cubes.len() as u64, s.paths_after);
        for key in 0..1u64 << bits {
            let n = cubes.iter().filter(|c| c.0.contains(key)).count();
            prop_assert_eq!(n, usize::from(keys.contains(&key)), "key {:b}", key);
        }
        let total: u64 = points.iter().map(|p| p.1).sum();
        prop_assert_eq!(cubes.iter().map(|c| c.1).sum::<u64>(), total);
    }
}

fn assign_of(p: &steer::roger::RogerPlan) -> Vec<usize> {
    p.table.rules.iter().map(|r| usize::from(r.core)).collect()
}

#[test]
fn bad_parameters_are_refused() {
    let pts = [(1u64, 1u64)];
    let e = plan(&pts, &params(4, 1, 2, Reduce::Tree)).unwrap_err();
    assert!(e.to_string().contains("at least 2"), "{e}");
    let e = plan(&pts, &params(4, 4, 0, Reduce::Tree)).unwrap_err();
    assert!(e.to_string().contains("cores"), "{e}");
    let e = plan(&[(16, 1)], &params(4, 4, 2, Reduce::Tree)).unwrap_err();
    assert!(e.to_string().contains("wider"), "{e}");
    let e = plan(&pts, &params(65, 4, 2, Reduce::Tree)).unwrap_err();
    assert!(e.to_string().contains("1..=64"), "{e}");
}

#[test]
fn an_elephant_gets_a_core_to_itself() {
    // one key with half the traffic and many light ones, 2 cores, 8 rules
    let mut pts: Vec<(u64, u64)> = (0..64u64).map(|k| (k * 4 + 1, 10)).collect();
    pts.push((0b1000_0000, 640));
    let p = plan(&pts, &params(8, 8, 2, Reduce::Tree)).unwrap();
    let elephant = match p.table.route(0b1000_0000) {
        Route::Rule { core, .. } => core,
        Route::Default => unreachable!("tiling"),
    };
    assert_eq!(p.core_weight[usize::from(elephant)], 640);
    assert!((p.imbalance() - 1.0).abs() < 1e-9, "{:?}", p.core_weight);
}
