//! `--nat-log DEST`: every NAT mapping created and deleted, logged as a
//! provider must log translations — JSON lines to a file (`json:PATH`, one
//! object per event, as conntrack's event mode prints them) or IPFIX to a
//! collector (`ipfix:HOST:PORT`, RFC 7011 with RFC 8158's NAT44 BIB events).
//! The NATs only queue their events ([`nf::nat::EventHub`], bounded per
//! core, a full queue counts the loss as the NAT's `log_lost`); this thread
//! drains them every few milliseconds, stamps them and writes them, off the
//! packet path.

pub mod ipfix;

use std::io::Write;
use std::net::{SocketAddr, ToSocketAddrs, UdpSocket};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use nf::nat::{EventHub, NatEvent};

/// How often the queues are drained.
const PERIOD: Duration = Duration::from_millis(10);
/// Events per core's queue unless `[io] nat_log_queue` says otherwise.
pub const QUEUE: usize = 65_536;

/// Where the events go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Dest {
    /// JSON lines appended to a file.
    Json(PathBuf),
    /// IPFIX messages over UDP to a collector.
    Ipfix(SocketAddr),
}

impl std::str::FromStr for Dest {
    type Err = anyhow::Error;

    fn from_str(s: &str) -> anyhow::Result<Dest> {
        match s.split_once(':') {
            Some(("json", p)) if !p.is_empty() => Ok(Dest::Json(PathBuf::from(p))),
            Some(("ipfix", a)) => {
                let at = a
                    .to_socket_addrs()
                    .with_context(|| format!("--nat-log {s}: `{a}` is not HOST:PORT"))?
                    .next()
                    .with_context(|| format!("--nat-log {s}: `{a}` has no address"))?;
                Ok(Dest::Ipfix(at))
            }
            _ => anyhow::bail!(
                "--nat-log {s}: write json:PATH (JSON lines to a file) or ipfix:HOST:PORT \
                 (IPFIX to a collector, e.g. ipfix:127.0.0.1:4739)"
            ),
        }
    }
}

impl std::fmt::Display for Dest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Dest::Json(p) => write!(f, "json:{}", p.display()),
            Dest::Ipfix(a) => write!(f, "ipfix:{a}"),
        }
    }
}

/// What the logger wrote.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Written {
    /// Records written (or sent).
    pub records: u64,
    /// Records a failed write or send lost.
    pub failed: u64,
}

impl Written {
    /// `, N lost by failed writes` when some were, for a summary line.
    pub fn failures(&self) -> String {
        if self.failed == 0 {
            return String::new();
        }
        format!(", {} lost by failed writes", self.failed)
    }
}

/// Writes a batch of events observed at one time.
trait Out: Send {
    fn write(&mut self, events: &[NatEvent], time_ms: u64) -> std::io::Result<()>;
}

/// JSON lines.
struct Json<W: Write + Send>(std::io::BufWriter<W>);

/// One event as a JSON line (no allocation per field).
pub fn json_line(out: &mut impl Write, e: &NatEvent, time_ms: u64) -> std::io::Result<()> {
    writeln!(
        out,
        r#"{{"time_ms":{time_ms},"event":"{}","proto":{},"int_addr":"{}","int_port":{},"ext_addr":"{}","ext_port":{}}}"#,
        if e.created { "create" } else { "delete" },
        e.proto,
        e.int.0,
        e.int.1,
        e.ext.0,
        e.ext.1
    )
}

impl<W: Write + Send> Out for Json<W> {
    fn write(&mut self, events: &[NatEvent], time_ms: u64) -> std::io::Result<()> {
        for e in events {
            json_line(&mut self.0, e, time_ms)?;
        }
        self.0.flush()
    }
}

/// IPFIX over UDP.
struct Ipfix {
    sock: UdpSocket,
    sequence: u32,
}

impl Out for Ipfix {
    fn write(&mut self, events: &[NatEvent], time_ms: u64) -> std::io::Result<()> {
        for chunk in events.chunks(ipfix::PER_MESSAGE) {
            let m = ipfix::message(chunk, time_ms, self.sequence, 0);
            self.sequence = self.sequence.wrapping_add(chunk.len() as u32);
            self.sock.send(&m)?;
        }
        Ok(())
    }
}

