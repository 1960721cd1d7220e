//! SLOs as utilisation caps (Dyssect §II-C): Kingman's G/G/1 approximation of the
//! mean queueing delay, W ≈ (ρ / (1 − ρ)) · ((c_a² + c_s²) / 2) · τ, with τ the mean
//! service time and c_a, c_s the coefficients of variation of inter-arrival and
//! service times. W ≤ SLO is the same as ρ ≤ K / (1 + K) with
//! K = 2·SLO / ((c_a² + c_s²)·τ): a linear bound on utilisation.

/// The largest utilisation at which Kingman's mean wait stays within `slo_ns`, for a
/// mean service time `service_ns` and squared coefficients of variation `ca2`, `cs2`.
/// 0 when the SLO cannot be met at any load (SLO ≤ 0 or no service time).
pub fn utilisation_cap(slo_ns: f64, service_ns: f64, ca2: f64, cs2: f64) -> f64 {
    let var = (ca2 + cs2).max(1e-9);
    if !(slo_ns > 0.0 && service_ns > 0.0) {
        return 0.0;
    }
    let k = 2.0 * slo_ns / (var * service_ns);
    k / (1.0 + k)
}

/// Kingman's mean wait (ns) at utilisation `rho` (∞ at ρ ≥ 1).
pub fn wait_ns(rho: f64, service_ns: f64, ca2: f64, cs2: f64) -> f64 {
    if rho >= 1.0 {
        return f64::INFINITY;
    }
    rho / (1.0 - rho) * (ca2 + cs2) / 2.0 * service_ns
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_meets_the_slo_exactly() {
        for (slo, tau) in [(100_000.0, 300.0), (1_000.0, 300.0), (50.0, 300.0)] {
            let u = utilisation_cap(slo, tau, 1.0, 1.0);
            assert!(u > 0.0 && u < 1.0);
            let w = wait_ns(u, tau, 1.0, 1.0);
            assert!((w - slo).abs() / slo < 1e-9, "{slo}: cap {u} waits {w}");
            // just above the cap the SLO is broken
            assert!(wait_ns(u + 1e-3, tau, 1.0, 1.0) > slo);
        }
        assert_eq!(utilisation_cap(0.0, 300.0, 1.0, 1.0), 0.0);
    }
}
