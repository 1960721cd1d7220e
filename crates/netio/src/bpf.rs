//! eBPF through the `bpf(2)` system call, with no loader and no compiler: array
//! maps (plain and per-CPU) and socket maps for AF_XDP, socket-filter and XDP
//! programs assembled from [`Insn`]s, XDP programs attached to an interface
//! by a link the kernel drops with the process, and `BPF_PROG_TEST_RUN` to
//! run a program on a frame.
//!
//! The programs flowshift needs ([`crate::steering`], [`crate::xdp`]) are
//! small enough to write as instructions, so the build needs neither clang
//! nor libbpf.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

const BPF_MAP_CREATE: libc::c_long = 0;
const BPF_MAP_LOOKUP_ELEM: libc::c_long = 1;
const BPF_MAP_UPDATE_ELEM: libc::c_long = 2;
const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_PROG_TEST_RUN: libc::c_long = 10;
const BPF_PROG_GET_NEXT_ID: libc::c_long = 11;
const BPF_PROG_GET_FD_BY_ID: libc::c_long = 13;
const BPF_OBJ_GET_INFO_BY_FD: libc::c_long = 15;
const BPF_LINK_CREATE: libc::c_long = 28;
/// Bytes of an object's name, NUL included (`BPF_OBJ_NAME_LEN`).
const NAME_LEN: usize = 16;
/// Bytes of the verifier's log asked for when a program is refused (a longer
/// log is cut there).
const LOG_BYTES: usize = 1 << 24;

const MAP_TYPE_ARRAY: u32 = 2;
const MAP_TYPE_PERCPU_ARRAY: u32 = 6;
const MAP_TYPE_XSKMAP: u32 = 17;
const PROG_TYPE_SOCKET_FILTER: u32 = 1;
const PROG_TYPE_XDP: u32 = 6;
/// `BPF_XDP`: the attach type of an XDP program linked to an interface.
const ATTACH_XDP: u32 = 37;

/// `union bpf_attr`, as bytes large enough for every command used here.
#[repr(C, align(8))]
struct Attr([u8; 128]);

impl Attr {
    fn new() -> Attr {
        Attr([0; 128])
    }
    fn u32(&mut self, at: usize, v: u32) -> &mut Attr {
        self.0[at..at + 4].copy_from_slice(&v.to_ne_bytes());
        self
    }
    fn u64(&mut self, at: usize, v: u64) -> &mut Attr {
        self.0[at..at + 8].copy_from_slice(&v.to_ne_bytes());
        self
    }
    fn get_u32(&self, at: usize) -> u32 {
        u32::from_ne_bytes(self.0[at..at + 4].try_into().expect("4 bytes"))
    }
}

