//! What a generated trace looks like: the typed, validated [`TraceSpec`].
//!
//! Every field has a default, so an empty TOML table or no CLI flags give a useful
//! trace. [`TraceSpec::validate`] names the field and the allowed values on error.

use core::fmt;
use core::str::FromStr;

use serde::{Deserialize, Serialize};

/// Packet-size distribution. Sizes are Ethernet frame sizes with FCS (64..=1518).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum SizeDist {
    /// Every data packet has this size.
    Fixed(u16),
    /// Simple IMIX: 64, 570, 1518 B in proportion 7:4:1.
    Imix,
    /// Bimodal like campus traffic: ≈20 % of 64–74 B, ≈50 % of 1518 B, the rest
    /// uniform in between.
    Campus,
}

/// How packets are spaced in time.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum Arrival {
    /// Evenly spaced at the target rate.
    Constant,
    /// Exponential gaps with the target rate as mean.
    Poisson,
    /// Bursts: `on_us` microseconds sending, `off_us` silent; the mean rate is the
    /// target, so the rate inside a burst is `rate × (on + off) / on`.
    OnOff {
        /// Length of a burst in µs.
        on_us: u32,
        /// Length of a pause in µs.
        off_us: u32,
    },
}

/// How long connections live, and so how fast each one sends.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum Lifetimes {
    /// At most `active_flows` connections are open at once and each packet
    /// goes to an open one in proportion to its size: every connection lives
    /// about as long as the others, so an elephant sends many times faster than
    /// its share of the trace while it lives.
    Equal,
    /// A connection of `size` packets lives ∝ `size^β` (β in 0..=1, heavy-tailed
    /// like the sizes; at most the whole trace), sends at `size / lifetime`,
    /// and starts at a uniformly random time that lets it end within the trace;
    /// lifetimes are scaled so that `active_flows` connections are open on
    /// average. β = 1: every connection sends at the same rate (elephants live
    /// long at moderate rates, as in real traces); β = 0: all live equally long.
    Sized(f64),
}

/// The target mean rate.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum Rate {
    /// Gigabits per second of wire frames (FCS included).
    Gbps(f64),
    /// Million packets per second.
    Mpps(f64),
}

/// A trace to generate.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TraceSpec {
    /// Number of connections.
    pub flows: u32,
    /// Total packets (both directions, handshakes included).
    pub packets: u64,
    /// Zipf exponent of the flow sizes (rank r carries ∝ r^-α packets).
    pub alpha: f64,
    /// Seed; the same spec gives the same bytes.
    pub seed: u64,
    /// Share of flows that are TCP (the rest UDP).
    pub tcp_share: f64,
    /// Share of flows over IPv6 (the rest IPv4).
    pub ipv6_share: f64,
    /// Share of flows in the priority class.
    pub priority_share: f64,
    /// Alternatively, the priority class as a share of the *traffic*: the
    /// shortest connections whose packets add up to this share of `packets`
    /// (Dyssect Use Case I: 0.1 % of the traffic, in short flows). Not together
    /// with `priority_share`.
    pub priority_traffic: f64,
    /// DSCP that marks the priority class (46 = EF).
    pub priority_dscp: u8,
    /// Data-packet sizes.
    pub sizes: SizeDist,
    /// Arrival process.
    pub arrival: Arrival,
    /// Target mean rate.
    pub rate: Rate,
    /// Target number of concurrently active connections.
    pub active_flows: u32,
    /// How long connections live (`sized:BETA`, by default `sized:0.7`, or
    /// `equal`).
    pub lifetimes: Lifetimes,
    /// Spoofed TCP SYNs added on top of `packets` (a SYN flood): each from a
    /// random client address and port (10.0.0.0/8) to a random server
    /// (198.18.0.0/15) port 80, never answered.
    pub syn_flood: u64,
    /// Share of the connections' packets sent before the flood starts (0..1); the
    /// flood's SYNs are then spread evenly among the remaining packets.
    pub syn_flood_after: f64,
    /// Every connection to this one server endpoint (a service's address, as
    /// a load balancer's VIP) instead of random ones; IPv4 only.
    pub server: Option<core::net::SocketAddrV4>,
}

