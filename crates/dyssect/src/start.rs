//! A starting plan for the balance model (Table IV), found greedily: the
//! solver starts from it, so a solve its time limit stops still returns a plan
//! at least this good. HiGHS alone, at 16 shards × 8 cores, often has nothing
//! better than the current assignment after the 50 ms a round allows, and
//! needs seconds to prove an optimum.
//!
//! Shards first: the cores that carry the most stay active, shards on the others
//! go to the least loaded active core, every active core gets a shard (Eq. 6),
//! then single moves from the busiest core to the least busy one and swaps
//! between them, each kept only if it lowers the busier of the two by more than
//! a migration's weight. Then offloading: active working cores go round-robin
//! to active offloading cores, and a water level T is found by bisection such
//! that every working core above T offloads down to it (its shards' regular
//! shares permitting, a packet leaving δ of its cost behind) and no offloading
//! core ends above T; each core offloads from its heaviest shards first, and
//! skips a shard whose heaviest flow is more than it needs (r_s^min).

use crate::instance::Instance;

/// A plan: owner per shard, offloading core per working core, ratio per shard.
#[derive(Clone, Debug, PartialEq)]
pub struct Start {
    /// Working core of each shard.
    pub owner: Vec<usize>,
    /// Offloading core of each working core.
    pub offload_core: Vec<Option<usize>>,
    /// Offload ratio of each shard.
    pub ratio: Vec<f64>,
    /// Active working cores.
    pub working: Vec<bool>,
    /// Active offloading cores.
    pub offloading: Vec<bool>,
}

/// A plan with `working` working and `offloading` offloading cores active, or
/// `None` if the counts allow none (fewer shards than working cores, or too
/// few working cores for each offloading core to serve `min_served`).
pub fn balance_start(
    inst: &Instance,
    working: usize,
    offloading: usize,
    alpha: f64,
) -> Option<Start> {
    let (ns, nw, nk) = (inst.load.len(), inst.workers, inst.offloaders);
    if working == 0 || working > nw || working > ns || offloading > nk {
        return None;
    }
    if offloading > 0 && working < offloading * inst.min_served {
        return None;
    }
    let active = active_cores(inst, working)?;
    let (mut owner, mut u) = place(inst, &active)?;
    improve(inst, &active, &mut owner, &mut u, alpha);
    let (offload_core, ratio) = offload(inst, &active, &owner, &u, offloading);
    Some(Start {
        owner,
        offload_core,
        ratio,
        working: active,
        offloading: (0..nk).map(|k| k < offloading).collect(),
    })
}

/// The `working` cores that stay active: those that carry the most (and a
/// fixed shard's core); `None` if the fixed shards need more.
fn active_cores(inst: &Instance, working: usize) -> Option<Vec<bool>> {
    let nw = inst.workers;
    let mut per_core = vec![0.0; nw];
    for (s, &c) in inst.owner.iter().enumerate() {
        per_core[c] += inst.load[s];
    }
    // the cores that carry the most stay active (a fixed shard's core too)
    let mut order: Vec<usize> = (0..nw).collect();
    order.sort_by(|&a, &b| per_core[b].total_cmp(&per_core[a]).then(a.cmp(&b)));
    let mut active = vec![false; nw];
    for (s, &fixed) in inst.fixed.iter().enumerate() {
        if fixed {
            active[inst.owner[s]] = true;
        }
    }
    if active.iter().filter(|a| **a).count() > working {
        return None;
    }
    for &c in &order {
        if active.iter().filter(|a| **a).count() == working {
            break;
        }
        active[c] = true;
    }
    Some(active)
}

