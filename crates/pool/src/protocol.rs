//! The pool's messages on the wire: what nodes and the controller say to each
//! other at the nodes' replication ports, one UDP datagram a message (sealed
//! with the pool's key by [`crate::auth`] around these bytes).
//!
//! Two layers, as in smoltcp: [`Message`] is a checked view over a buffer
//! (field accessors, setters on a mutable one), [`Repr`] is what a message
//! means (parsed from a view, emitted into one). Anything a node receives is
//! read through [`parse`]: malformed bytes are an error with its cause, never
//! a panic, and a message parses only from the exact bytes its [`Repr`]
//! emits (no trailing bytes, no unknown kinds, `done` 0 or 1).
//!
//! On the wire: `b"FS"`, a kind byte, then the kind's fields, big-endian:
//!
//! | kind | | fields |
//! | --- | --- | --- |
//! | 1 | [`Repr::Copy`] | port u8, seq u32, entry length u16, entry, frame (the rest) |
//! | 2 | [`Repr::Install`] | seq u32, hash u32, entry length u16, entry |
//! | 3 | [`Repr::Ack`] | seq u32 |
//! | 4 | [`Repr::Heartbeat`] | — |
//! | 5 | [`Repr::Alive`] | — |
//! | 6 | [`Repr::NewSecondary`] | address |
//! | 7 | [`Repr::BulkStart`] | address |
//! | 8 | [`Repr::BulkStop`] | — |
//! | 9 | [`Repr::BulkQuery`] | — |
//! | 10 | [`Repr::BulkStatus`] | epoch u64, done u8, sent u64, address or none |
//! | 11 | [`Repr::Steer`] | port u8, frame (the rest) |
//! | 12 | [`Repr::NewPrimary`] | address |
//!
//! An address is a family byte (4 or 6; 0 for none where allowed), the IP
//! (4 or 16 bytes) and the port (u16).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// The first two bytes of every message.
pub const MAGIC: [u8; 2] = *b"FS";

/// Why bytes are not a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Malformed {
    /// Shorter than its kind's fields.
    #[error("shorter than its fields")]
    Short,
    /// Not `FS` first.
    #[error("no pool magic")]
    Magic,
    /// A kind byte no message has.
    #[error("unknown kind {0}")]
    Kind(u8),
    /// An address family other than 4 or 6 (or 0 where none is allowed).
    #[error("unknown address family {0}")]
    Family(u8),
    /// A flag other than 0 or 1.
    #[error("a flag of value {0}")]
    Flag(u8),
    /// Bytes after the last field.
    #[error("{0} bytes after the message")]
    Trailing(usize),
    /// An entry longer than its length field can say (emitting).
    #[error("an entry of {0} bytes (at most 65535)")]
    TooLong(usize),
}

/// A message's kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// [`Repr::Copy`].
    Copy = 1,
    /// [`Repr::Install`].
    Install = 2,
    /// [`Repr::Ack`].
    Ack = 3,
    /// [`Repr::Heartbeat`].
    Heartbeat = 4,
    /// [`Repr::Alive`].
    Alive = 5,
    /// [`Repr::NewSecondary`].
    NewSecondary = 6,
    /// [`Repr::BulkStart`].
    BulkStart = 7,
    /// [`Repr::BulkStop`].
    BulkStop = 8,
    /// [`Repr::BulkQuery`].
    BulkQuery = 9,
    /// [`Repr::BulkStatus`].
    BulkStatus = 10,
    /// [`Repr::Steer`].
    Steer = 11,
    /// [`Repr::NewPrimary`].
    NewPrimary = 12,
}

impl TryFrom<u8> for Kind {
    type Error = Malformed;
    fn try_from(b: u8) -> Result<Kind, Malformed> {
        Ok(match b {
            1 => Kind::Copy,
            2 => Kind::Install,
            3 => Kind::Ack,
            4 => Kind::Heartbeat,
            5 => Kind::Alive,
            6 => Kind::NewSecondary,
            7 => Kind::BulkStart,
            8 => Kind::BulkStop,
            9 => Kind::BulkQuery,
            10 => Kind::BulkStatus,
            11 => Kind::Steer,
            12 => Kind::NewPrimary,
            k => return Err(Malformed::Kind(k)),
        })
    }
}

