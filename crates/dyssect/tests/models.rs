//! The Dyssect models against brute force on instances small enough to enumerate,
//! the offloading-core constraint binding, infeasible SLOs reported, and the
//! controller turning a solution into a plan.

use std::time::Duration;

use dyssect::{solve, Dyssect, DyssectConfig, Instance, Objective, SolveError};

const LIMIT: Duration = Duration::from_secs(20);

fn inst(load: &[f64], workers: usize, offloaders: usize) -> Instance {
    Instance {
        load: load.to_vec(),
        r_max: vec![0.9; load.len()],
        r_min: vec![0.0; load.len()],
        workers,
        offloaders,
        owner: (0..load.len()).map(|s| s % workers).collect(),
        offload_core: vec![None; workers],
        u_work: 0.9,
        u_off: 0.9,
        residual: 0.25,
        offload_scale: 1.0,
        min_served: 2,
        fixed: vec![false; load.len()],
    }
}

/// Every assignment, offloading map and ratio on a 0.05 grid: (cores used, max
/// utilisation, migrations) of each feasible one, through `visit`.
fn enumerate(i: &Instance, mut visit: impl FnMut(usize, usize, f64, usize)) {
    let (ns, nw, nk) = (i.load.len(), i.workers, i.offloaders);
    let grid: Vec<f64> = (0..=20).map(|x| x as f64 * 0.05).collect();
    let mut owner = vec![0; ns];
    for a in 0..nw.pow(ns as u32) {
        let mut x = a;
        for o in owner.iter_mut() {
            *o = x % nw;
            x /= nw;
        }
        let active: Vec<bool> = (0..nw).map(|c| owner.contains(&c)).collect();
        for m in 0..(nk + 1).pow(nw as u32) {
            let mut x = m;
            let oc: Vec<Option<usize>> = (0..nw)
                .map(|_| {
                    let v = x % (nk + 1);
                    x /= nk + 1;
                    (v > 0).then(|| v - 1)
                })
                .collect();
            // Eq. 5: only active working cores offload; Eq. 8: a used offloading
            // core serves ≥ min_served working cores
            if (0..nw).any(|c| oc[c].is_some() && !active[c]) {
                continue;
            }
            let served: Vec<usize> = (0..nk)
                .map(|k| oc.iter().filter(|o| **o == Some(k)).count())
                .collect();
            if served.iter().any(|&n| n > 0 && n < i.min_served) {
                continue;
            }
            let used_k = served.iter().filter(|&&n| n > 0).count();
            let used_w = active.iter().filter(|x| **x).count();
            let mut r = vec![0.0; ns];
            let steps = grid.len().pow(ns as u32);
            for q in 0..steps {
                let mut x = q;
                for rv in r.iter_mut() {
                    *rv = grid[x % grid.len()];
                    x /= grid.len();
                }
                if r.iter().zip(&i.r_max).any(|(a, b)| *a > *b + 1e-12) {
                    continue;
                }
                // a shard whose core does not offload must say r = 0 (no duplicates)
                if (0..ns).any(|s| oc[owner[s]].is_none() && r[s] > 0.0) {
                    continue;
                }
                let (uw, uo) = i.utilisation(&owner, &oc, &r);
                if uw.iter().any(|u| *u > i.u_work + 1e-9) || uo.iter().any(|u| *u > i.u_off + 1e-9)
                {
                    continue;
                }
                let umax = uw.iter().chain(&uo).cloned().fold(0.0, f64::max);
                visit(used_w, used_k, umax, i.migrations(&owner, &oc));
            }
        }
    }
}

fn check_feasible(i: &Instance, s: &dyssect::Solution) {
    let (uw, uo) = i.utilisation(&s.owner, &s.offload_core, &s.ratio);
    for u in &uw {
        assert!(*u <= i.u_work + 1e-6, "{uw:?}");
    }
    for u in &uo {
        assert!(*u <= i.u_off + 1e-6, "{uo:?}");
    }
    for (r, m) in s.ratio.iter().zip(&i.r_max) {
        assert!(*r <= m + 1e-9);
    }
}

