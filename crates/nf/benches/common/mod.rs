//! What the NF benchmarks share: a TCP frame builder and a random IDS rule set.
#![allow(dead_code)] // each benchmark uses part of it

use std::net::Ipv4Addr;

use rand::Rng;
use rand_chacha::ChaCha8Rng;
use wire::repr::{EthernetRepr, IpRepr, Ipv4Repr, L4Repr, PacketRepr, TcpRepr};
use wire::TcpFlags;

/// An Ethernet/IPv4/TCP frame `src:sport → dst:dport` with sequence number `seq`.
pub fn tcp_frame(
    src: (Ipv4Addr, u16),
    dst: (Ipv4Addr, u16),
    seq: u32,
    flags: TcpFlags,
    payload: &[u8],
) -> Vec<u8> {
    PacketRepr {
        eth: EthernetRepr {
            src: [2, 0, 0, 0, 0, 1],
            dst: [2, 0, 0, 0, 0, 2],
            vlan: None,
        },
        ip: IpRepr::V4(Ipv4Repr {
            src: src.0,
            dst: dst.0,
            dscp: 0,
            ecn: 0,
            ident: 7,
            dont_frag: true,
            ttl: 64,
            options: vec![],
        }),
        l4: L4Repr::Tcp(TcpRepr {
            src_port: src.1,
            dst_port: dst.1,
            seq,
            ack: 1,
            flags,
            window: 65_535,
            urgent: 0,
            options: vec![],
        }),
        payload: payload.to_vec(),
    }
    .to_bytes()
}

/// `literals` content rules of 6–11 random lowercase letters and `regexes`
/// content + pcre rules, in IDS rule syntax.
pub fn ids_rules(literals: usize, regexes: usize, rng: &mut ChaCha8Rng) -> String {
    let mut s = String::new();
    let word = |rng: &mut ChaCha8Rng, n: usize| -> String {
        (0..n).map(|_| rng.gen_range(b'a'..=b'z') as char).collect()
    };
    for i in 0..literals {
        let n = rng.gen_range(6..12);
        let w = word(rng, n);
        s.push_str(&format!(
            "alert tcp any any -> any any (msg:\"lit {i}\"; content:\"{w}\"; sid:{};)\n",
            i + 1
        ));
    }
    for i in 0..regexes {
        let (a, b) = (word(rng, 4), word(rng, 4));
        s.push_str(&format!(
            "alert tcp any any -> any any (msg:\"re {i}\"; content:\"{a}\"; pcre:\"/{b}[0-9]{{2,4}}x/i\"; sid:{};)\n",
            100_000 + i
        ));
    }
    s
}
