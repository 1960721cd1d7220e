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
    p.push(Insn::alu_imm(Alu::Mov, 3, XDP_PASS));
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
