//! An AF_XDP socket: frames an XDP program redirects to it arrive in a ring
//! of descriptors into a memory area shared with the kernel (the UMEM), and
//! frames to send are written there and handed over in another ring — no
//! socket buffer, no IP stack, no system call per burst on receive.
//!
//! A socket is bound to one queue of one interface, and both receives and
//! sends there. A queue takes one UMEM — the [`Pool`] of its first socket,
//! cut into frames of [`FRAME`] bytes, with its fill and completion rings —
//! which later sockets on the queue share ([`Xsk::join`]), each with
//! receive and transmit rings of its own (an XDP program picks, per frame,
//! which of the queue's sockets gets it). Half of the frames are for
//! receiving: each is lent to the kernel through the fill ring, and a frame
//! received is copied out and lent again at once. The other half are for
//! sending: a frame is copied into a free one, handed over in a transmit
//! ring, and taken back from the completion ring once the kernel has sent it.
//!
//! Each ring has one producer and one consumer on this side: a socket's
//! receive ring is read by one thread and its transmit ring written by one
//! core at a time (a lock each), and the pool's fill and completion rings,
//! which every socket of the queue uses, have a lock each.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;

/// `AF_XDP`.
const AF_XDP: libc::c_int = 44;
/// Bytes per UMEM frame (a frame and the kernel's headroom fit).
pub const FRAME: usize = 2048;
/// Bytes the kernel keeps free before a received frame in its UMEM frame
/// (none asked: it uses its own `XDP_PACKET_HEADROOM` in copy mode).
const HEADROOM: u32 = 0;

/// How big a socket is: its UMEM's frames and its rings' descriptors (each a
/// power of two).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sizes {
    /// UMEM frames of [`FRAME`] bytes.
    pub frames: u32,
    /// Descriptors of each ring.
    pub ring: u32,
}

impl Default for Sizes {
    fn default() -> Sizes {
        Sizes {
            frames: 4096,
            ring: 2048,
        }
    }
}

impl Sizes {
    /// Bytes of one socket's UMEM and rings.
    pub fn bytes(&self) -> u64 {
        u64::from(self.frames) * FRAME as u64 + 4 * u64::from(self.ring) * 16
    }

    /// Bytes of a queue's UMEM, its fill and completion rings and the
    /// receive and transmit rings of its `sockets` sockets.
    pub fn queue_bytes(&self, sockets: u32) -> u64 {
        let ring = u64::from(self.ring);
        u64::from(self.frames) * FRAME as u64
            + 2 * ring * 8
            + u64::from(sockets.max(1)) * 2 * ring * 16
    }
}

/// One mapped ring: the kernel's producer and consumer indexes, its flags and
/// its descriptors (`T`: `xdp_desc` for receive and transmit, `u64` frame
/// addresses for fill and completion).
struct Ring<T> {
    map: *mut u8,
    map_len: usize,
    producer: *const AtomicU32,
    consumer: *const AtomicU32,
    flags: *const AtomicU32,
    descs: *mut T,
    mask: u32,
    size: u32,
}

