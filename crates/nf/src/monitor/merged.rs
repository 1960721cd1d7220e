//! The mergeable monitor's delayed merge at a cost that follows the traffic,
//! not the number of sources: each period a core shares only the sources it
//! counted since its last share — their running totals — and each core keeps,
//! per other core, the totals it last applied, so that applying a share
//! touches only the sources in it.
//!
//! The driver's board keeps only each core's latest share, and a core may
//! share several times between two merges of another (a core descheduled on a
//! busy machine). So a share of changes links to the share before it, and a
//! reader walks back to the last one it applied. To bound that chain, a core
//! shares all its totals instead (a *full* share, the start of a new chain)
//! when its chain has held as many changed sources as it has sources, or
//! [`MAX_CHAIN`] shares: a full share costs what every share cost before, at
//! most once per as many changes. A reader that fell behind past a full
//! share replaces that core's totals with it.

use core::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use rustc_hash::FxHashMap;

/// Shares in one chain at most (a full share starts the next).
pub const MAX_CHAIN: u64 = 64;

/// Changed sources one chain holds at most, as a multiple of the writer's
/// sources: a full share then costs at most a quarter of the changes shared
/// since the last one, and a chain holds at most four times the sources.
pub const CHAIN_SOURCES: usize = 4;

/// One core's share: running packet totals of some of its sources.
#[derive(Debug)]
pub struct Share {
    /// The writing instance.
    writer: u64,
    /// 1 for the writer's first share, then one more each.
    seq: u64,
    /// (source, the writer's packets from it so far).
    totals: Vec<(IpAddr, u64)>,
    /// The share before it, for a share of changes; `None` for a full one.
    prev: Option<Arc<Share>>,
}

impl Share {
    /// (source, the writer's packets from it so far) for the sources it holds.
    pub fn totals(&self) -> &[(IpAddr, u64)] {
        &self.totals
    }

    /// A full share (every source of the writer), not only the changes.
    pub fn is_full(&self) -> bool {
        self.prev.is_none()
    }
}

impl Drop for Share {
    /// Drops the chain in a loop, not by recursion.
    fn drop(&mut self) {
        let mut next = self.prev.take();
        while let Some(s) = next {
            next = match Arc::try_unwrap(s) {
                Ok(mut s) => s.prev.take(),
                Err(_) => None,
            };
        }
    }
}

/// The writing side: how many sources changed since the last share, and
/// the chain so far.
#[derive(Debug)]
pub struct Writer {
    id: u64,
    seq: u64,
    /// Sources counted since the last share (each once).
    changed: usize,
    /// The last share, and the changed sources its chain holds.
    last: Option<Arc<Share>>,
    chain_len: u64,
    chain_entries: usize,
}

impl Default for Writer {
    fn default() -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        Writer {
            // Relaxed: only uniqueness matters, no other memory is published with it.
            id: NEXT.fetch_add(1, Ordering::Relaxed),
            seq: 0,
            changed: 0,
            last: None,
            chain_len: 0,
            chain_entries: 0,
        }
    }
}

impl Clone for Writer {
    /// A new instance: a new writer.
    fn clone(&self) -> Self {
        Writer::default()
    }
}

impl Writer {
    /// The mark a source counted now must carry to be in the next share; a
    /// source whose mark differs is given it and counted with
    /// [`Self::changed`].
    pub fn epoch(&self) -> u64 {
        self.seq
    }

    /// One more source was counted for the first time since the last share.
    pub fn changed(&mut self) {
        self.changed += 1;
    }

    /// The next share from `every` source's (address, total, mark): those
    /// marked with this epoch, or all of them when the chain is long
    /// enough. One pass over the sources in their table's order: no lookup
    /// per changed source.
    pub fn share<'a>(
        &mut self,
        every: impl ExactSizeIterator<Item = (&'a IpAddr, u64, u64)>,
    ) -> Arc<Share> {
        let epoch = self.seq;
        self.seq += 1;
        let sources = every.len();
        let full = self.last.is_none()
            || self.chain_len >= MAX_CHAIN
            || self.chain_entries + self.changed > CHAIN_SOURCES * sources;
        let share = if full {
            self.chain_len = 1;
            self.chain_entries = 0;
            Share {
                writer: self.id,
                seq: self.seq,
                totals: every.map(|(k, v, _)| (*k, v)).collect(),
                prev: None,
            }
        } else {
            self.chain_len += 1;
            self.chain_entries += self.changed;
            let mut totals = Vec::with_capacity(self.changed);
            totals.extend(every.filter(|e| e.2 == epoch).map(|(k, v, _)| (*k, v)));
            Share {
                writer: self.id,
                seq: self.seq,
                totals,
                prev: self.last.take(),
            }
        };
        self.changed = 0;
        let share = Arc::new(share);
        self.last = Some(share.clone());
        share
    }

    /// This writer's id (a reader skips its own share).
    pub fn id(&self) -> u64 {
        self.id
    }
}

/// What one other core's shares said so far.
#[derive(Debug, Default, Clone)]
struct Seen {
    seq: u64,
    totals: FxHashMap<IpAddr, u64>,
}

/// The reading side: the other cores' packets per source.
#[derive(Debug, Default, Clone)]
pub struct Reader {
    seen: FxHashMap<u64, Seen>,
    /// Per source, the sum over the other cores of their last totals, kept
    /// once more than one other core shares (with one, its totals are the
    /// sums: one update per changed source, not two).
    others: Option<FxHashMap<IpAddr, u64>>,
}

impl Reader {
    /// The other cores' packets from `src`, as of the last merge.
    #[inline]
    pub fn others(&self, src: &IpAddr) -> u64 {
        let map = match &self.others {
            Some(sums) => sums,
            None => match self.seen.values().next() {
                Some(one) => &one.totals,
                None => return 0,
            },
        };
        map.get(src).copied().unwrap_or(0)
    }

