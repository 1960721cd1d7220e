//! Where the IDS's pattern matching should run (GranularNF §5.3, Fig. 11):
//! on the worker (`inline`) or on a core of its own (`core`), swept over how
//! often it is invoked (the share of packets that carry a payload to scan;
//! the rest are bare ACKs) and what an invocation costs (the payload's
//! size). Each cell runs both placements on the same packets, alternated,
//! end to end (the core placement until its component has scanned
//! everything, nothing lost), and asks the director which it would pick
//! from the costs measured in each ([`nf::director::Offload`]): the worker's
//! own time per packet (the bare packets'), a scan's time inline (inline
//! time above that, per payload), a hand-over's (the core placement's worker
//! time above it) and a scan's on the component's core (its own clock).

use std::net::Ipv4Addr;
use std::path::Path;
use std::time::{Duration, Instant};

use nf::component::Placement;
use nf::director::{Director, DirectorConfig, Offload};
use nf::{Chain, ChainConfig, Packet, Shard};
use wire::repr::{EthernetRepr, IpRepr, Ipv4Repr, L4Repr, PacketRepr, TcpRepr};
use wire::TcpFlags;

/// One cell of the sweep.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Cell {
    /// Share of packets with a payload to scan.
    pub share: f64,
    /// Payload bytes of those.
    pub bytes: usize,
    /// Mpps inline, per round.
    pub inline: Vec<f64>,
    /// Mpps with the matching on its core, end to end, per round.
    pub core: Vec<f64>,
    /// A scan's cost measured inline (ns).
    pub scan_ns: f64,
    /// A hand-over's cost on the worker (ns).
    pub handover_ns: f64,
    /// A scan's cost on the component's core (ns).
    pub core_scan_ns: f64,
    /// The worker's own time per packet (ns).
    pub rest_ns: f64,
    /// The director's pick from those costs.
    pub director: &'static str,
    /// Its reason.
    pub reason: String,
    /// Alerts of a run that starts inline and moves to the director's pick
    /// halfway, live, and of an inline run over the same packets.
    pub live_alerts: (u64, u64),
}

const RULES: &str = r#"alert tcp any any -> any any (msg:"shellcode"; content:"|90 90 90 90 90 90|"; sid:1;)
alert tcp any any -> any any (msg:"passwd"; content:"/etc/passwd"; sid:2;)
alert tcp any any -> any any (msg:"cmd"; content:"cmd.exe"; sid:3;)
alert tcp any any -> any any (msg:"sql"; content:"UNION SELECT"; pcre:"/union\s+select\s+\w+\s+from/i"; sid:4;)
"#;

fn chain(placement: &str) -> anyhow::Result<(Chain, Vec<Shard>)> {
    let toml = format!(
        "[[nf]]\nkind = \"ids\"\nplacement = \"{placement}\"\nring = 262144\nrules = '''\n{RULES}'''\n"
    );
    let c = ChainConfig::from_toml(&toml)?.build(Path::new("."))?;
    let s = c.new_shards();
    Ok((c, s))
}

/// `n` packets over 400 flows, a share `share` of them with `bytes` of
/// payload (letters and spaces, `cmd.exe` in one payload of 64 where it
/// fits), the rest bare ACKs.
fn packets(c: &Chain, n: usize, share: f64, bytes: usize) -> anyhow::Result<Vec<Packet>> {
    let every = (1.0 / share).round().max(1.0) as usize;
    let payload: Vec<u8> = (0..bytes)
        .map(|i| {
            if i % 7 == 6 {
                b' '
            } else {
                b'a' + (i % 26) as u8
            }
        })
        .collect();
    let mut marked = payload.clone();
    if bytes >= 16 {
        marked[..7].copy_from_slice(b"cmd.exe");
    }
    (0..n)
        .map(|k| {
            let data = match (k % every == 0, k % (64 * every) == 0) {
                (true, true) => &marked[..],
                (true, false) => &payload[..],
                _ => &[][..],
            };
            let f = PacketRepr {
                eth: EthernetRepr {
                    src: [2, 0, 0, 0, 0, 1],
                    dst: [2, 0, 0, 0, 0, 2],
                    vlan: None,
                },
                ip: IpRepr::V4(Ipv4Repr {
                    src: Ipv4Addr::from(0x0a00_0000 | (k % 400) as u32),
                    dst: Ipv4Addr::new(198, 18, 0, 1),
                    dscp: 0,
                    ecn: 0,
                    ident: 7,
                    dont_frag: true,
                    ttl: 64,
                    options: vec![],
                }),
                l4: L4Repr::Tcp(TcpRepr {
                    src_port: 40_000,
                    dst_port: 80,
                    seq: 1 + (k / 400) as u32 * bytes as u32,
                    ack: 1,
                    flags: TcpFlags::ACK,
                    window: 65_535,
                    urgent: 0,
                    options: vec![],
                }),
                payload: data.to_vec(),
            }
            .to_bytes();
            c.packet(f, k as u64 * 1_000)
                .map_err(|(_, m)| anyhow::anyhow!("a built frame is malformed: {m}"))
        })
        .collect()
}

/// The worker's time for `pkts`, and with the matching on its core the time
/// until the component is done too.
fn time(c: &mut Chain, s: &mut [Shard], pkts: &[Packet]) -> anyhow::Result<(Duration, Duration)> {
    let t0 = Instant::now();
    for p in pkts {
        let mut p = p.clone();
        let (i, now) = (c.shard_of(p.hash), p.ts_ns);
        std::hint::black_box(c.process(&mut s[i], &mut p, now));
    }
    let worker = t0.elapsed();
    let ids: &nf::ids::Ids = c.nfs()[0]
        .as_any()
        .downcast_ref()
        .ok_or_else(|| anyhow::anyhow!("not an IDS"))?;
    anyhow::ensure!(
        ids.wait_idle(Duration::from_secs(60)),
        "the component never finished"
    );
    Ok((worker, t0.elapsed()))
}

