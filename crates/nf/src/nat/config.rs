//! `[[nf]] kind = "nat"`: the internal prefix, the external addresses, the port
//! range and the timeouts.

use core::net::IpAddr;

use ipnet::{IpNet, Ipv4Net};
use serde::Deserialize;

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
        let name = self.name.clone().unwrap_or_else(|| "nat".into());
        Ok(Box::new(Nat::new(
            name,
            internal,
            external,
            ports,
            self.timeouts.clone(),
        )))
    }
}
