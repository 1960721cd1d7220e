//! The pool's UDP sockets: one connected to a peer (copies, acknowledgements,
//! bulk syncs, steered frames), one listening at a node's replication
//! address. Non-blocking: the cores and the NIC-model thread poll them.

use std::io;
use std::net::{Ipv6Addr, SocketAddr, UdpSocket};

/// A non-blocking UDP socket connected to `addr`, from any local port.
pub fn connected(addr: SocketAddr) -> io::Result<UdpSocket> {
    let any: SocketAddr = if addr.is_ipv4() {
        ([0, 0, 0, 0], 0).into()
    } else {
        (Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let sock = UdpSocket::bind(any)?;
    sock.connect(addr)?;
    sock.set_nonblocking(true)?;
    Ok(sock)
}

/// A non-blocking UDP socket listening at `at`, with a receive buffer of
/// `buffer` bytes where the process may have one (room for bursts while
/// its reader is away).
pub fn listening(at: SocketAddr, buffer: usize) -> io::Result<UdpSocket> {
    let sock = UdpSocket::bind(at)?;
    sock.set_nonblocking(true)?;
    let _ = crate::grow_receive_buffer(&sock, buffer);
    Ok(sock)
}
