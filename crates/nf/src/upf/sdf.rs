//! Service data flow filters (TS 29.244 §8.2.5, the flow description of
//! TS 29.212 §5.4.2, an IPFilterRule of RFC 6733): `permit out <proto> from
//! <remote> [ports] to <ue> [ports]`, written for the downlink direction — an
//! uplink packet matches with its ends swapped.

use core::net::Ipv4Addr;

use ipnet::Ipv4Net;

/// A parsed flow description.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SdfFilter {
    /// The protocol (`None` for `ip`: any).
    pub proto: Option<u8>,
    /// The remote (data network) end.
    pub remote: Ipv4Net,
    /// The remote's ports.
    pub remote_ports: (u16, u16),
    /// The UE's end (`assigned` and `any` are every address).
    pub ue: Ipv4Net,
    /// The UE's ports.
    pub ue_ports: (u16, u16),
}

const ANY_PORT: (u16, u16) = (0, u16::MAX);

fn net(s: &str) -> Result<Ipv4Net, String> {
    match s {
        "any" | "assigned" => Ok(Ipv4Net::default()),
        _ if s.contains('/') => s.parse().map_err(|e| format!("`{s}`: {e}")),
        _ => s
            .parse::<Ipv4Addr>()
            .map(Ipv4Net::from)
            .map_err(|e| format!("`{s}`: {e}")),
    }
}

fn ports(s: &str) -> Option<(u16, u16)> {
    let (a, b) = s.split_once('-').unwrap_or((s, s));
    Some((a.parse().ok()?, b.parse().ok()?))
}

impl SdfFilter {
    /// Parses a flow description.
    pub fn parse(text: &str) -> Result<SdfFilter, String> {
        let w: Vec<&str> = text.split_whitespace().collect();
        let bad = |why: &str| format!("flow description `{text}`: {why}");
        if w.len() < 6 || w[0] != "permit" || w[1] != "out" {
            return Err(bad(
                "expected `permit out <proto> from <addr> [ports] to <addr> [ports]`",
            ));
        }
        let proto = match w[2] {
            "ip" => None,
            p => Some(
                p.parse::<u8>()
                    .map_err(|_| bad("the protocol is `ip` or a number"))?,
            ),
        };
        if w[3] != "from" {
            return Err(bad("`from` expected after the protocol"));
        }
        let remote = net(w[4]).map_err(|e| bad(&e))?;
        let mut at = 5;
        let remote_ports = match w.get(at).and_then(|s| ports(s)) {
            Some(p) => {
                at += 1;
                p
            }
            None => ANY_PORT,
        };
        if w.get(at) != Some(&"to") {
            return Err(bad("`to` expected"));
        }
        let ue =
            net(w.get(at + 1).ok_or_else(|| bad("no address after `to`"))?).map_err(|e| bad(&e))?;
        let ue_ports = match w.get(at + 2) {
            Some(s) => ports(s).ok_or_else(|| bad(&format!("`{s}` is not a port or range")))?,
            None => ANY_PORT,
        };
        if w.len() > at + 3 {
            return Err(bad("options after the ports are not supported"));
        }
        Ok(SdfFilter {
            proto,
            remote,
            remote_ports,
            ue,
            ue_ports,
        })
    }

    /// True for a packet between `remote` and `ue`, with `l4` = (protocol,
    /// UE's port, remote's port).
    pub fn matches(&self, remote: Ipv4Addr, ue: Ipv4Addr, l4: (u8, u16, u16)) -> bool {
        let within = |p: u16, r: (u16, u16)| r.0 <= p && p <= r.1;
        self.proto.is_none_or(|p| p == l4.0)
            && self.remote.contains(&remote)
            && self.ue.contains(&ue)
            && within(l4.1, self.ue_ports)
            && within(l4.2, self.remote_ports)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_match_what_they_describe() {
        let f = SdfFilter::parse("permit out 6 from 198.51.100.0/24 80-90 to assigned").unwrap();
        let ue = Ipv4Addr::new(10, 60, 0, 1);
        let web = Ipv4Addr::new(198, 51, 100, 7);
        assert!(f.matches(web, ue, (6, 40000, 80)));
        assert!(!f.matches(web, ue, (17, 40000, 80)), "protocol");
        assert!(!f.matches(web, ue, (6, 40000, 91)), "remote port");
        assert!(
            !f.matches(Ipv4Addr::new(198, 51, 101, 7), ue, (6, 40000, 80)),
            "remote net"
        );
        let any = SdfFilter::parse("permit out ip from any to assigned").unwrap();
        assert!(any.matches(web, ue, (1, 0, 0)));
    }

    #[test]
    fn bad_descriptions_say_what_is_wrong() {
        for (text, says) in [
            ("deny out ip from any to any", "permit out"),
            ("permit out tcp from any to any", "protocol"),
            ("permit out ip from 1.2.3.4/40 to any", "1.2.3.4/40"),
            ("permit out ip from any 80 any", "`to`"),
            ("permit out ip from any to any 1-x", "1-x"),
        ] {
            let e = SdfFilter::parse(text).unwrap_err();
            assert!(e.contains(says), "{text}: {e}");
        }
    }
}
