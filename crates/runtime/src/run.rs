//! One run: check the configuration, lay out the topology, build the rings and
//! channels, start the threads, and fill the shared [`Tally`] the report is built
//! from (the same report assembler as the simulator's).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::thread;

use balance::migrate::{PlanApplier, WorkingCore, WorkingStart};
use balance::CoreId;
use core_affinity::CoreId as Cpu;
use crossbeam_channel::{Receiver, Sender};
use nf::{Chain, DropCause, Packet, Shard};
use rtrb::{Consumer, Producer, RingBuffer};
use runspec::{PerCore, Tally, Topology};
use steer::IndirectionTable;
use trace::{Schedule, Trace};

use crate::controller::{Controller, ControllerStats};
pub use crate::error::RunError;
use crate::feeder::{feed, feed_ports, FeedOptions, FeederStats, Replay};
use crate::messages::{ToController, ToOffload, ToWorker};
use crate::offloader::{Offloader, OffloaderResult};
use crate::ports::{Ports, Steering};
use crate::shared::{AbortOnPanic, Shared};
use crate::sink::{Sink, Tx};
use crate::stats::WorkerStats;
use crate::worker::{Worker, WorkerResult};
use crate::{BalancerKind, RunConfig, RunReport};

/// The report plus what tests and `--output` need.
pub struct RunOutcome {
    /// The report.
    pub report: RunReport,
    /// Forwarded packets (when kept), sorted by arrival time.
    pub output: Vec<(u64, Vec<u8>)>,
    /// Every shard, as the workers returned them.
    pub shards: Vec<Shard>,
    /// Packets still held when the run ended (must be 0).
    pub held: u64,
    /// Flow states still leased to an offloading core at the end (must be 0).
    pub leftover_leases: usize,
    /// Per controller period: (ns since start, busy share of each core).
    pub load_over_time: Vec<(u64, Vec<f64>, Vec<u64>)>,
    /// Why the input ended before the run was stopped (an interface that
    /// failed or went away, a capture found truncated halfway); the report
    /// covers the run up to then.
    pub input_failure: Option<String>,
    /// What a streamed replay read ([`Input::Stream`]).
    pub streamed: Option<crate::replay::Streamed>,
}

