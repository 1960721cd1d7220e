//! The NIC model on its own thread: take packets from a replayed trace or from
//! interfaces, hash, steer through the live indirection table, enqueue.

use std::sync::Arc;

use crate::buffers::Buffers;

use nf::Packet;
use rtrb::Producer;
use steer::RssHasher;
use trace::{Pace, Schedule, Trace};

use crate::replay::Chunks;
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
    /// Spent parsing and hashing the trace before the first offer (with
    /// `presteer`), ns: not part of the run's time.
    pub prep_ns: u64,
    /// Frames an interface's socket dropped before flowshift read them (its
    /// buffer was full).
    pub rx_overflow: u64,
    /// Frames still waiting in an interface's socket when the run stopped:
    /// read, counted in `offered`, and dropped.
    pub unread_at_stop: u64,
    /// What a streamed replay's reader read.
    pub streamed: Option<crate::replay::Streamed>,
    /// Replica messages from this node's primaries (in `offered`).
    pub replicas_in: u64,
    /// Bulk-sync copies received (not packets: not in `offered`), and those
    /// refused because their core's ring was full (not acknowledged: their
    /// sender sends them again).
    pub sync_in: u64,
    pub sync_refused: u64,
    /// Frames a spilling node steered here (spill-over), taken in as if
    /// they came in by their port.
    pub steered_in: u64,
    /// Datagrams at the replication port that were not replica messages.
    pub replica_bad: u64,
    /// Times the pair heartbeats found this node's secondary lost, and the
    /// primary it backs up.
    pub secondary_lost: u64,
    pub primary_lost: u64,
    /// Replica messages the kernel dropped at the replication port (its
    /// buffer full): lost packets, counted in `offered` and `rx_overflow`.
    pub replicas_dropped: u64,
    /// Datagrams at the replication port refused unopened (malformed, a bad
    /// tag, stale, replayed: `pool::auth::Refused::ALL`'s order).
    pub replica_refused: [u64; 4],
}

/// The NIC model's arrival stamps: the time a packet was steered, made
/// strictly increasing, so that two packets of a flow never share one and
/// its exit order can be checked against them
/// ([`state::FlowTable::exit_in_order`]).
#[derive(Debug, Default)]
pub(crate) struct Arrivals {
    last: u64,
}

impl Arrivals {
    /// The next packet's stamp: now, or just after the last stamp.
    #[inline]
    pub fn stamp(&mut self, shared: &Shared) -> u64 {
        let t = shared.now_ns().max(self.last + 1);
        self.last = t;
        t
    }
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
    /// Ends the feed early when set.
    pub stop: Option<runspec::Stop>,
    /// Where live metrics go.
    pub metrics: Option<Arc<runspec::metrics::Metrics>>,
    /// Parse and hash the trace before the clock starts
    /// ([`runspec::RunConfig::presteer`]).
    pub presteer: bool,
    /// Packet buffers the cores have given back.
    pub buffers: Buffers,
    /// Threads that parse and hash bursts for the NIC-model thread
    /// ([`runspec::RunConfig::nic_threads`]); 1: it does it itself.
    pub nic_threads: usize,
}

/// A packet with `template`'s parse and hash (a pre-steered frame) in `data`.
fn from_template(template: &Packet, data: Vec<u8>, now: u64) -> Packet {
    Packet {
        data,
        info: template.info,
        hash: template.hash,
        ts_ns: now,
        entry: None,
        dir: template.dir,
        port: template.port,
        hairpin: false,
    }
}

/// Publishes the NIC model's counters every `PUBLISH_NS`.
struct Publisher {
    next: u64,
    to: Option<Arc<runspec::metrics::Metrics>>,
}

const PUBLISH_NS: u64 = 10_000_000;

impl Publisher {
    fn tick(&mut self, now: u64, st: &FeederStats) {
        let Some(m) = &self.to else { return };
        if now < self.next {
            return;
        }
        self.next = now + PUBLISH_NS;
        m.publish_nic(vec![
            ("offered", st.offered),
            ("ring_full", st.ring_full),
            ("malformed", st.malformed.iter().sum()),
            ("rx_overflow", st.rx_overflow),
        ]);
    }
}

