//! The two checks built on the step log that keep the drivers honest:
//! [`replay`] (a machine's inputs alone decide its answers and actions) and
//! [`check_drivers`] (every driver carried out every action, and nothing
//! else, in the protocol's order). Tests record a runtime run and a
//! simulated run (`probe` feature) and put both through the same checks.

use std::collections::{BTreeMap, VecDeque};

use super::actions::Order;
use super::offload::{EntryIdx, Route, Ticket};
use super::shard_move::Received;
use super::steps::{Did, Step};
use super::working::WorkingCore;
use crate::{CoreId, ShardId};

/// Replays one machine's logged steps through a fresh machine: every answer and
/// every action must come out as logged. Passing means the machine's inputs alone
/// decided what the driver did — no protocol rule lives in the driver.
pub fn replay(steps: &[Step]) -> Result<(), String> {
    let Some(Step::Start(start)) = steps.first() else {
        return Err("a log starts with the machine's start".into());
    };
    let mut m: WorkingCore<()> = WorkingCore::new(start.clone());
    let mut out: VecDeque<Did> = VecDeque::new();
    for (i, st) in steps.iter().enumerate().skip(1) {
        let bad = |what: &str| Err(format!("step {i} ({st:?}): {what}"));
        match st {
            Step::Start(_) | Step::Controller | Step::Order(_) => {
                return bad("not a working core's step")
            }
            Step::Packet { shard, process } => {
                if matches!(m.on_packet(*shard, ()), Received::Process(_)) != *process {
                    return bad("the machine answers otherwise");
                }
            }
            Step::Sample { shard, entry } => m.sample(*shard, *entry),
            Step::Route {
                shard,
                entry,
                slice,
                priority,
                now_ns,
                offloadable,
                route,
            } => {
                let r = m.route(*shard, *entry, *slice, *priority, *now_ns, || {
                    offloadable.unwrap_or(false)
                });
                if r != *route {
                    return bad(&format!("the machine answers {r:?}"));
                }
            }
            Step::Pend { ticket, shard } => m.pend(*ticket, *shard, ()),
            Step::Dequeued(n) => m.handle_dequeued(*n),
            Step::Release { shard, to, queued } => m.handle_release(*shard, *to, *queued),
            Step::Shard(s) => m.handle_shard(*s),
            Step::Ratio { shard, ratio } => m.handle_ratio(*shard, *ratio),
            Step::Offloader(to) => m.handle_offloader(*to),
            Step::Returned { ticket, entries } => m.handle_returned(*ticket, entries),
            Step::Time {
                now_ns,
                window_ns,
                due,
            } => {
                if m.handle_time(*now_ns, *window_ns) != *due {
                    return bad("other duties fall due");
                }
            }
            Step::Stopping => m.handle_stopping(),
            Step::Did(d) => {
                while let Some(a) = m.poll_action() {
                    out.push_back(Did::of(&a));
                }
                match out.pop_front() {
                    Some(x) if x == *d => {}
                    x => return bad(&format!("the machine gives {x:?}")),
                }
            }
        }
    }
    while let Some(a) = m.poll_action() {
        out.push_back(Did::of(&a));
    }
    match out.front() {
        None => Ok(()),
        Some(d) => Err(format!("the driver never carried out {d:?}")),
    }
}

/// What [`check_drivers`] saw, by kind (to show a log exercised the protocol).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Exercised {
    /// Working-core machines.
    pub machines: usize,
    /// Packets taken from queues.
    pub packets: u64,
    /// Packets held for a shard not yet here.
    pub held: u64,
    /// Shards handed over.
    pub hand_overs: u64,
    /// Hand-overs that waited for offloaded flows (deferred).
    pub deferred: u64,
    /// Recall markers pushed and returned.
    pub recalls: u64,
    /// Packets pended behind a recall.
    pub pended: u64,
    /// Flows leased.
    pub leases: u64,
    /// Ratio changes received.
    pub ratios: u64,
}