    /// Applies every core's latest share but `own`'s, and the shares before
    /// it that this reader has not applied yet.
    pub fn merge<'a>(&mut self, own: u64, all: impl Iterator<Item = &'a Share>) {
        for latest in all.filter(|s| s.writer != own) {
            if !self.seen.contains_key(&latest.writer) && !self.seen.is_empty() {
                // a second other core: from now on the sums are kept
                self.others.get_or_insert_with(|| {
                    let one = self.seen.values().next().map(|s| s.totals.clone());
                    one.unwrap_or_default()
                });
            }
            let seen = self.seen.entry(latest.writer).or_default();
            if latest.seq <= seen.seq {
                continue;
            }
            // back to the last share applied, or to a full share
            let mut path = Vec::new();
            let mut at = Some(latest);
            while let Some(s) = at.filter(|s| s.seq > seen.seq) {
                path.push(s);
                at = s.prev.as_deref();
            }
            for s in path.into_iter().rev() {
                apply(self.others.as_mut(), seen, s);
            }
            seen.seq = latest.seq;
        }
    }
}

/// One share into a core's last totals and, when kept, the others' sums.
fn apply(mut others: Option<&mut FxHashMap<IpAddr, u64>>, seen: &mut Seen, s: &Share) {
    if s.prev.is_none() {
        // a full share: that core's totals are these, and only these
        match others.as_deref_mut() {
            Some(others) => {
                for (src, v) in seen.totals.drain() {
                    if let Some(o) = others.get_mut(&src) {
                        *o = o.saturating_sub(v);
                    }
                }
            }
            None => seen.totals.clear(),
        }
    }
    for &(src, total) in &s.totals {
        let before = seen.totals.insert(src, total).unwrap_or(0);
        if let Some(others) = others.as_deref_mut() {
            let o = others.entry(src).or_default();
            *o = (*o + total).saturating_sub(before);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// A core counting packets per source, with its writer.
    #[derive(Default)]
    struct Core {
        counts: FxHashMap<IpAddr, (u64, u64)>,
        writer: Writer,
        reader: Reader,
    }

    impl Core {
        fn count(&mut self, src: IpAddr) {
            let epoch = self.writer.epoch();
            let e = self.counts.entry(src).or_insert((0, u64::MAX));
            e.0 += 1;
            if e.1 != epoch {
                e.1 = epoch;
                self.writer.changed();
            }
        }

        fn share(&mut self) -> Arc<Share> {
            self.writer
                .share(self.counts.iter().map(|(k, v)| (k, v.0, v.1)))
        }
    }

    fn ip(i: u32) -> IpAddr {
        IpAddr::from(i.to_be_bytes())
    }

    /// Two or three cores count random sources; each shares at its own pace
    /// and merges whatever the board holds then: after each merge a core's
    /// view of the others equals their totals as of the shares it saw (with
    /// one other core its totals, with two the sums kept).
    #[test]
    fn a_reader_sees_every_change_whatever_the_pace() {
        for n in [2, 3] {
            pace(n);
        }
    }

    fn pace(n: usize) {
        let mut cores: Vec<Core> = (0..n).map(|_| Core::default()).collect();
        let mut board: Vec<Option<Arc<Share>>> = vec![None; n];
        // what each board entry stood for: the writer's counts then
        let mut at_share: Vec<HashMap<IpAddr, u64>> = vec![HashMap::new(); n];
        let mut rng = 7u64;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        for step in 0..4_000u64 {
            let c = (next() % n as u64) as usize;
            // few sources often, many rarely: chains of changes and full shares
            let src = if next() % 4 == 0 {
                next() % 3_000
            } else {
                next() % 20
            };
            cores[c].count(ip(src as u32));
            let r = next() % 100;
            if r < 3 {
                board[c] = Some(cores[c].share());
                at_share[c] = cores[c].counts.iter().map(|(k, v)| (*k, v.0)).collect();
            } else if r < 4 || step == 3_999 {
                let own = cores[c].writer.id();
                let all: Vec<&Share> = board.iter().flatten().map(|s| &**s).collect();
                cores[c].reader.merge(own, all.into_iter());
                let mut want: HashMap<IpAddr, u64> = HashMap::new();
                for (o, m) in at_share.iter().enumerate() {
                    if o != c && board[o].is_some() {
                        for (k, v) in m {
                            *want.entry(*k).or_default() += v;
                        }
                    }
                }
                for s in 0..3_000u32 {
                    let k = ip(s);
                    let w = want.get(&k).copied().unwrap_or(0);
                    assert_eq!(cores[c].reader.others(&k), w, "core {c} step {step} {k}");
                }
            }
        }
    }

    /// Changes chain until they hold `CHAIN_SOURCES` times the sources the
    /// core has; then a full share starts again.
    #[test]
    fn a_chain_is_cut_by_a_full_share() {
        let mut core = Core::default();
        for s in 0..10 {
            core.count(ip(s));
        }
        let first = core.share();
        assert!(first.is_full(), "the first share is full");
        assert_eq!(first.totals.len(), 10);
        // 3 changed sources a share: 13 shares hold 39 of the 40 allowed
        let rounds = CHAIN_SOURCES * 10 / 3;
        for round in 0..rounds {
            for s in 0..3 {
                core.count(ip(s));
            }
            let s = core.share();
            assert_eq!(s.totals.len(), 3, "round {round}: only the changes");
            assert!(!s.is_full());
        }
        core.count(ip(0));
        core.count(ip(1));
        let full = core.share();
        assert!(full.is_full(), "2 more changes pass the bound");
        assert_eq!(full.totals.len(), 10);
    }
}
