//! The pool protocol as one node's replication port consumes it, without
//! sockets or threads: a datagram is opened with the pool's key
//! (`pool::auth`), then read as a controller's order or heartbeat, a bulk
//! copy or a replica message, and a copy's entry is installed in the chain's
//! shard of its flow — what the NIC-model thread and the worker do, in one
//! call. For the fuzz target (`fuzz/fuzz_targets/pool.rs`) and the tests.

use std::net::SocketAddr;
use std::sync::Arc;

/// A controller's datagram at a node's replication port, read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Order {
    /// A heartbeat ([`crate::replica::HEARTBEAT`]).
    Heartbeat,
    /// Asks how a bulk sync goes ([`crate::bulk::BULK_QUERY`]).
    BulkQuery,
    /// Stop copying ([`crate::bulk::BULK_STOP`]).
    BulkStop,
    /// Copy the whole table to this node ([`crate::bulk::BULK_START`]).
    BulkStart(SocketAddr),
    /// Replicate to this node from now on ([`crate::replica::NEW_SECONDARY`]).
    NewSecondary(SocketAddr),
}

/// The order `body` is, if it is one.
pub(crate) fn order(body: &[u8]) -> Option<Order> {
    let addr =
        |a: &[u8]| -> Option<SocketAddr> { std::str::from_utf8(a).ok()?.trim().parse().ok() };
    if body == crate::replica::HEARTBEAT {
        Some(Order::Heartbeat)
    } else if body == crate::bulk::BULK_QUERY {
        Some(Order::BulkQuery)
    } else if body == crate::bulk::BULK_STOP {
        Some(Order::BulkStop)
    } else if let Some(a) = body.strip_prefix(crate::bulk::BULK_START) {
        addr(a).map(Order::BulkStart)
    } else if let Some(a) = body.strip_prefix(crate::replica::NEW_SECONDARY) {
        addr(a).map(Order::NewSecondary)
    } else {
        None
    }
}

/// A copy of a flow's entry at a node's replication port, read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum EntryCopy<'a> {
    /// A bulk-sync copy: install the entry of hash `hash`, send nothing.
    Install {
        seq: u32,
        entry: &'a [u8],
        hash: u32,
    },
    /// A replica message: install the entry, send the frame (which came in
    /// by `port`).
    Replica {
        port: u8,
        seq: u32,
        entry: &'a [u8],
        frame: &'a [u8],
    },
}

/// The copy `body` is, if it is one.
pub(crate) fn copy(body: &[u8]) -> Option<EntryCopy<'_>> {
    let (port, seq, entry, frame) = crate::replica::decode(body).ok()?;
    if port & crate::bulk::INSTALL != 0 {
        let hash = u32::from_be_bytes(frame.try_into().ok()?);
        return Some(EntryCopy::Install { seq, entry, hash });
    }
    Some(EntryCopy::Replica {
        port,
        seq,
        entry,
        frame,
    })
}

/// What a datagram became.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Consumed {
    /// Refused unopened (forged, changed, stale, replayed, malformed).
    Refused(pool::auth::Refused),
    /// A heartbeat, a bulk-sync query or order, or a re-ring order, carried
    /// out.
    Control,
    /// A bulk copy's entry installed (true) or refused as malformed (false).
    Install(bool),
    /// A replica message whose frame parsed, and whether its entry
    /// installed.
    Replica(bool),
    /// A replica message whose frame does not parse.
    BadFrame,
    /// Opened, but no message of the protocol.
    Unknown,
}

/// One node's port and the state its messages act on.
pub struct Port {
    open: pool::auth::Open,
    secondary: Arc<crate::replica::Secondary>,
    bulk: Arc<crate::bulk::BulkOrder>,
    hasher: steer::RssHasher,
}

