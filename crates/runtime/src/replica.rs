//! A pool node's replication link (Sirius ping-pong, §3.2): a packet that
//! creates or changes its flow's state leaves not here but to the flow's
//! secondary, together with the flow's entry; the secondary's NIC-model thread
//! steers the message to the core that owns the flow's shard, like any frame,
//! and that core installs the entry and sends the packet out. So a packet
//! leaves only once both nodes hold the state it made.
//!
//! The same port answers a pool controller's heartbeats ([`HEARTBEAT`]).
//!
//! On the wire (one UDP datagram): `b"FS"`, the port the frame came in by, the
//! entry's length (u16, big-endian), the entry (`nf::Chain::export`), the
//! frame. Inside the secondary, the message travels as a packet of the frame
//! with the entry appended and [`REPLICA`] set in its port, so the rings, the
//! shard moves and the hand-overs carry it as they carry frames.

use std::io;
use std::net::{SocketAddr, UdpSocket};

/// Set in a packet's port: the packet is a replica message (its entry after
/// the frame, its length in the last two bytes).
pub(crate) const REPLICA: u8 = 0x80;

const MAGIC: [u8; 2] = *b"FS";

/// Why a datagram is not a replica message.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum BadMessage {
    Short,
    Magic,
    Length,
}

/// A datagram: `port`, `entry` and `frame`.
pub(crate) fn encode(port: u8, entry: &[u8], frame: &[u8], out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(&MAGIC);
    out.push(port);
    out.extend_from_slice(&(entry.len() as u16).to_be_bytes());
    out.extend_from_slice(entry);
    out.extend_from_slice(frame);
}

/// A datagram's (port, entry, frame).
pub(crate) fn decode(d: &[u8]) -> Result<(u8, &[u8], &[u8]), BadMessage> {
    if d.len() < 5 {
        return Err(BadMessage::Short);
    }
    if d[..2] != MAGIC {
        return Err(BadMessage::Magic);
    }
    let port = d[2];
    let n = usize::from(u16::from_be_bytes([d[3], d[4]]));
    if d.len() < 5 + n || port & REPLICA != 0 {
        return Err(BadMessage::Length);
    }
    Ok((port, &d[5..5 + n], &d[5 + n..]))
}

/// Appends `entry` and its length to a packet's frame.
pub(crate) fn append_entry(data: &mut Vec<u8>, entry: &[u8]) {
    data.extend_from_slice(entry);
    data.extend_from_slice(&(entry.len() as u16).to_be_bytes());
}

/// Takes the entry [`append_entry`] put after the frame off again.
pub(crate) fn take_entry(data: &mut Vec<u8>) -> Vec<u8> {
    let len = data.len();
    let n = usize::from(u16::from_be_bytes([data[len - 2], data[len - 1]]));
    let entry = data[len - 2 - n..len - 2].to_vec();
    data.truncate(len - 2 - n);
    entry
}

/// A core's end of the link to its node's secondary.
pub(crate) struct ReplicaTx {
    sock: UdpSocket,
    buf: Vec<u8>,
    /// Messages sent.
    pub sent: u64,
    /// Messages the socket refused (the secondary is gone): their packets
    /// go out from this node, their state on it alone.
    pub failed: u64,
}

impl ReplicaTx {
    /// A socket sending to `secondary`.
    pub fn open(secondary: SocketAddr) -> io::Result<ReplicaTx> {
        let any: SocketAddr = if secondary.is_ipv4() {
            ([0, 0, 0, 0], 0).into()
        } else {
            (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
        };
        let sock = UdpSocket::bind(any)?;
        sock.connect(secondary)?;
        Ok(ReplicaTx {
            sock,
            buf: Vec::with_capacity(2048),
            sent: 0,
            failed: 0,
        })
    }

    /// Sends a packet that came in by `port` with its flow's `entry`; false
    /// when the socket refused it.
    pub fn send(&mut self, port: u8, entry: &[u8], frame: &[u8]) -> bool {
        encode(port, entry, frame, &mut self.buf);
        loop {
            match self.sock.send(&self.buf) {
                Ok(_) => {
                    self.sent += 1;
                    return true;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => {
                    self.failed += 1;
                    return false;
                }
            }
        }
    }
}

/// A pool controller's heartbeat: the node's NIC model answers [`ALIVE`] to
/// its sender, so a node whose data path stops (killed, hung) stops answering.
pub const HEARTBEAT: &[u8] = b"FSHB";
/// The answer to a [`HEARTBEAT`].
pub const ALIVE: &[u8] = b"FSOK";

/// The NIC model's end: copies from this node's primaries, and heartbeats.
pub(crate) struct ReplicaRx {
    sock: UdpSocket,
}

impl ReplicaRx {
    /// Listens at `at`.
    pub fn bind(at: SocketAddr) -> io::Result<ReplicaRx> {
        let sock = UdpSocket::bind(at)?;
        sock.set_nonblocking(true)?;
        Ok(ReplicaRx { sock })
    }

    /// Answers a heartbeat from `to` (a lost answer is a missed beat).
    pub fn alive(&self, to: SocketAddr) {
        let _ = self.sock.send_to(ALIVE, to);
    }

    /// The next waiting datagram, in `buf`, and its sender, if any.
    pub fn recv<'a>(&self, buf: &'a mut [u8]) -> io::Result<Option<(&'a [u8], SocketAddr)>> {
        match self.sock.recv_from(buf) {
            Ok((n, from)) => Ok(Some((&buf[..n], from))),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                ) =>
            {
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_decodes_to_what_was_encoded_and_garbage_is_refused() {
        let mut d = Vec::new();
        encode(1, b"entry", b"frame bytes", &mut d);
        assert_eq!(decode(&d), Ok((1, &b"entry"[..], &b"frame bytes"[..])));
        encode(0, b"", b"f", &mut d);
        assert_eq!(decode(&d), Ok((0, &b""[..], &b"f"[..])));
        assert_eq!(decode(b"FS\x01"), Err(BadMessage::Short));
        assert_eq!(decode(b"XX\x01\x00\x00"), Err(BadMessage::Magic));
        assert_eq!(decode(b"FS\x01\x00\x09abc"), Err(BadMessage::Length));
        assert_eq!(decode(b"FS\x81\x00\x00"), Err(BadMessage::Length));
    }

    #[test]
    fn an_entry_appended_to_a_frame_comes_off_whole() {
        let mut data = b"frame".to_vec();
        append_entry(&mut data, b"the entry");
        assert_eq!(take_entry(&mut data), b"the entry");
        assert_eq!(data, b"frame");
        append_entry(&mut data, b"");
        assert_eq!(take_entry(&mut data), b"");
        assert_eq!(data, b"frame");
    }
}
