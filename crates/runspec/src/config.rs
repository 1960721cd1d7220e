//! What a run does: the parameters both drivers take, and their checks.

use core::time::Duration;

use trace::Pace;

/// Which balancer the controller asks for moves.
#[derive(Clone, Debug, PartialEq)]
pub enum BalancerKind {
    /// RSS as initialised: never moves anything.
    Static,
    /// For testing: every period moves a random shard (not already moving) to a
    /// random other worker and, with offloading cores, changes a random shard's
    /// offload ratio (and now and then a worker's offloading core).
    Random,
    /// For testing: move `shard` to `to` once `at` has passed, for each entry.
    Script(Vec<ScriptedMove>),
    /// RSS++ (§3.1–3.2, §4): heuristic rebalancing of shards between cores, core
    /// scaling, adaptive period.
    Rsspp(balance::balancers::RssppConfig),
    /// Sprayer (the RSS++ paper's §2 baseline): every packet steered by a hash of a
    /// non-flow field (its L4 checksum), ignoring flows. Breaks flow affinity, so
    /// only chains without per-flow state may run under it (each core then has
    /// its own copy of every shard, and mergeable state is per core anyway);
    /// reordering is counted at the exit.
    Sprayer,
    /// Any other balancer (e.g. Dyssect's, from the `flowshift-dyssect` crate, so
    /// that the runtime does not build its solver): a name and a constructor.
    Custom(&'static str, MakeBalancer),
}

/// Builds a balancer (given the run's seed).
#[derive(Clone)]
pub struct MakeBalancer(
    pub std::sync::Arc<dyn Fn(u64) -> Box<dyn balance::Balancer> + Send + Sync>,
);

impl std::fmt::Debug for MakeBalancer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MakeBalancer(..)")
    }
}

impl PartialEq for MakeBalancer {
    fn eq(&self, other: &Self) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &other.0)
    }
}

/// One move of a [`BalancerKind::Script`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ScriptedMove {
    /// When (since the run started).
    pub at: Duration,
    /// Which shard.
    pub shard: u16,
    /// To which worker.
    pub to: u16,
}

impl BalancerKind {
    /// The balancer itself (pure: snapshot in, plan out).
    pub fn make(&self, seed: u64) -> Box<dyn balance::Balancer> {
        match self {
            BalancerKind::Static => Box::new(balance::balancers::Static),
            BalancerKind::Random => Box::new(balance::balancers::RandomMoves::new(seed)),
            BalancerKind::Script(moves) => Box::new(balance::balancers::Scripted::new(
                moves
                    .iter()
                    .map(|m| balance::balancers::ScriptedMove {
                        at_ns: m.at.as_nanos() as u64,
                        shard: m.shard,
                        to: m.to,
                    })
                    .collect(),
            )),
            BalancerKind::Rsspp(cfg) => Box::new(balance::balancers::Rsspp::new(cfg.clone())),
            BalancerKind::Sprayer => Box::new(balance::balancers::Static),
            BalancerKind::Custom(_, make) => (make.0)(seed),
        }
    }

    /// The name used in reports and on the command line.
    pub fn name(&self) -> &'static str {
        match self {
            BalancerKind::Static => "static",
            BalancerKind::Random => "random",
            BalancerKind::Script(_) => "script",
            BalancerKind::Rsspp(_) => "rsspp",
            BalancerKind::Sprayer => "sprayer",
            BalancerKind::Custom(name, _) => name,
        }
    }
}

/// How a working core picks the flows of a shard to offload.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OffloadSelect {
    /// Flows whose slice (16 stable bits of a hash of the key) is below r_s: a
    /// share r_s of the *flows*, stable while r_s is.
    #[default]
    Hash,
    /// The shard's heaviest flows of the last window (controller period) while the
    /// share of traffic before each stays below r_s: about r_s of the *traffic*,
    /// rounded up to a flow boundary; only the few heaviest flows are tracked.
    Heaviest,
}

