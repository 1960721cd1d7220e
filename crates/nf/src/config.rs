//! Chains in TOML: typed, validated once, errors that name the field.
//!
//! ```toml
//! [steering]              # all optional
//! key = "symmetric"       # "symmetric", "default" or 80 hex digits; default: chosen by the chain
//! buckets = 128           # indirection-table entries (power of two, 64..=4096);
//!                         # default: 128, or the shards if more
//! shards = 16             # power of two ≤ buckets; default: 16 per working
//!                         # core (16 when the cores are not known)
//! rules = "plan.json"     # steer by ternary rules (`flowshift steer plan --json`)
//! rule_key = "src-ip:26-31"  # or: rules re-planned live over these bits (`--balancer roger`);
//!                         # each of the key's values is a shard
//!
//! [table]                 # per shard
//! capacity = 65536
//! policy = "refuse"       # or "evict-unassured"
//! evict_min_age = "1s"    # evict-unassured spares unassured flows younger than this
//! timer_tick = "10ms"
//! preallocate = false     # the index at its capacity at once (else it doubles with the flows)
//! layout = "shared"       # or "per-nf": each NF finds its flow through its own index
//! emergency_high = 0.9    # emergency mode (short timeouts for unassured flows)
//! emergency_low = 0.8     # from this share of the capacity, down to this one
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

use serde::Deserialize;
use state::{CapPolicy, TableConfig};
use steer::RssKey;

use crate::chain::ChainOptions;
use crate::fields::field;
pub use crate::fields::{
    duration, from_table, parse_size, parse_toml, BuildNf, ConfigError, Fields, Size,
};
pub use crate::sections::NfSection;
use crate::{Chain, Nf};

/// `[steering]`.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct SteeringConfig {
    /// RSS key: `symmetric`, `default` or 80 hex digits.
    pub key: Option<String>,
    /// Indirection-table size (`None`: [`SteeringConfig::buckets`]'s default).
    pub buckets: Option<usize>,
    /// Number of shards (`None`: [`SteeringConfig::shards`]'s default).
    pub shards: Option<usize>,
    /// A rule plan written by `flowshift steer plan --json`: steer by its
    /// ternary rules (rule `r` is bucket and shard `r`, starting on the rule's
    /// core) instead of the hash's bucket bits.
    pub rules: Option<PathBuf>,
    /// The key bits of rules re-planned while traffic flows (`--balancer
    /// roger`): each of the key's 2^width values is a cell, its own bucket
    /// and shard, and the balancer's rules give cells their cores.
    pub rule_key: Option<String>,
}

/// Shards per working core when `steering.shards` is not set: enough that a
/// balancer moving one shard moves a sixteenth of a core's share, not half
/// of it (with 16 shards on 8 cores RSS++ cannot balance).
pub const SHARDS_PER_CORE: usize = 16;

impl SteeringConfig {
    /// Shards when neither the file nor [`ChainConfig::fit_cores`] set them.
    pub const DEFAULT_SHARDS: usize = 16;
    /// Buckets when neither the file nor the shards set them.
    pub const DEFAULT_BUCKETS: usize = 128;

    /// The number of shards: as set, else one per cell of `rule_key`, else
    /// [`Self::DEFAULT_SHARDS`].
    pub fn shards(&self) -> usize {
        self.shards
            .or_else(|| self.cells())
            .unwrap_or(Self::DEFAULT_SHARDS)
    }

    /// The indirection table's size: as set, else 128 or the shards if more
    /// (twice the cells under `rule_key`: the buckets after the cells take
    /// frames without the key's fields).
    pub fn buckets(&self) -> usize {
        self.buckets.unwrap_or_else(|| match self.cells() {
            Some(c) => Self::DEFAULT_BUCKETS.max(2 * c),
            None => Self::DEFAULT_BUCKETS.max(self.shards()),
        })
    }

    /// The cells of `rule_key` (2^width), when it parses.
    fn cells(&self) -> Option<usize> {
        let bits = steer::roger::KeyBits::parse(self.rule_key.as_deref()?).ok()?;
        1usize.checked_shl(bits.width())
    }

    /// Most shards [`ChainConfig::fit_cores`] gives.
    pub const MAX_FIT_SHARDS: usize = 1024;

    /// The shards for `workers` working cores when the file left them
    /// unset: [`SHARDS_PER_CORE`] per core (at least 16, at most
    /// [`Self::MAX_FIT_SHARDS`]).
    fn for_cores(workers: usize) -> usize {
        (workers.max(1) * SHARDS_PER_CORE)
            .next_power_of_two()
            .clamp(Self::DEFAULT_SHARDS, Self::MAX_FIT_SHARDS)
    }
}

