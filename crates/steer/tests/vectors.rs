//! The Microsoft RSS verification vectors ("Verifying the RSS Hash Calculation"),
//! IPv4 and IPv6, with and without ports, for both implementations; and the
//! symmetry of the symmetric key.

use core::net::IpAddr;

use proptest::prelude::*;
use steer::{hash_input, toeplitz_naive, HashFields, RssKey, Toeplitz};
use wire::FiveTuple;

struct Vector {
    tuple: FiveTuple,
    ip_only: u32,
    with_ports: u32,
}

fn vectors() -> Vec<Vector> {
    let text = include_str!("data/rss-vectors.tsv");
    let key_line = text.lines().nth(1).unwrap().trim_start_matches('#').trim();
    assert_eq!(
        RssKey::from_hex(key_line),
        Some(RssKey::DEFAULT),
        "file names the default key"
    );
    let parse_hex = |s: &str| u32::from_str_radix(s.trim_start_matches("0x"), 16).unwrap();
    let v: Vec<Vector> = text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            Vector {
                tuple: FiveTuple {
                    src: f[1].parse::<IpAddr>().unwrap(),
                    src_port: f[2].parse().unwrap(),
                    dst: f[3].parse::<IpAddr>().unwrap(),
                    dst_port: f[4].parse().unwrap(),
                    proto: wire::proto::TCP,
                },
                ip_only: parse_hex(f[5]),
                with_ports: parse_hex(f[6]),
            }
        })
        .collect();
    assert_eq!(v.len(), 8, "5 IPv4 and 3 IPv6 vectors");
    v
}

#[test]
fn microsoft_vectors_table_driven() {
    let t = Toeplitz::new(RssKey::DEFAULT);
    for v in vectors() {
        let ip = hash_input(&v.tuple, HashFields::Ip);
        let l4 = hash_input(&v.tuple, HashFields::IpPorts);
        assert_eq!(t.hash(ip.as_bytes()), v.ip_only, "{:?} ip only", v.tuple);
        assert_eq!(
            t.hash(l4.as_bytes()),
            v.with_ports,
            "{:?} with ports",
            v.tuple
        );
        if let (IpAddr::V4(s), IpAddr::V4(d)) = (v.tuple.src, v.tuple.dst) {
            let h = t.hash_v4_ports(s.octets(), d.octets(), v.tuple.src_port, v.tuple.dst_port);
            assert_eq!(h, v.with_ports);
        }
    }
}

#[test]
fn microsoft_vectors_naive() {
    for v in vectors() {
        let ip = hash_input(&v.tuple, HashFields::Ip);
        let l4 = hash_input(&v.tuple, HashFields::IpPorts);
        assert_eq!(toeplitz_naive(&RssKey::DEFAULT, ip.as_bytes()), v.ip_only);
        assert_eq!(
            toeplitz_naive(&RssKey::DEFAULT, l4.as_bytes()),
            v.with_ports
        );
    }
}

#[test]
fn default_key_is_not_symmetric() {
    let t = Toeplitz::new(RssKey::DEFAULT);
    let v = &vectors()[0];
    let fwd = hash_input(&v.tuple, HashFields::IpPorts);
    let rev = hash_input(&v.tuple.reversed(), HashFields::IpPorts);
    assert_ne!(t.hash(fwd.as_bytes()), t.hash(rev.as_bytes()));
}

#[test]
fn ports_only_for_tcp_and_udp() {
    let mut t = vectors()[0].tuple;
    t.proto = wire::proto::ICMP;
    assert_eq!(hash_input(&t, HashFields::IpPorts).as_bytes().len(), 8);
    t.proto = wire::proto::UDP;
    assert_eq!(hash_input(&t, HashFields::IpPorts).as_bytes().len(), 12);
}

fn any_tuple() -> impl Strategy<Value = FiveTuple> {
    (
        any::<bool>(),
        any::<u128>(),
        any::<u128>(),
        any::<u16>(),
        any::<u16>(),
        any::<bool>(),
    )
        .prop_map(|(v6, s, d, sp, dp, tcp)| {
            let (src, dst) = if v6 {
                (IpAddr::from(s.to_be_bytes()), IpAddr::from(d.to_be_bytes()))
            } else {
                (
                    IpAddr::from((s as u32).to_be_bytes()),
                    IpAddr::from((d as u32).to_be_bytes()),
                )
            };
            FiveTuple {
                src,
                dst,
                src_port: sp,
                dst_port: dp,
                proto: if tcp { 6 } else { 17 },
            }
        })
}

proptest! {
    #[test]
    fn symmetric_key_hashes_both_directions_alike(t in any_tuple(), fields in prop_oneof![Just(HashFields::Ip), Just(HashFields::IpPorts)]) {
        let h = Toeplitz::new(RssKey::SYMMETRIC);
        let fwd = hash_input(&t, fields);
        let rev = hash_input(&t.reversed(), fields);
        prop_assert_eq!(h.hash(fwd.as_bytes()), h.hash(rev.as_bytes()));
    }

    #[test]
    fn table_driven_equals_naive(input in prop::collection::vec(any::<u8>(), 0..=36)) {
        for key in [RssKey::DEFAULT, RssKey::SYMMETRIC] {
            prop_assert_eq!(Toeplitz::new(key).hash(&input), toeplitz_naive(&key, &input));
        }
    }

    #[test]
    fn linear_over_xor(a in prop::collection::vec(any::<u8>(), 12), b in prop::collection::vec(any::<u8>(), 12)) {
        let t = Toeplitz::new(RssKey::DEFAULT);
        let x: Vec<u8> = a.iter().zip(&b).map(|(p, q)| p ^ q).collect();
        prop_assert_eq!(t.hash(&x), t.hash(&a) ^ t.hash(&b));
        // replacing the ports changes the hash by the contributions' XOR
        let mut c = a.clone();
        c[8..12].copy_from_slice(&b[8..12]);
        prop_assert_eq!(t.hash(&c), t.hash(&a) ^ t.contribution(8, &a[8..12]) ^ t.contribution(8, &b[8..12]));
    }
}

/// Why the flow table does not index by the symmetric hash: with a 16-bit key
/// period, a bit's contribution depends only on its position mod 16, so the hash is
/// a function of the XOR of the input's 16-bit words — 2^16 values at most.
#[test]
fn symmetric_key_has_16_bits_of_entropy() {
    let t = Toeplitz::new(RssKey::SYMMETRIC);
    let fold = |b: &[u8]| {
        b.chunks(2)
            .fold(0u16, |a, w| a ^ u16::from_be_bytes([w[0], w[1]]))
    };
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut seen = std::collections::HashMap::new();
    for _ in 0..200_000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let input = [x.to_be_bytes(), (x.rotate_left(29) ^ 0x9e37).to_be_bytes()].concat();
        let input = &input[..12];
        let h = t.hash(input);
        // equal folds give equal hashes
        assert_eq!(*seen.entry(fold(input)).or_insert(h), h);
    }
    assert!(seen.len() <= 1 << 16);
    let distinct: std::collections::HashSet<u32> = seen.values().copied().collect();
    assert!(distinct.len() <= 1 << 16, "{}", distinct.len());
}
