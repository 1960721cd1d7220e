//! An operator's link to a running run's cores (`flowshift ctl`): a filter
//! on a flow's tuples, a flow entry as a row, and the [`Control`] through
//! which a control thread asks every working core for the entries of the
//! shards it owns — and deletes them when asked — or has every core swap NFs
//! for newly configured ones (a live reload). A core answers between two
//! bursts, so a question never stops the packet path for longer than one
//! walk over the core's tables; a shard in transit between two cores at that
//! instant is asked again until every shard has answered.

use std::net::IpAddr;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use wire::FiveTuple;

/// A flow's tuple in one direction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tuple {
    /// IP protocol number.
    pub proto: u8,
    /// Source address.
    pub src: IpAddr,
    /// Source port (ICMP echo: the identifier).
    pub sport: u16,
    /// Destination address.
    pub dst: IpAddr,
    /// Destination port.
    pub dport: u16,
}

impl From<&FiveTuple> for Tuple {
    fn from(t: &FiveTuple) -> Tuple {
        Tuple {
            proto: t.proto,
            src: t.src,
            sport: t.src_port,
            dst: t.dst,
            dport: t.dst_port,
        }
    }
}

impl std::fmt::Display for Tuple {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let proto = match self.proto {
            6 => "tcp".to_string(),
            17 => "udp".to_string(),
            1 => "icmp".to_string(),
            58 => "icmpv6".to_string(),
            p => format!("proto {p}"),
        };
        let ep = |a: IpAddr, p: u16| match a {
            IpAddr::V4(a) => format!("{a}:{p}"),
            IpAddr::V6(a) => format!("[{a}]:{p}"),
        };
        write!(
            f,
            "{proto} {} -> {}",
            ep(self.src, self.sport),
            ep(self.dst, self.dport)
        )
    }
}

/// One NF's part of a flow, as a row shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NfRow {
    /// The NF's name in the chain.
    pub nf: String,
    /// Its per-flow state (none: it keeps none for this flow).
    pub state: Option<String>,
    /// Milliseconds before the state expires unless a packet refreshes it.
    pub timeout_ms: Option<u64>,
}

/// A flow entry, as `ctl flows` lists it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlowRow {
    /// The working core that owns the flow's shard.
    pub core: usize,
    /// The flow's shard.
    pub shard: usize,
    /// The tuple of the packet that created the entry.
    pub orig: Tuple,
    /// The original direction's tuple as it left the chain (a NAT's mapping).
    pub translated: Option<Tuple>,
    /// The tuple answers carry on the wire (the translated one reversed).
    pub reply: Tuple,
    /// Both directions were seen.
    pub assured: bool,
    /// Milliseconds since the flow's last packet, when one has left.
    pub idle_ms: Option<u64>,
    /// Milliseconds since the flow's entry was made.
    #[serde(default)]
    pub age_ms: u64,
    /// The flow's NF states are with an offloading core at the moment.
    pub offloaded: bool,
    /// One per NF of the chain.
    pub nfs: Vec<NfRow>,
}

impl FlowRow {
    /// The row of an entry of `shard`, owned by `core`.
    pub fn new(core: usize, shard: usize, v: &nf::EntryView) -> FlowRow {
        FlowRow {
            core,
            shard,
            orig: Tuple::from(&v.orig),
            translated: v.translated.as_ref().map(Tuple::from),
            reply: Tuple::from(&v.translated.unwrap_or(v.orig).reversed()),
            assured: v.assured,
            idle_ms: v.idle_ns.map(|n| n / 1_000_000),
            age_ms: v.age_ns / 1_000_000,
            offloaded: v.offloaded,
            nfs: v
                .nfs
                .iter()
                .map(|n| NfRow {
                    nf: n.nf.clone(),
                    state: n.state.clone(),
                    timeout_ms: (n.left_ns > 0).then(|| n.left_ns.div_ceil(1_000_000)),
                })
                .collect(),
        }
    }
}

/// An address prefix of a filter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Prefix {
    addr: IpAddr,
    len: u8,
}

