//! The kernel's steering program hashes as the NIC model does: for generated
//! IPv4 TCP, UDP and ICMP packets, `BPF_PROG_TEST_RUN` of the program returns
//! `table[hash & (B − 1)]` with the hash of `steer::RssHasher` (checked with the
//! table set to the identity, so the return value is the bucket), both for
//! addresses-and-ports and for addresses only; a rewritten table entry takes
//! effect at once; the per-bucket counters count. Skipped where the kernel
//! refuses eBPF.

use netio::steering::KernelRss;
use steer::{HashFields, RssHasher, RssKey};
use trace::{Generator, TraceSpec};

#[test]
fn the_program_steers_like_the_nic_model() {
    for fields in [HashFields::IpPorts, HashFields::Ip] {
        let buckets = 4096;
        let Some(k) = netio::testbed::privileged(
            "the eBPF program or its maps",
            KernelRss::new(&steer::Toeplitz::new(RssKey::SYMMETRIC), fields, buckets, 1),
        ) else {
            return;
        };
        for b in 0..buckets {
            k.set(b, b).unwrap();
        }
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
        for p in Generator::new(&spec).unwrap() {
            let info = wire::parse(&p.frame).unwrap();
            let want = hasher.hash(&info.tuple) & (buckets - 1);
            let got = k.program().test_run(&p.frame).unwrap();
            assert_eq!(got, want, "{fields:?}: {:?}", info.tuple);
            *seen.entry(want).or_default() += 1;
            n += 1;
        }
        assert_eq!(n, 3000);
        // every run was counted in its bucket
        for (b, c) in &seen {
            assert_eq!(k.packets(*b).unwrap(), *c, "bucket {b}");
        }
        // a rewrite is seen by the next packet
        let (b, _) = seen.iter().next().unwrap();
        k.set(*b, 7).unwrap();
        assert_eq!(k.get(*b).unwrap(), 7);
    }
}

/// Live: two packet sockets in one fanout group on the test bed's interface,
/// steered by the program; every frame of the client's UDP flows reaches the
/// socket the table names, and after a rewrite of every bucket, the other one.
#[test]
fn a_fanout_group_follows_the_table_while_traffic_flows() {
    use netio::testbed::{Bed, CLIENT, SERVER};
    use netio::{netns, PacketSocket};
    use std::time::Duration;

    let Some(bed) = netio::testbed::privileged("the network namespace test bed", Bed::up("fsrss"))
    else {
        return;
    };
    let Some(k) = netio::testbed::privileged(
        "the eBPF program or its maps",
        KernelRss::new(
            &steer::Toeplitz::new(RssKey::SYMMETRIC),
            HashFields::IpPorts,
            128,
            2,
        ),
    ) else {
        return;
    };
    let (a, _) = bed.ifaces();
    let mid = bed.middle();
    let cli = bed.client();
    // sockets opened inside the middle namespace, by this thread's helper
    let socks = std::thread::scope(|s| {
        s.spawn(|| {
            netns::enter(&mid).unwrap();
            let socks: Vec<PacketSocket> =
                (0..2).map(|_| PacketSocket::open(&a).unwrap()).collect();
            for sk in &socks {
                sk.join_fanout(77, k.program()).unwrap();
            }
            socks
        })
        .join()
        .unwrap()
    });
    let send = |n: u16| {
        let cli = cli.clone();
        std::thread::spawn(move || {
            netns::enter(&cli).unwrap();
            let u = std::net::UdpSocket::bind((CLIENT, 0)).unwrap();
            for i in 0..n {
                u.send_to(&[i as u8; 20], (SERVER, 9000 + i)).unwrap();
            }
        })
        .join()
        .unwrap();
        std::thread::sleep(Duration::from_millis(100));
    };
    let drain = |s: &PacketSocket| {
        let mut buf = Vec::new();
        let mut udp = 0;
        while s.recv(&mut buf).unwrap() {
            if buf.len() > 23 && buf[12..14] == [8, 0] && buf[23] == 17 {
                udp += 1;
            }
        }
        udp
    };
    for (to, other) in [(1u32, 0usize), (0, 1)] {
        for b in 0..128 {
            k.set(b, to).unwrap();
        }
        drain(&socks[0]);
        drain(&socks[1]);
        send(64);
        let (got, none) = (drain(&socks[to as usize]), drain(&socks[other]));
        assert_eq!((got, none), (64, 0), "all 64 UDP frames on socket {to}");
    }
    let counted: u64 = (0..128).map(|b| k.packets(b).unwrap()).sum();
    assert!(counted >= 128, "the per-bucket counters saw {counted}");
}
