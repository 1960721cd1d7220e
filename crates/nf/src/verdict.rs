//! What an NF decides for a packet.

use core::fmt;

/// The outcome of an NF (and of a chain) for one packet.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Verdict {
    /// Pass the packet on.
    Forward,
    /// Drop it; the cause is counted.
    Drop(DropCause),
}

/// Why a packet was dropped. Each cause has its own counter.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DropCause {
    /// The flow table was full and the cap policy refused a new flow.
    TableFull,
    /// A firewall rule denied the connection.
    Policy,
    /// A packet that does not fit the tracked connection's state (e.g. TCP data
    /// before the handshake, a new TCP flow without SYN).
    CtInvalid,
    /// A reply-direction packet with no tracked connection.
    CtNoConnection,
    /// An inbound packet to a NAT address with no mapping.
    NatNoMapping,
    /// No free external port (or ICMP id) in the shard's pool.
    NatPortsExhausted,
    /// No external address keeps this ICMP flow's reply in its RSS bucket.
    NatUnsteerable,
    /// A protocol the NAT cannot translate (not TCP, UDP or ICMP echo).
    NatUnsupported,
    /// The monitor's threshold action is `drop` and the source is over it.
    MonitorThreshold,
    /// An offloading core could not process the packet where it was: it did not
    /// hold the flow's state, or an NF needed shard-local state. A flowshift bug if
    /// ever non-zero (counted rather than lost).
    OffloadState,
    /// The router has no route for the destination.
    NoRoute,
    /// The TTL (IPv6: hop limit) would reach 0 at this router.
    TtlExceeded,
    /// A packet to a load balancer VIP on a port or protocol it does not serve.
    LbNoService,
    /// The service has no healthy backend.
    LbNoBackend,
    /// No free source port (for the reply to come back to this core) in the
    /// shard's pool of the balancer's addresses.
    LbPortsExhausted,
    /// A packet to the balancer's own address, or from a VIP, with no connection.
    LbNoConnection,
    /// An IDS `drop` or `blacklist` rule matched the flow.
    IdsDrop,
    /// The source was blacklisted by an IDS rule.
    IdsBlacklisted,
    /// A replica message from a pool primary whose flow entry could not be
    /// installed (not an entry of this chain, or the table full).
    ReplicaInvalid,
    /// A packet for a pool node's spill node (spill-over) that its socket
    /// refused.
    SpillFailed,
    /// An IPv6 address NPTv6 cannot map: its subnet word is 0xFFFF (RFC 6296
    /// §3.5: 0xFFFF and 0x0000 are the same one's-complement number).
    NptUnmappable,
    /// A packet no UPF session's PDR detects (an unknown TEID or UE address,
    /// or no SDF filter matched).
    UpfNoSession,
    /// A G-PDU whose GTP-U header or inner packet is malformed.
    UpfMalformed,
    /// GTP-U signalling (echo, end marker, error indication) to the UPF: not
    /// user data, not answered by the data path.
    UpfSignalling,
    /// The session's FAR drops the packet.
    UpfFarDrop,
    /// A QER's gate for the packet's direction is closed.
    UpfGateClosed,
    /// Over a QER's maximum bit rate.
    UpfRateLimited,
    /// Taken into a buffering FAR's buffer (sent later, counted by the UPF's
    /// `released`, or `discarded`).
    UpfBuffered,
    /// A buffering FAR's buffer was full.
    UpfBufferFull,
}

impl DropCause {
    /// Every cause (index = `self as usize`).
    pub const ALL: [DropCause; 29] = [
        DropCause::TableFull,
        DropCause::Policy,
        DropCause::CtInvalid,
        DropCause::CtNoConnection,
        DropCause::NatNoMapping,
        DropCause::NatPortsExhausted,
        DropCause::NatUnsteerable,
        DropCause::NatUnsupported,
        DropCause::MonitorThreshold,
        DropCause::OffloadState,
        DropCause::NoRoute,
        DropCause::TtlExceeded,
        DropCause::LbNoService,
        DropCause::LbNoBackend,
        DropCause::LbPortsExhausted,
        DropCause::LbNoConnection,
        DropCause::IdsDrop,
        DropCause::IdsBlacklisted,
        DropCause::ReplicaInvalid,
        DropCause::SpillFailed,
        DropCause::NptUnmappable,
        DropCause::UpfNoSession,
        DropCause::UpfMalformed,
        DropCause::UpfSignalling,
        DropCause::UpfFarDrop,
        DropCause::UpfGateClosed,
        DropCause::UpfRateLimited,
        DropCause::UpfBuffered,
        DropCause::UpfBufferFull,
    ];

    /// Stable snake_case name, as in reports.
    pub const fn name(self) -> &'static str {
        match self {
            DropCause::TableFull => "table_full",
            DropCause::Policy => "policy",
            DropCause::CtInvalid => "ct_invalid",
            DropCause::CtNoConnection => "ct_no_connection",
            DropCause::NatNoMapping => "nat_no_mapping",
            DropCause::NatPortsExhausted => "nat_ports_exhausted",
            DropCause::NatUnsteerable => "nat_unsteerable",
            DropCause::NatUnsupported => "nat_unsupported",
            DropCause::MonitorThreshold => "monitor_threshold",
            DropCause::OffloadState => "offload_state",
            DropCause::NoRoute => "no_route",
            DropCause::TtlExceeded => "ttl_exceeded",
            DropCause::LbNoService => "lb_no_service",
            DropCause::LbNoBackend => "lb_no_backend",
            DropCause::LbPortsExhausted => "lb_ports_exhausted",
            DropCause::LbNoConnection => "lb_no_connection",
            DropCause::IdsDrop => "ids_drop",
            DropCause::IdsBlacklisted => "ids_blacklisted",
            DropCause::ReplicaInvalid => "replica_invalid",
            DropCause::SpillFailed => "spill_failed",
            DropCause::NptUnmappable => "npt_unmappable",
            DropCause::UpfNoSession => "upf_no_session",
            DropCause::UpfMalformed => "upf_malformed",
            DropCause::UpfSignalling => "upf_signalling",
            DropCause::UpfFarDrop => "upf_far_drop",
            DropCause::UpfGateClosed => "upf_gate_closed",
            DropCause::UpfRateLimited => "upf_rate_limited",
            DropCause::UpfBuffered => "upf_buffered",
            DropCause::UpfBufferFull => "upf_buffer_full",
        }
    }

    /// Parses a name (golden tests).
    pub fn from_name(s: &str) -> Option<DropCause> {
        DropCause::ALL.iter().copied().find(|c| c.name() == s)
    }
}

impl fmt::Display for DropCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for (i, c) in DropCause::ALL.iter().enumerate() {
            assert_eq!(*c as usize, i);
            assert_eq!(DropCause::from_name(c.name()), Some(*c));
        }
    }
}