/// Checks a whole run's step log (every working core's machine and, when
/// recorded, the controller's plan applier) for what only a driver can get wrong:
/// - every release, ratio and offloading-core order of the controller reaches
///   the core it names, in order, and a core acts on no other;
/// - every shard a machine sent is received by the core it was sent to, after
///   it was sent, and no core receives a shard nobody sent;
/// - every recall pushed returns to the same core with the same flows, after it
///   was pushed, and nothing returns that was not recalled;
/// - every packet taken from a queue is reported dequeued (queue cycling counts
///   them all), and only packets the machine said to run are routed;
/// - every packet pended was routed to pend behind that recall;
/// - every action the machine gave was carried out ([`replay`] per machine).
pub fn check_drivers(log: &[(u64, Step)]) -> Result<Exercised, String> {
    let mut per: BTreeMap<u64, Vec<Step>> = BTreeMap::new();
    let mut core_of: BTreeMap<u64, CoreId> = BTreeMap::new();
    let mut sent: BTreeMap<(ShardId, CoreId), VecDeque<usize>> = BTreeMap::new();
    let mut recalls: BTreeMap<(u64, Ticket), Vec<(ShardId, EntryIdx)>> = BTreeMap::new();
    let mut ex = Exercised::default();
    let mut controllers = 0;
    // orders sent to each working core, in order (a core's inbox is FIFO)
    let mut orders: BTreeMap<CoreId, VecDeque<Step>> = BTreeMap::new();
    for (i, (id, st)) in log.iter().enumerate() {
        let core = |id| core_of.get(id).copied();
        let received = match st {
            Step::Release { shard, to, .. } => Some(Step::Order(Order::Release {
                from: core(id).unwrap_or(CoreId::MAX),
                shard: *shard,
                to: *to,
            })),
            Step::Ratio { shard, ratio } => Some(Step::Order(Order::SetRatio {
                core: core(id).unwrap_or(CoreId::MAX),
                shard: *shard,
                ratio: *ratio,
            })),
            Step::Offloader(to) => Some(Step::Order(Order::SetOffloader {
                core: core(id).unwrap_or(CoreId::MAX),
                to: *to,
            })),
            _ => None,
        };
        if let (Some(want), true) = (received, controllers > 0) {
            let me = core(id).unwrap_or(CoreId::MAX);
            match orders.get_mut(&me).and_then(|q| q.pop_front()) {
                Some(got) if got == want => {}
                got => {
                    return Err(format!(
                        "step {i}: core {me} was told {want:?}, the controller's next order \
                         for it was {got:?}"
                    ))
                }
            }
        }
        match st {
            Step::Controller => {
                controllers += 1;
                continue;
            }
            Step::Order(o) => {
                let to = match o {
                    Order::Release { from, .. } => Some(*from),
                    Order::SetRatio { core, .. } | Order::SetOffloader { core, .. } => Some(*core),
                    Order::Rewrite { .. } => None,
                };
                if let Some(c) = to {
                    orders.entry(c).or_default().push_back(st.clone());
                }
                continue;
            }
            _ => {}
        }
        per.entry(*id).or_default().push(st.clone());
        match st {
            Step::Start(s) => {
                core_of.insert(*id, s.core);
            }
            Step::Did(Did::SendShard { shard, to }) => {
                sent.entry((*shard, *to)).or_default().push_back(i);
                ex.hand_overs += 1;
            }
            Step::Shard(s) => {
                let me = core(id).ok_or("a step before its machine's start")?;
                let ok = sent.get_mut(&(*s, me)).and_then(|q| q.pop_front());
                if ok.is_none() {
                    return Err(format!(
                        "step {i}: core {me} received shard {s}, which no core had sent it"
                    ));
                }
            }
            Step::Did(Did::PushRecall(r)) => {
                recalls.insert((*id, r.ticket), r.entries.clone());
                ex.recalls += 1;
            }
            Step::Returned { ticket, entries } => match recalls.remove(&(*id, *ticket)) {
                Some(e) if e == *entries => {}
                Some(e) => {
                    return Err(format!(
                        "step {i}: recall {ticket} returned {entries:?}, {e:?} recalled"
                    ))
                }
                None => return Err(format!("step {i}: recall {ticket} returned unasked")),
            },
            Step::Pend { .. } => ex.pended += 1,
            Step::Ratio { .. } => ex.ratios += 1,
            Step::Route {
                route: Route::Offload { lease: true, .. },
                ..
            } => ex.leases += 1,
            _ => {}
        }
    }
    if let Some(((s, to), _)) = sent.iter().find(|(_, q)| !q.is_empty()) {
        return Err(format!("shard {s} sent to core {to} never arrived"));
    }
    if let Some(((_, t), _)) = recalls.iter().next() {
        return Err(format!("recall {t} never returned"));
    }
    if let Some((c, q)) = orders.iter().find(|(_, q)| !q.is_empty()) {
        return Err(format!("core {c} never received {:?}", q[0]));
    }
    if controllers > 1 {
        return Err("more than one controller in the log".into());
    }
    for (id, steps) in &per {
        check_one(steps, &mut ex).map_err(|e| format!("machine {id}: {e}"))?;
        replay(steps).map_err(|e| format!("machine {id}: {e}"))?;
    }
    ex.machines = per.len();
    Ok(ex)
}

/// One machine's packet accounting and pends.
fn check_one(steps: &[Step], ex: &mut Exercised) -> Result<(), String> {
    let (mut taken, mut dequeued, mut to_run, mut routed) = (0u64, 0u64, 0u64, 0u64);
    let mut pends: BTreeMap<Ticket, u64> = BTreeMap::new();
    for (i, st) in steps.iter().enumerate() {
        match st {
            Step::Packet { process, .. } => {
                taken += 1;
                if *process {
                    to_run += 1;
                } else {
                    ex.held += 1;
                }
            }
            Step::Dequeued(n) => dequeued += *n as u64,
            Step::Route { route, .. } => {
                routed += 1;
                if routed > to_run {
                    return Err(format!("step {i}: a packet routed that was not to run"));
                }
                if let Route::Pend(t) = route {
                    *pends.entry(*t).or_default() += 1;
                }
            }
            Step::Pend { ticket, .. } => match pends.get_mut(ticket) {
                Some(n) if *n > 0 => *n -= 1,
                _ => return Err(format!("step {i}: pended behind {ticket} unrouted")),
            },
            Step::Returned { .. } => {
                // a hand-over that went out after a return had waited for it
                if let Some(Step::Did(Did::SendShard { .. })) = steps.get(i + 1) {
                    ex.deferred += 1;
                }
            }
            _ => {}
        }
    }
    ex.packets += taken;
    if dequeued != taken {
        return Err(format!(
            "{taken} packets taken from the queue, {dequeued} reported dequeued"
        ));
    }
    Ok(())
}