impl Prefix {
    fn parse(s: &str) -> Result<Prefix, String> {
        let (a, len) = match s.split_once('/') {
            Some((a, l)) => (a, Some(l)),
            None => (s, None),
        };
        let addr: IpAddr = a.parse().map_err(|_| format!("`{s}` is not an address"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let len = match len {
            None => max,
            Some(l) => l
                .parse::<u8>()
                .ok()
                .filter(|l| *l <= max)
                .ok_or_else(|| format!("`{s}`: a prefix length is 0..={max}"))?,
        };
        Ok(Prefix { addr, len })
    }

    fn holds(&self, a: IpAddr) -> bool {
        let bits = |a: IpAddr| match a {
            IpAddr::V4(a) => (u128::from(u32::from(a)) << 96, 32u8),
            IpAddr::V6(a) => (u128::from(a), 128u8),
        };
        let ((p, pw), (x, xw)) = (bits(self.addr), bits(a));
        if pw != xw {
            return false;
        }
        let keep = u32::from(self.len);
        keep == 0 || (p ^ x) >> (128 - keep) == 0
    }
}

/// Which flows a request is about: every term must hold for the flow's
/// original tuple or for its translated one (so a NAT's flow is found by
/// the inside address and by the mapped one). Written as terms separated by
/// spaces: `tcp`, `udp`, `icmp`, `proto=N`, `src=ADDR[/LEN]`,
/// `dst=ADDR[/LEN]`, `sport=N`, `dport=N`; none: every flow.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlowFilter {
    proto: Option<u8>,
    src: Option<Prefix>,
    dst: Option<Prefix>,
    sport: Option<u16>,
    dport: Option<u16>,
}

impl FlowFilter {
    /// Parses the terms (see the type's documentation).
    pub fn parse(s: &str) -> Result<FlowFilter, String> {
        let mut f = FlowFilter::default();
        for term in s.split_whitespace() {
            let port = |v: &str| {
                v.parse::<u16>()
                    .map_err(|_| format!("`{term}`: a port is 0..=65535"))
            };
            match term.split_once('=') {
                None => {
                    f.proto = Some(match term {
                        "tcp" => 6,
                        "udp" => 17,
                        "icmp" => 1,
                        "icmpv6" => 58,
                        _ => return Err(unknown(term)),
                    })
                }
                Some(("proto", v)) => {
                    f.proto = Some(
                        v.parse()
                            .map_err(|_| format!("`{term}`: a protocol is 0..=255"))?,
                    )
                }
                Some(("src", v)) => f.src = Some(Prefix::parse(v)?),
                Some(("dst", v)) => f.dst = Some(Prefix::parse(v)?),
                Some(("sport", v)) => f.sport = Some(port(v)?),
                Some(("dport", v)) => f.dport = Some(port(v)?),
                Some(_) => return Err(unknown(term)),
            }
        }
        Ok(f)
    }

    /// True when the filter has no term (every flow).
    pub fn is_empty(&self) -> bool {
        *self == FlowFilter::default()
    }

    fn holds(&self, t: &FiveTuple) -> bool {
        self.proto.is_none_or(|p| p == t.proto)
            && self.src.is_none_or(|p| p.holds(t.src))
            && self.dst.is_none_or(|p| p.holds(t.dst))
            && self.sport.is_none_or(|p| p == t.src_port)
            && self.dport.is_none_or(|p| p == t.dst_port)
    }

