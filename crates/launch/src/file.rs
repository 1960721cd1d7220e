//! The config file's tables beside the chain's: `[run]` (the run's
//! parameters; `run`'s flags of the same names override them), `[io]` (the
//! interfaces and how they are used) and `[pool]` (this node's replication
//! in a Sirius pool) — read and checked by [`load`], and written typed for a
//! child `flowshift run` (a pool's node) by [`NodeFile`], which reads what
//! it wrote back through [`load`] before the child does.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context};
use nf::ChainConfig;
use serde::{Deserialize, Serialize};

/// The `[run]` table.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RunSection {
    /// True when `[run.dyssect]` sets `residual` (the simulator otherwise takes
    /// it from its cost model).
    #[serde(skip)]
    pub dyssect_residual_set: bool,
    pub workers: Option<usize>,
    pub offloaders: Option<usize>,
    pub offload_ratio: Option<f64>,
    pub offload_select: Option<String>,
    pub ring_size: Option<usize>,
    pub burst: Option<usize>,
    pub balancer: Option<String>,
    pub period: Option<String>,
    pub nic_update_delay: Option<String>,
    pub speed: Option<f64>,
    pub presteer: Option<bool>,
    pub nic_threads: Option<usize>,
    pub replay_memory: Option<String>,
    pub loops: Option<u32>,
    pub duration: Option<String>,
    pub seed: Option<u64>,
    /// This run's external addresses: they replace the `external` of the
    /// chain's NATs (one chain file for several boxes, each translating to
    /// a range of its own, as a pool's nodes do).
    pub nat_external: Option<Vec<String>>,
    /// Moved to `[io] iface`: refused with a message saying so.
    pub iface: Option<toml::Value>,
    /// RSS++ parameters (`[run.rsspp]`).
    pub rsspp: Option<balance::balancers::RssppConfig>,
    /// Dyssect parameters (`[run.dyssect]`).
    pub dyssect: Option<dyssect::DyssectConfig>,
    /// Live Roger parameters (`[run.roger]`).
    pub roger: Option<balance::balancers::RogerConfig>,
    /// The `[io]` table (a table of its own in the file).
    #[serde(skip)]
    pub io: IoSection,
    /// The `[pool]` table (a table of its own in the file).
    #[serde(skip)]
    pub pool: Option<PoolSection>,
}

/// The `[pool]` table: this node's replication in a Sirius pool.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PoolSection {
    /// Where this node receives its primaries' copies, `IP:PORT` (UDP).
    pub listen: std::net::SocketAddr,
    /// Its secondary's `listen`.
    pub secondary: std::net::SocketAddr,
    /// A file holding the pool's key (64 hexadecimal digits; readable by
    /// its owner alone): every pool message is sealed with it, and one that
    /// is not is refused. Relative to the config file.
    pub key_file: Option<PathBuf>,
    /// No key on a non-loopback `listen`: only on a fabric that nothing but
    /// the pool reaches.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub insecure: bool,
    /// The node's BGP speaker (`[pool.bgp]`, `pool::bgp::Node`): what it
    /// announces to the pool's router, started with the node and dying with
    /// it. Needs `--iface`.
    pub bgp: Option<pool::bgp::Node>,
    /// Pair heartbeats: ms without an answer from the secondary before this
    /// node takes it for lost and sends its packets out unprotected
    /// (`runspec::Replica::pair_timeout_ms`) [default: off].
    pub pair_timeout_ms: Option<u32>,
    /// The `listen` of the node this one is the secondary of: with pair
    /// heartbeats on, a primary silent as long is lost, and the node's BGP
    /// speaker announces itself promoted.
    pub primary: Option<std::net::SocketAddr>,
    /// Spill-over (`[pool.spill]`, Sirius §3.3.4).
    pub spill: Option<SpillSection>,
    /// Tenants split over several nodes (`[[pool.split]]`,
    /// `runspec::SplitTenant`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub split: Vec<SplitSection>,
}

/// `[[pool.split]]`: a tenant split over `parts` (each part's node's
/// `[pool] listen`, in part order) of which this node serves `local`.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SplitSection {
    /// The tenant's address.
    pub vip: std::net::IpAddr,
    /// The part this node serves.
    pub local: u16,
    /// Each part's node.
    pub parts: Vec<std::net::SocketAddr>,
}

