//! `[[nf]] kind = "lb"`: parsing and checks; errors name the field
//! (`nf[2].service[0].backends`).

use core::net::{Ipv4Addr, SocketAddrV4};
use core::time::Duration;

use serde::Deserialize;

use super::control::{PolicyRequest, Scheduled};
use super::maglev::{is_prime, next_prime};
use super::service::{Backend, Service};
use super::Lb;
use crate::component::Placement;
use crate::nat::NatTimeouts;

/// Largest Maglev table (a prime; 2^24 − 3).
pub const MAX_TABLE_SIZE: usize = 16_777_213;

/// `[[nf]] kind = "lb"`.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct LbSection {
    /// Name in the chain.
    pub name: Option<String>,
    /// The balancer's own source addresses (IPv4).
    pub snat: Vec<String>,
    /// Source port range `LO-HI`.
    #[serde(default = "default_ports")]
    pub ports: String,
    /// Maglev table size M (a prime > 100 × the largest service's backends);
    /// default: 65 537, or the next prime above 100 × backends if larger.
    pub table_size: Option<usize>,
    /// Timeouts (as the NAT's).
    #[serde(default)]
    pub timeouts: NatTimeouts,
    /// The virtual services.
    #[serde(default)]
    pub service: Vec<ServiceSection>,
    /// Where the control component runs: `inline`, `core`, or `auto` (the
    /// director moves it while traffic flows).
    #[serde(default)]
    pub placement: Placement,
    /// Policy requests the control component can hold queued.
    #[serde(default = "default_ring")]
    pub ring: usize,
    /// Policy requests played at chain time.
    #[serde(default)]
    pub health: Vec<HealthSection>,
}

/// `[[nf.health]]`: a policy request issued when the chain's clock reaches `at`.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct HealthSection {
    /// Chain time (in `flowshift run`: since the run started), e.g. `"2s"`.
    #[serde(with = "crate::fields::duration")]
    pub at: Duration,
    /// The service's `VIP:PORT`.
    pub service: String,
    /// The backend's `ADDR:PORT`.
    pub backend: String,
    /// Up (true) or down (false).
    pub up: bool,
}

fn default_ring() -> usize {
    1024
}

/// `[[nf.service]]`.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ServiceSection {
    /// `VIP:PORT` (IPv4).
    pub vip: String,
    /// `tcp` or `udp`.
    #[serde(default = "default_proto")]
    pub proto: String,
    /// `ADDR:PORT` each (IPv4).
    pub backends: Vec<String>,
    /// Backends that start unhealthy.
    #[serde(default)]
    pub down: Vec<String>,
}

fn default_ports() -> String {
    "1024-65535".into()
}

fn default_proto() -> String {
    "tcp".into()
}

fn sock(s: &str, what: &str) -> Result<SocketAddrV4, String> {
    s.parse()
        .map_err(|_| format!("`{s}`: expected an IPv4 {what} as ADDR:PORT"))
}

impl LbSection {
    /// Builds the balancer; `Err((field, message))` names the failing field
    /// relative to the section.
    pub fn build(&self) -> Result<Lb, (String, String)> {
        let err = |f: &str, m: String| (f.to_string(), m);
        let mut snat = Vec::new();
        for a in &self.snat {
            let a: Ipv4Addr = a
                .parse()
                .map_err(|_| err("snat", format!("`{a}`: expected an IPv4 address")))?;
            snat.push(a);
        }
        if snat.is_empty() {
            return Err(err("snat", "no source address".into()));
        }
        let bad = || {
            err(
                "ports",
                format!("`{}`: expected `LO-HI` within 1..=65535", self.ports),
            )
        };
        let (lo, hi) = self.ports.split_once('-').ok_or_else(bad)?;
        let (lo, hi): (u16, u16) = (
            lo.trim().parse().map_err(|_| bad())?,
            hi.trim().parse().map_err(|_| bad())?,
        );
        if lo == 0 || lo > hi {
            return Err(bad());
        }
        if self.service.is_empty() {
            return Err(err(
                "service",
                "a load balancer needs at least one [[nf.service]]".into(),
            ));
        }
        let m = self.maglev_size()?;
        let mut services = Vec::new();
        for (j, s) in self.service.iter().enumerate() {
            let svc = service(j, s, &services, m)?;
            services.push(svc);
        }
        let placement = self.placement;
        if !(1..=1 << 20).contains(&self.ring) {
            return Err(err(
                "ring",
                format!("{}: expected 1 to 1048576 requests", self.ring),
            ));
        }
        let lb = Lb::new(
            self.name.clone().unwrap_or_else(|| "lb".into()),
            services,
            snat,
            (lo, hi),
            self.timeouts.clone(),
        )
        .map_err(|e| err("service", e))?;
        let ctl = lb.control();
        let mut schedule = Vec::new();
        for (j, h) in self.health.iter().enumerate() {
            let (s, b) = ctl
                .find(&h.service, &h.backend)
                .map_err(|e| (format!("health[{j}]"), e))?;
            schedule.push(Scheduled {
                at_ns: h.at.as_nanos().min(u128::from(u64::MAX)) as u64,
                request: PolicyRequest {
                    service: s as u16,
                    backend: b as u16,
                    up: h.up,
                },
            });
        }
        lb.with_control(placement, self.ring, schedule)
            .map_err(|e| err("placement", e))
    }