/// What `steering.rules` reads from a plan file (other fields are ignored).
#[derive(Deserialize)]
struct PlanFile {
    bits: String,
    rules: Vec<PlanRule>,
    #[serde(default = "yes")]
    default_rule: bool,
}

fn yes() -> bool {
    true
}

#[derive(Deserialize)]
struct PlanRule {
    value: String,
    mask: String,
    core: u16,
}

/// The rule steering of the plan file `p` for `buckets` buckets and `shards`
/// shards; errors name `steering.rules`.
fn rule_steering(
    p: &Path,
    base: &Path,
    buckets: usize,
    shards: usize,
) -> Result<steer::roger::RuleSteering, ConfigError> {
    use steer::roger::{Cube, KeyBits, Rule, RuleSteering, RuleTable};
    const F: &str = "steering.rules";
    let path = base.join(p);
    let text =
        std::fs::read_to_string(&path).map_err(|e| field(F, format!("{}: {e}", path.display())))?;
    let plan: PlanFile = serde_json::from_str(&text).map_err(|e| {
        field(
            F,
            format!(
                "{}: not a plan of `flowshift steer plan --json`: {e}",
                path.display()
            ),
        )
    })?;
    let bits = KeyBits::parse(&plan.bits).map_err(|e| field(F, e.to_string()))?;
    let hex = |i: usize, what: &str, v: &str| {
        u64::from_str_radix(v.trim_start_matches("0x"), 16)
            .map_err(|_| field(F, format!("rule {i}: {what} `{v}` is not a hex number")))
    };
    let mut rules = Vec::with_capacity(plan.rules.len());
    for (i, r) in plan.rules.iter().enumerate() {
        let (value, mask) = (hex(i, "value", &r.value)?, hex(i, "mask", &r.mask)?);
        if mask & !steer::roger::low_bits(bits.width()) != 0 {
            return Err(field(
                F,
                format!(
                    "rule {i}: mask {:#x} is wider than the {}-bit key",
                    mask,
                    bits.width()
                ),
            ));
        }
        rules.push(Rule {
            cube: Cube::new(value, mask),
            core: r.core,
        });
    }
    if rules.is_empty() {
        return Err(field(F, "the plan has no rules"));
    }
    if rules.len() > shards {
        return Err(field(
            F,
            format!(
                "{} rules need as many shards (each rule is a shard); steering.shards is {shards}",
                rules.len()
            ),
        ));
    }
    let cores = rules.iter().map(|r| r.core).max().unwrap_or(0) + 1;
    let table = RuleTable {
        bits: bits.width(),
        cores,
        rules,
        default_rule: plan.default_rule,
    };
    RuleSteering::new(bits, table, buckets).map_err(|e| field(F, e))
}

/// The live rules' cells over the key `k`; errors name `steering.rule_key`.
fn cell_steering(
    k: &str,
    buckets: usize,
    shards: usize,
) -> Result<steer::roger::RuleSteering, ConfigError> {
    const F: &str = "steering.rule_key";
    let bits = steer::roger::KeyBits::parse(k).map_err(|e| field(F, e.to_string()))?;
    let cells = 1usize << bits.width().min(steer::roger::MAX_CELL_BITS + 1);
    if bits.width() <= steer::roger::MAX_CELL_BITS && shards != cells {
        return Err(field(
            "steering.shards",
            format!(
                "{shards}: under `rule_key = \"{k}\"` each of the key's {cells} values is a \
                 shard (leave steering.shards out)"
            ),
        ));
    }
    steer::roger::RuleSteering::cells(bits, buckets).map_err(|e| field(F, e))
}

/// What a full flow table does with a new flow (`[table] policy`).
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum TablePolicy {
    /// Refuse the new flow (its packet is dropped and counted).
    #[default]
    Refuse,
    /// Evict a flow that is not assured (no reply seen) to make room.
    EvictUnassured,
}

impl From<TablePolicy> for CapPolicy {
    fn from(p: TablePolicy) -> CapPolicy {
        match p {
            TablePolicy::Refuse => CapPolicy::Refuse,
            TablePolicy::EvictUnassured => CapPolicy::EvictUnassured,
        }
    }
}

/// Fewest flows per shard a `table.memcap` may leave.
pub const MIN_MEMCAP_FLOWS: usize = 16;