/// `[pool.spill]`: new TCP connections to `vips` beyond `capacity` per
/// second go to the node at `to` (`runspec::SpillTo`).
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SpillSection {
    /// The spill node's `[pool] listen`.
    pub to: std::net::SocketAddr,
    /// The tenants' addresses whose new connections may spill.
    pub vips: Vec<std::net::IpAddr>,
    /// New connections per second this node takes.
    pub capacity: u32,
    /// How long a spilled connection's later packets still follow it after
    /// the last spill, ms [default: 10000].
    pub linger_ms: Option<u32>,
}

/// The pool's key from `[pool] key_file` (relative to `base`), refused if
/// other users may read it; none without a file, which a non-loopback
/// `listen` allows only with `insecure = true`.
pub(crate) fn pool_key(p: &PoolSection, base: &Path) -> anyhow::Result<Option<[u8; 32]>> {
    use std::os::unix::fs::PermissionsExt;
    let Some(f) = &p.key_file else {
        if !p.listen.ip().is_loopback() && !p.insecure {
            bail!(
                "`pool.listen` = {} is reachable from the network and there is no                  `pool.key_file`: anyone who reaches that port could install flow state and                  send frames out of this node. Give a key file (64 hexadecimal digits, mode                  600; e.g. `openssl rand -hex 32 > pool.key`), or `insecure = true` on a fabric                  nothing but the pool reaches",
                p.listen
            );
        }
        return Ok(None);
    };
    let path = base.join(f);
    let meta = std::fs::metadata(&path)
        .with_context(|| format!("`pool.key_file` = {}", path.display()))?;
    let mode = meta.permissions().mode();
    if mode & 0o077 != 0 {
        bail!(
            "`pool.key_file` = {}: other users may read it (mode {:o}); `chmod 600` it",
            path.display(),
            mode & 0o777
        );
    }
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("`pool.key_file` = {}", path.display()))?;
    let key = pool::auth::Key::parse(&text)
        .map_err(|e| anyhow::anyhow!("`pool.key_file` = {}: {e}", path.display()))?;
    Ok(Some(key.bytes()))
}

/// The `[io]` table: the interfaces a run is a network function on, and how it
/// uses them; `run`'s flags of the same names override it.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct IoSection {
    /// `"IN,OUT"` or one interface, as `--iface`.
    pub iface: Option<String>,
    /// `user` or `kernel`, as `--steer`.
    pub steer: Option<String>,
    /// `recvmmsg` or `ring`, as `--rx`.
    pub rx: Option<String>,
    /// `sendmmsg` or `ring`, as `--tx`.
    pub tx: Option<String>,
    /// Receive packet steering on single-queue interfaces for the run
    /// (default true); false, as `--no-rps`.
    pub rps: Option<bool>,
    /// `packet` or `xdp`, as `--io`.
    pub backend: Option<String>,
    /// AF_XDP: UMEM frames of 2 KiB per socket (a power of two, default
    /// 4096).
    pub xdp_frames: Option<u32>,
    /// AF_XDP: descriptors per ring (a power of two, default 2048).
    pub xdp_ring: Option<u32>,
    /// AF_XDP: `native` (the driver runs the program; refused where it
    /// cannot) or `auto` (generic mode where the driver cannot) [default:
    /// auto].
    pub xdp_mode: Option<String>,
    /// An address to serve Prometheus metrics at, as `--metrics`.
    pub metrics: Option<String>,
    /// The control socket's path, or `off`, as `--control`.
    pub control: Option<String>,
    /// Where NAT events go, as `--nat-log`.
    pub nat_log: Option<String>,
    /// Events each core's NAT queue holds for the logger (default 65536).
    pub nat_log_queue: Option<usize>,
    /// Serve metrics on an address other than loopback (the endpoint has no
    /// authentication) [default: false].
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub metrics_public: bool,
}

pub(crate) fn duration(field: &str, s: &str) -> anyhow::Result<Duration> {
    humantime::parse_duration(s)
        .with_context(|| format!("`{field}` = `{s}`: write e.g. \"100ms\" or \"10s\""))
}