/// What the NIC model replays.
pub(crate) enum Replay<'a> {
    /// A trace in memory.
    Memory(&'a Trace),
    /// A source read as it goes by a reader thread.
    Stream(Box<dyn trace::Source>),
}

pub(crate) fn feed(
    replay: Replay<'_>,
    hasher: &RssHasher,
    shared: &Arc<Shared>,
    queues: Vec<Producer<Packet>>,
    opts: FeedOptions,
) -> FeederStats {
    let publisher = Publisher {
        next: 0,
        to: opts.metrics.clone(),
    };
    let parsers = if opts.nic_threads > 1 && !opts.presteer {
        opts.nic_threads
    } else {
        1
    };
    let (schedule, burst) = (opts.schedule, opts.burst.max(1));
    let (trace, source) = match replay {
        Replay::Memory(t) => (Some(t), None),
        Replay::Stream(s) => (None, Some(s)),
    };
    std::thread::scope(|sc| {
        let (chunks, reader) = match (trace, source) {
            (Some(t), _) => (
                (0..parsers)
                    .map(|_| Chunks::memory(t, schedule, burst))
                    .collect::<Vec<_>>(),
                None,
            ),
            (None, Some(source)) => {
                let reader = crate::replay::Reader::new(source, schedule, burst);
                // at full speed one NIC-model thread reads for itself: on a
                // machine whose cores are all busy a reader thread beside it
                // only adds hand-overs (measured 0.93× against 1.02× of the
                // in-memory rate); a timed replay keeps its reads off the
                // release times, and parsers share the chunks
                if parsers == 1 && matches!(schedule.pace, Pace::Max) {
                    (vec![Chunks::Inline(Box::new(reader), shared)], None)
                } else {
                    let (tx, rx) = crate::replay::channels(parsers);
                    let shared = &**shared;
                    let reader = std::thread::Builder::new()
                        .name("nic-read".into())
                        .spawn_scoped(sc, move || crate::replay::read(reader, tx, shared))
                        .expect("a thread for the replay's reader");
                    (rx.into_iter().map(Chunks::Read).collect(), Some(reader))
                }
            }
            (None, None) => unreachable!("a replay has a trace or a source"),
        };
        let mut st = if parsers > 1 {
            feed_parsed(chunks, hasher, shared, queues, opts, publisher)
        } else {
            let chunks = chunks.into_iter().next().expect("one consumer");
            feed_one(chunks, trace, hasher, shared, queues, opts, publisher)
        };
        // (the reader leaves once its consumers have gone)
        if let Some(r) = reader {
            st.streamed = Some(r.join().expect("the replay's reader"));
        }
        shared.finish_feeding();
        st
    })
}

