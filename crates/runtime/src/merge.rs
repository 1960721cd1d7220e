//! Delayed merge, live (GranularNF §4): NFs whose state is kept per core and
//! merged (the `mergeable` monitor) see every core's counts as of the last
//! merge, not their own core's alone. Every [`PERIOD_NS`] each core puts its
//! share on the board (`nf::Chain::share`: what the NF says changed, or a
//! copy, behind an `Arc`) and applies every core's latest
//! (`nf::Chain::merge_shared`). Off the packet path: between bursts, a lock
//! held to swap a few `Arc`s.

use std::sync::{Arc, Mutex};

/// How often a core merges.
pub(crate) const PERIOD_NS: u64 = 10_000_000;

type Snapshot = Vec<Option<nf::Shared>>;

/// Every core's latest snapshot.
pub(crate) struct Board {
    cores: Mutex<Vec<Snapshot>>,
}

impl Board {
    /// A board for `cores` cores, if `chain` has state to merge.
    pub fn for_chain(chain: &nf::Chain, cores: usize) -> Option<Arc<Board>> {
        chain.shares_state().then(|| {
            Arc::new(Board {
                cores: Mutex::new(vec![Vec::new(); cores]),
            })
        })
    }

    /// Core `core` puts its snapshot of `chain` on the board and takes every
    /// core's (its own among them) as `chain`'s merged view.
    pub fn merge(&self, core: usize, chain: &mut nf::Chain) {
        let mine = chain.share();
        let all = {
            let mut cores = self.cores.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(slot) = cores.get_mut(core) {
                *slot = mine;
            }
            cores.clone()
        };
        chain.merge_shared(&all);
    }
}

/// One core's part: the board, its index, and when it merges next.
pub(crate) struct Merging {
    board: Arc<Board>,
    core: usize,
    next_ns: u64,
    /// Merges done.
    pub merges: u64,
}

impl Merging {
    pub fn new(board: Arc<Board>, core: usize) -> Merging {
        Merging {
            board,
            core,
            next_ns: 0,
            merges: 0,
        }
    }

    /// Merges `chain` if its period is due at `now`.
    pub fn tick(&mut self, now: u64, chain: &mut nf::Chain) {
        if now >= self.next_ns {
            self.next_ns = now + PERIOD_NS;
            self.board.merge(self.core, chain);
            self.merges += 1;
        }
    }
}
