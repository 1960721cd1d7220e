//! Prioritised ACL rules: one per line, first match wins.
//!
//! ```text
//! # ACTION PROTO SOURCE -> DESTINATION
//! allow tcp  10.0.0.0/8      -> any:80
//! allow tcp  10.0.0.0/8      -> any:443
//! deny  udp  any:53          -> 10.0.0.0/8
//! allow icmp 10.0.0.0/8      -> any
//! allow any  [fd00::/8]:1024-65535 -> [2001:db8::/32]
//! deny  any  any -> any
//! ```
//!
//! ACTION is `allow` or `deny`; PROTO is `tcp`, `udp`, `icmp`, `icmp6`, `any` or a
//! number; an endpoint is `any`, an address or a prefix (IPv6 in brackets when a port
//! follows), optionally `:PORT` or `:LO-HI`. A port constraint matches only TCP and
//! UDP packets. `#` starts a comment. Errors name the line.

use core::fmt;
use core::net::IpAddr;

use ipnet::IpNet;

/// What a rule does (in a config, `allow` or `deny`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    /// Admit the connection (and track it).
    Allow,
    /// Drop the packet.
    Deny,
}

/// Port values: 0..=65535 are real ports; [`NO_PORT`] stands for packets of a
/// protocol without ports, so only rules without a port constraint match them.
pub const NO_PORT: u32 = 65_536;

/// One rule. Ranges are inclusive; addresses are 128-bit (IPv4 mapped).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    /// 1-based line in the rule text.
    pub line: usize,
    /// What to do.
    pub action: Action,
    /// Protocol range (one value or 0..=255).
    pub proto: (u32, u32),
    /// Source addresses.
    pub src: (u128, u128),
    /// Source ports (0..=NO_PORT for "any").
    pub sport: (u32, u32),
    /// Destination addresses.
    pub dst: (u128, u128),
    /// Destination ports.
    pub dport: (u32, u32),
}

/// The fields a rule looks at, for one packet.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Fields {
    /// Protocol.
    pub proto: u32,
    /// Source address (IPv4 mapped).
    pub src: u128,
    /// Source port or [`NO_PORT`].
    pub sport: u32,
    /// Destination address.
    pub dst: u128,
    /// Destination port or [`NO_PORT`].
    pub dport: u32,
}

/// 128-bit form of an address (IPv4 → IPv4-mapped IPv6).
pub fn addr128(a: IpAddr) -> u128 {
    match a {
        IpAddr::V4(a) => u128::from(a.to_ipv6_mapped()),
        IpAddr::V6(a) => u128::from(a),
    }
}

impl Fields {
    /// The fields of a 5-tuple.
    pub fn of(t: &wire::FiveTuple) -> Fields {
        let ported = matches!(t.proto, wire::proto::TCP | wire::proto::UDP);
        Fields {
            proto: u32::from(t.proto),
            src: addr128(t.src),
            sport: if ported {
                u32::from(t.src_port)
            } else {
                NO_PORT
            },
            dst: addr128(t.dst),
            dport: if ported {
                u32::from(t.dst_port)
            } else {
                NO_PORT
            },
        }
    }
}

impl Rule {
    /// Whether the rule matches (the reference semantics the classifier must equal).
    pub fn matches(&self, f: &Fields) -> bool {
        let within = |v: u128, r: (u128, u128)| r.0 <= v && v <= r.1;
        let within32 = |v: u32, r: (u32, u32)| r.0 <= v && v <= r.1;
        within32(f.proto, self.proto)
            && within(f.src, self.src)
            && within(f.dst, self.dst)
            && within32(f.sport, self.sport)
            && within32(f.dport, self.dport)
    }
}

/// Naive first match: the index of the first matching rule.
pub fn first_match(rules: &[Rule], f: &Fields) -> Option<usize> {
    rules.iter().position(|r| r.matches(f))
}

/// A rule text that does not parse.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {msg}")]
pub struct RuleError {
    /// 1-based line.
    pub line: usize,
    /// What is wrong.
    pub msg: String,
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Action::Allow => "allow",
            Action::Deny => "deny",
        })
    }
}

