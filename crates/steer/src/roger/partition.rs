//! Giving the cover's cubes to cores so that the cores' weights have the least
//! variance (NFLOW/MVT Alg. 1 lines 14–17). Every cube is a component of its
//! own (see `merge`), so any assignment is a valid partition.
//!
//! Small instances are solved exactly, by a branch-and-bound walk over the
//! assignments (the paper's traversal of the partitions); larger ones by
//! longest-processing-time first, then single moves and pairwise swaps while they
//! lower the variance.

/// Assignments walked at most by the exact search.
pub const EXACT_LIMIT: u64 = 2_000_000;

/// The core of each weight; `cores ≥ 1`.
pub fn balance(weights: &[u64], cores: usize) -> Vec<usize> {
    let cores = cores.max(1);
    if weights.is_empty() {
        return Vec::new();
    }
    let space = (cores as u64)
        .checked_pow(weights.len().saturating_sub(1) as u32)
        .unwrap_or(u64::MAX);
    if space <= EXACT_LIMIT {
        exact(weights, cores)
    } else {
        improve(weights, cores, lpt(weights, cores))
    }
}

/// Σ over cores of the squared load: the variance up to constants, the total
/// being fixed.
pub fn sum_squares(weights: &[u64], assign: &[usize], cores: usize) -> u128 {
    let mut load = vec![0u128; cores];
    for (w, &c) in weights.iter().zip(assign) {
        load[c] += u128::from(*w);
    }
    load.iter().map(|l| l * l).sum()
}

/// The least Σ load² over every assignment, by trying them all: a reference
/// for small cases (`cores^len` assignments).
pub fn enumerated_optimum(weights: &[u64], cores: usize) -> u128 {
    let n = weights.len();
    let mut best = u128::MAX;
    let mut a = vec![0usize; n];
    loop {
        best = best.min(sum_squares(weights, &a, cores));
        let mut k = 0;
        loop {
            if k == n {
                return best;
            }
            a[k] += 1;
            if a[k] < cores {
                break;
            }
            a[k] = 0;
            k += 1;
        }
    }
}

fn exact(weights: &[u64], cores: usize) -> Vec<usize> {
    // heaviest first prunes best
    let mut idx: Vec<usize> = (0..weights.len()).collect();
    idx.sort_by_key(|&i| std::cmp::Reverse(weights[i]));
    let w: Vec<u128> = idx.iter().map(|&i| u128::from(weights[i])).collect();
    let start = lpt(weights, cores);
    let mut best_cost = sum_squares(weights, &start, cores);
    let mut best: Vec<usize> = idx.iter().map(|&i| start[i]).collect();
    let mut cur = vec![0usize; w.len()];
    let mut load = vec![0u128; cores];
    let rest: Vec<u128> = (0..=w.len()).map(|k| w[k..].iter().sum()).collect();
    search(
        &w,
        &rest,
        0,
        0,
        &mut cur,
        &mut load,
        &mut best,
        &mut best_cost,
    );
    let mut out = vec![0; weights.len()];
    for (k, &i) in idx.iter().enumerate() {
        out[i] = best[k];
    }
    out
}

#[allow(clippy::too_many_arguments)]
fn search(
    w: &[u128],
    rest: &[u128],
    k: usize,
    used: usize,
    cur: &mut [usize],
    load: &mut [u128],
    best: &mut Vec<usize>,
    best_cost: &mut u128,
) {
    let cost: u128 = load.iter().map(|l| l * l).sum();
    // the remaining weight spread perfectly over the least loaded cores can
    // lower nothing below what is already placed: a bound on any completion
    if cost + lower_bound_rest(load, rest[k]) >= *best_cost {
        return;
    }
    if k == w.len() {
        *best_cost = cost;
        best.copy_from_slice(cur);
        return;
    }
    // cores beyond the first empty one are interchangeable
    let open = (used + 1).min(load.len());
    for c in 0..open {
        cur[k] = c;
        load[c] += w[k];
        search(w, rest, k + 1, used.max(c + 1), cur, load, best, best_cost);
        load[c] -= w[k];
    }
}

