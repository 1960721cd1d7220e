//! The NIC model's parse-and-hash stage on several threads (`nic_threads`):
//! parser *j* of *k* sees every chunk of the replay ([`crate::replay`]) and
//! takes bursts *j*, *j + k*, *j + 2k*, … of it,
//! copies each frame into a buffer, parses and hashes it, and hands the burst
//! over through its own ring; the NIC-model thread takes the bursts in turn,
//! so in replay order, and only steers them by the live indirection table.
//! What the table decides, and the version protocol of shard moves, stay on
//! that one thread; a flow's packets reach their core in order.

use std::sync::atomic::Ordering;

use crate::sync::AtomicBool;

use nf::Packet;
use rtrb::{Consumer, Producer, RingBuffer};
use steer::RssHasher;
use wire::Malformed;

use crate::buffers::Buffers;
use crate::replay::{Chunk, Chunks};

/// One frame of the replay, parsed and hashed.
pub(crate) struct Parsed {
    /// Its bytes on the wire.
    pub wire_len: u64,
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
    pub hasher: &'a RssHasher,
    pub burst: usize,
    /// Set by the NIC-model thread when it stops taking bursts.
    pub done: &'a AtomicBool,
}

/// Starts one parser per `chunks` on `sc`, parser `j` taking the replay's
/// chunks from `chunks[j]` and its buffers from `buffers[j]`. A parser ends
/// its bursts with an empty one.
pub(crate) fn start<'scope, 'env: 'scope>(
    sc: &'scope std::thread::Scope<'scope, 'env>,
    job: &'env Job<'env>,
    chunks: Vec<Chunks<'env>>,
    buffers: Vec<Buffers>,
) -> Vec<Ends<'scope>> {
    let k = chunks.len() as u64;
    chunks
        .into_iter()
        .zip(buffers)
        .enumerate()
        .map(|(j, (mut chunks, mut bufs))| {
            let (mut out, bursts) = RingBuffer::new(AHEAD);
            let (empties, mut back) = RingBuffer::new(AHEAD + 1);
            let thread = std::thread::Builder::new()
                .name(format!("nic-parse-{j}"))
                .spawn_scoped(sc, move || {
                    // (spins while the NIC-model thread is `AHEAD` bursts
                    // behind; false when it has stopped taking them)
                    let mut hand = |mut v: Vec<Parsed>| loop {
                        match out.push(v) {
                            Ok(()) => return true,
                            Err(rtrb::PushError::Full(x)) => {
                                // Acquire: pairs with the NIC-model thread's
                                // Release store when it stops.
                                if job.done.load(Ordering::Acquire) {
                                    return false;
                                }
                                v = x;
                                std::thread::yield_now();
                            }
                        }
                    };
                    while let Some(c) = chunks.next() {
                        let bursts = c.bursts(job.burst);
                        for local in 0..bursts {
                            if (c.first_burst + local) % k != j as u64 {
                                continue;
                            }
                            let mut v: Vec<Parsed> = back.pop().unwrap_or_default();
                            v.clear();
                            let from = local as usize * job.burst;
                            for i in from..(from + job.burst).min(c.len()) {
                                v.push(Parsed {
                                    wire_len: c.wire_len(i),
                                    at: c.at(i),
                                    pkt: parse(job, &mut bufs, &c, i),
                                });
                            }
                            if !hand(v) {
                                return;
                            }
                        }
                    }
                    hand(Vec::new());
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

/// Packet `i` of chunk `c`: copied, parsed, hashed, its lap marked.
fn parse(job: &Job<'_>, bufs: &mut Buffers, c: &Chunk<'_>, i: usize) -> Result<Packet, Malformed> {
    let mut p =
        Packet::new_fragmentable(bufs.copy(c.frame(i)), 0, job.hasher).map_err(|(_, m)| m)?;
    // a looped replay marks its lap in the sequence tag (see wire::seqtag)
    if c.lap > 0 && !p.info.fragment {
        let info = p.info;
        wire::seqtag::relap(&mut p.data, &info, c.lap as u8);
    }
    Ok(p)
}
