//! A working core's end of spill-over (Sirius §3.3.4; the rule is
//! `pool::spill`, pure): a new TCP connection to one of the spilling
//! tenants' addresses, arriving on the first interface, that this core has
//! no room for goes to the spill node as a [`Repr::Steer`] message instead of
//! through the chain; a later packet of a tenant's connection that finds no
//! state here (the chain refuses it as invalid) goes there too while the
//! spill lingers. The spill node's NIC model takes a steered frame as if it
//! came in by that port: its chain makes the connection's state there, its
//! NAT its own mapping, so the replies come back to it.

use std::io;
use std::net::{IpAddr, UdpSocket};

use pool::protocol::Repr;
use pool::spill::{Place, Spill};

/// The window over which new connections are counted against the capacity.
const WINDOW_NS: u64 = 100_000_000;

/// A core's spill-over.
pub(crate) struct SpillTx {
    sock: UdpSocket,
    sealed: crate::sealed::Sealed,
    rule: Spill,
    vips: Vec<IpAddr>,
    buf: Vec<u8>,
    /// Packets steered to the spill node, and those its socket refused
    /// (dropped, counted).
    pub steered: u64,
    pub failed: u64,
}

impl SpillTx {
    /// One of `cores` cores' share of `cfg`.
    pub fn open(
        cfg: &runspec::SpillTo,
        cores: usize,
        key: Option<&pool::auth::Key>,
    ) -> io::Result<SpillTx> {
        // (at least one a window per core once the capacity is not 0)
        let per_window = u64::from(cfg.capacity) * WINDOW_NS;
        let budget = per_window.div_ceil(1_000_000_000 * cores.max(1) as u64);
        Ok(SpillTx {
            sock: crate::replica::connected(cfg.to)?,
            sealed: crate::sealed::Sealed::new(key),
            rule: Spill::new(
                u32::try_from(budget).unwrap_or(u32::MAX),
                WINDOW_NS,
                u64::from(cfg.linger_ms) * 1_000_000,
            ),
            vips: cfg.vips.clone(),
            buf: Vec::with_capacity(2048),
            steered: 0,
            failed: 0,
        })
    }

    /// New connections spilled.
    pub fn spilled(&self) -> u64 {
        self.rule.spilled
    }

    /// True for a packet of a spilling tenant: in by the first interface,
    /// TCP, to one of the tenants' addresses.
    fn tenant(&self, p: &nf::Packet) -> bool {
        p.port == 0 && p.info.tuple.proto == 6 && self.vips.contains(&p.info.tuple.dst)
    }

    /// At `now`, whether `p` goes to the spill node: a packet of a spilling
    /// tenant that has no state here (`held` says whether it has) and opens
    /// a connection this core has no room for, or follows a spilled one.
    /// `held` is asked only of the tenant's packets that may go.
    pub fn away(&mut self, p: &nf::Packet, now: u64, held: impl FnOnce() -> bool) -> bool {
        if !self.tenant(p) {
            return false;
        }
        let syn = match p.info.l4 {
            wire::L4Info::Tcp { flags } => flags.0 & 0x12 == 0x02,
            _ => false,
        };
        if !syn && !self.rule.active(now) {
            return false;
        }
        if held() {
            return false;
        }
        let place = if syn {
            self.rule.on_new_flow(now)
        } else {
            self.rule.on_stateless(now)
        };
        place == Place::Away
    }

    /// Sends `p`'s frame to the spill node: true if the socket took it.
    pub fn steer(&mut self, p: &nf::Packet) -> bool {
        let m = Repr::Steer {
            port: p.port,
            frame: &p.data,
        };
        if m.emit_vec(&mut self.buf).is_err() {
            self.failed += 1;
            return false;
        }
        loop {
            match self.sealed.send(&self.sock, &self.buf) {
                Ok(_) => {
                    self.steered += 1;
                    return true;
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::Interrupted | io::ErrorKind::WouldBlock
                    ) =>
                {
                    std::thread::yield_now();
                }
                Err(_) => {
                    self.failed += 1;
                    return false;
                }
            }
        }
    }
}
