//! The heaviest flows of each shard over a window (Space-Saving, K counters,
//! sampled), for offload decisions: the cumulative share of the shard's traffic its
//! heaviest flows carry, so an offload ratio can be rounded to a flow boundary and
//! the heaviest flows offloaded first (as Dyssect's code does).

use super::offload::EntryIdx;

/// Counters per shard.
pub const K: usize = 8;
/// One packet in `SAMPLE` is counted.
const SAMPLE: u32 = 4;

#[derive(Clone, Debug, Default)]
/// Space-Saving counters of one shard over one window.
pub struct TopK {
    /// (flow, count, error): a flow that took over a counter inherits its
    /// count, so `count − error` is what it surely sent.
    items: Vec<(EntryIdx, u32, u32)>,
    total: u64,
}

impl TopK {
    /// Counts one (sampled) packet of flow `e`.
    #[inline]
    pub fn add(&mut self, e: EntryIdx) {
        self.total += 1;
        if let Some(it) = self.items.iter_mut().find(|it| it.0 == e) {
            it.1 += 1;
        } else if self.items.len() < K {
            self.items.push((e, 1, 0));
        } else {
            // Space-Saving: the new flow replaces the smallest counter
            let m = self.items.iter_mut().min_by_key(|it| it.1).expect("K > 0");
            *m = (e, m.1 + 1, m.1);
        }
    }

    /// The window's heaviest flows, heaviest first, with the cumulative share of
    /// the shard's (sampled) packets they surely carry (Space-Saving's lower
    /// bounds: among many mice the counters hold little, not a share each);
    /// then a fresh window.
    pub fn take(&mut self) -> Vec<(EntryIdx, f64)> {
        let mut items: Vec<(EntryIdx, u32)> = std::mem::take(&mut self.items)
            .into_iter()
            .map(|(e, n, err)| (e, n - err))
            .filter(|it| it.1 > 0)
            .collect();
        items.sort_by_key(|it| std::cmp::Reverse(it.1));
        let total = self.total.max(1) as f64;
        self.total = 0;
        let mut cum = 0.0;
        items
            .into_iter()
            .map(|(e, n)| {
                cum += f64::from(n) / total;
                (e, cum.min(1.0))
            })
            .collect()
    }
}

/// A sampling clock shared by a core's shards.
/// Counts one packet in `SAMPLE`.
#[derive(Debug, Default)]
pub struct Sampler(u32);

impl Sampler {
    /// True for the packets to count.
    #[inline]
    pub fn tick(&mut self) -> bool {
        self.0 = self.0.wrapping_add(1);
        self.0.is_multiple_of(SAMPLE)
    }
}

/// The flows to offload for ratio `r` (0..=1): the heaviest first, while the share
/// before each stays below `r` (so the share is rounded up to a flow boundary);
/// and, when `r` is more than all of them carry, the share of the other flows
/// (by slice, in units of `one`) that makes up the rest.
pub fn eligible(heavy: &[(EntryIdx, f64)], r: f64, one: u32) -> (Vec<EntryIdx>, u32) {
    let mut before = 0.0;
    let mut out = Vec::new();
    for &(e, cum) in heavy {
        if before >= r || r <= 0.0 {
            break;
        }
        out.push(e);
        before = cum;
    }
    let rest = if r > before && before < 1.0 {
        (((r - before) / (1.0 - before)).min(1.0) * f64::from(one)).round() as u32
    } else {
        0
    };
    (out, rest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_heavy_flows_and_their_shares() {
        let mut t = TopK::default();
        // flow 1: 50 %, flow 2: 25 %, 40 mice: 25 %
        for i in 0..800u32 {
            t.add(match i % 4 {
                0 | 1 => 1,
                2 => 2,
                _ => 100 + (i / 4) % 40,
            });
        }
        let h = t.take();
        assert_eq!((h[0].0, h[1].0), (1, 2));
        assert!(
            (h[0].1 - 0.5).abs() < 0.01 && (h[1].1 - 0.75).abs() < 0.01,
            "{h:?}"
        );
        assert!(t.take().is_empty(), "a fresh window");
        // rounding up to a flow boundary
        assert_eq!(eligible(&h, 0.3, 100), (vec![1], 0));
        assert_eq!(eligible(&h, 0.5, 100), (vec![1], 0));
        assert_eq!(eligible(&h, 0.6, 100), (vec![1, 2], 0));
        assert_eq!(eligible(&h, 0.0, 100), (vec![], 0));
    }

    /// Among mice, Space-Saving's counters hold flows that took a counter over
    /// late: their lower bounds are small, so the shard's heavy flows are not
    /// said to carry it all; a ratio beyond them is made up by slices of the
    /// others.
    #[test]
    fn mice_get_no_share_they_did_not_send_and_a_ratio_beyond_is_made_up() {
        let mut t = TopK::default();
        // flow 1: 20 %, 4 000 mice: 80 %
        for i in 0..10_000u32 {
            t.add(if i % 5 == 0 { 1 } else { 100 + i % 4000 });
        }
        let h = t.take();
        assert_eq!(h[0].0, 1);
        assert!((h[0].1 - 0.2).abs() < 0.01, "{h:?}");
        let all = h.last().unwrap().1;
        assert!(all < 0.25, "the counters claim {all} of the traffic: {h:?}");
        // r = 0.6: the heavy flows and half of the rest (by slice)
        let (ids, rest) = eligible(&h, 0.6, 1000);
        assert_eq!(ids.len(), h.len());
        let want = (0.6 - all) / (1.0 - all) * 1000.0;
        assert!((f64::from(rest) - want).abs() <= 1.0, "{rest} vs {want}");
    }
}
