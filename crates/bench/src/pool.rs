//! `flowshift pool bench`: what ping-pong replication costs. Two nodes on the
//! pool bed (`netio::poolbed`) run firewall → NAT, without and with
//! replication to each other, side by side in one run, on two kinds of
//! traffic from a sender of ours in the client namespace (64 B UDP frames,
//! `sendmmsg` on a packet socket): `steady`, a fixed set of flows, where only
//! a flow's first packet changes state; and `new`, a new flow in every frame,
//! where every packet is replicated (the connection-rate bound, Sirius's CPS;
//! each frame sent once). Delivered frames are counted on the server's
//! interface, over the time the sender took.

use std::net::UdpSocket;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Args;
use netio::netns;
use netio::poolbed::{PoolBed, SERVER};
use serde::Serialize;

use crate::kernel::{parse_mac, send};

/// The nodes' chain: the pool's default (a firewall, a NAT to the node's
/// addresses), with flow tables for every flow of a `new` run (1 M per
/// node).
const BENCH_CHAIN: &str = "[table]\ncapacity = 65536\n\n\
    [[nf]]\nkind = \"firewall\"\nrules = \"allow any 10.0.0.0/8 -> any\"\n\n\
    [[nf]]\nkind = \"nat\"\ninternal = \"10.0.0.0/8\"\nexternal = []\n";

/// Options of `flowshift pool bench`.
#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Seconds each variant is offered traffic, per round.
    #[arg(long, default_value_t = 2.0)]
    pub seconds: f64,
    /// Flows of the `steady` traffic.
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
}

/// One variant's measurement in one round.
#[derive(Clone, Debug, Serialize)]
struct Sample {
    traffic: &'static str,
    /// `off`, `on` (sealed with the pool's key) or `bare` (no key).
    replication: &'static str,
    round: usize,
    sent: u64,
    delivered: u64,
    delivered_mpps: f64,
    /// Packets the nodes sent to their secondary (sum over nodes).
    replicated: u64,
    /// Replica messages the nodes installed.
    installed: u64,
    /// Replica messages dropped at a secondary's port (it fell behind).
    replicas_dropped: u64,
    /// The nodes' drops by cause (summed, those above 0).
    drops: std::collections::BTreeMap<String, u64>,
}

const PREFIX: &str = "fspb";
const NODES: usize = 2;
/// The frames of a `new` round, each a flow of its own, sent once (what the
/// nodes' NAT pools hold with room to spare).
const NEW_FLOWS: u32 = 60_000;

/// 60-byte UDP frames (64 with the FCS) from 10.x.y.z (flow `i`) to the
/// server's discard port, addressed to the router.
fn frames(flows: u32, dst: [u8; 6], src: [u8; 6], salt: u8) -> Vec<Vec<u8>> {
    (0..flows)
        .map(|i| {
            let mut f = vec![0u8; 60];
            f[0..6].copy_from_slice(&dst);
            f[6..12].copy_from_slice(&src);
            f[12..14].copy_from_slice(&[0x08, 0x00]);
            let ip = &mut f[14..34];
            ip[0] = 0x45;
            ip[2..4].copy_from_slice(&46u16.to_be_bytes());
            ip[8] = 64;
            ip[9] = 17;
            // the client's /24 (the router checks sources), less the client
            // and the router: 252 × 16 384 flows
            ip[12..16].copy_from_slice(&[10, 0, 0, 3 + (i >> 14) as u8]);
            ip[16..20].copy_from_slice(&[198, 51, 100, 2]);
            let ck = wire::checksum::checksum(ip);
            ip[10..12].copy_from_slice(&ck.to_be_bytes());
            let udp = &mut f[34..42];
            let port = 1024 + ((i + u32::from(salt) * 4099) & 0x3fff) as u16;
            udp[0..2].copy_from_slice(&port.to_be_bytes());
            udp[2..4].copy_from_slice(&9u16.to_be_bytes());
            udp[4..6].copy_from_slice(&26u16.to_be_bytes());
            f
        })
        .collect()
}

/// What every sample of a pool bench shares: the bed, its client and
/// server links, the node's chain and key, the run's duration and rate.
struct Bench<'a> {
    bed: &'a PoolBed,
    c0: String,
    s0: String,
    dir: PathBuf,
    chain: PathBuf,
    key_file: PathBuf,
    dur: Duration,
    rate: Option<f64>,
    cpus: usize,
}

/// The nodes' report counters, summed.
#[derive(Default)]
struct Totals {
    replicated: u64,
    installed: u64,
    dropped: u64,
    drops: std::collections::BTreeMap<String, u64>,
}