impl<T: Copy> Ring<T> {
    /// Maps ring `off` of socket `fd` at page offset `pgoff`.
    fn map(fd: RawFd, off: &libc::xdp_ring_offset, size: u32, pgoff: u64) -> io::Result<Ring<T>> {
        let len = off.desc as usize + size as usize * std::mem::size_of::<T>();
        // SAFETY: a shared mapping of the socket's ring, of the length the
        // kernel's offsets give for `size` descriptors; the result is checked.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                fd,
                pgoff as libc::off_t,
            )
        };
        if map == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let base = map.cast::<u8>();
        // SAFETY: the offsets are inside the mapping (the kernel gave them for
        // it); the indexes and flags are 4-byte aligned u32s the kernel and
        // this process both update, atomically.
        unsafe {
            Ok(Ring {
                map: base,
                map_len: len,
                producer: base.add(off.producer as usize).cast(),
                consumer: base.add(off.consumer as usize).cast(),
                flags: base.add(off.flags as usize).cast(),
                descs: base.add(off.desc as usize).cast(),
                mask: size - 1,
                size,
            })
        }
    }

    fn producer(&self) -> &AtomicU32 {
        // SAFETY: points into the mapping, alive as long as `self`.
        unsafe { &*self.producer }
    }

    fn consumer(&self) -> &AtomicU32 {
        // SAFETY: as above.
        unsafe { &*self.consumer }
    }

    /// True when the kernel asks to be woken to go on with this ring (its
    /// `XDP_USE_NEED_WAKEUP` flag).
    fn needs_wakeup(&self) -> bool {
        // SAFETY: as above. Relaxed: a hint the kernel sets; a missed one costs a
        // wakeup call one burst later, no data.
        unsafe { &*self.flags }.load(Ordering::Relaxed) & libc::XDP_RING_NEED_WAKEUP != 0
    }

    fn desc(&self, i: u32) -> *mut T {
        // SAFETY: `i & mask` < size: inside the descriptor array.
        unsafe { self.descs.add((i & self.mask) as usize) }
    }

    /// A producer's room: descriptors it may write from its producer index.
    fn room(&self) -> u32 {
        // the kernel's consumer index: Acquire pairs with its release after
        // it read the descriptors, so they may be written again
        let cons = self.consumer().load(Ordering::Acquire);
        let prod = self.producer().load(Ordering::Relaxed);
        self.size - prod.wrapping_sub(cons)
    }

    /// A producer writes `items` after its producer index and publishes them.
    fn produce(&self, items: impl ExactSizeIterator<Item = T>) {
        let prod = self.producer().load(Ordering::Relaxed);
        let n = items.len() as u32;
        debug_assert!(n <= self.room());
        for (k, item) in items.enumerate() {
            // SAFETY: a descriptor the kernel has consumed (room), ours until
            // published below.
            unsafe { self.desc(prod.wrapping_add(k as u32)).write(item) };
        }
        // Release pairs with the kernel's acquire of the producer index: it
        // sees the descriptors written above.
        self.producer()
            .store(prod.wrapping_add(n), Ordering::Release);
    }

    /// A consumer takes up to `max` descriptors from its consumer index.
    fn consume(&self, max: u32, mut each: impl FnMut(T)) -> u32 {
        // Acquire pairs with the kernel's release of the producer index: the
        // descriptors before it are written.
        let prod = self.producer().load(Ordering::Acquire);
        let cons = self.consumer().load(Ordering::Relaxed);
        let n = prod.wrapping_sub(cons).min(max);
        for k in 0..n {
            // SAFETY: a descriptor the kernel has produced, ours until the
            // consumer index moves past it below.
            each(unsafe { self.desc(cons.wrapping_add(k)).read() });
        }
        // Release pairs with the kernel's acquire of the consumer index: it
        // reuses the descriptors only after they were read above.
        self.consumer()
            .store(cons.wrapping_add(n), Ordering::Release);
        n
    }

    /// Descriptors produced and not yet consumed.
    fn pending(&self) -> u32 {
        // Acquire pairs with the kernel's release of its index
        let cons = self.consumer().load(Ordering::Acquire);
        self.producer().load(Ordering::Acquire).wrapping_sub(cons)
    }
}

