//! Flow sizes by rank: rank r (from 1) gets ∝ r^-α packets, each flow at least its
//! protocol's minimum, summing exactly to the requested total.

/// Sizes for flows of minimum sizes `mins` (indexed by rank, rank 1 first) summing to
/// `total`. Requires `total ≥ Σ mins`.
pub(crate) fn sizes(mins: &[u64], alpha: f64, total: u64) -> Vec<u64> {
    let w: Vec<f64> = (1..=mins.len()).map(|r| (r as f64).powf(-alpha)).collect();
    let at = |c: f64| -> Vec<u64> {
        w.iter()
            .zip(mins)
            .map(|(w, &m)| ((c * w).round() as u64).max(m))
            .collect()
    };
    let sum = |v: &[u64]| v.iter().sum::<u64>();
    // The sum is non-decreasing in c: bisect for the largest c whose sum ≤ total.
    let (mut lo, mut hi) = (
        0.0f64,
        total as f64 / w[w.len() - 1].max(f64::MIN_POSITIVE) + 1.0,
    );
    for _ in 0..200 {
        let mid = (lo + hi) / 2.0;
        if sum(&at(mid)) <= total {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    let mut v = at(lo);
    // Rounding leaves a small remainder: give it to the largest flows, one each.
    let mut rest = total - sum(&v);
    let (mut i, n) = (0, v.len());
    while rest > 0 {
        v[i % n] += 1;
        rest -= 1;
        i += 1;
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_total_and_minimums() {
        let mins: Vec<u64> = (0..1000).map(|i| if i % 3 == 0 { 1 } else { 6 }).collect();
        for alpha in [0.0, 0.6, 1.1, 1.4] {
            let v = sizes(&mins, alpha, 200_000);
            assert_eq!(v.iter().sum::<u64>(), 200_000, "alpha {alpha}");
            assert!(v.iter().zip(&mins).all(|(s, m)| s >= m));
        }
        let v = sizes(&[6, 6], 1.0, 12);
        assert_eq!(v, [6, 6]);
    }

    #[test]
    fn follows_the_power_law() {
        let v = sizes(&vec![1; 100], 1.0, 1_000_000);
        // s_1 / s_10 ≈ 10^α
        let ratio = v[0] as f64 / v[9] as f64;
        assert!((ratio - 10.0).abs() < 0.05, "{ratio}");
    }
}
