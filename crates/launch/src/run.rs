//! `flowshift run`'s options and the setup both drivers share ([`setup`]: the
//! chain, the runtime's `RunConfig`, the packets or interfaces, from the flags
//! and the config file); the run itself ([`run`]: a chain on worker threads
//! over a trace or on interfaces, live load moved by the configured balancer,
//! the report written as JSON; the binary prints it).

use std::path::PathBuf;

use anyhow::{bail, Context};
use clap::Args;
use nf::ChainConfig;
use runtime::{BalancerKind, RunConfig, RunReport};
use trace::Pace;

/// `run --rx`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum RxArg {
    /// `recvmmsg(2)` bursts.
    Recvmmsg,
    /// A `TPACKET_V3` ring.
    Ring,
}

/// `run --io`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum IoArg {
    /// `AF_PACKET` sockets (`--rx`, `--tx` say how).
    Packet,
    /// AF_XDP sockets behind an XDP program (no socket buffer, no IP stack;
    /// a transmit queue per sending core).
    Xdp,
}

/// `run --tx`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum TxArg {
    /// `sendmmsg(2)` bursts, one socket per interface for all cores.
    Sendmmsg,
    /// A `TPACKET_V2` ring per core and interface.
    Ring,
}

/// Options of `flowshift run`. Flags override the config file's `[run]` table.
#[derive(Args, Debug)]
pub struct RunArgs {
    /// TOML file: the chain (`[[nf]]`, `[steering]`, `[table]`) and a `[run]` table.
    /// Without it: firewall → NAT → sequence check.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// pcap to replay; without it, a trace is generated with `flowshift gen`'s defaults.
    #[arg(long)]
    pub input: Option<PathBuf>,
    /// Working cores [default: 2].
    #[arg(long)]
    pub workers: Option<usize>,
    /// Offloading cores (Dyssect) [default: 0]. Working core w offloads to w mod N.
    #[arg(long)]
    pub offloaders: Option<usize>,
    /// Offload ratio r_s every shard starts with, 0..1 [default: 0]; the balancer
    /// changes it (`static` never does).
    #[arg(long)]
    pub offload_ratio: Option<f64>,
    /// Which flows are offloaded: `hash` (flows whose hash slice is below r_s) or
    /// `heaviest` (a shard's heaviest flows first, up to r_s of its traffic rounded
    /// up to a flow boundary) [default: hash].
    #[arg(long)]
    pub offload_select: Option<String>,
    /// Balancer: static, rsspp, dyssect, roger (rules re-planned live; needs
    /// `steering.rule_key`), sprayer (stateless chains only), or random
    /// (testing) [default: static].
    #[arg(long)]
    pub balancer: Option<String>,
    /// Controller period, e.g. 100ms [default: 100ms].
    #[arg(long)]
    pub period: Option<String>,
    /// Time the NIC takes to apply an indirection-table rewrite, e.g. 5ms (a slow
    /// NIC) [default: 0].
    #[arg(long)]
    pub nic_delay: Option<String>,
    /// Replay speed factor on the trace's own timing; without it, as fast as the
    /// workers take packets.
    #[arg(long)]
    pub speed: Option<f64>,
    /// Parse and hash the whole trace before the run (the NIC model's work done
    /// at load time), so the NIC-model thread only copies, steers and enqueues:
    /// for capacity measurements; holds a parsed copy of the trace in memory.
    #[arg(long)]
    pub presteer: bool,
    /// Threads of the NIC model for a replayed trace: with N > 1, N threads
    /// parse and hash bursts in turn while the NIC-model thread steers them,
    /// in replay order, by the live indirection table [default: 1].
    #[arg(long)]
    pub nic_threads: Option<usize>,
    /// With --iface: how the NIC-model thread reads frames, `recvmmsg` bursts
    /// or a `TPACKET_V3` ring shared with the kernel.
    /// [default: recvmmsg]
    #[arg(long, value_enum)]
    pub rx: Option<RxArg>,
    /// With --iface: how cores send frames, `sendmmsg` bursts on one socket
    /// per interface, or a `TPACKET_V2` ring per core and interface (a burst
    /// written in place, sent by one empty `send`).
    /// [default: sendmmsg]
    #[arg(long, value_enum)]
    pub tx: Option<TxArg>,
    /// Allocate every packet's buffer and free it on the core that ends it,
    /// instead of reusing buffers the cores give back to the NIC model (for
    /// comparison).
    #[arg(long)]
    pub no_buffer_pool: bool,
    /// Packets per poll (NIC burst) [default: 32].
    #[arg(long)]
    pub burst: Option<usize>,
    /// Times to play the trace [default: 1].
    #[arg(long)]
    pub loops: Option<u32>,
    /// Loop the trace for this long, e.g. 10s (overrides --loops).
    #[arg(long)]
    pub duration: Option<String>,
    /// Write the forwarded packets to this pcap.
    #[arg(long)]
    pub output: Option<PathBuf>,
    /// Write the report as JSON (schema 1, docs/DESIGN.md).
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Run on interfaces instead of a trace: `IN,OUT` (a packet that arrived on
    /// one leaves by the other) or one interface (it leaves where it came in).
    /// Runs until Ctrl-C / SIGTERM or `--duration`. Needs CAP_NET_RAW.
    #[arg(long, conflicts_with = "input")]
    pub iface: Option<String>,
    /// With --iface: `user` (the NIC-model thread reads every frame and steers
    /// it) or `kernel` (an eBPF program steers frames to one socket per working
    /// core through the indirection table in a BPF map; IPv4 only; experimental)
    /// [default: user].
    #[arg(long)]
    pub steer: Option<String>,
    /// With --iface: leave interfaces with one receive queue and no receive
    /// packet steering as they are (by default it is turned on for the run,
    /// so a flow's frames reach flowshift in the order they arrived).
    #[arg(long)]
    pub no_rps: bool,
    /// With --iface: the sockets frames go through, `packet` (AF_PACKET) or
    /// `xdp` (AF_XDP behind an XDP program in the driver; `[io] xdp_frames`,
    /// `xdp_ring` size each socket) [default: packet].
    #[arg(long, value_enum)]
    pub io: Option<IoArg>,
    /// Serve live metrics in the Prometheus text format at ADDR (e.g.
    /// 127.0.0.1:9100): per-core load, chain and NF counters, drops by cause,
    /// migrations, a latency histogram.
    #[arg(long)]
    pub metrics: Option<String>,
    /// The control socket `flowshift ctl` talks to (a Unix socket, the
    /// owner's alone), or `off` [default: /run/flowshift/PID.sock with
    /// --iface, none for a replayed trace].
    #[arg(long, value_name = "PATH")]
    pub control: Option<String>,
    /// Log every NAT mapping created and deleted: `json:PATH` (JSON lines
    /// appended to a file) or `ipfix:HOST:PORT` (IPFIX, RFC 8158's NAT44
    /// BIB events, to a collector). Queued per core off the packet path; a
    /// full queue (`[io] nat_log_queue` events, default 65536) counts its
    /// losses as the NAT's `log_lost`.
    #[arg(long, value_name = "DEST")]
    pub nat_log: Option<String>,
    /// Refuse configurations whose flow tables, full, would take more than this
    /// (e.g. 8GiB, 512MiB) [default: half of this machine's memory].
    #[arg(long)]
    pub memcap: Option<String>,
    /// Read captures of at most this size into memory before the run (its
    /// loops then replay from memory); larger ones are streamed a few MiB at
    /// a time [default: 64MiB].
    #[arg(long)]
    pub replay_memory: Option<String>,
}

use crate::file::{duration, pool_key};
pub use crate::file::{load, IoSection, PoolSection, RunSection};

/// What a run needs, from the flags and the config file.
pub struct Setup {
    pub chain: nf::Chain,
    /// The chain's configuration and the directory its paths resolve against.
    pub chain_cfg: ChainConfig,
    pub base: PathBuf,
    pub cfg: RunConfig,
    /// The replayed packets (streamed, or whole in memory).
    pub packets: crate::packets::Packets,
    pub sec: RunSection,
    /// Interfaces to run on instead of the trace.
    pub ifaces: Option<Vec<String>>,
    /// Where frames on interfaces are steered.
    pub steering: runtime::Steering,
    /// The memory of the interfaces' sockets (AF_XDP), counted in the cap.
    pub io_memory: Vec<runtime::memory::Part>,
}

/// Most UMEM frames of an AF_XDP socket (2 GiB of 2 KiB frames).
const MAX_XDP_FRAMES: u32 = 1 << 20;
/// Most descriptors of an AF_XDP ring.
const MAX_XDP_RING: u32 = 1 << 16;

/// The sockets a run on interfaces uses (`--io`, `[io] backend` and the
/// AF_XDP sizes), each field checked.
fn io_backend(flag: Option<IoArg>, io: &IoSection) -> anyhow::Result<netio::Io> {
    let xdp = match (flag, io.backend.as_deref()) {
        (Some(f), _) => f == IoArg::Xdp,
        (None, None | Some("packet")) => false,
        (None, Some("xdp")) => true,
        (None, Some(o)) => bail!("[io] backend = `{o}`: expected `packet` or `xdp`"),
    };
    if !xdp {
        return Ok(netio::Io::Packet);
    }
    let d = netio::xsk::Sizes::default();
    let pow2 = |field: &str, v: u32, lo: u32, hi: u32| -> anyhow::Result<u32> {
        if !v.is_power_of_two() || !(lo..=hi).contains(&v) {
            bail!("[io] {field} = {v}: must be a power of two between {lo} and {hi}");
        }
        Ok(v)
    };
    let sizes = netio::xsk::Sizes {
        frames: pow2(
            "xdp_frames",
            io.xdp_frames.unwrap_or(d.frames),
            64,
            MAX_XDP_FRAMES,
        )?,
        ring: pow2("xdp_ring", io.xdp_ring.unwrap_or(d.ring), 64, MAX_XDP_RING)?,
    };
    let generic = match io.xdp_mode.as_deref() {
        None | Some("auto") => true,
        Some("native") => false,
        Some(o) => bail!("[io] xdp_mode = `{o}`: expected `native` or `auto`"),
    };
    Ok(netio::Io::Xdp(netio::xdp::Settings { sizes, generic }))
}

/// The default `ring_size` of a run on interfaces (a replay's is
/// [`RunConfig`]'s).
const IFACE_RING: usize = 4096;

pub fn setup(a: &RunArgs, hold: crate::packets::Hold) -> anyhow::Result<Setup> {
    let (chain_cfg, sec, base) = load(a.config.as_deref())?;
    let mut cfg = run_config(a, &sec)?;
    if cfg.workers == 0 || cfg.workers > runspec::MAX_CORES {
        // (the cores' own error, before shards are scaled to them)
        cfg.validate()?;
    }
    // shards the file left unset scale with the working cores
    let (chain_cfg, chain) = crate::reload::fitted(chain_cfg, &sec, cfg.workers, &base)?;
    roger_fits(cfg.balancer.name(), &chain, &sec, cfg.workers)?;
    cfg.replica = replica(sec.pool.as_ref(), &base)?;
    cfg.recycle = !a.no_buffer_pool;
    cfg.rps = io_modes(a, &sec.io)?;
    if let Some(s) = a.speed.or(sec.speed) {
        if !(s.is_finite() && s > 0.0) {
            bail!("`speed` = {s}: must be a positive factor");
        }
        cfg.pace = Pace::Timed { speed: s };
    }
    if let Some(l) = a.loops.or(sec.loops) {
        cfg.loops = l;
    }
    if let Some(d) = a.duration.as_deref().or(sec.duration.as_deref()) {
        cfg.duration = Some(duration("duration", d)?);
    }
    if let Some(s) = sec.seed {
        cfg.seed = s;
    }
    if std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        // live per-core load, once per controller period
        cfg.progress = Some(progress_line());
    }
    let ifaces: Option<Vec<String>> = a
        .iface
        .as_deref()
        .or(sec.io.iface.as_deref())
        .map(|s| s.split(',').map(|x| x.trim().to_string()).collect());
    if ifaces.is_some() {
        may_open_interfaces()?;
    }
    if ifaces.is_some() && sec.ring_size.is_none() {
        // as deep as a NIC's receive ring: a core the machine keeps from
        // running for tens of milliseconds loses nothing of a TCP download
        cfg.ring_size = IFACE_RING;
    }
    let steering = match a.steer.as_deref().or(sec.io.steer.as_deref()) {
        Some("kernel") => runtime::Steering::Kernel,
        None | Some("user") => runtime::Steering::User,
        Some(o) => bail!("`steer` = `{o}`: expected `kernel` or `user`"),
    };
    // every parameter, and the memory they add up to, checked before a
    // capture is read
    cfg.validate()?;
    let io_memory = match (&ifaces, netio::socket_io()) {
        (Some(i), netio::Io::Xdp(s)) => {
            let sockets = match steering {
                runtime::Steering::Kernel => cfg.workers as u32,
                runtime::Steering::User => 1,
            };
            vec![runtime::memory::Part {
                what: "AF_XDP UMEM and rings (interface queues × (`[io] xdp_frames` × 2 KiB + rings of `xdp_ring`))",
                bytes: netio::xdp::memory(i, sockets, s.sizes),
            }]
        }
        _ => Vec::new(),
    };
    let budget = match a.replay_memory.as_deref().or(sec.replay_memory.as_deref()) {
        Some(s) => crate::memcap::parse_size(s).context("`replay_memory`")?,
        None => crate::packets::REPLAY_MEMORY,
    };
    let plan = match &ifaces {
        Some(_) => crate::packets::Plan::none(),
        None => crate::packets::plan(a.input.as_deref(), hold, cfg.presteer, budget)?,
    };
    let mut memory = io_memory.clone();
    memory.extend(plan.held.clone());
    crate::memcap::check(&chain, &cfg, &memory, a.memcap.as_deref())?;
    if ifaces.is_some() && cfg.presteer {
        bail!("`presteer` prepares a replayed trace: it does not apply to --iface");
    }
    if ifaces.is_some() && cfg.nic_threads > 1 {
        bail!(
            "`nic_threads` parses a replayed trace on more threads: it does not apply \
             to --iface (use `--steer kernel` to steer in the kernel)"
        );
    }
    if a.input.is_none() && ifaces.is_none() {
        eprintln!("flowshift: no --input: the default trace (flowshift gen's defaults)");
    }
    let packets = plan.open()?;
    Ok(Setup {
        chain,
        chain_cfg,
        base,
        cfg,
        packets,
        sec,
        ifaces,
        steering,
        io_memory,
    })
}