/// Field offsets.
mod field {
    pub const KIND: usize = 2;
    pub const BODY: usize = 3;
    // Copy
    pub const COPY_PORT: usize = 3;
    pub const COPY_SEQ: usize = 4;
    pub const COPY_LEN: usize = 8;
    pub const COPY_ENTRY: usize = 10;
    // Install
    pub const INSTALL_SEQ: usize = 3;
    pub const INSTALL_HASH: usize = 7;
    pub const INSTALL_LEN: usize = 11;
    pub const INSTALL_ENTRY: usize = 13;
    // Ack
    pub const ACK_SEQ: usize = 3;
    // BulkStatus
    pub const STATUS_EPOCH: usize = 3;
    pub const STATUS_DONE: usize = 11;
    pub const STATUS_SENT: usize = 12;
    pub const STATUS_ADDR: usize = 20;
    // Steer
    pub const STEER_PORT: usize = 3;
    pub const STEER_FRAME: usize = 4;
}

/// Bytes an address takes from its family byte on (`None`: the family is
/// unknown).
fn addr_len(family: u8) -> Option<usize> {
    match family {
        0 => Some(1),
        4 => Some(1 + 4 + 2),
        6 => Some(1 + 16 + 2),
        _ => None,
    }
}

/// A view of a message in a buffer.
#[derive(Clone, Copy, Debug)]
pub struct Message<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Message<T> {
    /// A view, unchecked: accessors may panic on a buffer that
    /// [`check_len`](Self::check_len) refuses.
    pub const fn new_unchecked(buffer: T) -> Message<T> {
        Message { buffer }
    }

    /// A view of a buffer that holds one whole message.
    pub fn new_checked(buffer: T) -> Result<Message<T>, Malformed> {
        let m = Message::new_unchecked(buffer);
        m.check_len()?;
        Ok(m)
    }

    /// The buffer back.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Checks that the buffer holds exactly one message of a known kind:
    /// after it, every accessor of that kind reads in bounds.
    pub fn check_len(&self) -> Result<(), Malformed> {
        let b = self.buffer.as_ref();
        if b.len() < field::BODY {
            return Err(if b.len() >= 2 && b[..2] != MAGIC {
                Malformed::Magic
            } else {
                Malformed::Short
            });
        }
        if b[..2] != MAGIC {
            return Err(Malformed::Magic);
        }
        let end = match Kind::try_from(b[field::KIND])? {
            Kind::Copy => {
                // the frame is the rest: no trailing bytes to speak of
                need(b, field::COPY_ENTRY)?;
                need(b, field::COPY_ENTRY + usize::from(be16(b, field::COPY_LEN)))?;
                b.len()
            }
            Kind::Install => {
                need(b, field::INSTALL_ENTRY)?;
                field::INSTALL_ENTRY + usize::from(be16(b, field::INSTALL_LEN))
            }
            Kind::Ack => field::ACK_SEQ + 4,
            Kind::Steer => {
                need(b, field::STEER_FRAME)?;
                b.len()
            }
            Kind::Heartbeat | Kind::Alive | Kind::BulkStop | Kind::BulkQuery => field::BODY,
            Kind::NewSecondary | Kind::BulkStart | Kind::NewPrimary => {
                need(b, field::BODY + 1)?;
                match b[field::BODY] {
                    0 => return Err(Malformed::Family(0)),
                    f => field::BODY + addr_len(f).ok_or(Malformed::Family(f))?,
                }
            }
            Kind::BulkStatus => {
                need(b, field::STATUS_ADDR + 1)?;
                match b[field::STATUS_DONE] {
                    0 | 1 => {}
                    f => return Err(Malformed::Flag(f)),
                }
                let f = b[field::STATUS_ADDR];
                field::STATUS_ADDR + addr_len(f).ok_or(Malformed::Family(f))?
            }
        };
        need(b, end)?;
        match b.len() - end {
            0 => Ok(()),
            n => Err(Malformed::Trailing(n)),
        }
    }

