//! The controller thread: every period, ask the balancer for moves; drive moves
//! through the pure [`Mover`]; stop the run once the feeder is done and no move is
//! under way.

use std::sync::Arc;
use std::time::{Duration, Instant};

use balance::migrate::{Command, Mover};
use balance::{CoreId, ShardId};
use crossbeam_channel::{Receiver, Sender};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::shared::Shared;
use crate::worker::{ToController, ToWorker};
use crate::BalancerKind;

/// What the controller counted.
#[derive(Debug, Default)]
pub(crate) struct ControllerStats {
    pub rounds: u64,
    pub shard_moves: u64,
    pub entries_moved: u64,
    pub packets_held: u64,
    pub plan_ns: Vec<u64>,
    pub move_ns: Vec<u64>,
}

pub(crate) struct Controller {
    pub shared: Arc<Shared>,
    pub workers: Vec<Sender<ToWorker>>,
    pub inbox: Receiver<ToController>,
    pub owner: Vec<CoreId>,
    pub shards: usize,
    pub balancer: BalancerKind,
    pub period: Duration,
    pub seed: u64,
}

impl Controller {
    pub fn run(mut self) -> ControllerStats {
        let mut st = ControllerStats::default();
        let mut mover = Mover::new(0);
        let mut rng = ChaCha8Rng::seed_from_u64(self.seed);
        let mut started: Vec<Option<Instant>> = vec![None; self.shards];
        let mut next = Instant::now() + self.period;
        let mut script_done = std::collections::HashSet::new();
        let buckets = self.shared.table.len();
        let workers = self.workers.len();
        loop {
            while let Ok(ToController::Arrived {
                shard,
                entries,
                held,
            }) = self.inbox.try_recv()
            {
                assert!(
                    mover.on_arrived(shard),
                    "shard {shard} arrived but was not moving"
                );
                st.entries_moved += entries;
                st.packets_held += held;
                if let Some(t) = started[usize::from(shard)].take() {
                    st.move_ns.push(t.elapsed().as_nanos() as u64);
                }
            }
            for c in mover.on_feeder_seen(self.shared.feeder_seen()) {
                if let Command::Release { from, shard, to } = c {
                    let _ = self.workers[usize::from(from)].send(ToWorker::Release { shard, to });
                }
            }
            let done = self.shared.feeder_done();
            if done && mover.in_flight() == 0 {
                self.shared.stop();
                break;
            }
            let now = Instant::now();
            if !done && now >= next {
                // rounds on a fixed grid: a late round is caught up, not skipped
                next += self.period;
                st.rounds += 1;
                let t = Instant::now();
                let since = self.shared.start.elapsed();
                let plan: Vec<(ShardId, CoreId)> = match &self.balancer {
                    BalancerKind::Script(moves) => {
                        let due: Vec<(ShardId, CoreId)> = moves
                            .iter()
                            .filter(|m| m.at <= since && !script_done.contains(&(m.at, m.shard)))
                            .map(|m| (m.shard, m.to))
                            .collect();
                        for m in moves.iter().filter(|m| m.at <= since) {
                            script_done.insert((m.at, m.shard));
                        }
                        due
                    }
                    BalancerKind::Static => Vec::new(),
                    BalancerKind::Random if workers > 1 && mover.in_flight() < self.shards => {
                        // a random shard among those not already moving
                        let movable: Vec<ShardId> = (0..self.shards as ShardId)
                            .filter(|s| !mover.is_moving(*s))
                            .collect();
                        let s = movable[rng.gen_range(0..movable.len())];
                        let mut to = rng.gen_range(0..workers - 1) as CoreId;
                        if to >= self.owner[usize::from(s)] {
                            to += 1;
                        }
                        vec![(s, to)]
                    }
                    BalancerKind::Random => Vec::new(),
                };
                st.plan_ns.push(t.elapsed().as_nanos() as u64);
                for (s, to) in plan {
                    let from = self.owner[usize::from(s)];
                    if let Ok(Command::Rewrite { shard, to, version }) = mover.begin(s, from, to) {
                        // every bucket of the shard, then the version (Release)
                        for b in (usize::from(shard)..buckets).step_by(self.shards) {
                            self.shared.table.set(b, to);
                        }
                        self.shared.publish_version(version);
                        self.owner[usize::from(shard)] = to;
                        started[usize::from(shard)] = Some(Instant::now());
                        st.shard_moves += 1;
                    }
                }
            }
            std::thread::yield_now();
        }
        st
    }
}
