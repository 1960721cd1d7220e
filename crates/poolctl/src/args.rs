//! `flowshift pool run`'s options, for both controllers.

use std::path::PathBuf;

use clap::Args;

/// Options of `flowshift pool run`.
#[derive(Args, Debug)]
pub struct RunArgs {
    /// Nodes in the pool (each the secondary of the one before it).
    #[arg(long, default_value_t = 3)]
    pub nodes: usize,
    /// The chain every node runs (`[[nf]]` tables; each NAT's `external` is
    /// replaced by the node's own pool, 203.0.113.16·i/28) [default: a
    /// firewall admitting 10.0.0.0/8 outbound, then a NAT].
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Working cores per node.
    #[arg(long, default_value_t = 1)]
    pub workers: usize,
    /// Buckets of the router's resilient nexthop groups.
    #[arg(long, default_value_t = 64)]
    pub buckets: usize,
    /// The nodes' weights in the groups, e.g. `2,1,1` (node 0 gets half of
    /// the buckets, so it is the primary of half of the flows); spares weigh
    /// 1 [default: 1 each].
    #[arg(long)]
    pub weights: Option<String>,
    /// Heartbeat period, µs; a node that misses `--missed` in a row is down.
    #[arg(long, default_value_t = 1000)]
    pub heartbeat_us: u64,
    /// Heartbeats (and periods) a silent node may miss before it is taken for
    /// dead. A node whose process is gone is found at once (its heartbeat
    /// port refuses twice); silence is for a node that hangs or a machine
    /// that went away. Few find those fast but take a busy node for dead: on
    /// this 2-CPU machine, with 50 downloads and two busy loops beside, live
    /// nodes were silent for up to 91 ms (the report's longest silence).
    #[arg(long, default_value_t = 250)]
    pub missed: u32,
    /// Restart a failed node's process this long after it was found down
    /// (`off`: never); it rejoins once its table is synced.
    #[arg(long, default_value = "1s")]
    pub restart_after: String,
    /// Spare nodes: built and started with the pool, in no group and no
    /// ring; one joins every `--join-after` (every node syncs its table to
    /// it first, then the kernel gives it buckets from every member).
    #[arg(long, default_value_t = 0)]
    pub spares: usize,
    /// When spares join: the first this long after the pool is up, each
    /// next one as long after the one before.
    #[arg(long, default_value = "5s")]
    pub join_after: String,
    /// Namespace and interface prefix (at most 6 characters).
    #[arg(long, default_value = "fsp")]
    pub prefix: String,
    /// Where the nodes' configs, logs and reports go.
    #[arg(long, default_value = "out/pool")]
    pub out: PathBuf,
    /// Stop after this long (e.g. 30s) instead of at Ctrl-C.
    #[arg(long)]
    pub duration: Option<String>,
    /// Write the pool's report as JSON.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// How the router finds the nodes: `groups` (resilient nexthop groups
    /// this controller sets; it detects failures and fails nodes over,
    /// restarts and joins them) or `bgp` (every node announces its virtual IP
    /// and NAT pool by BGP, its secondary the same with a longer AS path;
    /// pairs fail over by themselves, with no controller; no restarts or
    /// spares yet).
    #[arg(long, value_enum, default_value_t = Routing::Groups)]
    pub routing: Routing,
    /// With `--routing bgp`: the BFD interval between the router and each
    /// node, ms; a node silent for `--bfd-multiplier` intervals is down.
    #[arg(long, default_value_t = pool::bgp::Bfd::default().interval_ms)]
    pub bfd_interval_ms: u32,
    /// With `--routing bgp`: place tenants on the nodes, each with a virtual
    /// IP 198.51.100.(10 + t) that its node announces (its secondary as
    /// backup): a tenants file as `pool plan --tenants` reads, or a number of
    /// fNICs drawn as `pool plan --count N` draws them; packed first fit, a
    /// tenant larger than a node split by hash over several (its first node
    /// steers the other parts' connections) [default: node i serves virtual
    /// IP i].
    #[arg(long)]
    pub plan: Option<String>,
    /// With `--routing bgp`: intervals of silence before a BFD session is down.
    #[arg(long, default_value_t = pool::bgp::Bfd::default().multiplier)]
    pub bfd_multiplier: u8,
    /// With `--routing bgp`: spill-over (Sirius §3.3.4) — each node takes
    /// this many new TCP connections per second to its tenants and passes
    /// the rest to the node two ahead (another pair), which serves them
    /// [default: off].
    #[arg(long)]
    pub spill_capacity: Option<u32>,
    /// With `--spill-capacity`: how long a spilled connection's later
    /// packets still follow it after the last spill, ms.
    #[arg(long, default_value_t = 10_000)]
    pub spill_linger_ms: u32,
}

/// `--routing`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Routing {
    Groups,
    Bgp,
}
