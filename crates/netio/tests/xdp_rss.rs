//! The XDP steering program hashes as the NIC model does: for generated IPv4
//! TCP, UDP and ICMP packets (and IPv4 headers with options),
//! `BPF_PROG_TEST_RUN` of the program (built to return the socket map entry
//! it would redirect to) gives `queue × workers + table[hash & (B − 1)]` with
//! the hash of `steer::RssHasher`, for addresses and ports and for addresses
//! only; frames it cannot hash (IPv6, fragments, too short) go to core 0;
//! the per-bucket counters count.

use netio::bpf::{Map, Program};
use netio::steering::KernelRss;
use steer::{HashFields, RssHasher, RssKey};
use trace::{Generator, TraceSpec};

/// Adds 4 bytes of IPv4 options (NOPs) to an IPv4 frame.
fn with_options(f: &[u8]) -> Vec<u8> {
    let mut g = f[..34].to_vec();
    g.extend_from_slice(&[1, 1, 1, 1]);
    g.extend_from_slice(&f[34..]);
    g[14] += 1; // IHL 5 → 6
    let total = u16::from_be_bytes([g[16], g[17]]) + 4;
    g[16..18].copy_from_slice(&total.to_be_bytes());
    g
}

/// The XDP steering program over `buckets` buckets and `workers` cores
/// (with `rules`, if any), built to return the socket map entry it would
/// redirect to; `None` where the kernel refuses eBPF maps (said loudly).
fn program(
    key: RssKey,
    fields: HashFields,
    (buckets, workers): (u32, u32),
    rules: Option<&steer::roger::RuleSteering>,
) -> Option<(KernelRss, Program)> {
    let t = steer::Toeplitz::new(key);
    let mut k = netio::testbed::privileged(
        "the eBPF maps",
        KernelRss::maps(&t, fields, buckets, workers),
    )?;
    if let Some(r) = rules {
        k.set_rules(r).unwrap();
    }
    let xsks = Map::xsk(workers).unwrap();
    let prog = Program::xdp("fs_xdp_test", &k.xdp_program(&xsks, workers, true))
        .unwrap_or_else(|e| panic!("{fields:?}: {e}"));
    Some((k, prog))
}

#[test]
fn the_xdp_program_steers_like_the_nic_model() {
    let workers = 3;
    for fields in [
        HashFields::IpPorts,
        HashFields::Ip,
        HashFields::SrcIp,
        HashFields::DstIp,
    ] {
        let buckets = 1024;
        let Some((k, prog)) = program(RssKey::SYMMETRIC, fields, (buckets, workers), None) else {
            return;
        };
        let hasher = RssHasher::new(RssKey::SYMMETRIC, fields);
        let spec = TraceSpec {
            flows: 300,
            packets: 3000,
            ipv6_share: 0.0,
            tcp_share: 0.6,
            ..TraceSpec::default()
        };
        let mut seen = std::collections::BTreeMap::<u32, u64>::new();
        let mut n = 0;
        for (i, p) in Generator::new(&spec).unwrap().enumerate() {
            let frame = if i % 7 == 0 && p.frame.len() > 34 {
                with_options(&p.frame)
            } else {
                p.frame.clone()
            };
            let info = wire::parse(&frame).unwrap();
            let bucket = hasher.hash(&info.tuple) & (buckets - 1);
            let core = k.get(bucket).unwrap();
            let got = prog.test_run_xdp(&frame, 0, 0).unwrap();
            assert_eq!(got, core, "{fields:?}: {:?}", info.tuple);
            *seen.entry(bucket).or_default() += 1;
            n += 1;
        }
        assert_eq!(n, 3000);
        for (b, c) in &seen {
            assert_eq!(k.packets(*b).unwrap(), *c, "bucket {b}");
        }
        // a rewrite is seen by the next packet
        let p = Generator::new(&spec).unwrap().next().unwrap();
        let info = wire::parse(&p.frame).unwrap();
        let b = hasher.hash(&info.tuple) & (buckets - 1);
        let other = (k.get(b).unwrap() + 1) % workers;
        k.set(b, other).unwrap();
        assert_eq!(prog.test_run_xdp(&p.frame, 0, 0).unwrap(), other);
        // what cannot be hashed goes to core 0: IPv6, a fragment, a runt
        let v6 = Generator::new(&TraceSpec {
            ipv6_share: 1.0,
            ..spec.clone()
        })
        .unwrap()
        .next()
        .unwrap()
        .frame;
        assert_eq!(prog.test_run_xdp(&v6, 0, 0).unwrap(), 0);
        let mut frag = p.frame.clone();
        frag[20] |= 0x20; // more fragments
        assert_eq!(prog.test_run_xdp(&frag, 0, 0).unwrap(), 0);
        assert_eq!(prog.test_run_xdp(&p.frame[..30], 0, 0).unwrap(), 0);
    }
}

