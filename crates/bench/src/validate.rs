//! `flowshift validate`: the same trace and config through the runtime and the
//! simulator at 1 and 2 working cores (or `--cores`), and the relative error of
//! the simulator's throughput, p50, mean and p99 latency against the runtime's. Fails
//! (exit status 1) when an error is beyond `--tolerance`.
//!
//! Throughput is compared at the replay's pace (as fast as possible unless
//! `--speed` says otherwise); latency at `--load` of the runtime's measured
//! throughput (trace timing scaled to that rate), because at saturation latency
//! is only the queue's length: whichever side saturates first shows milliseconds
//! and the other microseconds, whatever the model's per-packet cost.

use anyhow::bail;
use clap::Args;

use crate::compare::parse_list;
use launch::run::{setup, RunArgs, Setup};
use launch::sim::{prepare, simulate, ModelArg};

/// Options of `flowshift validate`: those of `flowshift run` (its `--workers` is
/// replaced by `--cores`), the model and the tolerance.
#[derive(Args, Debug)]
pub struct ValidateArgs {
    #[command(flatten)]
    pub run: RunArgs,
    #[command(flatten)]
    pub model: ModelArg,
    /// Working-core counts, comma-separated.
    #[arg(long, default_value = "1,2")]
    pub cores: String,
    /// Largest relative error accepted (0.15 = 15 %).
    #[arg(long, default_value_t = 0.15)]
    pub tolerance: f64,
    /// Runtime runs per core count; the one with the median throughput is
    /// compared (the runtime on a small shared machine varies run to run).
    #[arg(long, default_value_t = 3)]
    pub repeat: usize,
    /// Offered load of the latency comparison, as a fraction of the runtime's
    /// measured throughput.
    #[arg(long, default_value_t = 0.5)]
    pub load: f64,
}

/// (sim − runtime) / runtime.
fn rel(sim: f64, run: f64) -> f64 {
    if run == 0.0 {
        if sim == 0.0 {
            0.0
        } else {
            f64::INFINITY
        }
    } else {
        (sim - run) / run
    }
}

pub fn run(a: ValidateArgs) -> anyhow::Result<()> {
    if a.run.output.is_some() || a.run.workers.is_some() {
        bail!("validate takes --cores a,b (not --workers) and writes no --output");
    }
    if !(a.tolerance.is_finite() && a.tolerance > 0.0) {
        bail!("--tolerance {}: must be a positive fraction", a.tolerance);
    }
    if !(a.load > 0.0 && a.load < 1.0) {
        bail!("--load {}: must be a fraction in (0, 1)", a.load);
    }
    let Setup {
        chain,
        mut cfg,
        packets,
        ifaces,
        ..
    } = setup(&a.run, launch::packets::Hold::Memory)?;
    let trace = packets.into_trace();
    if ifaces.is_some() {
        anyhow::bail!("`validate` replays a trace: --iface is for `flowshift run`");
    }
    cfg.progress = None;
    // the runtime here time-shares this machine's CPUs: so does the model
    let mut model = a.model.load()?;
    model.cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let prep = prepare(&chain, &trace, cfg.priority_dscp);
    let mut rows = Vec::new();
    for n in parse_list(&a.cores)? {
        cfg.workers = n;
        let mut runs = Vec::new();
        for k in 0..a.repeat.max(1) {
            eprintln!(
                "flowshift validate: {n} working core(s): runtime, run {} of {}…",
                k + 1,
                a.repeat.max(1)
            );
            runs.push(runtime::run(&chain, &trace, &cfg)?.report);
        }
        runs.sort_by(|x, y| x.throughput["mpps"].total_cmp(&y.throughput["mpps"]));
        let spread = (
            runs[0].throughput["mpps"],
            runs[runs.len() - 1].throughput["mpps"],
        );
        let r = runs.swap_remove(runs.len() / 2);
        eprintln!(
            "flowshift validate: runtime throughput {:.3}…{:.3} Mpps over the runs",
            spread.0, spread.1
        );
        eprintln!("flowshift validate: {n} working core(s): simulator…");
        let s = simulate(&prep, &trace, &cfg, &model)?.report;
        // latency below saturation: the trace's timing scaled to `load` × the
        // runtime's throughput
        let native = trace.len() as f64 / (trace.duration_ns().max(1) as f64 / 1e9) / 1e6;
        let target = a.load * r.throughput["mpps"];
        let mut timed = cfg.clone();
        timed.pace = trace::Pace::Timed {
            speed: target / native,
        };
        eprintln!(
            "flowshift validate: {n} working core(s): latency at {target:.3} Mpps ({:.0} % of the runtime's throughput)…",
            100.0 * a.load
        );
        let rl = runtime::run(&chain, &trace, &timed)?.report;
        let sl = simulate(&prep, &trace, &timed, &model)?.report;
        let l = |x: &runtime::RunReport, f: fn(&runtime::Latency) -> u64| {
            f(&x.latency_ns["all"]) as f64 / 1e3
        };
        for (metric, run_v, sim_v) in [
            (
                "throughput Mpps",
                r.throughput["mpps"],
                s.throughput["mpps"],
            ),
            ("latency p50 µs", l(&rl, |x| x.p50), l(&sl, |x| x.p50)),
            ("latency mean µs", l(&rl, |x| x.mean), l(&sl, |x| x.mean)),
            ("latency p99 µs", l(&rl, |x| x.p99), l(&sl, |x| x.p99)),
        ] {
            let e = rel(sim_v, run_v);
            rows.push((n, metric, run_v, sim_v, e));
        }
    }
    cfg.workers = parse_list(&a.cores)?.into_iter().max().unwrap_or(1);
    verdict(
        &rows,
        a.tolerance,
        launch::run::polling_threads(&cfg, false),
    )
}

