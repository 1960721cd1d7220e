//! `flowshift gen`: write a generated trace to a pcap file.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use trace::{Arrival, Generator, Lifetimes, Rate, SizeDist, TraceSpec};

/// Options of `flowshift gen`. Flags override the `--spec` file, which overrides
/// the defaults.
#[derive(Args, Debug)]
pub struct GenArgs {
    /// Output pcap file.
    #[arg(short, long)]
    pub output: PathBuf,
    /// TOML file with a trace spec (fields as the long flags, with `_` for `-`).
    #[arg(long)]
    pub spec: Option<PathBuf>,
    /// Number of connections [default: 4096].
    #[arg(long)]
    pub flows: Option<u32>,
    /// Total packets [default: 500000].
    #[arg(long)]
    pub packets: Option<u64>,
    /// Zipf exponent of flow sizes [default: 1.1].
    #[arg(long)]
    pub alpha: Option<f64>,
    /// Random seed [default: 1].
    #[arg(long)]
    pub seed: Option<u64>,
    /// Share of TCP flows, 0..1 [default: 0.9].
    #[arg(long)]
    pub tcp_share: Option<f64>,
    /// Share of IPv6 flows, 0..1 [default: 0].
    #[arg(long)]
    pub ipv6_share: Option<f64>,
    /// Share of flows in the priority class, 0..1 [default: 0].
    #[arg(long)]
    pub priority_share: Option<f64>,
    /// Priority class as a share of the traffic, carried by the shortest
    /// connections, 0..1 (instead of --priority-share) [default: 0].
    #[arg(long)]
    pub priority_traffic: Option<f64>,
    /// DSCP marking the priority class [default: 46].
    #[arg(long)]
    pub priority_dscp: Option<u8>,
    /// Packet sizes: fixed:N, imix or campus [default: campus].
    #[arg(long)]
    pub sizes: Option<SizeDist>,
    /// Arrivals: constant, poisson or onoff:ON_US:OFF_US [default: poisson].
    #[arg(long)]
    pub arrival: Option<Arrival>,
    /// Mean rate, e.g. 10gbps or 2mpps [default: 10gbps].
    #[arg(long)]
    pub rate: Option<Rate>,
    /// Target number of concurrently active connections [default: 1024].
    #[arg(long)]
    pub active_flows: Option<u32>,
    /// Connection lifetimes: `sized:BETA` (lifetime ∝ size^BETA, elephants
    /// live long at moderate rates, as in measured traces) or `equal` (each
    /// lives about as long as the others, so elephants send fast)
    /// [default: sized:0.7].
    #[arg(long)]
    pub lifetimes: Option<Lifetimes>,
    /// Spoofed TCP SYNs added on top of --packets (a SYN flood) [default: 0].
    #[arg(long)]
    pub syn_flood: Option<u64>,
    /// Share of the connections' packets before the flood starts, 0..1 [default: 0.25].
    #[arg(long)]
    pub syn_flood_after: Option<f64>,
    /// Every connection to this one server endpoint, e.g. a load balancer's
    /// VIP 198.18.0.1:443 [default: random servers in 198.18.0.0/15].
    #[arg(long, value_name = "ADDR:PORT")]
    pub server: Option<std::net::SocketAddrV4>,
    /// Traffic as a 5G UPF sees it: the clients become N UEs (10.60.0.1 on),
    /// their packets tunnelled in GTP-U from the gNB (192.0.2.2, TEID i + 1)
    /// to the UPF (192.0.2.1), the servers' packets plain to the UE; a UPF
    /// with `[nf.ues] count = N` serves them [default: off]. IPv4 only.
    #[arg(long, value_name = "N")]
    pub gtp_ues: Option<u32>,
}

impl GenArgs {
    /// The spec: defaults, then the spec file, then the flags.
    pub fn spec(&self) -> anyhow::Result<TraceSpec> {
        let mut s = match &self.spec {
            Some(p) => {
                let text = std::fs::read_to_string(p)
                    .with_context(|| format!("reading {}", p.display()))?;
                toml::from_str(&text).with_context(|| format!("{}", p.display()))?
            }
            None => TraceSpec::default(),
        };
        macro_rules! over {
            ($($f:ident),*) => { $( if let Some(v) = self.$f { s.$f = v; } )* };
        }
        over!(
            flows,
            packets,
            alpha,
            seed,
            tcp_share,
            ipv6_share,
            priority_share,
            priority_traffic,
            priority_dscp
        );
        over!(
            sizes,
            arrival,
            rate,
            active_flows,
            lifetimes,
            syn_flood,
            syn_flood_after
        );
        if self.server.is_some() {
            s.server = self.server;
        }
        s.validate()?;
        Ok(s)
    }
}

pub fn run(a: GenArgs) -> anyhow::Result<()> {
    let spec = a.spec()?;
    let ues = match a.gtp_ues {
        Some(n) => {
            let r = wire::gtpu::UeRange::new(n);
            r.check()
                .map_err(|e| anyhow::anyhow!("--gtp-ues {n}: {e}"))?;
            if spec.ipv6_share > 0.0 {
                anyhow::bail!("--gtp-ues: the UEs are IPv4 (leave --ipv6-share at 0)");
            }
            Some(r)
        }
        None => None,
    };
    let started = Instant::now();
    let gen = Generator::new(&spec)?;
    let summary = gen.summary().clone();
    let bar = ProgressBar::new(summary.packets).with_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} packets ({per_sec}, eta {eta})")
            .expect("static template"),
    );
    let packets = gen.inspect(|_| bar.inc(1)).map(|p| match &ues {
        Some(r) => (p.ts_ns, trace::gtp::tunnel(r, p.frame)),
        None => (p.ts_ns, p.frame),
    });
    let n = launch::output::capture(&a.output, packets)?;
    bar.finish_and_clear();
    let secs = started.elapsed().as_secs_f64();
    println!(
        "wrote {n} packets to {} in {secs:.2} s: {} flows ({} TCP, {} UDP, {} IPv6, {} priority), largest flow {} packets",
        a.output.display(),
        summary.flows,
        summary.tcp_flows,
        summary.udp_flows,
        summary.ipv6_flows,
        summary.priority_flows,
        summary.largest_flow
    );
    if let Some(r) = &ues {
        println!(
            "  as a UPF sees them: {} UEs from {} (uplink in GTP-U from {} to {}); \
             a UPF serves them with `[nf.ues] count = {}`",
            r.count,
            r.ue,
            r.gnb,
            wire::gtpu::UeRange::N3,
            r.count
        );
    }
    if summary.syn_flood > 0 {
        println!(
            "  of which {} spoofed SYNs (a flood after {:.0} % of the connections' packets)",
            summary.syn_flood,
            spec.syn_flood_after * 100.0
        );
    }
    Ok(())
}