/// [`feed`] on this thread alone: parse, hash, pace and steer.
fn feed_one(
    mut chunks: Chunks<'_>,
    trace: Option<&Trace>,
    hasher: &RssHasher,
    shared: &Arc<Shared>,
    mut queues: Vec<Producer<Packet>>,
    opts: FeedOptions,
    mut publisher: Publisher,
) -> FeederStats {
    let FeedOptions {
        schedule,
        burst,
        duration_ns,
        spray,
        stop,
        mut buffers,
        ..
    } = opts;
    let mut st = FeederStats::default();
    // the NIC model's parse and hash done once per frame, before the clock
    let prep0 = shared.now_ns();
    let pre: Option<Vec<Result<Packet, Malformed>>> =
        trace.filter(|_| opts.presteer).map(|trace| {
            (0..trace.len())
                .map(|i| {
                    Packet::new_fragmentable(trace.frame(i).to_vec(), 0, hasher)
                        .map(|mut p| {
                            // the template's parse and hash are kept; its bytes are
                            // copied from the trace into a buffer when offered
                            p.data = Vec::new();
                            p
                        })
                        .map_err(|(_, m)| m)
                })
                .collect()
        });
    let mut arrivals = Arrivals::default();
    let mut fragments = crate::fragments::Fragments::default();
    let t0 = shared.now_ns();
    st.prep_ns = t0 - prep0;
    let timed = matches!(schedule.pace, Pace::Timed { .. });
    'feed: while let Some(chunk) = chunks.next() {
        let mut j = 0;
        while j < chunk.len() {
            if duration_ns.is_some_and(|d| shared.now_ns() - t0 >= d)
                || stop.as_ref().is_some_and(|s| s.is_set())
            {
                break 'feed;
            }
            let v = shared.version();
            let end = (j + burst.max(1)).min(chunk.len());
            for k in j..end {
                let n = chunk.first + k as u64 + 1;
                if timed && !wait_until(shared, t0, chunk.at(k), stop.as_ref()) {
                    break 'feed;
                }
                st.offered += 1;
                st.bytes += chunk.wire_len(k);
                let now = arrivals.stamp(shared);
                let frame = chunk.frame(k);
                let parsed = match (&pre, chunk.trace_index(k)) {
                    (Some(pre), Some(i)) => match &pre[i] {
                        Ok(t) => Ok(from_template(t, buffers.copy(frame), now)),
                        Err(m) => Err(*m),
                    },
                    _ => Packet::new_fragmentable(buffers.copy(frame), now, hasher)
                        .map_err(|(_, m)| m),
                };
                let mut p = match parsed {
                    Ok(p) => p,
                    Err(m) => {
                        st.malformed[m as usize] += 1;
                        continue;
                    }
                };
                // a looped replay marks its lap in the sequence tag (see wire::seqtag)
                if chunk.lap > 0 && !p.info.fragment {
                    let info = p.info;
                    wire::seqtag::relap(&mut p.data, &info, chunk.lap as u8);
                }
                let (q, full) = (&mut queues, &mut st.ring_full);
                if !fragments.pass(p, hasher, &mut st.malformed, |p| {
                    enqueue(p, n, spray, !timed, shared, q, full)
                }) {
                    fragments.finish(&mut st.malformed);
                    st.streamed = chunks.streamed();
                    return st;
                }
            }
            j = end;
            // every packet steered with a table of version ≤ v is in its ring now
            shared.ack_version(v);
            publisher.tick(shared.now_ns(), &st);
        }
    }
    fragments.finish(&mut st.malformed);
    st.duration_ns = shared.now_ns() - t0;
    st.streamed = chunks.streamed();
    st
}

/// [`feed`] with `opts.nic_threads` parsers ([`crate::parsers`]), each
/// taking the chunks from its own `chunks`: this thread takes their bursts
/// in replay order, paces, counts and steers them.
fn feed_parsed(
    chunks: Vec<Chunks<'_>>,
    hasher: &RssHasher,
    shared: &Arc<Shared>,
    mut queues: Vec<Producer<Packet>>,
    opts: FeedOptions,
    mut publisher: Publisher,
) -> FeederStats {
    let FeedOptions {
        schedule,
        burst,
        duration_ns,
        spray,
        stop,
        buffers,
        nic_threads,
        ..
    } = opts;
    let mut st = FeederStats::default();
    let done = crate::sync::AtomicBool::new(false);
    let job = crate::parsers::Job {
        hasher,
        burst: burst.max(1),
        done: &done,
    };
    let job = &job;
    std::thread::scope(|sc| {
        let mut ends = crate::parsers::start(sc, job, chunks, buffers.split(nic_threads));
        let k = ends.len();
        let wait = !matches!(schedule.pace, Pace::Timed { .. });
        let mut n = 0u64;
        let mut b = 0usize;
        let mut arrivals = Arrivals::default();
        let mut fragments = crate::fragments::Fragments::default();
        let t0 = shared.now_ns();
        'feed: loop {
            if duration_ns.is_some_and(|d| shared.now_ns() - t0 >= d)
                || stop.as_ref().is_some_and(|s| s.is_set())
            {
                break;
            }
            let e = &mut ends[b % k];
            let mut batch = loop {
                match e.bursts.pop() {
                    Ok(v) => break v,
                    Err(_) if shared.aborted() => break 'feed,
                    // (it owed this burst: it panicked, the scope says so)
                    Err(_) if e.thread.is_finished() && e.bursts.is_empty() => break 'feed,
                    // (the parser may need this CPU)
                    Err(_) => std::thread::yield_now(),
                }
            };
            b += 1;
            if batch.is_empty() {
                // (the replay released no more packets)
                break;
            }
            let v = shared.version();
            for x in batch.drain(..) {
                n += 1;
                if !wait && !wait_until(shared, t0, x.at, stop.as_ref()) {
                    break 'feed;
                }
                st.offered += 1;
                st.bytes += x.wire_len;
                let mut p = match x.pkt {
                    Ok(p) => p,
                    Err(m) => {
                        st.malformed[m as usize] += 1;
                        continue;
                    }
                };
                p.ts_ns = arrivals.stamp(shared);
                let (q, full) = (&mut queues, &mut st.ring_full);
                if !fragments.pass(p, hasher, &mut st.malformed, |p| {
                    enqueue(p, n, spray, wait, shared, q, full)
                }) {
                    break 'feed;
                }
            }
            // every packet steered with a table of version ≤ v is in its ring now
            shared.ack_version(v);
            publisher.tick(shared.now_ns(), &st);
            let _ = e.empties.push(batch);
        }
        fragments.finish(&mut st.malformed);
        st.duration_ns = shared.now_ns() - t0;
        // Release: pairs with the parsers' Acquire loads; they leave.
        done.store(true, std::sync::atomic::Ordering::Release);
    });
    st
}

