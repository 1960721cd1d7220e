//! Connection tracking: a TCP state machine (handshake, established, FIN/RST
//! teardown), UDP pseudo-connections and ICMP echo, with a timeout per state.

use core::time::Duration;

use serde::{Deserialize, Serialize};
use state::Dir;
use wire::{L4Info, TcpFlags};

use crate::DropCause;

/// TCP connection states.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum TcpState {
    /// SYN seen from the originator.
    SynSent,
    /// SYN-ACK seen from the responder.
    SynRecv,
    /// Handshake complete.
    Established,
    /// FIN seen from one side (`orig` / `reply`).
    FinWait {
        /// FIN from the originator.
        orig: bool,
        /// FIN from the responder.
        reply: bool,
    },
    /// FIN seen from both sides.
    TimeWait,
    /// Reset.
    Closed,
}

/// A tracked connection (the firewall's per-flow state).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Conn {
    /// TCP.
    Tcp(TcpState),
    /// UDP pseudo-connection; `replied` once the responder answered.
    Udp {
        /// The responder has sent.
        replied: bool,
    },
    /// ICMP echo.
    Icmp,
    /// Any other protocol, tracked by addresses.
    Other {
        /// The responder has sent.
        replied: bool,
    },
}

/// Idle timeouts per state (Linux conntrack's defaults where they exist).
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Timeouts {
    /// TCP SYN sent.
    #[serde(with = "crate::fields::duration")]
    pub syn_sent: Duration,
    /// TCP SYN-ACK seen.
    #[serde(with = "crate::fields::duration")]
    pub syn_recv: Duration,
    /// TCP established.
    #[serde(with = "crate::fields::duration")]
    pub established: Duration,
    /// TCP after one FIN.
    #[serde(with = "crate::fields::duration")]
    pub fin_wait: Duration,
    /// TCP after both FINs.
    #[serde(with = "crate::fields::duration")]
    pub time_wait: Duration,
    /// TCP after RST.
    #[serde(with = "crate::fields::duration")]
    pub close: Duration,
    /// UDP before a reply.
    #[serde(with = "crate::fields::duration")]
    pub udp: Duration,
    /// UDP after a reply.
    #[serde(with = "crate::fields::duration")]
    pub udp_replied: Duration,
    /// ICMP echo.
    #[serde(with = "crate::fields::duration")]
    pub icmp: Duration,
    /// Other protocols.
    #[serde(with = "crate::fields::duration")]
    pub other: Duration,
    /// Any unassured connection (TCP before its SYN-ACK is answered, UDP and
    /// other protocols before a reply, ICMP echo) while its shard's table is in
    /// emergency mode.
    #[serde(with = "crate::fields::duration")]
    pub emergency: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        let s = Duration::from_secs;
        Timeouts {
            syn_sent: s(120),
            syn_recv: s(60),
            established: s(432_000),
            fin_wait: s(120),
            time_wait: s(120),
            close: s(10),
            udp: s(30),
            udp_replied: s(180),
            icmp: s(30),
            other: s(600),
            emergency: s(5),
        }
    }
}

/// [`Conn::class`] of an established TCP connection.
const ESTABLISHED: usize = 2;

/// [`Timeouts`] in ns, by the connection state's class: what the packet path sets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TimeoutsNs {
    by_class: [u64; 10],
    emergency: u64,
}

impl TimeoutsNs {
    /// The timeouts in ns (saturating at `u64::MAX`).
    pub fn of(t: &Timeouts) -> TimeoutsNs {
        let ns = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        TimeoutsNs {
            by_class: [
                t.syn_sent,
                t.syn_recv,
                t.established,
                t.fin_wait,
                t.time_wait,
                t.close,
                t.udp,
                t.udp_replied,
                t.icmp,
                t.other,
            ]
            .map(ns),
            emergency: ns(t.emergency),
        }
    }
}