fn bpf(cmd: libc::c_long, attr: &mut Attr) -> io::Result<libc::c_long> {
    // SAFETY: `attr` is a valid, writable bpf_attr of the size passed; every
    // pointer inside it points to memory that outlives the call.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            attr as *mut Attr,
            std::mem::size_of::<Attr>(),
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// An array map of `u32` keys.
#[derive(Debug)]
pub struct Map {
    fd: OwnedFd,
    value_size: u32,
    entries: u32,
    percpu: bool,
}

impl Map {
    /// An array of `entries` values of `value_size` bytes.
    pub fn array(entries: u32, value_size: u32) -> io::Result<Map> {
        Map::create(MAP_TYPE_ARRAY, entries, value_size)
    }

    /// A per-CPU array of `entries` 64-bit counters.
    pub fn percpu_counters(entries: u32) -> io::Result<Map> {
        Map::create(MAP_TYPE_PERCPU_ARRAY, entries, 8)
    }

    /// A map of `entries` AF_XDP sockets (an XSKMAP: entry `k` set to a
    /// socket's descriptor), the target of an XDP program's redirect.
    pub fn xsk(entries: u32) -> io::Result<Map> {
        Map::create(MAP_TYPE_XSKMAP, entries, 4)
    }

    fn create(kind: u32, entries: u32, value_size: u32) -> io::Result<Map> {
        let mut a = Attr::new();
        a.u32(0, kind).u32(4, 4).u32(8, value_size).u32(12, entries);
        let fd = bpf(BPF_MAP_CREATE, &mut a)? as RawFd;
        Ok(Map {
            // SAFETY: a descriptor just returned by bpf(2), owned by nobody else.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            value_size,
            entries,
            percpu: kind == MAP_TYPE_PERCPU_ARRAY,
        })
    }

    /// The map's descriptor (for [`Insn::ld_map`]).
    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Entries.
    pub fn len(&self) -> u32 {
        self.entries
    }

    /// True for a map of no entry.
    pub fn is_empty(&self) -> bool {
        self.entries == 0
    }

    /// Sets entry `key` of a plain array. Programs running on other CPUs see the
    /// new value from their next lookup.
    pub fn set(&self, key: u32, value: &[u8]) -> io::Result<()> {
        assert!(!self.percpu && value.len() == self.value_size as usize);
        let mut a = Attr::new();
        a.u32(0, self.fd() as u32)
            .u64(8, &key as *const u32 as u64)
            .u64(16, value.as_ptr() as u64)
            .u64(24, 0);
        bpf(BPF_MAP_UPDATE_ELEM, &mut a).map(|_| ())
    }

    /// Entry `key` of a plain array.
    pub fn get(&self, key: u32) -> io::Result<Vec<u8>> {
        assert!(!self.percpu);
        let mut v = vec![0u8; self.value_size as usize];
        let mut a = Attr::new();
        a.u32(0, self.fd() as u32)
            .u64(8, &key as *const u32 as u64)
            .u64(16, v.as_mut_ptr() as u64);
        bpf(BPF_MAP_LOOKUP_ELEM, &mut a)?;
        Ok(v)
    }

    /// Entry `key` of a per-CPU counter array, summed over the CPUs.
    pub fn sum(&self, key: u32) -> io::Result<u64> {
        assert!(self.percpu);
        let mut v = vec![0u64; possible_cpus()?];
        let mut a = Attr::new();
        a.u32(0, self.fd() as u32)
            .u64(8, &key as *const u32 as u64)
            .u64(16, v.as_mut_ptr() as u64);
        bpf(BPF_MAP_LOOKUP_ELEM, &mut a)?;
        Ok(v.iter().sum())
    }
}

/// The number of possible CPUs (a per-CPU map holds a value for each); read
/// once (it does not change while the machine runs), as every lookup in a
/// per-CPU map needs it.
pub fn possible_cpus() -> io::Result<usize> {
    static N: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    if let Some(n) = N.get() {
        return Ok(*n);
    }
    let n = read_possible_cpus()?;
    Ok(*N.get_or_init(|| n))
}

fn read_possible_cpus() -> io::Result<usize> {
    let s = std::fs::read_to_string("/sys/devices/system/cpu/possible")?;
    let mut n = 0;
    for part in s.trim().split(',') {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        let (a, b): (usize, usize) = (
            a.parse().map_err(io::Error::other)?,
            b.parse().map_err(io::Error::other)?,
        );
        n = n.max(b + 1).max(a + 1);
    }
    Ok(n)
}

/// One eBPF instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub struct Insn {
    code: u8,
    regs: u8,
    off: i16,
    imm: i32,
}

/// Registers.
pub mod reg {
    /// Return value, helper results.
    pub const R0: u8 = 0;
    /// First argument (the context at entry).
    pub const R1: u8 = 1;
    /// Second argument.
    pub const R2: u8 = 2;
    /// Third argument.
    pub const R3: u8 = 3;
    /// Fourth argument.
    pub const R4: u8 = 4;
    /// Fifth argument.
    pub const R5: u8 = 5;
    /// Callee-saved (the context, for packet loads).
    pub const R6: u8 = 6;
    /// Callee-saved.
    pub const R7: u8 = 7;
    /// Callee-saved.
    pub const R8: u8 = 8;
    /// Callee-saved.
    pub const R9: u8 = 9;
    /// The frame pointer (read only).
    pub const R10: u8 = 10;
}

/// Operand sizes.
#[derive(Clone, Copy, Debug)]
pub enum Size {
    /// 8 bits.
    B = 0x10,
    /// 16 bits.
    H = 0x08,
    /// 32 bits.
    W = 0x00,
    /// 64 bits.
    Dw = 0x18,
}

