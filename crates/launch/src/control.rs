//! The control socket of a running instance (`flowshift ctl` is its
//! client): a Unix stream socket, one JSON request per line and one JSON
//! answer per line. Requests: `{"cmd":"stats"}` (the live counters),
//! `{"cmd":"flows","filter":"…"}` (the flow entries, [`runspec::control`]),
//! `{"cmd":"delete","filter":"…"}` (delete them; an empty filter needs
//! `"all":true`). Answers: `{"ok":true,…}` or `{"ok":false,"error":"…"}`.
//!
//! Who may use it is decided by the file's permissions: the socket is the
//! owner's alone (0600, in a directory of mode 0700). Each connection is
//! served by a thread of its own; a request is read with a bound on its size
//! and an idle timeout, and a malformed one gets an error: nothing a client
//! sends reaches the packet path except a well-formed question, which the
//! working cores answer between bursts.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use runspec::control::{Control, FlowFilter};
use runspec::metrics::Metrics;
use serde::{Deserialize, Serialize};

use crate::reload::Reloader;

/// Where interface runs put their socket by default, one per process
/// (`<pid>.sock`); `flowshift ctl` finds it there.
pub const DIR: &str = "/run/flowshift";

/// The longest request line.
const MAX_REQUEST: u64 = 64 * 1024;
/// A connection idle this long is closed.
const IDLE: Duration = Duration::from_secs(60);

/// A request.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "cmd", rename_all = "lowercase")]
pub enum Request {
    /// The live counters.
    Stats,
    /// The flow entries the filter holds for.
    Flows {
        #[serde(default)]
        filter: String,
        /// Rows at most (the others are counted in `matched`).
        #[serde(default = "default_limit")]
        limit: usize,
    },
    /// Delete the flow entries the filter holds for.
    Delete {
        #[serde(default)]
        filter: String,
        /// Needed with an empty filter (every flow).
        #[serde(default)]
        all: bool,
        /// Rows of deleted flows listed at most.
        #[serde(default = "default_limit")]
        limit: usize,
    },
    /// Read the configuration file (this one, else the running one's) again
    /// and apply it live.
    Reload {
        #[serde(default)]
        file: Option<PathBuf>,
        /// Once applied, delete every flow (their states released as expiry
        /// releases them): new flows only are judged by the new configuration.
        #[serde(default)]
        flush: bool,
    },
}

/// Rows an answer lists unless the request says otherwise.
pub const LIMIT: usize = 100_000;

fn default_limit() -> usize {
    LIMIT
}