/// Where a run's packets come from.
pub enum Input<'a> {
    /// A trace in memory replayed by the NIC model.
    Trace(&'a Trace),
    /// Packets read as they are replayed (a capture file, a generated
    /// trace): the run holds a few MiB of them at a time
    /// ([`crate::replay`]).
    Stream(Box<dyn trace::Source>),
    /// Interfaces (by name): every frame received on interface i is port i;
    /// a forwarded packet leaves by port i + 1 (mod the count). The run ends when
    /// `RunConfig::stop` is set or its `duration` has passed.
    Ifaces(&'a [String], Steering),
}

/// Runs `chain` (as a template: each worker gets its own instance) on `trace`.
pub fn run(chain: &Chain, trace: &Trace, cfg: &RunConfig) -> Result<RunOutcome, RunError> {
    run_on(chain, Input::Trace(trace), cfg)
}

/// Runs `chain` on packets from `input`.
pub fn run_on(chain: &Chain, input: Input<'_>, cfg: &RunConfig) -> Result<RunOutcome, RunError> {
    check(chain, &input, cfg)?;
    if cfg.replica.is_some() && !matches!(input, Input::Ifaces(..)) {
        return Err(RunError::Config(
            "pool replication runs on interfaces (--iface)".into(),
        ));
    }
    let spray = cfg.balancer == BalancerKind::Sprayer;
    let shards_n = chain.shard_count();
    let mut top = Topology::new(cfg, shards_n);
    top.place(&chain.rule_owners(), cfg.workers)
        .map_err(RunError::Config)?;
    if chain.steers_by_cells() {
        top.place_blocks(cfg.workers);
    }
    let mut ports = match input {
        Input::Ifaces(names, steering) => {
            Some(open_ports(chain, names, steering, cfg, &top.owner)?)
        }
        Input::Trace(_) | Input::Stream(_) => None,
    };
    let table =
        IndirectionTable::new(chain.buckets(), 1).map_err(|e| RunError::Config(e.to_string()))?;
    for b in 0..table.len() {
        table.set(b, top.owner[b % shards_n]);
    }
    let shared = Arc::new(Shared::new(table, cfg.workers));
    let stats: Vec<Arc<WorkerStats>> = (0..cfg.workers + cfg.offloaders)
        .map(|_| Arc::new(WorkerStats::new(chain.buckets(), shards_n)))
        .collect();
    let wiring = Wiring::new(cfg);
    let mut threads = Threads {
        chain,
        cfg,
        shared: &shared,
        stats: &stats,
        top: &top,
        spray,
        cpus: core_affinity::get_core_ids().unwrap_or_default(),
        tx: ports.as_ref().map(|p| p.tx.clone()).unwrap_or_default(),
        kernel: ports.as_ref().and_then(|p| p.kernel.clone()),
        per_core: std::sync::Mutex::new(
            ports
                .as_mut()
                .map(|p| std::mem::take(&mut p.per_core))
                .unwrap_or_default(),
        ),
        replica_tx: std::sync::Mutex::new(
            ports
                .as_mut()
                .map(|p| std::mem::take(&mut p.replica_tx))
                .unwrap_or_default(),
        ),
        merge: crate::merge::Board::for_chain(chain, cfg.workers + cfg.offloaders),
    };
    // the replication port is the NIC-model thread's alone
    let replica_rx = ports.as_mut().and_then(|p| p.replica.take());
    let replay = match input {
        Input::Trace(t) => Some(Replay::Memory(t)),
        Input::Stream(s) => Some(Replay::Stream(s)),
        Input::Ifaces(..) => None,
    };
    let (mut feeder, ctl, workers, offloaders) =
        threads.spawn(replay, ports.as_ref(), replica_rx, wiring);
    let streamed = feeder.streamed.take();
    if streamed.is_some_and(|s| s.packets == 0) && shared.input_failure().is_none() {
        return Err(RunError::Config("the trace has no packet".into()));
    }
    // read once every core has closed its sockets (having counted what they
    // still held): every frame the program steered is in `packets_in` by then
    let kernel_bucket_packets = threads
        .kernel
        .as_ref()
        .and_then(|k| k.all_packets().ok())
        .map(|k| k.iter().sum());
    // (a pre-steered replay's preparation is not run time)
    let elapsed_ns = shared.now_ns().saturating_sub(feeder.prep_ns).max(1);
    let mut out = merge(
        cfg,
        elapsed_ns,
        feeder,
        ctl,
        kernel_bucket_packets,
        workers,
        offloaders,
    );
    out.input_failure = shared.input_failure().cloned();
    out.streamed = streamed;
    close_sockets_later(ports.as_mut(), &mut threads);
    Ok(out)
}

/// The interfaces' sockets, after the checks that need the steering.
fn open_ports(
    chain: &Chain,
    names: &[String],
    steering: Steering,
    cfg: &RunConfig,
    owner: &[CoreId],
) -> Result<Ports, RunError> {
    let spray = cfg.balancer == BalancerKind::Sprayer;
    if steering == Steering::Kernel && chain.hasher().nat().is_some() {
        return Err(RunError::Config(
            "the NAT's endpoint-independent mapping, port forwards and hairpinning \
             need the NIC model's endpoint hashing, which the kernel's steering \
             program does not do: use --steer user"
                .into(),
        ));
    }
    if steering == Steering::Kernel && chain.hasher().gtp().is_some() {
        return Err(RunError::Config(
            "a UPF's G-PDUs are steered by the packet inside the tunnel, which \
             the kernel's steering programs do not parse: use --steer user"
                .into(),
        ));
    }
    if steering == Steering::Kernel
        && chain.hasher().rules().is_some()
        && !matches!(netio::socket_io(), netio::Io::Xdp(_))
    {
        return Err(RunError::Config(
            "steering.rules: the packet sockets' steering program hashes; rules \
             are matched in the kernel by the XDP program (--io xdp) or in user \
             space (--steer user)"
                .into(),
        ));
    }
    if cfg.replica.is_some() {
        chain.portable().map_err(RunError::Config)?;
        if cfg.offloaders > 0 {
            return Err(RunError::Config(
                "pool replication does not offload flows: use --offloaders 0".into(),
            ));
        }
        if spray {
            return Err(RunError::Config(
                "pool replication keeps flows on their cores: the sprayer balancer \
                 does not"
                    .into(),
            ));
        }
    }
    if spray && steering == Steering::Kernel {
        return Err(RunError::Config(
            "the sprayer balancer steers in software: use --steer user".into(),
        ));
    }
    Ports::open(
        names,
        steering,
        chain,
        owner,
        cfg.workers,
        cfg.workers + cfg.offloaders,
        cfg.replica.clone(),
        cfg.rps,
    )
}

/// Closes the packet sockets on a thread of their own: closing one waits
/// for an RCU grace period, which took the kernel seconds a socket on a
/// loaded machine, and the report does not wait for it (what is set back
/// when dropped — receive packet steering, an XDP program and its sockets
/// — is, by the caller).
fn close_sockets_later(ports: Option<&mut Ports>, threads: &mut Threads<'_>) {
    if let Some(p) = ports.filter(|p| p._xdp.is_empty()) {
        let sockets = (
            std::mem::take(&mut p.rx),
            std::mem::take(&mut p.tx),
            std::mem::take(&mut threads.tx),
            std::mem::take(&mut *threads.per_core.lock().unwrap_or_else(|e| e.into_inner())),
        );
        let _ = std::thread::Builder::new()
            .name("close-sockets".into())
            .spawn(move || drop(sockets));
    }
}

/// The checks that need the chain and the trace, after the shared ones.
fn check(chain: &Chain, input: &Input<'_>, cfg: &RunConfig) -> Result<(), RunError> {
    cfg.validate()?;
    let spray = cfg.balancer == BalancerKind::Sprayer;
    if spray && chain.has_per_flow_state() {
        return Err(RunError::Config(format!(
            "the sprayer balancer sends a flow's packets to every core, which would split per-flow state: \
             only chains without per-flow state can run under it (this chain's per-flow NFs: {})",
            chain
                .nfs()
                .iter()
                .filter(|n| n.state_kind() == nf::StateKind::PerFlow)
                .map(|n| n.name().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    if spray && cfg.offloaders > 0 {
        return Err(RunError::Config(
            "the sprayer balancer does not offload: use --offloaders 0".into(),
        ));
    }
    if matches!(input, Input::Trace(t) if t.is_empty()) {
        return Err(RunError::Config("the trace has no packet".into()));
    }
    if cfg.presteer && matches!(input, Input::Stream(_)) {
        return Err(RunError::Config(
            "`presteer` parses the whole trace before the run: it needs the trace in memory".into(),
        ));
    }
    Ok(())
}

/// The rings and channels between the threads.
struct Wiring {
    /// NIC queues, one per working core.
    queues: (Vec<Producer<Packet>>, Vec<Consumer<Packet>>),
    /// Per working core, one offload ring to each offloading core.
    offload_tx: Vec<Vec<Producer<ToOffload>>>,
    /// Per offloading core, (working core, its ring).
    offload_rx: Vec<Vec<(CoreId, Consumer<ToOffload>)>>,
    inbox: (Vec<Sender<ToWorker>>, Vec<Receiver<ToWorker>>),
    /// An operator's orders to each offloading core.
    orders: (
        Vec<Sender<runspec::control::Order>>,
        Vec<Receiver<runspec::control::Order>>,
    ),
    ctl: (Sender<ToController>, Receiver<ToController>),
    /// Used packet buffers back to the NIC model, one ring per working then
    /// offloading core (none without `recycle`).
    recycle: BufferRings,
}

/// The cores' ends (they give buffers back) and the NIC model's ends.
type BufferRings = (Vec<Producer<Vec<u8>>>, Vec<Consumer<Vec<u8>>>);

impl Wiring {
    fn new(cfg: &RunConfig) -> Wiring {
        let (w, o) = (cfg.workers, cfg.offloaders);
        let queues = (0..w)
            .map(|_| RingBuffer::<Packet>::new(cfg.ring_size))
            .unzip();
        let mut offload_tx: Vec<Vec<_>> = (0..w).map(|_| Vec::new()).collect();
        let mut offload_rx: Vec<Vec<_>> = (0..o).map(|_| Vec::new()).collect();
        for (wi, tx) in offload_tx.iter_mut().enumerate() {
            for rx in offload_rx.iter_mut() {
                let (p, c) = RingBuffer::<ToOffload>::new(cfg.ring_size);
                tx.push(p);
                rx.push((wi as CoreId, c));
            }
        }
        // a ring's worth of buffers in flight per core, and as many coming back
        let recycle = if cfg.recycle {
            (0..w + o)
                .map(|_| RingBuffer::<Vec<u8>>::new(cfg.ring_size))
                .unzip()
        } else {
            (Vec::new(), Vec::new())
        };
        Wiring {
            recycle,
            queues,
            offload_tx,
            offload_rx,
            inbox: (0..w).map(|_| crossbeam_channel::unbounded()).unzip(),
            orders: (0..o).map(|_| crossbeam_channel::unbounded()).unzip(),
            ctl: crossbeam_channel::unbounded(),
        }
    }
}

/// What the threads are built from.
struct Threads<'a> {
    chain: &'a Chain,
    cfg: &'a RunConfig,
    shared: &'a Arc<Shared>,
    stats: &'a [Arc<WorkerStats>],
    top: &'a Topology,
    spray: bool,
    cpus: Vec<Cpu>,
    /// With interfaces: each core's sockets to send by (working, then
    /// offloading cores).
    tx: Vec<Arc<Tx>>,
    kernel: Option<Arc<netio::steering::KernelRss>>,
    /// Kernel steering: each working core's sockets, taken by its worker.
    per_core: std::sync::Mutex<Vec<Vec<(u8, netio::PacketSocket)>>>,
    /// Pool replication: each working core's link to the secondary.
    replica_tx: std::sync::Mutex<Vec<crate::worker::Replication>>,
    /// Delayed merge across every core, if the chain shares NF state.
    merge: Option<Arc<crate::merge::Board>>,
}

type Joined = (
    FeederStats,
    ControllerStats,
    Vec<WorkerResult>,
    Vec<OffloaderResult>,
);

impl Threads<'_> {
    /// The CPU thread `i` is pinned to (working cores, offloading cores, then the
    /// NIC model; shared when there are too few).
    fn cpu(&self, i: usize) -> Option<Cpu> {
        (self.cfg.pin && !self.cpus.is_empty()).then(|| self.cpus[i % self.cpus.len()])
    }

    /// Each working core's shard objects at the start.
    fn shard_objects(&self) -> Vec<Vec<Option<Shard>>> {
        let (w, n) = (self.cfg.workers, self.top.owner.len());
        let mut per: Vec<Vec<Option<Shard>>> =
            (0..w).map(|_| (0..n).map(|_| None).collect()).collect();
        for (i, shards) in per.iter_mut().enumerate() {
            for (s, shard) in self.chain.new_shards().into_iter().enumerate() {
                // Sprayer: no flow affinity, every core has its own copy of every
                // (stateless) shard
                if self.spray || usize::from(self.top.owner[s]) == i {
                    shards[s] = Some(shard);
                }
            }
        }
        per
    }

    /// Core `i`'s sink (sending forwarded packets out with interfaces).
    fn sink(&self, i: usize, exit_order: bool) -> Sink {
        let mut s = Sink::new(self.cfg.keep_output, self.cfg.priority_dscp, exit_order);
        s.tap = self.cfg.output_tap.clone();
        if let Some(tx) = self.tx.get(i) {
            s.set_tx(tx.clone());
        }
        s
    }

    fn worker(&self, i: usize, ring: Consumer<Packet>, w: &Wiring) -> Worker {
        let cfg = self.cfg;
        let window_ns = cfg.period.as_nanos().max(1) as u64;
        let owned = if self.spray {
            // every core works on its own copy of every shard
            (0..self.top.owner.len() as u16).collect()
        } else {
            self.top.owned(i)
        };
        Worker {
            me: i,
            chain: self.chain.instance(),
            shards: Vec::new(),
            ring,
            inbox: w.inbox.1[i].clone(),
            peers: w.inbox.0.clone(),
            controller: w.ctl.0.clone(),
            shared: self.shared.clone(),
            burst: cfg.burst,
            stats: self.stats[i].clone(),
            sink: self.sink(i, self.spray),
            core: WorkingCore::new(WorkingStart {
                core: i as CoreId,
                shards: self.top.owner.len(),
                owned,
                offloader: self.top.offload_core[i],
                ratio: self.top.ratio,
                heaviest: cfg.offload_select == runspec::OffloadSelect::Heaviest,
                now_ns: self.shared.now_ns(),
                window_ns,
            }),
            offload_rings: Vec::new(),
            window_ns,
            arrived_entries: None,
            metrics: cfg.metrics.clone().map(|m| (m, i)),
            merging: self.merge.clone().map(|b| crate::merge::Merging::new(b, i)),
            rx: self.kernel.as_ref().map(|_| {
                let socks = std::mem::take(&mut self.per_core.lock().expect("not poisoned")[i]);
                crate::kernel::KernelRx::new(socks, self.chain.hasher().clone(), cfg.ring_size)
            }),
            replica: {
                let mut links = self.replica_tx.lock().expect("not poisoned");
                (!links.is_empty()).then(|| links.remove(0))
            },
        }
    }

    fn controller(&self, w: &Wiring, inbox: Receiver<ToController>) -> Controller {
        let cfg = self.cfg;
        Controller {
            shared: self.shared.clone(),
            workers: w.inbox.0.clone(),
            stats: self.stats.to_vec(),
            inbox,
            apply: PlanApplier::new(
                self.top.owner.clone(),
                self.top.ratio,
                self.top.offload_core.clone(),
                cfg.offloaders,
            ),
            balancer: cfg.balancer.make(cfg.seed),
            period: cfg.period,
            nic_delay: cfg.nic_update_delay,
            progress: cfg.progress.clone(),
            kernel: self.kernel.clone(),
            metrics: cfg.metrics.clone(),
        }
    }

    /// The offloading cores, each with its rings, a buffer pool to give
    /// back to (from `give_back`) and its CPU.
    fn offloaders(
        &self,
        wiring: &mut Wiring,
        give_back: &mut impl Iterator<Item = rtrb::Producer<Vec<u8>>>,
    ) -> Vec<(Offloader, Option<Cpu>)> {
        let (cfg, w) = (self.cfg, self.cfg.workers);
        std::mem::take(&mut wiring.offload_rx)
            .into_iter()
            .enumerate()
            .map(|(k, rings)| {
                let mut off = Offloader {
                    chain: self.chain.instance(),
                    rings,
                    workers: wiring.inbox.0.clone(),
                    shared: self.shared.clone(),
                    burst: cfg.burst,
                    stats: self.stats[w + k].clone(),
                    sink: self.sink(w + k, false),
                    metrics: cfg.metrics.clone().map(|m| (m, w + k)),
                    merging: self
                        .merge
                        .clone()
                        .map(|b| crate::merge::Merging::new(b, w + k)),
                    orders: wiring.orders.1[k].clone(),
                };
                if let Some(r) = give_back.next() {
                    off.sink.set_recycle(r);
                }
                (off, self.cpu(w + k))
            })
            .collect()
    }

    /// Starts every thread, waits for them all.
    fn spawn(
        &self,
        replay: Option<Replay<'_>>,
        ports: Option<&Ports>,
        mut replica_rx: Option<crate::replica::ReplicaRx>,
        mut wiring: Wiring,
    ) -> Joined {
        let cfg = self.cfg;
        let (w, o) = (cfg.workers, cfg.offloaders);
        let mut workers = Vec::new();
        let objects = self.shard_objects();
        let rings = std::mem::take(&mut wiring.queues.1);
        let offload_tx = std::mem::take(&mut wiring.offload_tx);
        let mut give_back = std::mem::take(&mut wiring.recycle.0).into_iter();
        for (i, ((shards, ring), tx)) in objects.into_iter().zip(rings).zip(offload_tx).enumerate()
        {
            let mut wk = self.worker(i, ring, &wiring);
            if wk.rx.is_some() {
                // a core reading its own sockets reuses its own buffers
                wk.sink.keep_spare();
            }
            wk.shards = shards;
            wk.offload_rings = tx;
            if let Some(r) = give_back.next() {
                wk.sink.set_recycle(r);
            }
            workers.push((wk, self.cpu(i)));
        }
        let offloaders = self.offloaders(&mut wiring, &mut give_back);
        let (_, ctl_rx) = wiring.ctl.clone();
        let controller = self.controller(&wiring, ctl_rx);
        let queues = std::mem::take(&mut wiring.queues.0);
        let inboxes = (wiring.inbox.0.clone(), wiring.orders.0.clone());
        let buffers = crate::buffers::Buffers::new(std::mem::take(&mut wiring.recycle.1));
        drop(wiring);
        let opts = FeedOptions {
            schedule: Schedule {
                pace: cfg.pace,
                loops: cfg.replay_loops(),
            },
            burst: cfg.burst,
            duration_ns: cfg.duration.map(|d| d.as_nanos() as u64),
            spray: self.spray,
            stop: cfg.stop.clone(),
            metrics: cfg.metrics.clone(),
            presteer: cfg.presteer,
            buffers,
            nic_threads: cfg.nic_threads,
        };
        let hasher = self.chain.hasher().clone();
        let feeder_cpu = self.cpu(w + o);
        let _controlling = cfg
            .control
            .as_ref()
            .map(|i| Controlling::attach(i, &inboxes, self.top.owner.len()));
        let shared = self.shared;
        thread::scope(|sc| {
            let wh: Vec<_> = workers
                .into_iter()
                .enumerate()
                .map(|(i, (wk, cpu))| {
                    start(sc, format!("working-{i}"), shared, cpu, move || wk.run())
                })
                .collect();
            let oh: Vec<_> = offloaders
                .into_iter()
                .enumerate()
                .map(|(i, (off, cpu))| {
                    start(sc, format!("offloading-{i}"), shared, cpu, move || {
                        off.run()
                    })
                })
                .collect();
            let ctl = start(sc, "controller".into(), shared, None, move || {
                controller.run()
            });
            let hasher = &hasher;
            let feeder = start(
                sc,
                "nic-model".into(),
                shared,
                feeder_cpu,
                move || match ports {
                    Some(p) if p.kernel.is_some() => {
                        // the frames are counted by the cores that read them; the
                        // feed lasted as long as the kernel steered
                        FeederStats {
                            duration_ns: crate::kernel::kernel_nic(
                                shared,
                                opts.stop,
                                opts.duration_ns,
                            ),
                            ..FeederStats::default()
                        }
                    }
                    Some(p) => feed_ports(&p.rx, replica_rx.as_mut(), hasher, shared, queues, opts),
                    None => feed(
                        replay.expect("a replay without interfaces"),
                        hasher,
                        shared,
                        queues,
                        opts,
                    ),
                },
            );
            if let Some(r) = &cfg.ready {
                (r.0)();
            }
            (
                feeder.join().expect("feeder thread"),
                ctl.join().expect("controller thread"),
                wh.into_iter()
                    .map(|h| h.join().expect("worker thread"))
                    .collect(),
                oh.into_iter()
                    .map(|h| h.join().expect("offloading-core thread"))
                    .collect(),
            )
        })
    }
}

/// The run's cores attached to a [`Control`](runspec::control::Control)
/// while they run; detached when dropped.
struct Controlling<'a>(&'a runspec::control::Control);

impl<'a> Controlling<'a> {
    fn attach(
        i: &'a runspec::control::Control,
        (working, offloading): &(Vec<Sender<ToWorker>>, Vec<Sender<runspec::control::Order>>),
        shards: usize,
    ) -> Controlling<'a> {
        let working = working
            .iter()
            .map(|tx| {
                let tx = tx.clone();
                Box::new(move |o| tx.send(ToWorker::Order(o)).is_ok()) as runspec::control::Deliver
            })
            .collect();
        let offloading = offloading
            .iter()
            .map(|tx| {
                let tx = tx.clone();
                Box::new(move |o| tx.send(o).is_ok()) as runspec::control::Deliver
            })
            .collect();
        i.attach(working, offloading, shards);
        Controlling(i)
    }
}

impl Drop for Controlling<'_> {
    fn drop(&mut self) {
        self.0.detach();
    }
}

/// Starts a thread of the run called `name` (what `ps -L` and
/// `/proc/PID/task/*/comm` show: `working-0`, `nic-model`, …) on `cpu` (if
/// pinned); if it panics, the run aborts so the other threads stop waiting
/// on it.
fn start<'s, T: Send + 's>(
    sc: &'s thread::Scope<'s, '_>,
    name: String,
    shared: &Arc<Shared>,
    cpu: Option<Cpu>,
    f: impl FnOnce() -> T + Send + 's,
) -> thread::ScopedJoinHandle<'s, T> {
    let guard = AbortOnPanic(shared.clone());
    thread::Builder::new()
        .name(name)
        .spawn_scoped(sc, move || {
            let _guard = guard;
            if let Some(c) = cpu {
                core_affinity::set_for_current(c);
            }
            f()
        })
        .expect("the system starts a thread of the run")
}

