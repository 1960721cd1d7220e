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
    /// The AF_XDP path could not be set up.
    #[error("interface `{iface}`: {what} (or use `--io packet`)")]
    Xdp {
        /// The interface.
        iface: String,
        /// What failed, and why.
        what: String,
    },
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
pub use crate::batch::{RxBatch, MAX_FRAME};
use crate::sockopt::set_int;

/// An `AF_PACKET` socket bound to one interface.
#[derive(Debug)]
pub struct PacketSocket {
    fd: OwnedFd,
    iface: String,
    ifindex: i32,
    /// The `TPACKET_V3` receive ring, when the socket receives and the kernel
    /// gave one (else `recvmmsg`).
    ring: Option<crate::ring::RxRing>,
    /// The `TPACKET_V2` transmit ring, when the socket only sends and the
    /// kernel gave one (else `sendmmsg`); frames too long for its slots leave
    /// by `jumbo`, a plain socket on the same interface.
    tx_ring: Option<(crate::txring::TxRing, Box<PacketSocket>)>,
    /// Frames are read with the kernel's receive time
    /// ([`enable_timestamps`](Self::enable_timestamps)).
    stamps: std::sync::atomic::AtomicBool,
    /// With AF_XDP ([`set_io`]): the sockets frames go through instead.
    xdp: Option<crate::xdp::Port>,
}

/// How receiving sockets opened from now on read frames.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum RxMode {
    /// `recvmmsg(2)` bursts: the kernel copies frames in the receiving
    /// thread's system call (the default: faster on the veth bed, where the
    /// receive softirq shares a CPU with a working core).
    Recvmmsg,
    /// A `TPACKET_V3` ring shared with the kernel: no system call while frames
    /// flow, the copy done in the receive softirq.
    Ring,
}

/// How sending sockets opened from now on send frames.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum TxMode {
    /// `sendmmsg(2)` bursts (the default).
    Sendmmsg,
    /// A `TPACKET_V2` ring shared with the kernel: a burst's frames written in
    /// place and sent by one empty `send(2)`.
    Ring,
}

/// How sockets opened from now on carry frames.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Io {
    /// `AF_PACKET` sockets (the receive and send modes above).
    Packet,
    /// AF_XDP sockets: an XDP program redirects every receive queue's frames
    /// to a socket of its own, and each sending core has a transmit queue's
    /// socket (shared when there are fewer queues than cores).
    Xdp(crate::xdp::Settings),
}

static IO: std::sync::Mutex<Io> = std::sync::Mutex::new(Io::Packet);

/// Sets how sockets opened from now on carry frames.
pub fn set_io(io: Io) {
    *IO.lock().unwrap_or_else(|p| p.into_inner()) = io;
}

/// How sockets opened from now on carry frames ([`set_io`]).
pub fn socket_io() -> Io {
    *IO.lock().unwrap_or_else(|p| p.into_inner())
}

fn io_mode() -> Io {
    socket_io()
}

static RX_RING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
static TX_RING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Sets how sockets opened from now on send.
pub fn set_tx_mode(m: TxMode) {
    // a setting read when sockets are opened; nothing else depends on it
    TX_RING.store(m == TxMode::Ring, std::sync::atomic::Ordering::Relaxed);
}

fn want_tx_ring() -> bool {
    // pairs with the store in `set_tx_mode` (a plain flag)
    TX_RING.load(std::sync::atomic::Ordering::Relaxed)
}

/// Sets how sockets opened from now on receive.
pub fn set_rx_mode(m: RxMode) {
    // a setting read when sockets are opened; nothing else depends on it
    RX_RING.store(m == RxMode::Ring, std::sync::atomic::Ordering::Relaxed);
}

fn want_ring() -> bool {
    // pairs with the store in `set_rx_mode` (a plain flag)
    RX_RING.load(std::sync::atomic::Ordering::Relaxed)
}

impl PacketSocket {
    /// Opens a non-blocking socket receiving every frame of `iface` (its own
    /// transmissions excluded) and sending out of it.
    pub fn open(iface: &str) -> Result<PacketSocket, SocketError> {
        let Io::Xdp(settings) = io_mode() else {
            return PacketSocket::open_proto(iface, libc::ETH_P_ALL as u16);
        };
        // the AF_PACKET socket receives nothing: it names the interface and
        // says when it goes away
        let mut s = PacketSocket::open_proto(iface, 0)?;
        let (rx, _) = crate::xdp::queues(s.fd.as_raw_fd(), iface);
        let port =
            crate::xdp::Port::rx(s.ifindex, rx, settings).map_err(|what| SocketError::Xdp {
                iface: iface.to_string(),
                what,
            })?;
        s.xdp = Some(port);
        Ok(s)
    }