/// The logger thread; [`finish`](Logger::finish) drains what is left.
pub struct Logger {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Written>,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl Logger {
    /// Opens `dest` (an error if it cannot be) and drains `hub` into it from
    /// a thread.
    pub fn start(dest: &Dest, hub: Arc<EventHub>) -> anyhow::Result<Logger> {
        let out: Box<dyn Out> = match dest {
            Dest::Json(p) => {
                let f = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(p)
                    .with_context(|| format!("--nat-log {dest}: cannot open the file"))?;
                Box::new(Json(std::io::BufWriter::new(f)))
            }
            Dest::Ipfix(a) => {
                let any: SocketAddr = if a.is_ipv4() {
                    "0.0.0.0:0".parse()?
                } else {
                    "[::]:0".parse()?
                };
                let sock = UdpSocket::bind(any)?;
                sock.connect(a)
                    .with_context(|| format!("--nat-log {dest}: cannot reach the collector"))?;
                Box::new(Ipfix { sock, sequence: 0 })
            }
        };
        Ok(Logger::spawn(out, hub))
    }

    fn spawn(mut out: Box<dyn Out>, hub: Arc<EventHub>) -> Logger {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::Builder::new()
            .name("nat-log".into())
            .spawn(move || {
                let mut w = Written::default();
                let mut batch = Vec::new();
                loop {
                    // (pairs with `finish`'s store: once seen, one last drain
                    // takes what the stopped cores queued)
                    let last = s.load(Ordering::Acquire);
                    batch.clear();
                    let n = hub.drain(&mut batch) as u64;
                    if n > 0 {
                        match out.write(&batch, now_ms()) {
                            Ok(()) => w.records += n,
                            Err(_) => w.failed += n,
                        }
                    }
                    if last {
                        return w;
                    }
                    std::thread::sleep(PERIOD);
                }
            })
            .expect("the system starts the logger thread");
        Logger { stop, thread }
    }

    /// Writes what is still queued (the cores have stopped) and ends.
    pub fn finish(self) -> Written {
        // (pairs with the thread's load)
        self.stop.store(true, Ordering::Release);
        self.thread.join().unwrap_or_default()
    }
}

/// A logger draining `hub` into JSON lines on `w` (what the bench runs
/// beside the chain to measure what logging costs the packet path).
pub fn json_to(w: impl Write + Send + 'static, hub: Arc<EventHub>) -> Logger {
    Logger::spawn(Box::new(Json(std::io::BufWriter::new(w))), hub)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    #[test]
    fn destinations_parse_or_say_what_to_write() {
        assert_eq!(
            "json:/tmp/x.jsonl".parse::<Dest>().unwrap(),
            Dest::Json("/tmp/x.jsonl".into())
        );
        assert_eq!(
            "ipfix:127.0.0.1:4739".parse::<Dest>().unwrap(),
            Dest::Ipfix("127.0.0.1:4739".parse().unwrap())
        );
        for bad in ["x.jsonl", "json:", "ipfix:nowhere", "syslog:1"] {
            let e = bad.parse::<Dest>().unwrap_err().to_string();
            assert!(e.contains("--nat-log"), "{bad}: {e}");
        }
    }

    #[test]
    fn a_json_line_reads_back() {
        let e = NatEvent {
            created: false,
            proto: 6,
            int: (Ipv4Addr::new(10, 0, 0, 2), 40000),
            ext: (Ipv4Addr::new(203, 0, 113, 7), 1234),
        };
        let mut b = Vec::new();
        json_line(&mut b, &e, 5).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&b).unwrap();
        assert_eq!(v["event"], "delete");
        assert_eq!(v["int_addr"], "10.0.0.2");
        assert_eq!(v["ext_port"], 1234);
        assert_eq!(v["time_ms"], 5);
    }

    #[test]
    fn ipfix_messages_reach_a_collector_with_every_record() {
        let collector = UdpSocket::bind("127.0.0.1:0").unwrap();
        let dest = Dest::Ipfix(collector.local_addr().unwrap());
        let hub = Arc::new(EventHub::new(1024));
        let mut q = hub.register();
        let n = ipfix::PER_MESSAGE + 3;
        for i in 0..n as u16 {
            assert!(q
                .push(NatEvent {
                    created: true,
                    proto: 17,
                    int: (Ipv4Addr::new(10, 0, 0, 2), i),
                    ext: (Ipv4Addr::new(203, 0, 113, 7), i),
                })
                .is_ok());
        }
        let w = Logger::start(&dest, hub).unwrap().finish();
        assert_eq!(
            w,
            Written {
                records: n as u64,
                failed: 0
            }
        );
        collector
            .set_read_timeout(Some(Duration::from_secs(2)))
            .unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 2048];
        while got.len() < n {
            let k = collector.recv(&mut buf).unwrap();
            got.extend(ipfix::records(&buf[..k]).unwrap());
        }
        let ports: Vec<u16> = got.iter().map(|r| r.3 .1).collect();
        assert_eq!(ports, (0..n as u16).collect::<Vec<_>>());
    }
}