impl Port {
    /// A port opening with `key` (none: bare bodies) since `since_us`, for
    /// `chain`'s shards.
    pub fn new(chain: &nf::Chain, key: Option<&pool::auth::Key>, since_us: u64) -> Port {
        Port {
            open: pool::auth::Open::new(key, since_us),
            secondary: crate::replica::Secondary::new(([127, 0, 0, 1], 9).into()),
            bulk: crate::bulk::BulkOrder::new(chain.shard_count(), 1),
            hasher: chain.hasher().clone(),
        }
    }

    /// Datagram `d` arriving at `now_us`, consumed by `chain` in `shards`.
    pub fn consume(
        &mut self,
        d: &[u8],
        now_us: u64,
        chain: &mut nf::Chain,
        shards: &mut [nf::Shard],
    ) -> Consumed {
        let body = match self.open.open(now_us, d) {
            Ok(b) => b,
            Err(e) => return Consumed::Refused(e),
        };
        let now_ns = now_us.saturating_mul(1000);
        match order(body) {
            Some(Order::BulkStop) => {
                self.bulk.stop();
                return Consumed::Control;
            }
            Some(Order::BulkStart(a)) => {
                self.bulk.start(a);
                return Consumed::Control;
            }
            Some(Order::NewSecondary(a)) => {
                self.secondary.set(a);
                return Consumed::Control;
            }
            Some(Order::Heartbeat | Order::BulkQuery) => {
                let _ = self.bulk.status();
                return Consumed::Control;
            }
            None => {}
        }
        match copy(body) {
            Some(EntryCopy::Install { entry, hash, .. }) => {
                let s = chain.shard_of(hash);
                Consumed::Install(chain.install(&mut shards[s], entry, now_ns).is_ok())
            }
            Some(EntryCopy::Replica { entry, frame, .. }) => {
                match nf::Packet::new(frame.to_vec(), now_ns, &self.hasher) {
                    Ok(p) => {
                        let s = chain.shard_of(p.hash);
                        Consumed::Replica(chain.install(&mut shards[s], entry, now_ns).is_ok())
                    }
                    Err(_) => Consumed::BadFrame,
                }
            }
            None => Consumed::Unknown,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pool::auth::{Key, Refused, Seal};

    #[test]
    fn only_messages_sealed_with_the_key_are_carried_out_and_each_once() {
        let mut chain = nf::ChainConfig::default_chain()
            .build(std::path::Path::new("."))
            .unwrap();
        let mut shards = chain.new_shards();
        let key = Key::new([1; 32]);
        let now = 5_000_000;
        let mut port = Port::new(&chain, Some(&key), now - 10);
        let order = b"FSSE 10.77.0.9:4000";
        // bare, and sealed with another key: refused, the secondary unchanged
        assert_eq!(
            port.consume(order, now, &mut chain, &mut shards),
            Consumed::Refused(Refused::Malformed)
        );
        let forged = Seal::new(Key::new([2; 32]), 1).sealed(now, order);
        assert_eq!(
            port.consume(&forged, now, &mut chain, &mut shards),
            Consumed::Refused(Refused::Tag)
        );
        assert_eq!(port.secondary.get().0, 0, "no re-ring");
        // sealed with the pool's key: carried out, once
        let good = Seal::new(key.clone(), 1).sealed(now, order);
        assert_eq!(
            port.consume(&good, now, &mut chain, &mut shards),
            Consumed::Control
        );
        assert_eq!(
            port.secondary.get().1,
            "10.77.0.9:4000".parse::<std::net::SocketAddr>().unwrap()
        );
        assert_eq!(
            port.consume(&good, now + 1, &mut chain, &mut shards),
            Consumed::Refused(Refused::Replay)
        );
        // a replica message whose entry is garbage installs nothing
        let mut m = b"FS\x00\x00\x00\x00\x01\x00\x03abc".to_vec();
        m.extend_from_slice(&[0u8; 20]);
        let sealed = Seal::new(key, 2).sealed(now, &m);
        assert!(matches!(
            port.consume(&sealed, now, &mut chain, &mut shards),
            Consumed::BadFrame | Consumed::Replica(false)
        ));
    }
}
