//! A scripted balancer: given moves at given times (tests, demonstrations).

use super::{Balancer, Plan, Snapshot};
use crate::{CoreId, ShardId};

/// One move of a script.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScriptedMove {
    /// When, ns since the run started.
    pub at_ns: u64,
    /// Which shard.
    pub shard: ShardId,
    /// To which core.
    pub to: CoreId,
}

/// Moves from a script, each once its time has come.
#[derive(Clone, Debug)]
pub struct Scripted {
    moves: Vec<ScriptedMove>,
    next: usize,
}

impl Scripted {
    /// A script (sorted by time here).
    pub fn new(mut moves: Vec<ScriptedMove>) -> Scripted {
        moves.sort_by_key(|m| m.at_ns);
        Scripted { moves, next: 0 }
    }
}

impl Balancer for Scripted {
    fn name(&self) -> &'static str {
        "script"
    }

    fn plan(&mut self, snap: &Snapshot) -> Plan {
        let mut p = Plan::default();
        while let Some(m) = self.moves.get(self.next).filter(|m| m.at_ns <= snap.now_ns) {
            p.moves.push((m.shard, m.to));
            self.next += 1;
        }
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_move_once_when_due() {
        let mut s = Scripted::new(vec![
            ScriptedMove {
                at_ns: 20,
                shard: 1,
                to: 0,
            },
            ScriptedMove {
                at_ns: 10,
                shard: 2,
                to: 1,
            },
        ]);
        let at = |t| Snapshot {
            now_ns: t,
            ..Default::default()
        };
        assert!(s.plan(&at(5)).moves.is_empty());
        assert_eq!(s.plan(&at(15)).moves, [(2, 1)]);
        assert_eq!(s.plan(&at(100)).moves, [(1, 0)]);
        assert!(s.plan(&at(200)).moves.is_empty());
    }
}
