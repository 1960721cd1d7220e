//! Router (L3 forwarding, NFLOW/MVT's L3FWD): longest-prefix match on the
//! destination over routes compiled into disjoint entries ([`RouteTable`]), then
//! the IPv4 TTL (incremental checksum) or IPv6 hop limit decremented and the frame
//! addressed to the port's next hop (destination MAC `02:00:00:00:PP:PP`, the
//! port number in the last two bytes). No route or an expiring TTL drops the
//! packet with its cause counted.
//!
//! Stateless: its table is read-only configuration, identical on every core, and
//! disjoint, so any entry could also live on one core alone (see [`routes`]).
//!
//! ```toml
//! [[nf]]
//! kind = "router"
//! routes = ["16.0.0.0/24 0", "16.0.0.0/28 1", "0.0.0.0/0 7"]   # "PREFIX PORT"
//! # or routes_file = "routes.txt" (one route a line, `#` comments)
//! ```

mod config;
pub mod routes;

use crate::NfMeta;

pub use config::RouterSection;
pub use routes::{lpm, Route, RouteTable};

use crate::{Ctx, DropCause, Nf, NflowKey, Packet, StateKind, Verdict};

counters! {
    /// Counters.
    RouterCounters {
        /// Packets forwarded to a next hop.
        routed,
        /// Packets no route covers.
        no_route,
        /// Packets whose TTL (hop limit) ran out.
        ttl_exceeded,
    }
}

/// The router NF.
#[derive(Clone)]
pub struct Router {
    meta: NfMeta,
    table: std::sync::Arc<RouteTable>,
    counters: RouterCounters,
}

/// Parses `PREFIX PORT` lines (`#` starts a comment); errors name the line.
pub fn parse_routes<'a>(lines: impl IntoIterator<Item = &'a str>) -> Result<Vec<Route>, String> {
    let mut out = Vec::new();
    for (i, raw) in lines.into_iter().enumerate() {
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let mut it = line.split_whitespace();
        let (Some(p), Some(port), None) = (it.next(), it.next(), it.next()) else {
            return Err(format!("route {}: `{line}`: expected `PREFIX PORT`", i + 1));
        };
        let prefix: ipnet::IpNet = p
            .parse()
            .map_err(|e| format!("route {}: `{p}`: {e}", i + 1))?;
        let port: u16 = port
            .parse()
            .map_err(|_| format!("route {}: port `{port}`: expected 0..=65535", i + 1))?;
        out.push(Route {
            prefix: prefix.trunc(),
            port,
        });
    }
    Ok(out)
}

impl Router {
    /// A router over these routes (compiled into disjoint entries).
    pub fn new(name: impl Into<String>, routes: &[Route]) -> Result<Router, String> {
        Ok(Router {
            meta: NfMeta::new(name, "router", NflowKey::None, StateKind::Stateless),
            table: std::sync::Arc::new(RouteTable::compile(routes)?),
            counters: RouterCounters::default(),
        })
    }

    /// The compiled table.
    pub fn table(&self) -> &RouteTable {
        &self.table
    }

    /// The next-hop MAC of a port.
    pub fn next_hop_mac(port: u16) -> [u8; 6] {
        let p = port.to_be_bytes();
        [0x02, 0, 0, 0, p[0], p[1]]
    }
}

impl Nf for Router {
    fn meta(&self) -> &NfMeta {
        &self.meta
    }

    fn process(&mut self, _cx: &mut Ctx<'_>, pkt: &mut Packet) -> Verdict {
        let Some(port) = self.table.lookup(pkt.info.tuple.dst) else {
            self.counters.no_route += 1;
            return Verdict::Drop(DropCause::NoRoute);
        };
        let l3 = pkt.l3_mut();
        let alive = match (l3.first().map(|b| b >> 4), l3.len()) {
            (Some(4), n) if n >= 20 => match wire::Ipv4Packet::new_checked(&mut l3[..]) {
                Ok(mut ip) if ip.ttl() > 1 => {
                    ip.decrement_ttl();
                    true
                }
                _ => false,
            },
            (Some(6), n) if n >= 40 => match wire::Ipv6Packet::new_checked(&mut l3[..]) {
                Ok(mut ip) if ip.hop_limit() > 1 => {
                    let h = ip.hop_limit();
                    ip.set_hop_limit(h - 1);
                    true
                }
                _ => false,
            },
            _ => false,
        };
        if !alive {
            self.counters.ttl_exceeded += 1;
            return Verdict::Drop(DropCause::TtlExceeded);
        }
        pkt.data[..6].copy_from_slice(&Router::next_hop_mac(port));
        self.counters.routed += 1;
        Verdict::Forward
    }

    fn reload(&mut self, new: &dyn Nf) -> Result<(), String> {
        let n = new
            .as_any()
            .downcast_ref::<Router>()
            .ok_or("not a router")?;
        self.table = n.table.clone();
        Ok(())
    }

    counted_nf!(Router);
}
