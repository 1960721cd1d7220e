//! The flow table's index: open addressing over the keys' index hashes
//! (linear probing, backward-shift deletion, no tombstones), each bucket a
//! key's hash and entry id packed in 64 bits.
//!
//! It starts at a few buckets and doubles as keys arrive, up to the size
//! the table's capacity needs (load ≤ ½ with every key present). A doubling
//! does not rehash at once: the keys move from the old buckets to the new
//! ones [`STEP`] buckets per insert, and until the last has moved a lookup
//! that misses the new buckets probes the old ones (where a removed key
//! leaves a tombstone, so that the probes of the keys behind it still find
//! them). No packet waits for more than a step; the new buckets come from
//! zeroed memory (a bucket is stored inverted, so that zero is empty), and
//! the kernel backs their pages as keys land in them.

/// A bucket with no key.
pub(super) const EMPTY: u64 = u64::MAX;
/// An old bucket whose key moved or was removed during a doubling (no
/// packed key is this value: it would need an entry id of 2³¹ − 2, past any
/// capacity).
pub(super) const MOVED: u64 = u64::MAX - 1;
/// Old buckets moved per insert while a doubling is under way: more than
/// the 2 per insert that finish it before the new buckets are half full.
pub(super) const STEP: usize = 16;

/// One array of buckets.
pub(super) struct Buckets {
    /// Buckets stored inverted (`!packed`): zero is [`EMPTY`].
    v: Vec<u64>,
    shift: u32,
    mask: usize,
}

impl Buckets {
    /// `size` (a power of two) empty buckets, from zeroed memory.
    fn new(size: usize) -> Buckets {
        debug_assert!(size.is_power_of_two());
        Buckets {
            v: vec![0; size],
            shift: 64 - size.trailing_zeros(),
            mask: size - 1,
        }
    }

    /// Buckets.
    #[inline(always)]
    pub fn len(&self) -> usize {
        self.v.len()
    }

    /// Bucket `i` (any `i`: `None` past the end).
    #[inline(always)]
    pub fn get(&self, i: usize) -> Option<u64> {
        self.v.get(i).map(|b| !b)
    }

    #[inline(always)]
    fn set(&mut self, i: usize, b: u64) {
        self.v[i] = !b;
    }

    /// Buckets − 1 (the index of the last).
    #[inline(always)]
    pub fn mask(&self) -> usize {
        self.mask
    }

    /// The bucket after `i`.
    #[inline(always)]
    pub fn next(&self, i: usize) -> usize {
        (i + 1) & self.mask
    }

    /// The home bucket of a hash. Fibonacci hashing: a shard's keys share
    /// their low hash bits, so every bit is spread into the top ones.
    #[inline(always)]
    pub fn home(&self, hash: u32) -> usize {
        ((u64::from(hash).wrapping_mul(0x9e37_79b9_7f4a_7c15)) >> self.shift) as usize
    }

    /// The address of bucket `i`, for a prefetch (any `i`: an address only).
    #[inline(always)]
    pub fn addr(&self, i: usize) -> *const u64 {
        self.v.as_ptr().wrapping_add(i)
    }

    /// Puts `b` in the first empty bucket from its home on.
    #[inline]
    fn place(&mut self, b: u64) {
        let mut i = self.home((b >> 32) as u32);
        while self.v[i] != 0 {
            i = self.next(i);
        }
        self.set(i, b);
    }
}

/// The index: its buckets, and while a doubling is under way the old ones.
pub(super) struct Index {
    /// Where keys are inserted and first looked up.
    pub now: Buckets,
    /// The buckets before the last doubling, and how many of them have
    /// moved; `None` once all have.
    old: Option<(Buckets, usize)>,
    /// Keys indexed (in either).
    keys: usize,
    /// Buckets at most.
    max: usize,
    /// Doublings so far.
    pub grown: u64,
}

impl Index {
    /// An index of `first` buckets that doubles up to `max` (powers of two).
    pub fn new(first: usize, max: usize) -> Index {
        Index {
            now: Buckets::new(first.min(max)),
            old: None,
            keys: 0,
            max,
            grown: 0,
        }
    }

    /// True while keys are still in the old buckets.
    #[inline(always)]
    pub fn moving(&self) -> bool {
        self.old.is_some()
    }

    /// Indexes a packed key (not yet indexed) whose index hash is its top
    /// 32 bits.
    pub fn insert(&mut self, b: u64) {
        if self.old.is_some() {
            self.move_some(STEP);
        }
        if (self.keys + 1) * 2 > self.now.len() && self.now.len() < self.max {
            self.double();
        }
        self.now.place(b);
        self.keys += 1;
    }