/// A lower bound on how much Σ load² grows when `rest` more weight is added
/// anywhere: water-filling the lowest loads.
fn lower_bound_rest(load: &[u128], rest: u128) -> u128 {
    if rest == 0 {
        return 0;
    }
    let mut l: Vec<u128> = load.to_vec();
    l.sort_unstable();
    let before: u128 = l.iter().map(|x| x * x).sum();
    // raise the lowest k loads to a common level
    let mut remaining = rest;
    let mut k = 1;
    while k < l.len() {
        let need = (l[k] - l[k - 1]) * k as u128;
        if need > remaining {
            break;
        }
        remaining -= need;
        let level = l[k];
        l[..k].fill(level);
        k += 1;
    }
    let each = remaining / k as u128;
    let extra = remaining % k as u128;
    for (i, x) in l[..k].iter_mut().enumerate() {
        *x += each + u128::from((i as u128) < extra);
    }
    let after: u128 = l.iter().map(|x| x * x).sum();
    // integer water-filling is not below the real optimum's floor
    after.saturating_sub(before).saturating_sub(k as u128)
}

fn lpt(weights: &[u64], cores: usize) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..weights.len()).collect();
    idx.sort_by_key(|&i| (std::cmp::Reverse(weights[i]), i));
    let mut load = vec![0u64; cores];
    let mut out = vec![0; weights.len()];
    for i in idx {
        let c = (0..cores).min_by_key(|&c| (load[c], c)).expect("cores ≥ 1");
        out[i] = c;
        load[c] += weights[i];
    }
    out
}

fn improve(weights: &[u64], cores: usize, mut assign: Vec<usize>) -> Vec<usize> {
    let w: Vec<i128> = weights.iter().map(|&x| i128::from(x)).collect();
    let mut load = vec![0i128; cores];
    for (x, &c) in w.iter().zip(&assign) {
        load[c] += x;
    }
    // moving x from a to b changes Σ load² by 2x(x + L_b − L_a)
    for _round in 0..64 {
        let mut better = false;
        for i in 0..w.len() {
            let a = assign[i];
            if let Some(b) = (0..cores).min_by_key(|&b| load[b]) {
                if b != a && 2 * w[i] * (w[i] + load[b] - load[a]) < 0 {
                    load[a] -= w[i];
                    load[b] += w[i];
                    assign[i] = b;
                    better = true;
                }
            }
        }
        for i in 0..w.len() {
            for j in i + 1..w.len() {
                let (a, b) = (assign[i], assign[j]);
                if a == b {
                    continue;
                }
                // swap: a gets d = w_j − w_i more, b d less
                let d = w[j] - w[i];
                if 2 * d * (d + load[a] - load[b]) < 0 {
                    load[a] += d;
                    load[b] -= d;
                    assign.swap(i, j);
                    better = true;
                }
            }
        }
        if !better {
            break;
        }
    }
    assign
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_exact_search_is_optimal() {
        let cases: [(&[u64], usize); 4] = [
            (&[8, 7, 6, 5, 4], 2),
            (&[10, 1, 1, 1, 1, 1, 1], 3),
            (&[3, 3, 2, 2, 2], 2),
            (&[100, 30, 29, 28, 13, 5, 1], 3),
        ];
        for (w, c) in cases {
            let a = balance(w, c);
            assert_eq!(
                sum_squares(w, &a, c),
                enumerated_optimum(w, c),
                "{w:?} on {c}"
            );
        }
    }

    #[test]
    fn the_heuristic_balances_many_cubes() {
        let w: Vec<u64> = (1..=40).map(|i| i * 37 % 101 + 1).collect();
        let a = balance(&w, 8);
        let mut load = [0u64; 8];
        for (x, c) in w.iter().zip(&a) {
            load[*c] += x;
        }
        let (mx, mn) = (load.iter().max().unwrap(), load.iter().min().unwrap());
        assert!(mx - mn <= *w.iter().max().unwrap(), "{load:?}");
    }
}
