//! State an NF keeps per core and merges periodically instead of sharing it
//! (GranularNF §4, "delayed synchronisation"): counters, count-min sketches and
//! HyperLogLog. Merging is exact for all three: the merge of per-core states equals
//! the state one core would have built from all the packets.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, DefaultHasher, Hash};

use pdatastructs::countminsketch::CountMinSketch;
use pdatastructs::hyperloglog::HyperLogLog;

/// State that can be merged from several cores.
pub trait Mergeable {
    /// Adds `other` into `self`.
    fn merge(&mut self, other: &Self);
}

/// Packets and bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Packets.
    pub packets: u64,
    /// Bytes.
    pub bytes: u64,
}

impl Mergeable for Counters {
    fn merge(&mut self, o: &Self) {
        self.packets += o.packets;
        self.bytes += o.bytes;
    }
}

impl<K: Hash + Eq + Clone, V: Mergeable + Default + Clone> Mergeable for HashMap<K, V> {
    fn merge(&mut self, o: &Self) {
        for (k, v) in o {
            self.entry(k.clone()).or_default().merge(v);
        }
    }
}

/// A deterministic hasher (SipHash with fixed keys), the same on every core, which
/// sketches need in order to be mergeable.
pub type FixedHasher = BuildHasherDefault<DefaultHasher>;

/// Count-min sketch of per-key packet counts (heavy hitters).
#[derive(Clone)]
pub struct CountMin<T: Hash>(pub CountMinSketch<T, u64, FixedHasher>);

impl<T: Hash> CountMin<T> {
    /// A sketch with `w` columns and `d` rows.
    pub fn new(w: usize, d: usize) -> Self {
        CountMin(CountMinSketch::with_params_and_hasher(
            w,
            d,
            FixedHasher::default(),
        ))
    }

    /// Adds `n` to `key`.
    pub fn add(&mut self, key: &T, n: u64) {
        self.0.add_n(key, &n);
    }

    /// Estimated count of `key` (never below the true count).
    pub fn estimate(&self, key: &T) -> u64 {
        self.0.query_point(key)
    }
}

impl<T: Hash> core::fmt::Debug for CountMin<T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "CountMin({}x{})", self.0.w(), self.0.d())
    }
}

impl<T: Hash> Mergeable for CountMin<T> {
    fn merge(&mut self, o: &Self) {
        self.0.merge(&o.0);
    }
}

/// HyperLogLog distinct counter.
#[derive(Clone, Debug)]
pub struct Hll<T: Hash>(pub HyperLogLog<T, FixedHasher>);

impl<T: Hash> Hll<T> {
    /// A counter with 2^b registers (b in 4..=18; 12 gives ≈1.6 % error).
    pub fn new(b: usize) -> Self {
        Hll(HyperLogLog::with_hash(b, FixedHasher::default()))
    }

    /// Records `key`.
    pub fn add(&mut self, key: &T) {
        self.0.add(key);
    }

    /// Estimated number of distinct keys.
    pub fn count(&self) -> usize {
        self.0.count()
    }
}

impl<T: Hash> Mergeable for Hll<T> {
    fn merge(&mut self, o: &Self) {
        self.0.merge(&o.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_then_merge_equals_one_pass() {
        let keys: Vec<u32> = (0..20_000u32).map(|i| (i * 7919) % 5000).collect();
        let (mut all_c, mut all_h) = (CountMin::new(512, 4), Hll::new(10));
        let (mut a_c, mut a_h) = (CountMin::new(512, 4), Hll::new(10));
        let (mut b_c, mut b_h) = (CountMin::new(512, 4), Hll::new(10));
        for (i, k) in keys.iter().enumerate() {
            all_c.add(k, 1);
            all_h.add(k);
            if i % 3 == 0 {
                a_c.add(k, 1);
                a_h.add(k);
            } else {
                b_c.add(k, 1);
                b_h.add(k);
            }
        }
        a_c.merge(&b_c);
        a_h.merge(&b_h);
        for k in 0..5000u32 {
            assert_eq!(a_c.estimate(&k), all_c.estimate(&k));
        }
        assert_eq!(a_h.count(), all_h.count());
        let est = all_h.count() as f64;
        assert!((est - 5000.0).abs() / 5000.0 < 0.1, "{est}");
    }
}