/// Parses a rule text.
pub fn parse_rules(text: &str) -> Result<Vec<Rule>, RuleError> {
    let mut rules = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let body = raw.split('#').next().unwrap_or("").trim();
        if body.is_empty() {
            continue;
        }
        let err = |msg: String| RuleError { line, msg };
        let toks: Vec<&str> = body.split_whitespace().collect();
        if toks.len() != 5 || toks[3] != "->" {
            return Err(err(format!(
                "expected `ACTION PROTO SOURCE -> DESTINATION`, found `{body}`"
            )));
        }
        let action = match toks[0] {
            "allow" | "accept" => Action::Allow,
            "deny" | "drop" => Action::Deny,
            other => return Err(err(format!("expected `allow` or `deny`, found `{other}`"))),
        };
        let proto = match toks[1] {
            "any" => (0, 255),
            "tcp" => (6, 6),
            "udp" => (17, 17),
            "icmp" => (1, 1),
            "icmp6" => (58, 58),
            n => match n.parse::<u8>() {
                Ok(p) => (u32::from(p), u32::from(p)),
                Err(_) => {
                    return Err(err(format!(
                        "expected a protocol (tcp, udp, icmp, icmp6, any or 0..=255), found `{n}`"
                    )))
                }
            },
        };
        let (src, sport) = endpoint(toks[2]).map_err(err)?;
        let (dst, dport) = endpoint(toks[4]).map_err(err)?;
        rules.push(Rule {
            line,
            action,
            proto,
            src,
            sport,
            dst,
            dport,
        });
    }
    Ok(rules)
}

/// An address range and a port range.
type Endpoint = ((u128, u128), (u32, u32));

fn endpoint(s: &str) -> Result<Endpoint, String> {
    let (addr, ports) = if let Some(rest) = s.strip_prefix('[') {
        let (a, tail) = rest
            .split_once(']')
            .ok_or_else(|| format!("`{s}`: missing `]`"))?;
        match tail {
            "" => (a, None),
            t => (
                a,
                Some(
                    t.strip_prefix(':')
                        .ok_or_else(|| format!("`{s}`: expected `:PORT` after `]`"))?,
                ),
            ),
        }
    } else if s.matches(':').count() == 1 {
        let (a, p) = s.split_once(':').expect("one colon");
        (a, Some(p))
    } else {
        (s, None)
    };
    let range = if addr == "any" {
        (0, u128::MAX)
    } else {
        let net: IpNet = match addr.parse::<IpNet>() {
            Ok(n) => n,
            Err(_) => match addr.parse::<IpAddr>() {
                Ok(a) => IpNet::from(a),
                Err(_) => return Err(format!("`{addr}`: expected `any`, an address or a prefix")),
            },
        };
        let net = net.trunc();
        (addr128(net.network()), addr128(net.broadcast()))
    };
    let ports = match ports {
        None | Some("any") => (0, NO_PORT),
        Some(p) => {
            let bad = || format!("`{p}`: expected a port, `LO-HI` or `any`");
            let (lo, hi) = match p.split_once('-') {
                Some((a, b)) => (
                    a.parse::<u16>().map_err(|_| bad())?,
                    b.parse::<u16>().map_err(|_| bad())?,
                ),
                None => {
                    let v = p.parse::<u16>().map_err(|_| bad())?;
                    (v, v)
                }
            };
            if lo > hi {
                return Err(format!("`{p}`: empty port range"));
            }
            (u32::from(lo), u32::from(hi))
        }
    };
    Ok((range, ports))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_documented_example() {
        let text = "# comment\nallow tcp 10.0.0.0/8 -> any:80\n\ndeny udp any:53 -> 10.0.0.0/8 # trailing\n\
                    allow any [fd00::/8]:1024-65535 -> [2001:db8::/32]\nallow 47 1.2.3.4 -> any\n";
        let r = parse_rules(text).unwrap();
        assert_eq!(r.len(), 4);
        assert_eq!(r[0].line, 2);
        assert_eq!(r[0].dport, (80, 80));
        assert_eq!(r[0].sport, (0, NO_PORT));
        assert_eq!(r[1].sport, (53, 53));
        assert_eq!(r[2].sport, (1024, 65535));
        assert_eq!(r[3].proto, (47, 47));
        assert_eq!(r[3].src.0, r[3].src.1);
    }

    #[test]
    fn errors_name_the_line() {
        let e = parse_rules("allow tcp any -> any\npermit tcp any -> any\n").unwrap_err();
        assert_eq!(e.line, 2);
        assert!(
            e.to_string()
                .starts_with("line 2: expected `allow` or `deny`"),
            "{e}"
        );
        let e = parse_rules("allow tcp 10.0.0.0/33 -> any").unwrap_err();
        assert!(e.to_string().contains("10.0.0.0/33"), "{e}");
        let e = parse_rules("allow tcp any any").unwrap_err();
        assert!(e.to_string().contains("->"), "{e}");
        let e = parse_rules("allow tcp any -> any:90-80").unwrap_err();
        assert!(e.to_string().contains("empty port range"), "{e}");
        let e = parse_rules("allow tcp any -> any:http").unwrap_err();
        assert!(e.to_string().contains("`http`"), "{e}");
    }
}
