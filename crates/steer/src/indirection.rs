//! The RSS indirection table (RETA): bucket → queue, rewritable while readers steer.

use core::fmt;
use core::sync::atomic::Ordering;

use crate::sync::AtomicU16;

/// Allowed table sizes.
pub const MIN_SIZE: usize = 64;
/// Allowed table sizes.
pub const MAX_SIZE: usize = 4096;
/// The default size (RSS++'s default; its experiments use 512).
pub const DEFAULT_SIZE: usize = 128;

/// A table size that is not a power of two in `64..=4096`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableSizeError(pub usize);

impl fmt::Display for TableSizeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "indirection table size {} is not a power of two in {MIN_SIZE}..={MAX_SIZE}",
            self.0
        )
    }
}

impl std::error::Error for TableSizeError {}

/// B entries of queue numbers. Each entry is an atomic so a controller can rewrite
/// it while steering threads read it; a reader sees either the old or the new queue
/// of an entry, never a torn value.
pub struct IndirectionTable {
    entries: Box<[AtomicU16]>,
    mask: u32,
}

impl IndirectionTable {
    /// A table of `size` entries spread round-robin over `queues` queues
    /// (entry j → queue j mod queues), as drivers initialise it.
    pub fn new(size: usize, queues: u16) -> Result<IndirectionTable, TableSizeError> {
        if !size.is_power_of_two() || !(MIN_SIZE..=MAX_SIZE).contains(&size) {
            return Err(TableSizeError(size));
        }
        let q = queues.max(1);
        let entries = (0..size)
            .map(|j| AtomicU16::new((j % usize::from(q)) as u16))
            .collect();
        Ok(IndirectionTable {
            entries,
            mask: (size - 1) as u32,
        })
    }

    /// Number of entries (buckets).
    #[allow(clippy::len_without_is_empty)]
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// The bucket of a hash: its low bits.
    #[inline]
    pub fn bucket(&self, hash: u32) -> usize {
        (hash & self.mask) as usize
    }

    /// The queue of `bucket`.
    ///
    /// Ordering: `Acquire` pairs with the `Release` in [`set`](Self::set), so a
    /// reader that sees a new queue also sees whatever the writer wrote before
    /// rewriting the entry. The shard move does not rely on a single entry: it
    /// waits until the NIC model acknowledges a table version published after
    /// all of the shard's entries were rewritten.
    #[inline]
    pub fn get(&self, bucket: usize) -> u16 {
        self.entries[bucket & self.mask as usize].load(Ordering::Acquire)
    }

    /// The queue a hash steers to.
    #[inline]
    pub fn queue_of(&self, hash: u32) -> u16 {
        self.get(self.bucket(hash))
    }

    /// Rewrites one entry. `Release` pairs with the `Acquire` in [`get`](Self::get).
    #[inline]
    pub fn set(&self, bucket: usize, queue: u16) {
        self.entries[bucket & self.mask as usize].store(queue, Ordering::Release);
    }

    /// A copy of every entry (for snapshots and reports).
    pub fn snapshot(&self) -> Vec<u16> {
        (0..self.len()).map(|b| self.get(b)).collect()
    }
}

impl fmt::Debug for IndirectionTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IndirectionTable")
            .field("entries", &self.snapshot())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_validated() {
        for ok in [64, 128, 512, 4096] {
            assert_eq!(IndirectionTable::new(ok, 4).unwrap().len(), ok);
        }
        for bad in [0, 32, 100, 8192] {
            let e = IndirectionTable::new(bad, 4).unwrap_err();
            assert!(e.to_string().contains("power of two"), "{e}");
        }
    }

    #[test]
    fn round_robin_then_rewrite() {
        let t = IndirectionTable::new(DEFAULT_SIZE, 3).unwrap();
        assert_eq!(t.snapshot()[..6], [0, 1, 2, 0, 1, 2]);
        assert_eq!(t.bucket(0xffff_ff85), 5);
        t.set(5, 0);
        assert_eq!(t.queue_of(0xffff_ff85), 0);
    }

    #[test]
    fn concurrent_rewrites_are_never_torn() {
        let t = std::sync::Arc::new(IndirectionTable::new(64, 1).unwrap());
        let w = {
            let t = t.clone();
            std::thread::spawn(move || {
                for i in 0..20_000u32 {
                    t.set((i % 64) as usize, if i % 2 == 0 { 0x0101 } else { 0x0202 });
                }
            })
        };
        for i in 0..20_000usize {
            let q = t.get(i % 64);
            assert!(matches!(q, 0 | 0x0101 | 0x0202), "torn read {q:#x}");
        }
        w.join().unwrap();
    }
}
