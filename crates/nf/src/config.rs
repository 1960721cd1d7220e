//! Chains in TOML: typed, validated once, errors that name the field.
//!
//! ```toml
//! [steering]              # all optional
//! key = "symmetric"       # "symmetric", "default" or 80 hex digits; default: chosen by the chain
//! buckets = 128           # indirection-table entries (power of two, 64..=4096)
//! shards = 16             # power of two ≤ buckets
//!
//! [table]                 # per shard
//! capacity = 65536
//! policy = "refuse"       # or "evict-unassured"
//! timer_tick = "10ms"
//! fast_entries = 0        # GranularNF fast table of the hottest flows; 0 = none
//!
//! [[nf]]
//! kind = "firewall"
//! rules = "allow any 10.0.0.0/8 -> any"   # or rules_file = "acl.txt"
//! default = "deny"
//!
//! [[nf]]
//! kind = "nat"
//! internal = "10.0.0.0/8"
//! external = ["203.0.113.0/24"]
//! ports = "1024-65535"
//!
//! [[nf]]
//! kind = "monitor"
//! state = "mergeable"
//!
//! [[nf]]
//! kind = "seqcheck"
//! ```

use std::path::{Path, PathBuf};

use ipnet::{IpNet, Ipv4Net};
use serde::Deserialize;
use state::{CapPolicy, TableConfig};
use steer::RssKey;

use crate::chain::ChainOptions;
use crate::firewall::{self, Action, Classifier, Firewall};
use crate::monitor::{Monitor, MonitorConfig};
use crate::nat::{Nat, NatTimeouts};
use crate::seqcheck::{SeqCheck, SeqCheckConfig};
use crate::{Chain, ChainError, Nf};

/// Serde helpers for durations written as `"100ms"`, `"2h 4m"`, `"7440s"`.
pub mod duration {
    use core::time::Duration;

    use serde::{Deserialize, Deserializer};

    /// Deserializes a humantime duration.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let s = String::deserialize(d)?;
        humantime::parse_duration(&s).map_err(|e| {
            serde::de::Error::custom(format!(
                "`{s}`: {e} (write e.g. \"100ms\", \"30s\", \"2h\")"
            ))
        })
    }
}

/// A configuration error.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// Reading a file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// TOML syntax or a field of the wrong type or name.
    #[error("{0}")]
    Toml(#[from] toml::de::Error),
    /// A field with a bad value.
    #[error("`{field}`: {msg}")]
    Field {
        /// Path of the field, e.g. `nf[1].external`.
        field: String,
        /// What is wrong and what is allowed.
        msg: String,
    },
    /// The chain's NFs cannot share one steering key.
    #[error("{0}")]
    Chain(#[from] ChainError),
}

fn field(field: impl Into<String>, msg: impl Into<String>) -> ConfigError {
    ConfigError::Field {
        field: field.into(),
        msg: msg.into(),
    }
}

/// `[steering]`.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct SteeringConfig {
    /// RSS key: `symmetric`, `default` or 80 hex digits.
    pub key: Option<String>,
    /// Indirection-table size.
    pub buckets: usize,
    /// Number of shards.
    pub shards: usize,
}

impl Default for SteeringConfig {
    fn default() -> Self {
        SteeringConfig {
            key: None,
            buckets: 128,
            shards: 16,
        }
    }
}

/// `[table]`.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct TableSection {
    /// Flow entries per shard.
    pub capacity: usize,
    /// `refuse` or `evict-unassured`.
    pub policy: String,
    /// Timer resolution.
    #[serde(with = "duration")]
    pub timer_tick: core::time::Duration,
    /// Flows in the fast table in front of the shard's table (0 = none).
    pub fast_entries: usize,
}

impl Default for TableSection {
    fn default() -> Self {
        TableSection {
            capacity: 65_536,
            policy: "refuse".into(),
            timer_tick: core::time::Duration::from_millis(10),
            fast_entries: 0,
        }
    }
}

/// `[[nf]] kind = "firewall"`.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct FirewallSection {
    /// Name in the chain.
    pub name: Option<String>,
    /// Rules, inline.
    pub rules: Option<String>,
    /// Rules, from a file (relative to the config file).
    pub rules_file: Option<PathBuf>,
    /// `allow` or `deny` when no rule matches.
    #[serde(default = "deny")]
    pub default: String,
    /// Conntrack timeouts.
    #[serde(default)]
    pub timeouts: firewall::Timeouts,
}

