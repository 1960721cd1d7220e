//! Virtual services and the control side: each service's backends, their health,
//! and the Maglev table new flows are placed by. A health change rebuilds the
//! service's table off the packet path and publishes it with one atomic pointer
//! swap ([`arc_swap`]); packet processing only ever loads the current table, never
//! waits, and never sees a half-built one.

use core::net::Ipv4Addr;
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;

use super::maglev::Maglev;

/// A backend: address and port.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Backend {
    /// Address.
    pub addr: Ipv4Addr,
    /// Port.
    pub port: u16,
}

impl core::fmt::Display for Backend {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{}:{}", self.addr, self.port)
    }
}

/// A virtual service: VIP:port of one protocol, spread over backends.
pub struct Service {
    /// Virtual address.
    pub vip: Ipv4Addr,
    /// Virtual port.
    pub port: u16,
    /// IP protocol (TCP or UDP).
    pub proto: u8,
    /// The backends (index = backend id in flow state and in the table).
    pub backends: Vec<Backend>,
    /// The table new flows are placed by (swapped whole on a health change).
    table: ArcSwap<Maglev>,
    /// Health, written by the control side only (under the lock, which the
    /// packet path never takes).
    healthy: Mutex<Vec<bool>>,
    /// Taken out of the configuration by a live reload: it places no new
    /// connection, its connections drain.
    pub retired: bool,
    /// Per backend: taken out of the configuration by a live reload (down
    /// until a reload lists it again).
    removed: Vec<bool>,
}

impl Service {
    /// A service with every backend `healthy[i]`, over a table of `m` entries.
    pub fn new(
        vip: Ipv4Addr,
        port: u16,
        proto: u8,
        backends: Vec<Backend>,
        healthy: Vec<bool>,
        m: usize,
    ) -> Result<Service, String> {
        if backends.is_empty() {
            return Err("a service needs at least one backend".into());
        }
        if m <= 100 * backends.len() {
            return Err(format!(
                "table size {m} must exceed 100 × {} backends for even shares",
                backends.len()
            ));
        }
        let table = Maglev::new(&names(&backends), &healthy, m)?;
        Ok(Service {
            removed: vec![false; backends.len()],
            vip,
            port,
            proto,
            backends,
            table: ArcSwap::from_pointee(table),
            healthy: Mutex::new(healthy),
            retired: false,
        })
    }

    /// The service a live reload makes of this one and `new` (the same
    /// virtual service in the new configuration; `None`: gone from it): every
    /// backend keeps its index (connections hold it) and its health, a backend
    /// gone from the list is taken down (its connections drain), new ones are
    /// appended with the health `new` gives them, over `new`'s table size.
    pub fn reloaded(&self, new: Option<&Service>) -> Result<Service, String> {
        let mut backends = self.backends.clone();
        let mut healthy = self.health();
        let mut removed = self.removed.clone();
        let m = new.map_or(self.table.load().len(), |n| n.table.load().len());
        match new {
            Some(n) => {
                let up = n.health();
                for b in 0..backends.len() {
                    match n.backends.iter().position(|x| *x == backends[b]) {
                        // listed again after a removal (or the whole
                        // service's): the health the configuration gives
                        Some(j) if removed[b] || self.retired => healthy[b] = up[j],
                        Some(_) => {}
                        None => healthy[b] = false,
                    }
                    removed[b] = !n.backends.contains(&backends[b]);
                }
                for (j, b) in n.backends.iter().enumerate() {
                    if !backends.contains(b) {
                        backends.push(*b);
                        healthy.push(up[j]);
                        removed.push(false);
                    }
                }
            }
            None => {
                healthy.fill(false);
                removed.fill(true);
            }
        }
        let mut s = Service::new(self.vip, self.port, self.proto, backends, healthy, m)?;
        s.retired = new.is_none();
        s.removed = removed;
        Ok(s)
    }

    /// A copy of this service (its backends, health and table size).
    pub fn copied(&self) -> Result<Service, String> {
        Service::new(
            self.vip,
            self.port,
            self.proto,
            self.backends.clone(),
            self.health(),
            self.table.load().len(),
        )
    }

    /// The backend for a new flow with this tuple hash (`None`: none is healthy).
    /// Lock-free: one atomic load of the current table.
    pub fn place(&self, flow_hash: u64) -> Option<usize> {
        self.table.load().lookup(flow_hash)
    }

    /// The current table (a snapshot).
    pub fn table(&self) -> Arc<Maglev> {
        self.table.load_full()
    }

    /// Health of each backend.
    pub fn health(&self) -> Vec<bool> {
        self.healthy.lock().expect("health lock").clone()
    }

    /// Marks backend `b` up or down, rebuilds the table and publishes it. Returns
    /// how many table entries changed backend. Established flows are pinned in
    /// their state and are not affected.
    pub fn set_healthy(&self, b: usize, up: bool) -> Result<usize, String> {
        if b >= self.backends.len() {
            return Err(format!(
                "backend {b}: the service has {}",
                self.backends.len()
            ));
        }
        let mut h = self.healthy.lock().expect("health lock");
        if h[b] == up {
            return Ok(0);
        }
        h[b] = up;
        let old = self.table.load_full();
        let new = Maglev::new(&names(&self.backends), &h, old.len())?;
        let changed = old.changed(&new);
        self.table.store(Arc::new(new));
        Ok(changed)
    }
}

/// Backends are named by `addr:port`, so a backend keeps its permutation (and
/// its entries) whatever its position in the list.
fn names(b: &[Backend]) -> Vec<String> {
    b.iter().map(ToString::to_string).collect()
}
