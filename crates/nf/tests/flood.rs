//! A generated SYN flood (spoofed SYNs from the trace generator) among real
//! connections, through firewall → NAT → sequence check with small tables: the
//! connections established before the flood keep their state and every one of
//! their packets; new-flow admission is what degrades, as the table policy says;
//! the tables never hold more than their capacity.

mod common;

use std::collections::{HashMap, HashSet};

use nf::{DropCause, Verdict};
use trace::{Generator, Rate, SizeDist, TraceSpec};
use wire::{FiveTuple, L4Info, TcpFlags};

const CAPACITY: usize = 2000;

struct Outcome {
    /// Packets of connections established before the flood, after its start.
    established_after: u64,
    established_forwarded: u64,
    flood: u64,
    flood_forwarded: u64,
    flood_refused: u64,
    flood_other: u64,
    /// Connections first seen during the flood that got both directions through.
    new_admitted: usize,
    evicted: u64,
    max_len: u64,
}

fn flood_run(policy: &str) -> Outcome {
    let spec = TraceSpec {
        flows: 3000,
        packets: 60_000,
        active_flows: 300,
        syn_flood: 200_000,
        syn_flood_after: 0.3,
        rate: Rate::Mpps(0.1),
        sizes: SizeDist::Fixed(64),
        ..Default::default()
    };
    let pkts: Vec<_> = Generator::new(&spec).unwrap().collect();
    let (mut c, mut shards) = common::chain(&format!(
        "[steering]\nshards = 4\n[table]\ncapacity = {CAPACITY}\npolicy = \"{policy}\"\n\
         [[nf]]\nkind = \"firewall\"\nrules = \"allow any 10.0.0.0/8 -> any\"\n\
         [[nf]]\nkind = \"nat\"\ninternal = \"10.0.0.0/8\"\nexternal = [\"203.0.113.0/24\"]\n\
         [[nf]]\nkind = \"seqcheck\"\n"
    ));
    let is_flood = |i: &wire::PacketInfo| {
        i.payload_len == 0
            && i.l4
                == L4Info::Tcp {
                    flags: TcpFlags::SYN,
                }
    };
    let infos: Vec<_> = pkts
        .iter()
        .map(|p| wire::parse(&p.frame).unwrap())
        .collect();
    let start = infos.iter().position(is_flood).expect("a flood");
    // connection key (client → server tuple) of every connection packet; the
    // NAT rewrites replies, so replies are matched by the original tuple here
    let conn = |t: &FiveTuple| {
        if t.src.to_string().starts_with("10.") {
            *t
        } else {
            t.reversed()
        }
    };
    let (mut out, mut back): (HashSet<FiveTuple>, HashSet<FiveTuple>) = Default::default();
    let mut established: HashSet<FiveTuple> = HashSet::new();
    let mut first_seen: HashMap<FiveTuple, usize> = HashMap::new();
    let mut o = Outcome {
        established_after: 0,
        established_forwarded: 0,
        flood: 0,
        flood_forwarded: 0,
        flood_refused: 0,
        flood_other: 0,
        new_admitted: 0,
        evicted: 0,
        max_len: 0,
    };
    let mut last_expiry = pkts[0].ts_ns;
    for (i, (p, info)) in pkts.iter().zip(&infos).enumerate() {
        if i == start {
            established = out.intersection(&back).copied().collect();
        }
        if p.ts_ns >= last_expiry + 10_000_000 {
            for s in shards.iter_mut() {
                c.expire(s, p.ts_ns);
            }
            last_expiry = p.ts_ns;
        }
        let (v, _) = common::run(&mut c, &mut shards, p.frame.clone(), p.ts_ns);
        if is_flood(info) {
            o.flood += 1;
            match v {
                Verdict::Forward => o.flood_forwarded += 1,
                Verdict::Drop(DropCause::TableFull) => o.flood_refused += 1,
                Verdict::Drop(_) => o.flood_other += 1,
            }
            continue;
        }
        let k = conn(&info.tuple);
        first_seen.entry(k).or_insert(i);
        if i >= start && established.contains(&k) {
            o.established_after += 1;
            o.established_forwarded += u64::from(v == Verdict::Forward);
        }
        if v == Verdict::Forward {
            if k == info.tuple {
                out.insert(k);
            } else {
                back.insert(k);
            }
        }
    }
    o.new_admitted = first_seen
        .iter()
        .filter(|(k, at)| **at > start && out.contains(k) && back.contains(k))
        .count();
    for s in &shards {
        let st = s.table.stats();
        o.evicted += st.evicted;
        o.max_len = o.max_len.max(st.max_len);
    }
    assert_eq!(c.counters().packets, pkts.len() as u64);
    o
}

#[test]
fn syn_flood_degrades_new_flows_first() {
    let refuse = flood_run("refuse");
    let evict = flood_run("evict-unassured");
    for (name, o) in [("refuse", &refuse), ("evict-unassured", &evict)] {
        eprintln!(
            "{name}: established-before-flood packets {}/{} forwarded, flood {} = {} admitted + {} refused, {} new connections admitted, {} evicted, max {} entries/shard",
            o.established_forwarded, o.established_after, o.flood, o.flood_forwarded, o.flood_refused, o.new_admitted, o.evicted, o.max_len
        );
        assert!(
            o.established_after > 1_000,
            "{name}: {}",
            o.established_after
        );
        assert_eq!(
            o.established_forwarded, o.established_after,
            "{name}: every packet of a connection established before the flood passes"
        );
        assert_eq!(o.flood, 200_000);
        assert_eq!(
            o.flood_other, 0,
            "{name}: flood SYNs are admitted or refused, nothing else"
        );
        assert_eq!(o.flood_forwarded + o.flood_refused, o.flood);
        assert!(
            o.flood_refused > 150_000,
            "{name}: the tables filled ({})",
            o.flood_refused
        );
        assert!(
            o.max_len <= CAPACITY as u64,
            "{name}: {} entries",
            o.max_len
        );
    }
    assert_eq!(refuse.evicted, 0);
    assert!(evict.evicted > 1_000, "{}", evict.evicted);
    // refusing keeps the table full of flood entries until they time out;
    // evicting the old unassured ones lets new connections in
    assert!(
        evict.new_admitted > refuse.new_admitted,
        "new connections admitted during the flood: evict {} vs refuse {}",
        evict.new_admitted,
        refuse.new_admitted
    );
}
