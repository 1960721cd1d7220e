//! A core's part of an operator's orders ([`runspec::control`]): a working
//! core's answer to a question about its flows (`flowshift ctl flows`: the
//! entries of the shards whose objects it holds, deleted when asked), and any
//! core's part of a live reload. Each runs between two bursts, on the core
//! that owns the tables and the chain, so no lock guards them.

use nf::Chain;
use runspec::control::{CoreAnswer, FlowRow, Query, Reload};
use state::EntryId;

use crate::worker::Worker;

/// A core's part of a live reload: its chain's NFs take the new
/// configuration, between two bursts.
pub(crate) fn reload(chain: &mut Chain, r: Reload) {
    let _ = r.reply.send(chain.reload_nfs(&r.chain, &r.nfs));
}

impl Worker {
    /// Its part of a live reload.
    pub(crate) fn reload(&mut self, r: Reload) {
        reload(&mut self.chain, r);
    }

    /// Answers `q`, walking at most `q.budget` entries of the shards it
    /// holds (an answer nobody waits for any more is dropped).
    pub(crate) fn inspect(&mut self, q: Query) {
        let now = self.shared.now_ns();
        let mut a = CoreAnswer::default();
        let mut budget = q.budget.max(1);
        for (s, shard) in self.shards.iter_mut().enumerate() {
            let Some(shard) = shard.as_mut() else {
                continue;
            };
            let from = q.cursor.get(s).copied().unwrap_or(0);
            if q.done.get(s).copied().unwrap_or(true) {
                continue;
            }
            if budget == 0 {
                // held here, walked next time
                a.shards.push((s, Some(from)));
                continue;
            }
            let ids: Vec<EntryId> = shard.table.entries_from(from).take(budget).collect();
            budget -= ids.len();
            let next = match ids.last() {
                Some(last) if budget == 0 => Some(last.0 + 1),
                _ => None,
            };
            a.shards.push((s, next));
            for id in ids {
                let (orig, translated) = shard.table.tuples(id);
                if !q.filter.matches(&orig, translated.as_ref()) {
                    continue;
                }
                a.matched += 1;
                if a.rows.len() < q.rows_left {
                    let v = self.chain.view(shard, id, now);
                    a.rows.push(FlowRow::new(self.me, s, &v));
                }
                if q.delete {
                    if self.chain.delete(shard, id) {
                        a.deleted += 1;
                    } else {
                        a.offloaded += 1;
                    }
                }
            }
        }
        let _ = q.reply.send(a);
    }
}
