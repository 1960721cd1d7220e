//! Tables that grow with the flows against tables allocated at their
//! capacity, each variant in a fresh process and the two alternated round
//! by round: run one after the other in one process, the second inherits a
//! heap the first shaped, and a host that slows down for a minute favours
//! whichever ran before it.

use super::{median, memory};

/// One size's comparison.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Growth {
    /// Live flows.
    pub flows: u32,
    /// Median ns a packet, growing and preallocated.
    pub growing_ns: f64,
    /// See `growing_ns`.
    pub prealloc_ns: f64,
    /// Per round, the growing table's rate over the preallocated one's.
    pub ratios: Vec<f64>,
    /// Median of `ratios`.
    pub ratio: f64,
    /// Median resident bytes per live flow, growing and preallocated.
    pub growing_bytes: f64,
    /// See `growing_bytes`.
    pub prealloc_bytes: f64,
}

/// Compares `fw+nat` with `fw+nat/prealloc` at each size of `flows` over
/// `rounds` rounds, `laps` timed laps a run; prints each size's line.
pub fn compare(
    flows: &[u32],
    packets: u64,
    laps: u32,
    rounds: usize,
) -> anyhow::Result<Vec<Growth>> {
    let mut out = Vec::new();
    for &n in flows {
        let pick = |name: &str| {
            memory::variants(n, n)
                .into_iter()
                .find(|v| v.name == name && v.flows == n)
                .ok_or_else(|| anyhow::anyhow!("no variant {name} at {n} flows"))
        };
        let (grow, pre) = (pick("fw+nat")?, pick("fw+nat/prealloc")?);
        let (mut g, mut p, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
        let (mut gb, mut pb) = (Vec::new(), Vec::new());
        for round in 0..rounds.max(1) {
            // alternated: the first of a round runs on a host the last
            // round's second warmed
            let (a, b) = if round % 2 == 0 {
                (&grow, &pre)
            } else {
                (&pre, &grow)
            };
            let ra = memory::in_child(a, packets, laps)?;
            let rb = memory::in_child(b, packets, laps)?;
            let (rg, rp) = if round % 2 == 0 { (ra, rb) } else { (rb, ra) };
            g.push(rg.ns_per_packet);
            p.push(rp.ns_per_packet);
            gb.push(rg.rss_per_flow);
            pb.push(rp.rss_per_flow);
            ratios.push(rp.ns_per_packet / rg.ns_per_packet.max(1e-9));
        }
        let r = Growth {
            flows: n,
            growing_ns: median(&mut g),
            prealloc_ns: median(&mut p),
            ratio: median(&mut ratios.clone()),
            ratios,
            growing_bytes: median(&mut gb),
            prealloc_bytes: median(&mut pb),
        };
        println!(
            "fw+nat at {} flows, growing / preallocated tables, fresh processes alternated, {} rounds: \
             {:.2} / {:.2} Mpps (medians), rate ratio per round {}, median {:.3}; bytes per flow {:.0} / {:.0}",
            r.flows,
            r.ratios.len(),
            1_000.0 / r.growing_ns.max(1e-9),
            1_000.0 / r.prealloc_ns.max(1e-9),
            r.ratios
                .iter()
                .map(|x| format!("{x:.3}"))
                .collect::<Vec<_>>()
                .join(" "),
            r.ratio,
            r.growing_bytes,
            r.prealloc_bytes,
        );
        out.push(r);
    }
    Ok(out)
}
