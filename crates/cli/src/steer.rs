//! `flowshift steer`: NFLOW/MVT's Roger — steering by ternary NIC rules within a
//! rule budget — planned on a trace, and its imbalance beside RSS and RSS++.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context};
use balance::balancers::{Rsspp, RssppConfig};
use balance::{Balancer, Snapshot};
use clap::{Args, Subcommand, ValueEnum};
use serde::Serialize;
use steer::roger::{self, KeyBits, Reduce, RogerParams, RogerPlan, Route};
use steer::{HashFields, RssHasher, RssKey};
use trace::{Generator, Trace, TraceSpec};

/// `flowshift steer …`
#[derive(Subcommand, Debug)]
pub enum SteerCommand {
    /// Plan ternary NIC rules for a trace within a rule budget (Roger): print the
    /// rules, each core's weight and the imbalance.
    Plan(PlanArgs),
    /// Imbalance against the rule budget, beside RSS and RSS++ on the same trace.
    Sweep(SweepArgs),
}

/// The traffic and the rule key.
#[derive(Args, Debug, Clone)]
pub struct TrafficArgs {
    /// A pcap or pcapng trace; without it, a generated one (flowshift gen's
    /// defaults, with --alpha and --flows).
    #[arg(long)]
    pub input: Option<PathBuf>,
    /// Zipf exponent of the generated trace's flow sizes.
    #[arg(long, default_value_t = 1.1)]
    pub alpha: f64,
    /// Connections of the generated trace.
    #[arg(long, default_value_t = 4096)]
    pub flows: u32,
    /// Header bits the rules match, FIELD[:FIRST-LAST] joined by commas, bits
    /// numbered from the field's most significant (0). Fields: src-ip, dst-ip,
    /// src-port, dst-port, proto. The default is the NFLOW of a monitor that
    /// counts per source host: the low 16 bits of the source address.
    #[arg(long, default_value = "src-ip:16-31")]
    pub bits: String,
    /// What a cube's weight counts.
    #[arg(long, value_enum, default_value_t = Weight::Packets)]
    pub weight: Weight,
    /// Cores (queues) to spread over.
    #[arg(long, default_value_t = 8)]
    pub cores: u16,
    /// Key-levels the variable-order sifting may build (0: no sifting).
    #[arg(long, default_value_t = RogerParams::DEFAULT_SIFT_WORK)]
    pub sift_work: u64,
    /// How the cover meets the budget: `tree` splits the heaviest cube along the
    /// sifted order (rules tile the key space); `closest` is the paper's merging
    /// of the lightest cube with its closest (plus a default RSS rule).
    #[arg(long, value_enum, default_value_t = ReduceArg::Tree)]
    pub reduce: ReduceArg,
}

/// `--reduce`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum ReduceArg {
    /// Split the heaviest cube.
    Tree,
    /// Merge the lightest cube with its closest.
    Closest,
}

impl From<ReduceArg> for Reduce {
    fn from(r: ReduceArg) -> Reduce {
        match r {
            ReduceArg::Tree => Reduce::Tree,
            ReduceArg::Closest => Reduce::Closest,
        }
    }
}

/// What a cube weighs.
#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum Weight {
    /// Packets.
    Packets,
    /// Bytes on the wire.
    Bytes,
}