/// Reordering at the exit from departure times (Sprayer runs).
fn reordered_at_exit(results: &[WorkerResult]) -> u64 {
    let mut exits: Vec<_> = results
        .iter()
        .flat_map(|r| r.exit().iter().copied())
        .collect();
    exits.sort_by_key(|x| x.at_ns);
    let mut last: HashMap<u32, u32> = HashMap::new();
    let mut late = 0u64;
    for x in exits {
        let m = last.entry(x.flow).or_insert(0);
        if x.seq < *m {
            late += 1;
        } else {
            *m = x.seq;
        }
    }
    late
}

/// A pool node's counters (the report's `pool`), summed over the working
/// cores and the NIC model; none without replication.
fn pool_counters(workers: &[WorkerResult], feeder: &FeederStats) -> Vec<(&'static str, u64)> {
    let replica: Vec<[u64; 14]> = workers.iter().filter_map(|r| r.replica).collect();
    if replica.is_empty() {
        return Vec::new();
    }
    let sum = |k: usize| replica.iter().map(|r| r[k]).sum::<u64>();
    let mut pool = vec![
        ("replicated", sum(0)),
        ("unprotected", sum(1)),
        ("installed", sum(2)),
        ("acked", sum(3)),
        ("recopied", sum(4)),
        ("poisoned_at_end", sum(5)),
        ("replicas_in", feeder.replicas_in),
        ("replica_bad", feeder.replica_bad),
        ("secondary_lost", feeder.secondary_lost),
        ("primary_lost", feeder.primary_lost),
        ("refused_malformed", feeder.replica_refused[0]),
        ("refused_bad_tag", feeder.replica_refused[1]),
        ("refused_stale", feeder.replica_refused[2]),
        ("refused_replayed", feeder.replica_refused[3]),
        ("replicas_dropped", feeder.replicas_dropped),
        ("bulk_sent", sum(6)),
        ("bulk_resent", sum(7)),
        ("bulk_acked", sum(8)),
        ("synced", sum(9)),
        ("sync_bad", sum(10)),
        ("acks_refused", sum(11)),
        ("sync_in", feeder.sync_in),
        ("sync_refused", feeder.sync_refused),
        ("spilled", sum(12)),
        ("steered_out", sum(13)),
        ("steered_in", feeder.steered_in),
    ];
    let mut lag = crate::replica::lag_histogram();
    for h in workers.iter().filter_map(|r| r.replica_lag.as_ref()) {
        lag.add(h).expect("same bounds");
    }
    if !lag.is_empty() {
        pool.extend([
            ("lag_p50_us", lag.value_at_quantile(0.5) / 1_000),
            ("lag_p99_us", lag.value_at_quantile(0.99) / 1_000),
            ("lag_max_us", lag.max() / 1_000),
        ]);
    }
    pool
}