fn deny() -> String {
    "deny".into()
}

/// `[[nf]] kind = "nat"`.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct NatSection {
    /// Name in the chain.
    pub name: Option<String>,
    /// Internal prefix (IPv4).
    pub internal: String,
    /// External addresses or prefixes (IPv4).
    pub external: Vec<String>,
    /// External port range `LO-HI`.
    #[serde(default = "default_ports")]
    pub ports: String,
    /// Timeouts.
    #[serde(default)]
    pub timeouts: NatTimeouts,
}

fn default_ports() -> String {
    "1024-65535".into()
}

/// `[[nf]] kind = "monitor"`.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct MonitorSection {
    /// Name in the chain.
    pub name: Option<String>,
    /// Parameters.
    #[serde(flatten)]
    pub cfg: MonitorConfig,
}

/// `[[nf]] kind = "seqcheck"`.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SeqCheckSection {
    /// Name in the chain.
    pub name: Option<String>,
    /// Parameters.
    #[serde(flatten)]
    pub cfg: SeqCheckConfig,
}

/// `[[nf]] kind = "router"`.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RouterSection {
    /// Name in the chain.
    pub name: Option<String>,
    /// Routes, `"PREFIX PORT"` each.
    #[serde(default)]
    pub routes: Vec<String>,
    /// A file of routes, one a line (relative to the config file).
    pub routes_file: Option<PathBuf>,
}

/// One `[[nf]]` table.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum NfSection {
    /// Stateful firewall.
    Firewall(FirewallSection),
    /// NAPT.
    Nat(NatSection),
    /// Traffic monitor.
    Monitor(MonitorSection),
    /// Sequence check.
    Seqcheck(SeqCheckSection),
    /// L3 forwarding (longest-prefix match over disjoint entries).
    Router(RouterSection),
    /// L4 load balancer (Maglev, connections pinned).
    Lb(crate::lb::config::LbSection),
    /// Streaming IDS.
    Ids(IdsSection),
}

/// `[[nf]] kind = "ids"`.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct IdsSection {
    /// Name in the chain.
    pub name: Option<String>,
    /// Rules, inline.
    pub rules: Option<String>,
    /// Rules, from a file (relative to the config file).
    pub rules_file: Option<PathBuf>,
    /// Alerts file (JSON lines, appended; relative to the config file).
    pub alerts: Option<PathBuf>,
    /// Idle timeout of a flow's matcher state.
    #[serde(default = "ids_idle", with = "duration")]
    pub idle: core::time::Duration,
    /// Where the pattern matching runs: `inline` (default) or `core` (an
    /// offloading component on its own core).
    #[serde(default = "ids_placement")]
    pub placement: String,
    /// Payloads the ring to the `core` component holds.
    #[serde(default = "ids_ring")]
    pub ring: usize,
}

fn ids_placement() -> String {
    "inline".into()
}

fn ids_ring() -> usize {
    16_384
}

fn ids_idle() -> core::time::Duration {
    core::time::Duration::from_secs(300)
}

/// A whole chain configuration.
#[derive(Clone, Debug, Deserialize, PartialEq, Default)]
#[serde(default, deny_unknown_fields)]
pub struct ChainConfig {
    /// Steering.
    pub steering: SteeringConfig,
    /// Flow tables.
    pub table: TableSection,
    /// The NFs in order.
    pub nf: Vec<NfSection>,
}

impl ChainConfig {
    /// Parses TOML.
    pub fn from_toml(text: &str) -> Result<ChainConfig, ConfigError> {
        Ok(toml::from_str(text)?)
    }