impl Conn {
    /// The connection a first packet (original direction, admitted by the ACL)
    /// opens; a TCP flow must start with SYN.
    pub fn open(l4: L4Info) -> Result<Conn, DropCause> {
        match l4 {
            L4Info::Tcp { flags } if flags.is_syn_only() => Ok(Conn::Tcp(TcpState::SynSent)),
            L4Info::Tcp { .. } => Err(DropCause::CtInvalid),
            L4Info::Udp => Ok(Conn::Udp { replied: false }),
            L4Info::IcmpEcho { request: true } => Ok(Conn::Icmp),
            // (a fragment opens nothing: its first fragment, which the
            // NIC model steers before it, did not open its flow)
            L4Info::IcmpEcho { request: false }
            | L4Info::Icmp { .. }
            | L4Info::IcmpError { .. }
            | L4Info::Fragment => Err(DropCause::CtInvalid),
            L4Info::Other => Ok(Conn::Other { replied: false }),
        }
    }

    /// Moves the state machine for a packet in direction `dir`.
    #[inline(always)]
    pub fn update(&mut self, dir: Dir, l4: L4Info) -> Result<(), DropCause> {
        let reply = dir == Dir::Reply;
        match self {
            Conn::Tcp(st) => {
                let flags = match l4 {
                    L4Info::Tcp { flags } => flags,
                    // a later fragment of a segment: no flags to follow
                    L4Info::Fragment => return Ok(()),
                    _ => return Err(DropCause::CtInvalid),
                };
                // an established connection's segments without SYN, FIN or
                // RST leave it so (the common case, decided here)
                if *st == TcpState::Established
                    && flags.0 & (TcpFlags::SYN.0 | TcpFlags::FIN.0 | TcpFlags::RST.0) == 0
                {
                    return Ok(());
                }
                *st = tcp_next(*st, reply, flags)?;
            }
            Conn::Udp { replied } | Conn::Other { replied } => *replied |= reply,
            Conn::Icmp => {
                if !matches!(l4, L4Info::IcmpEcho { request } if request != reply)
                    && l4 != L4Info::Fragment
                {
                    return Err(DropCause::CtInvalid);
                }
            }
        }
        Ok(())
    }

    /// [`update`](Self::update), then the idle timeout in the new state
    /// ([`timeout_ns_in`](Self::timeout_ns_in)). An established
    /// connection's segment without SYN, FIN or RST, the common case, is
    /// decided first: the state stays, its timeout is the established one
    /// (never shortened in emergency mode: the connection is assured).
    #[inline(always)]
    pub fn update_timeout(
        &mut self,
        dir: Dir,
        l4: L4Info,
        t: &TimeoutsNs,
        emergency: bool,
    ) -> Result<u64, DropCause> {
        if let (Conn::Tcp(TcpState::Established), L4Info::Tcp { flags }) = (&*self, l4) {
            if flags.0 & (TcpFlags::SYN.0 | TcpFlags::FIN.0 | TcpFlags::RST.0) == 0 {
                return Ok(t.by_class[ESTABLISHED]);
            }
        }
        self.update(dir, l4)?;
        Ok(self.timeout_ns_in(t, emergency))
    }

    /// True until the connection is established (both sides heard from).
    pub fn is_unassured(&self) -> bool {
        matches!(
            self,
            Conn::Tcp(TcpState::SynSent | TcpState::SynRecv)
                | Conn::Udp { replied: false }
                | Conn::Other { replied: false }
                | Conn::Icmp
        )
    }

    /// The idle timeout in the current state, in emergency mode or not.
    pub fn timeout_in(&self, t: &Timeouts, emergency: bool) -> Duration {
        let normal = self.timeout(t);
        if emergency && self.is_unassured() {
            normal.min(t.emergency)
        } else {
            normal
        }
    }

    /// [`timeout_in`](Self::timeout_in) in ns, from the timeouts in ns.
    #[inline]
    pub fn timeout_ns_in(&self, t: &TimeoutsNs, emergency: bool) -> u64 {
        let normal = t.by_class[self.class()];
        if emergency && self.is_unassured() {
            normal.min(t.emergency)
        } else {
            normal
        }
    }

    /// The state's index among [`TimeoutsNs`]'s, in [`Timeouts`]'s field order.
    #[inline]
    fn class(&self) -> usize {
        match self {
            Conn::Tcp(TcpState::SynSent) => 0,
            Conn::Tcp(TcpState::SynRecv) => 1,
            Conn::Tcp(TcpState::Established) => ESTABLISHED,
            Conn::Tcp(TcpState::FinWait { .. }) => 3,
            Conn::Tcp(TcpState::TimeWait) => 4,
            Conn::Tcp(TcpState::Closed) => 5,
            Conn::Udp { replied: false } => 6,
            Conn::Udp { replied: true } => 7,
            Conn::Icmp => 8,
            Conn::Other { .. } => 9,
        }
    }

