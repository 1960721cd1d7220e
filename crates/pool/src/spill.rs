//! Spill-over (Sirius §3.3.4), as a pure machine: a node that passes its
//! capacity for new flows sends the excess new flows of its tenants to
//! another pair, lazily — established flows stay where their state is, new
//! ones go where the current assignment says — without moving any state.
//!
//! A node keeps one per working core. A tenant's new flow (its first packet:
//! a TCP SYN, say) stays here while this core has taken fewer than its share
//! of the capacity in the current window; beyond it, the flow is *spilled*:
//! its packets go to the spill node, which makes its state there. A later
//! packet of a spilled flow still reaches this node (the router's route is
//! this node's) and finds no state here: while a flow was spilled within the
//! linger time, such a packet goes to the spill node too, rather than being
//! dropped as invalid. So a spilled flow keeps its node for as long as
//! spilling goes on and `linger` after (Sirius's "we delay movement by a
//! short period t"); longer ones are the trade-off the paper names.

/// The part of a split tenant (`pool::pack`: part k of `of` gets the flows
/// whose symmetric hash falls in `[k/of, (k+1)/of)` of the hash space) that
/// a flow of hash `hash` belongs to. The node its router sends the tenant to
/// serves its own part and steers the others' flows to their nodes — every
/// packet of a flow (the hash is the same for all), so no state is needed
/// to keep a flow on its node, whatever the routes do.
pub fn part_of(hash: u32, of: u16) -> u16 {
    ((u64::from(hash) * u64::from(of.max(1))) >> 32) as u16
}

/// Where a packet goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    /// Here.
    Local,
    /// To the spill node.
    Away,
}

/// One core's spill-over.
#[derive(Clone, Debug)]
pub struct Spill {
    /// New flows this core takes per window.
    budget: u32,
    window_ns: u64,
    linger_ns: u64,
    /// The current window's start, and the new flows taken in it.
    window: (u64, u32),
    /// When a flow was last spilled.
    last_spill: Option<u64>,
    /// New flows spilled.
    pub spilled: u64,
}

impl Spill {
    /// A core taking `budget` new flows per `window_ns` (its share of the
    /// node's capacity), spilling the rest, and steering stateless packets
    /// away for `linger_ns` after the last spilled flow.
    pub fn new(budget: u32, window_ns: u64, linger_ns: u64) -> Spill {
        Spill {
            budget,
            window_ns: window_ns.max(1),
            linger_ns,
            window: (0, 0),
            last_spill: None,
            spilled: 0,
        }
    }

    /// A new flow of a spillable tenant at `now`: here, or spilled.
    pub fn on_new_flow(&mut self, now: u64) -> Place {
        if now.saturating_sub(self.window.0) >= self.window_ns {
            self.window = (now - now % self.window_ns, 0);
        }
        if self.window.1 < self.budget {
            self.window.1 += 1;
            return Place::Local;
        }
        self.last_spill = Some(now);
        self.spilled += 1;
        Place::Away
    }

    /// A packet of a spillable tenant that found no state here and starts
    /// no flow, at `now`: to the spill node while flows were spilled within
    /// the linger time (it is one of theirs, or invalid there as here).
    pub fn on_stateless(&self, now: u64) -> Place {
        match self.last_spill {
            Some(t) if now.saturating_sub(t) <= self.linger_ns => Place::Away,
            _ => Place::Local,
        }
    }

    /// True while flows are being spilled, or were within the linger time.
    pub fn active(&self, now: u64) -> bool {
        self.on_stateless(now) == Place::Away
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_flows_beyond_the_budget_spill_and_stateless_packets_follow_them_for_the_linger_time() {
        // 3 new flows per 100 ns here; stateless packets follow for 1000 ns
        let mut s = Spill::new(3, 100, 1_000);
        assert_eq!(s.on_stateless(0), Place::Local, "nothing spilled yet");
        let placed: Vec<Place> = (0..5).map(|i| s.on_new_flow(10 + i)).collect();
        assert_eq!(
            placed,
            [
                Place::Local,
                Place::Local,
                Place::Local,
                Place::Away,
                Place::Away
            ]
        );
        assert_eq!(s.spilled, 2);
        assert_eq!(s.on_stateless(500), Place::Away);
        // a new window takes new flows here again
        assert_eq!(s.on_new_flow(120), Place::Local);
        // the spilled flows' later packets still go away until the linger
        // time has passed since the last spill (at 14)
        assert_eq!(s.on_stateless(1_014), Place::Away);
        assert_eq!(s.on_stateless(1_015), Place::Local);
        assert!(!s.active(1_015));
    }

    #[test]
    fn a_split_tenants_parts_are_equal_ranges_of_the_hash_space() {
        assert_eq!(part_of(0, 2), 0);
        assert_eq!(part_of(u32::MAX / 2, 2), 0);
        assert_eq!(part_of(u32::MAX / 2 + 1, 2), 1);
        assert_eq!(part_of(u32::MAX, 2), 1);
        assert_eq!(part_of(u32::MAX, 3), 2);
        assert_eq!(part_of(12345, 1), 0);
        assert_eq!(part_of(u32::MAX, 0), 0, "no parts is one");
        // about even over many hashes
        let mut n = [0u32; 3];
        for h in (0..u32::MAX).step_by(65_537) {
            n[usize::from(part_of(h, 3))] += 1;
        }
        assert!(n.iter().all(|&k| (21_800..=21_900).contains(&k)), "{n:?}");
    }

    #[test]
    fn a_budget_of_zero_spills_every_new_flow() {
        let mut s = Spill::new(0, 100, 0);
        assert_eq!(s.on_new_flow(5), Place::Away);
        assert_eq!(s.on_stateless(5), Place::Away);
        assert_eq!(s.on_stateless(6), Place::Local);
    }
}
