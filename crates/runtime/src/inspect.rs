//! A working core's answer to an operator's question about its flows
//! (`flowshift ctl flows`, [`runspec::inspect`]): the entries of the shards
//! whose objects it holds, deleted when asked. It runs between two bursts,
//! on the core that owns the tables, so no lock guards them.

use runspec::inspect::{CoreAnswer, FlowRow, Query};
use state::EntryId;

use crate::worker::Worker;

impl Worker {
    /// Answers `q` (an answer nobody waits for any more is dropped).
    pub(crate) fn inspect(&mut self, q: Query) {
        let now = self.shared.now_ns();
        let mut a = CoreAnswer::default();
        for (s, shard) in self.shards.iter_mut().enumerate() {
            let Some(shard) = shard.as_mut() else {
                continue;
            };
            if q.done.get(s).copied().unwrap_or(true) {
                continue;
            }
            a.shards.push(s);
            let ids: Vec<EntryId> = shard.table.entries().collect();
            for id in ids {
                let v = self.chain.view(shard, id, now);
                if !q.filter.matches(&v) {
                    continue;
                }
                a.rows.push(FlowRow::new(self.me, s, &v));
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
