//! What the interface tests share: the test bed (or a skip), and a `flowshift
//! run` in its middle namespace that is killed if the test fails first.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use netio::testbed::Bed;

/// The test bed, or `None` (with a message) where the kernel refuses network
/// namespaces.
pub fn bed(prefix: &str) -> Option<Bed> {
    netio::testbed::privileged("the network namespace test bed", Bed::up(prefix))
}

/// `total` downloads from namespace `ns` to `to`, `threads` at a time:
/// download k sends the byte k and must receive `pattern(k)` whole.
pub fn downloads(
    ns: &str,
    to: SocketAddr,
    total: usize,
    threads: usize,
    pattern: fn(u8) -> Vec<u8>,
) {
    let per = total / threads;
    let hs: Vec<_> = (0..threads)
        .map(|t| {
            let ns = ns.to_string();
            std::thread::spawn(move || {
                netio::netns::enter(&ns).unwrap();
                for i in 0..per {
                    let seed = (t * per + i) as u8;
                    let mut s = TcpStream::connect_timeout(&to, Duration::from_secs(5))
                        .unwrap_or_else(|e| panic!("connection {seed}: {e}"));
                    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                    s.write_all(&[seed]).unwrap();
                    let mut got = Vec::new();
                    s.read_to_end(&mut got).unwrap();
                    assert!(got == pattern(seed), "download {seed}: {} bytes", got.len());
                }
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
}

/// Waits until the `flowshift run` of `child`, its standard error going to
/// `log`, says it forwards (its tables built, its threads started); panics
/// with what it printed if it ends first or takes 30 s.
pub fn wait_forwarding(log: &Path, child: &mut Child) {
    let t0 = std::time::Instant::now();
    loop {
        let err = std::fs::read_to_string(log).unwrap_or_default();
        if err.contains("flowshift: forwarding") {
            return;
        }
        assert!(
            child.try_wait().unwrap().is_none(),
            "the run ended before forwarding: {err}"
        );
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "not forwarding after 30 s: {err}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A `flowshift run` on the bed's interfaces, its standard error going to a
/// file (read while it runs); killed on drop unless stopped.
pub struct Running(Option<Child>, PathBuf);

impl Running {
    /// Starts `flowshift run --config CONFIG --iface A,B --workers 2 EXTRA…` in
    /// the bed's middle namespace.
    pub fn start(bed: &Bed, config: &Path, extra: &[&str]) -> Running {
        let (a, b) = bed.ifaces();
        let log = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!(
            "run-{}-{}.log",
            bed.prefix,
            std::process::id()
        ));
        let child = Command::new("ip")
            .args([
                "netns",
                "exec",
                &bed.middle(),
                env!("CARGO_BIN_EXE_flowshift"),
                "run",
            ])
            .args(["--config", config.to_str().unwrap()])
            .args(["--iface", &format!("{a},{b}"), "--workers", "2"])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        Running(Some(child), log)
    }

    /// The run's process id (`ip netns exec` runs flowshift in its place).
    #[allow(dead_code)] // not every test binary asks
    pub fn pid(&self) -> u32 {
        self.0.as_ref().expect("running").id()
    }

    /// Waits until the run says it forwards (its tables built, its threads
    /// started); panics with what it printed if it ends or takes 30 s.
    pub fn wait_forwarding(&mut self) {
        wait_forwarding(&self.1, self.0.as_mut().expect("running"));
    }

    /// The ended child's output, its standard error from the file.
    fn output(&mut self, child: Child) -> Output {
        let mut out = child.wait_with_output().unwrap();
        out.stderr = std::fs::read(&self.1).unwrap_or_default();
        let _ = std::fs::remove_file(&self.1);
        out
    }

    /// Ctrl-C, then the run's exit status and output.
    pub fn interrupt(mut self) -> Output {
        let child = self.0.take().expect("running");
        let k = Command::new("kill")
            .args(["-INT", &child.id().to_string()])
            .status()
            .unwrap();
        assert!(k.success());
        self.output(child)
    }

    /// Waits up to `limit` for the run to end by itself: its exit status and
    /// output, or `None` (still running).
    pub fn wait_for(mut self, limit: std::time::Duration) -> Option<Output> {
        let t0 = std::time::Instant::now();
        while t0.elapsed() < limit {
            let c = self.0.as_mut().expect("running");
            if c.try_wait().unwrap().is_some() {
                let child = self.0.take().unwrap();
                return Some(self.output(child));
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        None
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(c) = &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A TCP server in namespace `ns` at `at` that runs `serve` on each
/// connection in a thread of its own. Returns once it listens.
fn serve_each(ns: &str, at: SocketAddr, serve: impl Fn(TcpStream) + Send + Clone + 'static) {
    let ns = ns.to_string();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        netio::netns::enter(&ns).unwrap();
        let l = std::net::TcpListener::bind(at).unwrap();
        tx.send(()).unwrap();
        for s in l.incoming().flatten() {
            let serve = serve.clone();
            std::thread::spawn(move || serve(s));
        }
    });
    rx.recv().unwrap();
}

/// An echo server in namespace `ns` at `at`: reports each connection's peer
/// (as the NAT maps it) and echoes what it reads. Returns once it listens.
pub fn echo_server(ns: &str, at: SocketAddr) -> std::sync::mpsc::Receiver<SocketAddr> {
    let (peers, rx) = std::sync::mpsc::channel();
    serve_each(ns, at, move |mut s| {
        let _ = peers.send(s.peer_addr().unwrap());
        let mut b = [0u8; 4096];
        while let Ok(n) = s.read(&mut b) {
            if n == 0 || s.write_all(&b[..n]).is_err() {
                return;
            }
        }
    });
    rx
}

/// The download server `downloads` talks to, in namespace `ns` at `at`:
/// each connection's first byte `k` seeds it and gets `pattern(k)`, then the
/// server closes (it holds the connection in TIME_WAIT). Returns once it
/// listens.
pub fn download_server(ns: &str, at: SocketAddr, pattern: fn(u8) -> Vec<u8>) {
    serve_each(ns, at, move |mut s| {
        let mut seed = [0u8; 1];
        if s.read_exact(&mut seed).is_ok() {
            let _ = s.write_all(&pattern(seed[0]));
        }
    });
}

/// [`download_server`], each connection's peer sent to `peers` first.
pub fn serve_each_peer(
    ns: &str,
    at: SocketAddr,
    peers: std::sync::mpsc::Sender<SocketAddr>,
    pattern: fn(u8) -> Vec<u8>,
) {
    serve_each(ns, at, move |mut s| {
        let _ = peers.send(s.peer_addr().unwrap());
        let mut seed = [0u8; 1];
        if s.read_exact(&mut seed).is_ok() {
            let _ = s.write_all(&pattern(seed[0]));
        }
    });
}

/// A paced TCP server in namespace `ns` at `at`: each connection's first byte
/// seeds it, then `chunks` chunks of `chunk` bytes, byte `i` being
/// `pattern(seed, i)`, one chunk every `pace`. Returns once it listens.
pub fn paced_server(
    ns: &str,
    at: SocketAddr,
    (chunks, chunk, pace): (usize, usize, Duration),
    pattern: fn(u8, usize) -> u8,
) {
    serve_each(ns, at, move |mut s| {
        let mut seed = [0u8; 1];
        if s.read_exact(&mut seed).is_err() {
            return;
        }
        for c in 0..chunks {
            let b: Vec<u8> = (c * chunk..(c + 1) * chunk)
                .map(|i| pattern(seed[0], i))
                .collect();
            if s.write_all(&b).is_err() {
                return;
            }
            std::thread::sleep(pace);
        }
    });
}

/// A paced TCP server in namespace `ns` at `at` until `stop` (or a minute):
/// each connection's first two bytes seed it, then `chunk` bytes every
/// `pace`, byte `i` being `pattern(seed, i)`, and the connection closes.
/// Returns once it listens.
pub fn server_until(
    ns: &str,
    at: SocketAddr,
    stop: &'static std::sync::atomic::AtomicBool,
    (chunk, pace): (usize, Duration),
    pattern: fn(u16, usize) -> u8,
) {
    use std::sync::atomic::Ordering;
    serve_each(ns, at, move |mut s| {
        let mut seed = [0u8; 2];
        if s.read_exact(&mut seed).is_err() {
            return;
        }
        let seed = u16::from_be_bytes(seed);
        let t = std::time::Instant::now();
        let mut i = 0;
        while !stop.load(Ordering::Relaxed) && t.elapsed() < Duration::from_secs(60) {
            let c: Vec<u8> = (i..i + chunk).map(|k| pattern(seed, k)).collect();
            if s.write_all(&c).is_err() {
                return;
            }
            i += chunk;
            std::thread::sleep(pace);
        }
    });
}

/// The sum of a run report's `drops` (every cause).
pub fn drops(r: &serde_json::Value) -> u64 {
    r["drops"]
        .as_object()
        .expect("a report's drops")
        .values()
        .map(|v| v.as_u64().expect("a count"))
        .sum()
}

/// A run report accounts for every packet: `packets_in` = `packets_out` +
/// the drops; `what` names the run in the failure.
pub fn assert_accounted(r: &serde_json::Value, what: &str) {
    assert_eq!(
        r["packets_in"].as_u64().unwrap(),
        r["packets_out"].as_u64().unwrap() + drops(r),
        "{what}: {}",
        r["drops"]
    );
}