    /// The Maglev table's size: `table_size` (a prime above 100 × the most
    /// backends of a service, at most the largest table) or the next prime
    /// above both that and 65 537.
    fn maglev_size(&self) -> Result<usize, (String, String)> {
        let err = |f: &str, m: String| (f.to_string(), m);
        let most = self
            .service
            .iter()
            .map(|s| s.backends.len())
            .max()
            .unwrap_or(1);
        Ok(match self.table_size {
            Some(m) if m > MAX_TABLE_SIZE => {
                return Err(err(
                    "table_size",
                    format!("{m} is above the largest Maglev table, {MAX_TABLE_SIZE}"),
                ))
            }
            Some(m) if !is_prime(m) => {
                return Err(err(
                    "table_size",
                    format!("{m} is not prime (the next prime is {})", next_prime(m)),
                ))
            }
            Some(m) if m <= 100 * most => {
                return Err(err(
                    "table_size",
                    format!(
                        "{m} must exceed 100 × {most} backends (try {})",
                        next_prime(100 * most + 1)
                    ),
                ))
            }
            Some(m) => m,
            None => next_prime((100 * most + 1).max(65_537)),
        })
    }
}

/// Service `j` of the section, checked against those before it (`m`: the
/// Maglev table's size).
fn service(
    j: usize,
    s: &ServiceSection,
    before: &[Service],
    m: usize,
) -> Result<Service, (String, String)> {
    let at = |f: &str| format!("service[{j}].{f}");
    let vip = sock(&s.vip, "VIP").map_err(|e| (at("vip"), e))?;
    let proto = match s.proto.as_str() {
        "tcp" => wire::proto::TCP,
        "udp" => wire::proto::UDP,
        p => return Err((at("proto"), format!("`{p}`: expected `tcp` or `udp`"))),
    };
    if before
        .iter()
        .any(|o: &Service| o.vip == *vip.ip() && o.port == vip.port() && o.proto == proto)
    {
        return Err((
            at("vip"),
            format!("`{}` {} is served twice", s.vip, s.proto),
        ));
    }
    let mut backends = Vec::new();
    for b in &s.backends {
        let a = sock(b, "backend").map_err(|e| (at("backends"), e))?;
        let b = Backend {
            addr: *a.ip(),
            port: a.port(),
        };
        if backends.contains(&b) {
            return Err((at("backends"), format!("`{b}` is listed twice")));
        }
        backends.push(b);
    }
    let mut healthy = vec![true; backends.len()];
    for d in &s.down {
        let a = sock(d, "backend").map_err(|e| (at("down"), e))?;
        let i = backends
            .iter()
            .position(|b| b.addr == *a.ip() && b.port == a.port())
            .ok_or_else(|| (at("down"), format!("`{d}` is not among the backends")))?;
        healthy[i] = false;
    }
    Service::new(*vip.ip(), vip.port(), proto, backends, healthy, m)
        .map_err(|e| (at("backends"), e))
}

impl crate::fields::BuildNf for LbSection {
    fn build(
        &self,
        f: &crate::fields::Fields<'_>,
    ) -> Result<Box<dyn crate::Nf>, crate::fields::ConfigError> {
        Ok(Box::new(
            LbSection::build(self).map_err(|(field, e)| f.err(&field, e))?,
        ))
    }
}