#[test]
fn fewest_cores_matches_brute_force() {
    let mut solved = Vec::new();
    for load in [
        vec![0.3, 0.3, 0.2],
        vec![0.8, 0.7, 0.3],
        vec![1.1, 0.2, 0.5],
        vec![1.0, 1.0, 0.1],
        vec![1.2, 1.2, 0.6],
    ] {
        let i = inst(&load, 3, 1);
        let mut best = usize::MAX;
        enumerate(&i, |w, k, _, _| best = best.min(w + k));
        let s = solve(&i, Objective::Cores, LIMIT);
        if best == usize::MAX {
            assert_eq!(s, Err(SolveError::Infeasible), "{load:?}");
            continue;
        }
        let s = s.unwrap_or_else(|e| panic!("{load:?}: {e}"));
        check_feasible(&i, &s);
        let used =
            s.working.iter().filter(|x| **x).count() + s.offloading.iter().filter(|x| **x).count();
        assert_eq!(used, best, "{load:?}: {s:?}");
        solved.push(best);
    }
    // the instances span one to all cores, offloading included
    assert_eq!(solved, vec![1, 3, 3, 3, 4], "cores used per instance");
}

/// Table IV has no utilisation caps: the brute force enumerates every
/// assignment, and an instance with more load than the caps allow still gets
/// its most even plan.
#[test]
fn balance_matches_brute_force() {
    for load in [
        vec![0.5, 0.4, 0.3],
        vec![0.9, 0.2, 0.6],
        vec![0.7, 0.7, 0.1],
        vec![1.2, 0.9, 0.6],
    ] {
        let i = inst(&load, 2, 1);
        let uncapped = Instance {
            u_work: 1e9,
            u_off: 1e9,
            ..i.clone()
        };
        let alpha = 1e-4;
        let mut best = f64::MAX;
        enumerate(&uncapped, |w, k, umax, mig| {
            if w == 2 && k == 1 {
                best = best.min(umax + alpha * mig as f64);
            }
        });
        let obj = Objective::Balance {
            working: 2,
            offloading: 1,
            alpha,
        };
        let s = solve(&i, obj, LIMIT).unwrap();
        check_feasible(&uncapped, &s);
        assert!(s.optimal);
        let umax = s.u_work.iter().chain(&s.u_off).cloned().fold(0.0, f64::max);
        let got = umax + alpha * s.migrations as f64;
        // the MILP's ratios are continuous: at least as good as the 0.05 grid
        // (within the solver's 3 % gap), and no better than the grid's optimum
        // minus one grid step of load
        assert!(got <= best * 1.03 + 1e-6, "{load:?}: {got} vs brute {best}");
        let step = 0.05 * load.iter().cloned().fold(0.0, f64::max);
        assert!(got >= best - step, "{load:?}: {got} vs brute {best}");
        if load[0] > 1.0 {
            assert!(umax > i.u_work, "an overloaded instance: {s:?}");
        }
    }
}

/// A shard whose heaviest flow carries 70 % of it offloads 0 or at least 70 %:
/// the model plans only ratios the runtime can carry out.
#[test]
fn a_ratio_is_zero_or_at_least_the_heaviest_flow() {
    let mut i = inst(&[1.2, 0.5, 0.5], 2, 1);
    let obj = Objective::Balance {
        working: 2,
        offloading: 1,
        alpha: 0.0,
    };
    let free = solve(&i, obj, LIMIT).unwrap();
    assert!(
        free.ratio[0] > 0.0 && free.ratio[0] < 0.7,
        "without r_min the elephant's shard offloads a slice: {free:?}"
    );
    i.r_min = vec![0.7, 0.0, 0.0];
    let s = solve(&i, obj, LIMIT).unwrap();
    assert!(
        s.ratio[0] == 0.0 || s.ratio[0] >= 0.7 - 1e-6,
        "{:?}",
        s.ratio
    );
    // an elephant larger than the shard may offload cannot go at all
    i.r_max = vec![0.6; 3];
    let s = solve(&i, obj, LIMIT).unwrap();
    assert_eq!(s.ratio[0], 0.0, "{s:?}");
}

/// Table III with both working cores active and no offloading core.
const MIG2: Objective = Objective::Migrations {
    working: 2,
    offloading: 0,
};

#[test]
fn migrations_objective_keeps_a_feasible_assignment() {
    let mut i = inst(&[0.3, 0.3, 0.3, 0.3], 2, 0);
    let s = solve(&i, MIG2, LIMIT).unwrap();
    assert_eq!(s.migrations, 0);
    assert_eq!(s.owner, i.owner);
    // overloaded core 0: one shard moves, not more
    i.load = vec![0.6, 0.1, 0.6, 0.1];
    let s = solve(&i, MIG2, LIMIT).unwrap();
    assert_eq!(s.migrations, 1, "{s:?}");
    check_feasible(&i, &s);
    // a fixed (moving) shard stays
    i.fixed = vec![true, false, true, false];
    let s = solve(&i, MIG2, LIMIT);
    assert_eq!(
        s,
        Err(SolveError::Infeasible),
        "both heavy shards pinned to core 0"
    );
}

