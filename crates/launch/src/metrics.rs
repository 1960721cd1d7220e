//! `--metrics ADDR`: the run's live metrics as a Prometheus text endpoint
//! (`GET /metrics`; any other path is 404). One thread answers one request at a
//! time; it lives as long as the process.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::sync::Arc;

use anyhow::Context;
use runspec::metrics::Metrics;

/// Binds `addr` (before the run starts, so a bad address is an error at once)
/// and serves `metrics` from a thread. An address other than loopback is
/// refused unless `public` (`[io] metrics_public = true`): the endpoint has
/// no authentication, and what it tells (per-core load, flows, drops) is for
/// the operator's scraper, not for whoever reaches the machine.
pub fn serve(
    addr: &str,
    metrics: Arc<Metrics>,
    public: bool,
) -> anyhow::Result<std::net::SocketAddr> {
    let l = TcpListener::bind(addr).with_context(|| format!("--metrics {addr}: cannot listen"))?;
    let at = l.local_addr()?;
    if !at.ip().is_loopback() && !public {
        anyhow::bail!(
            "--metrics {addr} (`[io] metrics`) is reachable from the network and the endpoint \
             has no authentication: serve it on loopback (e.g. 127.0.0.1:9100) behind your \
             scraper's proxy, or set `[io] metrics_public = true`"
        );
    }
    std::thread::Builder::new()
        .name("metrics".into())
        .spawn(move || {
            for s in l.incoming().flatten() {
                let mut line = String::new();
                let mut r = BufReader::new(&s);
                if r.read_line(&mut line).is_err() {
                    continue;
                }
                // the rest of the request's head
                let mut h = String::new();
                while r.read_line(&mut h).is_ok_and(|n| n > 2) {
                    h.clear();
                }
                let mut w = &s;
                let _ = if line.starts_with("GET /metrics") {
                    let body = metrics.render();
                    write!(
                        w,
                        "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    )
                } else {
                    write!(w, "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                };
            }
        })?;
    Ok(at)
}
