//! The cost of each placement of the load balancer's control component
//! (GranularNF's server selector), measured side by side in one run: one worker
//! pushes a trace through a one-NF chain (1 service, 16 backends, Maglev
//! M = 65 537) in bursts of 32 while policy requests (a backend down, then up
//! again) arrive every `EVERY` packets —
//! - `no requests`: the baseline;
//! - `inline`: the worker applies each request (rebuilds the table) before its
//!   next packet, as a monolithic NF would;
//! - `core`: a component thread applies them; the worker only loads the
//!   published table.
//!
//! Printed per variant (median of interleaved rounds): throughput, its ratio to
//! the baseline, the 99.9th percentile and the worst burst time, and the mean
//! time one request took where it ran.
//!
//! `cargo bench -p flowshift-nf --bench lb_placement`

mod common;

use std::net::Ipv4Addr;
use std::path::Path;
use std::time::{Duration, Instant};

use nf::lb::Lb;
use nf::{Chain, ChainConfig, Packet, Shard};
use wire::TcpFlags;

const BURST: usize = 32;

/// Connection `flow` to the VIP: its SYN, or a later packet.
fn frame(flow: u32, syn: bool) -> Vec<u8> {
    common::tcp_frame(
        (
            Ipv4Addr::from(0x0b00_0000 | (flow >> 4)),
            1024 + (flow & 15) as u16 * 1000,
        ),
        (Ipv4Addr::new(10, 0, 0, 100), 80),
        1,
        if syn { TcpFlags::SYN } else { TcpFlags::ACK },
        &[0; 64],
    )
}

fn config(placement: &str) -> String {
    let backends: Vec<String> = (1..=16).map(|i| format!("\"10.1.0.{i}:8080\"")).collect();
    format!(
        "[steering]\nshards = 16\n[[nf]]\nkind = \"lb\"\nplacement = \"{placement}\"\n\
         snat = [\"192.0.2.10\", \"192.0.2.11\", \"192.0.2.12\", \"192.0.2.13\"]\n\
         [[nf.service]]\nvip = \"10.0.0.100:80\"\nbackends = [{}]\n",
        backends.join(", ")
    )
}

fn chain(placement: &str) -> (Chain, Vec<Shard>) {
    let c = ChainConfig::from_toml(&config(placement))
        .unwrap()
        .build(Path::new("."))
        .unwrap();
    let s = c.new_shards();
    (c, s)
}

fn lb(c: &Chain) -> &Lb {
    c.nfs()[0].as_any().downcast_ref().unwrap()
}

struct Round {
    secs: f64,
    bursts: Vec<u64>,
    request_ns: f64,
}

/// One pass of `pkts` through a fresh chain; a request every `every` packets
/// (none when `every` is 0).
fn round(placement: &str, pkts: &[Packet], every: usize) -> Round {
    let (mut c, mut s) = chain(placement);
    let ctl = lb(&c).control();
    let mut bursts = Vec::with_capacity(pkts.len() / BURST + 1);
    let mut k = 0usize;
    let t0 = Instant::now();
    for (j, chunk) in pkts.chunks(BURST).enumerate() {
        if every > 0 && (j * BURST).is_multiple_of(every) && j > 0 {
            // backend k/2 % 16 down, then up again: 15 of 16 always live
            let r = ctl.request(0, (k / 2) % 16, k % 2 == 1);
            assert!(r.is_ok(), "control ring full");
            k += 1;
        }
        let tb = Instant::now();
        for p in chunk {
            let mut p = p.clone();
            let now = p.ts_ns;
            let i = c.shard_of(p.hash);
            std::hint::black_box(c.process(&mut s[i], &mut p, now));
        }
        bursts.push(tb.elapsed().as_nanos() as u64);
    }
    let secs = t0.elapsed().as_secs_f64();
    assert!(lb(&c).wait_idle(Duration::from_secs(30)));
    let n: std::collections::BTreeMap<_, _> = c.nfs()[0].counters().into_iter().collect();
    let applied = n["control_inline"] + n["control_core"];
    assert_eq!(n["control_failed"], 0);
    let request_ns = if applied == 0 {
        0.0
    } else {
        (n["control_inline_ns"] + n["control_core_ns"]) as f64 / applied as f64
    };
    bursts.sort_unstable();
    Round {
        secs,
        bursts,
        request_ns,
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    // `cargo test --all-targets` runs this once, unoptimized: small then
    let full = std::env::args().any(|a| a == "--bench");
    let (flows, per_flow, rounds, every) = if full {
        (20_000u32, 10u32, 7, 16_384)
    } else {
        (500, 4, 1, 512)
    };
    let (probe, _) = chain("inline");
    // every flow opens, then its packets interleave with the others'
    let pkts: Vec<Packet> = (0..flows * per_flow)
        .map(|j| {
            let (flow, nth) = (j % flows, j / flows);
            probe
                .packet(frame(flow, nth == 0), u64::from(j) * 100)
                .unwrap()
        })
        .collect();
    let variants = [
        ("no requests", "inline", 0),
        ("inline", "inline", every),
        ("core", "core", every),
    ];
    let mut results: Vec<Vec<Round>> = variants.iter().map(|_| Vec::new()).collect();
    for _ in 0..rounds {
        for (v, (_, placement, every)) in variants.iter().enumerate() {
            results[v].push(round(placement, &pkts, *every));
        }
    }
    println!(
        "lb_placement: {} packets ({} flows), a policy request every {} packets, bursts of {BURST}, median of {rounds} interleaved rounds",
        pkts.len(),
        flows,
        every
    );
    println!(
        "{:<12} {:>8} {:>9} {:>12} {:>12} {:>14}",
        "variant", "Mpps", "vs none", "p99.9 burst", "max burst", "per request"
    );
    let mpps: Vec<f64> = results
        .iter()
        .map(|rs| {
            median(
                rs.iter()
                    .map(|r| pkts.len() as f64 / r.secs / 1e6)
                    .collect(),
            )
        })
        .collect();
    for (v, rs) in results.iter().enumerate() {
        let pct = |q: f64| {
            median(
                rs.iter()
                    .map(|r| r.bursts[((r.bursts.len() as f64 - 1.0) * q) as usize] as f64 / 1e3)
                    .collect(),
            )
        };
        let req = median(rs.iter().map(|r| r.request_ns / 1e3).collect());
        println!(
            "{:<12} {:>8.2} {:>8.2}× {:>10.1}µs {:>10.1}µs {:>12.1}µs",
            variants[v].0,
            mpps[v],
            mpps[v] / mpps[0],
            pct(0.999),
            pct(1.0),
            req
        );
    }
}
