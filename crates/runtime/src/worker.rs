//! A worker: polls its ring in bursts, runs the chain on the shards it owns, and
//! plays its part in shard moves.

use std::sync::Arc;
use std::time::Instant;

use balance::migrate::{Received, WorkerMoves};
use balance::{CoreId, ShardId};
use crossbeam_channel::{Receiver, Sender};
use hdrhistogram::Histogram;
use nf::{Chain, Packet, Shard, Verdict};
use rtrb::Consumer;

use crate::shared::Shared;
use crate::stats::WorkerStats;

/// Messages to a worker.
pub(crate) enum ToWorker {
    /// Release `shard` to `to` (shard-move step 4).
    Release { shard: ShardId, to: CoreId },
    /// A shard handed over by another worker (step 5).
    Shard { shard: ShardId, state: Box<Shard> },
}

/// Messages to the controller.
pub(crate) enum ToController {
    /// `shard` arrived at its new owner; `entries` flow entries came with it and
    /// `held` packets had been held for it, now processed.
    Arrived {
        shard: ShardId,
        entries: u64,
        held: u64,
    },
}

/// What a worker hands back at the end.
pub(crate) struct WorkerResult {
    pub chain: Chain,
    pub shards: Vec<Shard>,
    pub held: u64,
    /// Latency of the priority class (index 0) and the regular class (index 1).
    pub latency: [Histogram<u64>; 2],
    pub busy_ns: u64,
    pub idle_ns: u64,
    pub output: Vec<(u64, Vec<u8>)>,
}

pub(crate) struct Worker {
    pub chain: Chain,
    pub shards: Vec<Option<Shard>>,
    pub ring: Consumer<Packet>,
    pub inbox: Receiver<ToWorker>,
    pub peers: Vec<Sender<ToWorker>>,
    pub controller: Sender<ToController>,
    pub shared: Arc<Shared>,
    pub burst: usize,
    pub keep_output: bool,
    pub stats: Arc<WorkerStats>,
    pub priority_dscp: u8,
}

impl Worker {
    pub fn run(mut self) -> WorkerResult {
        let owned: Vec<ShardId> = self
            .shards
            .iter()
            .enumerate()
            .filter(|(_, s)| s.is_some())
            .map(|(i, _)| i as ShardId)
            .collect();
        let mut moves: WorkerMoves<Packet> = WorkerMoves::new(owned);
        let hist =
            || Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).expect("valid bounds");
        let mut latency = [hist(), hist()];
        let prio = self.priority_dscp;
        let mut batch: Vec<Packet> = Vec::with_capacity(self.burst);
        let mut verdicts = Vec::with_capacity(self.burst);
        let mut output = Vec::new();
        let (mut busy_ns, mut idle_ns) = (0u64, 0u64);
        let mut last = Instant::now();
        let mask = self.shared.table.len() - 1;
        let mut bucket_totals = vec![0u64; mask + 1];
        let mut packets = 0u64;
        // idle timeouts: every TIMER_NS, expire the shards this worker owns
        const TIMER_NS: u64 = 10_000_000;
        let mut next_timer = self.shared.now_ns() + TIMER_NS;
        loop {
            let now = self.shared.now_ns();
            if now >= next_timer {
                next_timer = now + TIMER_NS;
                for shard in self.shards.iter_mut().flatten() {
                    self.chain.expire(shard, now);
                }
            }
            // control messages first: a hand-over's held packets go before new ones
            while let Ok(msg) = self.inbox.try_recv() {
                match msg {
                    ToWorker::Release { shard, to } => {
                        let queued = self.ring.slots() as u64;
                        if let Some((s, to)) = moves.on_release(shard, to, queued) {
                            self.hand_over(s, to);
                        }
                    }
                    ToWorker::Shard { shard, state } => {
                        let entries = state.table.len() as u64;
                        self.shards[usize::from(shard)] = Some(*state);
                        let mut held: Vec<Packet> = moves.on_shard(shard).into();
                        let held_n = held.len() as u64;
                        for chunk in held.chunks_mut(self.burst.max(1)) {
                            let now = self.shared.now_ns();
                            self.chain
                                .process_burst(&mut self.shards, chunk, now, &mut verdicts);
                            sink(
                                chunk,
                                &verdicts,
                                now,
                                &mut latency,
                                prio,
                                self.keep_output,
                                &mut output,
                            );
                        }
                        // the controller may have stopped waiting only after this arrives
                        let _ = self.controller.send(ToController::Arrived {
                            shard,
                            entries,
                            held: held_n,
                        });
                    }
                }
            }
            let n = self.ring.slots().min(self.burst);
            if n == 0 {
                if self.shared.stopping() && self.ring.slots() == 0 && self.inbox.is_empty() {
                    break;
                }
                let now = Instant::now();
                idle_ns += now.duration_since(last).as_nanos() as u64;
                last = now;
                self.stats.publish(busy_ns, idle_ns, packets);
                std::thread::yield_now();
                continue;
            }
            batch.clear();
            for _ in 0..n {
                let p = self.ring.pop().expect("slots() said so");
                let b = p.hash as usize & mask;
                bucket_totals[b] += 1;
                self.stats.publish_bucket(b, bucket_totals[b]);
                let s = self.chain.shard_of(p.hash) as ShardId;
                if let Received::Process(p) = moves.on_packet(s, p) {
                    batch.push(p);
                }
            }
            let now = self.shared.now_ns();
            self.chain
                .process_burst(&mut self.shards, &mut batch, now, &mut verdicts);
            sink(
                &batch,
                &verdicts,
                now,
                &mut latency,
                prio,
                self.keep_output,
                &mut output,
            );
            for _ in 0..n {
                for (s, to) in moves.on_dequeued() {
                    self.hand_over(s, to);
                }
            }
            let t = Instant::now();
            busy_ns += t.duration_since(last).as_nanos() as u64;
            last = t;
            packets += n as u64;
            self.stats.publish(busy_ns, idle_ns, packets);
        }
        WorkerResult {
            shards: self.shards.iter_mut().filter_map(Option::take).collect(),
            chain: self.chain,
            held: moves.held(),
            latency,
            busy_ns,
            idle_ns,
            output,
        }
    }

    fn hand_over(&mut self, shard: ShardId, to: CoreId) {
        let state = self.shards[usize::from(shard)]
            .take()
            .expect("handing over a shard this worker holds");
        let _ = self.peers[usize::from(to)].send(ToWorker::Shard {
            shard,
            state: Box::new(state),
        });
    }
}

fn sink(
    pkts: &[Packet],
    verdicts: &[Verdict],
    now: u64,
    latency: &mut [Histogram<u64>; 2],
    prio: u8,
    keep: bool,
    output: &mut Vec<(u64, Vec<u8>)>,
) {
    for (p, v) in pkts.iter().zip(verdicts) {
        let class = usize::from(p.info.dscp != prio);
        latency[class].saturating_record(now.saturating_sub(p.ts_ns).max(1));
        if keep && *v == Verdict::Forward {
            output.push((p.ts_ns, p.data.clone()));
        }
    }
}
