//! NFLOW keys (NFLOW/MVT §III) and the steering key of a chain.
//!
//! An NF's state is partitioned by the steering key when every packet that maps to
//! one state entry of the NF hashes to the same shard — that is, when the steering
//! fields are a subset of the NF's key fields, and steering is symmetric if the NF's
//! flows are bidirectional. The chain's steering key is the finest one that
//! partitions every NF with per-flow state: the intersection of their key fields.

use core::fmt;

use steer::HashFields;

/// What a flow is for an NF.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum NflowKey {
    /// No per-flow state.
    None,
    /// Directional 5-tuple.
    FiveTuple,
    /// Both directions of a 5-tuple connection.
    BiFiveTuple,
    /// Source address.
    SrcIp,
    /// Destination address.
    DstIp,
    /// Directional address pair.
    IpPair,
    /// Both directions of an address pair.
    BiIpPair,
}

/// Where an NF keeps its state.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum StateKind {
    /// None.
    Stateless,
    /// Per flow of its NFLOW key, in the shard that owns the flow (flow-entry slot
    /// or a shard-local table): requires steering that partitions its key.
    PerFlow,
    /// Per core, merged periodically; any steering is fine.
    Mergeable,
}

const SRC: u8 = 1;
const DST: u8 = 2;
const SPORT: u8 = 4;
const DPORT: u8 = 8;

impl NflowKey {
    fn fields(self) -> u8 {
        match self {
            NflowKey::None => SRC | DST | SPORT | DPORT,
            NflowKey::FiveTuple | NflowKey::BiFiveTuple => SRC | DST | SPORT | DPORT,
            NflowKey::SrcIp => SRC,
            NflowKey::DstIp => DST,
            NflowKey::IpPair | NflowKey::BiIpPair => SRC | DST,
        }
    }

    fn bidirectional(self) -> bool {
        matches!(self, NflowKey::BiFiveTuple | NflowKey::BiIpPair)
    }

    /// Whether ternary rules over `rules`' fields keep every flow of this key on
    /// one rule: the rules match only fields of the key, and the key is
    /// directional (rules over raw header fields send a flow's two directions to
    /// different rules).
    pub fn partitioned_by_rules(self, rules: &steer::roger::KeyBits) -> bool {
        use steer::roger::Field;
        if self == NflowKey::None {
            return true;
        }
        let need = rules.slices().iter().fold(0u8, |acc, s| {
            acc | match s.field {
                Field::SrcIp => SRC,
                Field::DstIp => DST,
                Field::SrcPort => SPORT,
                Field::DstPort => DPORT,
                Field::Proto => SRC | DST | SPORT | DPORT,
            }
        });
        !self.bidirectional() && need & !self.fields() == 0
    }

    /// A name for messages and reports.
    pub const fn name(self) -> &'static str {
        match self {
            NflowKey::None => "none",
            NflowKey::FiveTuple => "5-tuple",
            NflowKey::BiFiveTuple => "bidirectional 5-tuple",
            NflowKey::SrcIp => "source IP",
            NflowKey::DstIp => "destination IP",
            NflowKey::IpPair => "IP pair",
            NflowKey::BiIpPair => "bidirectional IP pair",
        }
    }
}

/// What the NIC model hashes.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct SteerKey {
    /// The fields.
    pub fields: HashFields,
    /// Whether both directions must hash alike (the symmetric RSS key).
    pub symmetric: bool,
}

impl fmt::Display for SteerKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sym = if self.symmetric { "symmetric " } else { "" };
        write!(f, "{sym}{}", self.fields.name())
    }
}

/// A chain whose NFs cannot all be partitioned by one steering key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "NF `{nf}` keeps per-flow state keyed by {key}, but the chain must steer on {steering} \
     (required by {required_by}): packets of one {key} flow would reach several shards and \
     its state would be split. Give `{nf}` mergeable state (state = \"mergeable\": kept per \
     core and merged periodically), or remove the conflict"
)]
pub struct ChainError {
    /// The NF whose key conflicts.
    pub nf: String,
    /// Its NFLOW key.
    pub key: &'static str,
    /// The steering the rest of the chain needs.
    pub steering: String,
    /// Which NFs need it.
    pub required_by: String,
}

