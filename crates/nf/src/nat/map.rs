//! The NAT's per-flow state: a flow's mapping and its TCP progress.

use core::net::Ipv4Addr;

use serde::{Deserialize, Serialize};

/// TCP progress, for the timeout.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum NatTcp {
    /// No reply yet.
    Opening,
    /// Both directions seen.
    Established,
    /// FIN or RST seen.
    Closing,
}

impl NatTcp {
    /// The progress after a TCP segment with `flags` in direction `dir`: a
    /// FIN or RST closes; a SYN (without ACK) on a closed mapping opens it
    /// again — a new connection on the same ports, as conntrack reopens one
    /// in TIME_WAIT, which must not keep the short closing timeout; the
    /// first reply establishes it.
    #[inline(always)]
    pub fn after(self, flags: wire::TcpFlags, dir: state::Dir) -> NatTcp {
        use wire::TcpFlags as F;
        if flags.0 & (F::FIN.0 | F::RST.0) != 0 {
            NatTcp::Closing
        } else if self.reopened_by(flags) {
            NatTcp::Opening
        } else if dir == state::Dir::Reply && self == NatTcp::Opening {
            NatTcp::Established
        } else {
            self
        }
    }
}

impl NatTcp {
    /// A SYN without ACK on a closed mapping: a new connection on the same
    /// ports.
    #[inline(always)]
    pub fn reopened_by(self, flags: wire::TcpFlags) -> bool {
        use wire::TcpFlags as F;
        self == NatTcp::Closing && flags.0 & (F::SYN.0 | F::ACK.0) == F::SYN.0
    }
}

/// A mapping (the NAT's per-flow state).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NatMap {
    /// Internal address.
    pub int_addr: Ipv4Addr,
    /// Internal port (ICMP: echo id).
    pub int_port: u16,
    /// Index of the external address in the pool.
    pub ext_idx: u16,
    /// The external address itself: a mapping installed from another node
    /// (a Sirius secondary) keeps its node's address, which may not be in this
    /// NAT's pool (then `ext_idx` means nothing here).
    pub ext_addr: Ipv4Addr,
    /// External port (ICMP: echo id).
    pub ext_port: u16,
    /// IP protocol.
    pub proto: u8,
    /// TCP progress.
    pub tcp: NatTcp,
    /// [`NatMap::INBOUND`], [`NatMap::STATIC`], [`NatMap::HAIRPIN`].
    pub flags: u8,
}

impl NatMap {
    /// The flow was opened from outside (a port forward, or endpoint-
    /// independent filtering): its original direction is translated on
    /// the destination.
    pub const INBOUND: u8 = 1;
    /// The outside endpoint is a port forward's: no port of the pool.
    pub const STATIC: u8 = 2;
    /// An inside host's flow to one of the NAT's own endpoints (a port
    /// forward's, or a mapping's with endpoint-independent filtering): its
    /// source is translated to this mapping's outside endpoint and its
    /// destination to the target's inside one, and its answers the other
    /// way; the target is looked up at each packet.
    pub const HAIRPIN: u8 = 4;

    /// Whether the packets of direction `original` are translated on their
    /// source (inside to outside).
    #[inline(always)]
    pub fn outbound(&self, original: bool) -> bool {
        original != (self.flags & NatMap::INBOUND != 0)
    }
}
