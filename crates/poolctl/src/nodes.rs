//! What both controllers do with a pool's nodes: their addresses and keys,
//! their configs (typed, read back before a node starts), starting them,
//! stopping them with their controller, printing their reports.

use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use anyhow::Context;
use launch::file::{NodeFile, PoolSection};
use netio::poolbed::{PoolBed, SYNC_PORT};

/// Node `i`'s replication address (its `[pool] listen`).
pub fn sync(i: usize) -> SocketAddr {
    SocketAddr::new(
        PoolBed::sync_addr(i).parse().expect("an address"),
        SYNC_PORT,
    )
}

/// Writes a new random pool key to `dir/pool.key`, readable by its owner
/// alone; its path and the key.
pub fn write_pool_key(dir: &Path) -> anyhow::Result<(PathBuf, pool::auth::Key)> {
    use std::os::unix::fs::OpenOptionsExt;
    let key = pool::auth::Key::new(rand::random());
    let path = dir.join("pool.key");
    // the last run's key goes (a key left by another user stays, and says so)
    match std::fs::remove_file(&path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(e).with_context(|| format!("replacing the pool key {}", path.display()))
        }
        _ => {}
    }
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .with_context(|| format!("writing the pool key {}", path.display()))?;
    writeln!(f, "{}", key.to_hex())?;
    Ok((path, key))
}

/// Node `i`'s config: the chain with its NAT pool, replicating to node i + 1
/// (with `replicate`), its messages sealed with the key in `key_file` (none:
/// bare, `insecure`).
pub fn node_config(
    chain: Option<&Path>,
    i: usize,
    nodes: usize,
    replicate: bool,
    key_file: Option<&Path>,
) -> anyhow::Result<NodeFile> {
    let mut f = NodeFile::from_chain(chain)?;
    f.run.nat_external = Some(vec![PoolBed::nat_pool(i)]);
    // the pool's processes share the machine's CPUs: a node's core may be
    // away for tens of milliseconds, and its ring must hold what arrives
    // meanwhile (a full ring drops, counted `ring_full`)
    f.run.ring_size.get_or_insert(8192);
    f.pool = replicate.then(|| PoolSection {
        listen: sync(i),
        secondary: sync((i + 1) % nodes),
        key_file: key_file.map(Path::to_path_buf),
        insecure: key_file.is_none(),
        bgp: None,
        pair_timeout_ms: None,
        primary: None,
        spill: None,
        split: Vec::new(),
    });
    Ok(f)
}

/// Starts node `i` with `workers` working cores, its config, log and report
/// `node{i}.toml`, `.log`, `.json` in `dir`.
pub fn start_node(bed: &PoolBed, dir: &Path, workers: usize, i: usize) -> anyhow::Result<Child> {
    let (f, b) = bed.node_ifaces(i);
    // (appended to: a restarted node's log follows its first run's)
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join(format!("node{i}.log")))?;
    use std::os::unix::process::CommandExt;
    Command::new("ip")
        .args(["netns", "exec", &bed.node(i)])
        .arg(std::env::current_exe()?)
        .args(["run", "--iface", &format!("{f},{b}")])
        .args(["--workers", &workers.to_string()])
        .arg("--config")
        .arg(dir.join(format!("node{i}.toml")))
        .arg("--json")
        .arg(dir.join(format!("node{i}.json")))
        .stdout(Stdio::null())
        .stderr(log)
        // a group of its own: a terminal's Ctrl-C reaches the controller,
        // which stops each node once (a second SIGINT ends a run at once)
        .process_group(0)
        .spawn()
        .with_context(|| format!("starting node {i}"))
}

/// The length of node `i`'s log in `dir` (0 before its first start): a
/// restarted node's lines follow it.
pub fn node_log_len(dir: &Path, i: usize) -> u64 {
    std::fs::metadata(dir.join(format!("node{i}.log"))).map_or(0, |m| m.len())
}

/// The nodes' processes: on an early return, killed (their bed goes too).
pub struct Nodes(pub Vec<Option<Child>>);

impl Nodes {
    /// Stops every node (SIGINT: each drains and writes its report) and
    /// waits for it: each node's exit status and its report from
    /// `dir/node{i}.json` (`null` for one that wrote none: killed, or down).
    pub fn stop(&mut self, dir: &Path) -> Vec<(String, serde_json::Value)> {
        for ch in self.0.iter().flatten() {
            let _ = netio::signal::interrupt(ch.id());
        }
        let mut out = Vec::new();
        for (i, ch) in self.0.iter_mut().enumerate() {
            let status = match ch.take() {
                Some(mut ch) => ch.wait().map_or_else(|e| e.to_string(), |s| s.to_string()),
                None => "not running".into(),
            };
            let report = std::fs::read_to_string(dir.join(format!("node{i}.json")))
                .ok()
                .and_then(|t| serde_json::from_str(&t).ok())
                .unwrap_or(serde_json::Value::Null);
            out.push((status, report));
        }
        out
    }
}

impl Drop for Nodes {
    fn drop(&mut self) {
        for c in self.0.iter_mut().flatten() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Each node's line of the pool's report: packets, replication, drops.
pub fn print_nodes(reports: &[serde_json::Value]) {
    println!(
        "node  packets in  out        replicated  lag p50/p99 µs  installed  unprotected  \
         synced  drops"
    );
    for (i, n) in reports.iter().enumerate() {
        if n.is_null() {
            println!("{i:<5} (down: no report)");
            continue;
        }
        let drops: u64 = n["drops"]
            .as_object()
            .map(|d| d.values().filter_map(|v| v.as_u64()).sum())
            .unwrap_or(0);
        let p = &n["pool"];
        // (a JSON value ignores the width: as text first)
        let v = |x: &serde_json::Value| match x {
            serde_json::Value::Null => "-".to_string(),
            x => x.to_string(),
        };
        println!(
            "{i:<5} {:<11} {:<10} {:<11} {:<15} {:<10} {:<12} {:<7} {}",
            v(&n["packets_in"]),
            v(&n["packets_out"]),
            v(&p["replicated"]),
            format!("{}/{}", v(&p["lag_p50_us"]), v(&p["lag_p99_us"])),
            v(&p["installed"]),
            v(&p["unprotected"]),
            v(&p["synced"]),
            drops
        );
    }
}
