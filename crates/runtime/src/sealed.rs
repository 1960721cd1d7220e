//! A pool socket's ends of [`pool::auth`]: every datagram it sends sealed
//! with the pool's key, its own sender id and the wall clock, every datagram
//! it receives opened — a forged, changed, stale or replayed one refused and
//! counted by cause, never handed on.

use std::io;
use std::net::{SocketAddr, UdpSocket};

use pool::auth::{Key, Open, Refused, Seal};

/// The wall clock, µs (what the pool's messages are stamped with).
pub(crate) fn now_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// One endpoint: its seal, its opener, a buffer, and what it refused.
#[derive(Debug)]
pub(crate) struct Sealed {
    seal: Seal,
    open: Open,
    buf: Vec<u8>,
    /// Datagrams refused, by cause (in [`Refused::ALL`]'s order).
    pub refused: [u64; 4],
}

impl Sealed {
    /// An endpoint with `key` (none: datagrams pass bare).
    pub fn new(key: Option<&Key>) -> Sealed {
        Sealed {
            seal: Seal::with(key, rand::random()),
            open: Open::new(key, now_us()),
            buf: Vec::with_capacity(2048),
            refused: [0; 4],
        }
    }

    /// Sends `body` on connected non-blocking socket `sock`, waiting while
    /// its send buffer is full (as a blocking socket would): an error only
    /// when the socket refuses it (the peer is gone).
    pub fn send_waiting(&mut self, sock: &UdpSocket, body: &[u8]) -> io::Result<()> {
        self.seal.seal(now_us(), body, &mut self.buf);
        loop {
            match sock.send(&self.buf) {
                Ok(_) => return Ok(()),
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::Interrupted | io::ErrorKind::WouldBlock
                    ) =>
                {
                    std::thread::yield_now();
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Sends `body` to `to` from `sock`.
    pub fn send_to(&mut self, sock: &UdpSocket, body: &[u8], to: SocketAddr) -> io::Result<usize> {
        self.seal.seal(now_us(), body, &mut self.buf);
        sock.send_to(&self.buf, to)
    }

    /// The body of datagram `d`, or `None` (counted).
    pub fn open<'a>(&mut self, d: &'a [u8]) -> Option<&'a [u8]> {
        match self.open.open(now_us(), d) {
            Ok(b) => Some(b),
            Err(e) => {
                self.count(e);
                None
            }
        }
    }

    /// Where the body of datagram `d` lies in it, or `None` (counted).
    pub fn open_range(&mut self, d: &[u8]) -> Option<std::ops::Range<usize>> {
        let body = self.open(d)?;
        let start = body.as_ptr() as usize - d.as_ptr() as usize;
        Some(start..start + body.len())
    }

    fn count(&mut self, e: Refused) {
        let i = Refused::ALL
            .iter()
            .position(|r| *r == e)
            .expect("every cause is listed");
        self.refused[i] += 1;
    }

    /// Datagrams refused, all causes.
    pub fn refused_total(&self) -> u64 {
        self.refused.iter().sum()
    }
}