/// The chain and the `[run]` table of a config file (or the defaults).
pub fn load(config: Option<&Path>) -> anyhow::Result<(ChainConfig, RunSection, PathBuf)> {
    let Some(path) = config else {
        return Ok((
            ChainConfig::default_chain(),
            RunSection::default(),
            PathBuf::from("."),
        ));
    };
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut table: toml::Table =
        toml::from_str(&text).with_context(|| path.display().to_string())?;
    let run: RunSection = match table.remove("run") {
        Some(toml::Value::Table(t)) => {
            let residual = t.get("dyssect").and_then(|d| d.get("residual")).is_some();
            let mut run: RunSection =
                nf::config::from_table("run", t).with_context(|| path.display().to_string())?;
            run.dyssect_residual_set = residual;
            run
        }
        Some(_) => anyhow::bail!("{}: `run` must be a table ([run])", path.display()),
        None => RunSection::default(),
    };
    let mut run = run;
    if run.iface.is_some() {
        anyhow::bail!(
            "{}: `[run] iface` is now `[io] iface` (with `steer`, `rx`, `tx`, `metrics`)",
            path.display()
        );
    }
    run.io = match table.remove("io") {
        Some(toml::Value::Table(t)) => {
            nf::config::from_table("io", t).with_context(|| path.display().to_string())?
        }
        Some(_) => anyhow::bail!("{}: `io` must be a table ([io])", path.display()),
        None => IoSection::default(),
    };
    run.pool = match table.remove("pool") {
        Some(toml::Value::Table(t)) => {
            Some(nf::config::from_table("pool", t).with_context(|| path.display().to_string())?)
        }
        Some(_) => anyhow::bail!("{}: `pool` must be a table ([pool])", path.display()),
        None => None,
    };
    let has_chain = table.contains_key("nf");
    let mut chain: ChainConfig =
        nf::config::from_table("", table).with_context(|| path.display().to_string())?;
    if !has_chain {
        // a file of run settings alone runs them on the default chain
        chain.nf = ChainConfig::default_chain().nf;
        eprintln!(
            "flowshift: {} has no [[nf]]: the default chain (firewall → NAT → seqcheck)",
            path.display()
        );
    }
    Ok((
        chain,
        run,
        path.parent().map(Path::to_path_buf).unwrap_or_default(),
    ))
}

/// A config file for a child `flowshift run` (a pool's node): the chain's
/// tables as the chain's file has them, and typed `[run]` and `[pool]`.
#[derive(Clone, Debug)]
pub struct NodeFile {
    /// The chain's tables (`[[nf]]`, `[steering]`, `[table]`).
    pub chain: toml::Table,
    /// `[run]`.
    pub run: RunSection,
    /// `[pool]`.
    pub pool: Option<PoolSection>,
}

impl NodeFile {
    /// The chain of the file at `path`, or the default chain; the file's
    /// `[run]` is kept (checked as `load` checks it), its `[io]` and
    /// `[pool]` are the pool's to set: dropped, with a warning.
    pub fn from_chain(path: Option<&Path>) -> anyhow::Result<NodeFile> {
        let Some(p) = path else {
            return Ok(NodeFile {
                chain: toml::from_str(DEFAULT_NODE_CHAIN).expect("the default chain parses"),
                run: RunSection::default(),
                pool: None,
            });
        };
        let (_, run, _) = load(Some(p))?;
        let text =
            std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
        let mut chain: toml::Table =
            toml::from_str(&text).with_context(|| p.display().to_string())?;
        chain.remove("run");
        for k in ["io", "pool"] {
            if chain.remove(k).is_some() {
                eprintln!("flowshift pool: the chain's [{k}] table is the pool's to set: ignored");
            }
        }
        Ok(NodeFile {
            chain,
            run: RunSection {
                io: IoSection::default(),
                pool: None,
                ..run
            },
            pool: None,
        })
    }

    /// The file's text.
    pub fn to_toml(&self) -> anyhow::Result<String> {
        let mut t = self.chain.clone();
        let run = toml::Value::try_from(&self.run)?;
        if run.as_table().is_some_and(|r| !r.is_empty()) {
            t.insert("run".into(), run);
        }
        if let Some(p) = &self.pool {
            t.insert("pool".into(), toml::Value::try_from(p)?);
        }
        Ok(toml::to_string(&t)?)
    }