/// The largest capacity ≤ `want` whose tables (`shards` of them, shaped as
/// `shape`) fit in `cap` bytes, if at least [`MIN_MEMCAP_FLOWS`].
fn capacity_within(shape: &TableConfig, want: usize, shards: usize, cap: u64) -> Option<usize> {
    let bytes = |c: usize| {
        shards as u64
            * state::FlowTable::<Option<crate::FlowState>>::bytes_at_capacity(&TableConfig {
                capacity: c,
                ..shape.clone()
            })
    };
    if want <= MIN_MEMCAP_FLOWS {
        return (bytes(want) <= cap).then_some(want);
    }
    let (mut lo, mut hi) = (MIN_MEMCAP_FLOWS, want);
    if bytes(lo) > cap {
        return None;
    }
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        if bytes(mid) <= cap {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    Some(lo)
}

/// Largest flow table of one shard.
pub const MAX_CAPACITY: usize = 1 << 24;
/// Largest number of flow entries over all shards (`capacity × shards`).
pub const MAX_ENTRIES: usize = 1 << 26;

/// `[table]`.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct TableSection {
    /// Flow entries per shard (`None`: [`TableSection::capacity`]'s default).
    pub capacity: Option<usize>,
    /// `refuse` or `evict-unassured`.
    pub policy: TablePolicy,
    /// Timer resolution.
    #[serde(with = "duration")]
    pub timer_tick: core::time::Duration,
    /// Refused with its reason unless 0: the fast table (GranularNF §3) was
    /// removed (measured slower than the index alone, docs/MEASURED.md).
    pub fast_entries: Option<usize>,
    /// Emergency mode from this share of the capacity on (1 = only when full;
    /// 0 = never): unassured flows get the NFs' short emergency timeouts.
    pub emergency_high: f64,
    /// Emergency mode ends at this share of the capacity.
    pub emergency_low: f64,
    /// `evict-unassured` evicts only unassured flows at least this old (a
    /// younger one may have its answer on the way): the new flow is refused
    /// instead.
    #[serde(with = "duration")]
    pub evict_min_age: core::time::Duration,
    /// Bytes the flow tables of all shards may take when full (a size such as
    /// `"256MiB"`, or a number of bytes): `capacity` is lowered until they fit.
    pub memcap: Option<Size>,
    /// Allocate each shard's index for its whole capacity when the table is
    /// made; otherwise it starts small and doubles with the live flows.
    pub preallocate: bool,
    /// `shared` (one lookup per packet, the default) or `per-nf` (each NF
    /// finds its flow through an index of its own, as the papers'
    /// baselines' NFs do).
    pub layout: crate::Layout,
}

impl Default for TableSection {
    fn default() -> Self {
        TableSection {
            capacity: None,
            policy: TablePolicy::Refuse,
            timer_tick: core::time::Duration::from_millis(10),
            fast_entries: None,
            emergency_high: 0.9,
            emergency_low: 0.8,
            evict_min_age: core::time::Duration::from_secs(1),
            memcap: None,
            preallocate: false,
            layout: crate::Layout::Shared,
        }
    }
}

impl TableSection {
    /// Flow entries per shard when the file does not say: 65 536 at the
    /// default 16 shards (≈ 1 M flows in all).
    pub const DEFAULT_CAPACITY: usize = 65_536;

    /// Flow entries per shard.
    pub fn capacity(&self) -> usize {
        self.capacity.unwrap_or(Self::DEFAULT_CAPACITY)
    }
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

/// NPTv6 rewrites IPv6 addresses without a second key for the flow (and its
/// mapping does not keep a flow's RSS bucket, as the NAT's ports do): an NF
/// keeping per-flow state in the same chain would see a translated flow's two
/// directions as two flows, on two shards. Such a chain is refused.
fn npt_alone(nfs: &[Box<dyn Nf>]) -> Result<(), ConfigError> {
    let Some(i) = nfs.iter().position(|n| n.kind() == "nptv6") else {
        return Ok(());
    };
    match nfs.iter().find(|n| n.state_kind() == crate::StateKind::PerFlow) {
        None => Ok(()),
        Some(n) => Err(field(
            format!("nf[{i}]"),
            format!(
                "nptv6 rewrites IPv6 addresses statelessly: `{}` ({}) keeps per-flow state and would \
                 see a translated flow's two directions as two flows; run NPTv6 in a chain of \
                 stateless NFs (router, monitor)",
                n.name(),
                n.kind()
            ),
        )),
    }
}

impl ChainConfig {
    /// Scales what the file left unset to `workers` working cores:
    /// [`SHARDS_PER_CORE`] shards per core (at least 16, at most 1 024) and,
    /// with them, flows per shard so that the tables hold as many flows in
    /// all as the default 16 shards do (at least 1 024 per shard). Under
    /// `steering.rule_key` the shards are the key's values and only the flows
    /// per shard are fitted.
    pub fn fit_cores(&mut self, workers: usize) {
        if self.steering.shards.is_some() {
            return;
        }
        if let Some(cells) = self.steering.cells() {
            // live rules: the shards are the key's values, whatever the
            // cores; the tables still hold as many flows in all
            if self.table.capacity.is_none() {
                let total = TableSection::DEFAULT_CAPACITY * SteeringConfig::DEFAULT_SHARDS;
                self.table.capacity = Some((total / cells).max(1024));
            }
            return;
        }
        let shards = SteeringConfig::for_cores(workers);
        self.steering.shards = Some(shards);
        if self.table.capacity.is_none() {
            let total = TableSection::DEFAULT_CAPACITY * SteeringConfig::DEFAULT_SHARDS;
            self.table.capacity = Some((total / shards).max(1024));
        }
    }