    /// A receiving socket over AF_XDP sockets steered by an
    /// [`crate::xdp::XdpSteering`] (one working core's, one per queue).
    pub fn over_xdp(
        iface: &str,
        socks: Vec<std::sync::Arc<crate::xsk::Xsk>>,
    ) -> Result<PacketSocket, SocketError> {
        let mut s = PacketSocket::open_proto(iface, 0)?;
        s.xdp = Some(crate::xdp::Port::rx_of(socks));
        Ok(s)
    }

    /// A sending socket over AF_XDP socket `sock`.
    pub fn sending_over_xdp(
        iface: &str,
        sock: std::sync::Arc<crate::xsk::Xsk>,
    ) -> Result<PacketSocket, SocketError> {
        let mut s = PacketSocket::open_proto(iface, 0)?;
        s.xdp = Some(crate::xdp::Port::tx_on(sock));
        Ok(s)
    }

    /// [`open_tx`](Self::open_tx) for the `core`-th sending core: with AF_XDP
    /// ([`set_io`]) on transmit queue `core` mod the interface's queues (a
    /// queue's socket shared by the cores on it).
    pub fn open_tx_for(iface: &str, core: usize) -> Result<PacketSocket, SocketError> {
        let Io::Xdp(settings) = io_mode() else {
            return PacketSocket::open_tx(iface);
        };
        let mut s = PacketSocket::open_proto(iface, 0)?;
        let (_, tx) = crate::xdp::queues(s.fd.as_raw_fd(), iface);
        let port =
            crate::xdp::Port::tx(s.ifindex, tx, core, settings).map_err(|e| SocketError::Xdp {
                iface: iface.to_string(),
                what: format!(
                    "AF_XDP socket on transmit queue {}: {e}",
                    core % tx as usize
                ),
            })?;
        s.xdp = Some(port);
        Ok(s)
    }

    /// Opens a socket that only sends out of `iface` (it receives nothing),
    /// through a transmit ring when [`set_tx_mode`] asked for one. A socket
    /// with a ring has one sender at a time: open one per sending core.
    pub fn open_tx(iface: &str) -> Result<PacketSocket, SocketError> {
        let mut s = PacketSocket::open_proto(iface, 0)?;
        if want_tx_ring() {
            let jumbo = PacketSocket::open_proto(iface, 0)?;
            let sys = |what, source| SocketError::Sys {
                iface: iface.to_string(),
                what,
                source,
            };
            let mtu = mtu(s.fd.as_raw_fd(), iface).map_err(|e| sys("SIOCGIFMTU", e))?;
            // the kernel drops a ring's frame longer than the MTU and its
            // link header without a word: those go by the plain socket,
            // which says so
            let ring = crate::txring::TxRing::new(s.fd.as_raw_fd(), mtu + 14)
                .map_err(|e| sys("PACKET_TX_RING", e))?;
            s.tx_ring = Some((ring, Box::new(jumbo)));
        }
        Ok(s)
    }

