//! An offloading core (Dyssect §II-B): polls one ring per working core round-robin,
//! a burst from each, and processes the offloaded packets with the flow states that
//! were leased to it; at a recall marker it sends the recalled states back to the
//! working core. It never blocks, so a working core waiting on a recall is never
//! stuck (the bound on Algorithm 3's waits).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use balance::migrate::offload::{EntryIdx, Ticket};
use balance::{CoreId, ShardId};
use crossbeam_channel::Sender;
use hdrhistogram::Histogram;
use nf::{Chain, DropCause, Leased, Packet, Verdict};
use rtrb::Consumer;

use crate::shared::Shared;
use crate::stats::WorkerStats;
use crate::worker::{sink_one, ToWorker};

/// What a working core sends its offloading core, in one FIFO ring.
pub(crate) enum ToOffload {
    /// An offloaded packet; `lease` carries the flow's state with its first one.
    Job {
        shard: ShardId,
        entry: EntryIdx,
        lease: Option<Box<Leased>>,
        pkt: Packet,
    },
    /// Send these flows' states back (after every packet before this marker).
    Recall {
        ticket: Ticket,
        entries: Vec<(ShardId, EntryIdx)>,
    },
}

/// What an offloading core hands back at the end.
pub(crate) struct OffloaderResult {
    pub chain: Chain,
    pub latency: [Histogram<u64>; 2],
    pub busy_ns: u64,
    pub idle_ns: u64,
    pub output: Vec<(u64, Vec<u8>)>,
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
    pub keep_output: bool,
    pub stats: Arc<WorkerStats>,
    pub priority_dscp: u8,
}

impl Offloader {
    pub fn run(mut self) -> OffloaderResult {
        let hist =
            || Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).expect("valid bounds");
        let mut latency = [hist(), hist()];
        let mut output = Vec::new();
        let mut leased: HashMap<(CoreId, ShardId, EntryIdx), Box<Leased>> = HashMap::new();
        let (mut busy_ns, mut idle_ns, mut packets) = (0u64, 0u64, 0u64);
        let mut last = Instant::now();
        loop {
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
                                    self.chain.process_leased(info, e, l, &mut pkt, now)
                                }
                                _ => {
                                    debug_assert!(false, "an offloaded packet without its state");
                                    self.chain.count_drop(DropCause::OffloadState);
                                    Verdict::Drop(DropCause::OffloadState)
                                }
                            };
                            sink_one(
                                &pkt,
                                v,
                                self.shared.now_ns(),
                                &mut latency,
                                self.priority_dscp,
                                self.keep_output,
                                &mut output,
                                &mut None,
                            );
                            packets += 1;
                        }
                        ToOffload::Recall { ticket, entries } => {
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
                std::thread::yield_now();
                // the yield is idle time too, not the next burst's
                let now = Instant::now();
                idle_ns += now.duration_since(last).as_nanos() as u64;
                last = now;
            } else {
                busy_ns += now.duration_since(last).as_nanos() as u64;
                last = now;
                self.stats.publish(busy_ns, idle_ns, packets);
            }
        }
        OffloaderResult {
            chain: self.chain,
            latency,
            busy_ns,
            idle_ns,
            output,
            leftover: leased.len(),
        }
    }
}