/// Run parameters.
#[derive(Clone, Debug)]
pub struct RunConfig {
    /// Worker threads (working cores).
    pub workers: usize,
    /// Offloading cores (Dyssect): working core `w` starts offloading to `w % n`,
    /// with every offload ratio 0 until the balancer sets one.
    pub offloaders: usize,
    /// Offload ratio every shard starts with (0..=1; with offloading cores). A
    /// shard that moves starts again from 0 at its new owner; the balancer sets
    /// ratios from then on.
    pub offload_ratio: f64,
    /// Which flows of a shard are offloaded: hash slices below r_s, or its
    /// heaviest flows first (Dyssect's code) up to r_s of its traffic.
    pub offload_select: OffloadSelect,
    /// Descriptors per NIC queue (ring size).
    pub ring_size: usize,
    /// Packets per poll.
    pub burst: usize,
    /// Replay pace.
    pub pace: Pace,
    /// Times the trace is played.
    pub loops: u32,
    /// Loop the trace until this much time has passed (overrides `loops`).
    pub duration: Option<Duration>,
    /// Balancer.
    pub balancer: BalancerKind,
    /// Controller period (ε).
    pub period: Duration,
    /// Time the NIC model takes to apply an indirection-table rewrite (a slow
    /// NIC's update delay): packets keep being steered by the old entries until it
    /// has passed. Default 0.
    pub nic_update_delay: Duration,
    /// Keep forwarded packets for an output pcap (in memory, sorted by arrival,
    /// in the outcome).
    pub keep_output: bool,
    /// Hand every forwarded packet, as it leaves, to this (e.g. a writer
    /// streaming the output capture to disk).
    pub output_tap: Option<OutputTap>,
    /// Seed of the scripted balancer.
    pub seed: u64,
    /// Pin worker threads to cores.
    pub pin: bool,
    /// Called by the controller every period with the snapshot it built.
    pub progress: Option<Progress>,
    /// Called once every thread of the run has started (its tables are
    /// built): from then on it forwards what arrives.
    pub ready: Option<Ready>,
    /// DSCP of the priority class (latency is reported per class).
    pub priority_dscp: u8,
    /// Set (e.g. by SIGINT/SIGTERM) to end the run early: the NIC model stops,
    /// the cores drain, the report is complete.
    pub stop: Option<Stop>,
    /// Where the run publishes live metrics (`--metrics`).
    pub metrics: Option<std::sync::Arc<crate::metrics::Metrics>>,
    /// Where a control thread asks the working cores for their flows
    /// (`flowshift ctl flows`).
    pub control: Option<std::sync::Arc<crate::control::Control>>,
    /// Parse and hash every frame of the trace before the run starts (the NIC
    /// model's per-packet work done at load time, as a NIC's DMA and RSS leave
    /// a frame): the NIC-model thread then only copies a packet, steers it by
    /// the live indirection table and enqueues it, so it is not what limits a
    /// capacity measurement. Costs a parsed copy of the trace in memory.
    pub presteer: bool,
    /// Threads of the NIC model for a replayed trace: 1 (default), one thread
    /// parses, hashes and steers every packet; N > 1, N threads parse and hash
    /// bursts in turn while the NIC-model thread steers them, in replay order,
    /// by the live indirection table (steering stays live, unlike `presteer`).
    pub nic_threads: usize,
    /// Packet buffers go back from the cores to the NIC-model thread through
    /// rings and are reused, as a NIC's receive buffers are (on by default);
    /// off: one allocation per packet, freed by the core.
    pub recycle: bool,
    /// With interfaces: this node's part in a pool with state replication
    /// (Sirius ping-pong): where it receives copies and where it sends them.
    pub replica: Option<Replica>,
    /// With interfaces: turn receive packet steering on for the run on those
    /// with one receive queue and none (a veth), so that a flow's frames
    /// reach flowshift in the order they arrived (`netio::rps`); on by
    /// default.
    pub rps: bool,
}