/// Every shard on an active core (those of inactive cores on the least
/// loaded, heaviest first), every active core with a shard (Eq. 6); each
/// core's load.
fn place(inst: &Instance, active: &[bool]) -> Option<(Vec<usize>, Vec<f64>)> {
    let (ns, nw) = (inst.load.len(), inst.workers);
    let mut owner = inst.owner.clone();
    let mut u = vec![0.0; nw];
    let mut homeless: Vec<usize> = Vec::new();
    for s in 0..ns {
        if active[owner[s]] {
            u[owner[s]] += inst.load[s];
        } else {
            homeless.push(s);
        }
    }
    homeless.sort_by(|&a, &b| inst.load[b].total_cmp(&inst.load[a]));
    let least = |u: &[f64]| {
        (0..nw)
            .filter(|&c| active[c])
            .min_by(|&a, &b| u[a].total_cmp(&u[b]))
            .expect("an active core")
    };
    for s in homeless {
        let c = least(&u);
        owner[s] = c;
        u[c] += inst.load[s];
    }
    // Eq. 6: every active core holds a shard
    for c in (0..nw).filter(|&c| active[c]) {
        if owner.contains(&c) {
            continue;
        }
        let s = (0..ns)
            .filter(|&s| !inst.fixed[s] && owner.iter().filter(|&&o| o == owner[s]).count() > 1)
            .min_by(|&a, &b| inst.load[a].total_cmp(&inst.load[b]))?;
        u[owner[s]] -= inst.load[s];
        owner[s] = c;
        u[c] += inst.load[s];
    }
    Some((owner, u))
}

/// Moves and swaps between the busiest and the least busy core while one
/// gains more than it costs (`alpha` a migration).
fn improve(inst: &Instance, active: &[bool], owner: &mut [usize], u: &mut [f64], alpha: f64) {
    let (ns, nw) = (inst.load.len(), inst.workers);
    let movable = |s: usize| !inst.fixed[s];
    let least = |u: &[f64]| {
        (0..nw)
            .filter(|&c| active[c])
            .min_by(|&a, &b| u[a].total_cmp(&u[b]))
            .expect("an active core")
    };
    for _ in 0..4 * ns {
        let hi = (0..nw)
            .filter(|&c| active[c])
            .max_by(|&a, &b| u[a].total_cmp(&u[b]))
            .expect("an active core");
        let lo = least(u);
        let gain = |new_hi: f64, new_lo: f64| u[hi] - new_hi.max(new_lo);
        let mut best: Option<(f64, usize, Option<usize>)> = None;
        let on_hi: Vec<usize> = (0..ns).filter(|&s| owner[s] == hi && movable(s)).collect();
        let on_lo: Vec<usize> = (0..ns).filter(|&s| owner[s] == lo && movable(s)).collect();
        for &s in &on_hi {
            let l = inst.load[s];
            if on_hi.len() > 1 || owner.iter().filter(|&&o| o == hi).count() > 1 {
                let g = gain(u[hi] - l, u[lo] + l) - alpha;
                if g > 1e-9 && best.is_none_or(|b| g > b.0) {
                    best = Some((g, s, None));
                }
            }
            for &t in &on_lo {
                let d = l - inst.load[t];
                let g = gain(u[hi] - d, u[lo] + d) - 2.0 * alpha;
                if g > 1e-9 && best.is_none_or(|b| g > b.0) {
                    best = Some((g, s, Some(t)));
                }
            }
        }
        let Some((_, s, t)) = best else { break };
        owner[s] = lo;
        u[hi] -= inst.load[s];
        u[lo] += inst.load[s];
        if let Some(t) = t {
            owner[t] = hi;
            u[lo] -= inst.load[t];
            u[hi] += inst.load[t];
        }
    }
}

