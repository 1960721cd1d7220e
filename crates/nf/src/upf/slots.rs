//! URR slots: each URR takes a [`Slot`] when it is created — an index into
//! every core's merged-accounting array ([`super::usage::CoreUsage`]), given
//! back and reused once the URR is gone, and a number never reused — so
//! counting a packet is an array access, no hashing, and the per-core arrays
//! stay as long as the most URRs alive at once.

use std::sync::Mutex;

/// The indices in use and free, process-wide (every UPF's URRs take their
/// slots from it; a core's array is as long as the highest index it
/// counted for).
struct Pool {
    free: Vec<u32>,
    next_index: u32,
    next_number: u64,
}

static POOL: Mutex<Pool> = Mutex::new(Pool {
    free: Vec::new(),
    next_index: 0,
    // 0 marks an empty cell
    next_number: 1,
});

/// A URR's place in the cores' merged counts. Taken when the URR is created
/// ([`Default`]), given back when the last table holding the URR goes.
#[derive(Debug)]
pub struct Slot {
    /// Its index in every core's merged counts.
    pub index: u32,
    /// Its number, never reused.
    pub number: u64,
}

impl Default for Slot {
    fn default() -> Slot {
        let mut p = POOL.lock().unwrap_or_else(|e| e.into_inner());
        let index = p.free.pop().unwrap_or_else(|| {
            p.next_index += 1;
            p.next_index - 1
        });
        p.next_number += 1;
        Slot {
            index,
            number: p.next_number - 1,
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut p = POOL.lock().unwrap_or_else(|e| e.into_inner());
        p.free.push(self.index);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indices_are_given_back_and_reused() {
        let next = || POOL.lock().unwrap().next_index;
        let before = next();
        for _ in 0..1_000 {
            drop(Slot::default());
        }
        // other tests may hold a few slots meanwhile; never a thousand
        assert!(next() - before < 100, "{before} → {}", next());
    }
}