/// ALU operations (64-bit).
#[derive(Clone, Copy, Debug)]
pub enum Alu {
    /// +
    Add = 0x00,
    /// *
    Mul = 0x20,
    /// |
    Or = 0x40,
    /// &
    And = 0x50,
    /// <<
    Lsh = 0x60,
    /// >>
    Rsh = 0x70,
    /// % (unsigned)
    Mod = 0x90,
    /// ^
    Xor = 0xa0,
    /// =
    Mov = 0xb0,
}

/// Conditional jumps.
#[derive(Clone, Copy, Debug)]
pub enum Jmp {
    /// ==
    Eq = 0x10,
    /// > (unsigned)
    Gt = 0x20,
    /// !=
    Ne = 0x50,
    /// & != 0
    Set = 0x40,
}

impl Insn {
    const fn new(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
        Insn {
            code,
            regs: (src << 4) | (dst & 0x0f),
            off,
            imm,
        }
    }
    /// The same instruction with jump offset `off`.
    pub fn with_off(self, off: i16) -> Insn {
        Insn { off, ..self }
    }
    /// `dst op= imm` (64-bit).
    pub const fn alu_imm(op: Alu, dst: u8, imm: i32) -> Insn {
        Insn::new(0x07 | op as u8, dst, 0, 0, imm)
    }
    /// `dst op= src` (64-bit).
    pub const fn alu_reg(op: Alu, dst: u8, src: u8) -> Insn {
        Insn::new(0x07 | 0x08 | op as u8, dst, src, 0, 0)
    }
    /// `dst = *(size *)(src + off)`.
    pub const fn ldx(size: Size, dst: u8, src: u8, off: i16) -> Insn {
        Insn::new(0x01 | 0x60 | size as u8, dst, src, off, 0)
    }
    /// `*(size *)(dst + off) = src`.
    pub const fn stx(size: Size, dst: u8, off: i16, src: u8) -> Insn {
        Insn::new(0x03 | 0x60 | size as u8, dst, src, off, 0)
    }
    /// `*(size *)(dst + off) = imm`.
    pub const fn st(size: Size, dst: u8, off: i16, imm: i32) -> Insn {
        Insn::new(0x02 | 0x60 | size as u8, dst, 0, off, imm)
    }
    /// `r0 = packet[off]` in host order (the context in r6; a load past the
    /// packet ends the program with 0).
    pub const fn ld_abs(size: Size, off: i32) -> Insn {
        Insn::new(0x20 | size as u8, 0, 0, 0, off)
    }
    /// `r0 = packet[src + off]` in host order.
    pub const fn ld_ind(size: Size, src: u8, off: i32) -> Insn {
        Insn::new(0x40 | size as u8, 0, src, 0, off)
    }
    /// `if dst op imm goto +off`.
    pub const fn jmp_imm(op: Jmp, dst: u8, imm: i32, off: i16) -> Insn {
        Insn::new(0x05 | op as u8, dst, 0, off, imm)
    }
    /// `if (u32)dst op (u32)imm goto +off`: the low 32 bits of `dst` against
    /// `imm` (no sign extension).
    pub const fn jmp32_imm(op: Jmp, dst: u8, imm: i32, off: i16) -> Insn {
        Insn::new(0x06 | op as u8, dst, 0, off, imm)
    }
    /// `if dst op src goto +off`.
    pub const fn jmp_reg(op: Jmp, dst: u8, src: u8, off: i16) -> Insn {
        Insn::new(0x05 | 0x08 | op as u8, dst, src, off, 0)
    }
    /// `goto +off`.
    pub const fn ja(off: i16) -> Insn {
        Insn::new(0x05, 0, 0, off, 0)
    }
    /// Calls helper `id`.
    pub const fn call(id: i32) -> Insn {
        Insn::new(0x05 | 0x80, 0, 0, 0, id)
    }
    /// Returns r0.
    pub const fn exit() -> Insn {
        Insn::new(0x05 | 0x90, 0, 0, 0, 0)
    }
    /// `dst = map` (two instructions).
    pub fn ld_map(dst: u8, map: &Map) -> [Insn; 2] {
        [
            Insn::new(0x18, dst, 1, 0, map.fd()),
            Insn::new(0, 0, 0, 0, 0),
        ]
    }
}