    /// Starts a doubling (after finishing the one before).
    #[cold]
    #[inline(never)]
    fn double(&mut self) {
        self.move_some(usize::MAX);
        let bigger = Buckets::new(self.now.len() * 2);
        let old = std::mem::replace(&mut self.now, bigger);
        self.old = Some((old, 0));
        self.grown += 1;
    }

    /// Moves up to `n` old buckets' keys into the new buckets.
    fn move_some(&mut self, n: usize) {
        let Some((old, moved)) = &mut self.old else {
            return;
        };
        let end = moved.saturating_add(n).min(old.len());
        for i in *moved..end {
            let b = !old.v[i];
            if b != EMPTY && b != MOVED {
                self.now.place(b);
                old.set(i, MOVED);
            }
        }
        *moved = end;
        if end == old.len() {
            self.old = None;
        }
    }

    /// Removes a packed key; false if it is not indexed.
    pub fn remove(&mut self, b: u64) -> bool {
        let hash = (b >> 32) as u32;
        if self.remove_now(b, hash) {
            self.keys -= 1;
            return true;
        }
        // a key not moved yet: a tombstone, so the probes of the keys behind
        // it (which may not have moved either) still reach them
        if let Some((old, _)) = &mut self.old {
            let mut i = old.home(hash);
            loop {
                match !old.v[i] {
                    EMPTY => return false,
                    x if x == b => {
                        old.set(i, MOVED);
                        self.keys -= 1;
                        return true;
                    }
                    _ => i = old.next(i),
                }
            }
        }
        false
    }

    /// Backward-shift deletion from the new buckets.
    fn remove_now(&mut self, b: u64, hash: u32) -> bool {
        let n = &mut self.now;
        let mut i = n.home(hash);
        loop {
            match !n.v[i] {
                EMPTY => return false,
                x if x == b => break,
                _ => i = n.next(i),
            }
        }
        let mut hole = i;
        let mut j = i;
        loop {
            j = n.next(j);
            let x = !n.v[j];
            if x == EMPTY {
                break;
            }
            let home = n.home((x >> 32) as u32);
            let stays = if hole <= j {
                hole < home && home <= j
            } else {
                home > hole || home <= j
            };
            if !stays {
                n.set(hole, x);
                hole = j;
            }
        }
        n.set(hole, EMPTY);
        true
    }

    /// The buckets before the last doubling while keys are still in them
    /// (skip [`MOVED`] buckets when probing them).
    #[inline(always)]
    pub fn old(&self) -> Option<&Buckets> {
        self.old.as_ref().map(|(b, _)| b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(h: u32, id: u32) -> u64 {
        (u64::from(h) << 32) | u64::from(id)
    }

    fn find(ix: &Index, b: u64) -> bool {
        let h = (b >> 32) as u32;
        let mut i = ix.now.home(h);
        loop {
            match ix.now.get(i).unwrap() {
                EMPTY => break,
                x if x == b => return true,
                _ => i = ix.now.next(i),
            }
        }
        let Some(old) = ix.old() else {
            return false;
        };
        let mut i = old.home(h);
        loop {
            match old.get(i).unwrap() {
                EMPTY => return false,
                x if x == b => return true,
                _ => i = old.next(i),
            }
        }
    }

    /// Keys inserted and removed across doublings (weak hashes: long
    /// probes) are found exactly while they are indexed, in whichever
    /// buckets they are.
    #[test]
    fn keys_are_found_across_doublings_and_removals() {
        let mut ix = Index::new(4, 1 << 12);
        let mut live = std::collections::BTreeSet::new();
        for id in 0..1_500u32 {
            let b = key(id % 37 * 1_000, id);
            ix.insert(b);
            live.insert(b);
            if id % 3 == 0 {
                let gone = key((id / 2) % 37 * 1_000, id / 2);
                if live.remove(&gone) {
                    assert!(ix.remove(gone));
                }
            }
            if id % 97 == 0 {
                for &b in &live {
                    assert!(find(&ix, b), "key {b:#x} after insert {id}");
                }
                assert!(!find(&ix, key(5, 999_999)));
            }
        }
        assert_eq!(ix.keys, live.len());
        assert!(ix.grown >= 8, "{}", ix.grown);
        assert!(!ix.remove(key(1, 999_999)));
        for &b in &live {
            assert!(find(&ix, b));
        }
    }
}
