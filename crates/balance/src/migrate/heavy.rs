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
    items: Vec<(EntryIdx, u32)>,
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
            self.items.push((e, 1));
        } else {
            // Space-Saving: the new flow replaces the smallest counter
            let m = self.items.iter_mut().min_by_key(|it| it.1).expect("K > 0");
            *m = (e, m.1 + 1);
        }
    }

    /// The window's heaviest flows, heaviest first, with the cumulative share of
    /// the shard's (sampled) packets they carry; then a fresh window.
    pub fn take(&mut self) -> Vec<(EntryIdx, f64)> {
        let mut items = std::mem::take(&mut self.items);
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
/// before each stays below `r` (so the share is rounded up to a flow boundary).
pub fn eligible(heavy: &[(EntryIdx, f64)], r: f64) -> Vec<EntryIdx> {
    let mut before = 0.0;
    let mut out = Vec::new();
    for &(e, cum) in heavy {
        if before >= r || r <= 0.0 {
            break;
        }
        out.push(e);
        before = cum;
    }
    out
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
        assert_eq!(eligible(&h, 0.3), vec![1]);
        assert_eq!(eligible(&h, 0.5), vec![1]);
        assert_eq!(eligible(&h, 0.6), vec![1, 2]);
        assert!(eligible(&h, 0.0).is_empty());
    }
}
