//! The streaming IDS: rules in a documented subset of Snort/Suricata syntax
//! ([`rules`]), matched in streaming mode across packet boundaries with the
//! matcher's DFA states kept per flow ([`matcher`]: NFLOW/MVT's FSM MVT), actions
//! alert / drop flow / blacklist source, alerts as eve-like JSON lines.
//!
//! ```toml
//! [[nf]]
//! kind = "ids"
//! rules_file = "rules.txt"       # or rules = """…"""
//! alerts = "out/alerts.json"     # optional; JSON lines, appended
//! idle = "300s"                  # forget a flow's matcher state after this
//! ```

pub mod auto;
mod config;
pub mod flow;
pub mod handoff;
pub mod matcher;
mod nf;
pub mod rules;

pub use config::IdsSection;
pub use matcher::{Matcher, Progress, Stream};
pub use nf::{Ids, IdsCounters, IdsFlow};
pub use rules::{parse, Action, Header, Piece, Rule, MAX_PIECES};