/// One compared metric: cores, name, runtime's value, simulator's, error.
type Row = (usize, &'static str, f64, f64, f64);

/// Prints the table and fails on an error beyond `tolerance`, saying when
/// only latency is off (`busy`: the most polling threads a run had).
fn verdict(rows: &[Row], tolerance: f64, busy: usize) -> anyhow::Result<()> {
    println!(
        "{:>5}  {:<16} {:>10} {:>10} {:>8}",
        "cores", "metric", "runtime", "sim", "error"
    );
    for (n, metric, r, s, e) in rows {
        println!(
            "{n:>5}  {metric:<16} {r:>10.3} {s:>10.3} {:>7.1}%{}",
            100.0 * e,
            if e.abs() > tolerance { "  ✗" } else { "" }
        );
    }
    let worst_of = |throughput: bool| {
        rows.iter()
            .filter(|r| !throughput || r.1.starts_with("throughput"))
            .fold(0.0f64, |w, r| w.max(r.4.abs()))
    };
    let (worst, worst_throughput) = (worst_of(false), worst_of(true));
    if worst > tolerance && worst_throughput <= tolerance {
        // the model prices work, not a runtime thread's wait for its CPU
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        bail!(
            "throughput is within {:.0} % (largest {:.1} %), latency off by up to {:.1} %: below \
             saturation the runtime's latency is its threads' hand-offs and waits for a CPU \
             (here up to {busy} busy threads on {cpus} CPUs), which the simulator does not model \
             (docs/EXPERIMENTS.md §0); recalibrating does not change that",
            100.0 * tolerance,
            100.0 * worst_throughput,
            100.0 * worst,
        );
    }
    if worst > tolerance {
        bail!(
            "the simulator is off by up to {:.1} % (tolerance {:.0} %): recalibrate with `flowshift calibrate` on this machine and pass --model",
            100.0 * worst,
            100.0 * tolerance
        );
    }
    println!(
        "validate: every error within {:.0} % (largest {:.1} %)",
        100.0 * tolerance,
        100.0 * worst
    );
    Ok(())
}