/// With Roger's rules, the XDP program puts a frame in the bucket of the
/// first rule it matches — addresses, ports (an ICMP echo's identifier as
/// both) and protocol, under masks — and the rest by their hash in the
/// buckets after the rules, as `RuleSteering` does in the NIC model.
#[test]
fn the_xdp_program_matches_rules_like_the_nic_model() {
    use steer::roger::{Cube, KeyBits, Rule, RuleSteering, RuleTable};
    let workers = 64;
    let buckets = 64;
    // 5 key bits: the source's last two, the destination port's first, the
    // source port's first, the protocol's bit 3 (UDP 1, TCP and ICMP 0)
    let bits = KeyBits::parse("src-ip:30-31,dst-port:0,src-port:0,proto:3").unwrap();
    let rule = |value, mask, core| Rule {
        cube: Cube::new(value, mask),
        core,
    };
    let table = RuleTable {
        bits: 5,
        cores: 4,
        rules: vec![
            rule(0b00000, 0b11111, 1),
            rule(0b10101, 0b11111, 2),
            rule(0b01000, 0b11000, 3),
            rule(0b11001, 0b11001, 0),
            rule(0b00001, 0b11001, 2),
        ],
        default_rule: true,
    };
    let rules = RuleSteering::new(bits, table, buckets as usize).unwrap();
    for fields in [
        HashFields::IpPorts,
        HashFields::Ip,
        HashFields::SrcIp,
        HashFields::DstIp,
    ] {
        // the table is the identity (bucket b → entry b): the program
        // returns the bucket
        let Some((_k, prog)) = program(RssKey::SYMMETRIC, fields, (buckets, workers), Some(&rules))
        else {
            return;
        };
        let hasher = RssHasher::new(RssKey::SYMMETRIC, fields)
            .with_rules(std::sync::Arc::new(rules.clone()));
        let spec = TraceSpec {
            flows: 400,
            packets: 4000,
            ipv6_share: 0.0,
            tcp_share: 0.5,
            ..TraceSpec::default()
        };
        let mut by_rule = [0u32; 6];
        for (i, p) in Generator::new(&spec).unwrap().enumerate() {
            let frame = varied(&p.frame, i);
            let info = wire::parse(&frame).unwrap();
            let bucket = hasher.hash(&info.tuple) & (buckets - 1);
            let got = prog.test_run_xdp(&frame, 0, 0).unwrap();
            assert_eq!(got, bucket, "{fields:?}: {:?}", info.tuple);
            by_rule[(bucket as usize).min(5)] += 1;
        }
        // every rule was matched, and the default took some
        assert!(by_rule.iter().all(|&n| n > 0), "{fields:?}: {by_rule:?}");
    }
}

