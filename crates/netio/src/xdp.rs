//! The XDP side of the AF_XDP data path: a program attached to an interface
//! that redirects every frame of receive queue `q` to the AF_XDP socket in
//! entry `q` of its socket map (a queue without one passes frames to the
//! kernel as before), attached by a BPF link so that the kernel detaches it
//! when the process ends, whatever ends it.
//!
//! The program, in eBPF (five instructions, assembled here like the socket
//! filter of [`crate::steering`]):
//!
//! ```text
//! r2 = *(u32 *)(r1 + 16)          ; xdp_md.rx_queue_index
//! r1 = xsks                       ; the socket map
//! r3 = XDP_PASS                   ; the verdict when the entry is empty
//! call bpf_redirect_map
//! exit
//! ```

use std::io;

use crate::bpf::{self, reg::*, Alu, Insn, Link, Map, Program, XdpMode};
use crate::xsk::Xsk;

/// `bpf_redirect_map`.
const REDIRECT_MAP: i32 = 51;
/// `XDP_PASS`.
const XDP_PASS: i32 = 2;
/// Offset of `rx_queue_index` in `struct xdp_md`.
const RX_QUEUE_INDEX: i16 = 16;

/// The program's name for process `pid` (as `bpftool prog` and
/// [`bpf::loaded_named`] show it).
pub fn program_name(pid: u32) -> String {
    format!("fs_xdp_{pid}")
}

/// The program's instructions over socket map `xsks`.
pub fn program(xsks: &Map) -> Vec<Insn> {
    let mut p = vec![Insn::ldx(bpf::Size::W, R2, R1, RX_QUEUE_INDEX)];
    p.extend(Insn::ld_map(R1, xsks));
    p.push(Insn::alu_imm(Alu::Mov, R3, XDP_PASS));
    p.push(Insn::call(REDIRECT_MAP));
    p.push(Insn::exit());
    p
}

/// The program attached to one interface, with its socket map.
#[derive(Debug)]
pub struct Attachment {
    map: Map,
    _prog: Program,
    _link: Link,
    /// How it is attached.
    pub mode: XdpMode,
}

impl Attachment {
    /// Loads the program with a socket map of `queues` entries and attaches
    /// it to interface `ifindex` in the driver (native mode), or — where the
    /// driver refuses and `generic` allows — after the kernel built the
    /// socket buffer.
    pub fn attach(ifindex: i32, queues: u32, generic: bool) -> Result<Attachment, String> {
        let map = Map::xsk(queues.max(1)).map_err(|e| format!("creating the socket map: {e}"))?;
        let prog = Program::xdp(&program_name(std::process::id()), &program(&map))?;
        let (link, mode) = match Link::xdp(&prog, ifindex, XdpMode::Native) {
            Ok(l) => (l, XdpMode::Native),
            Err(e) if generic => match Link::xdp(&prog, ifindex, XdpMode::Generic) {
                Ok(l) => (l, XdpMode::Generic),
                Err(g) => {
                    return Err(format!(
                        "attaching the XDP program: native mode: {e}; generic mode: {g}"
                    ))
                }
            },
            Err(e) => return Err(format!("attaching the XDP program (native mode): {e}")),
        };
        Ok(Attachment {
            map,
            _prog: prog,
            _link: link,
            mode,
        })
    }

    /// Frames of receive queue `queue` go to `xsk` from now on.
    pub fn set(&self, queue: u32, xsk: &Xsk) -> io::Result<()> {
        self.map.set(queue, &(xsk.fd() as u32).to_ne_bytes())
    }
}

/// Idle polls between two looks at an AF_XDP path's socket errors.
const IDLE_CHECK: u32 = 1024;

/// How AF_XDP sockets opened from now on are made ([`crate::set_io`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Settings {
    /// Each socket's UMEM and rings.
    pub sizes: crate::xsk::Sizes,
    /// Attach in generic mode where the driver has no native XDP.
    pub generic: bool,
}

/// The channels (queues) of interface `iface`, as `ethtool -l` shows them:
/// (receive, transmit); 1 each where the driver does not say.
pub fn queues(fd: std::os::fd::RawFd, iface: &str) -> (u32, u32) {
    /// `ETHTOOL_GCHANNELS`.
    const GCHANNELS: u32 = 0x3c;
    #[repr(C)]
    #[derive(Default)]
    struct Channels {
        cmd: u32,
        max_rx: u32,
        max_tx: u32,
        max_other: u32,
        max_combined: u32,
        rx: u32,
        tx: u32,
        other: u32,
        combined: u32,
    }
    let mut ch = Channels {
        cmd: GCHANNELS,
        ..Channels::default()
    };
    // SAFETY: ifreq is plain old data; all-zero is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, b) in req
        .ifr_name
        .iter_mut()
        .zip(iface.bytes().take(libc::IFNAMSIZ - 1))
    {
        *d = b as libc::c_char;
    }
    req.ifr_ifru.ifru_data = (&mut ch as *mut Channels).cast();
    // SAFETY: `req` names the interface and points at `ch`, which outlives
    // the call and which the kernel fills.
    let r = unsafe { libc::ioctl(fd, libc::SIOCETHTOOL, &mut req) };
    if r < 0 {
        return (1, 1);
    }
    let rx = (ch.rx + ch.combined).max(1);
    let tx = (ch.tx + ch.combined).max(1);
    (rx, tx)
}