/// The run's parameters from the flags and `[run]` (a flag wins), before
/// the checks `RunConfig::validate` makes.
fn run_config(a: &RunArgs, sec: &RunSection) -> anyhow::Result<RunConfig> {
    let name = a
        .balancer
        .as_deref()
        .or(sec.balancer.as_deref())
        .unwrap_or("static");
    let balancer = balancer_kind(name, sec)?;
    let mut cfg = RunConfig {
        balancer,
        ..RunConfig::default()
    };
    if let Some(w) = a.workers.or(sec.workers) {
        cfg.workers = w;
    }
    if let Some(o) = a.offloaders.or(sec.offloaders) {
        cfg.offloaders = o;
    }
    if let Some(r) = a.offload_ratio.or(sec.offload_ratio) {
        cfg.offload_ratio = r;
    }
    if let Some(r) = sec.ring_size {
        cfg.ring_size = r;
    }
    if let Some(b) = a.burst.or(sec.burst) {
        cfg.burst = b;
    }
    if let Some(m) = a
        .offload_select
        .as_deref()
        .or(sec.offload_select.as_deref())
    {
        cfg.offload_select = match m {
            "hash" => runtime::OffloadSelect::Hash,
            "heaviest" => runtime::OffloadSelect::Heaviest,
            other => bail!("`offload_select` = `{other}`: expected `hash` or `heaviest`"),
        };
    }
    if let Some(p) = a.period.as_deref().or(sec.period.as_deref()) {
        cfg.period = duration("period", p)?;
    }
    if let Some(d) = a.nic_delay.as_deref().or(sec.nic_update_delay.as_deref()) {
        cfg.nic_update_delay = duration("nic_update_delay", d)?;
    }
    cfg.presteer = a.presteer || sec.presteer.unwrap_or(false);
    if let Some(k) = a.nic_threads.or(sec.nic_threads) {
        cfg.nic_threads = k;
    }
    Ok(cfg)
}

