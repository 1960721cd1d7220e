//! `flowshift bench-kernel`: flowshift's firewall → NAT on real interfaces next
//! to the Linux kernel's own nftables firewall + NAT (conntrack), on the same
//! network-namespace bed and the same traffic, in one run.
//!
//! The bed is [`netio::testbed::Bed`]; the middle namespace is either a bump in
//! the wire running `flowshift run --iface` (one working core) or a router
//! whose forwarding path runs an nftables ruleset equivalent to the chain
//! (stateful accept of connections from 10.0.0.0/8, source NAT onto
//! 203.0.113.0/24). A sender of ours in the client namespace blasts 64 B UDP
//! frames of many flows (from the trace generator) through an AF_XDP socket's
//! transmit ring (or `sendmmsg` on an `AF_PACKET` socket), pinned to the last
//! CPU; receive packet steering puts the
//! middle's receive work on CPU 0, where flowshift's working core is pinned,
//! so each variant gets one CPU for the network function. Delivered packets are
//! counted on the server's interface. Variants run in turn, `--rounds` times;
//! the table shows each one's median and its ratio to nftables.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Args;
use netio::netns;
use netio::testbed::Bed;
use netio::PacketSocket;
use trace::{Generator, SizeDist, Trace, TraceSpec};

/// Options of `flowshift bench-kernel`.
#[derive(Args, Debug)]
pub struct BenchKernelArgs {
    /// Seconds each variant is offered traffic, per round.
    #[arg(long, default_value_t = 3.0)]
    pub seconds: f64,
    /// Flows (UDP, 64 B frames) in the offered traffic.
    #[arg(long, default_value_t = 10_000)]
    pub flows: u32,
    /// Rounds; each variant's median is reported.
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Offer at most this many Mpps (default: as fast as the sender goes).
    #[arg(long)]
    pub rate: Option<f64>,
    /// Write the results as JSON.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Only the variants whose name contains one of these (comma-separated;
    /// nftables always runs: it is what the others are compared with),
    /// e.g. `xdp,routing`.
    #[arg(long)]
    pub only: Option<String>,
    /// Count flowshift's system calls while traffic is offered (`perf stat
    /// -e raw_syscalls:sys_enter` on its process) and print them per 1 000
    /// packets delivered.
    #[arg(long)]
    pub syscalls: bool,
    /// Real TCP instead of 64 B UDP: `iperf3` from the client to a server
    /// in the server namespace, 1 and 4 streams, `--seconds` each (10 is
    /// iperf3's own default), through kernel routing, nftables and flowshift
    /// (AF_XDP with kernel steering, and AF_PACKET); Gbit/s received.
    #[arg(long)]
    pub tcp: bool,
    /// With `--tcp`: the endpoints hand their interfaces wire-size segments
    /// (TSO and GSO off on the client's and the server's veth), so the
    /// kernel's variants forward 1 500-byte frames as flowshift does, rather
    /// than 64 KiB segments a veth passes whole.
    #[arg(long)]
    pub wire_segments: bool,
    /// How the client offers the 64 B frames: `xdp` hands them to the
    /// kernel through an AF_XDP socket's transmit ring (a frame costs the
    /// sender an skb and a copy, no system call of its own), `packet` calls
    /// `sendmmsg` on a packet socket. Every variant gets the same sender.
    #[arg(long, value_enum, default_value_t = Sender::Xdp)]
    pub sender: Sender,
    /// Interrupt coalescing of the middle's interfaces for the AF_XDP
    /// variants, µs (`gro_flush_timeout`; 0: none).
    #[arg(long, default_value_t = 100)]
    pub coalesce_us: u64,
    /// Run the AF_XDP variants' receive work (the middle's veth NAPI, where
    /// the XDP program runs) in kernel threads pinned to the network
    /// function's CPU, as on a NIC; a veth otherwise runs it on the CPU that
    /// sent the frame (the sender's, or the endpoints').
    #[arg(long)]
    pub napi_on_nf_cpu: bool,
    /// Only measure what the XDP steering program costs per frame under
    /// each way it steers (the hash, a plan's rules, live rules' cells), by
    /// `BPF_PROG_TEST_RUN` on generated frames; no traffic.
    #[arg(long)]
    pub program_cost: bool,
}

/// How the bench's client sends.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sender {
    /// An AF_XDP socket's transmit ring (copy mode).
    Xdp,
    /// `sendmmsg` on an `AF_PACKET` socket.
    Packet,
}

