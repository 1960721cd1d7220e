//! A packet on its way through a chain: its bytes and its metadata.

use state::{Dir, EntryId};
use steer::RssHasher;
use wire::{Malformed, PacketInfo};

/// A packet and the metadata the data path attaches to it.
#[derive(Clone, Debug)]
pub struct Packet {
    /// The frame (no FCS).
    pub data: Vec<u8>,
    /// Offsets and 5-tuple from the single parse; NFs that rewrite headers keep
    /// `info.tuple` up to date.
    pub info: PacketInfo,
    /// RSS hash of the steering fields, computed once by the NIC model.
    pub hash: u32,
    /// Arrival time (ns) at the NIC model.
    pub ts_ns: u64,
    /// The flow entry, set by the single lookup before the chain.
    pub entry: Option<EntryId>,
    /// Direction relative to the flow entry.
    pub dir: Dir,
    /// The port (interface) it arrived on: 0 for a replayed trace; with
    /// interfaces, the index of the interface in `--iface`.
    pub port: u8,
    /// It leaves by the interface it arrived on (a NAT hairpinning it back
    /// inside), not the next one.
    pub hairpin: bool,
}

impl Packet {
    /// Parses `data` and computes its RSS hash. A malformed frame comes back with
    /// its cause, to be counted.
    pub fn new(
        data: Vec<u8>,
        ts_ns: u64,
        hasher: &RssHasher,
    ) -> Result<Packet, (Vec<u8>, Malformed)> {
        let info = wire::parse(&data);
        Packet::parsed(data, info, ts_ns, hasher)
    }

    /// [`Packet::new`], with IPv4 fragments parsed too
    /// ([`wire::parse_fragmentable`]): for the NIC model, which gives a later
    /// fragment its datagram's ports and hashes it again before steering it
    /// ([`wire::fragments`]).
    pub fn new_fragmentable(
        data: Vec<u8>,
        ts_ns: u64,
        hasher: &RssHasher,
    ) -> Result<Packet, (Vec<u8>, Malformed)> {
        let info = wire::parse_fragmentable(&data);
        Packet::parsed(data, info, ts_ns, hasher)
    }

    #[inline(always)]
    fn parsed(
        data: Vec<u8>,
        info: Result<PacketInfo, Malformed>,
        ts_ns: u64,
        hasher: &RssHasher,
    ) -> Result<Packet, (Vec<u8>, Malformed)> {
        match info {
            Ok(info) => Ok(Packet {
                hash: hasher.hash_frame(&info.tuple, info.payload(&data)),
                data,
                info,
                ts_ns,
                entry: None,
                dir: Dir::Original,
                port: 0,
                hairpin: false,
            }),
            Err(m) => Err((data, m)),
        }
    }

    /// The L4 payload.
    pub fn payload(&self) -> &[u8] {
        self.info.payload(&self.data)
    }

    /// The IP packet (from the IP header to its end).
    pub fn l3_mut(&mut self) -> &mut [u8] {
        let (s, e) = (self.info.l3_offset as usize, self.info.l3_end as usize);
        &mut self.data[s..e]
    }

    /// The L4 segment (from the L4 header to the end of the IP packet).
    pub fn l4_mut(&mut self) -> &mut [u8] {
        let (s, e) = (self.info.l4_offset as usize, self.info.l3_end as usize);
        &mut self.data[s..e]
    }
}
#[cfg(test)]
mod tests {
    /// A burst's packets are walked one after another: their metadata stays
    /// in 72 bytes and a packet in 120 (a packet in two cache lines at most).
    #[test]
    fn a_packet_stays_within_120_bytes() {
        assert!(core::mem::size_of::<wire::PacketInfo>() <= 72);
        assert!(core::mem::size_of::<super::Packet>() <= 120);
    }
}