impl Bench<'_> {
    /// Fresh nodes with `replication` (`off`, `on`: sealed, `bare`), each
    /// waited for until it forwards.
    fn start_nodes(&self, replication: &str) -> anyhow::Result<poolctl::nodes::Nodes> {
        let dir = &self.dir;
        // killed if the bench fails before stopping them
        let mut nodes = poolctl::nodes::Nodes(Vec::new());
        for i in 0..NODES {
            let cfg = poolctl::nodes::node_config(
                Some(&self.chain),
                i,
                NODES,
                replication != "off",
                (replication == "on").then_some(self.key_file.as_path()),
            )?;
            cfg.write(&dir.join(format!("node{i}.toml")))?;
            let _ = std::fs::remove_file(dir.join(format!("node{i}.json")));
            let from = poolctl::nodes::node_log_len(dir, i);
            let node = poolctl::nodes::start_node(self.bed, dir, 1, i)?;
            let limit = Duration::from_secs(30);
            nodes.0.push(Some(node));
            let node = nodes.0[i].as_mut().expect("started");
            let log = dir.join(format!("node{i}.log"));
            launch::forwarding::wait(&log, from, node, limit)
                .with_context(|| format!("node {i}"))?;
        }
        Ok(nodes)
    }

    /// Waits until the pool forwards: every probe of `batch`'s first 16
    /// frames crosses (the odd neighbour message the server hears cannot
    /// pass for one).
    fn wait_forwarding(&self, batch: &[Vec<u8>]) -> anyhow::Result<()> {
        let t0 = Instant::now();
        loop {
            let before = netns::counter(&self.bed.server(), &self.s0, "rx_packets")?;
            send(
                &self.bed.client(),
                &self.c0,
                &batch[..16],
                (Duration::from_secs(1), 16),
                None,
                0,
            )?;
            std::thread::sleep(Duration::from_millis(100));
            if netns::counter(&self.bed.server(), &self.s0, "rx_packets")? >= before + 16 {
                return Ok(());
            }
            if t0.elapsed() > Duration::from_secs(20) {
                bail!(
                    "the pool did not forward within 20 s (see {})",
                    self.dir.display()
                );
            }
        }
    }

    /// Stops the nodes (each ends with its report) and sums their counters.
    fn stop_nodes(&self, mut nodes: poolctl::nodes::Nodes) -> anyhow::Result<Totals> {
        let mut t = Totals::default();
        for (i, (st, r)) in nodes.stop(&self.dir).into_iter().enumerate() {
            if r.is_null() {
                bail!(
                    "node {i} ended ({st}) without a report (see {})",
                    self.dir.display()
                );
            }
            t.replicated += r["pool"]["replicated"].as_u64().unwrap_or(0);
            t.installed += r["pool"]["installed"].as_u64().unwrap_or(0);
            t.dropped += r["pool"]["replicas_dropped"].as_u64().unwrap_or(0);
            for (k, v) in r["drops"].as_object().into_iter().flatten() {
                let v = v.as_u64().unwrap_or(0);
                if v > 0 {
                    *t.drops.entry(k.clone()).or_insert(0) += v;
                }
            }
        }
        Ok(t)
    }

    /// One sample: fresh nodes, `batch` sent for the run's duration (each
    /// frame once for `new` traffic), what the server got.
    fn sample(
        &self,
        traffic: &'static str,
        replication: &'static str,
        round: usize,
        batch: &[Vec<u8>],
    ) -> anyhow::Result<Sample> {
        let nodes = self.start_nodes(replication)?;
        self.wait_forwarding(batch)?;
        std::thread::sleep(Duration::from_millis(200));
        let (server, client) = (self.bed.server(), self.bed.client());
        let rx0 = netns::counter(&server, &self.s0, "rx_packets")?;
        // `new`: each frame once (a repeat would be an old flow)
        let max = if traffic == "new" {
            batch.len() as u64
        } else {
            u64::MAX
        };
        let t = Instant::now();
        let sent = send(
            &client,
            &self.c0,
            batch,
            (self.dur, max),
            self.rate,
            self.cpus - 1,
        )?;
        let took = t.elapsed().as_secs_f64();
        std::thread::sleep(Duration::from_millis(200));
        let delivered = netns::counter(&server, &self.s0, "rx_packets")? - rx0;
        let t = self.stop_nodes(nodes)?;
        let s = Sample {
            traffic,
            replication,
            round,
            sent,
            delivered,
            delivered_mpps: delivered as f64 / took / 1e6,
            replicated: t.replicated,
            installed: t.installed,
            replicas_dropped: t.dropped,
            drops: t.drops,
        };
        eprintln!(
            "  round {round}: {traffic:<6} replication {replication:<4}: sent {:.3} Mpps, delivered {:.3} Mpps; replicated {}, installed {}, dropped at the secondary {}; node drops {:?}",
            sent as f64 / took / 1e6,
            s.delivered_mpps,
            s.replicated,
            s.installed,
            s.replicas_dropped,
            s.drops
        );
        Ok(s)
    }
}