/// The variants measured.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Variant {
    /// Kernel forwarding with no ruleset: the kernel's ceiling.
    KernelRouting,
    /// Kernel forwarding through the nftables firewall + NAT.
    Nftables,
    /// flowshift FW → NAT, one working core reading its own socket.
    FlowshiftKernelSteer,
    /// flowshift FW → NAT, one working core fed by the NIC-model thread.
    FlowshiftUserSteer,
    /// The same, the NIC-model thread reading a `TPACKET_V3` ring instead of
    /// calling `recvmmsg`.
    FlowshiftUserRing,
    /// The same, `recvmmsg` in, and the working core sending through a
    /// `TPACKET_V2` ring instead of calling `sendmmsg`.
    FlowshiftUserTxRing,
    /// The same over AF_XDP (`--io xdp`): an XDP program redirects frames
    /// to the NIC-model thread's socket, the working core sends through
    /// its own.
    FlowshiftXdp,
    /// AF_XDP steered in the kernel (`--io xdp --steer kernel`): the XDP
    /// program hashes each frame and redirects it to its working core's
    /// socket, which the core reads itself.
    FlowshiftXdpKernel,
}

impl Variant {
    const ALL: [Variant; 8] = [
        Variant::KernelRouting,
        Variant::Nftables,
        Variant::FlowshiftKernelSteer,
        Variant::FlowshiftUserSteer,
        Variant::FlowshiftUserRing,
        Variant::FlowshiftUserTxRing,
        Variant::FlowshiftXdp,
        Variant::FlowshiftXdpKernel,
    ];

    fn name(self) -> &'static str {
        match self {
            Variant::KernelRouting => "kernel routing (no rules)",
            Variant::Nftables => "nftables fw+nat (conntrack)",
            Variant::FlowshiftKernelSteer => "flowshift fw+nat --steer kernel",
            Variant::FlowshiftUserSteer => "flowshift fw+nat --steer user",
            Variant::FlowshiftUserRing => "flowshift fw+nat --steer user --rx ring",
            Variant::FlowshiftUserTxRing => "flowshift fw+nat --steer user --tx ring",
            Variant::FlowshiftXdp => "flowshift fw+nat --io xdp",
            Variant::FlowshiftXdpKernel => "flowshift fw+nat --io xdp --steer kernel",
        }
    }

    /// How flowshift's sockets receive and send (`run --rx`, `--tx`, or
    /// `--io xdp`).
    fn io(self) -> &'static [&'static str] {
        match self {
            Variant::FlowshiftUserRing => &["--rx", "ring", "--tx", "sendmmsg"],
            Variant::FlowshiftUserTxRing => &["--rx", "recvmmsg", "--tx", "ring"],
            Variant::FlowshiftXdp | Variant::FlowshiftXdpKernel => &["--io", "xdp"],
            _ => &["--rx", "recvmmsg", "--tx", "sendmmsg"],
        }
    }

    fn flowshift(self) -> Option<&'static str> {
        match self {
            Variant::FlowshiftKernelSteer | Variant::FlowshiftXdpKernel => Some("kernel"),
            Variant::FlowshiftUserSteer
            | Variant::FlowshiftUserRing
            | Variant::FlowshiftUserTxRing
            | Variant::FlowshiftXdp => Some("user"),
            _ => None,
        }
    }
}

/// One variant's measurement in one round.
#[derive(Clone, Debug, serde::Serialize)]
struct Sample {
    variant: &'static str,
    round: usize,
    sent: u64,
    /// Frames sent before `sent` to see flowshift forward (in its report too).
    probes: u64,
    delivered: u64,
    offered_mpps: f64,
    delivered_mpps: f64,
    /// flowshift's own report.
    flowshift: Option<FlowshiftReport>,
    /// flowshift's system calls while traffic was offered (`--syscalls`).
    syscalls: Option<u64>,
}

/// The nftables ruleset: flowshift's bench chain in the kernel's words.
const NFT_RULES: &str = "table ip fsbench {
  chain forward {
    type filter hook forward priority 0; policy drop;
    ct state established,related accept
    ip saddr 10.0.0.0/8 ct state new accept
  }
  chain postrouting {
    type nat hook postrouting priority 100; policy accept;
    ip saddr 10.0.0.0/8 snat to 203.0.113.1-203.0.113.254
  }
}
";

/// flowshift's chain: the same firewall and NAT.
const CHAIN: &str = "[table]\ncapacity = 262144\n\
[[nf]]\nkind = \"firewall\"\nrules = \"allow any 10.0.0.0/8 -> any\"\n\
[[nf]]\nkind = \"nat\"\ninternal = \"10.0.0.0/8\"\nexternal = [\"203.0.113.0/24\"]\n";

/// What every UDP sample of a bench-kernel run shares: the bed, its
/// interfaces' names and addresses, the frames, flowshift's chain.
struct Udp<'a> {
    bed: &'a Bed,
    c0: String,
    s0: String,
    a_mac: [u8; 6],
    c_mac: [u8; 6],
    s_mac: [u8; 6],
    frames: Vec<Vec<u8>>,
    dir: PathBuf,
    chain: PathBuf,
    dur: Duration,
    rate: Option<f64>,
    sender: Sender,
    coalesce_us: u64,
    napi_on_nf_cpu: bool,
    cpus: usize,
    syscalls: bool,
}

