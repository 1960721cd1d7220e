//! `flowshift bench-mvt`: NFLOW/MVT Figs. 5a–c on this runtime's own state
//! structures, each dependent (shared or entangled) variant beside its MVT
//! (disjoint) variant in one run, so the ratios hold on a noisy machine.
//!
//! - **5a, entangled vs disjoint entries** (one thread): a table of prefix
//!   entries where a share of them nest inside others. The dependent table keeps
//!   the entries as given, one hash table per prefix length, and finds a
//!   packet's entry by loading every matching entry and keeping the highest
//!   priority (the longest), as the paper's emulation does; the MVT keeps the
//!   disjoint entries the router compiles ([`nf::router::RouteTable`]) in the
//!   same kind of tables and stops at the first match, the only one. The
//!   router NF's own lookup (the same scheme behind an `IpAddr`) is timed
//!   beside them.
//! - **5b, a shared locked monitor vs per-core mergeable counters**: each thread
//!   counts packets and bytes per source address; the dependent variant shares
//!   one table behind a lock, the MVT variant keeps one table per core and merges
//!   them at the end (the merge is timed).
//! - **5c, a shared NAT pool vs per-shard pools**: each thread opens mappings
//!   (a port from the pool) and closes the oldest once 1 024 are open; the
//!   dependent variant shares one pool behind a lock, the MVT variant gives
//!   each thread its shard of the pool ([`nf::nat::PortPool`]).

use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::sync::{Arc, Barrier, Mutex};
use std::time::Instant;

use anyhow::bail;
use clap::Args;
use nf::monitor::PerSource;
use nf::nat::{PortClass, PortPlan, PortPool};
use nf::router::{Route, RouteTable};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use state::merge::Mergeable;
use steer::{RssKey, Toeplitz};