impl Default for TraceSpec {
    fn default() -> Self {
        TraceSpec {
            flows: 4096,
            packets: 500_000,
            alpha: 1.1,
            seed: 1,
            tcp_share: 0.9,
            ipv6_share: 0.0,
            priority_share: 0.0,
            priority_traffic: 0.0,
            priority_dscp: 46,
            sizes: SizeDist::Campus,
            arrival: Arrival::Poisson,
            rate: Rate::Gbps(10.0),
            active_flows: 1024,
            lifetimes: Lifetimes::Sized(0.7),
            server: None,
            syn_flood: 0,
            syn_flood_after: 0.25,
        }
    }
}

/// A field of a [`TraceSpec`] that is out of range.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("trace spec: `{field}` = {value}: {allowed}")]
pub struct SpecError {
    /// The field.
    pub field: &'static str,
    /// Its value.
    pub value: String,
    /// What is allowed.
    pub allowed: String,
}

fn err(field: &'static str, value: impl fmt::Display, allowed: impl Into<String>) -> SpecError {
    SpecError {
        field,
        value: value.to_string(),
        allowed: allowed.into(),
    }
}

/// Most flows a spec may ask for.
pub const MAX_FLOWS: u32 = 1 << 24;
/// Most packets a spec may ask for (a generated trace is written as it is made,
/// but replay preloads it).
pub const MAX_PACKETS: u64 = 1 << 34;

/// Packets a TCP connection needs at least: 3 for the handshake, 3 for the teardown.
pub const TCP_MIN_PACKETS: u64 = 6;

impl TraceSpec {
    /// Checks every field; the error names the first bad one.
    pub fn validate(&self) -> Result<(), SpecError> {
        if let Some(s) = self.server {
            if self.ipv6_share > 0.0 {
                return Err(err(
                    "server",
                    s,
                    "is an IPv4 endpoint: leave ipv6_share at 0",
                ));
            }
        }
        if self.flows == 0 || self.flows > MAX_FLOWS {
            return Err(err(
                "flows",
                self.flows,
                format!("must be in 1..={MAX_FLOWS}"),
            ));
        }
        if self.syn_flood > MAX_PACKETS - self.packets.min(MAX_PACKETS) {
            return Err(err(
                "syn_flood",
                self.syn_flood,
                format!("packets + syn_flood must be at most {MAX_PACKETS}"),
            ));
        }
        if !(0.0..1.0).contains(&self.syn_flood_after) {
            return Err(err(
                "syn_flood_after",
                self.syn_flood_after,
                "must be a share in 0.0..1.0",
            ));
        }
        if self.packets > MAX_PACKETS {
            return Err(err(
                "packets",
                self.packets,
                format!("must be at most {MAX_PACKETS}"),
            ));
        }
        if !(0.0..=2.0).contains(&self.alpha) {
            return Err(err(
                "alpha",
                self.alpha,
                "must be in 0.0..=2.0 (papers use 0.6..=1.4)",
            ));
        }
        for (f, v) in [
            ("tcp_share", self.tcp_share),
            ("ipv6_share", self.ipv6_share),
            ("priority_share", self.priority_share),
            ("priority_traffic", self.priority_traffic),
        ] {
            if !(0.0..=1.0).contains(&v) {
                return Err(err(f, v, "must be a share in 0.0..=1.0"));
            }
        }
        if self.priority_share > 0.0 && self.priority_traffic > 0.0 {
            return Err(err(
                "priority_traffic",
                self.priority_traffic,
                "give the priority class by flows (priority_share) or by traffic, not both",
            ));
        }
        if self.priority_dscp > 63 {
            return Err(err(
                "priority_dscp",
                self.priority_dscp,
                "must be in 0..=63",
            ));
        }
        if let SizeDist::Fixed(s) = self.sizes {
            if !(64..=1518).contains(&s) {
                return Err(err("sizes", self.sizes, "fixed size must be in 64..=1518"));
            }
        }
        if let Arrival::OnOff { on_us, .. } = self.arrival {
            if on_us == 0 {
                return Err(err("arrival", self.arrival, "on period must be > 0"));
            }
        }
        let r = match self.rate {
            Rate::Gbps(v) | Rate::Mpps(v) => v,
        };
        if !(r.is_finite() && r > 0.0) {
            return Err(err(
                "rate",
                self.rate,
                "must be a positive number of gbps or mpps",
            ));
        }
        if let Lifetimes::Sized(b) = self.lifetimes {
            if !(0.0..=1.0).contains(&b) {
                return Err(err(
                    "lifetimes",
                    self.lifetimes,
                    "sized:BETA needs 0 ≤ BETA ≤ 1",
                ));
            }
        }
        if self.active_flows == 0 {
            return Err(err("active_flows", self.active_flows, "must be at least 1"));
        }
        let need = self.min_packets();
        if self.packets < need {
            return Err(err(
                "packets",
                self.packets,
                format!(
                    "must be at least {need} for {} flows ({} TCP flows need {TCP_MIN_PACKETS} \
                     packets each for handshake and teardown, UDP flows 1)",
                    self.flows,
                    self.tcp_flows()
                ),
            ));
        }
        Ok(())
    }

