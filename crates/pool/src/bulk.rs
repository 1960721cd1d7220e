//! A bulk sync's window (Sirius §3.2), as a pure machine: the copies of a
//! checkpoint that are out and not yet acknowledged, at most a window's
//! worth, so a sync moves a table while traffic flows; a copy whose
//! acknowledgement has not come within the resend time is overdue, and
//! handed back for the sender to send again (if what it copied still lives).
//!
//! Both drivers keep one: a real node's working core per bulk-sync order
//! (copies of single entries), the simulator's [`crate::replica`] machine per
//! new secondary (batches of records). Copy numbers and times are arguments.

use std::collections::HashMap;

/// The copies out of one sync: `F` says what each copied.
#[derive(Clone, Debug)]
pub struct Window<F> {
    cap: usize,
    resend_ns: u64,
    out: HashMap<u32, (F, u64)>,
}

impl<F> Window<F> {
    /// At most `cap` copies out (at least one); overdue after `resend_ns`.
    pub fn new(cap: usize, resend_ns: u64) -> Window<F> {
        Window {
            cap: cap.max(1),
            resend_ns,
            out: HashMap::new(),
        }
    }

    /// Room for another copy.
    pub fn room(&self) -> bool {
        self.out.len() < self.cap
    }

    /// Copy `seq` of `what` left at `now`.
    pub fn sent(&mut self, seq: u32, what: F, now: u64) {
        self.out.insert(seq, (what, now));
    }

    /// Copy `seq` was acknowledged: what it copied, if it was out (once).
    pub fn acked(&mut self, seq: u32) -> Option<F> {
        self.out.remove(&seq).map(|(f, _)| f)
    }

    /// Copies out longer than the resend time at `now`, at most `max`,
    /// oldest first, forgotten: the caller sends each again (under a new
    /// number) if what it copied still lives.
    pub fn overdue(&mut self, now: u64, max: usize) -> Vec<F> {
        let mut late: Vec<(u64, u32)> = self
            .out
            .iter()
            .filter(|(_, (_, t))| now.saturating_sub(*t) > self.resend_ns)
            .map(|(&s, (_, t))| (*t, s))
            .collect();
        late.sort_unstable();
        late.into_iter()
            .take(max)
            .filter_map(|(_, s)| self.out.remove(&s))
            .map(|(f, _)| f)
            .collect()
    }

    /// Copies out.
    pub fn len(&self) -> usize {
        self.out.len()
    }

    /// True if no copy is out.
    pub fn is_empty(&self) -> bool {
        self.out.is_empty()
    }

    /// Forgets every copy out (a new order, a lost peer).
    pub fn clear(&mut self) {
        self.out.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_copy_not_acknowledged_in_time_is_handed_back_once_oldest_first() {
        let mut w = Window::new(3, 100);
        w.sent(1, 'a', 0);
        w.sent(2, 'b', 10);
        w.sent(3, 'c', 20);
        assert!(!w.room());
        assert_eq!(w.acked(2), Some('b'));
        assert_eq!(w.acked(2), None, "once");
        assert!(w.room());
        assert_eq!(w.overdue(100, 8), vec![], "not yet");
        assert_eq!(w.overdue(121, 1), vec!['a'], "at most one");
        assert_eq!(w.overdue(121, 8), vec!['c']);
        assert!(w.is_empty());
        assert_eq!(w.acked(1), None, "a late acknowledgement of a resent copy");
    }

    proptest! {
        /// Every copy sent is acknowledged or handed back exactly once, and
        /// the window never holds more than its room.
        #[test]
        fn every_copy_ends_once(ops in proptest::collection::vec((any::<bool>(), 0u32..50), 1..300)) {
            let mut w = Window::new(8, 5);
            let mut seq = 0u32;
            let mut ended = std::collections::HashSet::new();
            let mut now = 0;
            for (send, pick) in ops {
                now += 1;
                if send && w.room() {
                    w.sent(seq, seq, now);
                    seq += 1;
                } else if let Some(f) = w.acked(pick) {
                    prop_assert!(ended.insert(f));
                }
                for f in w.overdue(now, 2) {
                    prop_assert!(ended.insert(f));
                }
                prop_assert!(w.len() <= 8);
            }
            for f in w.overdue(u64::MAX, usize::MAX) {
                prop_assert!(ended.insert(f));
            }
            prop_assert_eq!(ended.len() as u32, seq);
        }
    }
}