/// This node's replication, from `[pool]` (relative paths against `base`).
fn replica(
    pool: Option<&PoolSection>,
    base: &std::path::Path,
) -> anyhow::Result<Option<runspec::Replica>> {
    Ok(match pool {
        Some(p) => Some(runspec::Replica {
            listen: p.listen,
            secondary: p.secondary,
            key: pool_key(p, base)?,
            pair_timeout_ms: p.pair_timeout_ms.unwrap_or(0),
            primary: p.primary,
            primary_lost: runspec::Flag::default(),
            spill: match &p.spill {
                Some(s) if s.vips.is_empty() => bail!("`[pool.spill] vips` is empty"),
                Some(s) => Some(runspec::SpillTo {
                    to: s.to,
                    vips: s.vips.clone(),
                    capacity: s.capacity,
                    linger_ms: s.linger_ms.unwrap_or(10_000),
                }),
                None => None,
            },
            splits: p
                .split
                .iter()
                .map(|t| {
                    if t.parts.len() < 2 || usize::from(t.local) >= t.parts.len() {
                        bail!(
                            "`[[pool.split]]` for {}: {} parts and local part {}: a split \
                             tenant has two parts or more, this node's among them",
                            t.vip,
                            t.parts.len(),
                            t.local
                        );
                    }
                    Ok(runspec::SplitTenant {
                        vip: t.vip,
                        local: t.local,
                        parts: t.parts.clone(),
                    })
                })
                .collect::<anyhow::Result<_>>()?,
        }),
        None => None,
    })
}

