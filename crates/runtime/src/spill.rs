//! A working core's end of moving a tenant's connections to other nodes
//! without moving state (Sirius §3.3; the rules are `pool::spill`, pure):
//!
//! - **Spill-over** (§3.3.4): a new TCP connection to one of the spilling
//!   tenants' addresses, arriving on the first interface, that this core has
//!   no room for goes to the spill node instead of through the chain; a later
//!   packet of a tenant's connection that finds no state here goes there too
//!   while the spill lingers.
//! - **Split tenants** (§3.3.3): every packet of a split tenant's connection
//!   whose hash falls in another part's range goes to that part's node.
//!
//! Either way the frame travels as a [`Repr::Steer`] message over the sync
//! network, and the other node's NIC model takes it in as if it came in by
//! that port: its chain makes the connection's state there, its NAT its own
//! mapping, so the replies come back to it.

use std::io;
use std::net::{IpAddr, UdpSocket};

use pool::protocol::Repr;
use pool::spill::{part_of, Place, Spill};

/// Set in a packet's port by the NIC model for a frame another node steered
/// here: it is served here, never steered on (a hop at most, whatever the
/// nodes' configs say); the worker clears it before the chain.
pub(crate) const STEERED: u8 = 0x20;

/// The window over which new connections are counted against the capacity.
const WINDOW_NS: u64 = 100_000_000;

/// Where a packet is steered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Target {
    /// The spill node.
    Spill,
    /// Split tenant `t`'s part `k`.
    Part(usize, u16),
}

/// Spill-over's rule, its tenants and its node.
struct SpillOver {
    rule: Spill,
    vips: Vec<IpAddr>,
    sock: UdpSocket,
}

/// A split tenant: its address, this node's part, a socket per part (none
/// for this node's).
struct Split {
    vip: IpAddr,
    local: u16,
    parts: Vec<Option<UdpSocket>>,
}

/// A core's steering of tenants' connections to other nodes.
pub(crate) struct SpillTx {
    sealed: crate::sealed::Sealed,
    spill: Option<SpillOver>,
    splits: Vec<Split>,
    buf: Vec<u8>,
    /// Packets steered to other nodes, and those a socket refused (dropped,
    /// counted).
    pub steered: u64,
    pub failed: u64,
}

impl SpillTx {
    /// One of `cores` cores' share of `spill` and its steering of `splits`;
    /// none when there is neither.
    pub fn open(
        spill: Option<&runspec::SpillTo>,
        splits: &[runspec::SplitTenant],
        cores: usize,
        key: Option<&pool::auth::Key>,
    ) -> io::Result<Option<SpillTx>> {
        if spill.is_none() && splits.is_empty() {
            return Ok(None);
        }
        let spill = match spill {
            Some(cfg) => {
                // (at least one a window per core once the capacity is not 0)
                let per_window = u64::from(cfg.capacity) * WINDOW_NS;
                let budget = per_window.div_ceil(1_000_000_000 * cores.max(1) as u64);
                Some(SpillOver {
                    rule: Spill::new(
                        u32::try_from(budget).unwrap_or(u32::MAX),
                        WINDOW_NS,
                        u64::from(cfg.linger_ms) * 1_000_000,
                    ),
                    vips: cfg.vips.clone(),
                    sock: netio::udp::connected(cfg.to)?,
                })
            }
            None => None,
        };
        let splits = splits
            .iter()
            .map(|t| {
                let parts = t
                    .parts
                    .iter()
                    .enumerate()
                    .map(|(k, a)| {
                        if k == usize::from(t.local) {
                            Ok(None)
                        } else {
                            netio::udp::connected(*a).map(Some)
                        }
                    })
                    .collect::<io::Result<Vec<_>>>()?;
                Ok(Split {
                    vip: t.vip,
                    local: t.local,
                    parts,
                })
            })
            .collect::<io::Result<Vec<_>>>()?;
        Ok(Some(SpillTx {
            sealed: crate::sealed::Sealed::new(key),
            spill,
            splits,
            buf: Vec::with_capacity(2048),
            steered: 0,
            failed: 0,
        }))
    }

    /// New connections spilled.
    pub fn spilled(&self) -> u64 {
        self.spill.as_ref().map_or(0, |s| s.rule.spilled)
    }

    /// At `now`, where `p` goes if not through this node's chain: a packet
    /// of a split tenant's connection in another part's range; or a
    /// spilling tenant's that has no state here (`held` says whether it
    /// has, asked only of those that may go) and opens a connection this
    /// core has no room for, or follows a spilled one. Only TCP packets in
    /// by the first interface are steered.
    pub fn away(
        &mut self,
        p: &nf::Packet,
        now: u64,
        held: impl FnOnce() -> bool,
    ) -> Option<Target> {
        if p.port != 0 || p.info.tuple.proto != 6 {
            return None;
        }
        let dst = p.info.tuple.dst;
        if let Some(t) = self.splits.iter().position(|s| s.vip == dst) {
            let s = &self.splits[t];
            let k = part_of(p.hash, s.parts.len() as u16);
            return (k != s.local).then_some(Target::Part(t, k));
        }
        let sp = self.spill.as_mut()?;
        if !sp.vips.contains(&dst) {
            return None;
        }
        let syn = match p.info.l4 {
            wire::L4Info::Tcp { flags } => flags.0 & 0x12 == 0x02,
            _ => false,
        };
        if (!syn && !sp.rule.active(now)) || held() {
            return None;
        }
        let place = if syn {
            sp.rule.on_new_flow(now)
        } else {
            sp.rule.on_stateless(now)
        };
        (place == Place::Away).then_some(Target::Spill)
    }

    /// Sends `p`'s frame to `to`: true if the socket took it.
    pub fn steer(&mut self, p: &nf::Packet, to: Target) -> bool {
        let sock = match to {
            Target::Spill => self.spill.as_ref().map(|s| &s.sock),
            Target::Part(t, k) => self.splits[t].parts[usize::from(k)].as_ref(),
        };
        let Some(sock) = sock else {
            self.failed += 1;
            return false;
        };
        let m = Repr::Steer {
            port: p.port,
            frame: &p.data,
        };
        if m.emit_vec(&mut self.buf).is_err() {
            self.failed += 1;
            return false;
        }
        if self.sealed.send_waiting(sock, &self.buf).is_err() {
            self.failed += 1;
            return false;
        }
        self.steered += 1;
        true
    }
}