    /// Builds the chain for `workers` working cores: with the shards the file
    /// left unset scaled to them ([`fit_cores`](Self::fit_cores)), halved
    /// while the chain refuses them (a NAT needs a port for each bucket group
    /// in every shard: a small pool takes fewer shards), down to the default
    /// 16, whose error is the one returned.
    pub fn build_for_cores(&mut self, base: &Path, workers: usize) -> Result<Chain, ConfigError> {
        // (live rules' shards are the key's values: never fewer)
        let scaled = self.steering.shards.is_none() && self.steering.rule_key.is_none();
        let capacity = self.table.capacity;
        self.fit_cores(workers);
        loop {
            let shards = self.steering.shards();
            match self.build(base) {
                Ok(c) => return Ok(c),
                Err(e) if !scaled || shards <= SteeringConfig::DEFAULT_SHARDS => return Err(e),
                Err(_) => {
                    let fewer = shards / 2;
                    self.steering.shards = Some(fewer);
                    if capacity.is_none() {
                        let total = TableSection::DEFAULT_CAPACITY * SteeringConfig::DEFAULT_SHARDS;
                        self.table.capacity = Some((total / fewer).max(1024));
                    }
                }
            }
        }
    }

    /// Parses TOML.
    pub fn from_toml(text: &str) -> Result<ChainConfig, ConfigError> {
        parse_toml(text)
    }