/// How the interfaces are read and written (`--rx`, `--tx`, `--io` or
/// `[io]`), set for the process; whether the run turns on receive packet
/// steering.
fn io_modes(a: &RunArgs, io: &IoSection) -> anyhow::Result<bool> {
    let rx = match (a.rx, io.rx.as_deref()) {
        (Some(r), _) => r,
        (None, None | Some("recvmmsg")) => RxArg::Recvmmsg,
        (None, Some("ring")) => RxArg::Ring,
        (None, Some(o)) => bail!("[io] rx = `{o}`: expected `recvmmsg` or `ring`"),
    };
    netio::set_rx_mode(match rx {
        RxArg::Recvmmsg => netio::RxMode::Recvmmsg,
        RxArg::Ring => netio::RxMode::Ring,
    });
    let tx = match (a.tx, io.tx.as_deref()) {
        (Some(t), _) => t,
        (None, None | Some("sendmmsg")) => TxArg::Sendmmsg,
        (None, Some("ring")) => TxArg::Ring,
        (None, Some(o)) => bail!("[io] tx = `{o}`: expected `sendmmsg` or `ring`"),
    };
    netio::set_io(io_backend(a.io, io)?);
    netio::set_tx_mode(match tx {
        TxArg::Sendmmsg => netio::TxMode::Sendmmsg,
        TxArg::Ring => netio::TxMode::Ring,
    });
    Ok(!a.no_rps && io.rps.unwrap_or(true))
}

