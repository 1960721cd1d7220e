//! The tenants a pool packs (`pool plan --tenants FILE` or a drawn mix of
//! Sirius' fNIC sizes) and the node they are packed onto: read, checked and
//! turned into `pool::Demand`s for `pool plan` and `pool run --plan`.

use std::path::PathBuf;

use anyhow::{bail, Context};
use clap::{Args, ValueEnum};
use pool::{Demand, FnicSize, Mix, Split};
use serde::Deserialize;

/// Options of `flowshift pool plan`.
#[derive(Args, Debug)]
pub struct PlanArgs {
    /// Tenants and the node's capacity in TOML (`[node]` cps/pps/flows/gbps,
    /// `[[tenant]]` name, size = "FNI_M" or cps/pps/flows/gbps, count); without
    /// it, --count fNICs of Table 7's sizes drawn from --mix on Sirius cards.
    #[arg(long)]
    pub tenants: Option<PathBuf>,
    /// Size mix of the drawn fNICs.
    #[arg(long, value_enum, default_value_t = MixArg::Equal)]
    pub mix: MixArg,
    /// fNICs drawn.
    #[arg(long, default_value_t = 200)]
    pub count: usize,
    /// Seed of the draw.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Split tenants larger than a node (`oversize`), never (`never`), or every
    /// tenant into at least N parts (a number).
    #[arg(long, default_value = "oversize")]
    pub split: String,
    /// Print each node's tenants for the best heuristic.
    #[arg(long)]
    pub show: bool,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// `--mix`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum MixArg {
    /// Every size equally likely (Fig. 14b).
    Equal,
    /// Each size half as likely as the next smaller one.
    Small,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TenantsFile {
    node: Option<Demand>,
    #[serde(default)]
    tenant: Vec<TenantSpec>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TenantSpec {
    name: String,
    size: Option<FnicSize>,
    cps: Option<f64>,
    pps: Option<f64>,
    flows: Option<f64>,
    gbps: Option<f64>,
    #[serde(default = "one")]
    count: usize,
}

fn one() -> usize {
    1
}

pub fn parse_split(s: &str) -> anyhow::Result<Split> {
    Ok(match s {
        "oversize" => Split::Oversize,
        "never" => Split::Never,
        n => match n.parse::<usize>() {
            Ok(k) if (1..=64).contains(&k) => Split::All(k),
            _ => bail!("--split {s}: `oversize`, `never` or a number of parts in 1..=64"),
        },
    })
}

/// The tenants (names, demands) and the node.
pub fn load(a: &PlanArgs) -> anyhow::Result<(Vec<String>, Vec<Demand>, Demand)> {
    match &a.tenants {
        None => {
            if a.count == 0 {
                bail!("--count must be at least 1");
            }
            let mix = match a.mix {
                MixArg::Equal => Mix::Equal,
                MixArg::Small => Mix::Small,
            };
            let sizes = mix.draw(a.count, a.seed);
            let names = sizes
                .iter()
                .enumerate()
                .map(|(i, s)| format!("{}#{i}", s.name()))
                .collect();
            Ok((
                names,
                sizes.iter().map(|s| s.demand()).collect(),
                FnicSize::card(),
            ))
        }
        Some(p) => {
            let text =
                std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
            let f: TenantsFile = toml::from_str(&text)
                .with_context(|| format!("{}: not a tenants file", p.display()))?;
            let node = f.node.unwrap_or_else(FnicSize::card);
            if !node.valid() || node.vec().iter().all(|x| *x == 0.0) {
                bail!("{}: [node] needs a positive capacity", p.display());
            }
            let (mut names, mut demands) = (Vec::new(), Vec::new());
            for (i, t) in f.tenant.iter().enumerate() {
                let amounts = [t.cps, t.pps, t.flows, t.gbps];
                let given = amounts.iter().any(Option::is_some);
                let d = match (&t.size, given) {
                    (Some(s), false) => s.demand(),
                    (None, true) => Demand::from_vec(amounts.map(|x| x.unwrap_or(0.0))),
                    (Some(_), true) => bail!(
                        "{}: tenant[{i}] `{}`: give a size or amounts, not both",
                        p.display(),
                        t.name
                    ),
                    (None, false) => bail!(
                        "{}: tenant[{i}] `{}`: give a size (FNI_XXS … FNI_XL) or cps/pps/flows/gbps",
                        p.display(),
                        t.name
                    ),
                };
                if !d.valid() {
                    bail!(
                        "{}: tenant[{i}] `{}`: amounts must be finite and ≥ 0",
                        p.display(),
                        t.name
                    );
                }
                for k in 0..t.count {
                    names.push(if t.count > 1 {
                        format!("{}#{k}", t.name)
                    } else {
                        t.name.clone()
                    });
                    demands.push(d);
                }
            }
            if demands.is_empty() {
                bail!("{}: no [[tenant]]", p.display());
            }
            Ok((names, demands, node))
        }
    }
}
