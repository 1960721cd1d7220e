//! `[[nf]] kind = "ids"`: rules (inline or from a file), the alerts file, the
//! flows' idle timeout, and where the pattern matching runs.

use std::path::PathBuf;

use serde::Deserialize;

use super::Ids;
use crate::component::Placement;
use crate::config::{duration, ConfigError, Fields};
use crate::fields::BuildNf;
use crate::Nf;

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
    #[serde(default = "idle", with = "duration")]
    pub idle: core::time::Duration,
    /// Where the pattern matching runs: `inline` (default), `core` (an
    /// offloading component on its own core) or `auto` (the director moves
    /// it between the two, and among up to `cores` components, while traffic
    /// flows).
    #[serde(default)]
    pub placement: Placement,
    /// Payloads the ring to the `core` component holds.
    #[serde(default = "ring")]
    pub ring: usize,
    /// Matching components with placement `core`, each on a core of its own,
    /// each flow on one by its key (default 1); with `auto`, the most the
    /// director may use.
    pub cores: Option<usize>,
}

fn ring() -> usize {
    16_384
}

fn idle() -> core::time::Duration {
    core::time::Duration::from_secs(300)
}

impl BuildNf for IdsSection {
    fn build(&self, f: &Fields<'_>) -> Result<Box<dyn Nf>, ConfigError> {
        let (text, which) = f.rules(&self.rules, &self.rules_file)?;
        let rules = super::parse(&text).map_err(|e| f.err(which, e))?;
        if self.ring == 0 || self.ring > 1 << 20 {
            return Err(f.err("ring", "must be in 1..=1048576"));
        }
        if self.cores.is_some() && self.placement == Placement::Inline {
            return Err(f.err(
                "cores",
                "matching cores are for `placement = \"core\"` or `\"auto\"`",
            ));
        }
        let cores = self.cores.unwrap_or(1);
        if !(1..=64).contains(&cores) {
            return Err(f.err("cores", format!("{cores}: must be in 1..=64")));
        }
        let alerts = self.alerts.as_ref().map(|p| f.base.join(p));
        let name = self.name.clone().unwrap_or_else(|| "ids".into());
        let ids = Ids::new(name, rules, alerts.as_deref(), self.idle.as_nanos() as u64)
            .map_err(|e| {
                // the alerts file could not be opened: say so, not the rules
                let at = if e.starts_with("alerts") {
                    "alerts"
                } else {
                    which
                };
                f.err(at, e)
            })?
            .place_on(self.placement, self.ring, cores)
            .map_err(|e| f.err("placement", e))?;
        Ok(Box::new(ids))
    }
}
