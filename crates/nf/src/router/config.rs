//! `[[nf]] kind = "router"`: routes inline and from a file.

use std::path::PathBuf;

use serde::Deserialize;

use super::{parse_routes, Router};
use crate::config::{ConfigError, Fields};
use crate::fields::BuildNf;
use crate::Nf;

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

impl BuildNf for RouterSection {
    fn build(&self, f: &Fields<'_>) -> Result<Box<dyn Nf>, ConfigError> {
        let mut lines: Vec<String> = self.routes.clone();
        if let Some(p) = &self.routes_file {
            lines.extend(f.read("routes_file", p)?.lines().map(str::to_string));
        }
        if lines
            .iter()
            .all(|l| l.split('#').next().unwrap_or("").trim().is_empty())
        {
            return Err(f.err("routes", "a router needs at least one route"));
        }
        let routes =
            parse_routes(lines.iter().map(String::as_str)).map_err(|e| f.err("routes", e))?;
        let name = self.name.clone().unwrap_or_else(|| "router".into());
        Ok(Box::new(
            Router::new(name, &routes).map_err(|e| f.err("routes", e))?,
        ))
    }
}