/// A timed replay's wait for its next packet, due `at` ns after `t0`:
/// spinning for the last moment, sleeping before (a capture can be quiet for
/// a minute), and ending early, false, when the run is stopped (Ctrl-C) or
/// aborted.
fn wait_until(shared: &Shared, t0: u64, at: u64, stop: Option<&runspec::Stop>) -> bool {
    /// Closer than this, the wait spins (a sleep oversleeps by about as
    /// much).
    const SPIN_NS: u64 = 200_000;
    /// The longest sleep between two looks at the stop flag.
    const NAP_NS: u64 = 10_000_000;
    loop {
        let now = shared.now_ns().saturating_sub(t0);
        if now >= at {
            return true;
        }
        if stop.is_some_and(|s| s.is_set()) || shared.aborted() {
            return false;
        }
        let left = at - now;
        if left > SPIN_NS {
            std::thread::sleep(std::time::Duration::from_nanos(
                (left - SPIN_NS / 2).min(NAP_NS),
            ));
        } else {
            std::hint::spin_loop();
        }
    }
}

/// Steers `p` (the `n`-th packet) to its queue. A full queue drops and counts
/// (`wait` false, as a NIC does) or waits for room; false when the run aborted
/// while waiting.
fn enqueue(
    mut p: Packet,
    n: u64,
    spray: bool,
    wait: bool,
    shared: &Shared,
    queues: &mut [Producer<Packet>],
    ring_full: &mut u64,
) -> bool {
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
            Ok(()) => return true,
            Err(rtrb::PushError::Full(back)) => {
                if !wait {
                    *ring_full += 1;
                    shared.count_queue_drop(q);
                    return true;
                }
                if shared.aborted() {
                    return false;
                }
                p = back;
                std::thread::yield_now();
            }
        }
    }
}