/// Options of `flowshift bench-mvt`.
#[derive(Args, Debug)]
pub struct BenchMvtArgs {
    /// Threads for 5b and 5c (each variant also runs on 1).
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
    /// Table sizes for 5a.
    #[arg(long, value_delimiter = ',', default_value = "16384,262144")]
    pub entries: Vec<usize>,
    /// Shares of 5a's entries nested inside another.
    #[arg(long, value_delimiter = ',', default_value = "0,0.25,0.5")]
    pub entangled: Vec<f64>,
    /// Operations per thread and variant (lookups, packets, mappings).
    #[arg(long, default_value_t = 2_000_000)]
    pub ops: usize,
    /// Source addresses counted in 5b.
    #[arg(long, default_value_t = 100_000)]
    pub sources: usize,
    /// Write the rows as JSON.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

#[derive(Serialize)]
struct Row {
    figure: &'static str,
    case: String,
    threads: usize,
    dependent_mops: f64,
    mvt_mops: f64,
    /// MVT over dependent.
    ratio: f64,
    /// 5a: the router NF's compiled table.
    router_mops: Option<f64>,
}

pub fn run(a: BenchMvtArgs) -> anyhow::Result<()> {
    if a.threads == 0 || a.ops == 0 || a.sources == 0 {
        bail!("--threads, --ops and --sources must be at least 1");
    }
    if let Some(e) = a.entangled.iter().find(|e| !(0.0..=1.0).contains(*e)) {
        bail!("--entangled {e}: a share in 0..=1");
    }
    if let Some(n) = a.entries.iter().find(|n| !(16..=4_000_000).contains(*n)) {
        bail!("--entries {n}: 16..=4000000");
    }
    let mut rows = Vec::new();
    for &n in &a.entries {
        for &e in &a.entangled {
            let (dep, mvt, router) = fig5a(n, e, a.ops);
            let mut r = row(
                "5a",
                format!("{n} entries, {:.0} % entangled", e * 100.0),
                1,
                dep,
                mvt,
            );
            r.router_mops = Some(router);
            rows.push(r);
        }
    }
    let mut threads = vec![1];
    if a.threads > 1 {
        threads.push(a.threads);
    }
    for &t in &threads {
        let (dep, mvt) = fig5b(t, a.ops, a.sources);
        rows.push(row("5b", format!("{} sources", a.sources), t, dep, mvt));
    }
    for &t in &threads {
        let (dep, mvt) = fig5c(t, a.ops);
        rows.push(row(
            "5c",
            "1 024 open mappings per thread".into(),
            t,
            dep,
            mvt,
        ));
    }
    println!(
        "{:<4} {:<34} {:>7} {:>14} {:>10} {:>8} {:>12}",
        "fig", "case", "threads", "dependent Mops", "MVT Mops", "MVT/dep", "router Mops"
    );
    for r in &rows {
        println!(
            "{:<4} {:<34} {:>7} {:>14.2} {:>10.2} {:>8.2} {:>12}",
            r.figure,
            r.case,
            r.threads,
            r.dependent_mops,
            r.mvt_mops,
            r.ratio,
            r.router_mops.map(|x| format!("{x:.2}")).unwrap_or_default()
        );
    }
    if let Some(p) = &a.json {
        std::fs::write(p, serde_json::to_string_pretty(&rows)?)?;
    }
    Ok(())
}

fn row(figure: &'static str, case: String, threads: usize, dep: f64, mvt: f64) -> Row {
    Row {
        figure,
        case,
        threads,
        dependent_mops: dep,
        mvt_mops: mvt,
        ratio: mvt / dep,
        router_mops: None,
    }
}

type Fx = BuildHasherDefault<rustc_hash::FxHasher>;

/// Routes: `n` entries; a share `entangled` of them nest inside a random earlier
/// one (longer prefix inside it), the rest are disjoint /24s.
fn routes(n: usize, entangled: f64, rng: &mut ChaCha8Rng) -> Vec<(u32, u8, u16)> {
    let base = ((n as f64) * (1.0 - entangled)).ceil().max(1.0) as usize;
    let mut out: Vec<(u32, u8, u16)> = Vec::with_capacity(n);
    let mut seen = std::collections::HashSet::new();
    while out.len() < base {
        let p = rng.gen::<u32>() & 0xffff_ff00;
        if seen.insert((p, 24)) {
            out.push((p, 24, rng.gen_range(0..8)));
        }
    }
    while out.len() < n {
        let (p, len, _) = out[rng.gen_range(0..out.len())];
        if len >= 32 {
            continue;
        }
        let l = rng.gen_range(len + 1..=32);
        let inside = p | (rng.gen::<u32>() & (u32::MAX >> len));
        let q = inside & (u32::MAX << (32 - u32::from(l)));
        if seen.insert((q, l)) {
            out.push((q, l, rng.gen_range(0..8)));
        }
    }
    out
}

fn mops(ops: usize, secs: f64) -> f64 {
    ops as f64 / secs / 1e6
}

/// Prefix entries as one hash table per length, in the order given.
type ByLen = Vec<(u8, HashMap<u32, u16, Fx>)>;

fn by_len(entries: impl IntoIterator<Item = (u32, u8, u16)>) -> ByLen {
    let mut t: ByLen = Vec::new();
    for (p, l, port) in entries {
        match t.iter_mut().find(|(x, _)| *x == l) {
            Some((_, m)) => {
                m.insert(p, port);
            }
            None => {
                let mut m = HashMap::default();
                m.insert(p, port);
                t.push((l, m));
            }
        }
    }
    t
}

fn mask(l: u8) -> u32 {
    if l == 0 {
        0
    } else {
        u32::MAX << (32 - u32::from(l))
    }
}

/// 5a: (dependent, MVT, the router's compiled table) lookups per µs.
fn fig5a(n: usize, entangled: f64, ops: usize) -> (f64, f64, f64) {
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let rs = routes(n, entangled, &mut rng);
    let table = RouteTable::compile(
        &rs.iter()
            .map(|&(p, l, port)| Route {
                prefix: ipnet::IpNet::V4(ipnet::Ipv4Net::new(Ipv4Addr::from(p), l).expect("≤ 32")),
                port,
            })
            .collect::<Vec<_>>(),
    )
    .expect("no prefix twice");
    // dependent: the entries as given; every matching entry is loaded and the
    // longest (highest priority) wins
    let dependent = by_len(rs.iter().copied());
    // MVT: the disjoint entries; the first match is the only one, so the lengths
    // are probed most populous first and the search stops there
    let mut disjoint = by_len(table.entries().iter().map(|r| match r.prefix {
        ipnet::IpNet::V4(n) => (u32::from(n.network()), n.prefix_len(), r.port),
        ipnet::IpNet::V6(_) => unreachable!("IPv4 routes only"),
    }));
    disjoint.sort_by_key(|(_, m)| std::cmp::Reverse(m.len()));
    // addresses inside random entries, so every lookup hits
    let addrs: Vec<u32> = (0..ops.min(1 << 20))
        .map(|_| {
            let (p, l, _) = rs[rng.gen_range(0..rs.len())];
            p | (rng.gen::<u32>() & !mask(l))
        })
        .collect();
    let dep = |a: u32| {
        dependent
            .iter()
            .filter_map(|(l, m)| m.get(&(a & mask(*l))).map(|port| (*l, *port)))
            .max_by_key(|(l, _)| *l)
            .map(|(_, port)| port)
    };
    let mvt = |a: u32| {
        disjoint
            .iter()
            .find_map(|(l, m)| m.get(&(a & mask(*l))).copied())
    };
    let router = |a: u32| table.lookup(IpAddr::V4(Ipv4Addr::from(a)));
    // same answers, or the comparison means nothing
    for &a in addrs.iter().take(10_000) {
        assert_eq!(
            dep(a),
            mvt(a),
            "dependent and MVT tables disagree at {a:#x}"
        );
        assert_eq!(
            dep(a),
            router(a),
            "dependent and router tables disagree at {a:#x}"
        );
    }
    let time = |f: &dyn Fn(u32) -> Option<u16>| {
        let t = Instant::now();
        let mut sum = 0u64;
        for i in 0..ops {
            sum += u64::from(f(addrs[i % addrs.len()]).unwrap_or(0));
        }
        std::hint::black_box(sum);
        mops(ops, t.elapsed().as_secs_f64())
    };
    // alternate, best of three each
    let (mut d, mut m, mut r) = (0f64, 0f64, 0f64);
    for _ in 0..3 {
        d = d.max(time(&dep));
        m = m.max(time(&mvt));
        r = r.max(time(&router));
    }
    (d, m, r)
}

/// Zipf-ish sources: rank r drawn with probability ∝ 1 / r.
fn sources(count: usize, ops: usize, seed: u64) -> Vec<IpAddr> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let ln = (count as f64).ln();
    (0..ops)
        .map(|_| {
            let r = (rng.gen::<f64>() * ln).exp() as u32;
            IpAddr::V4(Ipv4Addr::from(0x0a00_0000 | r.min(count as u32)))
        })
        .collect()
}