/// The size of the RSS indirection table the driver of `iface` (in this
/// thread's namespace) takes (`ETHTOOL_GRXFHINDIR`), or why not — a veth has
/// none, and says so with `EOPNOTSUPP`.
pub fn nic_indirection_size(iface: &str) -> io::Result<u32> {
    /// `ETHTOOL_GRXFHINDIR`.
    const GRXFHINDIR: u32 = 0x38;
    #[repr(C)]
    #[derive(Default)]
    struct RxfhIndir {
        cmd: u32,
        size: u32,
    }
    // SAFETY: plain system call; the result is checked.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a descriptor just returned by socket(2), owned by nobody else.
    let fd = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    let mut ind = RxfhIndir {
        cmd: GRXFHINDIR,
        size: 0,
    };
    // SAFETY: ifreq is plain old data; all-zero is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, b) in req
        .ifr_name
        .iter_mut()
        .zip(iface.bytes().take(libc::IFNAMSIZ - 1))
    {
        *d = b as libc::c_char;
    }
    req.ifr_ifru.ifru_data = (&mut ind as *mut RxfhIndir).cast();
    // SAFETY: `req` names the interface and points at `ind`, which outlives
    // the call; with `size` 0 the kernel writes only the table's size.
    let r = unsafe {
        libc::ioctl(
            std::os::fd::AsRawFd::as_raw_fd(&fd),
            libc::SIOCETHTOOL,
            &mut req,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(ind.size)
}

/// The AF_XDP memory a run maps on interfaces `ifaces` (in this thread's
/// namespace): a UMEM with its rings per receive queue, shared by
/// `sockets_per_queue` sockets (one per working core with kernel steering,
/// one otherwise).
pub fn memory(ifaces: &[String], sockets_per_queue: u32, sizes: crate::xsk::Sizes) -> u64 {
    ifaces
        .iter()
        .map(|i| u64::from(rx_queues(i)) * sizes.queue_bytes(sockets_per_queue))
        .sum()
}

/// The receive queues of interface `iface` in this thread's namespace (1
/// where the driver does not say).
pub fn rx_queues(iface: &str) -> u32 {
    // SAFETY: plain system call; the result is checked.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return 1;
    }
    // SAFETY: a descriptor just returned by socket(2), owned by nobody else.
    let fd = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    queues(std::os::fd::AsRawFd::as_raw_fd(&fd), iface).0
}

/// The AF_XDP side of a [`crate::PacketSocket`].
pub(crate) enum Port {
    /// The socket of each receive queue, the program redirecting each
    /// queue's frames to its socket; `dropped`: the kernel's drops counted
    /// so far.
    Rx {
        socks: Vec<std::sync::Arc<Xsk>>,
        /// The program sending them frames (none: another's, shared).
        _att: Option<Attachment>,
        dropped: std::sync::atomic::AtomicU64,
        /// The program puts each frame's arrival time (`CLOCK_MONOTONIC`)
        /// before it; this converts it to the wall clock.
        stamps: Option<i128>,
    },
    /// A transmit queue's socket (shared by the cores that share the queue,
    /// and with the receive side of the queue); `too_long`: frames longer
    /// than a UMEM frame, not sent.
    Tx {
        sock: std::sync::Arc<Xsk>,
        too_long: std::sync::atomic::AtomicU64,
    },
}

impl std::fmt::Debug for Port {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Port::Rx { socks, .. } => write!(f, "Port::Rx({} queues)", socks.len()),
            Port::Tx { sock, .. } => write!(f, "Port::Tx({sock:?})"),
        }
    }
}

/// The sockets by (interface, queue): a queue takes one socket, which its
/// receiving side and its sending cores share.
type Sockets = std::collections::HashMap<(i32, u32), std::sync::Weak<Xsk>>;

/// The socket of queue `q` of interface `ifindex`: the one already open, or
/// a new one of `sizes`.
fn socket(ifindex: i32, q: u32, sizes: crate::xsk::Sizes) -> io::Result<std::sync::Arc<Xsk>> {
    static ALL: std::sync::OnceLock<std::sync::Mutex<Sockets>> = std::sync::OnceLock::new();
    let mut all = ALL
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    if let Some(x) = all.get(&(ifindex, q)).and_then(std::sync::Weak::upgrade) {
        return Ok(x);
    }
    let x = std::sync::Arc::new(Xsk::open(ifindex, q, sizes)?);
    all.insert((ifindex, q), std::sync::Arc::downgrade(&x));
    Ok(x)
}