/// Two working cores each with one shard too heavy for it: both must offload, and
/// the offloading core's cap decides whether they can.
#[test]
fn the_offloading_core_cap_binds() {
    let mut i = inst(&[1.2, 1.2], 2, 1);
    let obj = Objective::Migrations {
        working: 2,
        offloading: 1,
    };
    let s = solve(&i, obj, LIMIT).unwrap();
    check_feasible(&i, &s);
    assert!(s.ratio.iter().all(|r| *r >= 1.0 / 3.0 - 1e-6), "{s:?}");
    assert!(s.u_off[0] > 0.7, "the offloading core carries load: {s:?}");
    // an offloaded packet costing 1.5× on the offloading core no longer fits
    i.offload_scale = 1.5;
    assert_eq!(solve(&i, obj, LIMIT), Err(SolveError::Infeasible));
    // nor does a tighter offloading-core cap
    i.offload_scale = 1.0;
    i.u_off = 0.5;
    assert_eq!(solve(&i, obj, LIMIT), Err(SolveError::Infeasible));
}

#[test]
fn infeasible_slos_are_reported_and_counted() {
    // more load than all cores can carry under their caps
    let i = inst(&[0.9, 0.9, 0.9], 2, 0);
    assert_eq!(
        solve(&i, Objective::Cores, LIMIT),
        Err(SolveError::Infeasible)
    );
    let mut bad = i.clone();
    bad.owner = vec![0, 0, 5];
    assert!(matches!(
        solve(&bad, Objective::Cores, LIMIT),
        Err(SolveError::Instance(_))
    ));
    // the controller keeps the previous plan (no change) and counts it
    let snap = balance::Snapshot {
        now_ns: 1,
        period_ns: 100_000_000,
        shards: 2,
        workers: 2,
        owner: vec![0, 1],
        bucket_packets: vec![1_000_000, 1_000_000],
        core_load: vec![1.0, 1.0],
        core_packets: vec![1_000_000, 1_000_000],
        offload_core: vec![None, None],
        ratio: vec![0, 0],
        ..Default::default()
    };
    let mut d = Dyssect::new(DyssectConfig::default()).unwrap();
    let plan = balance::Balancer::plan(&mut d, &snap);
    // the balance model's fallback finds them already as even as they go
    assert_eq!(plan, balance::Plan::default());
    assert!(d.stats().infeasible >= 1, "{:?}", d.stats());
    assert_eq!(d.stats().fallbacks, 1, "{:?}", d.stats());
    assert!(d
        .stats()
        .last_error
        .as_deref()
        .unwrap()
        .contains("infeasible"));
}

/// More load than the caps allow, all on core 0: Table III has no plan, and
/// the controller falls back to the balance model, which spreads the shards.
#[test]
fn an_overload_no_plan_meets_falls_back_to_balancing() {
    let snap = balance::Snapshot {
        now_ns: 1,
        period_ns: 100_000_000,
        shards: 4,
        workers: 2,
        owner: vec![0; 4],
        bucket_packets: vec![1_000_000; 4],
        core_load: vec![1.0, 0.0],
        core_packets: vec![2_000_000, 0],
        offload_core: vec![None, None],
        ratio: vec![0; 4],
        ..Default::default()
    };
    // core 0 ran half of what arrived at τ = 50 ns per packet: 4 shards of 0.5,
    // 2.0 of load where the caps allow 1.8
    let mut d = Dyssect::new(DyssectConfig::default()).unwrap();
    let plan = balance::Balancer::plan(&mut d, &snap);
    assert_eq!(d.stats().fallbacks, 1, "{:?}", d.stats());
    assert_eq!(plan.moves.len(), 2, "{plan:?}");
    assert!(plan.moves.iter().all(|(_, c)| *c == 1), "{plan:?}");
}

/// Use Case II's configuration: the balance model with every core active and
/// no long-timescale solve.
#[test]
fn without_the_long_timescale_every_core_stays_active() {
    let snap = balance::Snapshot {
        now_ns: 1,
        period_ns: 100_000_000,
        shards: 4,
        workers: 3,
        owner: vec![0; 4],
        bucket_packets: vec![100_000; 4],
        core_load: vec![0.4, 0.0, 0.0],
        core_packets: vec![400_000, 0, 0],
        offloaders: 1,
        offload_core: vec![None; 3],
        ratio: vec![0; 4],
        ..Default::default()
    };
    let cfg = DyssectConfig {
        long_timescale: false,
        objective: dyssect::ShortObjective::Balance,
        ..Default::default()
    };
    let mut d = Dyssect::new(cfg).unwrap();
    let plan = balance::Balancer::plan(&mut d, &snap);
    assert_eq!(d.stats().long_solves, 0);
    // 0.4 of load: Table II would keep one core; the balance model spreads it
    let cores: std::collections::BTreeSet<_> = plan.moves.iter().map(|(_, c)| *c).collect();
    assert_eq!(cores.len(), 2, "{plan:?}");
    // the same snapshot with the long timescale: one working core suffices
    let mut d = Dyssect::new(DyssectConfig {
        objective: dyssect::ShortObjective::Balance,
        ..Default::default()
    })
    .unwrap();
    let plan = balance::Balancer::plan(&mut d, &snap);
    assert_eq!(d.stats().long_solves, 1);
    assert!(plan.moves.is_empty(), "{plan:?}");
}

