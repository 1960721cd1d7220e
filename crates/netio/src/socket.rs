//! `AF_PACKET` raw sockets: every frame an interface receives, whole (Ethernet
//! header included), and frames sent out of it as they are.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// Why a socket could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum SocketError {
    /// No such interface.
    #[error("interface `{0}`: no such interface (see `ip link`)")]
    NoInterface(String),
    /// The system call failed.
    #[error("interface `{iface}`: {what}: {source}")]
    Sys {
        /// The interface.
        iface: String,
        /// What was being done.
        what: &'static str,
        /// The error.
        source: io::Error,
    },
}

/// `PACKET_IGNORE_OUTGOING` (Linux ≥ 4.20): do not deliver this socket the
/// frames sent out of its interface.
const PACKET_IGNORE_OUTGOING: libc::c_int = 23;
/// Largest frame received (jumbo frames included).
pub const MAX_FRAME: usize = 9216 + 18;

/// An `AF_PACKET` socket bound to one interface.
#[derive(Debug)]
pub struct PacketSocket {
    fd: OwnedFd,
    iface: String,
    ifindex: i32,
}

impl PacketSocket {
    /// Opens a non-blocking socket receiving every frame of `iface` (its own
    /// transmissions excluded) and sending out of it.
    pub fn open(iface: &str) -> Result<PacketSocket, SocketError> {
        PacketSocket::open_proto(iface, libc::ETH_P_ALL as u16)
    }

    /// Opens a socket that only sends out of `iface` (it receives nothing).
    pub fn open_tx(iface: &str) -> Result<PacketSocket, SocketError> {
        PacketSocket::open_proto(iface, 0)
    }

