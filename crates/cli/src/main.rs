//! `flowshift`: generate traces, inspect them, run NF chains on many cores with
//! load moved between them, and compare balancers.

#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Packets are allocated by the NIC model's thread and freed by a worker's:
/// mimalloc handles such cross-thread frees without a shared arena lock (glibc's
/// malloc made per-packet costs bimodal here, 230 or 480 ns, run to run).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod cmd;

use cmd::{bed, chain, ctl, gen, pool, sim, stats, steer};

/// flowshift — stateful network functions on many cores, with load moved between
/// cores while traffic flows.
#[derive(Parser, Debug)]
#[command(name = "flowshift", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run a chain on worker threads over a trace, moving load between cores.
    Run(launch::run::RunArgs),
    /// The same run in the discrete-event simulator (any number of cores).
    Sim(sim::SimArgs),
    /// Several balancers and core counts on one trace (runtime or --sim): one
    /// table, JSON and plots.
    Compare(bench::compare::CompareArgs),
    /// Measure the simulator's cost model on this machine's runtime.
    Calibrate(bench::calibrate::CalibrateArgs),
    /// Runtime vs simulator on the same trace at 1 and 2 cores: relative errors.
    Validate(bench::validate::ValidateArgs),
    /// Generate a synthetic trace (pcap, nanosecond timestamps) from a spec.
    Gen(gen::GenArgs),
    /// Runtime capacity: empty chain vs firewall → NAT, 1…N workers, one run.
    Bench(bench::micro::BenchArgs),
    /// flowshift FW → NAT on real interfaces vs the kernel's nftables NAT +
    /// conntrack, same namespaces and traffic, one run (needs root).
    BenchKernel(bench::kernel::BenchKernelArgs),
    /// NFLOW/MVT Figs. 5a–c: entangled vs disjoint entries, a shared locked
    /// monitor vs per-core counters, a shared NAT pool vs per-shard pools.
    BenchMvt(bench::mvt::BenchMvtArgs),
    /// Dyssect Fig. 1: one core running a NAT over many Zipf flows, in
    /// memory, against the number of shards.
    BenchShards(bench::shards::BenchShardsArgs),
    /// Inspect traces.
    #[command(subcommand)]
    Trace(TraceCommand),
    /// Check chain configurations.
    #[command(subcommand)]
    Chain(ChainCommand),
    /// Steering by ternary NIC rules within a rule budget (NFLOW/MVT's Roger).
    #[command(subcommand)]
    Steer(steer::SteerCommand),
    /// The Sirius pool of nodes: tenant (fNIC) packing, its replication and
    /// failover in a simulated network, and a pool of real nodes on this
    /// machine.
    #[command(subcommand)]
    Pool(pool::PoolCommand),
    /// A running instance, through its control socket: list and delete
    /// flows (`flows`, `flows delete`), read counters (`stats`), reload the
    /// configuration while traffic flows (`reload`).
    Ctl(ctl::CtlArgs),
    /// The network-namespace test beds: client — flowshift — server, or a
    /// pool's (needs root).
    Bed(bed::BedArgs),
}

#[derive(Subcommand, Debug)]
enum ChainCommand {
    /// Validate a chain config; print each NF's NFLOW key, its state and the steering.
    Check(chain::CheckArgs),
}

#[derive(Subcommand, Debug)]
enum TraceCommand {
    /// Packets, flows, duration, rates, flow-size distribution, top flows.
    Stats(stats::StatsArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Run(a) => cmd::run::run(a),
        Command::Sim(a) => sim::run(a),
        Command::Bed(a) => bed::run(a),
        Command::Ctl(a) => ctl::run(a),
        Command::Compare(a) => bench::compare::run(a),
        Command::Calibrate(a) => bench::calibrate::run(a),
        Command::Validate(a) => bench::validate::run(a),
        Command::Gen(a) => gen::run(a),
        Command::Bench(a) => bench::micro::run(a),
        Command::BenchKernel(a) => bench::kernel::run(a),
        Command::Trace(TraceCommand::Stats(a)) => stats::run(a),
        Command::Chain(ChainCommand::Check(a)) => chain::run(a),
        Command::Steer(c) => steer::run(c),
        Command::Pool(c) => pool::run(c),
        Command::BenchMvt(a) => bench::mvt::run(a),
        Command::BenchShards(a) => bench::shards::run(a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("flowshift: error: {}", message(&e));
            ExitCode::FAILURE
        }
    }
}

/// An error and its causes, each said once: an error whose message already
/// ends with its cause's (`path: No such file…`) does not repeat it.
fn message(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain().map(ToString::to_string) {
        if out.ends_with(&cause) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&cause);
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_cause_already_in_the_message_is_said_once() {
        let io = std::io::Error::from(std::io::ErrorKind::NotFound);
        let e = anyhow::Error::new(trace::PcapReadError::Io {
            path: "/nope".into(),
            source: io,
        });
        assert_eq!(super::message(&e), "/nope: entity not found");
        let e = e.context("reading the trace");
        assert_eq!(
            super::message(&e),
            "reading the trace: /nope: entity not found"
        );
    }
}