/// The sweep: shares × sizes, `rounds` alternated rounds of `n` packets.
pub fn sweep(n: usize, rounds: usize) -> anyhow::Result<Vec<Cell>> {
    let mut cells = Vec::new();
    for &share in &[0.05, 0.25, 1.0] {
        for &bytes in &[16usize, 128, 512, 1400] {
            let (mut ci, mut si) = chain("inline")?;
            let (mut cc, mut sc) = chain("core")?;
            let pkts = packets(&ci, n, share, bytes)?;
            let bare = packets(&ci, n, share, 0)?;
            let (mut inline, mut core, mut base, mut hand) = (vec![], vec![], vec![], vec![]);
            for _ in 0..rounds.max(1) {
                inline.push(time(&mut ci, &mut si, &pkts)?.0);
                base.push(time(&mut ci, &mut si, &bare)?.0);
                let (w, e) = time(&mut cc, &mut sc, &pkts)?;
                hand.push(w);
                core.push(e);
            }
            let k: std::collections::BTreeMap<_, _> = cc.nfs()[0].counters().into_iter().collect();
            anyhow::ensure!(k["offload_lost"] == 0, "the component's ring overflowed");
            let core_scan_ns = k["component_ns"] as f64 / k["component_jobs"].max(1) as f64;
            let med = |v: &[Duration]| {
                let mut x: Vec<f64> = v.iter().map(|d| d.as_nanos() as f64).collect();
                super::median(&mut x)
            };
            let jobs = (n as f64 * share).max(1.0);
            let scan_ns = ((med(&inline) - med(&base)) / jobs).max(0.0);
            let handover_ns = ((med(&hand) - med(&base)) / jobs).max(0.0);
            let rest_ns = med(&base) / n as f64;
            let d = Director::new(DirectorConfig::default(), Placement::Inline);
            let (pick, reason) = d.saturated(&Offload {
                workers: 1.0,
                rest_ns,
                share,
                inline_ns: scan_ns,
                core_ns: core_scan_ns,
                handover_ns,
            });
            let live_alerts = live(&pkts, pick)?;
            let mpps = |v: &[Duration]| {
                v.iter()
                    .map(|d| n as f64 / d.as_secs_f64() / 1e6)
                    .collect::<Vec<_>>()
            };
            cells.push(Cell {
                share,
                bytes,
                inline: mpps(&inline),
                core: mpps(&core),
                scan_ns,
                handover_ns,
                core_scan_ns,
                rest_ns,
                director: pick.name(),
                reason,
                live_alerts,
            });
        }
    }
    print(&cells, n, rounds);
    Ok(cells)
}

/// Alerts of `pkts` run inline for the first half and with the matching at
/// `pick` for the second (moved live), and of the same packets inline.
fn live(pkts: &[Packet], pick: Placement) -> anyhow::Result<(u64, u64)> {
    let (mut cm, mut sm) = chain("core")?;
    let (mut ci, mut si) = chain("inline")?;
    fn ids(c: &Chain) -> anyhow::Result<&nf::ids::Ids> {
        c.nfs()[0]
            .as_any()
            .downcast_ref()
            .ok_or_else(|| anyhow::anyhow!("not an IDS"))
    }
    let half = pkts.len() / 2;
    ids(&cm)?
        .set_placement(Placement::Inline)
        .map_err(anyhow::Error::msg)?;
    time(&mut cm, &mut sm, &pkts[..half])?;
    ids(&cm)?.set_placement(pick).map_err(anyhow::Error::msg)?;
    time(&mut cm, &mut sm, &pkts[half..])?;
    time(&mut ci, &mut si, pkts)?;
    let alerts = |c: &Chain| {
        c.nfs()[0]
            .counters()
            .into_iter()
            .find(|k| k.0 == "alerts")
            .map_or(0, |k| k.1)
    };
    Ok((alerts(&cm), alerts(&ci)))
}

fn print(cells: &[Cell], n: usize, rounds: usize) {
    println!(
        "IDS matching inline or on its core (GranularNF Fig. 11), {n} packets, medians of {} rounds:",
        rounds.max(1)
    );
    println!(
        "{:>6} {:>6} {:>8} {:>8} {:>9} {:>8} {:>8} {:>8} {:>8} {:>9} {:>8}",
        "share",
        "bytes",
        "inline",
        "core",
        "core/inl",
        "rest ns",
        "scan ns",
        "on core",
        "handover",
        "predicted",
        "director"
    );
    for c in cells {
        let (i, k) = (
            super::median(&mut c.inline.clone()),
            super::median(&mut c.core.clone()),
        );
        let (pi, pc) = Offload {
            rest_ns: c.rest_ns,
            share: c.share,
            inline_ns: c.scan_ns,
            core_ns: c.core_scan_ns,
            handover_ns: c.handover_ns,
            workers: 1.0,
        }
        .per_packet();
        println!(
            "{:>6.2} {:>6} {:>8.3} {:>8.3} {:>9.3} {:>8.0} {:>8.0} {:>8.0} {:>8.0} {:>9.3} {:>8} {:>11}",
            c.share,
            c.bytes,
            i,
            k,
            k / i,
            c.rest_ns,
            c.scan_ns,
            c.core_scan_ns,
            c.handover_ns,
            pi / pc,
            c.director,
            format!("{}/{}", c.live_alerts.0, c.live_alerts.1)
        );
    }
}