    fn open_proto(iface: &str, proto: u16) -> Result<PacketSocket, SocketError> {
        let sys = |what, source| SocketError::Sys {
            iface: iface.to_string(),
            what,
            source,
        };
        let name = CString::new(iface).map_err(|_| SocketError::NoInterface(iface.into()))?;
        // SAFETY: `name` is a valid NUL-terminated string for the call.
        let ifindex = unsafe { libc::if_nametoindex(name.as_ptr()) } as i32;
        if ifindex == 0 {
            return Err(SocketError::NoInterface(iface.into()));
        }
        let proto = proto.to_be();
        // SAFETY: plain system call; the result is checked.
        let raw = unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                libc::c_int::from(proto),
            )
        };
        if raw < 0 {
            return Err(sys(
                "socket(AF_PACKET) (needs CAP_NET_RAW)",
                io::Error::last_os_error(),
            ));
        }
        // SAFETY: `raw` is a descriptor just returned by socket(2), owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: sockaddr_ll is plain old data; all-zero is a valid value.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = proto;
        sll.sll_ifindex = ifindex;
        // SAFETY: `sll` is a valid sockaddr_ll and the length says so.
        let r = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&sll as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if r < 0 {
            return Err(sys("bind", io::Error::last_os_error()));
        }
        set_int(fd.as_raw_fd(), libc::SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
            .map_err(|e| sys("PACKET_IGNORE_OUTGOING (Linux 4.20 or later)", e))?;
        if proto != 0 {
            // room for bursts while the NIC-model thread is descheduled
            let size = 8 << 20;
            let _ = set_int(fd.as_raw_fd(), libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, size)
                .or_else(|_| set_int(fd.as_raw_fd(), libc::SOL_SOCKET, libc::SO_RCVBUF, size));
        }
        Ok(PacketSocket {
            fd,
            iface: iface.into(),
            ifindex,
        })
    }

    /// Joins fanout group `group` of its interface, steered by `program` (a
    /// socket filter whose result is the index of the group's socket that gets
    /// the frame, modulo their count; sockets are indexed in joining order).
    pub fn join_fanout(&self, group: u16, program: &crate::bpf::Program) -> io::Result<()> {
        const PACKET_FANOUT: libc::c_int = 18;
        const PACKET_FANOUT_EBPF: libc::c_int = 7;
        const PACKET_FANOUT_DATA: libc::c_int = 22;
        // the group ignores this host's own transmissions where the kernel can
        // (Linux 6.x); `recv` skips them anyway
        const FLAG_IGNORE_OUTGOING: libc::c_int = 0x4000;
        let arg: libc::c_int = libc::c_int::from(group) | (PACKET_FANOUT_EBPF << 16);
        let set = |opt, v| set_int(self.fd.as_raw_fd(), libc::SOL_PACKET, opt, v);
        set(PACKET_FANOUT, arg | (FLAG_IGNORE_OUTGOING << 16))
            .or_else(|_| set(PACKET_FANOUT, arg))?;
        set(PACKET_FANOUT_DATA, program.fd())
    }

    /// Frames the kernel dropped for this socket since the last call (its
    /// receive buffer was full): they never reached flowshift, but they count.
    pub fn take_drops(&self) -> io::Result<u64> {
        // SAFETY: tpacket_stats is plain old data; all-zero is a valid value.
        let mut st: libc::tpacket_stats = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::tpacket_stats>() as libc::socklen_t;
        // SAFETY: `st` and `len` are valid for writes of the sizes given.
        let r = unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_PACKET,
                libc::PACKET_STATISTICS,
                (&mut st as *mut libc::tpacket_stats).cast(),
                &mut len,
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(u64::from(st.tp_drops))
    }

    /// The interface's name.
    pub fn iface(&self) -> &str {
        &self.iface
    }

    /// The interface's index.
    pub fn ifindex(&self) -> i32 {
        self.ifindex
    }

    /// Receives one frame into `buf` (resized to it); `Ok(false)` when none is
    /// waiting. Frames this host sent out of the interface are skipped.
    pub fn recv(&self, buf: &mut Vec<u8>) -> io::Result<bool> {
        loop {
            buf.resize(MAX_FRAME, 0);
            // SAFETY: sockaddr_ll is plain old data; all-zero is a valid value.
            let mut from: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
            let mut len = std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t;
            // SAFETY: `buf` has MAX_FRAME writable bytes and `from`/`len` are valid
            // for writes; the kernel writes at most that many.
            let n = unsafe {
                libc::recvfrom(
                    self.fd.as_raw_fd(),
                    buf.as_mut_ptr().cast(),
                    MAX_FRAME,
                    libc::MSG_TRUNC,
                    (&mut from as *mut libc::sockaddr_ll).cast(),
                    &mut len,
                )
            };
            if n < 0 {
                let e = io::Error::last_os_error();
                buf.clear();
                return match e.kind() {
                    io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(false),
                    _ => Err(e),
                };
            }
            if from.sll_pkttype == libc::PACKET_OUTGOING {
                continue;
            }
            // MSG_TRUNC returns the frame's real length: a longer one was cut
            buf.truncate((n as usize).min(MAX_FRAME));
            return Ok(true);
        }
    }

    /// Sends one frame out of the interface, as it is.
    pub fn send(&self, frame: &[u8]) -> io::Result<()> {
        loop {
            // SAFETY: `frame` is a valid readable slice for the call.
            let n =
                unsafe { libc::send(self.fd.as_raw_fd(), frame.as_ptr().cast(), frame.len(), 0) };
            if n >= 0 {
                return Ok(());
            }
            let e = io::Error::last_os_error();
            match e.kind() {
                // the interface's queue is full: wait for room, as a NIC's TX would
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => std::thread::yield_now(),
                _ => return Err(e),
            }
        }
    }
}

/// `setsockopt(fd, level, opt, &v)` for an `int` option.
fn set_int(fd: RawFd, level: libc::c_int, opt: libc::c_int, v: libc::c_int) -> io::Result<()> {
    // SAFETY: the option value is a c_int that lives for the call.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            opt,
            (&v as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}
