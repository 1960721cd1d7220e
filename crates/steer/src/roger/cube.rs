//! Cubes over the rule key's bits (NFLOW/MVT §IV-B): a ternary vector in
//! `{0, 1, -}^n`, stored as a value and a mask of fixed bits — exactly what a
//! ternary NIC rule (`rte_flow` spec and mask) matches.

use core::fmt;

/// A cube of the key space: the keys `k` with `k & mask == value`. Bit `i` of the
/// mask is 1 where the cube fixes key bit `i` and 0 where it is a don't-care.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Cube {
    /// Values of the fixed bits (0 wherever `mask` is 0).
    pub value: u64,
    /// Fixed bits.
    pub mask: u64,
}

impl Cube {
    /// The cube holding every key (the all-don't-care vector).
    pub const ALL: Cube = Cube { value: 0, mask: 0 };

    /// The cube `value`/`mask`, with the value's unfixed bits cleared.
    pub const fn new(value: u64, mask: u64) -> Cube {
        Cube {
            value: value & mask,
            mask,
        }
    }

    /// The one-point cube of `key` over `n` bits.
    pub const fn point(key: u64, n: u32) -> Cube {
        Cube::new(key, low_bits(n))
    }

    /// Whether `key` lies in the cube.
    #[inline]
    pub const fn contains(&self, key: u64) -> bool {
        key & self.mask == self.value
    }

    /// Whether every key of `other` lies in this cube.
    pub const fn covers(&self, other: &Cube) -> bool {
        self.mask & !other.mask == 0 && other.value & self.mask == self.value
    }

    /// Whether the two cubes share a key (Definition 3: connected cubes).
    #[inline]
    pub const fn intersects(&self, other: &Cube) -> bool {
        (self.value ^ other.value) & self.mask & other.mask == 0
    }

    /// The smallest cube holding both (Definition 8): fixed where both fix the
    /// same value, don't-care elsewhere.
    #[inline]
    pub const fn supercube(&self, other: &Cube) -> Cube {
        let mask = self.mask & other.mask & !(self.value ^ other.value);
        Cube::new(self.value, mask)
    }

    /// Squared Euclidean distance of the two cubes' centroids (Definitions 6 and
    /// 7), in quarters: a bit both fix to different values adds 4 (1²), a bit one
    /// fixes and the other leaves free adds 1 (0.5²).
    #[inline]
    pub const fn distance4(&self, other: &Cube) -> u32 {
        let differ = (self.value ^ other.value) & self.mask & other.mask;
        4 * differ.count_ones() + (self.mask ^ other.mask).count_ones()
    }

    /// Number of keys in the cube over `n` bits, as log2.
    pub const fn log2_size(&self, n: u32) -> u32 {
        n - (self.mask & low_bits(n)).count_ones()
    }

    /// The cube as `n` ternary digits, most significant key bit first.
    pub fn ternary(&self, n: u32) -> String {
        (0..n)
            .rev()
            .map(|i| match (self.mask >> i & 1, self.value >> i & 1) {
                (0, _) => '-',
                (_, 0) => '0',
                _ => '1',
            })
            .collect()
    }
}

impl fmt::Display for Cube {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}/{:#x}", self.value, self.mask)
    }
}

/// The `n` low bits set.
pub const fn low_bits(n: u32) -> u64 {
    if n >= 64 {
        u64::MAX
    } else {
        (1u64 << n) - 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn supercube_is_the_smallest_holding_both() {
        let a = Cube::new(0b1010, 0b1111);
        let b = Cube::new(0b1001, 0b1101);
        assert_eq!(b.ternary(4), "10-1");
        let s = a.supercube(&b);
        assert_eq!(s.ternary(4), "10--");
        assert!(s.covers(&a) && s.covers(&b));
        // every key of both is in it, and nothing smaller holds both
        for k in 0..16u64 {
            if a.contains(k) || b.contains(k) {
                assert!(s.contains(k));
            }
        }
        assert_eq!(s.log2_size(4), 2);
    }

    #[test]
    fn intersection_and_distance() {
        let a = Cube::new(0b1000, 0b1100); // 10--
        let b = Cube::new(0b1011, 0b1011); // 1-11
        let c = Cube::new(0b0000, 0b1000); // 0---
        assert!(a.intersects(&b));
        assert!(!a.intersects(&c));
        // centroids (1,0,.5,.5) and (1,.5,1,1): 0 + .25 + .25 + .25 = 0.75
        assert_eq!(a.distance4(&b), 3);
        // (1,0,.5,.5) and (0,.5,.5,.5): 1 + .25 = 1.25
        assert_eq!(a.distance4(&c), 5);
        assert_eq!(a.distance4(&a), 0);
    }
}