    /// Reads a TOML file; relative paths inside resolve against its directory.
    pub fn from_file(path: &Path) -> Result<(ChainConfig, PathBuf), ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|error| ConfigError::Io {
            path: path.into(),
            error,
        })?;
        let cfg = parse_toml(&text)?;
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
        let key = self.steering_key()?;
        self.check_table()?;
        let (high, low) = (self.table.emergency_high, self.table.emergency_low);
        let policy = CapPolicy::from(self.table.policy);
        if self.nf.is_empty() {
            return Err(field(
                "nf",
                "the chain has no NF: add at least one [[nf]] table",
            ));
        }
        let mut nfs: Vec<Box<dyn Nf>> = Vec::new();
        for (i, n) in self.nf.iter().enumerate() {
            nfs.push(n.build(i, base, (s.buckets(), s.shards()))?);
        }
        npt_alone(&nfs)?;
        let capacity = self.capacity_within_memcap(&nfs, policy)?;
        let rules = match (&s.rules, &s.rule_key) {
            (None, None) => None,
            (Some(p), None) => Some(std::sync::Arc::new(rule_steering(
                p,
                base,
                s.buckets(),
                s.shards(),
            )?)),
            (None, Some(k)) => Some(std::sync::Arc::new(cell_steering(
                k,
                s.buckets(),
                s.shards(),
            )?)),
            (Some(_), Some(_)) => {
                return Err(field(
                    "steering.rule_key",
                    "rules re-planned live and a fixed plan (`steering.rules`) \
                     exclude each other: keep one",
                ))
            }
        };
        let opts = ChainOptions {
            rules,
            key,
            buckets: s.buckets(),
            shards: s.shards(),
            table: TableConfig {
                capacity,
                policy,
                tick_ns: self.table.timer_tick.as_nanos().max(1) as u64,
                evict_min_age_ns: self
                    .table
                    .evict_min_age
                    .as_nanos()
                    .min(u128::from(u64::MAX)) as u64,
                preallocate: self.table.preallocate,
                ..TableConfig::default()
            },
            emergency: (high > 0.0).then_some((high, low)),
            layout: self.table.layout,
        };
        Ok(Chain::new(nfs, opts)?)
    }

    /// `[steering]` checked: buckets and shards, and the RSS key.
    fn steering_key(&self) -> Result<Option<RssKey>, ConfigError> {
        let s = &self.steering;
        if let Some(k) = &s.rule_key {
            let bits = steer::roger::KeyBits::parse(k)
                .map_err(|e| field("steering.rule_key", e.to_string()))?;
            let max = steer::roger::MAX_CELL_BITS;
            if bits.width() > max {
                return Err(field(
                    "steering.rule_key",
                    format!(
                        "`{k}` has {} bits: live rules take at most {max} (2^{max} cells, each a shard)",
                        bits.width()
                    ),
                ));
            }
        }
        let (buckets, shards) = (s.buckets(), s.shards());
        if !buckets.is_power_of_two() || !(64..=4096).contains(&buckets) {
            return Err(field(
                "steering.buckets",
                format!("{buckets} is not a power of two in 64..=4096"),
            ));
        }
        if !shards.is_power_of_two() || shards > buckets {
            return Err(field(
                "steering.shards",
                format!("{shards} is not a power of two ≤ buckets ({buckets})"),
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
        Ok(key)
    }

    /// `[table]`'s sizes and emergency marks checked.
    fn check_table(&self) -> Result<(), ConfigError> {
        let s = &self.steering;
        if !(1..=MAX_CAPACITY).contains(&self.table.capacity()) {
            return Err(field(
                "table.capacity",
                format!(
                    "{}: must be in 1..={MAX_CAPACITY} flows per shard",
                    self.table.capacity()
                ),
            ));
        }
        if self.table.capacity().saturating_mul(s.shards()) > MAX_ENTRIES {
            return Err(field(
                "table.capacity",
                format!(
                    "{} flows × {} shards: at most {MAX_ENTRIES} flow entries in all",
                    self.table.capacity(),
                    s.shards()
                ),
            ));
        }
        if self.table.fast_entries.is_some_and(|n| n > 0) {
            return Err(field(
                "table.fast_entries",
                "the fast table was removed: in front of the index it made the chain slower \
                 (×0.6 at 100 K and 1 M Zipf flows; docs/MEASURED.md): delete the line",
            ));
        }
        let (high, low) = (self.table.emergency_high, self.table.emergency_low);
        if !(0.0..=1.0).contains(&high) {
            return Err(field(
                "table.emergency_high",
                format!("{high}: a share of the capacity in 0..=1 (0 = no emergency mode)"),
            ));
        }
        if high > 0.0 && !(0.0..high).contains(&low) {
            return Err(field(
                "table.emergency_low",
                format!("{low}: a share of the capacity in 0..emergency_high ({high})"),
            ));
        }
        Ok(())
    }

    /// Flows per shard: `table.capacity`, or fewer so that the tables fit
    /// `table.memcap` when one is given.
    fn capacity_within_memcap(
        &self,
        nfs: &[Box<dyn Nf>],
        policy: CapPolicy,
    ) -> Result<usize, ConfigError> {
        let s = &self.steering;
        Ok(match &self.table.memcap {
            None => self.table.capacity(),
            Some(m) => {
                let cap = m.bytes().map_err(|e| field("table.memcap", e))?;
                let shape = TableConfig {
                    slots: nfs.len().max(1),
                    keys_per_entry: if nfs.iter().any(|n| n.needs_alias()) {
                        2
                    } else {
                        1
                    },
                    policy,
                    // the per-NF layout's own indexes, one per NF keeping
                    // entries after the first
                    own_indexes: match self.table.layout {
                        crate::Layout::PerNf => nfs
                            .iter()
                            .filter(|n| n.keeps_entries())
                            .count()
                            .saturating_sub(1),
                        crate::Layout::Shared => 0,
                    },
                    ..TableConfig::default()
                };
                capacity_within(&shape, self.table.capacity(), s.shards(), cap).ok_or_else(
                    || {
                        field(
                            "table.memcap",
                            format!(
                            "{cap} bytes hold fewer than {MIN_MEMCAP_FLOWS} flows per shard \
                             ({} shards); the smallest memcap for this chain is {} bytes",
                            s.shards(),
                            s.shards() as u64
                                * state::FlowTable::<Option<crate::FlowState>>::bytes_at_capacity(
                                    &TableConfig {
                                        capacity: MIN_MEMCAP_FLOWS,
                                        ..shape.clone()
                                    }
                                )
                        ),
                        )
                    },
                )?
            }
        })
    }
}