/// Frame `i` of a generated trace, `f`, varied for the rules' fields: every
/// fifth an ICMP echo of the same hosts (its identifier as both ports), else
/// every seventh with IPv4 options, else every eleventh an ICMP error quoting
/// it.
fn varied(f: &[u8], i: usize) -> Vec<u8> {
    use wire::repr::{L4Repr, PacketRepr};
    if i.is_multiple_of(5) {
        let mut r = PacketRepr::parse(f).unwrap().unwrap();
        r.l4 = L4Repr::IcmpEcho {
            request: i.is_multiple_of(2),
            id: (i as u16).wrapping_mul(40503),
            seq: 1,
        };
        r.to_bytes()
    } else if i.is_multiple_of(7) {
        with_options(f)
    } else if i.is_multiple_of(11) {
        icmp_error_about(f)
    } else {
        f.to_vec()
    }
}

/// An ICMPv4 error (destination unreachable) quoting a UDP packet of `f`
/// (an Ethernet + IPv4 + UDP frame), sent back by its destination.
fn icmp_error_about(f: &[u8]) -> Vec<u8> {
    let ihl = usize::from(f[14] & 0x0f) * 4;
    let quote = &f[14..14 + ihl + 8];
    let mut g = Vec::new();
    g.extend_from_slice(&f[6..12]);
    g.extend_from_slice(&f[0..6]);
    g.extend_from_slice(&[0x08, 0x00]);
    let total = (20 + 8 + quote.len()) as u16;
    let mut ip = vec![0x45, 0, 0, 0, 0, 0, 0, 0, 64, 1, 0, 0];
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    ip.extend_from_slice(&f[30..34]); // from the quoted packet's destination
    ip.extend_from_slice(&f[26..30]); // to its source
    let sum = checksum(&ip);
    ip[10..12].copy_from_slice(&sum.to_be_bytes());
    g.extend_from_slice(&ip);
    let mut icmp = vec![3, 3, 0, 0, 0, 0, 0, 0];
    icmp.extend_from_slice(quote);
    let sum = checksum(&icmp);
    icmp[2..4].copy_from_slice(&sum.to_be_bytes());
    g.extend_from_slice(&icmp);
    g
}

fn checksum(b: &[u8]) -> u16 {
    let mut s: u32 = 0;
    for c in b.chunks(2) {
        s += u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]));
    }
    while s >> 16 != 0 {
        s = (s & 0xffff) + (s >> 16);
    }
    !(s as u16)
}

/// An ICMP error goes where the flow it reports on goes: the XDP program
/// hashes the quoted packet's tuple, reversed, as the NIC model does.
#[test]
fn an_icmp_error_is_steered_with_the_flow_it_quotes() {
    let workers = 64;
    let buckets = 64;
    // (the default key is not symmetric: a tuple not reversed hashes apart)
    for (key, fields) in [RssKey::DEFAULT, RssKey::SYMMETRIC]
        .into_iter()
        .flat_map(|k| {
            [
                HashFields::IpPorts,
                HashFields::Ip,
                HashFields::SrcIp,
                HashFields::DstIp,
            ]
            .map(|f| (k, f))
        })
    {
        let Some((_k, prog)) = program(key, fields, (buckets, workers), None) else {
            return;
        };
        let hasher = RssHasher::new(key, fields);
        let spec = TraceSpec {
            flows: 100,
            packets: 300,
            ipv6_share: 0.0,
            tcp_share: 0.0,
            ..TraceSpec::default()
        };
        for p in Generator::new(&spec).unwrap() {
            let err = icmp_error_about(&p.frame);
            let info = wire::parse(&err).unwrap();
            let bucket = hasher.hash(&info.tuple) & (buckets - 1);
            assert_eq!(
                prog.test_run_xdp(&err, 0, 0).unwrap(),
                bucket,
                "{fields:?}: {:?}",
                info.tuple
            );
        }
    }
}