/// Options of `flowshift steer plan`.
#[derive(Args, Debug)]
pub struct PlanArgs {
    #[command(flatten)]
    pub traffic: TrafficArgs,
    /// NIC rules available, the default (RSS) rule included.
    #[arg(long, default_value_t = 16)]
    pub budget: usize,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Options of `flowshift steer sweep`.
#[derive(Args, Debug)]
pub struct SweepArgs {
    #[command(flatten)]
    pub traffic: TrafficArgs,
    /// Rule budgets to plan with.
    #[arg(long, value_delimiter = ',', default_value = "2,4,8,16,32,64")]
    pub budgets: Vec<usize>,
    /// RSS indirection-table entries for the RSS and RSS++ rows.
    #[arg(long, default_value_t = 128)]
    pub reta: usize,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

pub fn run(c: SteerCommand) -> anyhow::Result<()> {
    match c {
        SteerCommand::Plan(a) => plan_cmd(a),
        SteerCommand::Sweep(a) => sweep_cmd(a),
    }
}

/// A packet as the planner sees it.
#[derive(Copy, Clone)]
struct Pkt {
    key: u64,
    hash: u32,
    weight: u64,
}

/// The trace's packets with a rule key, and what was left out.
struct Traffic {
    bits: KeyBits,
    pkts: Vec<Pkt>,
    no_key: u64,
    malformed: u64,
}

impl Traffic {
    fn load(a: &TrafficArgs) -> anyhow::Result<Traffic> {
        let bits = KeyBits::parse(&a.bits)?;
        if a.cores == 0 {
            bail!("--cores must be at least 1");
        }
        let trace = match &a.input {
            Some(p) => trace::read_pcap(p).with_context(|| format!("reading {}", p.display()))?,
            None => {
                let spec = TraceSpec {
                    alpha: a.alpha,
                    flows: a.flows,
                    ..TraceSpec::default()
                };
                spec.validate()?;
                eprintln!(
                    "flowshift: no --input: generating {} packets over {} connections, Zipf {}",
                    spec.packets, spec.flows, spec.alpha
                );
                Trace::from_generated(Generator::new(&spec)?)
            }
        };
        let hasher = RssHasher::new(RssKey::SYMMETRIC, rss_fields(&bits));
        let mut t = Traffic {
            bits,
            pkts: Vec::with_capacity(trace.len()),
            no_key: 0,
            malformed: 0,
        };
        for i in 0..trace.len() {
            let Ok(info) = wire::parse(trace.frame(i)) else {
                t.malformed += 1;
                continue;
            };
            let Some(key) = t.bits.key(&info.tuple) else {
                t.no_key += 1;
                continue;
            };
            let weight = match a.weight {
                Weight::Packets => 1,
                Weight::Bytes => u64::from(trace.orig_len(i)),
            };
            t.pkts.push(Pkt {
                key,
                hash: hasher.hash(&info.tuple),
                weight,
            });
        }
        if t.pkts.is_empty() {
            bail!("no packet of the trace has a rule key ({} bits)", t.bits);
        }
        if t.no_key + t.malformed > 0 {
            eprintln!(
                "flowshift: left out {} packets without the key's fields (IPv6 where an \
                 address is matched) and {} malformed",
                t.no_key, t.malformed
            );
        }
        Ok(t)
    }