impl Port {
    /// The receive side of interface `ifindex` (`queues` receive queues).
    pub(crate) fn rx(ifindex: i32, queues: u32, s: Settings) -> Result<Port, String> {
        let socks = (0..queues)
            .map(|q| {
                socket(ifindex, q, s.sizes).map_err(|e| format!("AF_XDP socket on queue {q}: {e}"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let att = Attachment::attach(ifindex, queues, s.generic)?;
        for (q, x) in socks.iter().enumerate() {
            att.set(q as u32, x)
                .map_err(|e| format!("the socket map's entry {q}: {e}"))?;
        }
        Ok(Port::Rx {
            socks,
            _att: Some(att),
            dropped: Default::default(),
            stamps: None,
        })
    }

    /// One working core's receive side under [`XdpSteering`]: its sockets,
    /// one per queue, stamped by the steering program.
    pub(crate) fn rx_of(socks: Vec<std::sync::Arc<Xsk>>) -> Port {
        Port::Rx {
            socks,
            _att: None,
            dropped: Default::default(),
            stamps: Some(wall_minus_monotonic()),
        }
    }

    /// A send side on socket `sock`.
    pub(crate) fn tx_on(sock: std::sync::Arc<Xsk>) -> Port {
        Port::Tx {
            sock,
            too_long: Default::default(),
        }
    }

    /// The send side of interface `ifindex` for the `core`-th sender: queue
    /// `core mod queues`.
    pub(crate) fn tx(ifindex: i32, queues: u32, core: usize, s: Settings) -> io::Result<Port> {
        let q = (core % queues.max(1) as usize) as u32;
        Ok(Port::Tx {
            sock: socket(ifindex, q, s.sizes)?,
            too_long: Default::default(),
        })
    }

    /// Reads waiting frames of every queue into `b` (up to its size); the
    /// number read.
    pub(crate) fn recv(&self, b: &mut crate::batch::RxBatch) -> io::Result<usize> {
        let Port::Rx { socks, stamps, .. } = self else {
            return Ok(0);
        };
        b.n = 0;
        let cap = b.bufs.len();
        for x in socks {
            if b.n == cap {
                break;
            }
            x.recv(cap - b.n, stamps.is_some(), |f, mono| {
                let len = f.len().min(crate::batch::MAX_FRAME);
                b.bufs[b.n][..len].copy_from_slice(&f[..len]);
                b.lens[b.n] = len;
                b.stamps[b.n] = match stamps {
                    Some(off) if mono != 0 => (i128::from(mono) + off).max(1) as u64,
                    _ => 0,
                };
                b.n += 1;
            })?;
        }
        Ok(b.n)
    }

    /// Hands up to `max` waiting frames of every queue to `each`, with
    /// their receive times (wall clock; 0 when the program does not stamp
    /// them), straight from the shared memory; the number read.
    pub(crate) fn recv_each(
        &self,
        max: usize,
        each: &mut impl FnMut(&[u8], u64),
    ) -> io::Result<usize> {
        let Port::Rx { socks, stamps, .. } = self else {
            return Ok(0);
        };
        let mut n = 0;
        for x in socks {
            if n == max {
                break;
            }
            n += x.recv(max - n, stamps.is_some(), |f, mono| {
                let t = match stamps {
                    Some(off) if mono != 0 => (i128::from(mono) + off).max(1) as u64,
                    _ => 0,
                };
                each(f, t);
            })?;
        }
        Ok(n)
    }

    /// Sends `frames` in order; how many were taken.
    pub(crate) fn send(&self, frames: &[&[u8]]) -> io::Result<usize> {
        let Port::Tx { sock, too_long } = self else {
            return Ok(0);
        };
        let mut long = 0;
        let n = sock.send(frames, &mut long)?;
        // Relaxed: a count read by reports only; it orders no other memory
        // and pairs with nothing.
        too_long.fetch_add(long, std::sync::atomic::Ordering::Relaxed);
        Ok(n)
    }

    /// Frames the kernel dropped for the receiving sockets since the last
    /// call (their rings full).
    pub(crate) fn take_drops(&self) -> io::Result<u64> {
        let Port::Rx { socks, dropped, .. } = self else {
            return Ok(0);
        };
        let mut now = 0;
        for x in socks {
            now += x.statistics()?.0;
        }
        // Relaxed: one reader takes the drops; the counter orders no other
        // memory and pairs with nothing.
        let before = dropped.swap(now, std::sync::atomic::Ordering::Relaxed);
        Ok(now.saturating_sub(before))
    }

    /// True once every [`IDLE_CHECK`] calls (idle polls).
    pub(crate) fn idle_check_due(&self) -> bool {
        static IDLE: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        // Relaxed: a rough count that orders no other memory (any thread's
        // idle polls advance it); it pairs with nothing.
        IDLE.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            .is_multiple_of(IDLE_CHECK)
    }

    /// The descriptors of its sockets (for their pending errors).
    pub(crate) fn fds(&self) -> Vec<std::os::fd::RawFd> {
        match self {
            Port::Rx { socks, .. } => socks.iter().map(|x| x.fd()).collect(),
            Port::Tx { sock, .. } => vec![sock.fd()],
        }
    }
}

/// The wall clock minus the monotonic clock, ns (what turns a
/// `bpf_ktime_get_ns` time into a wall-clock one).
fn wall_minus_monotonic() -> i128 {
    let read = |clock| {
        // SAFETY: all-zero is a valid timespec, which clock_gettime fills.
        let mut t: libc::timespec = unsafe { std::mem::zeroed() };
        // SAFETY: `t` is valid for writes.
        unsafe { libc::clock_gettime(clock, &mut t) };
        i128::from(t.tv_sec) * 1_000_000_000 + i128::from(t.tv_nsec)
    };
    read(libc::CLOCK_REALTIME) - read(libc::CLOCK_MONOTONIC)
}

/// Steering in the kernel over AF_XDP: on each interface, a socket per
/// (receive queue, working core), the sockets of a queue sharing its pool,
/// and the steering program ([`crate::steering::KernelRss::xdp_program`])
/// redirecting each frame to its working core's socket on the frame's
/// queue — the indirection table the controller rewrites decides which.
#[derive(Debug)]
pub struct XdpSteering {
    /// `sockets[q][w]`: working core `w`'s socket on queue `q`.
    sockets: Vec<Vec<std::sync::Arc<Xsk>>>,
    _map: Map,
    _prog: Program,
    _link: Link,
    /// How the program is attached.
    pub mode: XdpMode,
}

impl XdpSteering {
    /// Sets up interface `ifindex` (`queues` receive queues) for `workers`
    /// working cores, steered by `rss`'s maps.
    pub fn attach(
        ifindex: i32,
        queues: u32,
        workers: u32,
        rss: &crate::steering::KernelRss,
        s: Settings,
    ) -> Result<XdpSteering, String> {
        let mut sockets = Vec::new();
        for q in 0..queues.max(1) {
            let first = Xsk::open(ifindex, q, s.sizes)
                .map_err(|e| format!("AF_XDP socket on queue {q}: {e}"))?;
            let mut row = Vec::new();
            for _ in 1..workers {
                row.push(std::sync::Arc::new(
                    Xsk::join(&first)
                        .map_err(|e| format!("AF_XDP socket sharing queue {q}: {e}"))?,
                ));
            }
            row.insert(0, std::sync::Arc::new(first));
            sockets.push(row);
        }
        let map = Map::xsk(queues.max(1) * workers)
            .map_err(|e| format!("creating the socket map: {e}"))?;
        for (q, row) in sockets.iter().enumerate() {
            for (w, x) in row.iter().enumerate() {
                map.set(
                    q as u32 * workers + w as u32,
                    &(x.fd() as u32).to_ne_bytes(),
                )
                .map_err(|e| format!("the socket map: {e}"))?;
            }
        }
        let prog = Program::xdp(
            &program_name(std::process::id()),
            &rss.xdp_program(&map, workers, false),
        )?;
        let (link, mode) = match Link::xdp(&prog, ifindex, XdpMode::Native) {
            Ok(l) => (l, XdpMode::Native),
            Err(e) if s.generic => Link::xdp(&prog, ifindex, XdpMode::Generic)
                .map(|l| (l, XdpMode::Generic))
                .map_err(|g| {
                    format!("attaching the XDP program: native mode: {e}; generic mode: {g}")
                })?,
            Err(e) => return Err(format!("attaching the XDP program (native mode): {e}")),
        };
        Ok(XdpSteering {
            sockets,
            _map: map,
            _prog: prog,
            _link: link,
            mode,
        })
    }

    /// Working core `w`'s sockets, one per queue.
    pub fn of_core(&self, w: usize) -> Vec<std::sync::Arc<Xsk>> {
        self.sockets
            .iter()
            .map(|row| row[w % row.len()].clone())
            .collect()
    }

    /// The socket core `c` sends through: its own on queue `c` mod queues.
    pub fn sender(&self, c: usize) -> std::sync::Arc<Xsk> {
        let row = &self.sockets[c % self.sockets.len()];
        row[c % row.len()].clone()
    }
}