/// The NIC model over interfaces: every frame received on `ports` (port i =
/// `ports[i]`), hashed and steered like a replayed one; a full queue drops and
/// counts, as a NIC does. Runs until `opts.stop` is set or `opts.duration_ns`
/// has passed.
pub(crate) fn feed_ports(
    ports: &[netio::PacketSocket],
    mut replica: Option<&mut crate::replica::ReplicaRx>,
    hasher: &RssHasher,
    shared: &Arc<Shared>,
    mut queues: Vec<Producer<Packet>>,
    mut opts: FeedOptions,
) -> FeederStats {
    let mut st = FeederStats::default();
    let mut publisher = Publisher {
        next: 0,
        to: opts.metrics.clone(),
    };
    let t0 = shared.now_ns();
    let mut batch = netio::RxBatch::new(opts.burst.min(64));
    let mut dgram = vec![0u8; 65_536];
    let mut n = 0u64;
    let mut arrivals = Arrivals::default();
    let mut fragments = crate::fragments::Fragments::default();
    let mut overflow_read = t0;
    loop {
        let now = shared.now_ns();
        let stop = opts.stop.as_ref().is_some_and(|s| s.is_set());
        if stop
            || shared.aborted()
            || shared.input_failure().is_some()
            || opts.duration_ns.is_some_and(|d| now - t0 >= d)
        {
            break;
        }
        let v = shared.version();
        let mut got = 0;
        for (port, sock) in ports.iter().enumerate() {
            let k = match sock.recv_batch(&mut batch) {
                Ok(k) => k,
                Err(e) => {
                    // e.g. the interface went away: the run ends and says why
                    shared.fail_input(format!("interface {}: receiving: {e}", sock.iface()));
                    break;
                }
            };
            for i in 0..k {
                let frame = batch.frame(i);
                got += 1;
                n += 1;
                st.offered += 1;
                st.bytes += frame.len() as u64 + u64::from(trace::FCS_LEN);
                let at = arrivals.stamp(shared);
                match Packet::new_fragmentable(opts.buffers.copy(frame), at, hasher) {
                    Ok(mut p) => {
                        p.port = port as u8;
                        let (q, full) = (&mut queues, &mut st.ring_full);
                        fragments.pass(p, hasher, &mut st.malformed, |p| {
                            enqueue(p, n, opts.spray, false, shared, q, full)
                        });
                    }
                    Err((_, m)) => st.malformed[m as usize] += 1,
                }
            }
        }
        if let Some(r) = replica.as_deref_mut() {
            r.pair_tick(shared.now_ns());
            got += replicas(
                r,
                &mut dgram,
                hasher,
                shared,
                &mut queues,
                &mut st,
                &mut n,
                &mut arrivals,
                &opts,
            );
        }
        // every packet steered with a table of version ≤ v is in its ring now
        shared.ack_version(v);
        publisher.tick(shared.now_ns(), &st);
        if got == 0 {
            // the sockets' drop counters cost a system call each: read
            // them once a millisecond, not at every empty poll
            let now = shared.now_ns();
            if now.saturating_sub(overflow_read) >= OVERFLOW_EVERY_NS {
                overflow_read = now;
                count_overflow(ports, &mut st);
                fragments.tick(shared.now_ns(), &mut st.malformed);
            }
            // nothing waiting: give the CPU back for a moment
            std::thread::sleep(std::time::Duration::from_micros(20));
        }
    }
    count_overflow(ports, &mut st);
    fragments.finish(&mut st.malformed);
    let (unread, bytes) = count_unread(ports, &mut batch);
    st.unread_at_stop += unread;
    st.offered += unread;
    st.bytes += bytes;
    if let Some(r) = replica {
        st.replica_refused = r.refused();
        st.replicas_dropped = r.dropped();
        st.secondary_lost = r.pair_lost();
        st.primary_lost = r.primary_lost();
        st.offered += st.replicas_dropped;
        st.rx_overflow += st.replicas_dropped;
    }
    st.duration_ns = shared.now_ns() - t0;
    shared.finish_feeding();
    st
}