    /// True when the filter holds for a flow's original tuple or its
    /// translated one.
    pub fn matches(&self, orig: &FiveTuple, translated: Option<&FiveTuple>) -> bool {
        self.holds(orig) || translated.is_some_and(|t| self.holds(t))
    }
}

fn unknown(term: &str) -> String {
    format!(
        "unknown filter term `{term}` (terms: tcp, udp, icmp, icmpv6, proto=N, src=ADDR[/LEN], \
         dst=ADDR[/LEN], sport=N, dport=N)"
    )
}

/// A question to one working core.
#[derive(Debug)]
pub struct Query {
    /// Which flows.
    pub filter: FlowFilter,
    /// Delete them (their states released as expiry releases them).
    pub delete: bool,
    /// Skip the shards already answered for (a question asked again for
    /// the shards that were in transit).
    pub done: Vec<bool>,
    /// Per shard, the entry slot its walk goes on from (a table is walked a
    /// bounded piece at a time: entries never change slots).
    pub cursor: Vec<u32>,
    /// Entries a core walks for this question at most, over its shards.
    pub budget: usize,
    /// Rows wanted at most (matching flows beyond are counted only).
    pub rows_left: usize,
    /// Where the core answers.
    pub reply: mpsc::Sender<CoreAnswer>,
}

/// One working core's answer.
#[derive(Debug, Default)]
pub struct CoreAnswer {
    /// The shards it holds: each walked to its end (`None`), or the slot
    /// the walk goes on from.
    pub shards: Vec<(usize, Option<u32>)>,
    /// Its matching flows (up to the rows wanted).
    pub rows: Vec<FlowRow>,
    /// Its matching flows, listed or not.
    pub matched: u64,
    /// Flows it deleted.
    pub deleted: u64,
    /// Matching flows it could not delete: their states were with an
    /// offloading core.
    pub offloaded: u64,
}

/// Every core's answer to one request.
#[derive(Debug, Default)]
pub struct Answer {
    /// The matching flows, by shard (at most the rows asked for).
    pub rows: Vec<FlowRow>,
    /// Every matching flow, listed or not.
    pub matched: u64,
    /// Flows deleted.
    pub deleted: u64,
    /// Matching flows not deleted (offloaded at the moment; ask again).
    pub offloaded: u64,
}

/// Swap NFs of a core's chain for newly configured ones.
pub struct Reload {
    /// The new chain, an instance for this core.
    pub chain: Box<nf::Chain>,
    /// Which of its NFs replace the running ones (their configuration; the
    /// running ones' state and counters stay).
    pub nfs: Vec<usize>,
    /// Where the core says it did.
    pub reply: mpsc::Sender<Result<(), String>>,
}

impl std::fmt::Debug for Reload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Reload {:?}", self.nfs)
    }
}

/// What the control thread asks of a core.
#[derive(Debug)]
pub enum Order {
    /// A question about its flows (working cores).
    Query(Query),
    /// A live reload (every core).
    Reload(Reload),
}

/// Delivers an order to one core (its inbox).
pub type Deliver = Box<dyn Fn(Order) -> bool + Send + Sync>;

/// The cores a run attached: working, offloading, and the number of shards.
type Attached = (Vec<Deliver>, Vec<Deliver>, usize);

/// The rendezvous between a control thread and a run's working cores. The
/// run attaches one [`Deliver`] per working core when its cores start and
/// detaches them when they stop.
#[derive(Default)]
pub struct Control {
    cores: Mutex<Option<Arc<Attached>>>,
}

impl std::fmt::Debug for Control {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Control")
    }
}

/// A core's inbox is gone: its loop has ended.
const STOPPING: &str = "the run is stopping: its cores no longer answer";

/// How long a request waits for the cores (a core answers between bursts).
const WAIT: Duration = Duration::from_secs(5);

impl Control {
    /// The run's working cores, its offloading cores, and its number of
    /// shards.
    pub fn attach(&self, working: Vec<Deliver>, offloading: Vec<Deliver>, shards: usize) {
        *self.cores.lock().unwrap_or_else(|e| e.into_inner()) =
            Some(Arc::new((working, offloading, shards)));
    }

