//! The rule key: which header bits a steering rule matches. A NIC's flow rules
//! match header fields under a mask; the planner works on the chosen bits only,
//! concatenated into one key, the first chosen bit most significant.

use core::fmt;
use core::net::IpAddr;

use wire::FiveTuple;

use super::cube::Cube;

/// A header field a rule can match.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Field {
    /// IPv4 source address.
    SrcIp,
    /// IPv4 destination address.
    DstIp,
    /// TCP/UDP source port.
    SrcPort,
    /// TCP/UDP destination port.
    DstPort,
    /// IP protocol.
    Proto,
}

impl Field {
    const ALL: [Field; 5] = [
        Field::SrcIp,
        Field::DstIp,
        Field::SrcPort,
        Field::DstPort,
        Field::Proto,
    ];

    /// Its name in `--bits`.
    pub const fn name(self) -> &'static str {
        match self {
            Field::SrcIp => "src-ip",
            Field::DstIp => "dst-ip",
            Field::SrcPort => "src-port",
            Field::DstPort => "dst-port",
            Field::Proto => "proto",
        }
    }

    /// Its width in bits.
    pub const fn width(self) -> u32 {
        match self {
            Field::SrcIp | Field::DstIp => 32,
            Field::SrcPort | Field::DstPort => 16,
            Field::Proto => 8,
        }
    }

    fn get(self, t: &FiveTuple) -> Option<u64> {
        let v4 = |a: IpAddr| match a {
            IpAddr::V4(a) => Some(u64::from(u32::from(a))),
            IpAddr::V6(_) => None,
        };
        match self {
            Field::SrcIp => v4(t.src),
            Field::DstIp => v4(t.dst),
            Field::SrcPort => Some(u64::from(t.src_port)),
            Field::DstPort => Some(u64::from(t.dst_port)),
            Field::Proto => Some(u64::from(t.proto)),
        }
    }
}

/// Bits `first..=last` of a field, numbered from its most significant bit (0),
/// as in prefix notation: `src-ip:0-7` is the first octet.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Slice {
    /// The field.
    pub field: Field,
    /// First bit.
    pub first: u32,
    /// Last bit (inclusive).
    pub last: u32,
}

impl Slice {
    fn width(&self) -> u32 {
        self.last - self.first + 1
    }
}

/// The chosen bits, in key order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyBits {
    slices: Vec<Slice>,
}

/// A `--bits` text that does not name valid header bits.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("rule key bits `{text}`: {why}")]
pub struct KeyBitsError {
    text: String,
    why: String,
}

/// Longest rule key.
pub const MAX_BITS: u32 = 64;

impl KeyBits {
    /// Parses `FIELD[:FIRST-LAST]` slices separated by commas, e.g.
    /// `src-ip:16-31,dst-port`. Fields: src-ip, dst-ip, src-port, dst-port, proto.
    pub fn parse(text: &str) -> Result<KeyBits, KeyBitsError> {
        let err = |why: String| KeyBitsError {
            text: text.to_string(),
            why,
        };
        let mut slices = Vec::new();
        for part in text.split(',').map(str::trim) {
            let (name, range) = match part.split_once(':') {
                Some((n, r)) => (n.trim(), Some(r.trim())),
                None => (part, None),
            };
            let field = Field::ALL
                .into_iter()
                .find(|f| f.name() == name)
                .ok_or_else(|| {
                    err(format!(
                        "unknown field `{name}` (src-ip, dst-ip, src-port, dst-port, proto)"
                    ))
                })?;
            let w = field.width();
            let (first, last) = match range {
                None => (0, w - 1),
                Some(r) => {
                    let (a, b) = r.split_once('-').unwrap_or((r, r));
                    let num = |s: &str| {
                        s.trim().parse::<u32>().map_err(|_| {
                            err(format!("`{r}` is not a bit range FIRST-LAST of {name}"))
                        })
                    };
                    (num(a)?, num(b)?)
                }
            };
            if first > last || last >= w {
                return Err(err(format!(
                    "{name} has bits 0-{} (0 most significant); {first}-{last} is not among them",
                    w - 1
                )));
            }
            slices.push(Slice { field, first, last });
        }
        let k = KeyBits { slices };
        if k.width() > MAX_BITS {
            return Err(err(format!(
                "{} bits chosen; a rule key has at most {MAX_BITS}",
                k.width()
            )));
        }
        Ok(k)
    }

    /// Width of the key.
    pub fn width(&self) -> u32 {
        self.slices.iter().map(Slice::width).sum()
    }

    /// The slices, in key order.
    pub fn slices(&self) -> &[Slice] {
        &self.slices
    }

    /// The key of a packet's 5-tuple; `None` for IPv6 when an address is chosen.
    pub fn key(&self, t: &FiveTuple) -> Option<u64> {
        let mut k = 0u64;
        for s in &self.slices {
            let v = s.field.get(t)?;
            let shift = s.field.width() - 1 - s.last;
            let part = (v >> shift) & super::cube::low_bits(s.width());
            k = (k << s.width()) | part;
        }
        Some(k)
    }

    /// A cube written field by field: `src-ip[16-31]=0110-…`.
    pub fn describe(&self, c: &Cube) -> String {
        let n = self.width();
        let t = c.ternary(n);
        let mut at = 0usize;
        let mut parts = Vec::new();
        for s in &self.slices {
            let w = s.width() as usize;
            let digits = &t[at..at + w];
            at += w;
            if digits.chars().all(|ch| ch == '-') {
                continue;
            }
            parts.push(format!(
                "{}[{}-{}]={}",
                s.field.name(),
                s.first,
                s.last,
                digits
            ));
        }
        if parts.is_empty() {
            "any".into()
        } else {
            parts.join(" ")
        }
    }
}

impl fmt::Display for KeyBits {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self
            .slices
            .iter()
            .map(|s| format!("{}:{}-{}", s.field.name(), s.first, s.last))
            .collect();
        f.write_str(&parts.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tuple(src: [u8; 4], sport: u16) -> FiveTuple {
        FiveTuple {
            src: IpAddr::from(src),
            dst: IpAddr::from([10, 0, 0, 1]),
            src_port: sport,
            dst_port: 80,
            proto: 6,
        }
    }

    #[test]
    fn bits_are_taken_most_significant_first() {
        let k = KeyBits::parse("src-ip:24-31,src-port:12-15").unwrap();
        assert_eq!(k.width(), 12);
        // last octet 0xab, low nibble of the port 0x5
        assert_eq!(k.key(&tuple([1, 2, 3, 0xab], 0x1235)), Some(0xab5));
        assert_eq!(k.to_string(), "src-ip:24-31,src-port:12-15");
        let whole = KeyBits::parse("dst-port").unwrap();
        assert_eq!(whole.key(&tuple([0; 4], 1)), Some(80));
        let c = Cube::new(0xa00, 0xf00);
        assert_eq!(k.describe(&c), "src-ip[24-31]=1010----");
        assert_eq!(k.describe(&Cube::ALL), "any");
    }

    #[test]
    fn bad_bits_are_named() {
        for (text, says) in [
            ("src-mac", "unknown field `src-mac`"),
            ("src-port:3-16", "src-port has bits 0-15"),
            ("proto:x", "not a bit range"),
            (
                "src-ip,dst-ip,src-port",
                "80 bits chosen; a rule key has at most 64",
            ),
        ] {
            let e = KeyBits::parse(text).unwrap_err().to_string();
            assert!(e.contains(says), "{text}: {e}");
        }
        assert!(KeyBits::parse("src-ip,dst-ip").is_ok());
    }
}
