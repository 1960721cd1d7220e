//! `flowshift bed up|down`: the network-namespace test beds, for someone with
//! the binary alone — client — flowshift — server (`netio::testbed`), or
//! with `--pool N` client — router — N nodes — server (`netio::poolbed`).
//! `up` leaves the bed up and prints how to run flowshift in it.

use anyhow::{bail, Context};
use clap::{Args, ValueEnum};
use netio::poolbed::PoolBed;
use netio::testbed::{Bed, CLIENT, SERVER};

/// What to do with the bed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Action {
    /// Build it (an old one of the same prefix goes first) and leave it up.
    Up,
    /// Delete it.
    Down,
}

#[derive(Args, Debug)]
pub struct BedArgs {
    /// `up` or `down`.
    pub action: Action,
    /// The pool bed with this many nodes (1..=16) instead of the
    /// client — flowshift — server bed.
    #[arg(long)]
    pub pool: Option<usize>,
    /// Namespace and interface prefix [default: fs, or fsp with --pool].
    #[arg(long)]
    pub prefix: Option<String>,
}

pub fn run(a: BedArgs) -> anyhow::Result<()> {
    match a.pool {
        None => line(a.action, a.prefix.as_deref().unwrap_or("fs")),
        Some(n) => pool(a.action, n, a.prefix.as_deref().unwrap_or("fsp")),
    }
}

fn line(action: Action, prefix: &str) -> anyhow::Result<()> {
    if prefix.len() > 8 {
        bail!("--prefix `{prefix}`: at most 8 characters (interface names)");
    }
    if action == Action::Down {
        Bed::down(prefix);
        return Ok(());
    }
    let bed = Bed::up(prefix).context("building the bed (needs root: network namespaces)")?;
    let (a, b) = bed.ifaces();
    println!(
        "client {} ({CLIENT}) — {} [{a} flowshift {b}] — server {} ({SERVER})",
        bed.client(),
        bed.middle(),
        bed.server()
    );
    println!(
        "run:    ip netns exec {} flowshift run --iface {a},{b}",
        bed.middle()
    );
    println!(
        "server: ip netns exec {} python3 -m http.server 8080 --bind {SERVER}   (none is started)",
        bed.server()
    );
    println!(
        "client: ip netns exec {} curl http://{SERVER}:8080/",
        bed.client()
    );
    println!("down:   flowshift bed down --prefix {prefix}");
    bed.keep();
    Ok(())
}

fn pool(action: Action, nodes: usize, prefix: &str) -> anyhow::Result<()> {
    if !(1..=16).contains(&nodes) {
        bail!("--pool {nodes}: 1 to 16 nodes");
    }
    if prefix.len() > 6 {
        bail!("--prefix `{prefix}`: at most 6 characters with --pool (interface names)");
    }
    if action == Action::Down {
        PoolBed::down(prefix, nodes);
        return Ok(());
    }
    let bed = PoolBed::up(prefix, nodes, 64)
        .context("building the pool bed (needs root: network namespaces)")?;
    println!(
        "client {} ({}) — router {} — {nodes} nodes — server {} ({})",
        bed.client(),
        netio::poolbed::CLIENT,
        bed.router(),
        bed.server(),
        netio::poolbed::SERVER
    );
    for i in 0..nodes {
        let (a, b) = bed.node_ifaces(i);
        println!(
            "node {i}: ip netns exec {} flowshift run --iface {a},{b}   (a NAT's external pool: {})",
            bed.node(i),
            PoolBed::nat_pool(i)
        );
    }
    println!(
        "buckets: ip -n {} nexthop bucket show id 1000",
        bed.router()
    );
    println!("down:    flowshift bed down --pool {nodes} --prefix {prefix}");
    bed.keep();
    Ok(())
}