    /// Reads a TOML file; relative paths inside resolve against its directory.
    pub fn from_file(path: &Path) -> Result<(ChainConfig, PathBuf), ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Io {
            path: path.into(),
            source,
        })?;
        let cfg = toml::from_str(&text).map_err(ConfigError::Toml)?;
        Ok((
            cfg,
            path.parent().map(Path::to_path_buf).unwrap_or_default(),
        ))
    }

    /// The default chain: stateful firewall (outbound from 10.0.0.0/8 allowed and
    /// tracked, everything else denied) → NAT (10.0.0.0/8 → 203.0.113.0/24) →
    /// sequence check.
    pub fn default_chain() -> ChainConfig {
        ChainConfig::from_toml(
            r#"
            [[nf]]
            kind = "firewall"
            rules = "allow any 10.0.0.0/8 -> any"
            [[nf]]
            kind = "nat"
            internal = "10.0.0.0/8"
            external = ["203.0.113.0/24"]
            [[nf]]
            kind = "seqcheck"
            "#,
        )
        .expect("the default chain parses")
    }

    /// Validates every field and builds the chain.
    pub fn build(&self, base: &Path) -> Result<Chain, ConfigError> {
        let s = &self.steering;
        if !s.buckets.is_power_of_two() || !(64..=4096).contains(&s.buckets) {
            return Err(field(
                "steering.buckets",
                format!("{} is not a power of two in 64..=4096", s.buckets),
            ));
        }
        if !s.shards.is_power_of_two() || s.shards > s.buckets {
            return Err(field(
                "steering.shards",
                format!(
                    "{} is not a power of two ≤ buckets ({})",
                    s.shards, s.buckets
                ),
            ));
        }
        let key = match s.key.as_deref() {
            None => None,
            Some("symmetric") => Some(RssKey::SYMMETRIC),
            Some("default") => Some(RssKey::DEFAULT),
            Some(hex) => Some(RssKey::from_hex(hex).ok_or_else(|| {
                field(
                    "steering.key",
                    "expected `symmetric`, `default` or 40 bytes as 80 hex digits",
                )
            })?),
        };
        let policy = match self.table.policy.as_str() {
            "refuse" => CapPolicy::Refuse,
            "evict-unassured" => CapPolicy::EvictUnassured,
            other => {
                return Err(field(
                    "table.policy",
                    format!("`{other}`: expected `refuse` or `evict-unassured`"),
                ))
            }
        };
        if self.table.capacity == 0 || self.table.capacity >= (1 << 30) {
            return Err(field("table.capacity", "must be in 1..2^30"));
        }
        if self.table.fast_entries > self.table.capacity.min(1 << 20) {
            return Err(field(
                "table.fast_entries",
                "must be at most the capacity (and 2^20): it caches the hottest of them",
            ));
        }
        if self.nf.is_empty() {
            return Err(field(
                "nf",
                "the chain has no NF: add at least one [[nf]] table",
            ));
        }
        let mut nfs: Vec<Box<dyn Nf>> = Vec::new();
        for (i, n) in self.nf.iter().enumerate() {
            nfs.push(build_nf(i, n, base)?);
        }
        let opts = ChainOptions {
            key,
            buckets: s.buckets,
            shards: s.shards,
            table: TableConfig {
                capacity: self.table.capacity,
                policy,
                tick_ns: self.table.timer_tick.as_nanos().max(1) as u64,
                fast_entries: self.table.fast_entries,
                ..TableConfig::default()
            },
        };
        Ok(Chain::new(nfs, opts)?)
    }
}