    /// Every core swaps the NFs `nfs` of its chain for those of `chain`
    /// (each core an instance of it), between two bursts; returns once every
    /// core has (the number of cores).
    pub fn reload(&self, chain: &nf::Chain, nfs: &[usize]) -> Result<usize, String> {
        let attached = self.attached()?;
        let (working, offloading, _) = attached.as_ref();
        let (tx, rx) = mpsc::channel();
        let mut asked = 0;
        for deliver in working.iter().chain(offloading) {
            let r = Reload {
                chain: Box::new(chain.instance()),
                nfs: nfs.to_vec(),
                reply: tx.clone(),
            };
            if !deliver(Order::Reload(r)) {
                return Err(STOPPING.into());
            }
            asked += 1;
        }
        drop(tx);
        let until = Instant::now() + WAIT;
        for k in 0..asked {
            let left = until.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return Err(e),
                Err(_) => {
                    return Err(format!(
                        "{} of {asked} cores did not take the new configuration within {WAIT:?}",
                        asked - k
                    ))
                }
            }
        }
        Ok(asked)
    }

    /// The cores attached now (a copy of the list: a question in progress
    /// never holds up the run's end, which detaches them).
    fn attached(&self) -> Result<Arc<Attached>, String> {
        self.cores
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .ok_or_else(|| "the run's cores are not running (starting or stopping)".to_string())
    }

    /// The run's cores have stopped.
    pub fn detach(&self) {
        *self.cores.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// Asks every working core; a shard that moved between cores while they
    /// answered is asked for again until every shard has answered once.
    pub fn ask(&self, filter: &FlowFilter, delete: bool, limit: usize) -> Result<Answer, String> {
        let attached = self.attached()?;
        let (cores, _, shards) = attached.as_ref();
        let mut done = vec![false; *shards];
        let mut cursor = vec![0u32; *shards];
        let mut answer = Answer::default();
        let mut since = Instant::now();
        while done.iter().any(|d| !d) {
            if since.elapsed() > WAIT {
                let missing = done.iter().filter(|d| !**d).count();
                return Err(format!(
                    "{missing} shard(s) did not answer within {WAIT:?} (a core is stuck or the run is stopping)"
                ));
            }
            let (tx, rx) = mpsc::channel();
            let mut asked = 0;
            for deliver in cores {
                let q = Query {
                    filter: filter.clone(),
                    delete,
                    done: done.clone(),
                    cursor: cursor.clone(),
                    budget: WALK,
                    rows_left: limit.saturating_sub(answer.rows.len()),
                    reply: tx.clone(),
                };
                if !deliver(Order::Query(q)) {
                    return Err(STOPPING.into());
                }
                asked += 1;
            }
            drop(tx);
            let mut heard = vec![false; *shards];
            for _ in 0..asked {
                let Ok(a) = rx.recv_timeout(WAIT) else { break };
                for (s, next) in a.shards.into_iter().filter(|(s, _)| *s < *shards) {
                    heard[s] = true;
                    match next {
                        None => done[s] = true,
                        Some(c) => cursor[s] = c,
                    }
                }
                answer.rows.extend(a.rows);
                answer.matched += a.matched;
                answer.deleted += a.deleted;
                answer.offloaded += a.offloaded;
            }
            if heard.iter().zip(&done).all(|(h, d)| *h || *d) {
                // every shard answered: the walk moved on
                since = Instant::now();
            } else {
                // a shard in transit between two cores: ask again shortly
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        answer.rows.truncate(limit);
        answer.rows.sort_by_key(|r| r.shard);
        Ok(answer)
    }
}

/// Entries a core walks per question (one pause of the packet path: about
/// a fifth of a millisecond, more for the flows that match and are listed).
pub const WALK: usize = 4096;

#[cfg(test)]
mod tests {
    use super::*;

    fn t(src: [u8; 4], sp: u16, dst: [u8; 4], dp: u16) -> FiveTuple {
        FiveTuple {
            src: src.into(),
            dst: dst.into(),
            src_port: sp,
            dst_port: dp,
            proto: 6,
        }
    }

    #[test]
    fn terms_hold_on_either_tuple() {
        let f = FlowFilter::parse("tcp src=10.0.0.0/8 dport=80").unwrap();
        assert!(f.holds(&t([10, 1, 2, 3], 999, [1, 1, 1, 1], 80)));
        assert!(!f.holds(&t([11, 1, 2, 3], 999, [1, 1, 1, 1], 80)));
        assert!(!f.holds(&t([10, 1, 2, 3], 999, [1, 1, 1, 1], 81)));
        let v6 = FlowFilter::parse("src=2001:db8::/32").unwrap();
        let mut x = t([10, 1, 2, 3], 1, [1, 1, 1, 1], 2);
        assert!(!v6.holds(&x), "an IPv4 address is not in an IPv6 prefix");
        x.src = "2001:db8::7".parse().unwrap();
        assert!(v6.holds(&x));
        assert!(FlowFilter::parse("").unwrap().is_empty());
        assert!(FlowFilter::parse("src=0.0.0.0/0").unwrap().holds(&t(
            [9, 9, 9, 9],
            1,
            [1, 1, 1, 1],
            2
        )));
    }

    #[test]
    fn bad_terms_are_named() {
        for (s, says) in [
            ("port=80", "unknown filter term `port=80`"),
            ("sctp", "unknown filter term `sctp`"),
            ("dport=70000", "a port is 0..=65535"),
            ("src=10.0.0.0/33", "a prefix length is 0..=32"),
            ("dst=example.org", "is not an address"),
        ] {
            let e = FlowFilter::parse(s).unwrap_err();
            assert!(e.contains(says), "{s}: {e}");
        }
    }

    #[test]
    fn shards_in_transit_are_asked_again_and_nothing_counts_twice() {
        // two cores over four shards; shard 3 is in transit at the first
        // question and arrives at core 1 for the second
        let i = Control::default();
        let asked = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let core = |me: usize| -> Deliver {
            let asked = asked.clone();
            Box::new(move |o: Order| {
                let Order::Query(q) = o else { return false };
                let round = asked.fetch_add(1, std::sync::atomic::Ordering::Relaxed) / 2;
                let mut owned = if me == 0 { vec![0, 1] } else { vec![2] };
                if me == 1 && round > 0 {
                    owned.push(3);
                }
                owned.retain(|s| !q.done[*s]);
                let deleted = if q.delete { owned.len() as u64 } else { 0 };
                let _ = q.reply.send(CoreAnswer {
                    shards: owned.into_iter().map(|s| (s, None)).collect(),
                    deleted,
                    ..CoreAnswer::default()
                });
                true
            })
        };
        assert!(
            i.ask(&FlowFilter::default(), false, 10).is_err(),
            "not attached"
        );
        i.attach(vec![core(0), core(1)], Vec::new(), 4);
        let a = i.ask(&FlowFilter::default(), true, 10).unwrap();
        assert_eq!(a.deleted, 4, "each shard once");
        assert_eq!(asked.load(std::sync::atomic::Ordering::Relaxed), 4);
        i.detach();
        assert!(i.ask(&FlowFilter::default(), false, 10).is_err());
    }
}

#[cfg(test)]
mod walk_tests {
    use super::*;

    #[test]
    fn a_long_walk_goes_on_from_its_cursor_until_every_shard_is_done() {
        // one core, one shard of 10 000 entries, 4 096 walked per question;
        // rows beyond the limit are counted only
        let i = Control::default();
        let asked = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let log = asked.clone();
        let core: Deliver = Box::new(move |o: Order| {
            let Order::Query(q) = o else { return false };
            let from = q.cursor[0];
            log.lock().unwrap().push(from);
            let to = (from as usize + q.budget).min(10_000) as u32;
            let next = (to < 10_000).then_some(to);
            let _ = q.reply.send(CoreAnswer {
                shards: vec![(0, next)],
                matched: u64::from(to - from),
                ..CoreAnswer::default()
            });
            true
        });
        i.attach(vec![core], Vec::new(), 1);
        let a = i.ask(&FlowFilter::default(), false, 5).unwrap();
        assert_eq!(a.matched, 10_000);
        assert_eq!(*asked.lock().unwrap(), [0, 4096, 8192]);
    }
}

#[cfg(test)]
mod stop_tests {
    use super::*;

    #[test]
    fn a_question_to_stopped_cores_ends_at_once_and_never_holds_up_the_end() {
        let i = Arc::new(Control::default());
        // a core that has stopped: its inbox is gone
        let gone: Deliver = Box::new(|_| false);
        // a core that never answers, holding the question
        let (keep, held) = mpsc::channel();
        let keep = Mutex::new(keep);
        let silent: Deliver = Box::new(move |o| keep.lock().unwrap().send(o).is_ok());
        i.attach(vec![gone], Vec::new(), 1);
        let t = Instant::now();
        let e = i.ask(&FlowFilter::default(), false, 1).unwrap_err();
        assert!(
            e.contains("stopping") && t.elapsed() < Duration::from_secs(1),
            "{e}"
        );
        // while a question waits on the silent core, the run's end detaches
        i.attach(vec![silent], Vec::new(), 1);
        let asking = {
            let i = i.clone();
            std::thread::spawn(move || i.ask(&FlowFilter::default(), false, 1))
        };
        std::thread::sleep(Duration::from_millis(50));
        let t = Instant::now();
        i.detach();
        assert!(t.elapsed() < Duration::from_millis(500), "detach waited");
        drop(held);
        assert!(asking.join().unwrap().is_err());
    }
}
