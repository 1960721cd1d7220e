//! The reports `flowshift run` and `flowshift sim` print: packets, drops,
//! moves, latency, memory, each core's load, the imbalance.

use runtime::RunReport;

pub fn print_report(r: &RunReport) {
    println!(
        "packets     in {}  out {}  dropped {}",
        r.packets_in,
        r.packets_out,
        r.dropped()
    );
    let drops: Vec<String> = r
        .drops
        .iter()
        .filter(|(_, v)| **v > 0)
        .map(|(k, v)| format!("{k} {v}"))
        .collect();
    if !drops.is_empty() {
        println!("drops       {}", drops.join(", "));
    }
    println!("reordered   {}", r.reordered);
    println!(
        "throughput  offered {:.3} Mpps, achieved {:.3} Mpps, {:.3} Gbps",
        r.throughput["offered_mpps"], r.throughput["mpps"], r.throughput["gbps"]
    );
    for class in ["all", "priority", "regular"] {
        let l = &r.latency_ns[class];
        if l.max == 0 {
            continue;
        }
        println!(
            "latency     {class:<8} p50 {:.1} µs, p99 {:.1} µs, p99.9 {:.1} µs, max {:.1} µs",
            l.p50 as f64 / 1e3,
            l.p99 as f64 / 1e3,
            l.p999 as f64 / 1e3,
            l.max as f64 / 1e3
        );
    }
    let mut more = String::new();
    for (k, what) in [
        ("undone", "undone (dropped later in the chain)"),
        ("evicted", "evicted"),
        ("emergencies", "emergency-mode entries"),
    ] {
        if r.flows.get(k).is_some_and(|n| *n > 0) {
            more.push_str(&format!(", {} {what}", r.flows[k]));
        }
    }
    println!(
        "flows       created {}, expired {}{more}",
        r.flows["created"], r.flows["expired"]
    );
    print_memory(r);
    print_pool(r);
    println!(
        "migrations  {} shard moves, {} flow entries moved, {} packets held then drained (move p50 {:.0} µs, max {:.0} µs)",
        r.migrations["shard_moves"],
        r.migrations["entries_moved"],
        r.migrations["packets_held"],
        r.controller["move_us_p50"],
        r.controller["move_us_max"]
    );
    if r.cores["offloading"] > 0 {
        println!(
            "offload     {} ratio/core changes, {} flows offloaded, {} recalled, {} packets waited for a recall",
            r.migrations["offload_changes"],
            r.migrations["flows_offloaded"],
            r.migrations["flows_recalled"],
            r.migrations["packets_pended"]
        );
    }
    for (name, counters) in &r.nf {
        let nonzero: Vec<String> = counters
            .iter()
            .filter(|(_, v)| **v > 0)
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        if !nonzero.is_empty() {
            println!("nf {name:<8} {}", nonzero.join(", "));
        }
    }
    for p in &r.placements {
        println!(
            "director    {} → {} at {:.3} s ({})",
            p.nf,
            nf::component::Placement::cores_name(p.cores),
            p.at_s,
            p.reason
        );
    }
    for c in &r.per_core {
        println!(
            "core {:<6} {:<10} load {:>5.1} %  {} packets",
            c.core,
            c.role,
            100.0 * c.load,
            c.packets
        );
    }
    println!(
        "imbalance   max/min load {:.3} (working cores)",
        r.imbalance["max_over_min"]
    );
    if let Some(o) = r.imbalance.get("offloading_max_over_min") {
        println!("            max/min load {o:.3} (offloading cores)");
    }
}

/// The memory line: peak RSS, the flow tables when full, AF_XDP's UMEM.
fn print_memory(r: &RunReport) {
    if let (Some(start), Some(peak)) = (r.memory.get("rss_start"), r.memory.get("max_rss")) {
        let mib = |b: u64| b as f64 / f64::from(1u32 << 20);
        let xdp = r.memory.get("xdp_umem").map_or(String::new(), |x| {
            format!(", AF_XDP UMEM and rings {:.1} MiB", mib(*x))
        });
        println!(
            "memory      peak RSS {:.1} MiB ({:.1} MiB when the run began), flow tables at most {:.1} MiB when full{xdp}",
            mib(*peak),
            mib(*start),
            mib(r.memory.get("tables_at_capacity").copied().unwrap_or(0))
        );
    }
}

/// A pool node's line: replication and what was refused.
fn print_pool(r: &RunReport) {
    if !r.pool.is_empty() {
        let p = |k: &str| r.pool.get(k).copied().unwrap_or(0);
        println!(
            "pool        replicated {}, acknowledged {}, installed {}, from primaries {}; \
             refused {} (bad seal {}, stale {}, replayed {}, malformed {}), acknowledgements refused {}",
            p("replicated"),
            p("acked"),
            p("installed"),
            p("replicas_in"),
            p("refused_bad_tag") + p("refused_stale") + p("refused_replayed") + p("refused_malformed"),
            p("refused_bad_tag"),
            p("refused_stale"),
            p("refused_replayed"),
            p("refused_malformed"),
            p("acks_refused")
        );
    }
}

/// Per-core load over time, at most 12 rows (evenly picked periods).
pub fn print_load_over_time(r: &runtime::RunReport) {
    let l = &r.load_over_time;
    if l.is_empty() {
        return;
    }
    println!("load over time (per core, %):");
    let step = l.len().div_ceil(12);
    for s in l.iter().step_by(step) {
        let loads: Vec<String> = s
            .load
            .iter()
            .map(|x| format!("{:5.1}", 100.0 * x))
            .collect();
        println!("  {:9.3} ms  {}", s.t_ns as f64 / 1e6, loads.join(" "));
    }
}