/// The threads' results into one outcome.
fn merge(
    cfg: &RunConfig,
    elapsed_ns: u64,
    feeder: FeederStats,
    ctl: ControllerStats,
    kernel_bucket_packets: Option<u64>,
    mut workers: Vec<WorkerResult>,
    mut offloaders: Vec<OffloaderResult>,
) -> RunOutcome {
    let mut t = Tally::new("run");
    let load = |busy: u64, idle: u64| busy as f64 / (busy + idle).max(1) as f64;
    let core = |i: usize, role, l: f64, chain: &Chain, sink: &Sink| PerCore {
        core: i,
        role,
        load: l,
        packets: chain.counters().packets,
        priority_packets: sink.latency[0].len(),
    };
    let mut feeder = feeder;
    for r in &workers {
        if let Some(rx) = &r.rx {
            feeder.offered += rx.offered;
            feeder.bytes += rx.bytes;
            feeder.rx_overflow += rx.rx_overflow;
            feeder.unread_at_stop += rx.unread_at_stop;
            t.unsteered += rx.unsteered;
            for (a, b) in feeder.malformed.iter_mut().zip(rx.malformed) {
                *a += b;
            }
        }
    }
    for (i, r) in workers.iter().enumerate() {
        let l = load(r.busy_ns, r.idle_ns);
        t.per_core.push(core(i, "working", l, &r.chain, &r.sink));
        t.add_offload(&r.offload);
        t.offload_waits += r.offload_waits;
    }
    for (k, r) in offloaders.iter().enumerate() {
        let l = load(r.busy_ns, r.idle_ns);
        t.per_core
            .push(core(cfg.workers + k, "offloading", l, &r.chain, &r.sink));
    }
    if cfg.balancer == BalancerKind::Sprayer {
        t.reordered_at_exit = Some(reordered_at_exit(&workers));
    }
    t.pool = pool_counters(&workers, &feeder);
    let held = workers.iter().map(|r| r.held).sum();
    let leftover_leases = offloaders.iter().map(|r| r.leftover).sum();
    let mut output = Vec::new();
    let mut shards = Vec::new();
    let sinks = workers
        .iter_mut()
        .map(|r| &mut r.sink)
        .chain(offloaders.iter_mut().map(|r| &mut r.sink));
    for s in sinks {
        t.tx_failed += s.tx_failed;
        t.reordered += s.reordered;
        for (c, h) in s.latency.iter().enumerate() {
            t.latency[c].add(h).expect("same bounds");
        }
        output.append(&mut s.output);
    }
    output.sort_by_key(|(ts, _)| *ts);
    for r in &mut workers {
        shards.append(&mut r.shards);
    }
    let mut chains = workers
        .into_iter()
        .map(|r| r.chain)
        .chain(offloaders.into_iter().map(|r| r.chain));
    let mut total = chains.next().expect("at least one worker");
    for c in chains {
        total.merge_from(&c);
    }
    count_chain(&mut t, &total, &shards);
    t.offered = feeder.offered;
    t.bytes = feeder.bytes;
    t.feed_ns = feeder.duration_ns;
    t.ring_full = feeder.ring_full;
    t.rx_overflow = feeder.rx_overflow;
    t.unread_at_stop = feeder.unread_at_stop;
    t.malformed = feeder.malformed.to_vec();
    t.elapsed_ns = elapsed_ns;
    t.rounds = ctl.rounds;
    t.plan_ns = ctl.plan_ns;
    t.balancer = ctl.balancer;
    t.kernel_bucket_packets = kernel_bucket_packets;
    t.control = ctl.apply;
    t.load_over_time = ctl.load_over_time.clone();
    t.windows = ctl.windows;
    RunOutcome {
        report: t.report(cfg),
        output,
        shards,
        held,
        leftover_leases,
        load_over_time: ctl.load_over_time,
        input_failure: None,
        streamed: None,
    }
}

