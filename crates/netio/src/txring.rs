//! A `TPACKET_V2` transmit ring: frames are written into slots of memory shared
//! with the kernel, marked for sending, and one `send(2)` with no data hands
//! the kernel every marked slot — one system call per burst, no message
//! headers, the kernel reading the frames where they lie. A slot comes back to
//! this process once the kernel has let go of its frame.
//!
//! A ring has one writer: a core sends through its own socket (as a NIC's
//! transmit queue per core), so the lock below is never contended.

use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;

/// Bytes per slot (a frame and its header).
const FRAME_SIZE: usize = 1 << 11;
/// Bytes per block the kernel is asked for (slots do not cross blocks).
const BLOCK_SIZE: usize = 1 << 16;
/// Blocks: 512 slots, 1 MiB.
const BLOCKS: usize = 16;
/// Slots in the ring.
const SLOTS: usize = BLOCK_SIZE / FRAME_SIZE * BLOCKS;
/// Where a frame starts in its slot: after the `tpacket2_hdr`, aligned
/// (`TPACKET2_HDRLEN − sizeof(sockaddr_ll)`, as the kernel reads it when the
/// socket does not give offsets).
const DATA: usize = (std::mem::size_of::<libc::tpacket2_hdr>() + 15) & !15;
/// The largest frame a slot holds.
const SLOT_MAX: usize = FRAME_SIZE - DATA;

/// The mapped ring of one socket.
pub(crate) struct TxRing {
    fd: RawFd,
    base: *mut u8,
    /// The longest frame sent through the ring.
    limit: usize,
    /// The next slot to fill.
    next: Mutex<usize>,
}

// SAFETY: the mapping is owned by this value and unmapped only on drop; slots
// are written under `next`'s lock, and a slot's status word, the only memory
// the kernel and this process both write, is accessed atomically.
unsafe impl Send for TxRing {}
// SAFETY: as above: every write to the shared memory goes through `next`'s lock.
unsafe impl Sync for TxRing {}

impl std::fmt::Debug for TxRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TxRing").field("slots", &SLOTS).finish()
    }
}

impl TxRing {
    /// Sets up and maps a transmit ring on `fd` (a bound `AF_PACKET` socket
    /// that receives nothing). A frame the kernel refuses (it checks lengths
    /// and the link header) is dropped and its slot freed, so one bad frame
    /// cannot stall the ring; [`send`](Self::send) lets through only frames of
    /// a length the kernel takes: at most `limit` bytes (and what a slot holds).
    pub(crate) fn new(fd: RawFd, limit: usize) -> io::Result<TxRing> {
        crate::sockopt::set_int(fd, libc::SOL_PACKET, libc::PACKET_LOSS, 1)?;
        let req = libc::tpacket_req {
            tp_block_size: BLOCK_SIZE as u32,
            tp_block_nr: BLOCKS as u32,
            tp_frame_size: FRAME_SIZE as u32,
            tp_frame_nr: SLOTS as u32,
        };
        let base = crate::ring::map(
            fd,
            libc::tpacket_versions::TPACKET_V2,
            libc::PACKET_TX_RING,
            &req,
            BLOCK_SIZE * BLOCKS,
        )?;
        Ok(TxRing {
            fd,
            base,
            limit: limit.min(SLOT_MAX),
            next: Mutex::new(0),
        })
    }

    /// The status word of slot `i`.
    fn status(&self, i: usize) -> &AtomicU32 {
        // SAFETY: slot `i` < SLOTS lies in the mapping (slots fill blocks
        // exactly); its header starts with `tp_status`, a 4-aligned u32 that
        // the kernel and this process hand the slot over with.
        unsafe { AtomicU32::from_ptr(self.base.add(i * FRAME_SIZE).cast::<u32>()) }
    }

    /// The longest frame [`send`](Self::send) takes.
    pub(crate) fn limit(&self) -> usize {
        self.limit
    }

    /// Puts as many of `frames` (each at most [`limit`](Self::limit) bytes) as there
    /// are free slots into the ring, in order, and has the kernel send them;
    /// returns how many it took (0 when the ring is full: slots come back as
    /// the kernel lets go of their frames).
    pub(crate) fn send(&self, frames: &[&[u8]]) -> io::Result<usize> {
        let mut next = self.next.lock().unwrap_or_else(|p| p.into_inner());
        let mut n = 0;
        for f in frames {
            debug_assert!(f.len() <= self.limit);
            let i = *next;
            // pairs with the kernel's release when it frees the slot
            if self.status(i).load(Ordering::Acquire) != libc::TP_STATUS_AVAILABLE {
                break;
            }
            // SAFETY: the slot is this process's while AVAILABLE; its header is
            // a tpacket2_hdr at the slot's start and the frame fits after DATA.
            unsafe {
                let slot = self.base.add(i * FRAME_SIZE);
                let h = &mut *slot.cast::<libc::tpacket2_hdr>();
                h.tp_len = f.len() as u32;
                std::ptr::copy_nonoverlapping(f.as_ptr(), slot.add(DATA), f.len());
            }
            // hands the slot over: pairs with the kernel's acquire of the status
            // before it reads the frame
            self.status(i)
                .store(libc::TP_STATUS_SEND_REQUEST, Ordering::Release);
            *next = (i + 1) % SLOTS;
            n += 1;
        }
        // with none taken, slots marked earlier may still wait for a kick
        self.kick()?;
        Ok(n)
    }

    /// True while a slot marked for sending has not been taken by the kernel
    /// (after a kick that met a full interface queue). The kernel takes slots
    /// in order, so the last one marked tells.
    pub(crate) fn waiting(&self) -> bool {
        let next = self.next.lock().unwrap_or_else(|p| p.into_inner());
        let last = (*next + SLOTS - 1) % SLOTS;
        // pairs with the kernel's release when it takes the slot
        self.status(last).load(Ordering::Acquire) == libc::TP_STATUS_SEND_REQUEST
    }

    /// Has the kernel send every slot marked for sending (it passes them all
    /// to the interface before returning).
    pub(crate) fn kick(&self) -> io::Result<()> {
        loop {
            // SAFETY: no data: the kernel reads the ring's marked slots.
            let r = unsafe { libc::send(self.fd, std::ptr::null(), 0, libc::MSG_DONTWAIT) };
            if r >= 0 {
                return Ok(());
            }
            let e = io::Error::last_os_error();
            match e.kind() {
                io::ErrorKind::Interrupted => continue,
                // the interface's queue is full: the slots stay marked and the
                // next kick sends them
                io::ErrorKind::WouldBlock => return Ok(()),
                _ => return Err(e),
            }
        }
    }
}

impl Drop for TxRing {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `new`, no longer used.
        unsafe {
            libc::munmap(self.base.cast(), BLOCK_SIZE * BLOCKS);
        }
    }
}