/// The live status line on a terminal: each core's load, the rate, the
/// shards moving.
fn progress_line() -> runtime::Progress {
    runtime::Progress(std::sync::Arc::new(|s: &balance::Snapshot| {
        let loads: Vec<String> = s
            .core_load
            .iter()
            .map(|l| format!("{:5.1}%", 100.0 * l))
            .collect();
        let pkts: u64 = s.core_packets.iter().sum();
        eprint!(
            "\r{:8.2} s  core load {}  {:.2} Mpps  moving {}   ",
            s.now_ns as f64 / 1e9,
            loads.join(" "),
            pkts as f64 / (s.period_ns.max(1) as f64 / 1e3),
            s.moving.len()
        );
    }))
}

/// Ctrl-C / SIGTERM end the run (it drains and reports); a second one, half a
/// second or more later, exits at once (`netio::stop`).
pub fn stop_on_signals() -> anyhow::Result<runtime::Stop> {
    let stop = runtime::Stop::default();
    netio::stop::on_stop_signals(stop.0.clone())?;
    Ok(stop)
}

/// How a finished run went: its report, and why its input ended early if it
/// did (the report covers the run up to then).
pub struct Ran {
    /// The run's report (also written to `--json`).
    pub report: RunReport,
    /// Why the input failed, if it did.
    pub input_failure: Option<String>,
}

