//! What every configuration section shares: errors that name the field
//! ([`ConfigError`], [`Fields`]), TOML read with the field's path in its
//! errors, durations and sizes as they are written, and the trait each NF's
//! section implements to check itself and build its NF ([`BuildNf`]).

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::nflow::ChainError;
use crate::Nf;

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
    #[error("{path}: {error}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error (not a `source`: the message says it once).
        error: std::io::Error,
    },
    /// TOML syntax, or a field of the wrong type or name: `path` names it.
    #[error("{}{msg}", if path.is_empty() { String::new() } else { format!("`{path}`: ") })]
    Toml {
        /// Path of the field, e.g. `nf[0].default` (empty: not known).
        path: String,
        /// What is wrong, with the line when known.
        msg: String,
    },
    /// A field with a bad value.
    #[error("`{field}`: {msg}")]
    Field {
        /// Path of the field, e.g. `nf[1].external`.
        field: String,
        /// What is wrong and what is allowed.
        msg: String,
    },
    /// The chain's NFs cannot share one steering key.
    #[error(transparent)]
    Chain(#[from] ChainError),
}

/// Reads any TOML configuration; a wrong field's error names its path (e.g.
/// `` `table.policy`: unknown variant `lru`, expected `refuse` or
/// `evict-unassured` ``).
pub fn parse_toml<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, ConfigError> {
    located(
        "",
        serde_path_to_error::deserialize(toml::Deserializer::new(text)),
    )
}

/// Reads a configuration from a TOML table found at `prefix` (e.g. `run`, or
/// empty for the document); errors name the field's path as [`parse_toml`]'s do.
pub fn from_table<T: serde::de::DeserializeOwned>(
    prefix: &str,
    table: toml::Table,
) -> Result<T, ConfigError> {
    located(
        prefix,
        serde_path_to_error::deserialize(toml::Value::Table(table)),
    )
}

fn located<T>(
    prefix: &str,
    r: Result<T, serde_path_to_error::Error<toml::de::Error>>,
) -> Result<T, ConfigError> {
    r.map_err(|e| {
        let mut path = e.path().to_string();
        if path == "." {
            path.clear();
        }
        if !prefix.is_empty() {
            path = if path.is_empty() {
                prefix.to_string()
            } else {
                format!("{prefix}.{path}")
            };
        }
        let mut msg = e.into_inner().to_string();
        // an NF section's own path, from inside its table
        let mark = crate::fields::PATH_MARK;
        if let Some((a, rest)) = msg.split_once(mark) {
            if let Some((inner, b)) = rest.split_once(mark) {
                path = format!("{path}.{inner}");
                msg = format!("{a}{b}");
            }
        }
        ConfigError::Toml { path, msg }
    })
}

pub(crate) fn field(field: impl Into<String>, msg: impl Into<String>) -> ConfigError {
    ConfigError::Field {
        field: field.into(),
        msg: msg.into(),
    }
}

/// Where an NF's table is in the chain, for its errors and its files.
pub struct Fields<'a> {
    /// The table's index in `[[nf]]`.
    pub index: usize,
    /// The directory relative paths resolve against.
    pub base: &'a Path,
    /// The chain's indirection-table buckets and shards.
    pub steering: (usize, usize),
}

impl Fields<'_> {
    /// The path of field `name` of this NF, e.g. `nf[1].external`.
    pub fn at(&self, name: &str) -> String {
        format!("nf[{}].{name}", self.index)
    }

    /// An error in field `name` of this NF.
    pub fn err(&self, name: &str, msg: impl Into<String>) -> ConfigError {
        field(self.at(name), msg)
    }

    /// Reads the file field `name` names (relative to the config's directory).
    pub fn read(&self, name: &str, p: &Path) -> Result<String, ConfigError> {
        let path = self.base.join(p);
        std::fs::read_to_string(&path)
            .map_err(|e| self.err(name, format!("{}: {e}", path.display())))
    }

    /// Rules given inline (`rules`) or in a file (`rules_file`), exactly one:
    /// the text and the field it came from.
    pub fn rules(
        &self,
        inline: &Option<String>,
        file: &Option<PathBuf>,
    ) -> Result<(String, &'static str), ConfigError> {
        match (inline, file) {
            (Some(r), None) => Ok((r.clone(), "rules")),
            (None, Some(p)) => Ok((self.read("rules_file", p)?, "rules_file")),
            _ => Err(self.err(
                "rules",
                "give exactly one of `rules` (inline) and `rules_file`",
            )),
        }
    }

    /// A port range `LO-HI` within 1..=65535 in field `name`.
    pub fn port_range(&self, name: &str, s: &str) -> Result<(u16, u16), ConfigError> {
        let bad = || self.err(name, format!("`{s}`: expected `LO-HI` within 1..=65535"));
        let (lo, hi) = s.split_once('-').ok_or_else(bad)?;
        let (lo, hi): (u16, u16) = (
            lo.trim().parse().map_err(|_| bad())?,
            hi.trim().parse().map_err(|_| bad())?,
        );
        if lo == 0 || lo > hi {
            return Err(bad());
        }
        Ok((lo, hi))
    }
}

/// A size in a config: a number of bytes, or text with a unit (`"512MiB"`).
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(untagged)]
pub enum Size {
    /// Bytes.
    Bytes(u64),
    /// Text such as `512MiB`, `2G` or `1000000`.
    Text(String),
}

impl Size {
    /// The number of bytes, or why the text is not a size.
    pub fn bytes(&self) -> Result<u64, String> {
        match self {
            Size::Bytes(0) => Err("0: expected at least one byte".into()),
            Size::Bytes(b) => Ok(*b),
            Size::Text(t) => parse_size(t),
        }
    }
}

/// A size: bytes, or a number with `K`, `M`, `G`, `T` (powers of 1 024; `iB` or
/// `B` may follow).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num
        .parse()
        .map_err(|_| format!("`{s}`: expected a size like 8GiB, 512MiB or 1000000"))?;
    let shift = match unit.trim().trim_end_matches("iB").trim_end_matches('B') {
        "" => 0,
        "K" | "k" => 10,
        "M" => 20,
        "G" => 30,
        "T" => 40,
        _ => {
            return Err(format!(
                "`{s}`: unknown unit (expected K, M, G or T, with iB or B)"
            ))
        }
    };
    let bytes = n * (1u64 << shift) as f64;
    if !(bytes >= 1.0 && bytes < u64::MAX as f64) {
        return Err(format!("`{s}`: expected a size of at least one byte"));
    }
    Ok(bytes as u64)
}

/// An NF's configuration section: checks every field and builds the NF.
pub trait BuildNf {
    /// Builds the NF; errors name the field through `f`.
    fn build(&self, f: &Fields<'_>) -> Result<Box<dyn Nf>, ConfigError>;
}

/// Reads a section from its table; an error carries the field's path inside
/// the section between [`PATH_MARK`]s, for [`crate::config::parse_toml`].
pub(crate) fn section<T: serde::de::DeserializeOwned>(t: toml::Table) -> Result<T, String> {
    serde_path_to_error::deserialize(toml::Value::Table(t)).map_err(|e| {
        let path = e.path().to_string();
        let msg = e.into_inner().message().to_string();
        if path == "." {
            msg
        } else {
            format!("{PATH_MARK}{path}{PATH_MARK}{msg}")
        }
    })
}

/// Delimits a path inside an NF section in an error message.
pub(crate) const PATH_MARK: char = '\u{1}';