    /// Number of TCP flows (the share rounded to a whole count).
    pub fn tcp_flows(&self) -> u32 {
        share_count(self.flows, self.tcp_share)
    }

    /// Number of priority-class flows.
    pub fn priority_flows(&self) -> u32 {
        share_count(self.flows, self.priority_share)
    }

    /// Number of IPv6 flows.
    pub fn ipv6_flows(&self) -> u32 {
        share_count(self.flows, self.ipv6_share)
    }

    fn min_packets(&self) -> u64 {
        let tcp = u64::from(self.tcp_flows());
        tcp * TCP_MIN_PACKETS + (u64::from(self.flows) - tcp)
    }
}

pub(crate) fn share_count(n: u32, share: f64) -> u32 {
    ((f64::from(n) * share).round() as u32).min(n)
}

impl fmt::Display for SizeDist {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SizeDist::Fixed(s) => write!(f, "fixed:{s}"),
            SizeDist::Imix => f.write_str("imix"),
            SizeDist::Campus => f.write_str("campus"),
        }
    }
}

impl FromStr for SizeDist {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("`{s}`: expected `fixed:N` (64..=1518), `imix` or `campus`");
        match s.to_ascii_lowercase().as_str() {
            "imix" => Ok(SizeDist::Imix),
            "campus" => Ok(SizeDist::Campus),
            other => {
                let n = other.strip_prefix("fixed:").unwrap_or(other);
                n.parse::<u16>().map(SizeDist::Fixed).map_err(|_| bad())
            }
        }
    }
}

impl fmt::Display for Arrival {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Arrival::Constant => f.write_str("constant"),
            Arrival::Poisson => f.write_str("poisson"),
            Arrival::OnOff { on_us, off_us } => write!(f, "onoff:{on_us}:{off_us}"),
        }
    }
}

impl FromStr for Arrival {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("`{s}`: expected `constant`, `poisson` or `onoff:ON_US:OFF_US`");
        match s.to_ascii_lowercase().as_str() {
            "constant" => Ok(Arrival::Constant),
            "poisson" => Ok(Arrival::Poisson),
            other => {
                let rest = other.strip_prefix("onoff:").ok_or_else(bad)?;
                let (on, off) = rest.split_once(':').ok_or_else(bad)?;
                Ok(Arrival::OnOff {
                    on_us: on.parse().map_err(|_| bad())?,
                    off_us: off.parse().map_err(|_| bad())?,
                })
            }
        }
    }
}

impl fmt::Display for Lifetimes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Lifetimes::Equal => f.write_str("equal"),
            Lifetimes::Sized(b) => write!(f, "sized:{b}"),
        }
    }
}

impl FromStr for Lifetimes {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let bad =
            || format!("`{s}`: expected `equal` or `sized:BETA` (BETA in 0..1), e.g. `sized:0.8`");
        match s.trim().to_ascii_lowercase().as_str() {
            "equal" => Ok(Lifetimes::Equal),
            other => {
                let b: f64 = other
                    .strip_prefix("sized:")
                    .ok_or_else(bad)?
                    .parse()
                    .map_err(|_| bad())?;
                if (0.0..=1.0).contains(&b) {
                    Ok(Lifetimes::Sized(b))
                } else {
                    Err(bad())
                }
            }
        }
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rate::Gbps(v) => write!(f, "{v}gbps"),
            Rate::Mpps(v) => write!(f, "{v}mpps"),
        }
    }
}