fn build_nf(i: usize, n: &NfSection, base: &Path) -> Result<Box<dyn Nf>, ConfigError> {
    let at = |f: &str| format!("nf[{i}].{f}");
    Ok(match n {
        NfSection::Firewall(f) => {
            let text = match (&f.rules, &f.rules_file) {
                (Some(r), None) => r.clone(),
                (None, Some(p)) => {
                    let p = base.join(p);
                    std::fs::read_to_string(&p)
                        .map_err(|source| ConfigError::Io { path: p, source })?
                }
                _ => {
                    return Err(field(
                        at("rules"),
                        "give exactly one of `rules` (inline) and `rules_file`",
                    ))
                }
            };
            let which = if f.rules.is_some() {
                "rules"
            } else {
                "rules_file"
            };
            let rules =
                firewall::parse_rules(&text).map_err(|e| field(at(which), e.to_string()))?;
            let default = match f.default.as_str() {
                "allow" => Action::Allow,
                "deny" => Action::Deny,
                o => {
                    return Err(field(
                        at("default"),
                        format!("`{o}`: expected `allow` or `deny`"),
                    ))
                }
            };
            let name = f.name.clone().unwrap_or_else(|| "firewall".into());
            Box::new(Firewall::new(
                name,
                Classifier::new(rules, default),
                f.timeouts.clone(),
            ))
        }
        NfSection::Nat(c) => {
            let internal: Ipv4Net = c.internal.parse().map_err(|_| {
                field(
                    at("internal"),
                    format!("`{}`: expected an IPv4 prefix", c.internal),
                )
            })?;
            let mut external = Vec::new();
            for e in &c.external {
                let net: IpNet = e
                    .parse::<IpNet>()
                    .or_else(|_| e.parse::<core::net::IpAddr>().map(IpNet::from))
                    .map_err(|_| {
                        field(
                            at("external"),
                            format!("`{e}`: expected an IPv4 address or prefix"),
                        )
                    })?;
                match net {
                    IpNet::V4(n) if n.prefix_len() >= 16 => external.extend(n.hosts()),
                    IpNet::V4(_) => {
                        return Err(field(at("external"), format!("`{e}`: at most a /16")))
                    }
                    IpNet::V6(_) => {
                        return Err(field(
                            at("external"),
                            format!("`{e}`: NAT44 needs IPv4 addresses"),
                        ))
                    }
                }
            }
            if external.is_empty() {
                return Err(field(at("external"), "no external address"));
            }
            let bad = || {
                field(
                    at("ports"),
                    format!("`{}`: expected `LO-HI` within 1..=65535", c.ports),
                )
            };
            let (lo, hi) = c.ports.split_once('-').ok_or_else(bad)?;
            let (lo, hi): (u16, u16) = (
                lo.trim().parse().map_err(|_| bad())?,
                hi.trim().parse().map_err(|_| bad())?,
            );
            if lo == 0 || lo > hi {
                return Err(bad());
            }
            let name = c.name.clone().unwrap_or_else(|| "nat".into());
            Box::new(Nat::new(
                name,
                internal,
                external,
                (lo, hi),
                c.timeouts.clone(),
            ))
        }
        NfSection::Monitor(m) => {
            if !(4..=18).contains(&m.cfg.hll_bits) {
                return Err(field(at("hll_bits"), "must be in 4..=18"));
            }
            if m.cfg.cms_width == 0 || m.cfg.cms_depth == 0 {
                return Err(field(
                    at("cms_width"),
                    "count-min width and depth must be > 0",
                ));
            }
            Box::new(Monitor::new(
                m.name.clone().unwrap_or_else(|| "monitor".into()),
                m.cfg.clone(),
            ))
        }
        NfSection::Seqcheck(s) => Box::new(SeqCheck::new(
            s.name.clone().unwrap_or_else(|| "seqcheck".into()),
            &s.cfg,
        )),
        NfSection::Router(r) => {
            let mut lines: Vec<String> = r.routes.clone();
            if let Some(f) = &r.routes_file {
                let path = base.join(f);
                let text = std::fs::read_to_string(&path).map_err(|source| ConfigError::Io {
                    path: path.clone(),
                    source,
                })?;
                lines.extend(text.lines().map(str::to_string));
            }
            if lines
                .iter()
                .all(|l| l.split('#').next().unwrap_or("").trim().is_empty())
            {
                return Err(field(at("routes"), "a router needs at least one route"));
            }
            let routes = crate::router::parse_routes(lines.iter().map(String::as_str))
                .map_err(|e| field(at("routes"), e))?;
            Box::new(
                crate::router::Router::new(
                    r.name.clone().unwrap_or_else(|| "router".into()),
                    &routes,
                )
                .map_err(|e| field(at("routes"), e))?,
            )
        }
        NfSection::Lb(l) => Box::new(l.build().map_err(|(f, e)| field(at(&f), e))?),
        NfSection::Ids(d) => {
            let (text, which) = match (&d.rules, &d.rules_file) {
                (Some(r), None) => (r.clone(), "rules"),
                (None, Some(p)) => {
                    let p = base.join(p);
                    let t = std::fs::read_to_string(&p)
                        .map_err(|source| ConfigError::Io { path: p, source })?;
                    (t, "rules_file")
                }
                _ => {
                    return Err(field(
                        at("rules"),
                        "give exactly one of `rules` (inline) and `rules_file`",
                    ))
                }
            };
            let rules = crate::ids::parse(&text).map_err(|e| field(at(which), e))?;
            let placement = crate::component::Placement::parse(&d.placement).ok_or_else(|| {
                field(
                    at("placement"),
                    format!("`{}`: expected `inline` or `core`", d.placement),
                )
            })?;
            if d.ring == 0 || d.ring > 1 << 24 {
                return Err(field(at("ring"), "must be in 1..=16777216"));
            }
            let alerts = d.alerts.as_ref().map(|p| base.join(p));
            Box::new(
                crate::ids::Ids::new(
                    d.name.clone().unwrap_or_else(|| "ids".into()),
                    rules,
                    alerts.as_deref(),
                    d.idle.as_nanos() as u64,
                )
                .and_then(|i| i.place(placement, d.ring))
                .map_err(|e| field(at(which), e))?,
            )
        }
    })
}