    /// Writes the file to `path` and reads it back as the node will: a
    /// file the node would refuse is an error here, before it starts.
    pub fn write(&self, path: &Path) -> anyhow::Result<()> {
        std::fs::write(path, self.to_toml()?)
            .with_context(|| format!("writing {}", path.display()))?;
        load(Some(path))
            .with_context(|| format!("{}: written for a node, refused", path.display()))?;
        Ok(())
    }
}

/// A pool node's chain when the pool is given none: a firewall passing
/// what comes from inside, and a NAT (its external addresses are the
/// node's, `[pool] nat_external`).
const DEFAULT_NODE_CHAIN: &str =
    "[[nf]]\nkind = \"firewall\"\nrules = \"allow any 10.0.0.0/8 -> any\"\n\
    [[nf]]\nkind = \"nat\"\ninternal = \"10.0.0.0/8\"\nexternal = []\n";

#[cfg(test)]
mod tests {
    use super::*;

    fn dir() -> PathBuf {
        let d = std::env::temp_dir().join(format!("fs-nodefile-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn a_node_file_reads_back_as_written() {
        let d = dir();
        let chain = d.join("chain.toml");
        std::fs::write(
            &chain,
            "[run]\nworkers = 3\nperiod = \"5ms\"\n[io]\nrx = \"ring\"\n\
             [[nf]]\nkind = \"nat\"\ninternal = \"10.0.0.0/8\"\nexternal = [\"192.0.2.1\"]\n",
        )
        .unwrap();
        let mut f = NodeFile::from_chain(Some(&chain)).unwrap();
        assert_eq!(f.run.workers, Some(3));
        assert!(f.run.io.rx.is_none(), "[io] is the pool's to set");
        f.run.nat_external = Some(vec!["198.51.100.0/28".into()]);
        f.run.ring_size = Some(8192);
        f.pool = Some(PoolSection {
            listen: "127.0.0.1:4000".parse().unwrap(),
            secondary: "127.0.0.1:4001".parse().unwrap(),
            key_file: None,
            insecure: false,
            bgp: None,
            pair_timeout_ms: Some(150),
            primary: Some("127.0.0.1:4002".parse().unwrap()),
            spill: Some(SpillSection {
                to: "127.0.0.1:4003".parse().unwrap(),
                vips: vec!["10.99.0.1".parse().unwrap()],
                capacity: 20,
                linger_ms: Some(500),
            }),
            split: vec![SplitSection {
                vip: "10.99.0.2".parse().unwrap(),
                local: 0,
                parts: vec![
                    "127.0.0.1:4000".parse().unwrap(),
                    "127.0.0.1:4003".parse().unwrap(),
                ],
            }],
        });
        let node = d.join("node0.toml");
        f.write(&node).unwrap();
        let (cfg, run, _) = load(Some(&node)).unwrap();
        assert_eq!(run.workers, Some(3));
        assert_eq!(run.period.as_deref(), Some("5ms"));
        assert_eq!(run.ring_size, Some(8192));
        assert_eq!(run.nat_external, Some(vec!["198.51.100.0/28".to_string()]));
        let p = run.pool.expect("[pool] read back");
        assert_eq!(p.pair_timeout_ms, Some(150));
        assert_eq!(p.spill.expect("[pool.spill]").capacity, 20);
        assert_eq!(p.split[0].parts.len(), 2);
        assert_eq!(cfg.nf.len(), 1);
        std::fs::remove_dir_all(d).unwrap();
    }

    #[test]
    fn a_node_file_the_node_would_refuse_is_refused_when_written() {
        let d = dir().join("refuse");
        std::fs::create_dir_all(&d).unwrap();
        let mut f = NodeFile::from_chain(None).unwrap();
        // a key of an older version, which `load` names
        f.run.iface = Some("veth0".into());
        let e = f.write(&d.join("node.toml")).unwrap_err();
        assert!(
            format!("{e:#}").contains("written for a node, refused"),
            "{e:#}"
        );
        std::fs::remove_dir_all(d).unwrap();
    }
}
