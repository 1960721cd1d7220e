//! A `TPACKET_V3` receive ring: the kernel writes frames into blocks of memory
//! shared with this process, which reads them in place and hands each block
//! back when done — no system call per frame or per batch while traffic flows.

use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::{fence, AtomicU32, Ordering};
use std::sync::Mutex;

/// Bytes per block (a multiple of the page size, above the largest frame).
const BLOCK_SIZE: usize = 1 << 17;
/// Blocks in the ring (8 MiB, the plain socket's receive buffer). A block goes
/// to the reader when full or after `RETIRE_MS`, so at low rates the ring holds
/// `BLOCKS` × `RETIRE_MS` of traffic however little that is: many small blocks
/// let a reader that dozes for tens of milliseconds lose nothing.
const BLOCKS: usize = 64;
/// Frame slot size the kernel is told (V3 packs frames; this only bounds them).
const FRAME_SIZE: usize = 1 << 11;
/// A block not yet full goes to the reader after this long, ms.
const RETIRE_MS: u32 = 1;

/// Sets `fd` (a bound `AF_PACKET` socket) to ring `version`, asks the kernel
/// for a ring with option `opt` (`PACKET_RX_RING` or `PACKET_TX_RING`) and
/// request `req`, and maps its `bytes`.
pub(crate) fn map<R>(
    fd: RawFd,
    version: libc::tpacket_versions,
    opt: libc::c_int,
    req: &R,
    bytes: usize,
) -> io::Result<*mut u8> {
    crate::sockopt::set_int(
        fd,
        libc::SOL_PACKET,
        libc::PACKET_VERSION,
        version as libc::c_int,
    )?;
    // SAFETY: `req` is the request struct the option takes, valid for the call.
    let r = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_PACKET,
            opt,
            (req as *const R).cast(),
            std::mem::size_of::<R>() as libc::socklen_t,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: maps the ring the kernel just set up on `fd`, of the size asked.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            bytes,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            0,
        )
    };
    if base == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    Ok(base.cast())
}

/// Where reading stands.
struct Pos {
    block: usize,
    /// Frames of the current block already read.
    read: u32,
    /// Offset of the next frame in the current block.
    offset: usize,
}

/// The mapped ring of one socket.
pub(crate) struct RxRing {
    base: *mut u8,
    pos: Mutex<Pos>,
}

// SAFETY: the mapping is owned by this value and unmapped only on drop; the
// frames in it are read under `pos`'s lock, and a block's status word, the only
// memory the kernel and this process both write, is accessed atomically.
unsafe impl Send for RxRing {}
// SAFETY: as above: every access to the shared memory goes through `pos`'s lock.
unsafe impl Sync for RxRing {}

impl std::fmt::Debug for RxRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RxRing").field("blocks", &BLOCKS).finish()
    }
}

impl RxRing {
    /// Sets up and maps a ring on `fd` (a bound `AF_PACKET` socket).
    pub(crate) fn new(fd: RawFd) -> io::Result<RxRing> {
        let req = libc::tpacket_req3 {
            tp_block_size: BLOCK_SIZE as u32,
            tp_block_nr: BLOCKS as u32,
            tp_frame_size: FRAME_SIZE as u32,
            tp_frame_nr: (BLOCK_SIZE * BLOCKS / FRAME_SIZE) as u32,
            tp_retire_blk_tov: RETIRE_MS,
            tp_sizeof_priv: 0,
            tp_feature_req_word: 0,
        };
        let base = map(
            fd,
            libc::tpacket_versions::TPACKET_V3,
            libc::PACKET_RX_RING,
            &req,
            BLOCK_SIZE * BLOCKS,
        )?;
        Ok(RxRing {
            base,
            pos: Mutex::new(Pos {
                block: 0,
                read: 0,
                offset: 0,
            }),
        })
    }

    /// The status word of block `b`.
    fn status(&self, b: usize) -> &AtomicU32 {
        // SAFETY: block `b` < BLOCKS lies in the mapping; its descriptor starts
        // with `version` and `offset_to_priv` (u32 each), then `block_status`,
        // 4-aligned, which the kernel and this process hand over between them.
        unsafe {
            let desc = self.base.add(b * BLOCK_SIZE);
            AtomicU32::from_ptr(desc.add(8).cast::<u32>())
        }
    }

    /// Calls `f(frame, outgoing, stamp)` for up to `max` waiting frames, in
    /// order (`stamp`: when the kernel received it, `CLOCK_REALTIME` ns);
    /// returns how many.
    pub(crate) fn read(&self, max: usize, mut f: impl FnMut(&[u8], bool, u64)) -> usize {
        let mut pos = self.pos.lock().unwrap_or_else(|p| p.into_inner());
        let mut n = 0;
        while n < max {
            let b = pos.block;
            // pairs with the kernel's release when it hands the block over
            if self.status(b).load(Ordering::Acquire) & libc::TP_STATUS_USER == 0 {
                break;
            }
            // SAFETY: the block is the reader's until handed back; its
            // descriptor is a tpacket_block_desc at the block's start.
            let desc = unsafe {
                &*self
                    .base
                    .add(b * BLOCK_SIZE)
                    .cast::<libc::tpacket_block_desc>()
            };
            // SAFETY: version 1 block header, as TPACKET_V3 writes.
            let h = unsafe { &desc.hdr.bh1 };
            if pos.read == 0 {
                pos.offset = h.offset_to_first_pkt as usize;
            }
            while pos.read < h.num_pkts && n < max {
                // SAFETY: the kernel put a tpacket3_hdr at `offset` inside the
                // block, followed (aligned) by a sockaddr_ll, and the frame at
                // `tp_mac` from the header, `tp_snaplen` bytes, all in the block.
                let (frame, outgoing, next, stamp) = unsafe {
                    let hdr_ptr = self.base.add(b * BLOCK_SIZE + pos.offset);
                    let hdr = &*hdr_ptr.cast::<libc::tpacket3_hdr>();
                    let sll = &*hdr_ptr
                        .add(libc::TPACKET_ALIGN(
                            std::mem::size_of::<libc::tpacket3_hdr>(),
                        ))
                        .cast::<libc::sockaddr_ll>();
                    let frame = std::slice::from_raw_parts(
                        hdr_ptr.add(usize::from(hdr.tp_mac)),
                        hdr.tp_snaplen as usize,
                    );
                    (
                        frame,
                        sll.sll_pkttype == libc::PACKET_OUTGOING,
                        hdr.tp_next_offset,
                        u64::from(hdr.tp_sec) * 1_000_000_000 + u64::from(hdr.tp_nsec),
                    )
                };
                f(frame, outgoing, stamp);
                n += 1;
                pos.read += 1;
                pos.offset += next as usize;
            }
            if pos.read >= h.num_pkts {
                // the frames are read: hand the block back (pairs with the
                // kernel's acquire before it fills the block again)
                fence(Ordering::Release);
                self.status(b)
                    .store(libc::TP_STATUS_KERNEL, Ordering::Release);
                pos.block = (b + 1) % BLOCKS;
                pos.read = 0;
            }
        }
        n
    }
}

impl Drop for RxRing {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `new`, no longer used.
        unsafe {
            libc::munmap(self.base.cast(), BLOCK_SIZE * BLOCKS);
        }
    }
}
