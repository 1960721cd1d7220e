//! Sequences of frames through whole chains, as a worker runs them: the first
//! byte picks the chain (firewall → NAT → IDS → monitor → sequence check, or
//! load balancer → router), then frames follow as `[len: u16 le][bytes]`, each
//! 1 ms after the previous one, with the tables' timers run as time passes.
//! Every frame is either refused at parse (a counted malformed drop), dropped by
//! the chain with a cause, or forwarded as a frame that still parses; the
//! chain's counters add up to the frames it was given.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use nf::{Chain, ChainConfig, Verdict};

/// Small tables, so a sequence fills them.
const TABLES: &str = "[steering]\nshards = 4\n[table]\ncapacity = 256\n";

const CHAINS: [&str; 2] = [
    r#"
    [[nf]]
    kind = "firewall"
    rules = "allow any 10.0.0.0/8 -> any\nallow udp any -> any:53"
    [[nf]]
    kind = "nat"
    internal = "10.0.0.0/8"
    external = ["203.0.113.1", "203.0.113.2"]
    [[nf]]
    kind = "ids"
    rules = '''
    alert tcp any any -> any 80 (msg:"attack"; content:"attack"; sid:1;)
    drop tcp any any -> any any (msg:"exploit"; content:"GET"; nocase; pcre:"/\/exploit[0-9]+/"; sid:2;)
    blacklist udp any any <> any any (msg:"worm"; content:"wormsig"; sid:3;)
    '''
    [[nf]]
    kind = "monitor"
    [[nf]]
    kind = "seqcheck"
    "#,
    r#"
    [[nf]]
    kind = "lb"
    snat = ["192.0.2.10"]
    [[nf.service]]
    vip = "10.0.0.100:80"
    backends = ["10.1.0.1:8080", "10.1.0.2:8080"]
    [[nf.service]]
    vip = "10.0.0.101:53"
    proto = "udp"
    backends = ["10.1.0.2:53", "10.1.0.3:53"]
    [[nf]]
    kind = "router"
    routes = ["0.0.0.0/1 0", "128.0.0.0/1 1", "10.1.0.0/16 2", "::/0 3"]
    "#,
];

thread_local! {
    /// The chains, built once; every input runs on a fresh instance.
    static BUILT: Vec<Chain> = CHAINS
        .iter()
        .map(|t| {
            ChainConfig::from_toml(&format!("{TABLES}{t}"))
                .expect("fuzz chain parses")
                .build(Path::new("."))
                .expect("fuzz chain builds")
        })
        .collect();
}

fuzz_target!(|data: &[u8]| {
    let Some((&which, mut rest)) = data.split_first() else {
        return;
    };
    let mut chain = BUILT.with(|b| b[usize::from(which) % CHAINS.len()].instance());
    let mut shards = chain.new_shards();
    let (mut given, mut malformed, mut forwarded, mut dropped) = (0u64, 0u64, 0u64, 0u64);
    let mut now = 0u64;
    while rest.len() >= 2 {
        let len = usize::from(u16::from_le_bytes([rest[0], rest[1]])).min(rest.len() - 2);
        let frame = &rest[2..2 + len];
        rest = &rest[2 + len..];
        now += 1_000_000;
        given += 1;
        let mut p = match chain.packet(frame.to_vec(), now) {
            Ok(p) => p,
            Err(_) => {
                malformed += 1;
                continue;
            }
        };
        let s = chain.shard_of(p.hash);
        chain.expire(&mut shards[s], now);
        match chain.process(&mut shards[s], &mut p, now) {
            Verdict::Forward => {
                forwarded += 1;
                let info = wire::parse(&p.data).expect("a forwarded frame parses");
                assert_eq!(info.tuple, p.info.tuple, "NFs keep the tuple up to date");
            }
            Verdict::Drop(_) => dropped += 1,
        }
    }
    assert_eq!(given, malformed + forwarded + dropped);
    let c = chain.counters();
    assert_eq!(c.packets, forwarded + dropped, "{c:?}");
    assert_eq!(c.forwarded, forwarded, "{c:?}");
    assert_eq!(c.drops.iter().sum::<u64>(), dropped, "{c:?}");
});
