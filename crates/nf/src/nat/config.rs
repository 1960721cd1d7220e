//! `[[nf]] kind = "nat"`: the internal prefix, the external addresses, the port
//! range and the timeouts.

use core::net::IpAddr;

use ipnet::{IpNet, Ipv4Net};
use serde::Deserialize;

use steer::nat::Forward;

use super::{Nat, NatTimeouts};
use crate::config::{ConfigError, Fields};
use crate::fields::BuildNf;
use crate::Nf;

/// `[[nf]] kind = "nat"`.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct NatSection {
    /// Name in the chain.
    pub name: Option<String>,
    /// Internal prefix (IPv4).
    pub internal: String,
    /// External addresses or prefixes (IPv4).
    pub external: Vec<String>,
    /// External port range `LO-HI`.
    #[serde(default = "default_ports")]
    pub ports: String,
    /// Timeouts.
    #[serde(default)]
    pub timeouts: NatTimeouts,
    /// How an inside endpoint is mapped (RFC 4787 §4.1).
    #[serde(default)]
    pub mapping: Behaviour,
    /// Which outside hosts may send to a mapping (RFC 4787 §5).
    #[serde(default)]
    pub filtering: Behaviour,
    /// Static port forwards, `PROTO OUTSIDE:PORT -> INSIDE:PORT`.
    #[serde(default)]
    pub forwards: Vec<String>,
}

/// A NAT's mapping or filtering behaviour (RFC 4787).
#[derive(Copy, Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Behaviour {
    /// Per flow: one mapping per destination endpoint, and only the
    /// destination may answer (the default: the tightest, and the one that
    /// spreads one host's flows over every core).
    #[default]
    AddressAndPortDependent,
    /// One mapping per inside endpoint whatever the destination; with
    /// filtering, any outside host may send to it.
    EndpointIndependent,
}

/// `PROTO A.B.C.D:PORT -> A.B.C.D:PORT`.
fn forward(s: &str) -> Option<Forward> {
    let (proto, rest) = s.trim().split_once(char::is_whitespace)?;
    let proto = match proto {
        "tcp" => wire::proto::TCP,
        "udp" => wire::proto::UDP,
        _ => return None,
    };
    let (out, inside) = rest.split_once("->")?;
    let ep = |e: &str| {
        let a: core::net::SocketAddrV4 = e.trim().parse().ok()?;
        Some((*a.ip(), a.port()))
    };
    Some(Forward {
        proto,
        outside: ep(out)?,
        inside: ep(inside)?,
    })
}

fn default_ports() -> String {
    "1024-65535".into()
}

impl BuildNf for NatSection {
    fn build(&self, f: &Fields<'_>) -> Result<Box<dyn Nf>, ConfigError> {
        let internal: Ipv4Net = self.internal.parse().map_err(|_| {
            f.err(
                "internal",
                format!("`{}`: expected an IPv4 prefix", self.internal),
            )
        })?;
        let mut external = Vec::new();
        for e in &self.external {
            let net: IpNet = e
                .parse::<IpNet>()
                .or_else(|_| e.parse::<IpAddr>().map(IpNet::from))
                .map_err(|_| {
                    f.err(
                        "external",
                        format!("`{e}`: expected an IPv4 address or prefix"),
                    )
                })?;
            match net {
                IpNet::V4(n) if n.prefix_len() >= 16 => external.extend(n.hosts()),
                IpNet::V4(_) => return Err(f.err("external", format!("`{e}`: at most a /16"))),
                IpNet::V6(_) => {
                    return Err(f.err("external", format!("`{e}`: NAT44 needs IPv4 addresses")))
                }
            }
        }
        if external.is_empty() {
            return Err(f.err("external", "no external address"));
        }
        let ports = f.port_range("ports", &self.ports)?;
        // a new flow needs a port of its reply bucket's group in its own
        // shard's share: every (group, shard) pair needs one somewhere
        let (buckets, shards) = f.steering;
        let have = (u64::from(ports.1 - ports.0) + 1) * external.len() as u64;
        let need = (buckets * shards) as u64;
        if have < need {
            return Err(f.err(
                "ports",
                format!(
                    "{have} port(s) over {} address(es): each of the {buckets} bucket \
                     groups needs a port in each of the {shards} shards, so at least \
                     {need} ports × addresses (widen `ports` or `external`, or use \
                     fewer `steering.buckets` / `steering.shards`)",
                    external.len()
                ),
            ));
        }
        let eim = self.mapping == Behaviour::EndpointIndependent;
        if self.filtering == Behaviour::EndpointIndependent && !eim {
            return Err(f.err(
                "filtering",
                "endpoint-independent filtering needs `mapping = \"endpoint-independent\"`",
            ));
        }
        let mut forwards: Vec<Forward> = Vec::new();
        for s in &self.forwards {
            let fw = forward(s).ok_or_else(|| {
                f.err(
                    "forwards",
                    format!("`{s}`: expected `tcp|udp OUTSIDE:PORT -> INSIDE:PORT`"),
                )
            })?;
            if !external.contains(&fw.outside.0) {
                return Err(f.err(
                    "forwards",
                    format!("`{s}`: {} is not one of `external`", fw.outside.0),
                ));
            }
            if !internal.contains(&fw.inside.0) {
                return Err(f.err(
                    "forwards",
                    format!("`{s}`: {} is not in `internal`", fw.inside.0),
                ));
            }
            if let Some(o) = forwards
                .iter()
                .find(|o| o.proto == fw.proto && (o.outside == fw.outside || o.inside == fw.inside))
            {
                return Err(f.err("forwards", format!("`{s}` shares an endpoint with {o:?}")));
            }
            forwards.push(fw);
        }
        let name = self.name.clone().unwrap_or_else(|| "nat".into());
        let mut nat = Nat::new(name, internal, external, ports, self.timeouts.clone());
        nat.behave(
            eim,
            self.filtering == Behaviour::EndpointIndependent,
            forwards,
        );
        Ok(Box::new(nat))
    }
}
