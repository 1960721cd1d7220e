//! A hashed timing wheel with lazy re-arming: O(1) to schedule, O(1) amortised per
//! expiry, and nothing to do per packet (a packet only moves a deadline later; the
//! wheel finds out when the old time comes and re-arms).

/// Timer wheel over items of type `T`, with a fixed tick.
#[derive(Clone, Debug)]
pub struct TimerWheel<T> {
    slots: Vec<Vec<(u64, T)>>,
    tick_ns: u64,
    /// The last tick processed.
    now_tick: u64,
    /// Items scheduled and not yet handed out (stale ones included).
    items: usize,
}

impl<T: Copy> TimerWheel<T> {
    /// A wheel of `slots` slots (rounded up to a power of two) of `tick_ns` each,
    /// starting at time `start_ns`.
    pub fn new(slots: usize, tick_ns: u64, start_ns: u64) -> TimerWheel<T> {
        let n = slots.max(1).next_power_of_two();
        TimerWheel {
            slots: vec![Vec::new(); n],
            tick_ns: tick_ns.max(1),
            now_tick: start_ns / tick_ns.max(1),
            items: 0,
        }
    }

    /// The tick a time falls in.
    pub fn tick_of(&self, t_ns: u64) -> u64 {
        t_ns / self.tick_ns
    }

    /// The first time of `tick` (saturating): `t < tick_start(k)` exactly when
    /// `tick_of(t) < k`, without a division.
    #[inline]
    pub fn tick_start(&self, tick: u64) -> u64 {
        tick.saturating_mul(self.tick_ns)
    }

    /// Schedules `item` for the tick of `at_ns` (a time already past fires on the
    /// next advance). Returns the tick it was scheduled for.
    pub fn schedule(&mut self, item: T, at_ns: u64) -> u64 {
        let tick = self.tick_of(at_ns).max(self.now_tick + 1);
        let mask = self.slots.len() as u64 - 1;
        self.slots[(tick & mask) as usize].push((tick, item));
        self.items += 1;
        tick
    }

    /// Keeps only the items `keep(tick, item)` accepts (e.g. drops stale ones
    /// whose owner was re-armed or freed), giving their memory back.
    pub fn retain(&mut self, mut keep: impl FnMut(u64, T) -> bool) {
        let mut n = 0;
        for slot in &mut self.slots {
            slot.retain(|&(t, item)| keep(t, item));
            if slot.capacity() > 2 * slot.len() + 4 {
                slot.shrink_to_fit();
            }
            n += slot.len();
        }
        self.items = n;
    }

    /// Advances to `now_ns` and calls `due(tick, item)` for every item scheduled at
    /// a tick ≤ now, in tick order within each slot pass.
    pub fn advance(&mut self, now_ns: u64, mut due: impl FnMut(u64, T)) {
        let target = self.tick_of(now_ns);
        if target <= self.now_tick {
            return;
        }
        let n = self.slots.len() as u64;
        let mask = n - 1;
        // Past one full turn every slot is visited once.
        let first = if target - self.now_tick > n {
            target - n + 1
        } else {
            self.now_tick + 1
        };
        let mut keep = Vec::new();
        for tick in first..=target {
            let slot = &mut self.slots[(tick & mask) as usize];
            if slot.is_empty() {
                continue;
            }
            let items = core::mem::take(slot);
            for (t, item) in items {
                if t <= target {
                    self.items -= 1;
                    due(t, item);
                } else {
                    keep.push((t, item));
                }
            }
            let slot = &mut self.slots[(tick & mask) as usize];
            slot.append(&mut keep);
        }
        self.now_tick = target;
    }

    /// Number of scheduled items (stale ones included).
    pub fn len(&self) -> usize {
        self.items
    }

    /// True when nothing is scheduled.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fires_in_time_including_far_future() {
        let mut w = TimerWheel::new(8, 10, 0);
        w.schedule('a', 25);
        w.schedule('b', 95); // more than one turn ahead
        w.schedule('c', 5); // in the past tick: next advance
        let mut fired = Vec::new();
        w.advance(30, |_, x| fired.push(x));
        assert_eq!(fired, ['c', 'a']);
        w.advance(89, |_, x| fired.push(x));
        assert_eq!(fired, ['c', 'a']);
        w.advance(1000, |_, x| fired.push(x));
        assert_eq!(fired, ['c', 'a', 'b']);
        assert!(w.is_empty());
    }
}
