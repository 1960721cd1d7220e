//! Live reload (`flowshift ctl reload [FILE]`, SIGHUP): the configuration
//! file is read again and, if it validates and changes only what can change
//! while traffic flows, every core's NFs take their new configuration between
//! two bursts (`nf::Chain::reload_nfs`, through [`runspec::control`]).
//! Existing flows keep their state and NAT mappings: the rules judge the
//! connections opened from then on. What each NF takes live is its own
//! (`nf::Nf::reload`): a firewall's rules, a router's routes, NPTv6's
//! prefixes, a NAT's timeouts and added addresses, an IDS's rules, a load
//! balancer's services and backends. Anything else is refused with its
//! reason and the old configuration keeps running: a file that does not
//! parse or build; `[run]`, `[io]`, `[pool]`, `[steering]` or `[table]`
//! changed (core counts, shards, table sizes: restart to apply them); NFs
//! added, removed or reordered; a change an NF cannot take live (a NAT's
//! ports or port forwards, an IDS's placement…).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use nf::config::NfSection;
use nf::{Chain, ChainConfig};
use runspec::control::Control;

use crate::file::{load, RunSection};

/// The tables of a configuration file other than the chain's (`[run]`,
/// `[io]`, `[pool]`): they cannot change live.
fn other_tables(path: Option<&Path>) -> Result<toml::Table, String> {
    let Some(p) = path else {
        return Ok(toml::Table::new());
    };
    let text = std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()))?;
    let mut t: toml::Table = toml::from_str(&text).map_err(|e| format!("{}: {e}", p.display()))?;
    for chain in ["steering", "table", "nf"] {
        t.remove(chain);
    }
    Ok(t)
}

/// A run's chain as the run builds it, and its configuration as built:
/// `[run] nat_external` given to every NAT, shards and table sizes the file
/// left unset scaled to `workers` (relative paths against `base`).
pub fn fitted(
    mut config: ChainConfig,
    sec: &RunSection,
    workers: usize,
    base: &Path,
) -> Result<(ChainConfig, Chain), nf::ConfigError> {
    if let Some(ext) = &sec.nat_external {
        for nf in &mut config.nf {
            if let NfSection::Nat(n) = nf {
                n.external.clone_from(ext);
            }
        }
    }
    let chain = config.build_for_cores(base, workers)?;
    Ok((config, chain))
}

/// What is running.
struct Running {
    file: Option<PathBuf>,
    config: ChainConfig,
    others: toml::Table,
    chain: Chain,
}

/// Reloads a run's configuration; see the module documentation.
pub struct Reloader {
    workers: usize,
    cores: Arc<Control>,
    running: Mutex<Running>,
}

impl Reloader {
    /// The reloader of a run started from `file` (none: the default chain)
    /// with `workers` working cores, running `chain` built from `config` as
    /// [`fitted`] built them, whose cores are reached through `cores`.
    pub fn new(
        file: Option<&Path>,
        workers: usize,
        (config, chain): (ChainConfig, Chain),
        cores: Arc<Control>,
    ) -> anyhow::Result<Reloader> {
        Ok(Reloader {
            workers,
            cores,
            running: Mutex::new(Running {
                file: file.map(Path::to_path_buf),
                config,
                others: other_tables(file).map_err(anyhow::Error::msg)?,
                chain,
            }),
        })
    }

    /// Reads `file` (or the running configuration's file again) and applies
    /// it; what changed, or why nothing did.
    pub fn reload(&self, file: Option<&Path>) -> Result<String, String> {
        let mut run = self.running.lock().unwrap_or_else(|e| e.into_inner());
        let Some(path) = file.map(Path::to_path_buf).or_else(|| run.file.clone()) else {
            return Err(
                "the run has no configuration file (it runs the default chain): give one, \
                 `flowshift ctl reload FILE`"
                    .into(),
            );
        };
        let (chain_cfg, sec, base) = load(Some(&path)).map_err(|e| format!("{e:#}"))?;
        let others = other_tables(Some(&path))?;
        let (config, chain) =
            fitted(chain_cfg, &sec, self.workers, &base).map_err(|e| format!("{e}"))?;
        let frozen = changed_tables(&run.others, &others, &run.config, &config);
        if !frozen.is_empty() {
            return Err(format!(
                "{} cannot change while traffic flows (core counts, shards, table sizes, \
                 interfaces…): restart to apply it; nothing changed",
                frozen.join(", ")
            ));
        }
        let old_kinds: Vec<&str> = run.config.nf.iter().map(NfSection::kind).collect();
        let new_kinds: Vec<&str> = config.nf.iter().map(NfSection::kind).collect();
        if old_kinds != new_kinds {
            return Err(format!(
                "the chain's NFs cannot be added, removed or reordered live ({} → {}); nothing changed",
                old_kinds.join(" → "),
                new_kinds.join(" → ")
            ));
        }
        // the NFs whose tables changed, and those that read rule files
        // (their files may have changed: reading them again is harmless)
        let which: Vec<usize> = (0..config.nf.len())
            .filter(|&i| {
                config.nf[i] != run.config.nf[i]
                    || matches!(config.nf[i].kind(), "firewall" | "router")
                    || matches!(&config.nf[i], NfSection::Ids(s) if s.rules_file.is_some())
            })
            .collect();
        // all or nothing, tried on a copy first (which then stands for the
        // cores' chains: what an NF made of the reload, e.g. a balancer's
        // services re-indexed, is the base of the next one)
        let mut reloaded = run.chain.instance();
        reloaded
            .reload_nfs(&chain, &which)
            .map_err(|e| format!("{e}; nothing changed"))?;
        let cores = self.cores.reload(&chain, &which)?;
        let names: Vec<String> = which
            .iter()
            .map(|&i| format!("nf[{i}] {}", chain.nfs()[i].name()))
            .collect();
        *run = Running {
            file: Some(path.clone()),
            config,
            others,
            chain: reloaded,
        };
        Ok(format!(
            "{}: {} on {cores} cores",
            path.display(),
            if names.is_empty() {
                "no NF to reload".to_string()
            } else {
                format!("reloaded {}", names.join(", "))
            }
        ))
    }
}

/// The tables that differ and cannot change live.
fn changed_tables(
    old: &toml::Table,
    new: &toml::Table,
    old_chain: &ChainConfig,
    new_chain: &ChainConfig,
) -> Vec<String> {
    let mut keys: Vec<&String> = old.keys().chain(new.keys()).collect();
    keys.sort();
    keys.dedup();
    let mut out: Vec<String> = keys
        .into_iter()
        .filter(|k| old.get(*k) != new.get(*k))
        .map(|k| format!("`[{k}]`"))
        .collect();
    if old_chain.steering != new_chain.steering {
        out.push("`[steering]`".into());
    }
    if old_chain.table != new_chain.table {
        out.push("`[table]`".into());
    }
    out
}

/// Reloads on every SIGHUP, saying what it did on standard error.
pub fn on_sighup(r: Arc<Reloader>) -> anyhow::Result<()> {
    let mut signals = signal_hook::iterator::Signals::new([signal_hook::consts::SIGHUP])?;
    std::thread::Builder::new()
        .name("reload".into())
        .spawn(move || {
            for _ in signals.forever() {
                match r.reload(None) {
                    Ok(done) => eprintln!("flowshift: reload: {done}"),
                    Err(e) => eprintln!("flowshift: reload refused: {e}"),
                }
            }
        })?;
    Ok(())
}