impl Udp<'_> {
    /// One variant's sample in `round`: the variant set up, the frames sent
    /// for the run's duration, what the server got counted, torn down.
    fn sample(&self, v: Variant, round: usize) -> anyhow::Result<Sample> {
        // the kernel routes frames addressed to its interface; flowshift
        // forwards frames as they are, addressed to the server
        let dst = if v.flowshift().is_some() {
            self.s_mac
        } else {
            self.a_mac
        };
        let batch = addressed(&self.frames, dst, self.c_mac, round);
        let mut child = None;
        let mut probes = 0;
        match v.flowshift() {
            None => {
                if v == Variant::Nftables {
                    nft(self.bed, NFT_RULES)?;
                }
                self.bed.set_forwarding(true)?;
            }
            Some(steer) => {
                let json = self
                    .dir
                    .join(format!("run-{round}-{steer}-{}.json", v.io().join("")));
                let mut f = start_flowshift(self.bed, steer, v.io(), &self.chain, &json)?;
                probes = wait_forwarding(self.bed, (&self.c0, &self.s0), &batch, &mut f)?;
                if matches!(v, Variant::FlowshiftXdp | Variant::FlowshiftXdpKernel) {
                    if self.napi_on_nf_cpu {
                        self.bed.napi_threads_on(0)?;
                    }
                    // the XDP program's NAPI polled in batches, as a
                    // NIC's interrupts are coalesced for a poll-mode
                    // network function (measured in EXPERIMENTS §8)
                    if self.coalesce_us > 0 {
                        self.bed.coalesce(self.coalesce_us)?;
                    }
                }
                child = Some(f);
                // the last probes leave before counting starts
                std::thread::sleep(Duration::from_millis(200));
            }
        }
        let counting = match (&child, self.syscalls) {
            (Some(f), true) => Some(SyscallCount::start(f.child.id())?),
            _ => None,
        };
        let rx0 = netns::counter(&self.bed.server(), &self.s0, "rx_packets")?;
        let sent = send_with(
            self.sender,
            &self.bed.client(),
            &self.c0,
            &batch,
            (self.dur, u64::MAX),
            self.rate,
            self.cpus - 1,
        )?;
        let syscalls = counting.map(SyscallCount::stop).transpose()?;
        std::thread::sleep(Duration::from_millis(200));
        let delivered = netns::counter(&self.bed.server(), &self.s0, "rx_packets")? - rx0;
        let mut fs = None;
        match child {
            None => {
                self.bed.set_forwarding(false)?;
                if v == Variant::Nftables {
                    netns::exec(
                        &self.bed.middle(),
                        "nft",
                        &["delete", "table", "ip", "fsbench"],
                    )?;
                }
            }
            Some(c) => fs = Some(stop_flowshift(c)?),
        }
        let secs = self.dur.as_secs_f64();
        let s = Sample {
            variant: v.name(),
            round,
            sent,
            probes,
            delivered,
            offered_mpps: sent as f64 / secs / 1e6,
            delivered_mpps: delivered as f64 / secs / 1e6,
            flowshift: fs.clone(),
            syscalls,
        };
        eprintln!(
            "  round {round}: {:<39} offered {:>6.3} Mpps, delivered {:>6.3} Mpps{}",
            s.variant,
            s.offered_mpps,
            s.delivered_mpps,
            fs.map(|f| {
                let [i, o, d] = f.counts;
                format!(" (flowshift: in {i}, out {o}, dropped {d}: {:?})", f.drops)
            })
            .unwrap_or_default()
        );
        if let Some(n) = syscalls {
            eprintln!(
                "           system calls {n}: {:.1} per 1 000 packets delivered",
                per_thousand(n, delivered)
            );
        }
        Ok(s)
    }
}

/// The medians of each variant's samples, beside nftables'.
fn print_table(samples: &[Sample], chosen: &[Variant], syscalls: bool) {
    let median = |v: Variant, f: fn(&Sample) -> f64| {
        let mut x: Vec<f64> = samples
            .iter()
            .filter(|s| s.variant == v.name())
            .map(f)
            .collect();
        x.sort_by(f64::total_cmp);
        x[x.len() / 2]
    };
    let nft_rate = median(Variant::Nftables, |s| s.delivered_mpps);
    println!(
        "{:<39} {:>13} {:>15} {:>12}",
        "variant", "offered Mpps", "delivered Mpps", "vs nftables"
    );
    for &v in chosen {
        let d = median(v, |s| s.delivered_mpps);
        println!(
            "{:<39} {:>13.3} {:>15.3} {:>12.2}",
            v.name(),
            median(v, |s| s.offered_mpps),
            d,
            d / nft_rate.max(1e-9)
        );
    }
    if syscalls {
        println!("\nsystem calls per 1 000 packets delivered (medians):");
        for &v in chosen.iter().filter(|v| v.flowshift().is_some()) {
            println!(
                "{:<39} {:>10.1}",
                v.name(),
                median(v, |s| per_thousand(s.syscalls.unwrap_or(0), s.delivered))
            );
        }
    }
}

