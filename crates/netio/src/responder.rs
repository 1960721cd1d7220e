//! A request/response service on a UDP socket: a thread that answers each
//! datagram with what a handler makes of it (a UPF's PFCP endpoint). It stops
//! when dropped.

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// How often the thread looks whether it should stop.
const TICK: Duration = Duration::from_millis(50);

/// A running responder.
#[derive(Debug)]
pub struct Responder {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Responder {
    /// Binds `addr` and answers every datagram with `handle(datagram, from)`
    /// (none: no answer) on a thread named `name`.
    pub fn start(
        addr: SocketAddr,
        name: &str,
        mut handle: impl FnMut(&[u8], SocketAddr) -> Option<Vec<u8>> + Send + 'static,
    ) -> io::Result<Responder> {
        let socket = UdpSocket::bind(addr)?;
        socket.set_read_timeout(Some(TICK))?;
        let addr = socket.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let halt = stop.clone();
        let thread = std::thread::Builder::new()
            .name(name.to_string())
            .spawn(move || {
                let mut buf = vec![0u8; 65_536];
                // Relaxed: a flag alone, read again every TICK
                while !halt.load(Ordering::Relaxed) {
                    let Ok((n, from)) = socket.recv_from(&mut buf) else {
                        continue;
                    };
                    if let Some(reply) = handle(&buf[..n], from) {
                        let _ = socket.send_to(&reply, from);
                    }
                }
            })?;
        Ok(Responder {
            addr,
            stop,
            thread: Some(thread),
        })
    }

    /// The address it answers on (the port the kernel chose for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for Responder {
    fn drop(&mut self) {
        // Relaxed: see the thread's loop
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_each_datagram_and_stops_when_dropped() {
        let r = Responder::start("127.0.0.1:0".parse().unwrap(), "echo", |b, _| {
            (b != b"quiet").then(|| b.iter().rev().copied().collect())
        })
        .unwrap();
        let c = UdpSocket::bind("127.0.0.1:0").unwrap();
        c.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        c.send_to(b"abc", r.local_addr()).unwrap();
        let mut b = [0u8; 16];
        let n = c.recv(&mut b).unwrap();
        assert_eq!(&b[..n], b"cba");
        let at = r.local_addr();
        drop(r);
        // the socket is closed: nothing answers any more (rebinding the port
        // would race with other tests handed the same ephemeral port)
        c.set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        c.send_to(b"abc", at).unwrap();
        // an error is a refusal or a timeout: both mean nobody answered
        if let Ok(n) = c.recv(&mut b) {
            assert_ne!(&b[..n], b"cba", "a dropped responder answered");
        }
    }
}