fn steer_of(fields: u8, symmetric: bool) -> Option<SteerKey> {
    let f = match fields {
        x if x == SRC | DST | SPORT | DPORT => HashFields::IpPorts,
        x if x == SRC | DST => HashFields::Ip,
        SRC if !symmetric => HashFields::SrcIp,
        DST if !symmetric => HashFields::DstIp,
        _ => return None,
    };
    Some(SteerKey {
        fields: f,
        symmetric,
    })
}

/// The steering key for NFs given as `(name, key, kind, needs_ports)`, in chain
/// order. `needs_ports` marks an NF that also needs the L4 ports in the hash (the
/// NAT's bucket-preserving port choice). With no per-flow NF, steering is the
/// symmetric 5-tuple (the finest balance).
pub fn steering_for(nfs: &[(&str, NflowKey, StateKind, bool)]) -> Result<SteerKey, ChainError> {
    let mut fields = SRC | DST | SPORT | DPORT;
    let mut symmetric = false;
    let mut need_ports = false;
    let mut by: Vec<&str> = Vec::new();
    for (name, key, kind, needs_ports) in nfs {
        if *kind != StateKind::PerFlow || *key == NflowKey::None {
            continue;
        }
        let next_fields = fields & key.fields();
        let next_sym = symmetric || key.bidirectional();
        let next_need_ports = need_ports || *needs_ports;
        let has_ports = next_fields & (SPORT | DPORT) == SPORT | DPORT;
        if steer_of(next_fields, next_sym).is_none() || (next_need_ports && !has_ports) {
            let (steering, required_by) = if by.is_empty() {
                ("a valid RSS hash".to_string(), "RSS".to_string())
            } else {
                let s = steer_of(fields, symmetric).expect("valid so far");
                (s.to_string(), by.join(", "))
            };
            return Err(ChainError {
                nf: name.to_string(),
                key: key.name(),
                steering,
                required_by,
            });
        }
        fields = next_fields;
        symmetric = next_sym;
        need_ports = next_need_ports;
        by.push(name);
    }
    let s = steer_of(fields, symmetric).expect("valid at every step");
    Ok(SteerKey {
        symmetric: s.symmetric || by.is_empty(),
        ..s
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use NflowKey::*;
    use StateKind::*;

    #[test]
    fn default_is_symmetric_five_tuple() {
        let s = steering_for(&[("mon", SrcIp, Mergeable, false)]).unwrap();
        assert_eq!(
            s,
            SteerKey {
                fields: HashFields::IpPorts,
                symmetric: true
            }
        );
    }

    #[test]
    fn fw_nat_seq_steer_on_symmetric_five_tuple() {
        let s = steering_for(&[
            ("firewall", BiFiveTuple, PerFlow, false),
            ("nat", BiFiveTuple, PerFlow, true),
            ("seqcheck", BiFiveTuple, PerFlow, false),
        ])
        .unwrap();
        assert_eq!(s.to_string(), "symmetric ip-ports");
    }

    #[test]
    fn exact_monitor_alone_steers_on_source() {
        let s = steering_for(&[("monitor", SrcIp, PerFlow, false)]).unwrap();
        assert_eq!(
            s,
            SteerKey {
                fields: HashFields::SrcIp,
                symmetric: false
            }
        );
    }

    #[test]
    fn nat_plus_exact_monitor_is_refused_and_named() {
        let e = steering_for(&[
            ("nat", BiFiveTuple, PerFlow, true),
            ("monitor", SrcIp, PerFlow, false),
        ])
        .unwrap_err();
        assert_eq!(e.nf, "monitor");
        let msg = e.to_string();
        assert!(
            msg.contains("source IP") && msg.contains("nat") && msg.contains("mergeable"),
            "{msg}"
        );
        // and in the other order, the NAT is the one that cannot be satisfied
        let e = steering_for(&[
            ("monitor", SrcIp, PerFlow, false),
            ("nat", BiFiveTuple, PerFlow, true),
        ])
        .unwrap_err();
        assert_eq!(e.nf, "nat");
        // mergeable monitor: fine
        assert!(steering_for(&[
            ("nat", BiFiveTuple, PerFlow, true),
            ("monitor", SrcIp, Mergeable, false)
        ])
        .is_ok());
    }

    #[test]
    fn ip_pair_coarsens_to_ip_hash() {
        let s = steering_for(&[
            ("a", BiFiveTuple, PerFlow, false),
            ("b", BiIpPair, PerFlow, false),
        ])
        .unwrap();
        assert_eq!(
            s,
            SteerKey {
                fields: HashFields::Ip,
                symmetric: true
            }
        );
    }
}