impl<T> Drop for Ring<T> {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`, unmapped once.
        unsafe { libc::munmap(self.map.cast(), self.map_len) };
    }
}

/// The mapped UMEM.
struct Umem {
    base: *mut u8,
    len: usize,
}

impl Drop for Umem {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `Xsk::open`, unmapped once, after the
        // socket (which the kernel's use of it ends with) — see `Xsk`'s field
        // order.
        unsafe { libc::munmap(self.base.cast(), self.len) };
    }
}

/// The UMEM of a queue and its fill and completion rings, with the frames
/// this process holds: shared by the queue's sockets.
pub struct Pool {
    /// Receive frames: the fill ring and those not lent to the kernel.
    fill: Mutex<(Ring<u64>, Vec<u64>)>,
    /// Send frames: the completion ring and those free to send.
    comp: Mutex<(Ring<u64>, Vec<u64>)>,
    umem: Umem,
}

impl Pool {
    /// Lends up to the fill ring's room of the receive frames held.
    fn lend(&self, taken: impl IntoIterator<Item = u64>) -> bool {
        let mut g = self.fill.lock().unwrap_or_else(|p| p.into_inner());
        let (fill, free) = &mut *g;
        free.extend(taken);
        let lend = (fill.room() as usize).min(free.len());
        if lend > 0 {
            let at = free.len() - lend;
            fill.produce(free.drain(at..));
        }
        fill.needs_wakeup()
    }

    /// Takes back the frames the kernel has sent, and up to `n` free send
    /// frames.
    fn take(&self, n: usize) -> Vec<u64> {
        let mut g = self.comp.lock().unwrap_or_else(|p| p.into_inner());
        let (comp, free) = &mut *g;
        comp.consume(u32::MAX, |a| free.push(a & !(FRAME as u64 - 1)));
        let at = free.len().saturating_sub(n);
        free.split_off(at)
    }

    /// Gives unused send frames back.
    fn give(&self, frames: impl IntoIterator<Item = u64>) {
        let mut g = self.comp.lock().unwrap_or_else(|p| p.into_inner());
        g.1.extend(frames);
    }
}

/// An AF_XDP socket bound to one queue of one interface.
pub struct Xsk {
    rx: Mutex<Ring<libc::xdp_desc>>,
    tx: Mutex<Ring<libc::xdp_desc>>,
    // (dropped before the pool: the kernel lets go of the UMEM with the
    // queue's sockets)
    fd: OwnedFd,
    pool: std::sync::Arc<Pool>,
    /// The pool owner's descriptor (its own, for the first socket).
    owner: RawFd,
    ifindex: i32,
    queue: u32,
    sizes: Sizes,
}

// SAFETY: the mappings are owned by this value (its rings) and by its pool
// (the UMEM, the fill and completion rings), unmapped only on drop; every
// access to a ring goes through the lock of that ring, a UMEM frame is
// written only by whoever took it from the pool under a lock, and the words
// the kernel also writes are accessed atomically.
unsafe impl Send for Xsk {}
// SAFETY: as above.
unsafe impl Sync for Xsk {}
// SAFETY: as for `Xsk`: the pool's rings are behind its locks.
unsafe impl Send for Pool {}
// SAFETY: as above.
unsafe impl Sync for Pool {}

impl std::fmt::Debug for Xsk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Xsk")
            .field("ifindex", &self.ifindex)
            .field("queue", &self.queue)
            .field("sizes", &self.sizes)
            .finish()
    }
}

fn set_opt<T>(fd: RawFd, name: libc::c_int, v: &T) -> io::Result<()> {
    // SAFETY: `v` is a valid value of the option's type, of the size passed.
    let r = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_XDP,
            name,
            (v as *const T).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

fn ctx(what: &str, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{what}: {e}"))
}

/// A new `AF_XDP` socket.
fn socket() -> io::Result<OwnedFd> {
    // SAFETY: plain system call; the result is checked.
    let raw = unsafe { libc::socket(AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
    if raw < 0 {
        return Err(ctx("socket(AF_XDP)", io::Error::last_os_error()));
    }
    // SAFETY: a descriptor just returned by socket(2), owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// The ring offsets of socket `fd`.
fn offsets(fd: RawFd) -> io::Result<libc::xdp_mmap_offsets> {
    // SAFETY: all-zero is a valid xdp_mmap_offsets.
    let mut off: libc::xdp_mmap_offsets = unsafe { std::mem::zeroed() };
    let mut olen = std::mem::size_of::<libc::xdp_mmap_offsets>() as libc::socklen_t;
    // SAFETY: `off` and `olen` are valid for writes of the sizes given.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_XDP,
            libc::XDP_MMAP_OFFSETS,
            (&mut off as *mut libc::xdp_mmap_offsets).cast(),
            &mut olen,
        )
    };
    if r < 0 {
        return Err(ctx("XDP_MMAP_OFFSETS", io::Error::last_os_error()));
    }
    Ok(off)
}

/// Sets up and maps socket `fd`'s receive and transmit rings.
fn own_rings(fd: RawFd, ring: u32) -> io::Result<(Ring<libc::xdp_desc>, Ring<libc::xdp_desc>)> {
    set_opt(fd, libc::XDP_RX_RING, &ring).map_err(|e| ctx("receive ring", e))?;
    set_opt(fd, libc::XDP_TX_RING, &ring).map_err(|e| ctx("transmit ring", e))?;
    let off = offsets(fd)?;
    let rx = Ring::map(fd, &off.rx, ring, libc::XDP_PGOFF_RX_RING as u64)
        .map_err(|e| ctx("mapping the receive ring", e))?;
    let tx = Ring::map(fd, &off.tx, ring, libc::XDP_PGOFF_TX_RING as u64)
        .map_err(|e| ctx("mapping the transmit ring", e))?;
    Ok((rx, tx))
}

/// Binds socket `fd` to queue `queue` of `ifindex` (sharing `shared`'s UMEM
/// when given).
fn bind(fd: RawFd, ifindex: i32, queue: u32, shared: Option<RawFd>) -> io::Result<()> {
    let mut flags = libc::XDP_COPY | libc::XDP_USE_NEED_WAKEUP;
    if shared.is_some() {
        flags = libc::XDP_SHARED_UMEM;
    }
    let sxdp = libc::sockaddr_xdp {
        sxdp_family: AF_XDP as u16,
        sxdp_flags: flags,
        sxdp_ifindex: ifindex as u32,
        sxdp_queue_id: queue,
        sxdp_shared_umem_fd: shared.map_or(0, |f| f as u32),
    };
    // SAFETY: `sxdp` is a valid sockaddr_xdp of the length passed.
    let r = unsafe {
        libc::bind(
            fd,
            (&sxdp as *const libc::sockaddr_xdp).cast(),
            std::mem::size_of::<libc::sockaddr_xdp>() as libc::socklen_t,
        )
    };
    if r < 0 {
        return Err(ctx(
            &format!("binding to queue {queue}"),
            io::Error::last_os_error(),
        ));
    }
    Ok(())
}

impl Xsk {
    /// The first socket on queue `queue` of interface `ifindex`, with a pool
    /// of `sizes` (powers of two), in copy mode (veth has no zero copy) with
    /// the kernel asking to be woken only when it needs it.
    pub fn open(ifindex: i32, queue: u32, sizes: Sizes) -> io::Result<Xsk> {
        if !sizes.frames.is_power_of_two()
            || !sizes.ring.is_power_of_two()
            || sizes.ring < 8
            || sizes.frames < 16
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("AF_XDP sizes {sizes:?}: powers of two, rings of at least 8"),
            ));
        }
        let fd = socket()?;
        let len = sizes.frames as usize * FRAME;
        // SAFETY: an anonymous private mapping; the result is checked.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(ctx("mapping the UMEM", io::Error::last_os_error()));
        }
        let umem = Umem {
            base: base.cast(),
            len,
        };
        let reg = libc::xdp_umem_reg {
            addr: base as u64,
            len: len as u64,
            chunk_size: FRAME as u32,
            headroom: HEADROOM,
            flags: 0,
            tx_metadata_len: 0,
        };
        let f = fd.as_raw_fd();
        set_opt(f, libc::XDP_UMEM_REG, &reg).map_err(|e| ctx("XDP_UMEM_REG", e))?;
        let ring = sizes.ring;
        set_opt(f, libc::XDP_UMEM_FILL_RING, &ring).map_err(|e| ctx("fill ring", e))?;
        set_opt(f, libc::XDP_UMEM_COMPLETION_RING, &ring).map_err(|e| ctx("completion ring", e))?;
        let (rx, tx) = own_rings(f, ring)?;
        let off = offsets(f)?;
        let fill = Ring::map(f, &off.fr, ring, libc::XDP_UMEM_PGOFF_FILL_RING)
            .map_err(|e| ctx("mapping the fill ring", e))?;
        let comp = Ring::map(f, &off.cr, ring, libc::XDP_UMEM_PGOFF_COMPLETION_RING)
            .map_err(|e| ctx("mapping the completion ring", e))?;
        // the first half of the frames receives, the second sends
        let half = u64::from(sizes.frames / 2);
        let rx_free: Vec<u64> = (0..half).map(|k| k * FRAME as u64).collect();
        let tx_free: Vec<u64> = (half..2 * half).map(|k| k * FRAME as u64).collect();
        let pool = std::sync::Arc::new(Pool {
            fill: Mutex::new((fill, Vec::new())),
            comp: Mutex::new((comp, tx_free)),
            umem,
        });
        // every receive frame the fill ring holds is lent to the kernel
        pool.lend(rx_free);
        bind(f, ifindex, queue, None)?;
        Ok(Xsk {
            rx: Mutex::new(rx),
            tx: Mutex::new(tx),
            owner: f,
            fd,
            pool,
            ifindex,
            queue,
            sizes,
        })
    }

    /// Another socket on `first`'s queue, sharing its pool, with receive and
    /// transmit rings of its own.
    pub fn join(first: &Xsk) -> io::Result<Xsk> {
        let fd = socket()?;
        let (rx, tx) = own_rings(fd.as_raw_fd(), first.sizes.ring)?;
        bind(
            fd.as_raw_fd(),
            first.ifindex,
            first.queue,
            Some(first.owner),
        )?;
        Ok(Xsk {
            rx: Mutex::new(rx),
            tx: Mutex::new(tx),
            owner: first.owner,
            fd,
            pool: first.pool.clone(),
            ifindex: first.ifindex,
            queue: first.queue,
            sizes: first.sizes,
        })
    }

    /// The socket's descriptor (for an XSKMAP).
    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// The frame at UMEM address `addr`, `len` bytes.
    fn frame(&self, addr: u64, len: usize) -> &[u8] {
        let umem = &self.pool.umem;
        let at = (addr as usize).min(umem.len);
        let len = len.min(umem.len - at).min(FRAME);
        // SAFETY: inside the UMEM; a frame the kernel handed over in the
        // receive ring and will not write until it is lent again.
        unsafe { std::slice::from_raw_parts(umem.base.add(at), len) }
    }

    /// Wakes the kernel (`recvfrom` or `sendto` with no data).
    fn wake(&self, send: bool) -> io::Result<()> {
        let f = self.fd.as_raw_fd();
        // SAFETY: no buffer: the kernel only looks at the rings.
        let r = unsafe {
            if send {
                libc::sendto(
                    f,
                    std::ptr::null(),
                    0,
                    libc::MSG_DONTWAIT,
                    std::ptr::null(),
                    0,
                )
            } else {
                libc::recvfrom(
                    f,
                    std::ptr::null_mut(),
                    0,
                    libc::MSG_DONTWAIT,
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                )
            }
        };
        if r >= 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            // busy, no room yet, nothing to do: the next call goes on
            Some(libc::EAGAIN | libc::EBUSY | libc::ENOBUFS | libc::EINTR) => Ok(()),
            _ => Err(e),
        }
    }

    /// Receives up to `max` waiting frames: each is handed to `each` (its
    /// bytes, valid for the call, and — with `meta` — the 8 bytes of
    /// metadata an XDP program put before it, as a native-endian `u64`; 0
    /// otherwise) and its UMEM frame lent to the kernel again at once.
    /// Returns how many.
    pub fn recv(
        &self,
        max: usize,
        meta: bool,
        mut each: impl FnMut(&[u8], u64),
    ) -> io::Result<usize> {
        let mut taken = Vec::new();
        let n = {
            let rx = self.rx.lock().unwrap_or_else(|p| p.into_inner());
            rx.consume(max as u32, |d| {
                let m = if meta && d.addr % FRAME as u64 >= 8 {
                    let b = self.frame(d.addr - 8, 8);
                    u64::from_ne_bytes(b.try_into().unwrap_or([0; 8]))
                } else {
                    0
                };
                each(self.frame(d.addr, d.len as usize), m);
                // (the address's offset within its frame cleared)
                taken.push(d.addr & !(FRAME as u64 - 1));
            })
        };
        let wake = self.pool.lend(taken);
        if n == 0 && wake {
            self.wake(false)?;
        }
        Ok(n as usize)
    }

    /// Sends `frames`, in order: each is copied into a free UMEM frame and
    /// handed to the kernel, which is woken until it has taken every one (so
    /// they have left when this returns, and a later frame of their flow,
    /// sent by another core, cannot overtake them). Returns how many were
    /// taken: fewer when the transmit ring or the send frames are full (the
    /// rest are for the next call); a frame longer than a UMEM frame is
    /// counted as taken and not sent (`too_long`).
    pub fn send(&self, frames: &[&[u8]], too_long: &mut u64) -> io::Result<usize> {
        let tx = self.tx.lock().unwrap_or_else(|p| p.into_inner());
        let mut free = self.pool.take((tx.room() as usize).min(frames.len()));
        let room = free.len();
        let mut taken = 0;
        let mut descs = Vec::with_capacity(room);
        for f in frames {
            if descs.len() == room {
                break;
            }
            taken += 1;
            if f.len() > FRAME {
                *too_long += 1;
                continue;
            }
            let addr = free.pop().expect("room counts free frames");
            // SAFETY: a free send frame of the UMEM (taken from the pool, no
            // one else holds it), `f.len()` ≤ FRAME bytes from its start.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    f.as_ptr(),
                    self.pool.umem.base.add(addr as usize),
                    f.len(),
                )
            };
            descs.push(libc::xdp_desc {
                addr,
                len: f.len() as u32,
                options: 0,
            });
        }
        self.pool.give(free);
        tx.produce(descs.into_iter());
        // in copy mode the kernel sends from `sendto`, a batch per call
        let since = std::time::Instant::now();
        while tx.pending() > 0 {
            self.wake(true)?;
            if since.elapsed() > std::time::Duration::from_secs(1) {
                return Err(io::Error::other(
                    "the kernel took no frame from the transmit ring for a second",
                ));
            }
        }
        Ok(taken)
    }

    /// The kernel's counts for this socket: (frames dropped — its receive ring
    /// or fill ring empty, or invalid —, transmit descriptors invalid).
    pub fn statistics(&self) -> io::Result<(u64, u64)> {
        // SAFETY: all-zero is a valid xdp_statistics.
        let mut st: libc::xdp_statistics = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::xdp_statistics>() as libc::socklen_t;
        // SAFETY: `st` and `len` are valid for writes of the sizes given.
        let r = unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_XDP,
                libc::XDP_STATISTICS,
                (&mut st as *mut libc::xdp_statistics).cast(),
                &mut len,
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok((st.rx_dropped + st.rx_invalid_descs, st.tx_invalid_descs))
    }

    /// The socket's sizes.
    pub fn sizes(&self) -> Sizes {
        self.sizes
    }
}