/// Offloading: each active core associated round-robin with one of the
/// first `offloading` offloading cores, then a water level found by
/// bisection, each core offloading what is above it (heaviest shards
/// first, none below its heaviest flow).
fn offload(
    inst: &Instance,
    active: &[bool],
    owner: &[usize],
    u: &[f64],
    offloading: usize,
) -> (Vec<Option<usize>>, Vec<f64>) {
    let (ns, nw, nk) = (inst.load.len(), inst.workers, inst.offloaders);
    let mut offload_core = vec![None; nw];
    let mut ratio = vec![0.0; ns];
    if offloading > 0 {
        for (i, c) in (0..nw).filter(|&c| active[c]).enumerate() {
            offload_core[c] = Some(i % offloading);
        }
        let keep = 1.0 - inst.residual;
        let room: Vec<f64> = (0..nw)
            .map(|c| {
                (0..ns)
                    .filter(|&s| owner[s] == c)
                    .map(|s| inst.load[s] * inst.r_max[s])
                    .sum()
            })
            .collect();
        // what each core offloads at level t, and whether the offloading cores fit
        let offload_at = |t: f64| -> Vec<f64> {
            (0..nw)
                .map(|c| {
                    if !active[c] || keep <= 0.0 {
                        0.0
                    } else {
                        ((u[c] - t).max(0.0) / keep).min(room[c])
                    }
                })
                .collect()
        };
        let fits = |t: f64| {
            let v = offload_at(t);
            let mut uk = vec![0.0; nk];
            for c in 0..nw {
                if let Some(k) = offload_core[c] {
                    uk[k] += inst.offload_scale * v[c];
                }
            }
            uk.iter().all(|x| *x <= t + 1e-12)
        };
        let (mut lo, mut hi) = (0.0, u.iter().cloned().fold(0.0, f64::max));
        for _ in 0..60 {
            let mid = 0.5 * (lo + hi);
            if fits(mid) {
                hi = mid;
            } else {
                lo = mid;
            }
        }
        for (c, &v) in offload_at(hi).iter().enumerate() {
            let mut left = v;
            let mut mine: Vec<usize> = (0..ns).filter(|&s| owner[s] == c).collect();
            mine.sort_by(|&a, &b| inst.load[b].total_cmp(&inst.load[a]));
            for s in mine {
                if left <= 0.0 || inst.load[s] <= 0.0 {
                    break;
                }
                let r = (left / inst.load[s]).min(inst.r_max[s]);
                if r < inst.r_min[s] {
                    // less than its heaviest flow: this shard cannot give it
                    continue;
                }
                ratio[s] = r;
                left -= r * inst.load[s];
            }
        }
    }
    (offload_core, ratio)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inst(load: &[f64], owner: &[usize], workers: usize, offloaders: usize) -> Instance {
        Instance {
            load: load.to_vec(),
            r_max: vec![1.0; load.len()],
            r_min: vec![0.0; load.len()],
            workers,
            offloaders,
            owner: owner.to_vec(),
            offload_core: vec![None; workers],
            u_work: 0.9,
            u_off: 0.9,
            residual: 0.25,
            offload_scale: 1.0,
            min_served: 2,
            fixed: vec![false; load.len()],
        }
    }

    #[test]
    fn shards_spread_and_the_excess_is_offloaded_to_one_level() {
        // everything on core 0; 2 working cores and 1 offloading core
        let i = inst(&[0.8, 0.6, 0.4, 0.2], &[0, 0, 0, 0], 2, 1);
        let s = balance_start(&i, 2, 1, 0.0).unwrap();
        let (uw, uo) = i.utilisation(&s.owner, &s.offload_core, &s.ratio);
        // 2.0 of load over two cores, 1.0 each, then offloading levels it:
        // 1 − 0.75·v = T on each working core and 2v = T on the offloading one
        // (T = 8/11)
        for u in uw.iter().chain(&uo) {
            assert!((u - 8.0 / 11.0).abs() < 1e-6, "{uw:?} {uo:?}");
        }
        assert_eq!(s.offload_core, vec![Some(0), Some(0)]);
    }

    #[test]
    fn counts_that_allow_no_plan_give_none_and_every_active_core_has_a_shard() {
        let i = inst(&[0.5, 0.5, 0.5], &[0, 0, 0], 3, 1);
        // one offloading core must serve two working cores
        assert!(balance_start(&i, 1, 1, 0.0).is_none());
        assert!(balance_start(&i, 4, 0, 0.0).is_none());
        let s = balance_start(&i, 3, 0, 0.0).unwrap();
        let mut o = s.owner.clone();
        o.sort_unstable();
        assert_eq!(o, vec![0, 1, 2]);
    }
}