    fn params(&self, a: &TrafficArgs, budget: usize) -> RogerParams {
        RogerParams {
            bits: self.bits.width(),
            budget,
            cores: a.cores,
            sift_work: a.sift_work,
            reduce: a.reduce.into(),
        }
    }
}

/// The RSS fields that keep the rule key's flows whole: the addresses the key
/// matches, ports only when it matches a port.
fn rss_fields(bits: &KeyBits) -> HashFields {
    use steer::roger::Field;
    let has = |f: Field| bits.slices().iter().any(|s| s.field == f);
    let ports = has(Field::SrcPort) || has(Field::DstPort);
    match (has(Field::SrcIp), has(Field::DstIp), ports) {
        (_, _, true) => HashFields::IpPorts,
        (true, false, false) => HashFields::SrcIp,
        (false, true, false) => HashFields::DstIp,
        _ => HashFields::Ip,
    }
}

fn points(pkts: &[Pkt]) -> Vec<(u64, u64)> {
    pkts.iter().map(|p| (p.key, p.weight)).collect()
}

/// Per-core weight of `pkts` under `plan`, keys no rule holds going by RSS over
/// a round-robin table of `reta` entries; and the weight that took the default.
fn route_loads(plan: &RogerPlan, pkts: &[Pkt], cores: u16, reta: usize) -> (Vec<u64>, u64) {
    let mut load = vec![0u64; usize::from(cores)];
    let mut default = 0;
    for p in pkts {
        let core = match plan.table.route(p.key) {
            Route::Rule { core, .. } => core,
            Route::Default => {
                default += p.weight;
                rss_queue(p.hash, reta, cores)
            }
        };
        load[usize::from(core)] += p.weight;
    }
    (load, default)
}

fn rss_queue(hash: u32, reta: usize, cores: u16) -> u16 {
    ((hash as usize & (reta - 1)) % usize::from(cores)) as u16
}

#[derive(Serialize)]
struct PlanOut {
    bits: String,
    budget: usize,
    cores: u16,
    keys: usize,
    dsop_cubes: usize,
    paths_msb_first: u64,
    paths_sifted: u64,
    sift_builds: usize,
    plan_seconds: f64,
    rules: Vec<RuleOut>,
    core_weight: Vec<u64>,
    imbalance: f64,
}

#[derive(Serialize)]
struct RuleOut {
    value: String,
    mask: String,
    ternary: String,
    fields: String,
    core: u16,
    weight: u64,
}

fn plan_cmd(a: PlanArgs) -> anyhow::Result<()> {
    let t = Traffic::load(&a.traffic)?;
    let p = t.params(&a.traffic, a.budget);
    let pts = points(&t.pkts);
    let started = Instant::now();
    let plan = roger::plan(&pts, &p)?;
    let secs = started.elapsed().as_secs_f64();
    let mut keys: Vec<u64> = pts.iter().map(|p| p.0).collect();
    keys.sort_unstable();
    keys.dedup();
    let n = p.bits;
    let out = PlanOut {
        bits: t.bits.to_string(),
        budget: a.budget,
        cores: a.traffic.cores,
        keys: keys.len(),
        dsop_cubes: plan.dsop_cubes,
        paths_msb_first: plan.sifted.paths_before,
        paths_sifted: plan.sifted.paths_after,
        sift_builds: plan.sifted.builds,
        plan_seconds: secs,
        rules: plan
            .table
            .rules
            .iter()
            .zip(&plan.rule_weight)
            .map(|(r, &w)| RuleOut {
                value: format!("{:#x}", r.cube.value),
                mask: format!("{:#x}", r.cube.mask),
                ternary: r.cube.ternary(n),
                fields: t.bits.describe(&r.cube),
                core: r.core,
                weight: w,
            })
            .collect(),
        core_weight: plan.core_weight.clone(),
        imbalance: plan.imbalance(),
    };
    if a.json {
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    println!(
        "rule key {} ({} bits): {} keys seen, {} packets",
        out.bits,
        n,
        out.keys,
        t.pkts.len()
    );
    println!(
        "BDD 1-paths: {} most significant bit first, {} sifted ({} orders tried{}); \
         cut to {} rules{}, in {:.2} s",
        out.paths_msb_first,
        out.paths_sifted,
        out.sift_builds,
        if plan.sifted.capped {
            ", stopped at --sift-work"
        } else {
            ""
        },
        out.rules.len(),
        if plan.table.default_rule {
            " + the RSS default"
        } else {
            " tiling the key space"
        },
        secs
    );
    println!("{:>4}  {:>5}  {:>10}  match", "rule", "core", "weight");
    for (i, r) in out.rules.iter().enumerate() {
        println!("{i:>4}  {:>5}  {:>10}  {}", r.core, r.weight, r.fields);
    }
    if plan.table.default_rule {
        println!("{:>4}  {:>5}  {:>10}  any other key: RSS", "dflt", "rss", 0);
    }
    let total: u64 = out.core_weight.iter().sum();
    for (c, w) in out.core_weight.iter().enumerate() {
        println!(
            "core {c:>2}: {w:>10} ({:5.1} %)",
            100.0 * *w as f64 / total.max(1) as f64
        );
    }
    println!("imbalance (max / mean): {:.3}", out.imbalance);
    Ok(())
}

#[derive(Serialize)]
struct SweepOut {
    bits: String,
    cores: u16,
    packets: usize,
    keys_train: usize,
    rss: Pair,
    rsspp: Pair,
    rsspp_moves: usize,
    roger: Vec<RogerRow>,
}

/// Imbalance on the half planned on and on the half after it.
#[derive(Serialize, Clone, Copy)]
struct Pair {
    train: f64,
    test: f64,
}

#[derive(Serialize)]
struct RogerRow {
    budget: usize,
    rules: usize,
    dsop_cubes: usize,
    imbalance: Pair,
    /// Share of the second half's weight no rule held (went by RSS).
    default_share: f64,
    plan_seconds: f64,
}

fn sweep_cmd(a: SweepArgs) -> anyhow::Result<()> {
    if !(steer::MIN_SIZE..=steer::MAX_SIZE).contains(&a.reta) || !a.reta.is_power_of_two() {
        bail!(
            "--reta {}: a power of two in {}..={}",
            a.reta,
            steer::MIN_SIZE,
            steer::MAX_SIZE
        );
    }
    if a.budgets.is_empty() {
        bail!("--budgets: at least one");
    }
    let t = Traffic::load(&a.traffic)?;
    let cores = a.traffic.cores;
    let half = t.pkts.len() / 2;
    let (train, test) = t.pkts.split_at(half.max(1).min(t.pkts.len()));
    let test = if test.is_empty() { train } else { test };
    // RSS: the table as initialised
    let rss_owner: Vec<u16> = (0..a.reta)
        .map(|b| (b % usize::from(cores)) as u16)
        .collect();
    let bucket_loads = |pkts: &[Pkt]| {
        let mut v = vec![0u64; a.reta];
        for p in pkts {
            v[p.hash as usize & (a.reta - 1)] += p.weight;
        }
        v
    };
    let by_owner = |buckets: &[u64], owner: &[u16]| {
        let mut load = vec![0u64; usize::from(cores)];
        for (b, w) in buckets.iter().enumerate() {
            load[usize::from(owner[b])] += w;
        }
        load
    };
    let (train_b, test_b) = (bucket_loads(train), bucket_loads(test));
    let rss = Pair {
        train: roger::imbalance(&by_owner(&train_b, &rss_owner)),
        test: roger::imbalance(&by_owner(&test_b, &rss_owner)),
    };
    // RSS++: rounds on the first half's bucket loads until it stops moving
    let (rsspp_owner, rsspp_moves) = rsspp_converged(&train_b, rss_owner.clone(), cores);
    let rsspp = Pair {
        train: roger::imbalance(&by_owner(&train_b, &rsspp_owner)),
        test: roger::imbalance(&by_owner(&test_b, &rsspp_owner)),
    };
    let pts = points(train);
    let mut keys: Vec<u64> = pts.iter().map(|p| p.0).collect();
    keys.sort_unstable();
    keys.dedup();
    let mut rows = Vec::new();
    for &budget in &a.budgets {
        let started = Instant::now();
        let plan = roger::plan(&pts, &t.params(&a.traffic, budget))
            .with_context(|| format!("budget {budget}"))?;
        let secs = started.elapsed().as_secs_f64();
        let (train_l, _) = route_loads(&plan, train, cores, a.reta);
        let (test_l, default) = route_loads(&plan, test, cores, a.reta);
        let test_total: u64 = test_l.iter().sum();
        rows.push(RogerRow {
            budget,
            rules: plan.table.nic_rules(),
            dsop_cubes: plan.dsop_cubes,
            imbalance: Pair {
                train: roger::imbalance(&train_l),
                test: roger::imbalance(&test_l),
            },
            default_share: default as f64 / test_total.max(1) as f64,
            plan_seconds: secs,
        });
        if !a.json {
            eprintln!("flowshift: budget {budget} planned in {secs:.2} s");
        }
    }
    let out = SweepOut {
        bits: t.bits.to_string(),
        cores,
        packets: t.pkts.len(),
        keys_train: keys.len(),
        rss,
        rsspp,
        rsspp_moves,
        roger: rows,
    };
    if a.json {
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    println!(
        "rule key {}, {} cores, {} packets; planned on the first half ({} keys), \
         measured on both halves; imbalance = heaviest core / mean",
        out.bits, cores, out.packets, out.keys_train
    );
    println!(
        "{:<22} {:>6} {:>10} {:>10} {:>12}",
        "steering", "rules", "1st half", "2nd half", "default"
    );
    println!(
        "{:<22} {:>6} {:>10.3} {:>10.3} {:>12}",
        format!("RSS ({} entries)", a.reta),
        "-",
        rss.train,
        rss.test,
        "-"
    );
    println!(
        "{:<22} {:>6} {:>10.3} {:>10.3} {:>12}",
        format!("RSS++ ({rsspp_moves} moves)"),
        "-",
        rsspp.train,
        rsspp.test,
        "-"
    );
    for r in &out.roger {
        println!(
            "{:<22} {:>6} {:>10.3} {:>10.3} {:>11.2}%",
            format!("Roger budget {}", r.budget),
            r.rules,
            r.imbalance.train,
            r.imbalance.test,
            100.0 * r.default_share
        );
    }
    Ok(())
}

/// RSS++'s rounds on fixed bucket loads until a round moves nothing (at most 50):
/// its table as it would settle on that traffic.
fn rsspp_converged(buckets: &[u64], mut owner: Vec<u16>, cores: u16) -> (Vec<u16>, usize) {
    let mut b = Rsspp::new(RssppConfig::default());
    let total: u64 = buckets.iter().sum::<u64>().max(1);
    let mut moves = 0;
    for round in 0..50u64 {
        let mut core_packets = vec![0u64; usize::from(cores)];
        for (i, w) in buckets.iter().enumerate() {
            core_packets[usize::from(owner[i])] += w;
        }
        // cores at 70 % on average, as loaded as their share of the traffic
        let core_load = core_packets
            .iter()
            .map(|&p| (0.7 * f64::from(cores) * p as f64 / total as f64).min(1.0))
            .collect();
        let snap = Snapshot {
            now_ns: (round + 1) * 100_000_000,
            period_ns: 100_000_000,
            shards: buckets.len(),
            workers: usize::from(cores),
            owner: owner.clone(),
            bucket_packets: buckets.to_vec(),
            core_load,
            core_packets,
            ..Snapshot::default()
        };
        let plan = b.plan(&snap);
        if plan.moves.is_empty() {
            break;
        }
        for (s, c) in plan.moves {
            owner[usize::from(s)] = c;
            moves += 1;
        }
    }
    (owner, moves)
}
