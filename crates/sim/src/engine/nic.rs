//! The NIC model: replays the trace (as fast as the queues take packets, or
//! timed with tail drops), steers each packet through the live indirection table
//! into its core's queue, and acknowledges table versions per burst.

use balance::CoreId;
use trace::Pace;

use super::{Engine, Ev, Msg, SimPkt};
use crate::prep::MALFORMED;

impl Engine<'_> {
    pub(super) fn feed(&mut self) {
        if let Some(q) = self.blocked_on {
            if self.working[q].ring.len() >= self.cfg.ring_size {
                return; // still full; the core wakes the feeder when it takes packets
            }
            self.blocked_on = None;
        }
        let timed = matches!(self.schedule.pace, Pace::Timed { .. });
        let nic = self.model.nic_ns;
        // one event emits what the NIC model emits in one burst's time; each
        // packet keeps its own arrival stamp, and no core takes it before the
        // NIC model has parsed, hashed and queued it (`handed`), as the
        // runtime stamps a packet before its NIC-model work
        let horizon = self.now + (nic * self.cfg.burst as f64).round() as u64;
        if self.burst_left == 0 {
            self.burst_left = self.cfg.burst;
            self.burst_version = self.version;
        }
        while self.burst_left > 0 {
            let Some((i, rel)) = self.schedule.release(self.trace, self.n) else {
                self.burst_left = 0;
                break;
            };
            if let Some(d) = self.cfg.duration {
                if self.feeder_clock >= d.as_nanos() as u64 {
                    self.burst_left = 0;
                    self.total = self.n;
                    break;
                }
            }
            // (after waiting on a full queue the NIC model's clock is now)
            let emit = self.feeder_clock.max(rel).max(self.now);
            if emit > horizon {
                // not yet: the burst goes on when the packet is due
                self.wake_feeder(emit);
                return;
            }
            let info = self.prep.pkts[i];
            if !timed && info.flags & MALFORMED == 0 {
                let q = usize::from(self.table.queue_of(info.hash));
                if self.working[q].ring.len() >= self.cfg.ring_size {
                    self.blocked_on = Some(q);
                    return;
                }
            }
            self.n += 1;
            self.feeder_clock = emit + nic.round() as u64;
            self.t.offered += 1;
            self.t.bytes += u64::from(info.bytes);
            if info.flags & MALFORMED != 0 {
                self.t.malformed[usize::from(info.verdict)] += 1;
            } else {
                let q = usize::from(self.table.queue_of(info.hash));
                if self.working[q].ring.len() >= self.cfg.ring_size {
                    self.t.ring_full += 1;
                    self.queue_drops[q] += 1;
                } else {
                    self.working[q].ring.push_back(SimPkt {
                        idx: i as u32,
                        n: self.n,
                        at: emit,
                    });
                    self.wake_core_at(q, emit + self.handed());
                }
            }
            self.burst_left -= 1;
        }
        // every packet steered by a table of version ≤ burst_version is queued
        self.t.feed_ns = self.feeder_clock;
        let seen = self.burst_version;
        for order in self.apply.on_nic_seen(seen) {
            self.order(order);
        }
        if self.n >= self.total {
            if !self.feeding_done {
                self.feeding_done = true;
                // no packet is left to steer by an old table: every rewrite is
                // seen (as the runtime's feeder says when it finishes), so a
                // move begun late goes on
                for order in self.apply.on_nic_seen(u64::MAX) {
                    self.order(order);
                }
                self.maybe_stop();
            }
        } else {
            let t = self.feeder_clock;
            self.wake_feeder(t);
        }
    }

    pub(super) fn maybe_stop(&mut self) {
        if self.feeding_done && self.apply.in_flight() == 0 && !self.stopping {
            self.stopping = true;
            for c in 0..self.working.len() {
                self.wake_core(c);
            }
        }
    }

    pub(super) fn send(&mut self, to: CoreId, m: Msg, from_t: u64) {
        let t = from_t + self.model.message_ns.round() as u64;
        self.at(t, Ev::ToCore(to, m));
    }
}
