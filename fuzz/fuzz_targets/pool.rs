//! The pool protocol at a node's replication port: any datagram is opened
//! with the pool's key and refused unless sealed with it (never a panic);
//! the same bytes sealed with the key open to exactly themselves, once (the
//! second time a replay), and are consumed as a heartbeat, an order, a bulk
//! copy or a replica message whose entry is installed in a firewall → NAT
//! chain — every message kind through decode and the machine that takes it.
#![no_main]

use std::path::Path;
use std::sync::{Mutex, OnceLock};

use libfuzzer_sys::fuzz_target;
use pool::auth::{Key, Refused, Seal};
use runtime::protocol::{Consumed, Port};

const CHAIN: &str = "[steering]\nshards = 4\n[table]\ncapacity = 256\n\
[[nf]]\nkind = \"firewall\"\nrules = \"allow any 10.0.0.0/8 -> any\"\n\
[[nf]]\nkind = \"nat\"\ninternal = \"10.0.0.0/8\"\nexternal = [\"203.0.113.0/24\"]\n";

/// The chain and its shards, built once (entries installed by earlier
/// inputs stay, as on a node).
fn chain() -> &'static Mutex<(nf::Chain, Vec<nf::Shard>)> {
    static C: OnceLock<Mutex<(nf::Chain, Vec<nf::Shard>)>> = OnceLock::new();
    C.get_or_init(|| {
        let cfg: nf::ChainConfig = toml::from_str(CHAIN).expect("the chain parses");
        let chain = cfg.build(Path::new(".")).expect("the chain builds");
        let shards = chain.new_shards();
        Mutex::new((chain, shards))
    })
}

fuzz_target!(|bytes: &[u8]| {
    let mut guard = chain().lock().unwrap_or_else(|p| p.into_inner());
    let (chain, shards) = &mut *guard;
    let key = Key::new([7; 32]);
    let now = 1_000_000_000;
    let mut port = Port::new(chain, Some(&key), now - 1);
    // as it arrives: forged unless the fuzzer found the tag (it cannot)
    match port.consume(bytes, now, chain, shards) {
        Consumed::Refused(_) => {}
        other => panic!("unsealed bytes were taken: {other:?}"),
    }
    // sealed with the pool's key: taken once, then a replay
    let mut seal = Seal::new(key, 3);
    let d = seal.sealed(now, bytes);
    let first = port.consume(&d, now, chain, shards);
    assert!(!matches!(first, Consumed::Refused(_)), "{first:?}");
    assert_eq!(
        port.consume(&d, now, chain, shards),
        Consumed::Refused(Refused::Replay)
    );
    // and the bytes as a bare body on a keyless port
    let mut bare = Port::new(chain, None, 0);
    let _ = bare.consume(bytes, now, chain, shards);
});