    /// The message's kind (checked views only).
    pub fn kind(&self) -> Kind {
        Kind::try_from(self.buffer.as_ref()[field::KIND]).unwrap_or(Kind::Heartbeat)
    }

    /// A copy's or an acknowledgement's or an install's number.
    pub fn seq(&self) -> u32 {
        let at = match self.kind() {
            Kind::Copy => field::COPY_SEQ,
            Kind::Install => field::INSTALL_SEQ,
            _ => field::ACK_SEQ,
        };
        be32(self.buffer.as_ref(), at)
    }

    /// A copy's or a steered frame's port (the one its frame came in by).
    pub fn port(&self) -> u8 {
        self.buffer.as_ref()[field::COPY_PORT]
    }

    /// An install's flow hash.
    pub fn hash(&self) -> u32 {
        be32(self.buffer.as_ref(), field::INSTALL_HASH)
    }

    /// A copy's or an install's entry.
    pub fn entry(&self) -> &[u8] {
        let b = self.buffer.as_ref();
        let (len, at) = match self.kind() {
            Kind::Install => (field::INSTALL_LEN, field::INSTALL_ENTRY),
            _ => (field::COPY_LEN, field::COPY_ENTRY),
        };
        &b[at..at + usize::from(be16(b, len))]
    }

    /// A copy's or a steered frame's frame.
    pub fn frame(&self) -> &[u8] {
        let b = self.buffer.as_ref();
        match self.kind() {
            Kind::Steer => &b[field::STEER_FRAME..],
            _ => &b[field::COPY_ENTRY + usize::from(be16(b, field::COPY_LEN))..],
        }
    }

    /// A status's epoch.
    pub fn epoch(&self) -> u64 {
        be64(self.buffer.as_ref(), field::STATUS_EPOCH)
    }

    /// A status's done flag.
    pub fn done(&self) -> bool {
        self.buffer.as_ref()[field::STATUS_DONE] == 1
    }

    /// A status's count of copies sent.
    pub fn sent(&self) -> u64 {
        be64(self.buffer.as_ref(), field::STATUS_SENT)
    }

