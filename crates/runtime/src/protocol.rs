//! The pool protocol as one node's replication port consumes it, without
//! sockets or threads: a datagram is opened with the pool's key
//! (`pool::auth`), then read as a controller's order or heartbeat, a bulk
//! copy or a replica message, and a copy's entry is installed in the chain's
//! shard of its flow — what the NIC-model thread and the worker do, in one
//! call. For the fuzz target (`fuzz/fuzz_targets/pool.rs`) and the tests.

use std::sync::Arc;

use pool::protocol::{Malformed, Repr};

/// A copy's or a steered frame's port as the node takes it: one with a flag
/// bit set (a replica packet's, a bulk install's, a steered frame's) would
/// read as another kind of packet inside.
pub(crate) fn copy_port(port: u8) -> Option<u8> {
    (port < crate::spill::STEERED).then_some(port)
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
    /// A replica message whose frame does not parse, or whose port is out
    /// of range.
    BadFrame,
    /// A frame steered here by a spilling node (spill-over), and whether it
    /// parses.
    Steered(bool),
    /// Opened, but no message of the protocol.
    Malformed(Malformed),
    /// A message of the protocol that a node's port does not take (an
    /// acknowledgement, an answer).
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
        let msg = match pool::protocol::parse(body) {
            Ok(m) => m,
            Err(e) => return Consumed::Malformed(e),
        };
        match msg {
            Repr::BulkStop => {
                self.bulk.stop();
                Consumed::Control
            }
            Repr::BulkStart { to } => {
                self.bulk.start(to);
                Consumed::Control
            }
            Repr::NewSecondary { to } => {
                self.secondary.set(to);
                Consumed::Control
            }
            Repr::NewPrimary { .. } => Consumed::Control,
            Repr::Heartbeat | Repr::BulkQuery => {
                let _ = self.bulk.status();
                Consumed::Control
            }
            Repr::Install { entry, hash, .. } => {
                let s = chain.shard_of(hash);
                Consumed::Install(chain.install(&mut shards[s], entry, now_ns).is_ok())
            }
            Repr::Copy {
                port, entry, frame, ..
            } => {
                if copy_port(port).is_none() {
                    return Consumed::BadFrame;
                }
                match nf::Packet::new(frame.to_vec(), now_ns, &self.hasher) {
                    Ok(p) => {
                        let s = chain.shard_of(p.hash);
                        Consumed::Replica(chain.install(&mut shards[s], entry, now_ns).is_ok())
                    }
                    Err(_) => Consumed::BadFrame,
                }
            }
            Repr::Steer { port, frame } => Consumed::Steered(
                copy_port(port).is_some()
                    && nf::Packet::new(frame.to_vec(), now_ns, &self.hasher).is_ok(),
            ),
            Repr::Ack { .. } | Repr::Alive | Repr::BulkStatus { .. } => Consumed::Unknown,
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
        let order = &Repr::NewSecondary {
            to: "10.77.0.9:4000".parse().unwrap(),
        }
        .to_vec()[..];
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
        let m = Repr::Copy {
            port: 0,
            seq: 1,
            entry: b"abc",
            frame: &[0u8; 20],
        }
        .to_vec();
        let sealed = Seal::new(key.clone(), 2).sealed(now, &m);
        assert!(matches!(
            port.consume(&sealed, now, &mut chain, &mut shards),
            Consumed::BadFrame | Consumed::Replica(false)
        ));
        // and bytes of no message say why
        let sealed = Seal::new(key.clone(), 3).sealed(now, b"FS\x63");
        assert_eq!(
            port.consume(&sealed, now, &mut chain, &mut shards),
            Consumed::Malformed(pool::protocol::Malformed::Kind(0x63))
        );
    }
}
