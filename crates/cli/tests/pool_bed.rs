//! A pool of three flowshift nodes behind a router (`netio::poolbed`): the
//! kernel's ECMP with resilient nexthop groups spreads real TCP connections
//! over the nodes, each node runs FW → NAT → seqcheck with its own NAT pool,
//! and every download arrives byte for byte; the server sees only the nodes'
//! pool addresses. Then the controller's move: node 2 leaves both groups (the
//! kernel gives its buckets, and only those, to the others, the same way in
//! both directions), its NAT pool goes to node 0, and it is killed
//! (`kill -9`); new connections all complete through nodes 0 and 1. Last,
//! node 1's buckets are redirected, bucket for bucket, to node 0 (its member
//! nexthops re-pointed, as failover to a secondary does) and node 1 is killed:
//! node 0 carries every new connection. (These nodes do not replicate:
//! connections established through a killed node survive only with `[pool]`,
//! see `pool_failover.rs`.)

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};

use netio::netns;
use netio::poolbed::{PoolBed, SERVER};

mod common;

const PORT: u16 = 8800;
const BYTES: usize = 50_000;
const NODES: usize = 3;

fn pattern(seed: u8) -> Vec<u8> {
    (0..BYTES)
        .map(|i| (i as u32 * 7 + u32::from(seed)) as u8)
        .collect()
}

fn chain(i: usize) -> PathBuf {
    let p = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("pool-node{i}.toml"));
    std::fs::write(
        &p,
        format!(
            "[[nf]]\nkind = \"firewall\"\nrules = \"allow tcp 10.0.0.0/8 -> any:{PORT}\"\n\
             [[nf]]\nkind = \"nat\"\ninternal = \"10.0.0.0/8\"\nexternal = [\"{}\"]\n\
             [[nf]]\nkind = \"seqcheck\"\n",
            PoolBed::nat_pool(i)
        ),
    )
    .unwrap();
    p
}

/// `flowshift run` as node `i`, one working core.
/// Node `i`'s `flowshift run`, once it says it forwards.
fn start_node(bed: &PoolBed, i: usize) -> Child {
    let (a, b) = bed.node_ifaces(i);
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let (json, log) = (
        dir.join(format!("pool-node{i}.json")),
        dir.join(format!("pool-node{i}.log")),
    );
    let mut child = Command::new("ip")
        .args([
            "netns",
            "exec",
            &bed.node(i),
            env!("CARGO_BIN_EXE_flowshift"),
            "run",
        ])
        .args(["--iface", &format!("{a},{b}"), "--workers", "1"])
        .arg("--config")
        .arg(chain(i))
        .arg("--json")
        .arg(json)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    common::wait_forwarding(&log, &mut child);
    child
}

fn server(bed: &PoolBed, peers: Arc<Mutex<BTreeSet<IpAddr>>>) {
    let ns = bed.server();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        netns::enter(&ns).unwrap();
        let l = TcpListener::bind((SERVER, PORT)).unwrap();
        tx.send(()).unwrap();
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            peers.lock().unwrap().insert(s.peer_addr().unwrap().ip());
            std::thread::spawn(move || {
                let mut seed = [0u8; 1];
                if s.read_exact(&mut seed).is_ok() {
                    let _ = s.write_all(&pattern(seed[0]));
                }
            });
        }
    });
    rx.recv().unwrap();
}

/// `n` downloads from the client namespace, 6 at a time, each whole.
fn downloads(bed: &PoolBed, n: usize) {
    let to = SocketAddr::new(SERVER.parse().unwrap(), PORT);
    common::downloads(&bed.client(), to, n, 6, pattern);
}

/// Packets each node's interfaces received so far.
fn node_rx(bed: &PoolBed) -> Vec<u64> {
    (0..NODES)
        .map(|i| netns::counter(&bed.node(i), &bed.node_ifaces(i).0, "rx_packets").unwrap())
        .collect()
}

#[test]
fn the_routers_groups_spread_connections_over_nodes_and_a_node_can_leave() {
    let Some(bed) = netio::testbed::privileged("the pool bed", PoolBed::up("fspb", NODES, 12))
    else {
        return;
    };
    let mut nodes: Vec<Option<Child>> = (0..NODES).map(|i| Some(start_node(&bed, i))).collect();
    let peers = Arc::new(Mutex::new(BTreeSet::new()));
    server(&bed, peers.clone());
    let (front, back) = bed.bucket_nodes().unwrap();
    assert_eq!(front, back, "the two directions' buckets differ");
    for n in 0..NODES {
        assert_eq!(
            front.iter().filter(|&&x| x == n).count(),
            12 / NODES,
            "{front:?}"
        );
    }
    let before = node_rx(&bed);
    downloads(&bed, 60);
    let after = node_rx(&bed);
    for i in 0..NODES {
        assert!(
            after[i] - before[i] > 50,
            "node {i} carried nothing: {before:?} → {after:?}"
        );
    }
    // the server saw the nodes' NAT pools, several of them, nothing else
    let seen = peers.lock().unwrap().clone();
    let pools: Vec<ipnet::Ipv4Net> = (0..NODES)
        .map(|i| PoolBed::nat_pool(i).parse().unwrap())
        .collect();
    for p in &seen {
        let IpAddr::V4(a) = p else { panic!("{p}") };
        assert!(pools.iter().any(|n| n.contains(a)), "the server saw {p}");
    }
    assert!(seen.len() >= 2, "{seen:?}");
    // the controller takes node 2 out of both groups, then it dies
    bed.set_members(&[0, 1]).unwrap();
    bed.move_nat_pool(2, 0).unwrap();
    let (front2, back2) = bed.bucket_nodes().unwrap();
    assert_eq!(
        front2, back2,
        "the two directions' buckets differ after the change"
    );
    assert!(!front2.contains(&2), "{front2:?}");
    // only node 2's buckets moved
    for (b, (&old, &new)) in front.iter().zip(&front2).enumerate() {
        if old != 2 {
            assert_eq!(old, new, "bucket {b} moved from a live node");
        }
    }
    let mut dead = nodes[2].take().unwrap();
    dead.kill().unwrap();
    let _ = dead.wait();
    let before = node_rx(&bed)[..2].to_vec();
    downloads(&bed, 30);
    let after = node_rx(&bed)[..2].to_vec();
    assert!(
        after[0] > before[0] && after[1] > before[1],
        "{before:?} → {after:?}"
    );
    for n in nodes.iter_mut().flatten() {
        let _ = n.kill();
        let _ = n.wait();
    }
}
