//! The NIC model's packet buffers: those the cores have given back, reused
//! as a NIC reuses the buffers its driver returns.

use rtrb::Consumer;

/// The NIC model's receive buffers: frames are copied into buffers the cores
/// have given back (one ring from each core), as a NIC fills the buffers its
/// driver returns; a new buffer only when none is back. No ring: every packet
/// gets a new buffer ([`runspec::RunConfig::recycle`] off).
pub(crate) struct Buffers {
    rings: Vec<Consumer<Vec<u8>>>,
    next: usize,
}

impl Buffers {
    /// Buffers coming back through `rings`.
    pub fn new(rings: Vec<Consumer<Vec<u8>>>) -> Buffers {
        Buffers { rings, next: 0 }
    }

    /// The rings dealt out to `k` users (ring `r` to user `r mod k`).
    pub fn split(self, k: usize) -> Vec<Buffers> {
        let mut out: Vec<Vec<Consumer<Vec<u8>>>> = (0..k.max(1)).map(|_| Vec::new()).collect();
        for (r, ring) in self.rings.into_iter().enumerate() {
            out[r % k.max(1)].push(ring);
        }
        out.into_iter().map(Buffers::new).collect()
    }

    /// `frame` in a buffer, a returned one if any.
    #[inline]
    pub fn copy(&mut self, frame: &[u8]) -> Vec<u8> {
        let n = self.rings.len();
        for _ in 0..n {
            let i = self.next;
            self.next = (i + 1) % n;
            if let Ok(mut b) = self.rings[i].pop() {
                b.clear();
                b.extend_from_slice(frame);
                return b;
            }
        }
        frame.to_vec()
    }
}