/// The merged chain's and the shards' counters into the tally.
fn count_chain(t: &mut Tally, total: &Chain, shards: &[Shard]) {
    // components on their own cores finish what they were handed before counting
    for n in total.nfs() {
        n.settle();
    }
    t.nf = total
        .nfs()
        .iter()
        .map(|n| (n.name().to_string(), n.counters().into_iter().collect()))
        .collect::<BTreeMap<_, BTreeMap<_, _>>>();
    t.placements = total
        .nfs()
        .iter()
        .flat_map(|n| {
            n.placements().into_iter().map(|d| runspec::Placed {
                nf: n.name().to_string(),
                at_s: d.at_ns as f64 / 1e9,
                to: d.to.name(),
                cores: d.cores,
                reason: d.reason,
            })
        })
        .collect();
    t.placements.sort_by(|a, b| a.at_s.total_cmp(&b.at_s));
    let c = total.counters();
    t.forwarded = c.forwarded;
    t.flows_undone = c.undone;
    t.emergencies = c.emergencies;
    t.dropped = DropCause::ALL.iter().map(|d| c.dropped(*d)).collect();
    t.flows_evicted = shards.iter().map(|s| s.table.stats().evicted).sum();
    t.flows = shards.iter().fold([0; 3], |a, s| {
        let st = s.table.stats();
        [
            a[0] + st.inserted,
            a[1] + st.expired_slots,
            a[2] + st.max_len,
        ]
    });
}