/// Starts the NAT event logger `--nat-log` / `[io] nat_log` asks for, with
/// every NAT of `chain` queueing its events for it.
fn nat_log(
    a: &RunArgs,
    sec: &RunSection,
    chain: &mut nf::Chain,
) -> anyhow::Result<Option<(crate::natlog::Logger, crate::natlog::Dest)>> {
    let Some(d) = a.nat_log.as_ref().or(sec.io.nat_log.as_ref()) else {
        return Ok(None);
    };
    let dest: crate::natlog::Dest = d.parse()?;
    if !chain.has_events() {
        bail!("--nat-log {dest}: the chain has no NAT to log");
    }
    let queue = sec.io.nat_log_queue.unwrap_or(crate::natlog::QUEUE);
    if !(1..=1 << 24).contains(&queue) {
        bail!("`[io] nat_log_queue` = {queue}: events per core's queue are 1..=16777216");
    }
    let hub = std::sync::Arc::new(nf::nat::EventHub::new(queue));
    chain.log_events(&hub);
    let logger = crate::natlog::Logger::start(&dest, hub)?;
    eprintln!("flowshift: NAT events to {dest}");
    Ok(Some((logger, dest)))
}

/// Serves what a run shows while it runs: the metrics of `--metrics` and
/// the control socket `--control` / `[io] control` names (by default an
/// interface run's `/run/flowshift/PID.sock`; the file goes with the
/// returned value).
fn live(
    a: &RunArgs,
    sec: &RunSection,
    ifaces: bool,
    cfg: &mut RunConfig,
    running: (ChainConfig, &nf::Chain),
) -> anyhow::Result<Option<crate::control::Served>> {
    if let Some(addr) = a.metrics.as_ref().or(sec.io.metrics.as_ref()) {
        let m = std::sync::Arc::new(runspec::metrics::Metrics::default());
        let at = crate::metrics::serve(addr, m.clone(), sec.io.metrics_public)?;
        eprintln!("flowshift: metrics at http://{at}/metrics");
        cfg.metrics = Some(m);
    }
    let asked = a.control.as_ref().or(sec.io.control.as_ref());
    let path = match asked.map(String::as_str) {
        Some("off") => return Ok(None),
        Some(p) => std::path::PathBuf::from(p),
        None if ifaces => crate::control::default_path(),
        None => return Ok(None),
    };
    let metrics = cfg.metrics.get_or_insert_with(Default::default).clone();
    let cores = std::sync::Arc::new(runspec::control::Control::default());
    let reloader = std::sync::Arc::new(crate::reload::Reloader::new(
        a.config.as_deref(),
        cfg.workers,
        (running.0, running.1.instance()),
        cores.clone(),
    )?);
    match crate::control::serve(&path, cores.clone(), metrics, Some(reloader.clone())) {
        Ok(s) => {
            eprintln!(
                "flowshift: control socket {} (flowshift ctl)",
                path.display()
            );
            cfg.control = Some(cores);
            crate::reload::on_sighup(reloader)?;
            Ok(Some(s))
        }
        // the default place may be closed to this user: say so, run on
        Err(e) if asked.is_none() => {
            eprintln!("flowshift: no control socket ({e:#}); give one with --control PATH");
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// How the run stops: on signals, or — a pool node on BGP — its speaker
/// drains the node's routes first. The speaker's control, if any.
fn stopping(
    a: &RunArgs,
    sec: &RunSection,
    ifaces: Option<&Vec<String>>,
    cfg: &mut RunConfig,
) -> anyhow::Result<Option<PathBuf>> {
    let bgp = sec.pool.as_ref().and_then(|p| p.bgp.as_ref());
    let speaker = match (bgp, ifaces) {
        (Some(b), Some(i)) => {
            let stem = a
                .config
                .as_ref()
                .expect("[pool] comes from a config file")
                .with_extension("");
            Some((crate::speaker::Speaker::start(b, &stem)?, i.clone()))
        }
        (Some(_), None) => {
            bail!("[pool.bgp] announces the traffic of a node's interfaces: it needs --iface")
        }
        (None, _) => None,
    };
    let ctl = speaker.as_ref().map(|(s, _)| s.ctl.clone());
    cfg.stop = Some(match speaker {
        // the first signal drains the node: its routes go, then it stops
        Some((s, i)) => {
            let stop = runtime::Stop::default();
            let drain = crate::speaker::drain_on_signals()?;
            let lost = cfg.replica.as_ref().map(|r| r.primary_lost.clone());
            crate::speaker::watch(s, i, drain, lost, stop.clone());
            stop
        }
        None => stop_on_signals()?,
    });
    Ok(ctl)
}

/// Runs the chain as `a` says until its input ends or a signal stops it;
/// writes `--json` and `--output`.
pub fn run(a: &RunArgs) -> anyhow::Result<Ran> {
    let Setup {
        mut chain,
        chain_cfg,
        mut cfg,
        packets,
        ifaces,
        sec,
        steering,
        io_memory,
        ..
    } = setup(a, crate::packets::Hold::Stream)?;
    // output paths are checked before the run, not after it
    for p in a.json.iter().chain(&a.output) {
        crate::output::check(p)?;
    }
    let ctl = stopping(a, &sec, ifaces.as_ref(), &mut cfg)?;
    let _control = live(a, &sec, ifaces.is_some(), &mut cfg, (chain_cfg, &chain))?;
    // (before the run starts: an SMF may install sessions as traffic comes)
    let _pfcp = crate::pfcp::serve(&chain)?;
    let nat_log = nat_log(a, &sec, &mut chain)?;
    let what = match &ifaces {
        Some(i) => format!("interfaces {} (Ctrl-C to stop)", i.join(", ")),
        None => packets.describe(),
    };
    eprintln!(
        "flowshift: {what}, {} working + {} offloading cores, balancer {}, chain:\n{}",
        cfg.workers,
        cfg.offloaders,
        cfg.balancer.name(),
        chain.describe()
    );
    let kernel = steering == runtime::Steering::Kernel && ifaces.is_some();
    if let Some(n) = crowded(&cfg, kernel) {
        eprintln!("flowshift: {n}");
    }
    if ifaces.is_some() {
        // scripts (and the bench) wait for this line before offering traffic
        cfg.ready = Some(runtime::Ready(std::sync::Arc::new(move || {
            // a node's routes go up once it forwards
            if let Some(ctl) = &ctl {
                match crate::speaker::announce(ctl, true) {
                    Ok(()) => eprintln!("flowshift: announced by BGP"),
                    Err(e) => eprintln!("flowshift: announcing by BGP failed: {e}"),
                }
            }
            eprintln!("{}", crate::forwarding::LINE)
        })));
    }
    let input = match &ifaces {
        Some(i) => runtime::Input::Ifaces(i, steering),
        None => packets.input()?.expect("packets to replay"),
    };
    // the output capture is written while the run goes, never held in memory
    let streamed = match &a.output {
        Some(p) => Some(crate::output::StreamedCapture::start(p)?),
        None => None,
    };
    cfg.output_tap = streamed.as_ref().map(|w| w.tap());
    let rss_start = crate::memcap::process_bytes("VmRSS");
    let out = runtime::run_on(&chain, input, &cfg);
    // the writer ends once the last tap is gone
    cfg.output_tap = None;
    if let Some((logger, dest)) = nat_log {
        let w = logger.finish();
        eprintln!(
            "flowshift: NAT log: {} records to {dest}{}",
            w.records,
            w.failures()
        );
    }
    let mut out = out?;
    let m = &mut out.report.memory;
    m.insert("tables_at_capacity", chain.table_bytes_at_capacity());
    if let Some(p) = io_memory.first() {
        m.insert("xdp_umem", p.bytes);
    }
    if let (Some(start), Some(peak)) = (rss_start, crate::memcap::process_bytes("VmHWM")) {
        m.insert("rss_start", start);
        m.insert("max_rss", peak);
    }
    if cfg.progress.is_some() {
        eprintln!();
    }
    packets.warn_streamed(out.streamed.as_ref());
    if out.held != 0 || out.leftover_leases != 0 {
        bail!(
            "{} packets still held and {} flow states still offloaded when the run ended: a migration did not complete",
            out.held,
            out.leftover_leases
        );
    }
    if let Some(p) = &a.json {
        crate::output::json(p, &out.report)?;
    }
    if let Some(w) = streamed {
        let p = a.output.as_ref().expect("streamed to --output");
        let n = w.finish()?;
        eprintln!("flowshift: wrote {n} packets to {}", p.display());
    }
    Ok(Ran {
        report: out.report,
        input_failure: out.input_failure,
    })
}

/// Fails now, with what is missing, if this process may not open an
/// interface's packets (`CAP_NET_RAW`) — before receive packet steering or
/// an eBPF program fail on the same missing privilege with less to say.
fn may_open_interfaces() -> anyhow::Result<()> {
    /// `CAP_NET_RAW`'s bit in the capability sets.
    const CAP_NET_RAW: u32 = 13;
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let effective = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|h| u64::from_str_radix(h.trim(), 16).ok());
    match effective {
        Some(caps) if caps & (1 << CAP_NET_RAW) == 0 => bail!(
            "--iface reads and sends an interface's frames, which needs CAP_NET_RAW (and \
             CAP_NET_ADMIN, CAP_BPF for steering and XDP): run it as root, or give the binary \
             the capabilities (`setcap cap_net_raw,cap_net_admin,cap_bpf,cap_sys_admin+ep`)"
        ),
        // (no /proc to read: the sockets will say)
        _ => Ok(()),
    }
}

/// The threads of a run that poll without pause: its working and
/// offloading cores and, unless the kernel steers (`kernel`), the NIC
/// model's.
pub fn polling_threads(cfg: &RunConfig, kernel: bool) -> usize {
    let nic = if kernel { 0 } else { cfg.nic_threads.max(1) };
    cfg.workers + cfg.offloaders + nic
}

/// A note when the run's polling threads (working and offloading cores, the
/// NIC model's) outnumber this machine's CPUs: they then take turns, and
/// latency shows the scheduler's time slices (milliseconds) — a report to
/// read with that in mind. `kernel`: the kernel steers, no NIC-model thread.
fn crowded(cfg: &RunConfig, kernel: bool) -> Option<String> {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let nic = if kernel { 0 } else { cfg.nic_threads.max(1) };
    let busy = polling_threads(cfg, kernel);
    (busy > cpus).then(|| {
        format!(
            "{busy} polling threads ({} working, {} offloading, {nic} NIC model) on {cpus} CPUs: \
             they take turns, so latency includes the scheduler's time slices",
            cfg.workers, cfg.offloaders
        )
    })
}

/// Whether the balancer `name` can run `chain` on `workers` working cores:
/// `roger` needs live rules' cells (`steering.rule_key`) and a rule budget
/// of at least one rule per core; every other balancer can.
pub fn roger_fits(
    name: &str,
    chain: &nf::Chain,
    sec: &RunSection,
    workers: usize,
) -> anyhow::Result<()> {
    if name != "roger" {
        return Ok(());
    }
    if !chain.steers_by_cells() {
        bail!(
            "`balancer` = `roger` re-plans rules over a key: set `steering.rule_key` in the \
             chain (e.g. rule_key = \"src-ip:26-31\")"
        );
    }
    let r = sec.roger.clone().unwrap_or_default();
    r.check(workers)
        .map_err(|e| anyhow::anyhow!("[run.roger] {e}"))
}

/// The balancer called `name`, with its `[run.*]` parameters.
pub fn balancer_kind(name: &str, sec: &RunSection) -> anyhow::Result<BalancerKind> {
    Ok(match name {
        "static" => BalancerKind::Static,
        "random" => BalancerKind::Random,
        "rsspp" => {
            let cfg = sec.rsspp.clone().unwrap_or_default();
            cfg.check()
                .map_err(|e| anyhow::anyhow!("[run.rsspp] {e}"))?;
            BalancerKind::Rsspp(cfg)
        }
        "sprayer" => BalancerKind::Sprayer,
        "dyssect" => {
            let cfg = sec.dyssect.clone().unwrap_or_default();
            // check the parameters now, with a clear error
            dyssect::Dyssect::new(cfg.clone()).map_err(|e| anyhow::anyhow!("[run.dyssect] {e}"))?;
            BalancerKind::Custom(
                "dyssect",
                runtime::MakeBalancer(std::sync::Arc::new(move |_| {
                    Box::new(dyssect::Dyssect::new(cfg.clone()).expect("checked"))
                })),
            )
        }
        "roger" => {
            let cfg = sec.roger.clone().unwrap_or_default();
            BalancerKind::Custom(
                "roger",
                runtime::MakeBalancer(std::sync::Arc::new(move |_| {
                    Box::new(balance::balancers::Roger::new(cfg.clone()))
                })),
            )
        }
        other => bail!(
            "`balancer` = `{other}`: expected `static`, `rsspp`, `dyssect`, `roger`, `sprayer` \
             or `random`"
        ),
    })
}