    /// The address an order or a status names, if any.
    pub fn addr(&self) -> Option<SocketAddr> {
        let b = self.buffer.as_ref();
        let at = match self.kind() {
            Kind::BulkStatus => field::STATUS_ADDR,
            _ => field::BODY,
        };
        let ip_at = at + 1;
        let (ip, port_at) = match b[at] {
            4 => {
                let o: [u8; 4] = b[ip_at..ip_at + 4].try_into().ok()?;
                (IpAddr::V4(Ipv4Addr::from(o)), ip_at + 4)
            }
            6 => {
                let o: [u8; 16] = b[ip_at..ip_at + 16].try_into().ok()?;
                (IpAddr::V6(Ipv6Addr::from(o)), ip_at + 16)
            }
            _ => return None,
        };
        Some(SocketAddr::new(ip, be16(b, port_at)))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Message<T> {
    fn put(&mut self, at: usize, bytes: &[u8]) {
        self.buffer.as_mut()[at..at + bytes.len()].copy_from_slice(bytes);
    }

    /// Writes the magic and the kind.
    pub fn set_kind(&mut self, k: Kind) {
        self.put(0, &MAGIC);
        self.put(field::KIND, &[k as u8]);
    }

    fn set_addr(&mut self, at: usize, a: Option<SocketAddr>) {
        match a {
            None => self.put(at, &[0]),
            Some(SocketAddr::V4(a)) => {
                self.put(at, &[4]);
                self.put(at + 1, &a.ip().octets());
                self.put(at + 5, &a.port().to_be_bytes());
            }
            Some(SocketAddr::V6(a)) => {
                self.put(at, &[6]);
                self.put(at + 1, &a.ip().octets());
                self.put(at + 17, &a.port().to_be_bytes());
            }
        }
    }
}

fn need(b: &[u8], n: usize) -> Result<(), Malformed> {
    if b.len() < n {
        Err(Malformed::Short)
    } else {
        Ok(())
    }
}

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn be64(b: &[u8], at: usize) -> u64 {
    let mut o = [0u8; 8];
    o.copy_from_slice(&b[at..at + 8]);
    u64::from_be_bytes(o)
}

/// What a message says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Repr<'a> {
    /// Primary → secondary (Sirius ping-pong, §3.2): a frame that made or
    /// changed its flow's state, with the flow's entry; the secondary
    /// installs the entry and sends the frame on.
    Copy {
        /// The port the frame came in by.
        port: u8,
        /// The copy's number (its [`Repr::Ack`] names it).
        seq: u32,
        /// The flow's entry (`nf::Chain::export`).
        entry: &'a [u8],
        /// The frame.
        frame: &'a [u8],
    },
    /// Bulk sync: install a flow's entry, send nothing.
    Install {
        /// The copy's number.
        seq: u32,
        /// The flow's hash (which shard installs it).
        hash: u32,
        /// The entry.
        entry: &'a [u8],
    },
    /// A copy or an install is taken (queued for the core that installs it).
    Ack {
        /// Its number.
        seq: u32,
    },
    /// Are you alive? (the controller's and a pair's heartbeat)
    Heartbeat,
    /// The answer to a heartbeat or an order.
    Alive,
    /// Replicate to this node from now on.
    NewSecondary {
        /// The new secondary's replication port.
        to: SocketAddr,
    },
    /// Watch this node as the primary this one backs up from now on (the
    /// pool re-paired after a failure).
    NewPrimary {
        /// The new primary's replication port.
        to: SocketAddr,
    },
    /// Copy the whole table to this node.
    BulkStart {
        /// The node's replication port.
        to: SocketAddr,
    },
    /// Stop copying.
    BulkStop,
    /// How does the bulk sync go?
    BulkQuery,
    /// The answer to [`Repr::BulkQuery`].
    BulkStatus {
        /// The order's epoch (bumped by every start and stop).
        epoch: u64,
        /// Every core walked its shards and every copy was acknowledged.
        done: bool,
        /// Copies sent in this epoch.
        sent: u64,
        /// Where the copies go (none: no order).
        to: Option<SocketAddr>,
    },
    /// Spill-over (Sirius §3.3.4): a frame of a flow this node processes
    /// for the sender (a new flow the sender passed on over its capacity, or
    /// a later packet of one), as if it came in by `port`.
    Steer {
        /// The port it came in by at the sender.
        port: u8,
        /// The frame.
        frame: &'a [u8],
    },
}

fn addr_bytes(a: Option<SocketAddr>) -> usize {
    match a {
        None => 1,
        Some(SocketAddr::V4(_)) => 7,
        Some(SocketAddr::V6(_)) => 19,
    }
}

impl<'a> Repr<'a> {
    /// What a checked view says.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(m: &Message<&'a T>) -> Result<Repr<'a>, Malformed> {
        m.check_len()?;
        let b: &'a [u8] = <T as AsRef<[u8]>>::as_ref(m.buffer);
        let m = Message::new_unchecked(b);
        Ok(match m.kind() {
            Kind::Copy => {
                let n = usize::from(be16(b, field::COPY_LEN));
                Repr::Copy {
                    port: m.port(),
                    seq: m.seq(),
                    entry: &b[field::COPY_ENTRY..field::COPY_ENTRY + n],
                    frame: &b[field::COPY_ENTRY + n..],
                }
            }
            Kind::Install => {
                let n = usize::from(be16(b, field::INSTALL_LEN));
                Repr::Install {
                    seq: m.seq(),
                    hash: m.hash(),
                    entry: &b[field::INSTALL_ENTRY..field::INSTALL_ENTRY + n],
                }
            }
            Kind::Ack => Repr::Ack { seq: m.seq() },
            Kind::Heartbeat => Repr::Heartbeat,
            Kind::Alive => Repr::Alive,
            Kind::BulkStop => Repr::BulkStop,
            Kind::BulkQuery => Repr::BulkQuery,
            Kind::NewSecondary => Repr::NewSecondary {
                to: m.addr().ok_or(Malformed::Family(0))?,
            },
            Kind::BulkStart => Repr::BulkStart {
                to: m.addr().ok_or(Malformed::Family(0))?,
            },
            Kind::NewPrimary => Repr::NewPrimary {
                to: m.addr().ok_or(Malformed::Family(0))?,
            },
            Kind::BulkStatus => Repr::BulkStatus {
                epoch: m.epoch(),
                done: m.done(),
                sent: m.sent(),
                to: m.addr(),
            },
            Kind::Steer => Repr::Steer {
                port: m.port(),
                frame: &b[field::STEER_FRAME..],
            },
        })
    }