/// A pool node's replication: a packet that creates or changes its flow's
/// state is not sent out here but to the flow's secondary (`secondary`) with
/// the flow's entry; the secondary installs the entry and sends the packet
/// out. Copies from the nodes this one is the secondary of arrive at `listen`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Replica {
    /// Where this node receives its primaries' copies (UDP).
    pub listen: std::net::SocketAddr,
    /// Where this node sends its copies (UDP): its secondary's `listen`.
    pub secondary: std::net::SocketAddr,
    /// The pool's key: every message is sealed with it and every message
    /// without a good seal refused (`pool::auth`); none on a fabric that is
    /// trusted (`insecure`).
    pub key: Option<[u8; 32]>,
    /// Pair heartbeats (Sirius §3.2): this node beats its secondary every
    /// [`PAIR_BEAT_MS`] and takes it for lost after this many milliseconds
    /// without an answer — its packets then leave from here, unprotected,
    /// rather than wait for copies nobody acknowledges — and for back at its
    /// next answer. 0: off (a controller re-rings the node instead).
    pub pair_timeout_ms: u32,
    /// The replication port of the node this one is the secondary of: with
    /// pair heartbeats on, its heartbeats are watched too, and a primary
    /// silent for `pair_timeout_ms` sets `primary_lost` (the node's BGP
    /// speaker then announces itself promoted, `pool::bgp::Role::Promoted`),
    /// cleared when it beats again.
    pub primary: Option<std::net::SocketAddr>,
    pub primary_lost: Flag,
    /// Spill-over (Sirius §3.3.4), if on.
    pub spill: Option<SpillTo>,
    /// Tenants split over several nodes that this node's router may send it.
    pub splits: Vec<SplitTenant>,
}

/// A tenant split over several nodes (`pool::pack`'s parts): part k gets the
/// connections whose symmetric hash falls in `[k/n, (k+1)/n)` of the hash
/// space (`pool::spill::part_of`). Its packets reach this node (the router's
/// route for `vip`); this node serves part `local` and steers every packet
/// of the others' connections to their nodes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SplitTenant {
    /// The tenant's address.
    pub vip: std::net::IpAddr,
    /// The part this node serves.
    pub local: u16,
    /// Each part's node (its replication port); `parts[local]` is unused.
    pub parts: Vec<std::net::SocketAddr>,
}

/// Spill-over (Sirius §3.3.4): new TCP connections to `vips` (arriving on
/// the first interface) beyond `capacity` per second go to the node at `to`
/// (its replication port), which makes their state and serves them; a later
/// packet of one that reaches this node follows it there, for as long as
/// spilling goes on and `linger_ms` after.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpillTo {
    /// The spill node's replication port.
    pub to: std::net::SocketAddr,
    /// The tenants' addresses whose new connections may spill.
    pub vips: Vec<std::net::IpAddr>,
    /// New connections per second this node takes (shared by its working
    /// cores).
    pub capacity: u32,
    /// How long after the last spilled connection its later packets still
    /// follow it, ms.
    pub linger_ms: u32,
}

/// A flag one thread sets and others poll; equal to its clones.
#[derive(Clone, Debug, Default)]
pub struct Flag(pub std::sync::Arc<std::sync::atomic::AtomicBool>);

impl Flag {
    /// `Relaxed`: a flag polled on its own; nothing else is published
    /// through it.
    pub fn is_set(&self) -> bool {
        self.0.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// (see [`is_set`](Self::is_set))
    pub fn set(&self, on: bool) {
        self.0.store(on, std::sync::atomic::Ordering::Relaxed)
    }
}

impl PartialEq for Flag {
    fn eq(&self, o: &Flag) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &o.0)
    }
}

impl Eq for Flag {}

/// The period of pair heartbeats, ms.
pub const PAIR_BEAT_MS: u32 = 5;

/// A flag that ends a run when set.
#[derive(Clone, Debug, Default)]
pub struct Stop(pub std::sync::Arc<std::sync::atomic::AtomicBool>);

