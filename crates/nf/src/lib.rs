//! Network functions and chains.
//!
//! An [`Nf`] is NF logic only; flowshift owns its state (FastClick's flow elements,
//! Dyssect §II-A). Every NF declares its **NFLOW key** ([`NflowKey`]: what a flow is
//! for it) and the kind of state it keeps ([`StateKind`]). Building a [`Chain`]
//! computes the steering key the NIC model must hash so that no NF's state is split
//! across shards, and refuses a chain where that is impossible — unless the NF keeps
//! mergeable per-core state, merged periodically (GranularNF §4).
//!
//! Per packet: one flow-table lookup in the packet's shard, the entry reference in
//! the packet's metadata ([`Packet::entry`]), then every NF in order, each reaching
//! its slot through [`Ctx`] — no NF looks up again. A [`Verdict`] is forward, or a
//! drop with a [`DropCause`] that is counted.
//!
//! The NFs: [`firewall`] (prioritised ACL compiled to a disjoint classifier, plus
//! connection tracking), [`nat`] (NAPT whose external ports keep the reply in the
//! forward flow's RSS bucket), [`monitor`] (per-source counters, count-min heavy
//! hitters, HyperLogLog distinct destinations), [`seqcheck`] (reordering counter),
//! [`router`] (longest-prefix match compiled into disjoint entries), [`lb`] (L4
//! load balancer: Maglev, connections pinned), [`ids`] (streaming Snort-subset
//! matching). Each registers its `kind`, configuration section and state in one
//! line of `registry.rs`.
//!
//! ```
//! use nf::ChainConfig;
//!
//! let cfg = ChainConfig::from_toml(r#"
//!     [[nf]]
//!     kind = "firewall"
//!     rules = "allow any 10.0.0.0/8 -> any"
//!     [[nf]]
//!     kind = "nat"
//!     internal = "10.0.0.0/8"
//!     external = ["203.0.113.0/24"]
//! "#).unwrap();
//! let chain = cfg.build(std::path::Path::new(".")).unwrap();
//! let names: Vec<&str> = chain.nfs().iter().map(|n| n.name()).collect();
//! assert_eq!(names, ["firewall", "nat"]);
//! assert_eq!(chain.shard_count(), 16);
//!
//! // errors name the field
//! let e = ChainConfig::from_toml("[[nf]]\nkind = \"nat\"\ninternal = \"x\"\nexternal = []\n")
//!     .unwrap().build(std::path::Path::new(".")).err().unwrap();
//! assert!(e.to_string().starts_with("`nf[0].internal`"));
//! ```

#![forbid(unsafe_code)]

#[macro_use]
mod counters;
#[macro_use]
mod kinds;
mod chain;
pub mod component;
pub mod config;
mod ctx;
pub mod director;
mod fields;
pub mod firewall;
mod flow_state;
mod found;
mod function;
mod fused;
pub mod ids;
mod image;
mod inspect;
pub mod lb;
pub mod monitor;
pub mod nat;
mod nflow;
pub mod nptv6;
mod packet;
pub mod router;
mod sections;
pub mod seqcheck;
mod shard;
mod state_text;
pub mod upf;
mod verdict;

pub use chain::{Chain, ChainCounters, ChainOptions, Hit, Layout, Routing, BURST};
pub use config::{ChainConfig, ConfigError};
pub use ctx::{Ctx, Leased};
pub use flow_state::{FlowState, ShardLocal};
pub use found::Found;
pub use function::{Nf, NfMeta, Shared};
pub use image::InstallError;
pub use inspect::{EntryView, NfView};
pub use nflow::{steering_for, ChainError, NflowKey, StateKind, SteerKey};
pub use packet::Packet;
pub use shard::Shard;
pub use shard::ShardInfo;
pub use verdict::{DropCause, Verdict};