/// A loaded socket-filter program.
#[derive(Debug)]
pub struct Program {
    fd: OwnedFd,
}

impl Program {
    /// Loads a socket-filter program named `name` (letters, digits, `_` and
    /// `.`; cut to 15 bytes), the name `bpftool prog` and
    /// [`loaded_named`] show; a refusal carries the verifier's log.
    pub fn socket_filter(name: &str, insns: &[Insn]) -> Result<Program, String> {
        Program::load(PROG_TYPE_SOCKET_FILTER, 0, name, insns)
    }

    /// Loads an XDP program named `name` (as
    /// [`socket_filter`](Self::socket_filter)), for [`Link::xdp`].
    pub fn xdp(name: &str, insns: &[Insn]) -> Result<Program, String> {
        Program::load(PROG_TYPE_XDP, ATTACH_XDP, name, insns)
    }

    /// Loads without the verifier's log (a log longer than its buffer fails
    /// the load, ENOSPC, however sound the program), and on a refusal loads
    /// again with a log of [`LOG_BYTES`] to say why.
    fn load(kind: u32, attach: u32, name: &str, insns: &[Insn]) -> Result<Program, String> {
        let license = b"GPL\0";
        let attempt = |log: Option<&mut Vec<u8>>| {
            let mut a = Attr::new();
            // (expected_attach_type at 68)
            a.u32(68, attach);
            a.u32(0, kind)
                .u32(4, insns.len() as u32)
                .u64(8, insns.as_ptr() as u64)
                .u64(16, license.as_ptr() as u64);
            if let Some(log) = log {
                a.u32(24, 1)
                    .u32(28, log.len() as u32)
                    .u64(32, log.as_mut_ptr() as u64);
            }
            for (i, b) in name.bytes().take(NAME_LEN - 1).enumerate() {
                a.0[48 + i] = b;
            }
            bpf(BPF_PROG_LOAD, &mut a)
        };
        let fd = match attempt(None) {
            Ok(fd) => fd,
            Err(_) => {
                let mut log = vec![0u8; LOG_BYTES];
                match attempt(Some(&mut log)) {
                    Ok(fd) => fd,
                    Err(e) => {
                        let end = log.iter().position(|b| *b == 0).unwrap_or(log.len());
                        return Err(format!(
                            "loading the eBPF program: {e}\n{}",
                            String::from_utf8_lossy(&log[..end])
                        ));
                    }
                }
            }
        };
        Ok(Program {
            // SAFETY: a descriptor just returned by bpf(2), owned by nobody else.
            fd: unsafe { OwnedFd::from_raw_fd(fd as RawFd) },
        })
    }

    /// The program's descriptor.
    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Runs an XDP program once on `frame` (from its Ethernet header) as
    /// if it arrived on receive queue `queue` of interface `ifindex`, and
    /// returns its result.
    pub fn test_run_xdp(&self, frame: &[u8], ifindex: i32, queue: u32) -> io::Result<u32> {
        Ok(self.run_xdp(frame, (ifindex, queue), 1)?.0)
    }

    /// `BPF_PROG_TEST_RUN` of an XDP program `repeat` times: its result and
    /// the kernel's mean time per run, ns.
    fn run_xdp(
        &self,
        frame: &[u8],
        (ifindex, queue): (i32, u32),
        repeat: u32,
    ) -> io::Result<(u32, u32)> {
        // struct xdp_md: data, data_end, data_meta, ingress_ifindex,
        // rx_queue_index, egress_ifindex
        let md: [u32; 6] = [0, frame.len() as u32, 0, ifindex as u32, queue, 0];
        let mut a = Attr::new();
        a.u32(0, self.fd() as u32)
            .u32(8, frame.len() as u32)
            .u64(16, frame.as_ptr() as u64)
            .u32(32, repeat.max(1))
            .u32(40, std::mem::size_of_val(&md) as u32)
            .u64(48, md.as_ptr() as u64);
        bpf(BPF_PROG_TEST_RUN, &mut a)?;
        // (retval at 4, duration at 36)
        Ok((a.get_u32(4), a.get_u32(36)))
    }

