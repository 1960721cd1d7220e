//! The UPF's outside inputs: any datagram to its PFCP endpoint (after an
//! association, so session requests reach the rule parsers), and any frame
//! through a UPF that holds a session with every kind of rule (GTP-U
//! headers, extension headers, inner packets). Refusals and drops are fine;
//! panics, hangs and runaway memory are not.
#![no_main]

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use nf::upf::pfcp::{Endpoint, Settings};
use nf::upf::{Accounting, UpfShared};

const CHAIN: &str = r#"
    [[nf]]
    kind = "upf"
    n3 = "192.0.2.1"
    [[nf.session]]
    ue = "10.60.0.1"
    teid = 1
    gnb = "192.0.2.2"
    gnb_teid = 1001
"#;

fuzz_target!(|data: &[u8]| {
    let Some((&which, rest)) = data.split_first() else {
        return;
    };
    if which % 2 == 0 {
        pfcp(rest);
    } else {
        frames(rest);
    }
});

fn pfcp(data: &[u8]) {
    let settings = Settings {
        node_id: Ipv4Addr::new(192, 0, 2, 1),
        n3: Ipv4Addr::new(192, 0, 2, 1),
        accounting: Accounting::Merged,
        qer_burst: 65_536,
    };
    let mut e = Endpoint::new(settings, Arc::new(UpfShared::default()));
    let from: SocketAddr = "192.0.2.100:8805".parse().unwrap();
    // association setup: node id 192.0.2.100
    let assoc = [
        0x20, 5, 0, 13, 0, 0, 1, 0, 0, 60, 0, 5, 0, 192, 0, 2, 100,
    ];
    assert!(e.answer(&assoc, from).is_some());
    // the input as up to four datagrams (a length byte before each)
    let mut rest = data;
    for _ in 0..4 {
        let Some((&n, r)) = rest.split_first() else { break };
        let n = (n as usize).min(r.len());
        let _ = e.answer(&r[..n], from);
        rest = &r[n..];
    }
    let _ = e.answer(rest, from);
}

fn frames(data: &[u8]) {
    let mut c = nf::ChainConfig::from_toml(CHAIN)
        .unwrap()
        .build(std::path::Path::new("."))
        .unwrap();
    let mut shards = c.new_shards();
    if let Ok(mut p) = c.packet(data.to_vec(), 1) {
        let s = c.shard_of(p.hash);
        let _ = c.process(&mut shards[s], &mut p, 1);
    }
    let mut out = Vec::new();
    c.take_released(&mut out);
}