    /// The message's kind.
    pub fn kind(&self) -> Kind {
        match self {
            Repr::Copy { .. } => Kind::Copy,
            Repr::Install { .. } => Kind::Install,
            Repr::Ack { .. } => Kind::Ack,
            Repr::Heartbeat => Kind::Heartbeat,
            Repr::Alive => Kind::Alive,
            Repr::NewSecondary { .. } => Kind::NewSecondary,
            Repr::NewPrimary { .. } => Kind::NewPrimary,
            Repr::BulkStart { .. } => Kind::BulkStart,
            Repr::BulkStop => Kind::BulkStop,
            Repr::BulkQuery => Kind::BulkQuery,
            Repr::BulkStatus { .. } => Kind::BulkStatus,
            Repr::Steer { .. } => Kind::Steer,
        }
    }

    /// Bytes the message takes.
    pub fn buffer_len(&self) -> usize {
        match self {
            Repr::Copy { entry, frame, .. } => field::COPY_ENTRY + entry.len() + frame.len(),
            Repr::Install { entry, .. } => field::INSTALL_ENTRY + entry.len(),
            Repr::Ack { .. } => field::ACK_SEQ + 4,
            Repr::Heartbeat | Repr::Alive | Repr::BulkStop | Repr::BulkQuery => field::BODY,
            Repr::NewSecondary { to } | Repr::BulkStart { to } | Repr::NewPrimary { to } => {
                field::BODY + addr_bytes(Some(*to))
            }
            Repr::BulkStatus { to, .. } => field::STATUS_ADDR + addr_bytes(*to),
            Repr::Steer { frame, .. } => field::STEER_FRAME + frame.len(),
        }
    }

    /// Writes the message into `m`, whose buffer is
    /// [`buffer_len`](Self::buffer_len) long; an entry longer than 65535
    /// bytes is refused.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, m: &mut Message<T>) -> Result<(), Malformed> {
        if m.buffer.as_ref().len() != self.buffer_len() {
            return Err(Malformed::Short);
        }
        let len16 = |e: &[u8]| u16::try_from(e.len()).map_err(|_| Malformed::TooLong(e.len()));
        m.set_kind(self.kind());
        match *self {
            Repr::Copy {
                port,
                seq,
                entry,
                frame,
            } => {
                let n = len16(entry)?;
                m.put(field::COPY_PORT, &[port]);
                m.put(field::COPY_SEQ, &seq.to_be_bytes());
                m.put(field::COPY_LEN, &n.to_be_bytes());
                m.put(field::COPY_ENTRY, entry);
                m.put(field::COPY_ENTRY + entry.len(), frame);
            }
            Repr::Install { seq, hash, entry } => {
                let n = len16(entry)?;
                m.put(field::INSTALL_SEQ, &seq.to_be_bytes());
                m.put(field::INSTALL_HASH, &hash.to_be_bytes());
                m.put(field::INSTALL_LEN, &n.to_be_bytes());
                m.put(field::INSTALL_ENTRY, entry);
            }
            Repr::Ack { seq } => m.put(field::ACK_SEQ, &seq.to_be_bytes()),
            Repr::Heartbeat | Repr::Alive | Repr::BulkStop | Repr::BulkQuery => {}
            Repr::NewSecondary { to } | Repr::BulkStart { to } | Repr::NewPrimary { to } => {
                m.set_addr(field::BODY, Some(to))
            }
            Repr::BulkStatus {
                epoch,
                done,
                sent,
                to,
            } => {
                m.put(field::STATUS_EPOCH, &epoch.to_be_bytes());
                m.put(field::STATUS_DONE, &[u8::from(done)]);
                m.put(field::STATUS_SENT, &sent.to_be_bytes());
                m.set_addr(field::STATUS_ADDR, to);
            }
            Repr::Steer { port, frame } => {
                m.put(field::STEER_PORT, &[port]);
                m.put(field::STEER_FRAME, frame);
            }
        }
        Ok(())
    }

    /// The message in `out` (cleared first).
    pub fn emit_vec(&self, out: &mut Vec<u8>) -> Result<(), Malformed> {
        out.clear();
        out.resize(self.buffer_len(), 0);
        let r = self.emit(&mut Message::new_unchecked(&mut out[..]));
        if r.is_err() {
            out.clear();
        }
        r
    }

    /// The message as bytes (for messages without an entry, which always
    /// emit).
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = Vec::new();
        let _ = self.emit_vec(&mut v);
        v
    }
}

