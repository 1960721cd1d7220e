//! The NIC model's parse-and-hash stage on several threads (`nic_threads`):
//! parser *j* of *k* takes bursts *j*, *j + k*, *j + 2k*, … of the replay,
//! copies each frame into a buffer, parses and hashes it, and hands the burst
//! over through its own ring; the NIC-model thread takes the bursts in turn,
//! so in replay order, and only steers them by the live indirection table.
//! What the table decides, and the version protocol of shard moves, stay on
//! that one thread; a flow's packets reach their core in order.

use std::sync::atomic::{AtomicBool, Ordering};

use nf::Packet;
use rtrb::{Consumer, Producer, RingBuffer};
use steer::RssHasher;
use trace::{Schedule, Trace};
use wire::Malformed;

use crate::feeder::Buffers;

/// One frame of the replay, parsed and hashed.
pub(crate) struct Parsed {
    /// Its index in the trace.
    pub index: usize,
    /// When the schedule releases it (ns from the start).
    pub at: u64,
    /// The packet (its `ts_ns` is set when it is steered), or why it is
    /// malformed.
    pub pkt: Result<Packet, Malformed>,
}

/// The NIC-model thread's ends: parser `j`'s bursts, and the emptied burst
/// vectors going back to it.
pub(crate) struct Ends<'scope> {
    pub bursts: Consumer<Vec<Parsed>>,
    pub empties: Producer<Vec<Parsed>>,
    /// The parser's thread: a burst it owes will never come once it has
    /// ended (a panic, which the scope then raises).
    pub thread: std::thread::ScopedJoinHandle<'scope, ()>,
}

/// Bursts a parser may have parsed ahead of the NIC-model thread.
const AHEAD: usize = 16;

/// What every parser shares.
pub(crate) struct Job<'a> {
    pub trace: &'a Trace,
    pub hasher: &'a RssHasher,
    pub schedule: Schedule,
    pub burst: usize,
    /// Packets in the replay.
    pub total: u64,
    /// Set by the NIC-model thread when it stops taking bursts.
    pub done: &'a AtomicBool,
}

/// Starts `buffers.len()` parsers on `sc`, parser `j` with buffers `buffers[j]`.
pub(crate) fn start<'scope, 'env: 'scope>(
    sc: &'scope std::thread::Scope<'scope, 'env>,
    job: &'env Job<'env>,
    buffers: Vec<Buffers>,
) -> Vec<Ends<'scope>> {
    let k = buffers.len();
    buffers
        .into_iter()
        .enumerate()
        .map(|(j, mut bufs)| {
            let (mut out, bursts) = RingBuffer::new(AHEAD);
            let (empties, mut back) = RingBuffer::new(AHEAD + 1);
            let thread = std::thread::Builder::new()
                .name(format!("nic-parse-{j}"))
                .spawn_scoped(sc, move || {
                    let mut b = j as u64;
                    loop {
                        let first = b * job.burst as u64;
                        if first >= job.total {
                            return;
                        }
                        let mut v: Vec<Parsed> = back.pop().unwrap_or_default();
                        v.clear();
                        for n in first..(first + job.burst as u64).min(job.total) {
                            let Some((index, at)) = job.schedule.release(job.trace, n) else {
                                break;
                            };
                            v.push(Parsed {
                                index,
                                at,
                                pkt: parse(job, &mut bufs, index, n),
                            });
                        }
                        // (spins while the NIC-model thread is `AHEAD` bursts
                        // behind; leaves when it has stopped taking them)
                        while let Err(rtrb::PushError::Full(x)) = out.push(v) {
                            // Acquire: pairs with the NIC-model thread's Release
                            // store when it stops.
                            if job.done.load(Ordering::Acquire) {
                                return;
                            }
                            v = x;
                            std::thread::yield_now();
                        }
                        b += k as u64;
                    }
                })
                .expect("a thread for a NIC-model parser");
            Ends {
                bursts,
                empties,
                thread,
            }
        })
        .collect()
}

/// Frame `index` of the trace, released as the replay's `n`-th packet
/// (0-based): copied, parsed, hashed, its lap marked.
fn parse(job: &Job<'_>, bufs: &mut Buffers, index: usize, n: u64) -> Result<Packet, Malformed> {
    let mut p =
        Packet::new(bufs.copy(job.trace.frame(index)), 0, job.hasher).map_err(|(_, m)| m)?;
    // a looped replay marks its lap in the sequence tag (see wire::seqtag)
    let lap = n / job.trace.len() as u64;
    if lap > 0 {
        let info = p.info;
        wire::seqtag::relap(&mut p.data, &info, lap as u8);
    }
    Ok(p)
}