impl Stop {
    /// True once set. `Relaxed`: a flag polled between bursts; nothing else is
    /// published through it.
    pub fn is_set(&self) -> bool {
        self.0.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// A run parameter out of range: names the field, its value and what is allowed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("run.{field} = {value}: {allowed}")]
pub struct ConfigError {
    /// The field (as in the `[run]` table; said as `run.FIELD`).
    pub field: &'static str,
    /// The value given.
    pub value: String,
    /// What is allowed.
    pub allowed: String,
}

impl ConfigError {
    fn new(field: &'static str, value: impl ToString, allowed: impl Into<String>) -> ConfigError {
        ConfigError {
            field,
            value: value.to_string(),
            allowed: allowed.into(),
        }
    }
}

/// Largest ring (descriptors per queue) a run accepts.
pub const MAX_RING: usize = 1 << 20;
/// Most NIC-model threads a run accepts.
pub const MAX_NIC_THREADS: usize = 64;

/// Largest burst a run accepts.
pub const MAX_BURST: usize = 1 << 12;
/// Most working cores, and most offloading cores, a run accepts.
pub const MAX_CORES: usize = 1024;

impl RunConfig {
    /// Checks every parameter both drivers depend on (the runtime adds the
    /// checks that need the chain, the simulator those of its model).
    pub fn validate(&self) -> Result<(), ConfigError> {
        let cores = MAX_CORES;
        if self.workers == 0 || self.workers > cores {
            return Err(ConfigError::new(
                "workers",
                self.workers,
                format!("must be between 1 and {cores}"),
            ));
        }
        if self.offloaders > cores {
            return Err(ConfigError::new(
                "offloaders",
                self.offloaders,
                format!("must be between 0 and {cores}"),
            ));
        }
        if !(0.0..=1.0).contains(&self.offload_ratio) {
            return Err(ConfigError::new(
                "offload_ratio",
                self.offload_ratio,
                "must be between 0 and 1",
            ));
        }
        if !(2..=MAX_RING).contains(&self.ring_size) {
            return Err(ConfigError::new(
                "ring_size",
                self.ring_size,
                format!("must be between 2 and {MAX_RING}"),
            ));
        }
        if !(1..=MAX_BURST).contains(&self.burst) {
            return Err(ConfigError::new(
                "burst",
                self.burst,
                format!("must be between 1 and {MAX_BURST}"),
            ));
        }
        if !(1..=MAX_NIC_THREADS).contains(&self.nic_threads) {
            return Err(ConfigError::new(
                "nic_threads",
                self.nic_threads,
                format!("must be between 1 and {MAX_NIC_THREADS}"),
            ));
        }
        if self.offloaders == 0 && self.offload_ratio > 0.0 {
            return Err(ConfigError::new(
                "offload_ratio",
                self.offload_ratio,
                "needs offloading cores: add --offloaders N",
            ));
        }
        if self.nic_threads > 1 && self.presteer {
            return Err(ConfigError::new(
                "nic_threads",
                self.nic_threads,
                "with `presteer`: a pre-steered trace is parsed before the run, there is \
                 nothing left for more NIC-model threads to do",
            ));
        }
        if self.period < std::time::Duration::from_micros(10) {
            return Err(ConfigError::new(
                "period",
                format!("{:?}", self.period),
                "must be at least 10µs",
            ));
        }
        Ok(())
    }

    /// Times the trace is replayed: `loops` (at least once), or practically
    /// forever with a `duration` (the NIC model stops on time).
    pub fn replay_loops(&self) -> u32 {
        if self.duration.is_some() {
            u32::MAX
        } else {
            self.loops.max(1)
        }
    }
}

/// Where forwarded packets go as they leave a core: called with the packet's
/// arrival time (ns) and its bytes, from every core, in each core's exit order.
#[derive(Clone)]
pub struct OutputTap(pub std::sync::Arc<TapFn>);

/// What an [`OutputTap`] calls: arrival time (ns), frame.
pub type TapFn = dyn Fn(u64, &[u8]) + Send + Sync;

impl std::fmt::Debug for OutputTap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OutputTap(..)")
    }
}

/// A progress callback (every period, with the controller's snapshot).
#[derive(Clone)]
pub struct Progress(pub std::sync::Arc<dyn Fn(&balance::Snapshot) + Send + Sync>);

impl std::fmt::Debug for Progress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Progress(..)")
    }
}

/// What a run calls once it forwards ([`RunConfig::ready`]).
#[derive(Clone)]
pub struct Ready(pub std::sync::Arc<dyn Fn() + Send + Sync>);

impl std::fmt::Debug for Ready {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Ready(..)")
    }
}

impl Default for RunConfig {
    fn default() -> Self {
        RunConfig {
            workers: 2,
            offloaders: 0,
            offload_ratio: 0.0,
            offload_select: OffloadSelect::Hash,
            ring_size: 1024,
            burst: 32,
            pace: Pace::Max,
            loops: 1,
            duration: None,
            balancer: BalancerKind::Static,
            period: Duration::from_millis(100),
            nic_update_delay: Duration::ZERO,
            keep_output: false,
            output_tap: None,
            seed: 1,
            pin: true,
            progress: None,
            ready: None,
            priority_dscp: 46,
            stop: None,
            metrics: None,
            control: None,
            presteer: false,
            rps: true,
            nic_threads: 1,
            recycle: true,
            replica: None,
        }
    }
}
