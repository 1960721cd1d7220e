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
    /// Connection lifetimes of the generated trace, as `flowshift gen
    /// --lifetimes` (`sized:BETA` or `equal`) [default: sized:0.7].
    #[arg(long, conflicts_with = "input")]
    pub lifetimes: Option<trace::Lifetimes>,
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
    /// of the lightest cube with its closest (plus a default RSS rule; quadratic in
    /// the keys seen, about a second at 6 000).
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
    /// Periods the trace is cut into, by packet count: each plan is made on one
    /// period and measured on it and on the next (RSS++ runs one round per
    /// period).
    #[arg(long, default_value_t = 10)]
    pub periods: usize,
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
            Some(p) => trace::read_pcap(p)?,
            None => {
                let d = TraceSpec::default();
                let spec = TraceSpec {
                    alpha: a.alpha,
                    flows: a.flows,
                    lifetimes: a.lifetimes.unwrap_or(d.lifetimes),
                    ..d
                };
                spec.validate()?;
                eprintln!(
                    "flowshift: no --input: generating {} packets over {} connections, Zipf {}, lifetimes {}",
                    spec.packets, spec.flows, spec.alpha, spec.lifetimes
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
    /// Whether keys no rule holds take the NIC's default (RSS).
    default_rule: bool,
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
        default_rule: plan.table.default_rule,
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
    periods: usize,
    rss: Pair,
    rsspp: Pair,
    rsspp_moves: usize,
    roger: Vec<RogerRow>,
}

/// Median over periods of the imbalance in the period a plan was made from, and
/// in the period after it (where a controller that plans every period uses it).
#[derive(Serialize, Clone, Copy)]
struct Pair {
    same: f64,
    next: f64,
}

#[derive(Serialize)]
struct RogerRow {
    budget: usize,
    /// NIC rules of the largest plan (the default included when there is one).
    rules: usize,
    imbalance: Pair,
    /// Share of the weight that no rule held (went by RSS), over the next periods.
    default_share: f64,
    /// Mean time to plan one period.
    plan_seconds: f64,
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    }
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
    if a.periods < 2 {
        bail!(
            "--periods {}: at least 2 (plans are measured on the next one)",
            a.periods
        );
    }
    let t = Traffic::load(&a.traffic)?;
    if t.pkts.len() < a.periods {
        bail!("{} packets cannot make {} periods", t.pkts.len(), a.periods);
    }
    let cores = a.traffic.cores;
    let per = t.pkts.len() / a.periods;
    let periods: Vec<&[Pkt]> = (0..a.periods)
        .map(|i| {
            &t.pkts[i * per..if i + 1 == a.periods {
                t.pkts.len()
            } else {
                (i + 1) * per
            }]
        })
        .collect();
    let (rss, rsspp, rsspp_moves) = rss_baselines(&periods, a.reta, cores);
    let rows = roger_rows(&a, &t, &periods)?;
    let out = SweepOut {
        bits: t.bits.to_string(),
        cores,
        packets: t.pkts.len(),
        periods: a.periods,
        rss,
        rsspp,
        rsspp_moves,
        roger: rows,
    };
    if a.json {
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        print_sweep(&out, a.reta);
    }
    Ok(())
}

/// Each core's load when `owner` maps the buckets.
fn by_owner(buckets: &[u64], owner: &[u16], cores: u16) -> Vec<u64> {
    let mut load = vec![0u64; usize::from(cores)];
    for (b, w) in buckets.iter().enumerate() {
        load[usize::from(owner[b])] += w;
    }
    load
}

/// RSS's (the table as initialised) and RSS++'s (one round per period on
/// the period's bucket loads, as its controller does) imbalance, in the
/// period planned on and in the next; RSS++'s moves.
fn rss_baselines(periods: &[&[Pkt]], reta: usize, cores: u16) -> (Pair, Pair, usize) {
    let n = periods.len();
    let bucket_loads = |pkts: &[Pkt]| {
        let mut v = vec![0u64; reta];
        for p in pkts {
            v[p.hash as usize & (reta - 1)] += p.weight;
        }
        v
    };
    let buckets: Vec<Vec<u64>> = periods.iter().map(|p| bucket_loads(p)).collect();
    let rss_owner: Vec<u16> = (0..reta).map(|b| (b % usize::from(cores)) as u16).collect();
    let rss_imb: Vec<f64> = buckets
        .iter()
        .map(|b| roger::imbalance(&by_owner(b, &rss_owner, cores)))
        .collect();
    let rss = Pair {
        same: median(rss_imb[..n - 1].to_vec()),
        next: median(rss_imb[1..].to_vec()),
    };
    let mut rsspp_b = Rsspp::new(RssppConfig::default());
    let mut owner = rss_owner.clone();
    let (mut same, mut next, mut rsspp_moves) = (Vec::new(), Vec::new(), 0);
    for i in 0..n - 1 {
        rsspp_moves += rsspp_round(&mut rsspp_b, &buckets[i], &mut owner, cores, i as u64);
        same.push(roger::imbalance(&by_owner(&buckets[i], &owner, cores)));
        next.push(roger::imbalance(&by_owner(&buckets[i + 1], &owner, cores)));
    }
    let rsspp = Pair {
        same: median(same),
        next: median(next),
    };
    (rss, rsspp, rsspp_moves)
}

