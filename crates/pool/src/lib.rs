//! The Sirius pool (`shared/papers/sirius.txt`): flowshift nodes that share the
//! network-function load of many tenants.
//!
//! [`pack`] places tenants' floating NICs (fNICs: new connections, packets,
//! concurrent flows and bandwidth they may use) onto nodes — vector bin packing
//! (Appendix B.1), splitting a tenant over several nodes by symmetric hash when
//! it does not fit one — and reports the packing against the lower bound.
//!
//! [`replica`] is a node's side of the ping-pong state replication, heartbeats
//! and epoch-based bulk sync (§3.2), as a pure machine.
//!
//! [`poison`] is a primary's poison bits (a flow's packets are copied to the
//! secondary until its latest copy is acknowledged), the one rule the
//! simulated nodes and the real nodes' working cores both follow.
//!
//! [`bulk`] is a bulk sync's window of unacknowledged copies (resent when
//! overdue), kept by the simulated replicas and the real nodes' cores alike;
//! [`detect::PeerWatch`] is the pair heartbeats' watch over a peer, likewise.
//!
//! [`jobs`] is the controller's bulk syncs (one order at a time per source;
//! a sync that ends, or holds its source copying until the synced node takes
//! its buckets or joins), driven by `pool run` and `pool sim` alike.
//!
//! [`spill`] is spill-over (§3.3.4): a node past its capacity for new flows
//! sends the excess new flows to another pair, lazily (a spilled flow's later
//! packets follow it there; no state moves).
//!
//! [`sim`] runs the pool in a simulated network and writes the pool's report.
//!
//! [`ring`] is the controller's pairing of nodes (each the secondary of the
//! one before it) and its buckets; [`detect`] its failure detector over
//! heartbeats. `flowshift pool run` drives both over real nodes.
//!
//! [`bgp`] is the pool's routing: what each node announces to the router
//! (the primary a shorter AS path than its secondary), as BIRD 2 configuration.
//!
//! [`protocol`] is the pool's messages on the wire (copies, installs,
//! acknowledgements, heartbeats, the controller's orders and the bulk sync's
//! status): checked views and typed representations, parsed and emitted.
//!
//! [`auth`] seals every pool message with the pool's key, a sender's number
//! and its time, and refuses forged, changed, stale and replayed ones.
//!
//! Pure logic: no threads, clocks or I/O.

#![forbid(unsafe_code)]

pub mod auth;
pub mod bgp;
pub mod bulk;
pub mod detect;
pub mod jobs;
pub mod pack;
pub mod poison;
pub mod protocol;
pub mod replica;
pub mod ring;
pub mod sim;
pub mod sizes;
pub mod spill;

pub use pack::{lower_bound, pack, Heuristic, Packing, Part, Split};
pub use sizes::{Demand, FnicSize, Mix, DIMS};