/// The message `d` is.
pub fn parse(d: &[u8]) -> Result<Repr<'_>, Malformed> {
    Repr::parse(&Message::new_unchecked(d))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn addr() -> impl Strategy<Value = SocketAddr> {
        prop_oneof![
            (any::<[u8; 4]>(), any::<u16>())
                .prop_map(|(ip, p)| SocketAddr::new(Ipv4Addr::from(ip).into(), p)),
            (any::<[u8; 16]>(), any::<u16>())
                .prop_map(|(ip, p)| SocketAddr::new(Ipv6Addr::from(ip).into(), p)),
        ]
    }

    /// Owned stand-ins for the borrowed fields.
    #[derive(Clone, Debug)]
    enum Owned {
        Copy(u8, u32, Vec<u8>, Vec<u8>),
        Install(u32, u32, Vec<u8>),
        Steer(u8, Vec<u8>),
        Plain(Repr<'static>),
    }

    fn owned() -> impl Strategy<Value = Owned> {
        let bytes = |n| proptest::collection::vec(any::<u8>(), 0..n);
        prop_oneof![
            (any::<u8>(), any::<u32>(), bytes(300), bytes(300))
                .prop_map(|(p, s, e, f)| Owned::Copy(p, s, e, f)),
            (any::<u32>(), any::<u32>(), bytes(300)).prop_map(|(s, h, e)| Owned::Install(s, h, e)),
            (any::<u8>(), bytes(300)).prop_map(|(p, f)| Owned::Steer(p, f)),
            any::<u32>().prop_map(|seq| Owned::Plain(Repr::Ack { seq })),
            Just(Owned::Plain(Repr::Heartbeat)),
            Just(Owned::Plain(Repr::Alive)),
            Just(Owned::Plain(Repr::BulkStop)),
            Just(Owned::Plain(Repr::BulkQuery)),
            addr().prop_map(|to| Owned::Plain(Repr::NewSecondary { to })),
            addr().prop_map(|to| Owned::Plain(Repr::BulkStart { to })),
            addr().prop_map(|to| Owned::Plain(Repr::NewPrimary { to })),
            (
                any::<u64>(),
                any::<bool>(),
                any::<u64>(),
                proptest::option::of(addr())
            )
                .prop_map(|(epoch, done, sent, to)| Owned::Plain(Repr::BulkStatus {
                    epoch,
                    done,
                    sent,
                    to
                })),
        ]
    }

    fn repr(o: &Owned) -> Repr<'_> {
        match o {
            Owned::Copy(port, seq, entry, frame) => Repr::Copy {
                port: *port,
                seq: *seq,
                entry,
                frame,
            },
            Owned::Install(seq, hash, entry) => Repr::Install {
                seq: *seq,
                hash: *hash,
                entry,
            },
            Owned::Steer(port, frame) => Repr::Steer { port: *port, frame },
            Owned::Plain(r) => *r,
        }
    }

    proptest! {
        #[test]
        fn every_message_parses_to_what_was_emitted(o in owned()) {
            let r = repr(&o);
            let mut v = Vec::new();
            r.emit_vec(&mut v).unwrap();
            prop_assert_eq!(v.len(), r.buffer_len());
            prop_assert_eq!(parse(&v), Ok(r));
            let m = Message::new_checked(&v[..]).unwrap();
            prop_assert_eq!(m.kind(), r.kind());
        }

        #[test]
        fn a_cut_or_lengthened_message_is_refused(o in owned(), cut in 1usize..8, extra in 1usize..4) {
            let r = repr(&o);
            let v = {
                let mut v = Vec::new();
                r.emit_vec(&mut v).unwrap();
                v
            };
            // a copy's frame is the rest: cutting into it or adding to it
            // is another frame, the same kind of message
            if !matches!(r, Repr::Copy { .. } | Repr::Steer { .. }) {
                let short = &v[..v.len().saturating_sub(cut)];
                prop_assert!(parse(short).is_err());
                let mut long = v.clone();
                long.resize(long.len() + extra, 0);
                prop_assert_eq!(parse(&long), Err(Malformed::Trailing(extra)));
            }
        }

        #[test]
        fn any_bytes_parse_or_are_refused_and_what_parses_emits_the_same_bytes(
            d in proptest::collection::vec(any::<u8>(), 0..64),
            kind in 0u8..14,
        ) {
            let mut d = d;
            // often a real header, so the fields behind it are reached
            if d.len() >= 3 && d[0] % 2 == 0 {
                d[0] = b'F';
                d[1] = b'S';
                d[2] = kind;
            }
            if let Ok(r) = parse(&d) {
                let mut v = Vec::new();
                r.emit_vec(&mut v).unwrap();
                prop_assert_eq!(v, d);
            }
        }
    }

    #[test]
    fn malformed_messages_say_why() {
        assert_eq!(parse(b""), Err(Malformed::Short));
        assert_eq!(parse(b"XY\x04"), Err(Malformed::Magic));
        assert_eq!(parse(b"FS\x63"), Err(Malformed::Kind(0x63)));
        assert_eq!(parse(b"FS\x06\x05"), Err(Malformed::Family(5)));
        assert_eq!(parse(b"FS\x06\x00"), Err(Malformed::Family(0)));
        assert_eq!(parse(b"FS\x04!"), Err(Malformed::Trailing(1)));
        let mut status = Repr::BulkStatus {
            epoch: 3,
            done: true,
            sent: 9,
            to: None,
        }
        .to_vec();
        status[11] = 2;
        assert_eq!(parse(&status), Err(Malformed::Flag(2)));
        // a copy whose entry runs past the end
        assert_eq!(
            parse(b"FS\x01\x00\x00\x00\x00\x07\x00\x09abc"),
            Err(Malformed::Short)
        );
    }

    #[test]
    fn an_entry_too_long_for_its_field_is_refused_not_cut() {
        let entry = vec![0u8; 70_000];
        let r = Repr::Install {
            seq: 1,
            hash: 2,
            entry: &entry,
        };
        let mut v = vec![1, 2, 3];
        assert_eq!(r.emit_vec(&mut v), Err(Malformed::TooLong(70_000)));
        assert!(v.is_empty());
    }

    #[test]
    fn a_view_reads_the_fields_in_place() {
        let r = Repr::Copy {
            port: 1,
            seq: 0xdead_beef,
            entry: b"entry",
            frame: b"frame!",
        };
        let v = r.to_vec();
        assert_eq!(&v[..3], b"FS\x01");
        let m = Message::new_checked(&v[..]).unwrap();
        assert_eq!(
            (m.port(), m.seq(), m.entry(), m.frame()),
            (1, 0xdead_beef, &b"entry"[..], &b"frame!"[..])
        );
        let to: SocketAddr = "10.77.0.9:4000".parse().unwrap();
        let v = Repr::NewSecondary { to }.to_vec();
        assert_eq!(v, b"FS\x06\x04\x0a\x4d\x00\x09\x0f\xa0");
        assert_eq!(Message::new_checked(&v[..]).unwrap().addr(), Some(to));
    }
}
