//! An offloading core (Dyssect §II-B): polls one ring per working core round-robin,
//! a burst from each, and processes the offloaded packets with the flow states that
//! were leased to it; at a recall marker it sends the recalled states back to the
//! working core. It never blocks, so a working core waiting on a recall is never
//! stuck (the bound on Algorithm 3's waits).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use balance::migrate::offload::EntryIdx;
use balance::{CoreId, ShardId};
use crossbeam_channel::Sender;
use nf::{Chain, DropCause, Leased, Verdict};
use rtrb::Consumer;

use crate::messages::{ToOffload, ToWorker};
use crate::shared::Shared;
use crate::sink::Sink;
use crate::stats::WorkerStats;

/// What an offloading core hands back at the end.
pub(crate) struct OffloaderResult {
    pub chain: Chain,
    pub sink: Sink,
    pub busy_ns: u64,
    pub idle_ns: u64,
    /// Leased states never recalled (must be 0).
    pub leftover: usize,
}

pub(crate) struct Offloader {
    pub chain: Chain,
    /// (working core, its ring to this core).
    pub rings: Vec<(CoreId, Consumer<ToOffload>)>,
    pub workers: Vec<Sender<ToWorker>>,
    pub shared: Arc<Shared>,
    pub burst: usize,
    pub stats: Arc<WorkerStats>,
    pub sink: Sink,
    /// Where live metrics go, and this core's index there.
    pub metrics: Option<(Arc<runspec::metrics::Metrics>, usize)>,
    /// Delayed merge of NF state shared across cores, if the chain has any.
    pub merging: Option<crate::merge::Merging>,
    /// An operator's orders (a live reload).
    pub orders: crossbeam_channel::Receiver<runspec::control::Order>,
}

impl Offloader {
    pub fn run(mut self) -> OffloaderResult {
        let mut leased: HashMap<(CoreId, ShardId, EntryIdx), Box<Leased>> = HashMap::new();
        let (mut busy_ns, mut idle_ns, mut packets) = (0u64, 0u64, 0u64);
        let mut last = Instant::now();
        let mut next_publish = 0u64;
        let mut backoff = crate::backoff::Backoff::default();
        loop {
            // the last round's forwarded frames leave together
            self.sink.flush();
            if let Some((m, i)) = &self.metrics {
                let now = self.shared.now_ns();
                if now >= next_publish {
                    next_publish = now + 10_000_000;
                    m.publish_core(*i, || crate::sink::live(&self.chain, &self.sink));
                }
            }
            if let Some(m) = &mut self.merging {
                m.tick(self.shared.now_ns(), &mut self.chain);
            }
            while let Ok(o) = self.orders.try_recv() {
                match o {
                    runspec::control::Order::Reload(r) => {
                        crate::inspect::reload(&mut self.chain, r)
                    }
                    // (flows are the working cores' to list)
                    runspec::control::Order::Query(q) => drop(q),
                }
            }
            let mut worked = 0;
            for (w, ring) in &mut self.rings {
                let n = ring.slots().min(self.burst);
                for _ in 0..n {
                    let job = ring.pop().expect("slots() said so");
                    match job {
                        ToOffload::Job {
                            shard,
                            entry,
                            lease,
                            mut pkt,
                        } => {
                            let key = (*w, shard, entry);
                            if let Some(l) = lease {
                                let prev = leased.insert(key, l);
                                debug_assert!(prev.is_none(), "a flow leased twice");
                            }
                            let now = self.shared.now_ns();
                            let v = match (leased.get_mut(&key), pkt.entry) {
                                (Some(l), Some(e)) => {
                                    let info = self.chain.shard_info(usize::from(shard));
                                    let v = self.chain.process_leased(info, e, l, &mut pkt, now);
                                    if v == Verdict::Forward {
                                        let ok = l.exit_in_order(pkt.dir, pkt.ts_ns);
                                        self.sink.exit_order(ok);
                                    }
                                    v
                                }
                                _ => {
                                    debug_assert!(false, "an offloaded packet without its state");
                                    self.chain.count_drop(DropCause::OffloadState);
                                    Verdict::Drop(DropCause::OffloadState)
                                }
                            };
                            self.sink.one(&pkt, v, self.shared.now_ns());
                            self.sink.give_back(pkt.data);
                            packets += 1;
                        }
                        ToOffload::Recall { ticket, entries } => {
                            // the flows' packets run here leave before the
                            // working core's next ones
                            self.sink.flush();
                            let states = entries
                                .into_iter()
                                .filter_map(|(s, e)| leased.remove(&(*w, s, e)).map(|l| (s, e, l)))
                                .collect();
                            // the working core outlives its recalls: it waits for them
                            let _ = self.workers[usize::from(*w)]
                                .send(ToWorker::Returned { ticket, states });
                        }
                    }
                }
                worked += n;
            }
            let now = Instant::now();
            if worked == 0 {
                idle_ns += now.duration_since(last).as_nanos() as u64;
                last = now;
                self.stats.publish(busy_ns, idle_ns, packets);
                // done once every working core has gone and left nothing behind
                if self.shared.aborted() {
                    break;
                }
                if self.shared.stopping()
                    && self
                        .rings
                        .iter()
                        .all(|(_, r)| r.is_abandoned() && r.slots() == 0)
                {
                    break;
                }
                backoff.wait();
                // the wait is idle time too, not the next burst's
                let now = Instant::now();
                idle_ns += now.duration_since(last).as_nanos() as u64;
                last = now;
            } else {
                backoff.reset();
                busy_ns += now.duration_since(last).as_nanos() as u64;
                last = now;
                self.stats.publish(busy_ns, idle_ns, packets);
            }
        }
        self.finish(busy_ns, idle_ns, leased.len())
    }

    /// The last frames out, the last counters published, the result.
    fn finish(mut self, busy_ns: u64, idle_ns: u64, leftover: usize) -> OffloaderResult {
        self.sink.flush();
        if let Some((m, i)) = &self.metrics {
            m.publish_core_last(*i, crate::sink::live(&self.chain, &self.sink));
        }
        OffloaderResult {
            chain: self.chain,
            sink: self.sink,
            busy_ns,
            idle_ns,
            leftover,
        }
    }
}
