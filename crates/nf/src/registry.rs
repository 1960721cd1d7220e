//! The NFs flowshift knows, in one place. Each line names an NF's `kind` in the
//! `[[nf]]` tables, its configuration section (which owns its parsing, checks and
//! build, in the NF's own module, through [`BuildNf`]), and the per-flow state and
//! shard-local state it keeps in flowshift's tables. The macro makes of these the
//! [`NfSection`] enum the TOML is read into, its build dispatcher, and the
//! [`FlowState`] and [`ShardLocal`] enums that flow entries and shards hold
//! (inline, with no allocation per flow). Adding an NF is one more line here.

use std::path::Path;

use crate::config::{ConfigError, Fields};
use crate::{firewall, ids, lb, monitor, nat, router, seqcheck, Nf};

/// An NF's configuration section: checks every field and builds the NF.
pub trait BuildNf {
    /// Builds the NF; errors name the field through `f`.
    fn build(&self, f: &Fields<'_>) -> Result<Box<dyn Nf>, ConfigError>;
}

macro_rules! registry {
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
        }

        /// The per-flow state an NF keeps in its slot of a flow entry, one
        /// variant per NF kind with per-flow state.
        #[derive(Clone, Debug, PartialEq, Eq)]
        pub enum FlowState {
            $($(
                #[doc = concat!("The per-flow state of the `", $name, "` NF.")]
                $fv($ft),
            )?)*
        }

        /// State an NF keeps per shard, outside flow entries: it moves with the
        /// shard.
        #[derive(Debug, Default)]
        pub enum ShardLocal {
            /// Nothing.
            #[default]
            None,
            $($(
                #[doc = concat!("The shard-local state of the `", $name, "` NF.")]
                $lv($lt),
            )?)*
        }
    };
}

/// Reads a section from its table; an error carries the field's path inside
/// the section between [`PATH_MARK`]s, for [`crate::config::parse_toml`].
fn section<T: serde::de::DeserializeOwned>(t: toml::Table) -> Result<T, String> {
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

registry! {
    /// Stateful firewall: ACL compiled to a disjoint classifier, connection
    /// tracking.
    Firewall = "firewall": firewall::FirewallSection, flow Conn(firewall::Conn);
    /// NAPT: a mapping per flow, a share of the port pool per shard.
    Nat = "nat": nat::NatSection, flow Nat(nat::NatMap), local NatPool(nat::PortPool);
    /// Traffic monitor: mergeable per-core sketches, or exact per-source
    /// counters per shard.
    Monitor = "monitor": monitor::MonitorSection, local MonitorExact(monitor::PerSource);
    /// Sequence check (reordering counter).
    Seqcheck = "seqcheck": seqcheck::SeqCheckSection, flow Seq(seqcheck::SeqState);
    /// L3 forwarding (longest-prefix match over disjoint entries).
    Router = "router": router::RouterSection;
    /// L4 load balancer: Maglev, connections pinned, its source ports split
    /// per shard like the NAT's.
    Lb = "lb": lb::config::LbSection, flow Lb(lb::LbConn), local LbPool(nat::PortPool);
    /// Streaming IDS: matcher states per flow (boxed: the other NFs' states
    /// fit in 16 bytes, and a flow entry's slot is as large as the largest).
    Ids = "ids": ids::IdsSection, flow Ids(Box<ids::IdsFlow>);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_holds_any_state_in_24_bytes() {
        // a flow entry's slots are as large as the largest state: with two
        // NFs, one cache line holds both slots and their deadlines
        assert!(core::mem::size_of::<Option<FlowState>>() <= 24);
    }
}