    /// How this socket sends: `ring` (`TPACKET_V2`) or `sendmmsg`.
    pub fn tx_mode(&self) -> &'static str {
        if self.xdp.is_some() {
            "xdp"
        } else if self.tx_ring.is_some() {
            "ring"
        } else {
            "sendmmsg"
        }
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
        let mut ring = None;
        if proto != 0 {
            // room for bursts while the NIC-model thread is descheduled
            let size = 8 << 20;
            let _ = set_int(fd.as_raw_fd(), libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, size)
                .or_else(|_| set_int(fd.as_raw_fd(), libc::SOL_SOCKET, libc::SO_RCVBUF, size));
            if want_ring() {
                // a kernel without TPACKET_V3 leaves the socket as it was
                ring = crate::ring::RxRing::new(fd.as_raw_fd()).ok();
            }
        }
        Ok(PacketSocket {
            fd,
            iface: iface.into(),
            ifindex,
            ring,
            tx_ring: None,
            stamps: std::sync::atomic::AtomicBool::new(false),
            xdp: None,
        })
    }

    /// Frames are read from now on with the time the kernel received them
    /// ([`RxBatch::stamp`]): the order in which they reached the interface,
    /// whichever socket of a fanout group they were steered to.
    pub fn enable_timestamps(&self) -> io::Result<()> {
        set_int(
            self.fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_TIMESTAMPNS,
            1,
        )?;
        // read by this socket's readers only (a setting, publishing nothing)
        self.stamps
            .store(true, std::sync::atomic::Ordering::Relaxed);
        Ok(())
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
        if let Some(x) = &self.xdp {
            return x.take_drops();
        }
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
    /// waiting. Frames this host sent out of the interface are skipped. For an
    /// occasional frame: a data path reads bursts with
    /// [`recv_batch`](Self::recv_batch) into buffers it keeps.
    pub fn recv(&self, buf: &mut Vec<u8>) -> io::Result<bool> {
        let mut b = RxBatch::new(1);
        if self.recv_batch(&mut b)? == 0 {
            buf.clear();
            return Ok(false);
        }
        buf.clear();
        buf.extend_from_slice(b.frame(0));
        Ok(true)
    }

    /// Receives up to a batch's size of waiting frames with one
    /// `recvmmsg(2)`; returns how many (0 when none is waiting). Frames this
    /// host sent out of the interface are skipped (a call that read only
    /// those reads again).
    pub fn recv_batch(&self, b: &mut RxBatch) -> io::Result<usize> {
        loop {
            match self.recv_batch_once(b)? {
                (0, read) if read > 0 => continue,
                (n, _) => return Ok(n),
            }
        }
    }

    /// Receives up to a batch's size of waiting frames, handing each to
    /// `each` with its receive time ([`RxBatch::stamp`]; 0 when not asked):
    /// over AF_XDP straight from the shared memory, otherwise through `b`.
    /// Returns how many.
    pub fn recv_each(
        &self,
        b: &mut RxBatch,
        mut each: impl FnMut(&[u8], u64),
    ) -> io::Result<usize> {
        if let Some(x) = &self.xdp {
            let n = x.recv_each(b.bufs.len(), &mut each)?;
            if n == 0 {
                self.xdp_errors(x)?;
            }
            return Ok(n);
        }
        let n = self.recv_batch(b)?;
        for i in 0..n {
            each(b.frame(i), b.stamp(i));
        }
        Ok(n)
    }

    /// No system call reads an AF_XDP socket's rings: every so many idle
    /// polls ask for the sockets' errors, so that an interface going away is
    /// noticed (not every one: each costs system calls).
    fn xdp_errors(&self, x: &crate::xdp::Port) -> io::Result<()> {
        if !x.idle_check_due() {
            return Ok(());
        }
        self.pending_error()?;
        for fd in x.fds() {
            pending_error(fd)?;
        }
        Ok(())
    }

    /// Reads and discards what is waiting, up to about `cap` frames, with
    /// `b` as the buffer; returns how many frames and their bytes. For a run
    /// that stops: what it leaves unread is counted, not lost silently.
    pub fn discard_waiting(&self, b: &mut RxBatch, cap: u64) -> io::Result<(u64, u64)> {
        let (mut n, mut bytes) = (0u64, 0u64);
        while n < cap {
            let k = self.recv_batch(b)?;
            if k == 0 {
                break;
            }
            n += k as u64;
            bytes += (0..k).map(|i| b.frame(i).len() as u64).sum::<u64>();
        }
        Ok((n, bytes))
    }

    /// The socket's pending error (`SO_ERROR`: e.g. `ENETDOWN` once its
    /// interface is gone), if any.
    fn pending_error(&self) -> io::Result<()> {
        pending_error(self.fd.as_raw_fd())
    }
}