/// Roger at each budget: a plan per period, its imbalance there and in the
/// next, the share of packets its default rule takes, its time.
fn roger_rows(a: &SweepArgs, t: &Traffic, periods: &[&[Pkt]]) -> anyhow::Result<Vec<RogerRow>> {
    let cores = a.traffic.cores;
    let mut rows = Vec::new();
    for &budget in &a.budgets {
        let (mut same, mut next) = (Vec::new(), Vec::new());
        let (mut default, mut total, mut secs, mut rules) = (0u64, 0u64, 0.0, 0);
        for i in 0..a.periods - 1 {
            let started = Instant::now();
            let plan = roger::plan(&points(periods[i]), &t.params(&a.traffic, budget))
                .with_context(|| format!("budget {budget}"))?;
            secs += started.elapsed().as_secs_f64();
            rules = rules.max(plan.table.nic_rules());
            let (here, _) = route_loads(&plan, periods[i], cores, a.reta);
            let (after, d) = route_loads(&plan, periods[i + 1], cores, a.reta);
            same.push(roger::imbalance(&here));
            next.push(roger::imbalance(&after));
            default += d;
            total += after.iter().sum::<u64>();
        }
        let secs = secs / (a.periods - 1) as f64;
        rows.push(RogerRow {
            budget,
            rules,
            imbalance: Pair {
                same: median(same),
                next: median(next),
            },
            default_share: default as f64 / total.max(1) as f64,
            plan_seconds: secs,
        });
        if !a.json {
            eprintln!("flowshift: budget {budget}: {secs:.2} s per plan");
        }
    }
    Ok(rows)
}

/// The sweep as a table.
fn print_sweep(out: &SweepOut, reta: usize) {
    let (cores, rss, rsspp, rsspp_moves) = (out.cores, &out.rss, &out.rsspp, out.rsspp_moves);
    println!(
        "rule key {}, {} cores, {} packets in {} periods; imbalance = heaviest core / mean, \
         median over periods, in the period planned on and in the next",
        out.bits, cores, out.packets, out.periods
    );
    println!(
        "{:<22} {:>6} {:>10} {:>10} {:>10}",
        "steering", "rules", "same", "next", "default"
    );
    println!(
        "{:<22} {:>6} {:>10.3} {:>10.3} {:>10}",
        format!("RSS ({reta} entries)"),
        "-",
        rss.same,
        rss.next,
        "-"
    );
    println!(
        "{:<22} {:>6} {:>10.3} {:>10.3} {:>10}",
        format!("RSS++ ({rsspp_moves} moves)"),
        "-",
        rsspp.same,
        rsspp.next,
        "-"
    );
    for r in &out.roger {
        println!(
            "{:<22} {:>6} {:>10.3} {:>10.3} {:>9.2}%",
            format!("Roger budget {}", r.budget),
            r.rules,
            r.imbalance.same,
            r.imbalance.next,
            100.0 * r.default_share
        );
    }
}

/// One RSS++ round on a period's bucket loads, its moves applied to `owner`;
/// returns how many.
fn rsspp_round(b: &mut Rsspp, buckets: &[u64], owner: &mut [u16], cores: u16, round: u64) -> usize {
    let total: u64 = buckets.iter().sum::<u64>().max(1);
    let mut core_packets = vec![0u64; usize::from(cores)];
    for (i, w) in buckets.iter().enumerate() {
        core_packets[usize::from(owner[i])] += w;
    }
    // cores at 70 % on average, each as loaded as its share of the traffic
    let core_load = core_packets
        .iter()
        .map(|&p| (0.7 * f64::from(cores) * p as f64 / total as f64).min(1.0))
        .collect();
    let snap = Snapshot {
        now_ns: (round + 1) * 100_000_000,
        period_ns: 100_000_000,
        shards: buckets.len(),
        workers: usize::from(cores),
        owner: owner.to_vec(),
        bucket_packets: buckets.to_vec(),
        core_load,
        core_packets,
        ..Snapshot::default()
    };
    let plan = b.plan(&snap);
    for &(s, c) in &plan.moves {
        owner[usize::from(s)] = c;
    }
    plan.moves.len()
}
