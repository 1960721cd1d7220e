//! Packets a buffering FAR holds on one core (TS 23.401 §5.3.4.3's
//! downlink data buffering for an idle UE): in arrival order per (session,
//! FAR, PDR, direction), at most `bound` packets per session, until the FAR
//! stops buffering — then sent in that order, or discarded if it drops or
//! the session is gone.

use std::collections::VecDeque;

use rustc_hash::FxHashMap;

use crate::Packet;

/// (SEID, FAR id, PDR id, uplink).
pub type Key = (u64, u32, u16, bool);

/// One core's buffers.
#[derive(Debug, Default)]
pub struct Buffers {
    held: FxHashMap<Key, VecDeque<Packet>>,
    per_session: FxHashMap<u64, usize>,
    bound: usize,
    len: usize,
}

impl Buffers {
    /// Buffers of at most `bound` packets per session.
    pub fn new(bound: usize) -> Buffers {
        Buffers {
            bound,
            ..Buffers::default()
        }
    }

    /// The bound per session.
    pub fn bound(&self) -> usize {
        self.bound
    }

    /// Packets held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when nothing is held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// True if packets of `seid` under FAR `far` are held here (a later
    /// packet must then wait behind them).
    pub fn holds(&self, seid: u64, far: u32) -> bool {
        self.len > 0 && self.held.keys().any(|k| k.0 == seid && k.1 == far)
    }

    /// Holds `p`; false (not held) when its session's buffer is full.
    pub fn hold(&mut self, key: Key, p: Packet) -> bool {
        let n = self.per_session.entry(key.0).or_default();
        if *n >= self.bound {
            return false;
        }
        *n += 1;
        self.len += 1;
        self.held.entry(key).or_default().push_back(p);
        true
    }

    /// Takes out every buffer whose key `release` picks.
    pub fn take_where(&mut self, release: impl Fn(&Key) -> bool) -> Vec<(Key, VecDeque<Packet>)> {
        let keys: Vec<Key> = self.held.keys().copied().filter(|k| release(k)).collect();
        let mut out = Vec::with_capacity(keys.len());
        for k in keys {
            if let Some(q) = self.held.remove(&k) {
                self.len -= q.len();
                if let Some(n) = self.per_session.get_mut(&k.0) {
                    *n -= q.len();
                    if *n == 0 {
                        self.per_session.remove(&k.0);
                    }
                }
                out.push((k, q));
            }
        }
        out
    }
}
