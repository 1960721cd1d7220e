//! The load balancer's per-flow state: a connection pinned to its backend.

use core::net::Ipv4Addr;

use crate::nat::map::NatTcp;

/// A balanced connection (the load balancer's per-flow state).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct LbConn {
    /// The client's address.
    pub client: Ipv4Addr,
    /// The client's port.
    pub client_port: u16,
    /// Service index.
    pub service: u16,
    /// Backend index in the service (pinned).
    pub backend: u16,
    /// Index of the balancer's source address.
    pub snat_idx: u16,
    /// The balancer's source port.
    pub snat_port: u16,
    /// TCP progress (for the timeout).
    pub tcp: NatTcp,
}
