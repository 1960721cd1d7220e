//! `poolbed up [NODES] [PREFIX]` builds the pool bed (client — router — NODES
//! nodes — server) and leaves it up, printing how to run a flowshift node in
//! each; `poolbed down [NODES] [PREFIX]` deletes it (`scripts/pool.sh` calls
//! this). NODES defaults to 3, PREFIX to `fsp`.

use netio::poolbed::{PoolBed, CLIENT, SERVER};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let nodes: usize = match args.get(1).map(|n| n.parse()) {
        None => 3,
        Some(Ok(n)) if (1..=16).contains(&n) => n,
        Some(_) => {
            eprintln!("poolbed: NODES is a number in 1..=16");
            std::process::exit(2);
        }
    };
    let prefix = args.get(2).map(String::as_str).unwrap_or("fsp");
    if prefix.len() > 6 {
        eprintln!("poolbed: PREFIX has at most 6 characters");
        std::process::exit(2);
    }
    match args.first().map(String::as_str) {
        Some("up") => match PoolBed::up(prefix, nodes, 64) {
            Ok(bed) => {
                println!(
                    "client {} ({CLIENT}) — router {} — {nodes} nodes — server {} ({SERVER})",
                    bed.client(),
                    bed.router(),
                    bed.server()
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
                bed.keep();
            }
            Err(e) => {
                eprintln!("poolbed: {e}");
                std::process::exit(1);
            }
        },
        Some("down") => PoolBed::down(prefix, nodes),
        _ => {
            eprintln!("usage: poolbed up|down [NODES] [PREFIX]");
            std::process::exit(2);
        }
    }
}