impl FromStr for Rate {
    type Err = String;
    /// A number and a unit: bits (`kbps`, `mbps`, `gbps`, `tbps`) or
    /// packets (`pps`, `kpps`, `mpps`) per second, e.g. `50mbps`.
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || {
            format!(
                "`{s}`: expected a number followed by a unit of bits (kbps, mbps, gbps, tbps) \
                 or packets (pps, kpps, mpps) per second, e.g. `10gbps` or `50mbps`"
            )
        };
        let l = s.trim().to_ascii_lowercase();
        // (longest suffixes first: `kpps` before `pps`)
        const UNITS: [(&str, f64, bool); 7] = [
            ("kpps", 1e-3, false),
            ("mpps", 1.0, false),
            ("kbps", 1e-6, true),
            ("mbps", 1e-3, true),
            ("gbps", 1.0, true),
            ("tbps", 1e3, true),
            ("pps", 1e-6, false),
        ];
        let (num, scale, bits) = UNITS
            .iter()
            .find_map(|&(u, k, b)| l.strip_suffix(u).map(|n| (n, k, b)))
            .ok_or_else(bad)?;
        let v = num.trim().parse::<f64>().map_err(|_| bad())? * scale;
        Ok(if bits { Rate::Gbps(v) } else { Rate::Mpps(v) })
    }
}

macro_rules! string_serde {
    ($t:ty) => {
        impl TryFrom<String> for $t {
            type Error = String;
            fn try_from(s: String) -> Result<Self, String> {
                s.parse()
            }
        }
        impl From<$t> for String {
            fn from(v: $t) -> String {
                v.to_string()
            }
        }
    };
}
string_serde!(SizeDist);
string_serde!(Arrival);
string_serde!(Rate);
string_serde!(Lifetimes);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        TraceSpec::default().validate().unwrap();
    }

    #[test]
    fn strings_round_trip() {
        for s in ["fixed:64", "imix", "campus"] {
            assert_eq!(s.parse::<SizeDist>().unwrap().to_string(), s);
        }
        for s in ["constant", "poisson", "onoff:100:400"] {
            assert_eq!(s.parse::<Arrival>().unwrap().to_string(), s);
        }
        assert_eq!("10gbps".parse::<Rate>().unwrap(), Rate::Gbps(10.0));
        assert_eq!("50mbps".parse::<Rate>().unwrap(), Rate::Gbps(0.05));
        assert_eq!("2 Tbps".parse::<Rate>().unwrap(), Rate::Gbps(2000.0));
        assert_eq!("500kpps".parse::<Rate>().unwrap(), Rate::Mpps(0.5));
        assert_eq!("1000pps".parse::<Rate>().unwrap(), Rate::Mpps(0.001));
        assert!("50mb".parse::<Rate>().unwrap_err().contains("mbps"));
        assert_eq!("2.5Mpps".parse::<Rate>().unwrap(), Rate::Mpps(2.5));
        assert!("10".parse::<Rate>().unwrap_err().contains("gbps"));
        assert!("onoff:1".parse::<Arrival>().is_err());
    }

    #[test]
    fn errors_name_the_field() {
        let mut s = TraceSpec {
            alpha: 3.0,
            ..Default::default()
        };
        assert_eq!(s.validate().unwrap_err().field, "alpha");
        s.alpha = 1.0;
        s.packets = 10;
        let e = s.validate().unwrap_err();
        assert_eq!(e.field, "packets");
        assert!(e.to_string().contains("handshake"), "{e}");
        s.packets = 1_000_000;
        s.tcp_share = 1.5;
        assert_eq!(s.validate().unwrap_err().field, "tcp_share");
    }

    #[test]
    fn spec_from_toml_like_json() {
        let s: TraceSpec =
            serde_json::from_str(r#"{"flows": 10, "sizes": "fixed:128", "rate": "1mpps"}"#)
                .unwrap();
        assert_eq!(s.flows, 10);
        assert_eq!(s.sizes, SizeDist::Fixed(128));
        assert_eq!(s.rate, Rate::Mpps(1.0));
        assert!(serde_json::from_str::<TraceSpec>(r#"{"flowz": 1}"#).is_err());
        assert!(serde_json::from_str::<TraceSpec>(r#"{"sizes": "huge"}"#)
            .unwrap_err()
            .to_string()
            .contains("imix"));
    }
}