    /// The idle timeout in the current state.
    pub fn timeout(&self, t: &Timeouts) -> Duration {
        match self {
            Conn::Tcp(TcpState::SynSent) => t.syn_sent,
            Conn::Tcp(TcpState::SynRecv) => t.syn_recv,
            Conn::Tcp(TcpState::Established) => t.established,
            Conn::Tcp(TcpState::FinWait { .. }) => t.fin_wait,
            Conn::Tcp(TcpState::TimeWait) => t.time_wait,
            Conn::Tcp(TcpState::Closed) => t.close,
            Conn::Udp { replied: false } => t.udp,
            Conn::Udp { replied: true } => t.udp_replied,
            Conn::Icmp => t.icmp,
            Conn::Other { .. } => t.other,
        }
    }
}

impl Conn {
    /// True when a packet of direction `dir` with `l4` starts a new
    /// connection on this closed one's tuple (a SYN from the original side
    /// in TIME_WAIT or CLOSE, see [`tcp_next`]).
    #[inline(always)]
    pub fn reopened_by(&self, dir: Dir, l4: L4Info) -> bool {
        match (self, l4) {
            (Conn::Tcp(st), L4Info::Tcp { flags }) => reopens(*st, dir == Dir::Reply, flags),
            _ => false,
        }
    }
}

/// A SYN from the original side (no ACK, no RST) on a connection in
/// TIME_WAIT or CLOSE: a new connection reusing the tuple.
#[inline(always)]
fn reopens(st: TcpState, reply: bool, f: TcpFlags) -> bool {
    matches!(st, TcpState::TimeWait | TcpState::Closed)
        && !reply
        && f.0 & (TcpFlags::SYN.0 | TcpFlags::ACK.0 | TcpFlags::RST.0) == TcpFlags::SYN.0
}