/// Socket `fd`'s pending error (`SO_ERROR`), if any.
fn pending_error(fd: RawFd) -> io::Result<()> {
    let mut e: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `e` and `len` are valid for writes of the sizes given.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_ERROR,
            (&mut e as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    if e != 0 {
        return Err(io::Error::from_raw_os_error(e));
    }
    Ok(())
}

impl PacketSocket {
    /// How this socket receives: `ring` (`TPACKET_V3`) or `recvmmsg`.
    pub fn rx_mode(&self) -> &'static str {
        if self.xdp.is_some() {
            "xdp"
        } else if self.ring.is_some() {
            "ring"
        } else {
            "recvmmsg"
        }
    }

    /// One read of the ring or one `recvmmsg`: (frames kept, frames read).
    fn recv_batch_once(&self, b: &mut RxBatch) -> io::Result<(usize, usize)> {
        if let Some(x) = &self.xdp {
            let n = x.recv(b)?;
            if n == 0 {
                self.xdp_errors(x)?;
            }
            return Ok((n, n));
        }
        b.n = 0;
        let cap = b.bufs.len();
        // (a setting, publishing nothing: see `enable_timestamps`)
        let stamps = self.stamps.load(std::sync::atomic::Ordering::Relaxed);
        if let Some(ring) = &self.ring {
            let read = ring.read(cap, |frame, outgoing, stamp| {
                if outgoing {
                    return;
                }
                let len = frame.len().min(MAX_FRAME);
                b.bufs[b.n][..len].copy_from_slice(&frame[..len]);
                b.lens[b.n] = len;
                b.stamps[b.n] = if stamps { stamp } else { 0 };
                b.n += 1;
            });
            if read == 0 {
                // no system call reads the ring: an idle poll asks for the
                // socket's error, so an interface going away is noticed
                self.pending_error()?;
            }
            return Ok((b.n, read));
        }
        let mut from: Vec<libc::sockaddr_ll> = (0..cap)
            // SAFETY: sockaddr_ll is plain old data; all-zero is a valid value.
            .map(|_| unsafe { std::mem::zeroed() })
            .collect();
        let mut iov: Vec<libc::iovec> = b
            .bufs
            .iter_mut()
            .map(|f| libc::iovec {
                iov_base: f.as_mut_ptr().cast(),
                iov_len: f.len(),
            })
            .collect();
        let mut msgs: Vec<libc::mmsghdr> = iov
            .iter_mut()
            .zip(&mut from)
            .map(|(v, a)| mmsghdr(v, Some(a)))
            .collect();
        if stamps {
            for (m, c) in msgs.iter_mut().zip(&mut b.control) {
                m.msg_hdr.msg_control = c.as_mut_ptr().cast();
                m.msg_hdr.msg_controllen = std::mem::size_of_val(c) as _;
            }
        }
        // SAFETY: every header points at one iovec over a MAX_FRAME-byte buffer
        // and at one sockaddr_ll, all alive and unaliased for the call; the
        // kernel writes at most those sizes.
        let n = unsafe {
            libc::recvmmsg(
                self.fd.as_raw_fd(),
                msgs.as_mut_ptr(),
                cap as libc::c_uint,
                libc::MSG_TRUNC,
                std::ptr::null_mut(),
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok((0, 0)),
                _ => Err(e),
            };
        }
        for (i, m) in msgs.iter().take(n as usize).enumerate() {
            if from[i].sll_pkttype == libc::PACKET_OUTGOING {
                continue;
            }
            // MSG_TRUNC gives the frame's real length: a longer one was cut
            let len = (m.msg_len as usize).min(MAX_FRAME);
            if b.n != i {
                b.bufs.swap(b.n, i);
            }
            b.lens[b.n] = len;
            b.stamps[b.n] = if stamps { receive_time(&m.msg_hdr) } else { 0 };
            b.n += 1;
        }
        Ok((b.n, n as usize))
    }

    /// Sends one frame out of the interface, as it is.
    pub fn send(&self, frame: &[u8]) -> io::Result<()> {
        if self.tx_ring.is_some() {
            while self.send_many(&[frame])? == 0 {
                std::thread::yield_now();
            }
            return Ok(());
        }
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

impl PacketSocket {
    /// Sends a burst of frames, in order, with one system call (`sendmmsg(2)`,
    /// or one kick of the transmit ring); returns how many the interface took
    /// (0 when its queue or the ring is full).
    pub fn send_many(&self, frames: &[&[u8]]) -> io::Result<usize> {
        if let Some(x) = &self.xdp {
            return x.send(frames);
        }
        if let Some((ring, jumbo)) = &self.tx_ring {
            // frames a slot holds go by the ring; a longer one goes by the plain
            // socket once those before it are sent (a kick sends every marked
            // slot before it returns), so the order holds
            let fit = frames
                .iter()
                .position(|f| f.len() > ring.limit())
                .unwrap_or(frames.len());
            if fit > 0 {
                return ring.send(&frames[..fit]);
            }
            ring.kick()?;
            if ring.waiting() {
                return Ok(0);
            }
            return jumbo.send_many(&frames[..1]);
        }
        let mut iov: Vec<libc::iovec> = frames
            .iter()
            .map(|f| libc::iovec {
                iov_base: f.as_ptr() as *mut libc::c_void,
                iov_len: f.len(),
            })
            .collect();
        let mut msgs: Vec<libc::mmsghdr> = iov.iter_mut().map(|v| mmsghdr(v, None)).collect();
        // SAFETY: every header points at one iovec of a frame that outlives the
        // call; the kernel only reads them (and writes msg_len).
        let n = unsafe {
            libc::sendmmsg(
                self.fd.as_raw_fd(),
                msgs.as_mut_ptr(),
                msgs.len() as libc::c_uint,
                0,
            )
        };
        if n >= 0 {
            return Ok(n as usize);
        }
        let e = io::Error::last_os_error();
        match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(0),
            _ => Err(e),
        }
    }
}

/// A `sendmmsg`/`recvmmsg` header for one buffer, with room for the peer's
/// link-layer address when `name` is given.
/// The `SCM_TIMESTAMPNS` a received message's control data carries
/// (`CLOCK_REALTIME` ns), or 0.
fn receive_time(h: &libc::msghdr) -> u64 {
    // SAFETY: `h` was filled by recvmmsg: its control pointer and length
    // describe the control data the kernel wrote into our buffer, which the
    // CMSG macros walk within those bounds.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(h);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_TIMESTAMPNS {
                let ts = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<libc::timespec>());
                return ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64;
            }
            c = libc::CMSG_NXTHDR(h, c);
        }
    }
    0
}

