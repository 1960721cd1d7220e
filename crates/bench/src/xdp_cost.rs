//! `flowshift bench-kernel --program-cost`: what the XDP steering program
//! costs per frame under each way it steers, measured by the kernel itself
//! (`BPF_PROG_TEST_RUN` with a repeat count gives the mean time per run) on
//! the same generated frames in one run: the Toeplitz hash (12 table
//! lookups), a Roger plan's 8 ternary rules before the hash, 64 cells matched
//! as 64 exact rules, and 64 cells read directly from the fields (live
//! rules). No traffic, no bed: the programs run on frames handed to the
//! kernel.

use anyhow::Context;
use netio::bpf::{Map, Program};
use netio::steering::KernelRss;
use steer::roger::{Cube, KeyBits, Rule, RuleSteering, RuleTable};
use steer::{HashFields, RssKey, Toeplitz};
use trace::{Generator, TraceSpec};

/// Buckets of the measured programs (the default table).
const BUCKETS: u32 = 128;
/// Runs per frame the kernel averages over.
const REPEAT: u32 = 2_000;

/// One way of steering: its name and the rules the program matches.
struct Way {
    name: &'static str,
    rules: Option<RuleSteering>,
}

/// The ways measured, over the rule key `src-ip:26-31` (64 values).
fn ways() -> anyhow::Result<Vec<Way>> {
    let bits = KeyBits::parse("src-ip:26-31")?;
    let table = |rules: Vec<Rule>| RuleTable {
        bits: 6,
        cores: 2,
        rules,
        default_rule: false,
    };
    // a plan's 8 rules: the key space cut in eight by its top three bits
    let eight = (0..8u64)
        .map(|v| Rule {
            cube: Cube::new(v << 3, 0b111_000),
            core: (v % 2) as u16,
        })
        .collect();
    let singles = (0..64u64)
        .map(|v| Rule {
            cube: Cube::new(v, 0b111_111),
            core: (v % 2) as u16,
        })
        .collect();
    let err = |e: String| anyhow::anyhow!(e);
    Ok(vec![
        Way {
            name: "hash (Toeplitz, 12 table lookups)",
            rules: None,
        },
        Way {
            name: "8 ternary rules, then the hash",
            rules: Some(
                RuleSteering::new(bits.clone(), table(eight), BUCKETS as usize).map_err(err)?,
            ),
        },
        Way {
            name: "64 cells as 64 exact rules",
            rules: Some(
                RuleSteering::new(bits.clone(), table(singles), BUCKETS as usize).map_err(err)?,
            ),
        },
        Way {
            name: "64 cells read from the fields",
            rules: Some(RuleSteering::cells(bits, BUCKETS as usize).map_err(err)?),
        },
    ])
}

/// Measures every way on the same frames and prints ns per frame, with the
/// ratio to the hash's.
pub fn run() -> anyhow::Result<()> {
    let spec = TraceSpec {
        flows: 256,
        packets: 2_000,
        ipv6_share: 0.0,
        ..TraceSpec::default()
    };
    // every eighth frame: 250 frames of as many sources
    let frames: Vec<Vec<u8>> = Generator::new(&spec)?.step_by(8).map(|p| p.frame).collect();
    let t = Toeplitz::new(RssKey::SYMMETRIC);
    let workers = 2;
    println!(
        "XDP steering program, ns per frame (BPF_PROG_TEST_RUN, {} frames × {REPEAT} runs each):",
        frames.len()
    );
    println!("{:<36} {:>8} {:>9}", "steering", "ns", "÷ hash");
    let mut hash_ns = None;
    for w in ways()? {
        let mut k = KernelRss::maps(&t, HashFields::IpPorts, BUCKETS, workers)
            .map_err(|e| anyhow::anyhow!(e))
            .context("the steering maps (needs root: eBPF)")?;
        if let Some(r) = &w.rules {
            k.set_rules(r).map_err(|e| anyhow::anyhow!(e))?;
        }
        let xsks = Map::xsk(workers).context("the socket map")?;
        let prog = Program::xdp("fs_xdp_cost", &k.xdp_program(&xsks, workers, true))
            .map_err(|e| anyhow::anyhow!(e))?;
        let mut total = 0u64;
        for f in &frames {
            let (_, ns) = prog
                .test_run_xdp_timed(f, REPEAT)
                .context("BPF_PROG_TEST_RUN")?;
            total += u64::from(ns);
        }
        let ns = total as f64 / frames.len() as f64;
        let base = *hash_ns.get_or_insert(ns);
        println!("{:<36} {:>8.1} {:>9.2}", w.name, ns, ns / base);
    }
    Ok(())
}
