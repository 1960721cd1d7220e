//! `flowshift pool plan`: pack tenants' fNICs onto pool nodes (Sirius
//! Appendix B.1) with each heuristic, against the lower bound.

use anyhow::bail;
use clap::{Args, Subcommand};
use pool::{pack, Heuristic, Packing, DIMS};
use poolctl::tenants::{load, parse_split, PlanArgs};
use serde::Serialize;

/// `flowshift pool …`
#[derive(Subcommand, Debug)]
pub enum PoolCommand {
    /// Pack tenants (fNICs) onto nodes with each heuristic; nodes used against
    /// the lower bound.
    Plan(PlanArgs),
    /// Run the pool's replication (ping-pong, heartbeats, failover, bulk sync)
    /// in a simulated network, optionally killing a node and bringing it back;
    /// print the pool's report.
    Sim(SimArgs),
    /// Run a pool on this machine: the pool bed's namespaces, one
    /// `flowshift run` per node with ping-pong replication to the next, and
    /// the controller (heartbeats, failover to the secondary); until Ctrl-C.
    /// Needs root.
    Run(poolctl::args::RunArgs),
    /// What replication costs: two nodes without and with it, side by side,
    /// on steady flows and on a new flow in every frame. Needs root.
    Bench(bench::pool::BenchArgs),
}

/// Options of `flowshift pool sim`.
#[derive(Args, Debug)]
pub struct SimArgs {
    /// Nodes in the pool.
    #[arg(long, default_value_t = 3)]
    pub nodes: u16,
    /// Connections.
    #[arg(long, default_value_t = 300)]
    pub connections: usize,
    /// Packets per connection (one in flight at a time, 200 µs apart).
    #[arg(long, default_value_t = 400)]
    pub packets: u64,
    /// Kill node N at T ms (`N@T`).
    #[arg(long)]
    pub kill: Option<String>,
    /// Bring the killed node back at this many ms.
    #[arg(long)]
    pub back: Option<f64>,
    /// Virtual time to simulate, ms.
    #[arg(long, default_value_t = 100.0)]
    pub duration: f64,
    /// One-way latency between nodes, µs.
    #[arg(long, default_value_t = 20.0)]
    pub latency_us: f64,
    /// Heartbeat period, µs (a node silent for 3 periods is down).
    #[arg(long, default_value_t = 500.0)]
    pub heartbeat_us: f64,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Serialize)]
struct Out {
    tenants: usize,
    lower_bound: usize,
    packings: Vec<Row>,
}

#[derive(Serialize)]
struct Row {
    heuristic: &'static str,
    nodes: usize,
    efficiency: f64,
    split_tenants: usize,
    parts: usize,
    packing: Packing,
}

pub fn run(c: PoolCommand) -> anyhow::Result<()> {
    match c {
        PoolCommand::Plan(a) => plan(a),
        PoolCommand::Sim(a) => sim(a),
        PoolCommand::Run(a) => poolctl::run(a),
        PoolCommand::Bench(a) => bench::pool::run(a),
    }
}

