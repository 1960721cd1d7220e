//! Why a packet could not be parsed, or steered as its flow's: one small
//! `Copy` value per cause, so callers keep a counter per cause instead of a
//! log line per packet.

use core::fmt;

/// The cause of a parse failure.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Malformed {
    /// The buffer ends before a header or a length field says it should.
    Truncated,
    /// An ethertype flowshift does not handle (ARP, MPLS, …): not an error of the
    /// sender, but the packet cannot be steered by flow.
    UnknownEthertype,
    /// More than one VLAN tag (QinQ); flowshift handles at most one 802.1Q tag.
    VlanStack,
    /// The IP version nibble does not match the ethertype.
    BadVersion,
    /// IPv4 header length below 5 words.
    BadIhl,
    /// IPv4 total length smaller than the header, or IPv6 payload length past the buffer.
    BadTotalLength,
    /// An IP fragment with no way to its flow: an IPv6 fragment, or an IPv4
    /// one where nothing matches fragments to their first (kernel steering).
    Fragment,
    /// More IPv6 extension headers than the walk allows, or a malformed one.
    BadExtensionHeader,
    /// TCP data offset below 5 words or past the segment.
    BadTcpDataOffset,
    /// UDP length field below 8 or past the IP payload.
    BadUdpLength,
    /// An IPv4 fragment overlapping bytes of its datagram already seen
    /// ([`crate::fragments`]).
    FragmentOverlap,
    /// An IPv4 fragment whose datagram's first fragment did not come in time.
    FragmentTimeout,
    /// An IPv4 fragment beyond the bounds of the fragment table.
    FragmentLimit,
}

impl Malformed {
    /// Every cause, in a fixed order (index = `self as usize`).
    pub const ALL: [Malformed; 13] = [
        Malformed::Truncated,
        Malformed::UnknownEthertype,
        Malformed::VlanStack,
        Malformed::BadVersion,
        Malformed::BadIhl,
        Malformed::BadTotalLength,
        Malformed::Fragment,
        Malformed::BadExtensionHeader,
        Malformed::BadTcpDataOffset,
        Malformed::BadUdpLength,
        Malformed::FragmentOverlap,
        Malformed::FragmentTimeout,
        Malformed::FragmentLimit,
    ];

    /// A stable snake_case name, used as a counter name in reports and JSON.
    pub const fn name(self) -> &'static str {
        match self {
            Malformed::Truncated => "truncated",
            Malformed::UnknownEthertype => "unknown_ethertype",
            Malformed::VlanStack => "vlan_stack",
            Malformed::BadVersion => "bad_version",
            Malformed::BadIhl => "bad_ihl",
            Malformed::BadTotalLength => "bad_total_length",
            Malformed::Fragment => "fragment",
            Malformed::BadExtensionHeader => "bad_extension_header",
            Malformed::BadTcpDataOffset => "bad_tcp_data_offset",
            Malformed::BadUdpLength => "bad_udp_length",
            Malformed::FragmentOverlap => "fragment_overlap",
            Malformed::FragmentTimeout => "fragment_timeout",
            Malformed::FragmentLimit => "fragment_limit",
        }
    }
}

impl fmt::Display for Malformed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::error::Error for Malformed {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_is_indexed_by_discriminant() {
        for (i, m) in Malformed::ALL.iter().enumerate() {
            assert_eq!(*m as usize, i, "{m}");
        }
    }
}
