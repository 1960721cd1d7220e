//! `[[nf]] kind = "nptv6"`: the inside and outside prefixes.

use serde::Deserialize;

use super::Nptv6;
use crate::config::{ConfigError, Fields};
use crate::fields::BuildNf;
use crate::Nf;

/// `[[nf]] kind = "nptv6"`.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Nptv6Section {
    /// Name in the chain.
    pub name: Option<String>,
    /// The site's own prefix (e.g. a ULA, `fd01:203:405::/48`).
    pub inside: String,
    /// The prefix the provider gives, of the same length (at most /48).
    pub outside: String,
}

impl BuildNf for Nptv6Section {
    fn build(&self, f: &Fields<'_>) -> Result<Box<dyn Nf>, ConfigError> {
        let inside = self
            .inside
            .parse()
            .map_err(|e| f.err("inside", format!("`{}`: {e}", self.inside)))?;
        let outside = self
            .outside
            .parse()
            .map_err(|e| f.err("outside", format!("`{}`: {e}", self.outside)))?;
        let name = self.name.clone().unwrap_or_else(|| "nptv6".into());
        Ok(Box::new(
            Nptv6::new(name, inside, outside).map_err(|e| f.err("inside", e))?,
        ))
    }
}
