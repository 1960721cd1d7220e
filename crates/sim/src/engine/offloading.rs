//! An offloading core: one ring per working core, polled round-robin; runs
//! offloaded packets and answers recall markers with the flows' states.

use balance::CoreId;

use super::{Engine, Job, Msg};
use crate::prep::PRIORITY;

impl Engine<'_> {
    pub(super) fn offloader_step(&mut self, k: usize) {
        let start = self.now;
        let w = self.working.len();
        let per = self
            .model
            .packet_ns(self.chain_ns, self.offloading[k].leased as f64, 1.0)
            + self.model.offload_ns;
        let mut cost = 0.0;
        let mut next_ready: Option<u64> = None;
        for step in 0..w {
            let c = (self.offloading[k].rr + step) % w;
            for _ in 0..self.cfg.burst {
                let Some(job) = self.offloading[k].rings[c].front() else {
                    break;
                };
                let ready = job.ready();
                if ready > start {
                    next_ready = Some(next_ready.map_or(ready, |r: u64| r.min(ready)));
                    break;
                }
                let job = self.offloading[k].rings[c].pop_front().expect("checked");
                match job {
                    Job::Pkt {
                        lease, pkt, shard, ..
                    } => {
                        let _ = shard;
                        if lease {
                            self.offloading[k].leased += 1;
                            cost += self.model.warm_ns_per_entry;
                        }
                        cost += per + self.new_flow_cost(&pkt);
                        let done = start + cost.round() as u64;
                        self.sink(pkt, done, None);
                        let info = self.prep.pkts[pkt.idx as usize];
                        let st = &mut self.offloading[k].stats;
                        st.packets += 1;
                        st.priority += u64::from(info.flags & PRIORITY != 0);
                    }
                    Job::Recall {
                        ticket, entries, ..
                    } => {
                        let of = &mut self.offloading[k];
                        of.leased = of.leased.saturating_sub(entries.len() as u64);
                        let done = start + cost.round() as u64;
                        self.send(c as CoreId, Msg::Returned { ticket, entries }, done);
                    }
                }
                // room in the ring: a stalled working core goes on
                if !self.working[c].outbox.is_empty() {
                    self.wake_core(c);
                }
            }
        }
        let of = &mut self.offloading[k];
        of.rr = (of.rr + 1) % w.max(1);
        let cost_ns = cost.round() as u64;
        of.stats.busy_ns += cost_ns;
        of.busy_until = start + cost_ns;
        let more = of
            .rings
            .iter()
            .any(|r| r.front().is_some_and(|j| j.ready() <= of.busy_until));
        if more {
            self.wake_offloader(k, start + cost_ns);
        } else if let Some(t) = next_ready.or_else(|| {
            self.offloading[k]
                .rings
                .iter()
                .filter_map(|r| r.front().map(Job::ready))
                .min()
        }) {
            self.wake_offloader(k, t);
        }
    }
}