#[inline]
fn tcp_next(st: TcpState, reply: bool, f: TcpFlags) -> Result<TcpState, DropCause> {
    use TcpState::*;
    if f.contains(TcpFlags::RST) {
        return Ok(Closed);
    }
    let syn = f.contains(TcpFlags::SYN);
    let ack = f.contains(TcpFlags::ACK);
    let fin = f.contains(TcpFlags::FIN);
    Ok(match st {
        SynSent if !reply && syn && !ack => SynSent,
        SynSent if reply && syn && ack => SynRecv,
        // a server still holding an earlier connection of the tuple in
        // TIME_WAIT answers the new SYN with that connection's bare ACK: it
        // passes, changing nothing (conntrack ignores it the same way), so
        // the client answers with the RST that ends the TIME_WAIT and its
        // next SYN opens the connection
        SynSent if reply && f == TcpFlags::ACK => SynSent,
        SynSent => return Err(DropCause::CtInvalid),
        SynRecv if reply && syn && ack => SynRecv,
        SynRecv if !reply && ack && !syn => {
            if fin {
                FinWait {
                    orig: true,
                    reply: false,
                }
            } else {
                Established
            }
        }
        SynRecv => return Err(DropCause::CtInvalid),
        Established | FinWait { .. } if syn => return Err(DropCause::CtInvalid),
        Established if fin => FinWait {
            orig: !reply,
            reply,
        },
        Established => Established,
        FinWait { orig, reply: r } if fin => {
            let (o, r) = (orig || !reply, r || reply);
            if o && r {
                TimeWait
            } else {
                FinWait { orig: o, reply: r }
            }
        }
        s @ FinWait { .. } => s,
        // a new connection reusing the tuple
        TimeWait | Closed if reopens(st, reply, f) => SynSent,
        s @ (TimeWait | Closed) => s,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tcp(f: TcpFlags) -> L4Info {
        L4Info::Tcp { flags: f }
    }
    const S: TcpFlags = TcpFlags::SYN;
    const A: TcpFlags = TcpFlags::ACK;
    const F: TcpFlags = TcpFlags::FIN;

    #[test]
    fn handshake_data_teardown() {
        let mut c = Conn::open(tcp(S)).unwrap();
        let steps = [
            (Dir::Reply, S | A, TcpState::SynRecv),
            (Dir::Original, A, TcpState::Established),
            (Dir::Reply, A, TcpState::Established),
            (
                Dir::Original,
                F | A,
                TcpState::FinWait {
                    orig: true,
                    reply: false,
                },
            ),
            (Dir::Reply, F | A, TcpState::TimeWait),
            (Dir::Original, A, TcpState::TimeWait),
        ];
        for (d, f, want) in steps {
            c.update(d, tcp(f)).unwrap();
            assert_eq!(c, Conn::Tcp(want));
        }
        // reuse after TIME_WAIT
        c.update(Dir::Original, tcp(S)).unwrap();
        assert_eq!(c, Conn::Tcp(TcpState::SynSent));
    }

    /// A server that still holds the tuple's last connection in TIME_WAIT
    /// answers a new SYN with that connection's ACK: it passes without
    /// changing the state (as conntrack ignores it), the client's RST closes
    /// the connection, and the client's next SYN opens it again.
    #[test]
    fn a_stale_ack_to_a_new_syn_passes_and_the_retry_opens() {
        let mut c = Conn::open(tcp(S)).unwrap();
        c.update(Dir::Reply, tcp(A)).unwrap();
        assert_eq!(c, Conn::Tcp(TcpState::SynSent));
        c.update(Dir::Original, tcp(TcpFlags::RST)).unwrap();
        assert_eq!(c, Conn::Tcp(TcpState::Closed));
        c.update(Dir::Original, tcp(S)).unwrap();
        c.update(Dir::Reply, tcp(S | A)).unwrap();
        c.update(Dir::Original, tcp(A)).unwrap();
        assert_eq!(c, Conn::Tcp(TcpState::Established));
    }

    #[test]
    fn invalid_sequences() {
        assert_eq!(Conn::open(tcp(A)), Err(DropCause::CtInvalid));
        let mut c = Conn::open(tcp(S)).unwrap();
        assert_eq!(
            c.update(Dir::Reply, tcp(F | A)),
            Err(DropCause::CtInvalid),
            "a FIN before SYN-ACK"
        );
        assert_eq!(
            c.update(Dir::Original, tcp(A)),
            Err(DropCause::CtInvalid),
            "the client's ACK before SYN-ACK"
        );
        c.update(Dir::Reply, tcp(TcpFlags::RST)).unwrap();
        assert_eq!(c, Conn::Tcp(TcpState::Closed));
        assert_eq!(
            Conn::open(L4Info::IcmpEcho { request: false }),
            Err(DropCause::CtInvalid)
        );
    }

    #[test]
    fn timeouts_in_ns_are_the_durations() {
        let t = Timeouts {
            syn_sent: Duration::from_millis(1),
            syn_recv: Duration::from_millis(2),
            established: Duration::from_millis(3),
            fin_wait: Duration::from_millis(4),
            time_wait: Duration::from_millis(5),
            close: Duration::from_millis(6),
            udp: Duration::from_millis(7),
            udp_replied: Duration::from_millis(8),
            icmp: Duration::from_millis(9),
            other: Duration::from_millis(10),
            emergency: Duration::from_micros(1500),
        };
        let ns = TimeoutsNs::of(&t);
        let all = [
            Conn::Tcp(TcpState::SynSent),
            Conn::Tcp(TcpState::SynRecv),
            Conn::Tcp(TcpState::Established),
            Conn::Tcp(TcpState::FinWait {
                orig: true,
                reply: false,
            }),
            Conn::Tcp(TcpState::TimeWait),
            Conn::Tcp(TcpState::Closed),
            Conn::Udp { replied: false },
            Conn::Udp { replied: true },
            Conn::Icmp,
            Conn::Other { replied: true },
        ];
        for c in all {
            for e in [false, true] {
                assert_eq!(
                    c.timeout_ns_in(&ns, e),
                    c.timeout_in(&t, e).as_nanos() as u64,
                    "{c:?} emergency {e}"
                );
            }
        }
    }

    #[test]
    fn udp_and_timeouts() {
        let t = Timeouts::default();
        let mut c = Conn::open(L4Info::Udp).unwrap();
        assert_eq!(c.timeout(&t), t.udp);
        c.update(Dir::Reply, L4Info::Udp).unwrap();
        assert_eq!(c, Conn::Udp { replied: true });
        assert_eq!(c.timeout(&t), t.udp_replied);
    }
}