/// Under live rules every value of the rule key is a cell: the XDP program
/// reads the key's bits from the fields (addresses, ports — an ICMP echo's
/// identifier as both, an ICMP error's quoted flow reversed — and protocol)
/// and the cell is the bucket, without a hash, as `RuleSteering::cells` does
/// in the NIC model.
#[test]
fn the_xdp_program_finds_cells_like_the_nic_model() {
    use steer::roger::{KeyBits, RuleSteering};
    for key in [
        "src-ip:30-31,dst-port:0,src-port:0,proto:3",
        "src-ip:21-26,dst-port:7-9",
        "dst-ip:28-31,src-port:12-15,proto:7",
    ] {
        let bits = KeyBits::parse(key).unwrap();
        let buckets = 2u32 << bits.width();
        let cells = RuleSteering::cells(bits, buckets as usize).unwrap();
        for fields in [HashFields::IpPorts, HashFields::Ip] {
            // the table is the identity (bucket b → entry b): the program
            // returns the bucket
            let Some((_k, prog)) =
                program(RssKey::SYMMETRIC, fields, (buckets, buckets), Some(&cells))
            else {
                return;
            };
            let hasher = RssHasher::new(RssKey::SYMMETRIC, fields)
                .with_rules(std::sync::Arc::new(cells.clone()));
            let spec = TraceSpec {
                flows: 400,
                packets: 3000,
                ipv6_share: 0.0,
                tcp_share: 0.5,
                ..TraceSpec::default()
            };
            let mut seen = std::collections::BTreeSet::new();
            for (i, p) in Generator::new(&spec).unwrap().enumerate() {
                let frame = varied(&p.frame, i);
                let info = wire::parse(&frame).unwrap();
                let bucket = hasher.hash(&info.tuple) & (buckets - 1);
                let got = prog.test_run_xdp(&frame, 0, 0).unwrap();
                assert_eq!(got, bucket, "{key} {fields:?}: {:?}", info.tuple);
                seen.insert(bucket);
            }
            // the frames spread over many cells, all below the key's span
            assert!(seen.len() >= 8, "{key}: {seen:?}");
            assert!(seen.iter().all(|&b| b < buckets / 2), "{key}: {seen:?}");
        }
    }
}

/// Plans of many rules load and steer — up to as many as the XDP program
/// matches: the verifier's log of so long a program overflows a small
/// buffer, which must not fail the load.
#[test]
fn plans_of_many_rules_load() {
    use steer::roger::{Cube, KeyBits, Rule, RuleSteering, RuleTable};
    let most = netio::steering::MAX_XDP_RULES as u64;
    for (key, width, n, buckets, workers) in [
        ("src-ip:26-31", 6, 64, 128u32, 2u32),
        ("src-ip:23-31", 9, most, 1024, 1024),
    ] {
        let bits = KeyBits::parse(key).unwrap();
        let table = RuleTable {
            bits: width,
            cores: 1,
            rules: (0..n)
                .map(|v| Rule {
                    cube: Cube::new(v, (1 << width) - 1),
                    core: 0,
                })
                .collect(),
            default_rule: false,
        };
        let rules = RuleSteering::new(bits, table, buckets as usize).unwrap();
        let Some((k, prog)) = program(
            RssKey::SYMMETRIC,
            HashFields::IpPorts,
            (buckets, workers),
            Some(&rules),
        ) else {
            return;
        };
        let hasher = RssHasher::new(RssKey::SYMMETRIC, HashFields::IpPorts)
            .with_rules(std::sync::Arc::new(rules));
        let spec = TraceSpec {
            flows: 100,
            packets: 1000,
            ipv6_share: 0.0,
            ..TraceSpec::default()
        };
        for p in Generator::new(&spec).unwrap().step_by(10) {
            let info = wire::parse(&p.frame).unwrap();
            let bucket = hasher.hash(&info.tuple) & (buckets - 1);
            assert!(bucket < n as u32, "{key}");
            let core = k.get(bucket).unwrap();
            assert_eq!(prog.test_run_xdp(&p.frame, 0, 0).unwrap(), core, "{key}");
        }
    }
}
