//! Each per-flow state as an operator reads it (`flowshift ctl flows`), in
//! the words `conntrack -L` uses where it has them: a TCP state in capitals,
//! `[UNREPLIED]`, a NAT mapping as inside → outside endpoint.

use std::fmt;

use crate::firewall::conntrack::{Conn, TcpState};
use crate::ids::flow::IdsFlow;
use crate::lb::conn::LbConn;
use crate::nat::map::{NatMap, NatTcp};
use crate::seqcheck::state::SeqState;

impl fmt::Display for TcpState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TcpState::SynSent => f.write_str("SYN_SENT"),
            TcpState::SynRecv => f.write_str("SYN_RECV"),
            TcpState::Established => f.write_str("ESTABLISHED"),
            TcpState::FinWait { orig, reply } => match (orig, reply) {
                (true, true) => f.write_str("FIN_WAIT (FIN both ways)"),
                (true, false) => f.write_str("FIN_WAIT (FIN from the original side)"),
                (false, true) => f.write_str("FIN_WAIT (FIN from the reply side)"),
                (false, false) => f.write_str("FIN_WAIT"),
            },
            TcpState::TimeWait => f.write_str("TIME_WAIT"),
            TcpState::Closed => f.write_str("CLOSE"),
        }
    }
}

/// `[UNREPLIED]` until the responder has sent.
fn replied(f: &mut fmt::Formatter<'_>, proto: &str, replied: bool) -> fmt::Result {
    match replied {
        true => f.write_str(proto),
        false => write!(f, "{proto} [UNREPLIED]"),
    }
}

impl fmt::Display for Conn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Conn::Tcp(s) => write!(f, "tcp {s}"),
            Conn::Udp { replied: r } => replied(f, "udp", *r),
            Conn::Icmp => f.write_str("icmp echo"),
            Conn::Other { replied: r } => replied(f, "other", *r),
        }
    }
}

impl fmt::Display for NatMap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let proto = match self.proto {
            6 => "tcp",
            17 => "udp",
            1 => "icmp",
            _ => "ip",
        };
        write!(
            f,
            "{proto} {}:{} ⇄ {}:{}",
            self.int_addr, self.int_port, self.ext_addr, self.ext_port
        )?;
        if self.proto == 6 {
            f.write_str(match self.tcp {
                NatTcp::Opening => " opening",
                NatTcp::Established => " established",
                NatTcp::Closing => " closing",
            })?;
        }
        for (flag, name) in [
            (NatMap::INBOUND, "inbound"),
            (NatMap::STATIC, "port forward"),
            (NatMap::HAIRPIN, "hairpin"),
        ] {
            if self.flags & flag != 0 {
                write!(f, " [{name}]")?;
            }
        }
        Ok(())
    }
}

impl fmt::Display for SeqState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "last tag {}", self.last)
    }
}

impl fmt::Display for LbConn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "service {} backend {} via source port {}",
            self.service, self.backend, self.snat_port
        )?;
        f.write_str(match self.tcp {
            NatTcp::Opening => "",
            NatTcp::Established => " established",
            NatTcp::Closing => " closing",
        })
    }
}

impl fmt::Display for IdsFlow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.dropped {
            return f.write_str("dropped (a drop or blacklist rule fired)");
        }
        match self.at {
            Some(c) => write!(f, "matching on core {c}")?,
            None => write!(
                f,
                "matched {} + {} bytes",
                self.st[0].fed(),
                self.st[1].fed()
            )?,
        }
        if self.gaps != 0 {
            f.write_str(" (restarted after a gap)")?;
        }
        if self.recall.is_some() {
            f.write_str(" (coming back from its core)")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;
    use crate::FlowState;

    #[test]
    fn states_read_as_conntrack_says_them() {
        let s = |st: FlowState| st.to_string();
        assert_eq!(
            s(FlowState::Conn(Conn::Tcp(TcpState::Established))),
            "tcp ESTABLISHED"
        );
        assert_eq!(
            s(FlowState::Conn(Conn::Udp { replied: false })),
            "udp [UNREPLIED]"
        );
        let map = NatMap {
            int_addr: Ipv4Addr::new(10, 0, 0, 2),
            int_port: 45020,
            ext_idx: 230,
            ext_addr: Ipv4Addr::new(203, 0, 113, 231),
            ext_port: 11780,
            proto: 6,
            tcp: NatTcp::Closing,
            flags: NatMap::INBOUND,
        };
        assert_eq!(
            s(FlowState::Nat(map)),
            "tcp 10.0.0.2:45020 ⇄ 203.0.113.231:11780 closing [inbound]"
        );
        assert_eq!(s(FlowState::Seq(SeqState { last: 7 })), "last tag 7");
    }
}