/// A socket being served; the file goes when this is dropped.
#[derive(Debug)]
pub struct Served {
    /// Its path.
    pub path: PathBuf,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The default socket of this process.
pub fn default_path() -> PathBuf {
    Path::new(DIR).join(format!("{}.sock", std::process::id()))
}

/// Binds `path` (a socket another live instance serves is an error; a
/// stale one is replaced) and serves requests from a thread.
pub fn serve(
    path: &Path,
    cores: Arc<Control>,
    metrics: Arc<Metrics>,
    reloader: Option<Arc<Reloader>>,
) -> anyhow::Result<Served> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        if !dir.exists() {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("control socket: cannot create {}", dir.display()))?;
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
        }
    }
    if path.exists() {
        if UnixStream::connect(path).is_ok() {
            anyhow::bail!(
                "control socket {}: another flowshift serves it (give this one another with --control)",
                path.display()
            );
        }
        std::fs::remove_file(path)
            .with_context(|| format!("control socket {}: cannot replace it", path.display()))?;
    }
    let l = UnixListener::bind(path)
        .with_context(|| format!("control socket {}: cannot listen", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    std::thread::Builder::new()
        .name("control".into())
        .spawn(move || {
            for s in l.incoming().flatten() {
                let live = Live {
                    cores: cores.clone(),
                    metrics: metrics.clone(),
                    reloader: reloader.clone(),
                };
                let _ = std::thread::Builder::new()
                    .name("control-conn".into())
                    .spawn(move || connection(s, &live));
            }
        })?;
    Ok(Served {
        path: path.to_path_buf(),
    })
}

/// What a request reaches: the cores, the metrics, the reloader.
struct Live {
    cores: Arc<Control>,
    metrics: Arc<Metrics>,
    reloader: Option<Arc<Reloader>>,
}

/// Serves one connection's requests until it closes or idles.
fn connection(s: UnixStream, live: &Live) {
    let _ = s.set_read_timeout(Some(IDLE));
    let Ok(mut w) = s.try_clone() else { return };
    let mut r = BufReader::new(s);
    loop {
        let mut line = String::new();
        match (&mut r).take(MAX_REQUEST).read_line(&mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        if !line.ends_with('\n') && line.len() as u64 >= MAX_REQUEST {
            // the rest of the line is read and dropped a bounded piece at a
            // time, never held
            if !skip_line(&mut r) {
                return;
            }
            let e = error(&format!("a request is at most {MAX_REQUEST} bytes"));
            if writeln!(w, "{e}").is_err() {
                return;
            }
            continue;
        }
        if line.trim().is_empty() {
            continue;
        }
        let answer = match serde_json::from_str::<Request>(&line) {
            Ok(req) => answer(req, live),
            Err(e) => error(&format!(
                "not a request ({e}): send e.g. {{\"cmd\":\"flows\",\"filter\":\"tcp dport=80\"}}"
            )),
        };
        // one write: a `Value` displayed writes piece by piece
        let mut out = answer.to_string();
        out.push('\n');
        if w.write_all(out.as_bytes()).is_err() {
            return;
        }
    }
}

/// Reads up to the end of the current line; false at the end of the stream.
fn skip_line(r: &mut impl BufRead) -> bool {
    loop {
        let Ok(buf) = r.fill_buf() else { return false };
        if buf.is_empty() {
            return false;
        }
        match buf.iter().position(|&b| b == b'\n') {
            Some(i) => {
                r.consume(i + 1);
                return true;
            }
            None => {
                let n = buf.len();
                r.consume(n);
            }
        }
    }
}

fn error(e: &str) -> serde_json::Value {
    serde_json::json!({ "ok": false, "error": e })
}

/// One request's answer.
fn answer(req: Request, live: &Live) -> serde_json::Value {
    let (filter, delete, limit) = match req {
        Request::Stats => {
            return serde_json::json!({ "ok": true, "stats": counters(&live.metrics) })
        }
        Request::Reload { file, flush } => {
            let Some(r) = &live.reloader else {
                return error("this run does not reload");
            };
            return match r.reload(file.as_deref()) {
                Ok(done) if flush => {
                    eprintln!("flowshift: reload: {done}");
                    match live.cores.ask(&FlowFilter::default(), true, 0) {
                        Ok(a) => {
                            eprintln!("flowshift: reload: {} flows flushed", a.deleted);
                            serde_json::json!({
                                "ok": true, "reloaded": done, "deleted": a.deleted,
                                "offloaded": a.offloaded,
                            })
                        }
                        Err(e) => error(&format!("{done}; flushing: {e}")),
                    }
                }
                Ok(done) => {
                    eprintln!("flowshift: reload: {done}");
                    serde_json::json!({ "ok": true, "reloaded": done })
                }
                Err(e) => {
                    eprintln!("flowshift: reload refused: {e}");
                    error(&e)
                }
            };
        }
        Request::Flows { filter, limit } => (filter, false, limit),
        Request::Delete { filter, all, limit } => {
            if filter.trim().is_empty() && !all {
                return error("deleting every flow needs `all` (ctl flows delete --all)");
            }
            (filter, true, limit)
        }
    };
    let f = match FlowFilter::parse(&filter) {
        Ok(f) => f,
        Err(e) => return error(&e),
    };
    match live.cores.ask(&f, delete, limit) {
        Ok(a) if delete => serde_json::json!({
            "ok": true, "deleted": a.deleted, "offloaded": a.offloaded, "matched": a.matched,
            "flows": a.rows,
        }),
        Ok(a) => serde_json::json!({ "ok": true, "matched": a.matched, "flows": a.rows }),
        Err(e) => error(&e),
    }
}

/// The Prometheus exposition as a map from series to value.
fn counters(metrics: &Metrics) -> serde_json::Map<String, serde_json::Value> {
    metrics
        .render()
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (k, v) = l.rsplit_once(' ')?;
            let v = match v.parse::<u64>() {
                Ok(n) => serde_json::json!(n),
                Err(_) => serde_json::json!(v.parse::<f64>().ok()?),
            };
            Some((k.to_string(), v))
        })
        .collect()
}