/// The medians per traffic and replication, and their ratios.
fn print_table(samples: &[Sample]) {
    println!(
        "Mpps delivered (medians): replication off, on (sealed with the pool's key), bare (no key)"
    );
    println!("traffic       off      on    bare   on/off  bare/off  on/bare");
    for traffic in ["steady", "new"] {
        let median = |mode: &str| {
            let mut v: Vec<f64> = samples
                .iter()
                .filter(|s| s.traffic == traffic && s.replication == mode)
                .map(|s| s.delivered_mpps)
                .collect();
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        let (off, on, bare) = (median("off"), median("on"), median("bare"));
        println!(
            "{traffic:<8} {off:>8.3} {on:>7.3} {bare:>7.3} {:>8.2} {:>9.2} {:>8.2}",
            on / off.max(1e-9),
            bare / off.max(1e-9),
            on / bare.max(1e-9)
        );
    }
}

pub fn run(a: BenchArgs) -> anyhow::Result<()> {
    if !(a.seconds > 0.0 && a.seconds <= 600.0) {
        bail!(
            "--seconds {}: expected more than 0 and at most 600",
            a.seconds
        );
    }
    if a.rounds == 0 || a.flows == 0 {
        bail!("--rounds and --flows must be at least 1");
    }
    if a.rate.is_some_and(|r| !(r > 0.0 && r <= 1000.0)) {
        bail!(
            "--rate {:?}: expected Mpps above 0 and at most 1000",
            a.rate
        );
    }
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let bed = PoolBed::up(PREFIX, NODES, 64)
        .context("building the pool bed (needs root and network namespaces)")?;
    let p = PREFIX;
    let (c0, rc, s0) = (format!("{p}c0"), format!("{p}rc"), format!("{p}s0"));
    let c_mac = parse_mac(&netns::mac(&bed.client(), &c0)?)?;
    let r_mac = parse_mac(&netns::mac(&bed.router(), &rc)?)?;
    // the server's discard port takes the frames without answering (a port
    // with no socket would send an ICMP error back through the pool)
    let sink = {
        let ns = bed.server();
        std::thread::spawn(move || -> std::io::Result<UdpSocket> {
            netns::enter(&ns)?;
            UdpSocket::bind((SERVER, 9))
        })
        .join()
        .map_err(|_| anyhow::anyhow!("binding the server's discard port"))??
    };
    let dir = std::env::temp_dir().join(format!("flowshift-pool-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    // replication sealed with a pool key, as `pool run` seals it
    let (key_file, _) = poolctl::nodes::write_pool_key(&dir)?;
    // room for every flow of a `new` run (1 M per node)
    let chain = dir.join("chain.toml");
    std::fs::write(&chain, BENCH_CHAIN)?;
    eprintln!(
        "flowshift pool bench: {NODES} nodes (FW → NAT, one working core each), 64 B UDP, \
         {} s per variant at {}, {} round(s)",
        a.seconds,
        a.rate
            .map_or("full speed".to_string(), |r| format!("{r} Mpps")),
        a.rounds
    );
    let bench = Bench {
        bed: &bed,
        c0,
        s0,
        dir,
        chain,
        key_file,
        dur: Duration::from_secs_f64(a.seconds),
        rate: a.rate,
        cpus,
    };
    let mut samples = Vec::new();
    for round in 0..a.rounds {
        for (traffic, flows) in [("steady", a.flows), ("new", NEW_FLOWS)] {
            for (k, replication) in ["off", "on", "bare"].into_iter().enumerate() {
                // sealed and bare replication see the same flows (fresh
                // nodes each time), so the two differ only by the seal
                let salt = (round * 4 + k.min(1) * 2 + usize::from(traffic == "new")) as u8;
                let batch = frames(flows, r_mac, c_mac, salt & 0x0f);
                samples.push(bench.sample(traffic, replication, round, &batch)?);
            }
        }
    }
    drop(sink);
    print_table(&samples);
    if let Some(p) = &a.json {
        launch::output::json(p, &samples)?;
    }
    let _ = std::fs::remove_dir_all(&bench.dir);
    Ok(())
}
