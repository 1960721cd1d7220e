//! A receive call's frames: the buffers a socket fills, each frame's length
//! and receive time.

/// Largest frame received (jumbo frames included).
pub const MAX_FRAME: usize = 9216 + 18;

/// Buffers for [`PacketSocket::recv_batch`](crate::PacketSocket::recv_batch): frames received by one call.
#[derive(Debug)]
pub struct RxBatch {
    pub(crate) bufs: Vec<Vec<u8>>,
    pub(crate) lens: Vec<usize>,
    /// When the kernel received each frame (`CLOCK_REALTIME` ns; 0: not
    /// asked, [`PacketSocket::enable_timestamps`](crate::PacketSocket::enable_timestamps)).
    pub(crate) stamps: Vec<u64>,
    /// Room for each message's control data (its receive timestamp).
    pub(crate) control: Vec<[u64; CONTROL_WORDS]>,
    pub(crate) n: usize,
}

/// A message's control buffer, in 8-byte words: one `SCM_TIMESTAMPNS`.
pub(crate) const CONTROL_WORDS: usize = 8;

impl RxBatch {
    /// Room for `n` frames of up to [`MAX_FRAME`] bytes (at least 1).
    pub fn new(n: usize) -> RxBatch {
        let n = n.max(1);
        RxBatch {
            bufs: vec![vec![0; MAX_FRAME]; n],
            lens: vec![0; n],
            stamps: vec![0; n],
            control: vec![[0; CONTROL_WORDS]; n],
            n: 0,
        }
    }

    /// When the kernel received frame `i` of the last call (`CLOCK_REALTIME`
    /// ns), on a socket that asked ([`PacketSocket::enable_timestamps`](crate::PacketSocket::enable_timestamps));
    /// 0 otherwise.
    pub fn stamp(&self, i: usize) -> u64 {
        assert!(i < self.n, "frame {i} of {}", self.n);
        self.stamps[i]
    }

    /// Frames the last call received.
    pub fn len(&self) -> usize {
        self.n
    }

    /// True when the last call received none.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// Frame `i` (< [`len`](Self::len)) of the last call.
    pub fn frame(&self, i: usize) -> &[u8] {
        assert!(i < self.n, "frame {i} of {}", self.n);
        &self.bufs[i][..self.lens[i]]
    }
}
