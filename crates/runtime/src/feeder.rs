//! The NIC model on its own thread: replay, hash, steer, enqueue.

use std::sync::Arc;

use nf::Packet;
use rtrb::Producer;
use steer::RssHasher;
use trace::{Pace, Schedule, Trace};
use wire::Malformed;

use crate::shared::Shared;

/// What the feeder counted.
#[derive(Debug, Default)]
pub(crate) struct FeederStats {
    /// Packets offered (the trace times its loops).
    pub offered: u64,
    /// Tail drops on a full ring (timed pace only).
    pub ring_full: u64,
    /// Unparsable packets, by cause.
    pub malformed: [u64; Malformed::ALL.len()],
    /// Bytes offered (wire, FCS included).
    pub bytes: u64,
    /// First to last offer, ns.
    pub duration_ns: u64,
}

/// How the feeder plays the trace.
pub(crate) struct FeedOptions {
    pub schedule: Schedule,
    /// Packets steered per table version.
    pub burst: usize,
    /// Stop after this long (ns), whatever the schedule says.
    pub duration_ns: Option<u64>,
    /// Sprayer: steer by a non-flow field.
    pub spray: bool,
}

pub(crate) fn feed(
    trace: &Trace,
    hasher: &RssHasher,
    shared: &Arc<Shared>,
    mut queues: Vec<Producer<Packet>>,
    opts: FeedOptions,
) -> FeederStats {
    let FeedOptions {
        schedule,
        burst,
        duration_ns,
        spray,
    } = opts;
    let mut st = FeederStats::default();
    let total = schedule.packets(trace);
    let mut n = 0u64;
    let t0 = shared.now_ns();
    while n < total {
        if duration_ns.is_some_and(|d| shared.now_ns() - t0 >= d) {
            break;
        }
        let v = shared.version();
        for _ in 0..burst {
            let Some((i, at)) = schedule.release(trace, n) else {
                break;
            };
            n += 1;
            if let Pace::Timed { .. } = schedule.pace {
                while shared.now_ns().saturating_sub(t0) < at {
                    std::hint::spin_loop();
                }
            }
            st.offered += 1;
            st.bytes += u64::from(trace.orig_len(i)) + u64::from(trace::FCS_LEN);
            let now = shared.now_ns();
            let mut p = match Packet::new(trace.frame(i).to_vec(), now, hasher) {
                Ok(p) => p,
                Err((_, m)) => {
                    st.malformed[m as usize] += 1;
                    continue;
                }
            };
            // a looped replay marks its lap in the sequence tag (see wire::seqtag)
            let lap = n.saturating_sub(1) / trace.len() as u64;
            if lap > 0 {
                let info = p.info;
                wire::seqtag::relap(&mut p.data, &info, lap as u8);
            }
            let q = if spray {
                // Sprayer: the bucket from a non-flow field (the L4 checksum, as
                // Sprayer does; the packet's number otherwise)
                let b = spray_hash(&p, n) as usize % shared.table.len();
                usize::from(shared.table.get(b))
            } else {
                usize::from(shared.table.queue_of(p.hash))
            };
            loop {
                match queues[q].push(p) {
                    Ok(()) => break,
                    Err(rtrb::PushError::Full(back)) => {
                        if let Pace::Timed { .. } = schedule.pace {
                            st.ring_full += 1;
                            break;
                        }
                        if shared.aborted() {
                            shared.finish_feeding();
                            return st;
                        }
                        p = back;
                        std::thread::yield_now();
                    }
                }
            }
        }
        // every packet steered with a table of version ≤ v is in its ring now
        shared.ack_version(v);
    }
    st.duration_ns = shared.now_ns() - t0;
    shared.finish_feeding();
    st
}

/// A hash of a field that is not part of the flow: the TCP or UDP checksum, or the
/// packet's number when there is none.
fn spray_hash(p: &Packet, n: u64) -> u32 {
    let at = p.info.l4_offset as usize;
    let field = match p.info.tuple.proto {
        wire::proto::TCP => p.data.get(at + 16..at + 18),
        wire::proto::UDP => p.data.get(at + 6..at + 8),
        _ => None,
    };
    let x = match field {
        Some(b) => u64::from(u16::from_be_bytes([b[0], b[1]])) ^ (n << 16),
        None => n,
    };
    (x.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32) as u32
}
