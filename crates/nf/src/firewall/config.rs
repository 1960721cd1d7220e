//! `[[nf]] kind = "firewall"`: the ACL (inline or from a file), the default
//! action and the conntrack timeouts.

use std::path::PathBuf;

use serde::Deserialize;

use super::{parse_rules, Action, Classifier, Firewall, Timeouts};
use crate::config::{ConfigError, Fields};
use crate::fields::BuildNf;
use crate::Nf;

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
    pub default: Action,
    /// Conntrack timeouts.
    #[serde(default)]
    pub timeouts: Timeouts,
}

fn deny() -> Action {
    Action::Deny
}

impl BuildNf for FirewallSection {
    fn build(&self, f: &Fields<'_>) -> Result<Box<dyn Nf>, ConfigError> {
        let (text, which) = f.rules(&self.rules, &self.rules_file)?;
        let rules = parse_rules(&text).map_err(|e| f.err(which, e.to_string()))?;
        let name = self.name.clone().unwrap_or_else(|| "firewall".into());
        Ok(Box::new(Firewall::new(
            name,
            Classifier::new(rules, self.default),
            self.timeouts.clone(),
        )))
    }
}