pub fn run(a: BenchKernelArgs) -> anyhow::Result<()> {
    if !(a.seconds > 0.0 && a.seconds <= 600.0) {
        bail!(
            "--seconds {}: expected more than 0 and at most 600",
            a.seconds
        );
    }
    if a.rate.is_some_and(|r| !(r > 0.0 && r <= 1000.0)) {
        bail!(
            "--rate {:?}: expected Mpps above 0 and at most 1000",
            a.rate
        );
    }
    if a.rounds == 0 || a.flows == 0 {
        bail!("--rounds and --flows must be at least 1");
    }
    if a.program_cost {
        return crate::xdp_cost::run();
    }
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let bed = Bed::up("fsbk")
        .context("building the network-namespace bed (needs root and network namespaces)")?;
    if a.tcp {
        return tcp(&a, &bed);
    }
    let (a_if, _) = bed.ifaces();
    let c0 = format!("{}c0", bed.prefix);
    let s0 = format!("{}s0", bed.prefix);
    bed.route_in_middle()?;
    // the server is a sink: what arrives is counted (its interface's
    // rx_packets) and dropped at its ingress, so its IP stack — which would
    // route and refuse every frame on the same CPU as the network function
    // under test, a cost of this one-machine bed — costs no variant anything
    nft_in(
        &bed.server(),
        &format!(
            "table netdev fssink {{\n  chain in {{\n    type filter hook ingress device {s0} priority 0; policy drop;\n  }}\n}}\n"
        ),
    )?;
    bed.steer_middle_rx(1)?;
    let a_mac = parse_mac(&netns::mac(&bed.middle(), &a_if)?)?;
    let c_mac = parse_mac(&netns::mac(&bed.client(), &c0)?)?;
    let s_mac = parse_mac(&netns::mac(&bed.server(), &s0)?)?;
    let frames = frames(a.flows)?;
    eprintln!(
        "flowshift bench-kernel: {} flows, {} frames of 64 B, {} s per variant at {}, {} round(s), sender ({:?}) on CPU {}, network function on CPU 0",
        a.flows,
        frames.len(),
        a.seconds,
        a.rate.map_or("full speed".to_string(), |r| format!("{r} Mpps")),
        a.rounds,
        a.sender,
        cpus - 1
    );
    let dir = std::env::temp_dir().join(format!("flowshift-bench-kernel-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let chain = dir.join("fw-nat.toml");
    std::fs::write(&chain, CHAIN)?;
    let mut samples: Vec<Sample> = Vec::new();
    let chosen = chosen(&Variant::ALL, a.only.as_deref());
    let udp = Udp {
        bed: &bed,
        c0,
        s0,
        a_mac,
        c_mac,
        s_mac,
        frames,
        dir,
        chain,
        dur: Duration::from_secs_f64(a.seconds),
        rate: a.rate,
        sender: a.sender,
        coalesce_us: a.coalesce_us,
        napi_on_nf_cpu: a.napi_on_nf_cpu,
        cpus,
        syscalls: a.syscalls,
    };
    for round in 0..a.rounds {
        for &v in &chosen {
            samples.push(udp.sample(v, round)?);
        }
    }
    let _ = std::fs::remove_dir_all(&udp.dir);
    print_table(&samples, &chosen, a.syscalls);
    if let Some(p) = &a.json {
        launch::output::json(p, &samples)?;
    }
    Ok(())
}

fn per_thousand(n: u64, packets: u64) -> f64 {
    n as f64 * 1000.0 / packets.max(1) as f64
}

/// `perf stat` counting one process's system calls (every thread) until
/// stopped.
struct SyscallCount {
    perf: Child,
    out: PathBuf,
}

impl SyscallCount {
    fn start(pid: u32) -> anyhow::Result<SyscallCount> {
        let out = std::env::temp_dir().join(format!(
            "flowshift-bench-syscalls-{}-{pid}.csv",
            std::process::id()
        ));
        let perf = Command::new("perf")
            .args(["stat", "-x,", "-e", "raw_syscalls:sys_enter", "-p"])
            .arg(pid.to_string())
            .arg("-o")
            .arg(&out)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("--syscalls needs perf (linux-perf) and tracepoints")?;
        // perf attaches to the threads before traffic starts
        std::thread::sleep(Duration::from_millis(300));
        Ok(SyscallCount { perf, out })
    }

    fn stop(mut self) -> anyhow::Result<u64> {
        netio::signal::interrupt(self.perf.id())?;
        let status = self.perf.wait()?;
        let text = std::fs::read_to_string(&self.out).unwrap_or_default();
        let _ = std::fs::remove_file(&self.out);
        text.lines()
            .find(|l| l.contains("raw_syscalls:sys_enter"))
            .and_then(|l| l.split(',').next()?.trim().parse().ok())
            .with_context(|| format!("perf stat ({status}) counted nothing: {}", text.trim()))
    }
}

/// The client-to-server frames of a UDP trace of `flows` flows, 64 B each.
fn frames(flows: u32) -> anyhow::Result<Vec<Vec<u8>>> {
    let spec = TraceSpec {
        flows,
        packets: u64::from(flows).max(50_000) * 4,
        active_flows: flows,
        tcp_share: 0.0,
        ipv6_share: 0.0,
        priority_share: 0.0,
        sizes: SizeDist::Fixed(64),
        ..TraceSpec::default()
    };
    let trace = Trace::from_generated(Generator::new(&spec)?);
    let out: Vec<Vec<u8>> = trace
        .iter()
        .map(|(_, f)| f)
        .filter(|f| f.len() >= 34 && f[12..14] == [0x08, 0x00] && f[26] == 10)
        .map(<[u8]>::to_vec)
        .collect();
    if out.is_empty() {
        bail!("the generated trace has no client-to-server IPv4 frames");
    }
    Ok(out)
}

/// `frames` with their MAC addresses set; the source port's low byte is turned
/// by `round`, so each round's flows are new to the kernel's conntrack too.
fn addressed(frames: &[Vec<u8>], dst: [u8; 6], src: [u8; 6], round: usize) -> Vec<Vec<u8>> {
    frames
        .iter()
        .map(|f| {
            let mut f = f.clone();
            f[0..6].copy_from_slice(&dst);
            f[6..12].copy_from_slice(&src);
            let ihl = usize::from(f[14] & 0x0f) * 4;
            let sport = 14 + ihl;
            if f.len() >= sport + 8 {
                let old = u16::from_be_bytes([f[sport], f[sport + 1]]);
                let new = old ^ (round as u16 & 0xff);
                f[sport..sport + 2].copy_from_slice(&new.to_be_bytes());
                // UDP checksum: incremental update (RFC 1624); 0 means none
                let ck = u16::from_be_bytes([f[sport + 6], f[sport + 7]]);
                if ck != 0 {
                    let sum = u32::from(!ck) + u32::from(!old) + u32::from(new);
                    let sum = (sum & 0xffff) + (sum >> 16);
                    let sum = (sum & 0xffff) + (sum >> 16);
                    let c = !(sum as u16);
                    let c = if c == 0 { 0xffff } else { c };
                    f[sport + 6..sport + 8].copy_from_slice(&c.to_be_bytes());
                }
            }
            f
        })
        .collect()
}

pub fn parse_mac(s: &str) -> anyhow::Result<[u8; 6]> {
    let v: Vec<u8> = s
        .split(':')
        .map(|x| u8::from_str_radix(x, 16))
        .collect::<Result<_, _>>()
        .with_context(|| format!("MAC address `{s}`"))?;
    v.try_into()
        .map_err(|_| anyhow::anyhow!("MAC address `{s}`"))
}

/// Loads an nftables ruleset in the middle namespace.
fn nft(bed: &Bed, rules: &str) -> anyhow::Result<()> {
    nft_in(&bed.middle(), rules)
}

/// Loads nftables `rules` in namespace `ns`.
fn nft_in(ns: &str, rules: &str) -> anyhow::Result<()> {
    let mut c = Command::new("ip")
        .args(["netns", "exec", ns, "nft", "-f", "-"])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("running nft (install nftables: scripts/deps.sh)")?;
    c.stdin.take().expect("piped").write_all(rules.as_bytes())?;
    let out = c.wait_with_output()?;
    if !out.status.success() {
        bail!("nft: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(())
}

/// Blasts `frames` (in a loop) out of `iface` in namespace `ns` for `dur` or
/// until `max` are sent, at most `mpps` million frames a second, from a
/// thread pinned to `cpu`, with `sendmmsg` on a packet socket; returns the
/// frames the interface took.
pub fn send(
    ns: &str,
    iface: &str,
    frames: &[Vec<u8>],
    span: (Duration, u64),
    mpps: Option<f64>,
    cpu: usize,
) -> anyhow::Result<u64> {
    send_with(Sender::Packet, ns, iface, frames, span, mpps, cpu)
}

/// [`send`] through `sender`.
fn send_with(
    sender: Sender,
    ns: &str,
    iface: &str,
    frames: &[Vec<u8>],
    (dur, max): (Duration, u64),
    mpps: Option<f64>,
    cpu: usize,
) -> anyhow::Result<u64> {
    let (ns, iface) = (ns.to_string(), iface.to_string());
    let frames = frames.to_vec();
    std::thread::spawn(move || -> anyhow::Result<u64> {
        netns::enter(&ns)?;
        core_affinity::set_for_current(core_affinity::CoreId { id: cpu });
        let out = Out::open(sender, &iface)?;
        let refs: Vec<&[u8]> = frames.iter().map(Vec::as_slice).collect();
        let (t0, mut i, mut sent) = (Instant::now(), 0usize, 0u64);
        while t0.elapsed() < dur && sent < max {
            if let Some(r) = mpps {
                // paced: the next burst waits for its time
                let due = Duration::from_secs_f64(sent as f64 / (r * 1e6));
                if t0.elapsed() < due {
                    std::hint::spin_loop();
                    continue;
                }
            }
            let end = (i + BURST).min(refs.len()).min(i + (max - sent) as usize);
            let n = out.send(&refs[i..end])?;
            sent += n as u64;
            i = (i + n) % refs.len();
        }
        Ok(sent)
    })
    .join()
    .map_err(|_| anyhow::anyhow!("the sender panicked"))?
}

/// Frames a sender hands over at once.
const BURST: usize = 32;

/// The sender's socket.
enum Out {
    Packet(PacketSocket),
    Xdp(netio::xsk::Xsk),
}

impl Out {
    fn open(sender: Sender, iface: &str) -> anyhow::Result<Out> {
        Ok(match sender {
            Sender::Packet => Out::Packet(PacketSocket::open_tx(iface)?),
            Sender::Xdp => {
                let ifindex = netns::ifindex(iface)?;
                let sizes = netio::xsk::Sizes {
                    frames: 4096,
                    ring: 2048,
                };
                Out::Xdp(
                    netio::xsk::Xsk::open(ifindex, 0, sizes)
                        .with_context(|| format!("an AF_XDP socket on {iface} for the sender"))?,
                )
            }
        })
    }

    /// Sends a burst; returns how many frames the interface took.
    fn send(&self, burst: &[&[u8]]) -> anyhow::Result<usize> {
        match self {
            Out::Packet(sock) => match sock.send_many(burst) {
                Ok(n) => Ok(n),
                // the receiving interface's queue was full and dropped the
                // frame (a veth with an XDP program queues frames for its
                // NAPI): it was offered, as a NIC's full ring drops what
                // reached it
                Err(e) if netio::no_buffer_space(&e) => Ok(1),
                Err(e) => Err(e.into()),
            },
            Out::Xdp(xsk) => {
                let mut too_long = 0;
                // a frame the peer's full queue dropped was offered all the
                // same (the kernel counts it in the interface's tx_dropped)
                Ok(xsk.send(burst, &mut too_long)?)
            }
        }
    }
}

/// A `flowshift run` of the bench, killed if the bench ends before stopping it.
struct Flowshift {
    child: Child,
    json: PathBuf,
}

impl Drop for Flowshift {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Starts `flowshift run` on the bed's middle interfaces with one working core.
fn start_flowshift(
    bed: &Bed,
    steer: &str,
    io: &[&str],
    chain: &std::path::Path,
    json: &std::path::Path,
) -> anyhow::Result<Flowshift> {
    let (a, b) = bed.ifaces();
    let exe = std::env::current_exe()?;
    let log = std::fs::File::create(json.with_extension("log"))?;
    let child = Command::new("ip")
        .args(["netns", "exec", &bed.middle()])
        .arg(exe)
        .args(["run", "--iface", &format!("{a},{b}"), "--steer", steer])
        .args(["--workers", "1", "--balancer", "static"])
        .args(io)
        .arg("--config")
        .arg(chain)
        .arg("--json")
        .arg(json)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .context("starting flowshift run")?;
    Ok(Flowshift {
        child,
        json: json.to_path_buf(),
    })
}

/// Waits until flowshift says it forwards (its tables take a while to build on
/// a busy machine), then until frames sent from the client reach the server
/// through it: every probe of one round, so the odd neighbour message the
/// server also hears cannot pass for forwarding. Returns the frames sent to
/// find out.
fn wait_forwarding(
    bed: &Bed,
    (c0, s0): (&str, &str),
    frames: &[Vec<u8>],
    f: &mut Flowshift,
) -> anyhow::Result<u64> {
    let t0 = Instant::now();
    let limit = Duration::from_secs(30);
    launch::forwarding::wait(&f.json.with_extension("log"), 0, &mut f.child, limit)
        .context("flowshift run")?;
    let probe = &frames[..frames.len().min(16)];
    let mut probes = 0;
    while t0.elapsed() < limit {
        let before = netns::counter(&bed.server(), s0, "rx_packets")?;
        let span = (Duration::from_secs(1), probe.len() as u64);
        probes += send(&bed.client(), c0, probe, span, None, 0)?;
        std::thread::sleep(Duration::from_millis(100));
        if netns::counter(&bed.server(), s0, "rx_packets")? >= before + probe.len() as u64 {
            return Ok(probes);
        }
    }
    bail!("flowshift did not forward within {limit:?}")
}

/// What flowshift's own report said.
#[derive(Clone, Debug, serde::Serialize)]
struct FlowshiftReport {
    /// Packets in, out, dropped.
    counts: [u64; 3],
    /// Drops by cause (those above 0).
    drops: Vec<(String, u64)>,
}

/// Interrupts a flowshift run and reads its report.
fn stop_flowshift(mut f: Flowshift) -> anyhow::Result<FlowshiftReport> {
    let (c, json) = (&mut f.child, f.json.clone());
    netio::signal::interrupt(c.id())?;
    let t0 = Instant::now();
    let status = loop {
        if let Some(s) = c.try_wait()? {
            break s;
        }
        if t0.elapsed() > Duration::from_secs(30) {
            let _ = c.kill();
            bail!("flowshift run did not stop within 30 s of SIGINT");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    if !status.success() {
        let err = std::fs::read_to_string(json.with_extension("log")).unwrap_or_default();
        bail!("flowshift run failed ({status}): {}", err.trim());
    }
    let r: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(&json).with_context(|| format!("reading {}", json.display()))?,
    )?;
    let n = |k: &str| r[k].as_u64().unwrap_or(0);
    let causes: Vec<(String, u64)> = r["drops"]
        .as_object()
        .map(|d| {
            d.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_u64()?)))
                .filter(|(_, v)| *v > 0)
                .collect()
        })
        .unwrap_or_default();
    Ok(FlowshiftReport {
        counts: [
            n("packets_in"),
            n("packets_out"),
            causes.iter().map(|c| c.1).sum(),
        ],
        drops: causes,
    })
}

/// The variants `--tcp` runs.
const TCP_VARIANTS: [Variant; 4] = [
    Variant::KernelRouting,
    Variant::Nftables,
    Variant::FlowshiftXdpKernel,
    Variant::FlowshiftUserSteer,
];

/// One `--tcp` measurement.
#[derive(Clone, Debug, serde::Serialize)]
struct TcpSample {
    variant: &'static str,
    round: usize,
    streams: u32,
    /// Received by the server, Gbit/s.
    gbps: f64,
    /// TCP retransmissions the client counted.
    retransmits: u64,
}

/// The iperf3 server, started and listening (a loaded machine takes its
/// time), pinned to the endpoints' CPU.
fn iperf3_server(bed: &Bed) -> anyhow::Result<std::process::Child> {
    let mut server = Command::new("ip")
        .args(["netns", "exec", &bed.server(), "iperf3", "-s", "-A"])
        .arg(endpoints_cpu().to_string())
        .arg("-B")
        .arg(netio::testbed::SERVER)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("starting iperf3 (install iperf3)")?;
    // until it listens (a loaded machine takes its time)
    let t0 = Instant::now();
    loop {
        let ss = Command::new("ip")
            .args([
                "netns",
                "exec",
                &bed.server(),
                "ss",
                "-Hltn",
                "sport = :5201",
            ])
            .output()?;
        if !ss.stdout.is_empty() {
            break;
        }
        if t0.elapsed() > Duration::from_secs(20) || server.try_wait()?.is_some() {
            let _ = server.kill();
            bail!("the iperf3 server did not start listening");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(server)
}

/// The variants `--only` keeps of `all` (nftables always: the ratios are
/// to it).
fn chosen(all: &[Variant], only: Option<&str>) -> Vec<Variant> {
    all.iter()
        .copied()
        .filter(|v| {
            *v == Variant::Nftables
                || only.is_none_or(|o| {
                    o.split(',')
                        .any(|w| !w.trim().is_empty() && v.name().contains(w.trim()))
                })
        })
        .collect()
}

/// One variant's TCP samples in `round`: set up, iperf3 with 1 and 4
/// streams, torn down.
fn tcp_variant(
    bed: &Bed,
    v: Variant,
    round: usize,
    (dir, chain): (&Path, &Path),
    seconds: f64,
    napi_on_nf_cpu: bool,
) -> anyhow::Result<Vec<TcpSample>> {
    let mut samples = Vec::new();
    let mut child = None;
    match v.flowshift() {
        None => {
            bed.endpoints_to_middle(true)?;
            if v == Variant::Nftables {
                nft(bed, NFT_RULES)?;
            }
            bed.set_forwarding(true)?;
        }
        Some(steer) => {
            bed.endpoints_to_middle(false)?;
            let json = dir.join(format!("tcp-{round}-{steer}.json"));
            let mut f = start_flowshift(bed, steer, v.io(), chain, &json)?;
            launch::forwarding::wait(
                &json.with_extension("log"),
                0,
                &mut f.child,
                Duration::from_secs(30),
            )
            .context("flowshift run")?;
            // (no interrupt coalescing here: TCP's round trips
            // wait on it; 1 stream measured 0.63–0.64× nftables
            // with 200 µs, 0.81–0.94× without)
            if napi_on_nf_cpu && v == Variant::FlowshiftXdpKernel {
                bed.napi_threads_on(0)?;
            }
            child = Some(f);
        }
    }
    for streams in [1u32, 4] {
        let (gbps, retransmits) = iperf3(bed, streams, seconds)?;
        eprintln!(
                "  round {round}: {:<39} {streams} stream(s): {gbps:>6.2} Gbit/s, {retransmits} retransmissions",
                v.name()
            );
        samples.push(TcpSample {
            variant: v.name(),
            round,
            streams,
            gbps,
            retransmits,
        });
    }
    match child {
        None => {
            bed.set_forwarding(false)?;
            if v == Variant::Nftables {
                netns::exec(&bed.middle(), "nft", &["delete", "table", "ip", "fsbench"])?;
            }
        }
        Some(c) => {
            stop_flowshift(c)?;
        }
    }
    Ok(samples)
}

/// The TCP medians beside nftables'.
fn print_tcp(samples: &[TcpSample], chosen: &[Variant]) {
    let median = |v: Variant, streams: u32| {
        let mut x: Vec<f64> = samples
            .iter()
            .filter(|s| s.variant == v.name() && s.streams == streams)
            .map(|s| s.gbps)
            .collect();
        x.sort_by(f64::total_cmp);
        x[x.len() / 2]
    };
    println!(
        "{:<39} {:>12} {:>12} {:>12} {:>12}",
        "variant", "1 stream", "vs nftables", "4 streams", "vs nftables"
    );
    let (n1, n4) = (median(Variant::Nftables, 1), median(Variant::Nftables, 4));
    for &v in chosen {
        let (g1, g4) = (median(v, 1), median(v, 4));
        println!(
            "{:<39} {:>9.2} Gb {:>12.2} {:>9.2} Gb {:>12.2}",
            v.name(),
            g1,
            g1 / n1.max(1e-9),
            g4,
            g4 / n4.max(1e-9)
        );
    }
}

fn tcp(a: &BenchKernelArgs, bed: &Bed) -> anyhow::Result<()> {
    bed.route_in_middle()?;
    // the middle's receive work on CPU 0 with the network function, the
    // endpoints' (their TCP included) on the last CPU with iperf3: a frame
    // a variant sends on CPU 0 would otherwise be received there too, by the
    // client's or the server's TCP, on the network function's time
    bed.steer_middle_rx(1)?;
    bed.steer_endpoints_rx_to(1 << endpoints_cpu())?;
    if a.wire_segments {
        let p = &bed.prefix;
        for (ns, dev) in [
            (bed.client(), format!("{p}c0")),
            (bed.server(), format!("{p}s0")),
        ] {
            netns::exec(&ns, "ethtool", &["-K", &dev, "tso", "off", "gso", "off"])?;
        }
    }
    let dir = std::env::temp_dir().join(format!("flowshift-bench-tcp-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let chain = dir.join("fw-nat.toml");
    std::fs::write(&chain, CHAIN)?;
    eprintln!(
        "flowshift bench-kernel --tcp: iperf3, 1 and 4 streams, {} s each, {} round(s){}",
        a.seconds,
        a.rounds,
        if a.wire_segments {
            ", wire-size segments"
        } else {
            ""
        }
    );
    let chosen = chosen(&TCP_VARIANTS, a.only.as_deref());
    let mut samples = Vec::new();
    let result = (|| -> anyhow::Result<()> {
        for round in 0..a.rounds {
            for &v in &chosen {
                // a fresh server for each variant: a test whose last segments
                // a stopped variant never forwarded keeps the old one busy
                let mut server = iperf3_server(bed)?;
                let got = tcp_variant(bed, v, round, (&dir, &chain), a.seconds, a.napi_on_nf_cpu);
                let _ = server.kill();
                let _ = server.wait();
                samples.extend(got?);
            }
        }
        Ok(())
    })();
    let _ = std::fs::remove_dir_all(&dir);
    result?;
    print_tcp(&samples, &chosen);
    if let Some(p) = &a.json {
        launch::output::json(p, &samples)?;
    }
    Ok(())
}

/// The CPU of the TCP bench's endpoints (iperf3 and their receive work): the
/// last.
fn endpoints_cpu() -> usize {
    std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .saturating_sub(1)
        .min(63)
}

/// One iperf3 run from the client: Gbit/s the server received, and the
/// client's retransmissions.
fn iperf3(bed: &Bed, streams: u32, seconds: f64) -> anyhow::Result<(f64, u64)> {
    let mut tries = 0;
    let v = loop {
        let out = Command::new("ip")
            .args(["netns", "exec", &bed.client(), "iperf3", "-J", "-A"])
            .arg(endpoints_cpu().to_string())
            .arg("-c")
            .arg(netio::testbed::SERVER)
            .args(["-P", &streams.to_string(), "-t", &format!("{seconds}")])
            .output()
            .context("running iperf3")?;
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).with_context(|| {
            format!("iperf3's output: {}", String::from_utf8_lossy(&out.stderr))
        })?;
        match v["error"].as_str() {
            // the server still finishing the last test (on a loaded
            // machine it can take seconds): once more
            Some(e) if (e.contains("unable to connect") || e.contains("busy")) && tries < 20 => {
                tries += 1;
                std::thread::sleep(Duration::from_millis(500));
            }
            Some(e) => bail!("iperf3: {e}"),
            None => break v,
        }
    };
    let bps = v["end"]["sum_received"]["bits_per_second"]
        .as_f64()
        .context("iperf3 reported no received rate")?;
    let retr = v["end"]["sum_sent"]["retransmits"].as_u64().unwrap_or(0);
    Ok((bps / 1e9, retr))
}
