//! NAT events for a provider's translation log (RFC 8158's NAT44 BIB
//! create/delete: which inside address and port a mapping gave which outside
//! address and port, and when it ended). The NAT only records: each core's
//! instance pushes its events into a bounded queue of its own, registered
//! with the [`EventHub`] on its first event; a logger thread elsewhere drains
//! every queue and writes the records. A full queue never waits: the event is
//! dropped and counted (the NAT's `log_lost` counter), so logging never slows
//! the packet path. The queues are single-producer single-consumer rings
//! (`rtrb`): a push is a store and a release, no compare-and-swap shared with
//! the logger.

use core::net::Ipv4Addr;
use std::sync::{Arc, Mutex};

use rtrb::{Consumer, Producer, RingBuffer};

/// A mapping created or deleted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NatEvent {
    /// Created (else deleted: expired, evicted, deleted by an operator, or
    /// undone because a later NF dropped the flow's first packet).
    pub created: bool,
    /// IP protocol.
    pub proto: u8,
    /// Inside address and port (ICMP: echo id).
    pub int: (Ipv4Addr, u16),
    /// Outside address and port.
    pub ext: (Ipv4Addr, u16),
}

/// The NAT instance's end of its queue.
pub type EventQueue = Producer<NatEvent>;

/// Where every core's queue is found by the logger.
#[derive(Debug)]
pub struct EventHub {
    capacity: usize,
    queues: Mutex<Vec<Consumer<NatEvent>>>,
}

impl EventHub {
    /// A hub whose queues hold `capacity` events each (at least 1).
    pub fn new(capacity: usize) -> EventHub {
        EventHub {
            capacity: capacity.max(1),
            queues: Mutex::new(Vec::new()),
        }
    }

    /// A new queue, registered (a NAT instance's on its first event): its
    /// producing end.
    pub fn register(&self) -> EventQueue {
        let (p, c) = RingBuffer::new(self.capacity);
        self.queues
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(c);
        p
    }

    /// Moves every queued event into `out`; the number moved.
    pub fn drain(&self, out: &mut Vec<NatEvent>) -> usize {
        let mut queues = self.queues.lock().unwrap_or_else(|e| e.into_inner());
        let before = out.len();
        for q in queues.iter_mut() {
            while let Ok(e) = q.pop() {
                out.push(e);
            }
        }
        out.len() - before
    }
}

/// A NAT instance's link to the hub: its own queue once it has logged (a
/// clone for another core starts without one).
#[derive(Debug, Default)]
pub(crate) struct EventLog {
    hub: Option<Arc<EventHub>>,
    queue: Option<EventQueue>,
}

impl Clone for EventLog {
    fn clone(&self) -> Self {
        EventLog {
            hub: self.hub.clone(),
            queue: None,
        }
    }
}

impl EventLog {
    pub(crate) fn to(hub: Arc<EventHub>) -> EventLog {
        EventLog {
            hub: Some(hub),
            queue: None,
        }
    }

    /// Records `e`; false when the queue was full (the event is lost).
    #[inline]
    pub(crate) fn record(&mut self, e: NatEvent) -> bool {
        let Some(hub) = &self.hub else { return true };
        let q = self.queue.get_or_insert_with(|| hub.register());
        q.push(e).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(port: u16) -> NatEvent {
        NatEvent {
            created: true,
            proto: 6,
            int: (Ipv4Addr::new(10, 0, 0, 1), port),
            ext: (Ipv4Addr::new(203, 0, 113, 1), port),
        }
    }

    #[test]
    fn each_instance_has_its_queue_and_a_full_one_refuses() {
        let hub = Arc::new(EventHub::new(2));
        let mut a = EventLog::to(hub.clone());
        let mut b = a.clone();
        assert!(a.record(ev(1)) && a.record(ev(2)));
        assert!(!a.record(ev(3)), "full: lost, not waited for");
        assert!(b.record(ev(4)), "another core's queue");
        let mut out = Vec::new();
        assert_eq!(hub.drain(&mut out), 3);
        let ports: Vec<u16> = out.iter().map(|e| e.int.1).collect();
        assert_eq!(ports, [1, 2, 4]);
        assert!(a.record(ev(5)), "room again once drained");
        assert!(EventLog::default().record(ev(6)), "no hub: nothing to lose");
    }
}
