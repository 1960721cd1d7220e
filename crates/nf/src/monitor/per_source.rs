//! The exact monitor's shard-local state: counters per source address.

use core::net::IpAddr;
use std::collections::HashMap;

use state::merge::Counters;

/// Per-source counters.
pub type PerSource = HashMap<IpAddr, Counters>;