/// The client's side: sends `req` to the socket at `path` and returns the
/// answer, or the instance's error.
pub fn request(path: &Path, req: &Request) -> anyhow::Result<serde_json::Value> {
    let s = UnixStream::connect(path).with_context(|| {
        format!(
            "control socket {}: no flowshift answers there (not running, or stopped)",
            path.display()
        )
    })?;
    let mut w = s.try_clone()?;
    writeln!(w, "{}", serde_json::to_string(req)?)?;
    let mut line = String::new();
    BufReader::new(s).read_line(&mut line)?;
    if line.is_empty() {
        anyhow::bail!(
            "control socket {}: the instance closed the connection without an answer (it is stopping)",
            path.display()
        );
    }
    let v: serde_json::Value = serde_json::from_str(&line)
        .with_context(|| format!("control socket {}: not an answer", path.display()))?;
    if v["ok"] != serde_json::Value::Bool(true) {
        anyhow::bail!("{}", v["error"].as_str().unwrap_or("the instance refused"));
    }
    Ok(v)
}

/// The one running instance's socket in [`DIR`] (a socket nobody serves,
/// left by a killed instance, is skipped).
pub fn find() -> anyhow::Result<PathBuf> {
    let live: Vec<PathBuf> = std::fs::read_dir(DIR)
        .map(|d| {
            d.flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "sock"))
                .filter(|p| UnixStream::connect(p).is_ok())
                .collect()
        })
        .unwrap_or_default();
    match live.as_slice() {
        [one] => Ok(one.clone()),
        [] => anyhow::bail!(
            "no running flowshift serves a control socket in {DIR} (interface runs do; \
             give another with --socket)"
        ),
        many => anyhow::bail!(
            "{} running instances serve control sockets: choose one with --socket ({})",
            many.len(),
            many.iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sends `lines` on one connection; the answers.
    fn talk(lines: &[&str]) -> Vec<serde_json::Value> {
        let (a, b) = UnixStream::pair().unwrap();
        let t = std::thread::spawn(move || {
            let live = Live {
                cores: Arc::default(),
                metrics: Arc::default(),
                reloader: None,
            };
            connection(b, &live);
        });
        let mut w = a.try_clone().unwrap();
        for l in lines {
            w.write_all(l.as_bytes()).unwrap();
            w.write_all(b"\n").unwrap();
        }
        w.shutdown(std::net::Shutdown::Write).unwrap();
        let out: Vec<serde_json::Value> = BufReader::new(a)
            .lines()
            .map(|l| serde_json::from_str(&l.unwrap()).unwrap())
            .collect();
        t.join().unwrap();
        out
    }

    #[test]
    fn each_request_gets_its_answer_and_bad_ones_an_error() {
        let out = talk(&[
            r#"{"cmd":"stats"}"#,
            "garbage",
            r#"{"cmd":"reboot"}"#,
            r#"{"cmd":"flows","filter":"port=1"}"#,
            r#"{"cmd":"delete"}"#,
            r#"{"cmd":"flows"}"#,
        ]);
        assert_eq!(out.len(), 6, "{out:?}");
        assert_eq!(out[0]["ok"], true);
        assert!(out[0]["stats"]["flowshift_controller_rounds_total"].is_u64());
        assert!(out[1]["error"]
            .as_str()
            .unwrap()
            .starts_with("not a request"));
        assert!(out[2]["error"].as_str().unwrap().contains("reboot"));
        assert!(out[3]["error"]
            .as_str()
            .unwrap()
            .contains("unknown filter term"));
        assert!(out[4]["error"].as_str().unwrap().contains("needs `all`"));
        // no run attached
        assert!(out[5]["error"].as_str().unwrap().contains("not running"));
    }

    #[test]
    fn an_endless_line_is_refused_not_buffered() {
        let long = "x".repeat(MAX_REQUEST as usize + 10);
        let out = talk(&[&long, r#"{"cmd":"stats"}"#]);
        assert_eq!(out.len(), 2, "{out:?}");
        assert!(out[0]["error"].as_str().unwrap().contains("at most"));
        assert_eq!(out[1]["ok"], true, "the next request is served");
    }

    #[test]
    fn a_live_socket_is_not_taken_over_and_a_stale_one_is_replaced() {
        let dir = std::env::temp_dir().join(format!("fs-ctl-{}", std::process::id()));
        let path = dir.join("x.sock");
        let m = Arc::new(Metrics::default());
        let first = serve(&path, Arc::default(), m.clone(), None).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "the owner's alone");
        let e = serve(&path, Arc::default(), m.clone(), None).unwrap_err();
        assert!(e.to_string().contains("another flowshift serves it"), "{e}");
        let v = request(&path, &Request::Stats).unwrap();
        assert_eq!(v["ok"], true);
        drop(first);
        assert!(!path.exists());
        // a file left by a killed instance
        std::os::unix::net::UnixListener::bind(&path).unwrap();
        let again = serve(&path, Arc::default(), m, None).unwrap();
        drop(again);
        let _ = std::fs::remove_dir_all(dir);
    }
}