/// Steers up to a burst of waiting replica messages like frames: each becomes
/// a packet of its frame with its entry appended and
/// [`REPLICA`](crate::carried::REPLICA) in its port. Returns how many.
#[allow(clippy::too_many_arguments)]
fn replicas(
    r: &mut crate::replica::ReplicaRx,
    dgram: &mut [u8],
    hasher: &RssHasher,
    shared: &Arc<Shared>,
    queues: &mut [Producer<Packet>],
    st: &mut FeederStats,
    n: &mut u64,
    arrivals: &mut Arrivals,
    opts: &FeedOptions,
) -> usize {
    let mut got = 0;
    while got < opts.burst {
        let (d, from) = match r.recv(dgram) {
            Ok(Some(d)) => d,
            Ok(None) => break,
            Err(e) => {
                shared.fail_input(format!("replication port: receiving: {e}"));
                break;
            }
        };
        got += 1;
        let msg = match pool::protocol::parse(d) {
            Ok(m) => m,
            Err(_) => {
                st.replica_bad += 1;
                continue;
            }
        };
        if r.pair_answer(&msg, from, shared.now_ns()) || r.control(&msg, from) {
            continue;
        }
        let (port, seq, entry, frame) = match msg {
            pool::protocol::Repr::Copy {
                port,
                seq,
                entry,
                frame,
            } if crate::protocol::copy_port(port).is_some() => (port, seq, entry, frame),
            pool::protocol::Repr::Steer { port, frame }
                if crate::protocol::copy_port(port).is_some() =>
            {
                // a frame a spilling node passed on: as if it came in here
                *n += 1;
                st.offered += 1;
                st.steered_in += 1;
                st.bytes += frame.len() as u64 + u64::from(trace::FCS_LEN);
                match Packet::new(frame.to_vec(), arrivals.stamp(shared), hasher) {
                    Ok(mut p) => {
                        p.port = port | crate::spill::STEERED;
                        enqueue(p, *n, false, false, shared, queues, &mut st.ring_full);
                    }
                    Err((_, m)) => st.malformed[m as usize] += 1,
                }
                continue;
            }
            pool::protocol::Repr::Install { seq, entry, hash } => {
                st.sync_in += 1;
                let p = crate::bulk::install_only(hash, entry, shared.now_ns());
                let q = usize::from(shared.table.queue_of(p.hash));
                if queues[q].push(p).is_ok() {
                    r.ack(from, seq);
                } else {
                    st.sync_refused += 1;
                }
                continue;
            }
            _ => {
                st.replica_bad += 1;
                continue;
            }
        };
        *n += 1;
        st.offered += 1;
        st.replicas_in += 1;
        st.bytes += frame.len() as u64 + u64::from(trace::FCS_LEN);
        match Packet::new(frame.to_vec(), arrivals.stamp(shared), hasher) {
            Ok(mut p) => {
                crate::carried::append_entry(&mut p.data, entry);
                p.port = port | crate::carried::REPLICA;
                let full = st.ring_full;
                enqueue(p, *n, false, false, shared, queues, &mut st.ring_full);
                if st.ring_full == full {
                    // queued for the core that installs it
                    r.ack(from, seq);
                }
            }
            Err((_, m)) => st.malformed[m as usize] += 1,
        }
    }
    got
}

/// How often an idle NIC-model thread reads its sockets' drop counters.
const OVERFLOW_EVERY_NS: u64 = 1_000_000;

/// Frames the sockets dropped: offered, and dropped as `rx_overflow`.
fn count_overflow(ports: &[netio::PacketSocket], st: &mut FeederStats) {
    // (a socket that cannot say fails its next receive, which ends the run)
    for n in ports.iter().filter_map(|p| p.take_drops().ok()) {
        st.rx_overflow += n;
        st.offered += n;
    }
}

/// At most this many frames are read from one socket when the run stops: the
/// sender may not have stopped.
const UNREAD_CAP: u64 = 1 << 22;

/// Frames still waiting in `socks` when the run stops, read and discarded
/// (what was there, and what arrived meanwhile, up to [`UNREAD_CAP`] a
/// socket): (frames, bytes on the wire). A socket that fails to read counts
/// what it read before.
pub(crate) fn count_unread<'a>(
    socks: impl IntoIterator<Item = &'a netio::PacketSocket>,
    batch: &mut netio::RxBatch,
) -> (u64, u64) {
    let (mut n, mut bytes) = (0, 0);
    for s in socks {
        if let Ok((k, b)) = s.discard_waiting(batch, UNREAD_CAP) {
            n += k;
            bytes += b + k * u64::from(trace::FCS_LEN);
        }
    }
    (n, bytes)
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