/// Runs `f(thread)` on `t` threads started together; the wall time of all.
fn on_threads<F>(t: usize, f: F) -> f64
where
    F: Fn(usize) + Sync,
{
    let barrier = Barrier::new(t + 1);
    let f = &f;
    let barrier = &barrier;
    std::thread::scope(|s| {
        for i in 0..t {
            s.spawn(move || {
                barrier.wait();
                f(i);
            });
        }
        barrier.wait();
        let started = Instant::now();
        // the scope joins the threads before returning
        started
    })
    .elapsed()
    .as_secs_f64()
}

fn fig5b(t: usize, ops: usize, count: usize) -> (f64, f64) {
    let streams: Vec<Vec<IpAddr>> = (0..t).map(|i| sources(count, ops, 7 + i as u64)).collect();
    let count_into = |m: &mut PerSource, a: &IpAddr| {
        let c = m.entry(*a).or_default();
        c.packets += 1;
        c.bytes += 64;
    };
    let (mut d, mut m) = (0f64, 0f64);
    for _ in 0..3 {
        let shared = Mutex::new(PerSource::new());
        let secs = on_threads(t, |i| {
            for a in &streams[i] {
                count_into(&mut shared.lock().expect("not poisoned"), a);
            }
        });
        let total: u64 = shared
            .lock()
            .expect("not poisoned")
            .values()
            .map(|c| c.packets)
            .sum();
        assert_eq!(total, (t * ops) as u64);
        d = d.max(mops(t * ops, secs));
        let per_core: Vec<Mutex<PerSource>> =
            (0..t).map(|_| Mutex::new(PerSource::new())).collect();
        let started = Instant::now();
        on_threads(t, |i| {
            // the lock is taken once per thread, not per packet
            let mut mine = per_core[i].lock().expect("not poisoned");
            for a in &streams[i] {
                count_into(&mut mine, a);
            }
        });
        let mut merged = PerSource::new();
        for p in &per_core {
            for (k, c) in p.lock().expect("not poisoned").iter() {
                merged.entry(*k).or_default().merge(c);
            }
        }
        let secs = started.elapsed().as_secs_f64();
        assert_eq!(
            merged.values().map(|c| c.packets).sum::<u64>(),
            (t * ops) as u64
        );
        m = m.max(mops(t * ops, secs));
    }
    (d, m)
}

fn fig5c(t: usize, ops: usize) -> (f64, f64) {
    let plan = Arc::new(PortPlan::new(
        &Toeplitz::new(RssKey::SYMMETRIC),
        127,
        1024,
        65535,
    ));
    const OPEN: usize = 1024;
    let churn = |pool: &mut dyn FnMut(Option<u16>) -> Option<u16>| {
        let mut open = std::collections::VecDeque::with_capacity(OPEN);
        for _ in 0..ops {
            if open.len() == OPEN {
                pool(open.pop_front());
            }
            let p = pool(None).expect("the pool has ports");
            open.push_back(p);
        }
    };
    let (mut d, mut m) = (0f64, 0f64);
    for _ in 0..3 {
        let shared = Mutex::new(PortPool::new(plan.clone(), 0, 1, 1));
        let secs = on_threads(t, |_| {
            let mut v = 0u32;
            churn(&mut |free| {
                open_or_close(&mut shared.lock().expect("not poisoned"), &mut v, free)
            });
        });
        d = d.max(mops(t * ops, secs));
        let pools: Vec<Mutex<PortPool>> = (0..t)
            .map(|i| Mutex::new(PortPool::new(plan.clone(), i, t, 1)))
            .collect();
        let secs = on_threads(t, |i| {
            let mut p = pools[i].lock().expect("not poisoned");
            let mut v = 0u32;
            churn(&mut |free| open_or_close(&mut p, &mut v, free));
        });
        m = m.max(mops(t * ops, secs));
    }
    (d, m)
}

/// Closes the mapping of `free`'s port, or opens one (a port of the next group
/// `v`).
fn open_or_close(pool: &mut PortPool, v: &mut u32, free: Option<u16>) -> Option<u16> {
    match free {
        Some(port) => {
            pool.free(0, PortClass::Tcp, port);
            None
        }
        None => {
            *v = (*v + 1) & 127;
            pool.alloc(0, PortClass::Tcp, *v)
        }
    }
}