fn sim(a: SimArgs) -> anyhow::Result<()> {
    use pool::sim::{Failure, Sim, SimConfig};
    if a.nodes < 2 {
        bail!("--nodes {}: a pool replicates across at least 2", a.nodes);
    }
    if a.connections == 0 || a.packets == 0 {
        bail!("--connections and --packets must be at least 1");
    }
    let ms = |x: f64, what: &str| -> anyhow::Result<u64> {
        if !(x.is_finite() && x >= 0.0) {
            bail!("{what} {x}: a time ≥ 0");
        }
        Ok((x * 1e6) as u64)
    };
    let duration = ms(a.duration, "--duration")?;
    let failure = match &a.kill {
        None => {
            if a.back.is_some() {
                bail!("--back needs --kill");
            }
            None
        }
        Some(k) => {
            let (n, t) = k
                .split_once('@')
                .ok_or_else(|| anyhow::anyhow!("--kill {k}: NODE@MS, e.g. 1@20"))?;
            let node: u16 = n
                .parse()
                .map_err(|_| anyhow::anyhow!("--kill {k}: `{n}` is not a node number"))?;
            if node >= a.nodes {
                bail!("--kill {k}: the pool has nodes 0..{}", a.nodes - 1);
            }
            let at: f64 = t
                .parse()
                .map_err(|_| anyhow::anyhow!("--kill {k}: `{t}` is not a time in ms"))?;
            let at_ns = ms(at, "--kill")?;
            let back_ns = a.back.map(|b| ms(b, "--back")).transpose()?;
            if back_ns.is_some_and(|b| b <= at_ns) {
                bail!("--back must come after the kill");
            }
            Some(Failure {
                node,
                at_ns,
                back_ns,
            })
        }
    };
    let mut cfg = SimConfig {
        nodes: a.nodes,
        connections: a.connections,
        packets: a.packets,
        latency_ns: ms(a.latency_us / 1e3, "--latency-us")?,
        ..SimConfig::default()
    };
    cfg.replica.heartbeat_ns = ms(a.heartbeat_us / 1e3, "--heartbeat-us")?.max(1);
    let r = Sim::new(cfg).run(failure, duration);
    if a.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
        return Ok(());
    }
    println!(
        "pool of {} nodes, {} connections, {:.1} ms simulated",
        a.nodes,
        a.connections,
        r.duration_ns as f64 / 1e6
    );
    println!(
        "packets     out {}  ({} connections finished)",
        r.packets_out, r.finished
    );
    for (n, p) in &r.node_packets {
        println!("node {n:>2}     {p} packets");
    }
    println!(
        "replication {} state changes, lag p50 {:.1} µs, p99 {:.1} µs, max {:.1} µs; {} left with one copy",
        r.replicated,
        r.lag_ns[0] as f64 / 1e3,
        r.lag_ns[1] as f64 / 1e3,
        r.lag_ns[2] as f64 / 1e3,
        r.unreplicated
    );
    println!(
        "failovers   {}  recovery {:.2} ms  bulk syncs {}",
        r.failovers,
        r.recovery_ns as f64 / 1e6,
        r.syncs
    );
    println!("broken      {} connections", r.broken);
    Ok(())
}

fn plan(a: PlanArgs) -> anyhow::Result<()> {
    let split = parse_split(&a.split)?;
    let (names, demands, node) = load(&a)?;
    let mut rows = Vec::new();
    for h in Heuristic::ALL {
        let p = pack(&demands, &node, h, split)?;
        let parts: usize = p.nodes.iter().map(Vec::len).sum();
        let split_tenants = p
            .nodes
            .iter()
            .flatten()
            .filter(|q| q.part == 0 && q.of > 1)
            .count();
        rows.push(Row {
            heuristic: h.name(),
            nodes: p.nodes.len(),
            efficiency: p.efficiency(),
            split_tenants,
            parts,
            packing: p,
        });
    }
    let bound = rows[0].packing.lower_bound;
    if a.json {
        let out = Out {
            tenants: demands.len(),
            lower_bound: bound,
            packings: rows,
        };
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    let total = demands.iter().fold([0.0f64; 4], |mut acc, d| {
        for (a, x) in acc.iter_mut().zip(d.share_of(&node)) {
            *a += x;
        }
        acc
    });
    println!(
        "{} tenants; in nodes' worth: {}; lower bound {} nodes",
        demands.len(),
        DIMS.iter()
            .zip(total)
            .map(|(d, t)| format!("{d} {t:.2}"))
            .collect::<Vec<_>>()
            .join(", "),
        bound
    );
    println!(
        "{:<12} {:>6} {:>11} {:>15} {:>6}",
        "heuristic", "nodes", "efficiency", "split tenants", "parts"
    );
    for r in &rows {
        println!(
            "{:<12} {:>6} {:>11.3} {:>15} {:>6}",
            r.heuristic, r.nodes, r.efficiency, r.split_tenants, r.parts
        );
    }
    if a.show {
        let best = rows
            .iter()
            .min_by_key(|r| r.nodes)
            .expect("four heuristics");
        println!("\nnodes of {}:", best.heuristic);
        for (i, (parts, load)) in best
            .packing
            .nodes
            .iter()
            .zip(best.packing.loads(&node))
            .enumerate()
        {
            let who: Vec<String> = parts
                .iter()
                .map(|q| {
                    if q.of > 1 {
                        format!("{} ({}/{})", names[q.tenant], q.part + 1, q.of)
                    } else {
                        names[q.tenant].clone()
                    }
                })
                .collect();
            println!(
                "node {i:>3}: {} — {}",
                DIMS.iter()
                    .zip(load)
                    .map(|(d, l)| format!("{d} {:3.0} %", 100.0 * l))
                    .collect::<Vec<_>>()
                    .join(", "),
                who.join(", ")
            );
        }
    }
    Ok(())
}
