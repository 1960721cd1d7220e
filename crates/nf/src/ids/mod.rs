//! The streaming IDS (issue 7, in progress): the rule language ([`rules`]) and
//! the streaming matcher ([`matcher`]). The NF around them is not built yet.

pub mod matcher;
pub mod rules;

pub use matcher::{Matcher, Stream};
pub use rules::{parse, Action, Header, Pattern, Rule};
