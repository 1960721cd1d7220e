//! The `[[nf]]` tables: [`NfSection`], the enum the TOML is read into (by
//! `kind`), and its build dispatcher — one variant per NF kind (`kinds`).

use std::path::Path;

use crate::fields::{section, BuildNf, ConfigError, Fields};
use crate::Nf;

macro_rules! sections {
    ($(
        $(#[$doc:meta])*
        $kind:ident = $name:literal: $section:ty
        $(, flow $fv:ident($ft:ty))?
        $(, local $lv:ident($lt:ty))?
        ;
    )*) => {
        /// One `[[nf]]` table, by its `kind`.
        #[derive(Clone, Debug, PartialEq)]
        pub enum NfSection {
            $($(#[$doc])* $kind($section),)*
        }

        impl<'de> serde::Deserialize<'de> for NfSection {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                use serde::de::Error;
                let mut t = toml::Table::deserialize(d)?;
                let kinds = NfSection::KINDS.join(", ");
                let kind = match t.remove("kind") {
                    Some(toml::Value::String(k)) => k,
                    _ => return Err(D::Error::custom(format!(
                        "every [[nf]] needs `kind = \"…\"`, one of {kinds}"
                    ))),
                };
                match kind.as_str() {
                    $($name => section(t).map(NfSection::$kind).map_err(D::Error::custom),)*
                    other => Err(D::Error::custom(format!(
                        "unknown NF kind `{other}`: expected one of {kinds}"
                    ))),
                }
            }
        }

        impl NfSection {
            /// Builds the NF of the `index`-th table (relative paths resolve
            /// against `base`) for a chain of `steering` = (buckets, shards).
            pub fn build(
                &self,
                index: usize,
                base: &Path,
                steering: (usize, usize),
            ) -> Result<Box<dyn Nf>, ConfigError> {
                let f = Fields { index, base, steering };
                match self {
                    $(NfSection::$kind(s) => BuildNf::build(s, &f),)*
                }
            }

            /// The `kind`s flowshift knows.
            pub const KINDS: &'static [&'static str] = &[$($name,)*];

            /// This table's `kind`.
            pub fn kind(&self) -> &'static str {
                match self {
                    $(NfSection::$kind(_) => $name,)*
                }
            }
        }

    };
}

with_nf_kinds!(sections);