fn mmsghdr(iov: &mut libc::iovec, name: Option<&mut libc::sockaddr_ll>) -> libc::mmsghdr {
    // SAFETY: an all-zero msghdr is a valid "no address, no control" header.
    let mut h: libc::msghdr = unsafe { std::mem::zeroed() };
    h.msg_iov = iov;
    h.msg_iovlen = 1;
    if let Some(a) = name {
        h.msg_name = (a as *mut libc::sockaddr_ll).cast();
        h.msg_namelen = std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t;
    }
    libc::mmsghdr {
        msg_hdr: h,
        msg_len: 0,
    }
}

/// True if a send failed because the interface's queue was full and
/// dropped the frame (`ENOBUFS`).
pub fn no_buffer_space(e: &io::Error) -> bool {
    e.raw_os_error() == Some(libc::ENOBUFS)
}

/// Gives a socket (of any kind) a receive buffer of `bytes`, past the
/// system's limit where the process may (`SO_RCVBUFFORCE`, as root).
pub fn grow_receive_buffer(sock: &impl AsRawFd, bytes: usize) -> io::Result<()> {
    let fd = sock.as_raw_fd();
    let v = bytes.min(i32::MAX as usize) as libc::c_int;
    set_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, v)
        .or_else(|_| set_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUF, v))
}

/// Datagrams the kernel dropped for a socket because its receive buffer was
/// full, since it was opened (`SO_MEMINFO`'s drop count).
pub fn socket_drops(sock: &impl AsRawFd) -> io::Result<u64> {
    /// `SO_MEMINFO` and its `SK_MEMINFO_DROPS` index.
    const SO_MEMINFO: libc::c_int = 55;
    const DROPS: usize = 8;
    let mut v = [0u32; 16];
    let mut len = std::mem::size_of_val(&v) as libc::socklen_t;
    // SAFETY: `v` and `len` are valid for writes of the sizes given.
    let r = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            SO_MEMINFO,
            v.as_mut_ptr().cast(),
            &mut len,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    if (len as usize) < (DROPS + 1) * 4 {
        return Err(io::Error::other("SO_MEMINFO without a drop count"));
    }
    Ok(u64::from(v[DROPS]))
}

/// The MTU of `iface`, asked through the socket `fd`.
fn mtu(fd: RawFd, iface: &str) -> io::Result<usize> {
    // SAFETY: ifreq is plain old data; all-zero is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, b) in req
        .ifr_name
        .iter_mut()
        .zip(iface.bytes().take(libc::IFNAMSIZ - 1))
    {
        *d = b as libc::c_char;
    }
    // SAFETY: `req` is a valid ifreq naming the interface; the kernel writes
    // the MTU into it.
    let r = unsafe { libc::ioctl(fd, libc::SIOCGIFMTU, &mut req) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: SIOCGIFMTU filled the union's `ifru_mtu`.
    Ok(unsafe { req.ifr_ifru.ifru_mtu }.max(0) as usize)
}