    /// Runs the XDP program `repeat` times on `frame` in the kernel
    /// (`BPF_PROG_TEST_RUN`), as [`test_run_xdp`](Self::test_run_xdp) runs it
    /// once: its result and the kernel's mean time per run, ns.
    pub fn test_run_xdp_timed(&self, frame: &[u8], repeat: u32) -> io::Result<(u32, u32)> {
        self.run_xdp(frame, (0, 0), repeat)
    }

    /// Runs the program once on `frame` (an Ethernet frame; the program sees it
    /// from the network header, as on a packet socket) and returns its result.
    pub fn test_run(&self, frame: &[u8]) -> io::Result<u32> {
        let mut a = Attr::new();
        a.u32(0, self.fd() as u32)
            .u32(8, frame.len() as u32)
            .u64(16, frame.as_ptr() as u64)
            .u32(32, 1);
        bpf(BPF_PROG_TEST_RUN, &mut a)?;
        Ok(a.get_u32(4))
    }
}

/// An XDP program linked to an interface: detached when this value is
/// dropped, or when the process ends however it ends (`kill -9` included),
/// since the kernel holds the attachment by the link's descriptor alone.
#[derive(Debug)]
pub struct Link {
    _fd: OwnedFd,
}

/// How an XDP program is attached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum XdpMode {
    /// In the driver, before the kernel builds a socket buffer (veth has it).
    Native,
    /// After the kernel built the socket buffer (any interface; slower).
    Generic,
}

impl XdpMode {
    fn flags(self) -> u32 {
        match self {
            // XDP_FLAGS_DRV_MODE, XDP_FLAGS_SKB_MODE
            XdpMode::Native => 1 << 2,
            XdpMode::Generic => 1 << 1,
        }
    }
}

impl Link {
    /// Attaches XDP program `prog` to interface `ifindex` in `mode`.
    pub fn xdp(prog: &Program, ifindex: i32, mode: XdpMode) -> io::Result<Link> {
        let mut a = Attr::new();
        a.u32(0, prog.fd() as u32)
            .u32(4, ifindex as u32)
            .u32(8, ATTACH_XDP)
            .u32(12, mode.flags());
        let fd = bpf(BPF_LINK_CREATE, &mut a)? as RawFd;
        Ok(Link {
            // SAFETY: a descriptor just returned by bpf(2), owned by nobody else.
            _fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }
}

/// How many eBPF programs named `name` the kernel holds (any process's, or
/// none left by one that ended): for checking that a run leaves nothing loaded.
/// Needs `CAP_SYS_ADMIN`.
pub fn loaded_named(name: &str) -> io::Result<usize> {
    let want: Vec<u8> = name.bytes().take(NAME_LEN - 1).collect();
    let mut n = 0;
    let mut id = 0u32;
    loop {
        let mut a = Attr::new();
        a.u32(0, id);
        match bpf(BPF_PROG_GET_NEXT_ID, &mut a) {
            Ok(_) => id = a.get_u32(4),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(n),
            Err(e) => return Err(e),
        }
        let mut a = Attr::new();
        a.u32(0, id);
        let fd = match bpf(BPF_PROG_GET_FD_BY_ID, &mut a) {
            // SAFETY: a descriptor just returned by bpf(2), owned by nobody else.
            Ok(fd) => unsafe { OwnedFd::from_raw_fd(fd as RawFd) },
            // unloaded since it was listed
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => continue,
            Err(e) => return Err(e),
        };
        // struct bpf_prog_info up to its name (at byte 64)
        let mut info = [0u8; 64 + NAME_LEN];
        let mut a = Attr::new();
        a.u32(0, fd.as_raw_fd() as u32)
            .u32(4, info.len() as u32)
            .u64(8, info.as_mut_ptr() as u64);
        bpf(BPF_OBJ_GET_INFO_BY_FD, &mut a)?;
        let got = &info[64..];
        let end = got.iter().position(|b| *b == 0).unwrap_or(NAME_LEN);
        if got[..end] == want[..] {
            n += 1;
        }
    }
}