#[test]
fn the_controller_moves_shards_and_sets_ratios() {
    // core 0 carries 3 of 4 busy shards; one offloading core
    let snap = balance::Snapshot {
        now_ns: 1,
        period_ns: 100_000_000,
        shards: 4,
        workers: 2,
        owner: vec![0, 0, 0, 1],
        bucket_packets: vec![200_000, 200_000, 200_000, 10_000],
        bucket_priority: vec![100_000, 0, 0, 0],
        core_load: vec![0.95, 0.05, 0.0],
        core_packets: vec![600_000, 10_000, 0],
        offloaders: 1,
        offload_core: vec![Some(0), Some(0)],
        ratio: vec![0; 4],
        ..Default::default()
    };
    let mut d = Dyssect::new(DyssectConfig::default()).unwrap();
    let plan = balance::Balancer::plan(&mut d, &snap);
    assert!(!plan.moves.is_empty(), "{plan:?} {:?}", d.stats());
    assert!(
        plan.moves.iter().all(|(s, c)| *s < 3 && *c == 1),
        "{plan:?}"
    );
    // shard 0 is half priority: its ratio stays ≤ 0.5
    for (s, r) in &plan.ratios {
        if *s == 0 {
            assert!(*r <= balance::migrate::RATIO_ONE / 2 + 1, "{plan:?}");
        }
    }
    assert_eq!(d.stats().long_solves, 1);
    assert_eq!(d.stats().short_solves, 1);
    // bad configuration: named
    let e = Dyssect::new(DyssectConfig {
        u_cap: 1.5,
        ..Default::default()
    })
    .unwrap_err();
    assert!(e.contains("u_cap"), "{e}");
}

/// A saturated core ran less than arrived for it: its shards' loads are what
/// it ran scaled by its queue's drops.
#[test]
fn a_saturated_cores_shards_count_its_queues_drops() {
    let mut snap = balance::Snapshot {
        now_ns: 1,
        period_ns: 100_000_000,
        shards: 2,
        workers: 2,
        owner: vec![0, 1],
        bucket_packets: vec![1_000_000, 500_000],
        core_load: vec![1.0, 0.5],
        core_packets: vec![1_000_000, 500_000],
        offload_core: vec![None, None],
        ratio: vec![0, 0],
        ..Default::default()
    };
    let d = Dyssect::new(DyssectConfig::default()).unwrap();
    let (before, _) = d.instance(&snap).unwrap();
    assert!((before.load[0] - 1.0).abs() < 1e-9, "{:?}", before.load);
    // core 0's queue dropped half as much again as it ran
    snap.core_drops = vec![500_000, 0];
    let (after, _) = d.instance(&snap).unwrap();
    assert!((after.load[0] - 1.5).abs() < 1e-9, "{:?}", after.load);
    assert!((after.load[1] - before.load[1]).abs() < 1e-12);
}

/// A round whose solves give no plan keeps the previous one and says so (here
/// a snapshot naming an owner the model has no core for: a bad instance).
#[test]
fn a_round_without_a_plan_is_counted_as_kept() {
    let snap = balance::Snapshot {
        now_ns: 1,
        period_ns: 100_000_000,
        shards: 2,
        workers: 1,
        owner: vec![0, 3],
        bucket_packets: vec![500_000, 500_000],
        core_load: vec![1.0],
        core_packets: vec![1_000_000],
        offload_core: vec![None],
        ratio: vec![0, 0],
        ..Default::default()
    };
    let mut d = Dyssect::new(DyssectConfig::default()).unwrap();
    let plan = balance::Balancer::plan(&mut d, &snap);
    assert_eq!(plan, balance::Plan::default());
    let st = d.stats();
    assert_eq!((st.kept, st.fallbacks), (1, 0), "{st:?}");
    let c: std::collections::BTreeMap<_, _> = balance::Balancer::counters(&d).into_iter().collect();
    assert_eq!(c["dyssect_kept"], 1.0);
}
