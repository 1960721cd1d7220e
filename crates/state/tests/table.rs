//! The flow table against a model (a HashMap), the capacity policies, and timers.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};

use proptest::prelude::*;
use state::{CapPolicy, Dir, EntryId, FlowKey, FlowTable, IndexHash, InsertError, TableConfig};
use wire::FiveTuple;

fn tuple(i: u32) -> FiveTuple {
    FiveTuple {
        src: IpAddr::V4(Ipv4Addr::from(0x0a00_0000 | i)),
        dst: IpAddr::V4(Ipv4Addr::new(198, 18, 0, 1)),
        src_port: 1024 + (i % 50_000) as u16,
        dst_port: 443,
        proto: 6,
    }
}

/// A weak hash on purpose (many collisions in the low bits and in full), so probing
/// and backward-shift deletion are exercised.
fn weak_hash(i: u32) -> u32 {
    (i % 97) << 8 | (i % 3)
}

/// The index is keyed by the given (weak) hash, so probing and deletion are
/// exercised under heavy collisions.
fn cfg(capacity: usize, policy: CapPolicy) -> TableConfig {
    TableConfig {
        capacity,
        slots: 2,
        keys_per_entry: 2,
        policy,
        index: IndexHash::Rss,
        ..Default::default()
    }
}

#[derive(Debug, Clone)]
enum Op {
    Insert(u32),
    Remove(u32),
    Lookup(u32),
    Alias(u32),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0u32..300).prop_map(Op::Insert),
        (0u32..300).prop_map(Op::Remove),
        (0u32..300).prop_map(Op::Lookup),
        (0u32..300).prop_map(Op::Alias),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]
    #[test]
    fn table_matches_a_model(ops in prop::collection::vec(op(), 1..400), own in 0usize..3) {
        let mut t: FlowTable<Option<u32>> = FlowTable::new(TableConfig { own_indexes: own, ..cfg(1000, CapPolicy::Refuse) });
        let mut model: HashMap<u32, EntryId> = HashMap::new();
        let mut aliased: HashMap<u32, u32> = HashMap::new(); // alias key index -> flow
        for op in ops {
            match op {
                Op::Insert(i) => {
                    if !model.contains_key(&i) && !aliased.contains_key(&(i + 10_000)) {
                        let (k, s) = FlowKey::of(&tuple(i));
                        prop_assert!(t.lookup(&k, s, weak_hash(i)).is_none());
                        let id = t.insert(k, s, weak_hash(i), |_, _, _| {}).unwrap();
                        *t.slot_mut(id, 1) = Some(i);
                        model.insert(i, id);
                    }
                }
                Op::Remove(i) => {
                    if let Some(id) = model.remove(&i) {
                        t.remove(id);
                        aliased.retain(|_, f| *f != i);
                    }
                }
                Op::Alias(i) => {
                    if let Some(id) = model.get(&i) {
                        let a = i + 10_000;
                        if !aliased.contains_key(&a) {
                            let (k, s) = FlowKey::of(&tuple(a));
                            aliased.retain(|_, f| *f != i);
                            t.add_alias(*id, 1, k, s, weak_hash(a));
                            aliased.insert(a, i);
                        }
                    }
                }
                Op::Lookup(i) => {
                    let (k, s) = FlowKey::of(&tuple(i));
                    let l = t.lookup(&k, s, weak_hash(i));
                    // the chain's probe by index hash (its own loop, out of
                    // line after a signature collision) finds the same
                    let ih = t.probe(&k, weak_hash(i));
                    prop_assert_eq!(t.lookup_at(&k, s, ih), l);
                    // and so does each own index of the per-NF layout
                    for n in 0..own {
                        prop_assert_eq!(t.lookup_own(n, &k, s, weak_hash(i)), l);
                    }
                    prop_assert_eq!(t.lookup_own(own, &k, s, weak_hash(i)), None);
                    let got = l.map(|l| l.id);
                    prop_assert_eq!(got, model.get(&i).copied());
                    if let Some(id) = got {
                        prop_assert_eq!(*t.slot(id, 1), Some(i));
                    }
                }
            }
            prop_assert_eq!(t.len(), model.len());
        }
        // every key and alias still reachable, with the right direction, by
        // either probe
        for (i, id) in &model {
            let (k, s) = FlowKey::of(&tuple(*i));
            prop_assert_eq!(t.lookup(&k, s, weak_hash(*i)).map(|l| (l.id, l.dir)), Some((*id, Dir::Original)));
            let ih = t.probe(&k, weak_hash(*i));
            prop_assert_eq!(t.lookup_at(&k, s, ih).map(|l| (l.id, l.dir)), Some((*id, Dir::Original)));
            let (k, s) = FlowKey::of(&tuple(*i).reversed());
            prop_assert_eq!(t.lookup(&k, s, weak_hash(*i)).map(|l| (l.id, l.dir)), Some((*id, Dir::Reply)));
            prop_assert_eq!(t.lookup_at(&k, s, ih).map(|l| (l.id, l.dir)), Some((*id, Dir::Reply)));
        }
        for (a, i) in &aliased {
            // the alias was added for packets sent from the alias tuple's source; the
            // reply of the translated flow comes from the other side
            let (k, s) = FlowKey::of(&tuple(*a).reversed());
            prop_assert_eq!(t.lookup(&k, s, weak_hash(*a)).map(|l| (l.id, l.dir)), Some((model[i], Dir::Reply)));
            for n in 0..own {
                prop_assert_eq!(t.lookup_own(n, &k, s, weak_hash(*a)).map(|l| (l.id, l.dir)), Some((model[i], Dir::Reply)));
            }
            let ih = t.probe(&k, weak_hash(*a));
            prop_assert_eq!(t.lookup_at(&k, s, ih).map(|l| (l.id, l.dir)), Some((model[i], Dir::Reply)));
        }
    }
}

#[test]
fn batch_lookup_equals_single_lookups() {
    let mut t: FlowTable<Option<u32>> = FlowTable::new(cfg(5000, CapPolicy::Refuse));
    for i in 0..3000 {
        let (k, s) = FlowKey::of(&tuple(i));
        t.insert(k, s, weak_hash(i), |_, _, _| {}).unwrap();
    }
    let reqs: Vec<_> = (2500..3500)
        .map(|i| {
            let (k, s) = FlowKey::of(&tuple(i));
            (k, s, weak_hash(i))
        })
        .collect();
    let mut out = Vec::new();
    t.lookup_batch(&reqs, &mut out);
    let single: Vec<_> = reqs.iter().map(|(k, s, h)| t.lookup(k, *s, *h)).collect();
    assert_eq!(out, single);
    assert_eq!(out.iter().filter(|o| o.is_some()).count(), 500);
}

#[test]
fn refuse_policy_counts_and_keeps_existing() {
    let mut t: FlowTable<Option<u32>> = FlowTable::new(cfg(10, CapPolicy::Refuse));
    for i in 0..10 {
        let (k, s) = FlowKey::of(&tuple(i));
        t.insert(k, s, i, |_, _, _| {}).unwrap();
    }
    let (k, s) = FlowKey::of(&tuple(99));
    assert_eq!(
        t.insert(k, s, 99, |_, _, _| {}),
        Err(InsertError::TableFull)
    );
    assert_eq!(t.stats().refused, 1);
    assert_eq!(t.len(), 10);
}

#[test]
fn syn_flood_evicts_only_unassured() {
    let mut t: FlowTable<Option<u32>> = FlowTable::new(cfg(100, CapPolicy::EvictUnassured));
    // 40 established flows: both directions seen
    for i in 0..40 {
        let (k, s) = FlowKey::of(&tuple(i));
        let id = t.insert(k, s, i, |_, _, _| {}).unwrap();
        *t.slot_mut(id, 0) = Some(i);
        let (k, s) = FlowKey::of(&tuple(i).reversed());
        assert_eq!(t.lookup(&k, s, i).unwrap().dir, Dir::Reply);
        assert!(t.is_assured(id));
    }
    // a flood of 10 000 one-way flows
    let mut released = 0;
    for i in 1000..11_000 {
        let (k, s) = FlowKey::of(&tuple(i));
        let id = t.insert(k, s, i, |_, _, st| {
            assert!(st.unwrap() >= 1000, "an established flow was evicted");
            released += 1;
        });
        *t.slot_mut(id.unwrap(), 0) = Some(i);
    }
    assert_eq!(t.len(), 100);
    assert_eq!(t.stats().evicted, 9_940);
    assert_eq!(released, 9_940);
    for i in 0..40 {
        let (k, s) = FlowKey::of(&tuple(i));
        assert!(t.lookup(&k, s, i).is_some(), "established flow {i} kept");
    }
    // with only assured flows left, new flows are refused
    let mut t: FlowTable<Option<u32>> = FlowTable::new(cfg(2, CapPolicy::EvictUnassured));
    for i in 0..2 {
        let (k, s) = FlowKey::of(&tuple(i));
        t.insert(k, s, i, |_, _, _| {}).unwrap();
        let (k, s) = FlowKey::of(&tuple(i).reversed());
        t.lookup(&k, s, i).unwrap();
    }
    let (k, s) = FlowKey::of(&tuple(9));
    assert_eq!(t.insert(k, s, 9, |_, _, _| {}), Err(InsertError::TableFull));
}

#[test]
fn per_slot_deadlines_expire_and_free() {
    let mut t: FlowTable<Option<u32>> = FlowTable::new(TableConfig {
        tick_ns: 1_000,
        wheel_slots: 16,
        ..cfg(100, CapPolicy::Refuse)
    });
    let (k, s) = FlowKey::of(&tuple(1));
    let id = t.insert(k, s, 1, |_, _, _| {}).unwrap();
    *t.slot_mut(id, 0) = Some(10);
    *t.slot_mut(id, 1) = Some(11);
    t.set_deadline(id, 0, 5_000);
    t.set_deadline(id, 1, 50_000); // beyond one wheel turn (16 µs)
    let mut got = Vec::new();
    t.expire(4_000, |e, nf, st| got.push((e, nf, st)));
    assert!(got.is_empty());
    t.expire(6_000, |e, nf, st| got.push((e, nf, st)));
    assert_eq!(got, [(id, 0, Some(10))]);
    assert!(t.is_live(id));
    // a packet extends slot 1: the old wake-up finds it not yet due
    t.set_deadline(id, 1, 80_000);
    t.expire(60_000, |e, nf, st| got.push((e, nf, st)));
    assert_eq!(got.len(), 1);
    // an earlier deadline re-arms
    t.set_deadline(id, 1, 61_000);
    t.expire(62_000, |e, nf, st| got.push((e, nf, st)));
    assert_eq!(got, [(id, 0, Some(10)), (id, 1, Some(11))]);
    assert!(!t.is_live(id), "freed when every slot is empty");
    assert_eq!(t.len(), 0);
    let (k, s) = FlowKey::of(&tuple(1));
    assert!(t.lookup(&k, s, 1).is_none());
}

#[test]
fn stale_ids_do_not_fire_on_reused_entries() {
    let mut t: FlowTable<Option<u32>> = FlowTable::new(TableConfig {
        tick_ns: 1_000,
        ..cfg(10, CapPolicy::Refuse)
    });
    let (k, s) = FlowKey::of(&tuple(1));
    let id = t.insert(k, s, 1, |_, _, _| {}).unwrap();
    *t.slot_mut(id, 0) = Some(1);
    t.set_deadline(id, 0, 5_000);
    t.remove(id);
    let (k2, s2) = FlowKey::of(&tuple(2));
    let id2 = t.insert(k2, s2, 2, |_, _, _| {}).unwrap();
    assert_eq!(id, id2, "slot reused");
    *t.slot_mut(id2, 0) = Some(2);
    t.set_deadline(id2, 0, 100_000);
    let mut fired = 0;
    t.expire(10_000, |_, _, _| fired += 1);
    assert_eq!(fired, 0);
    assert!(t.is_live(id2));
}

/// A detached entry keeps its keys, is neither expired nor evicted nor freed while
/// away, and comes back with the state and deadlines the other core left in it.
#[test]
fn detached_entries_are_pinned_until_attached() {
    let mut t: FlowTable<Option<u32>> = FlowTable::new(TableConfig {
        capacity: 2,
        ..cfg(2, CapPolicy::EvictUnassured)
    });
    let (k0, s0) = FlowKey::of(&tuple(0));
    let a = t.insert(k0, s0, weak_hash(0), |_, _, _| {}).unwrap();
    *t.slot_mut(a, 0) = Some(7);
    t.set_deadline(a, 0, 1_000);
    let mut d = t.detach(a);
    assert_eq!(d.slots, vec![Some(7), None]);
    assert_eq!(d.deadlines, vec![1_000, 0]);
    assert!(t.is_detached(a));
    // still found by lookup; not freed though its slots are empty here
    assert_eq!(t.lookup(&k0, s0, weak_hash(0)).map(|l| l.id), Some(a));
    assert!(!t.release_if_empty(a));
    // not expired past its old deadline
    let mut released = Vec::new();
    t.expire(10_000_000_000, |id, nf, s| released.push((id, nf, s)));
    assert!(released.is_empty());
    assert!(t.is_live(a));
    // not evicted: a second flow fits, a third finds only the other to evict
    let (k1, s1) = FlowKey::of(&tuple(1));
    let b = t.insert(k1, s1, weak_hash(1), |_, _, _| {}).unwrap();
    *t.slot_mut(b, 0) = Some(1);
    let (k2, s2) = FlowKey::of(&tuple(2));
    t.insert(k2, s2, weak_hash(2), |_, _, _| {}).unwrap();
    assert!(
        t.is_live(a)
            && !t.is_current(&state::Lookup {
                id: b,
                dir: Dir::Original,
                gen: 0
            })
    );
    // the other core worked on it
    d.slots[1] = Some(9);
    d.deadlines[1] = 20_000_000_000;
    assert!(t.attach(a, d));
    assert!(!t.is_detached(a));
    assert_eq!((*t.slot(a, 0), *t.slot(a, 1)), (Some(7), Some(9)));
    // deadlines re-armed: slot 0 (deadline long past) goes at the next tick
    let mut released = Vec::new();
    t.expire(11_000_000_000, |id, nf, s| released.push((id, nf, s)));
    assert_eq!(released, vec![(a, 0, Some(7))]);
    assert!(t.is_live(a));
    // an entry that comes back empty is freed
    let d = t.detach(a);
    let empty = state::Detached {
        slots: vec![None, None],
        ..d
    };
    assert!(!t.attach(a, empty));
    assert!(!t.is_live(a));
    assert_eq!(t.stats().detached, 2);
}

/// Flows that come and go without the table ever filling (churn under either
/// policy) leave nothing behind: the unassured queue stays within twice the
/// capacity, and eviction still finds the oldest live unassured flow after it.
#[test]
fn unassured_queue_is_bounded_under_churn() {
    for policy in [CapPolicy::Refuse, CapPolicy::EvictUnassured] {
        let mut t: FlowTable<Option<u32>> = FlowTable::new(cfg(100, policy));
        for i in 0..100_000u32 {
            let (k, s) = FlowKey::of(&tuple(i));
            let id = t.insert(k, s, i, |_, _, _| {}).unwrap();
            if i % 2 == 0 {
                // half of them are answered
                let (k, s) = FlowKey::of(&tuple(i).reversed());
                t.lookup(&k, s, i).unwrap();
            }
            if i >= 50 {
                // a flow 50 behind ends
                let (k, s) = FlowKey::of(&tuple(i - 50));
                let old = t.lookup(&k, s, i - 50).unwrap().id;
                t.remove(old);
            }
            let _ = id;
        }
        assert_eq!(t.len(), 50);
        assert!(
            t.unassured_queued() <= 2 * 100 + 64,
            "{policy:?}: {}",
            t.unassured_queued()
        );
        if policy == CapPolicy::Refuse {
            assert_eq!(t.unassured_queued(), 0);
        }
    }
    // after churn, eviction takes the oldest live unassured flow
    let mut t: FlowTable<Option<u32>> = FlowTable::new(cfg(10, CapPolicy::EvictUnassured));
    for i in 0..10_000u32 {
        let (k, s) = FlowKey::of(&tuple(i));
        let id = t.insert(k, s, i, |_, _, _| {}).unwrap();
        if i + 5 < 10_000 {
            t.remove(id);
        }
    }
    // 5 live unassured flows (9995..9999); fill to 10, then one more evicts 9995
    for i in 20_000..20_005u32 {
        let (k, s) = FlowKey::of(&tuple(i));
        t.insert(k, s, i, |_, _, _| {}).unwrap();
    }
    let (k, s) = FlowKey::of(&tuple(30_000));
    t.insert(k, s, 30_000, |_, _, _| {}).unwrap();
    let (k, s) = FlowKey::of(&tuple(9_995));
    assert!(
        t.lookup(&k, s, 9_995).is_none(),
        "the oldest unassured flow was evicted"
    );
    let (k, s) = FlowKey::of(&tuple(9_996));
    assert!(t.lookup(&k, s, 9_996).is_some());
}

/// A slot with a long timeout beside one with a short timeout that comes and
/// goes (a sequence check's 300 s beside a firewall's seconds): each time the
/// short one is armed again, the entry's long wake-up item goes stale, and
/// stale items used to pile up in the wheel until their far-away tick (the
/// soak's memory grew 0.25 MiB/s). The wheel stays within a few items per live
/// entry, and every deadline still fires.
#[test]
fn stale_wheel_items_do_not_pile_up() {
    let mut t: FlowTable<Option<u32>> = FlowTable::new(TableConfig {
        tick_ns: 1_000,
        wheel_slots: 64,
        ..cfg(1000, CapPolicy::Refuse)
    });
    let mut ids = Vec::new();
    for i in 0..500u32 {
        let (k, s) = FlowKey::of(&tuple(i));
        let id = t.insert(k, s, i, |_, _, _| {}).unwrap();
        *t.slot_mut(id, 1) = Some(i);
        t.set_deadline(id, 1, 1_000_000_000); // long: 1 s
        ids.push(id);
    }
    let mut expired = 0u64;
    let mut now = 0;
    for round in 0..200u64 {
        // every flow's short slot is armed again (a new connection on it)
        for &id in &ids {
            *t.slot_mut(id, 0) = Some(round as u32);
            t.set_deadline(id, 0, now + 5_000);
        }
        now += 10_000;
        t.expire(now, |_, nf, _| {
            assert_eq!(nf, 0);
            expired += 1;
        });
        // and the long one moves later (a packet), with nothing scheduled
        for &id in &ids {
            t.set_deadline(id, 1, now + 1_000_000_000);
        }
        assert!(
            t.wheel_items() <= 3 * 500 + 1024,
            "round {round}: {} items",
            t.wheel_items()
        );
    }
    assert_eq!(expired, 200 * 500, "every short deadline fired");
    assert_eq!(t.len(), 500);
    // the long deadlines still fire
    t.expire(now + 1_100_000_000, |_, nf, _| assert_eq!(nf, 1));
    assert_eq!(t.len(), 0);
}

/// An entry's image installed in another table (another clock) is found there
/// by both keys, in both directions, with its slots, the time each had left,
/// and its assured mark; a second image updates it; an image of empty slots
/// removes it. Deadlines keep their remaining time, not the clock reading.
#[test]
fn an_image_installs_in_another_table_by_both_keys() {
    let ms_ticks = TableConfig {
        tick_ns: 1_000_000,
        ..cfg(100, CapPolicy::Refuse)
    };
    let mut a: FlowTable<Option<u32>> = FlowTable::new(ms_ticks.clone());
    let mut b: FlowTable<Option<u32>> = FlowTable::new(ms_ticks);
    let (k, s) = FlowKey::of(&tuple(7));
    let (ak, aside) = FlowKey::of(&tuple(20_007));
    let id = a.insert(k, s, weak_hash(7), |_, _, _| {}).unwrap();
    *a.slot_mut(id, 0) = Some(70);
    *a.slot_mut(id, 1) = Some(71);
    a.set_deadline(id, 0, 1_000_000 + 5_000_000);
    a.set_deadline(id, 1, 1_000_000 + 20_000_000);
    a.add_alias(id, 1, ak, aside, weak_hash(20_007));
    // a reply seen: assured
    let reply = if s == state::Side::Lo {
        state::Side::Hi
    } else {
        state::Side::Lo
    };
    assert_eq!(a.lookup(&k, reply, weak_hash(7)).unwrap().dir, Dir::Reply);
    let img = a.image(id, 1_000_000);
    assert_eq!(
        img.slots,
        vec![(Some(70), 5_000_000), (Some(71), 20_000_000)]
    );
    assert!(img.assured);

    // the other table's clock reads 50 ms
    let got = b.install(&img, 50_000_000, |_, _, _| {}).unwrap().unwrap();
    assert_eq!(b.len(), 1);
    assert_eq!(b.slot(got, 0), &Some(70));
    assert_eq!(b.slot(got, 1), &Some(71));
    assert!(b.is_assured(got));
    let l = b.lookup(&k, s, weak_hash(7)).unwrap();
    assert_eq!((l.id, l.dir), (got, Dir::Original));
    // the alias key's other side is the reply direction
    let alias_reply = if aside == state::Side::Lo {
        state::Side::Hi
    } else {
        state::Side::Lo
    };
    let l = b.lookup(&ak, alias_reply, weak_hash(20_007)).unwrap();
    assert_eq!((l.id, l.dir), (got, Dir::Reply));
    // slot 0 expires 5 ms after the install, not at the first table's deadline
    let mut gone = Vec::new();
    b.expire(50_000_000 + 3_000_000, |_, nf, st| gone.push((nf, st)));
    assert!(gone.is_empty(), "{gone:?}");
    b.expire(50_000_000 + 8_000_000, |_, nf, st| gone.push((nf, st)));
    assert_eq!(gone, vec![(0, Some(70))]);

    // an update: slot 0 back, slot 1 changed, into the same entry
    *a.slot_mut(id, 1) = Some(72);
    let img2 = a.image(id, 1_000_000);
    let again = b.install(&img2, 60_000_000, |_, _, _| {}).unwrap().unwrap();
    assert_eq!(again, got);
    assert_eq!(b.len(), 1);
    assert_eq!((b.slot(got, 0), b.slot(got, 1)), (&Some(70), &Some(72)));

    // every slot emptied: the entry goes, its state handed back
    let mut empty = img2.clone();
    for s in &mut empty.slots {
        *s = (None, 0);
    }
    let mut released = Vec::new();
    assert_eq!(
        b.install(&empty, 61_000_000, |_, nf, st| released.push((nf, st)))
            .unwrap(),
        None
    );
    assert_eq!(b.len(), 0);
    assert!(b.lookup(&k, s, weak_hash(7)).is_none());
    assert!(b.lookup(&ak, alias_reply, weak_hash(20_007)).is_none());
    assert_eq!(released, vec![(0, Some(70)), (1, Some(72))]);
    // and an image of nothing makes nothing
    assert_eq!(b.install(&empty, 62_000_000, |_, _, _| {}).unwrap(), None);
    assert_eq!(b.len(), 0);
}

/// A flow's exit order: per direction, a packet whose arrival stamp is below
/// the last one that left is late (and does not move the mark back); the
/// order travels with detached slots and comes back with them; a new entry in
/// a freed slot starts with none.
#[test]
fn exit_order_is_kept_per_direction_and_travels_with_the_slots() {
    let mut t: FlowTable<Option<u32>> = FlowTable::new(cfg(8, CapPolicy::Refuse));
    let k = FlowKey::of(&tuple(1)).0;
    let a = t.insert(k, state::Side::Lo, 1, |_, _, _| {}).unwrap();
    *t.slot_mut(a, 0) = Some(1);
    assert!(t.exit_in_order(a, Dir::Original, 10));
    assert!(t.exit_in_order(a, Dir::Original, 20));
    // the other direction has an order of its own
    assert!(t.exit_in_order(a, Dir::Reply, 15));
    assert!(!t.exit_in_order(a, Dir::Original, 15), "15 left after 20");
    // the late packet did not lower the mark
    assert!(!t.exit_in_order(a, Dir::Original, 19));
    assert!(t.exit_in_order(a, Dir::Original, 21));
    // detached: the order goes with the slots, and comes back with them
    let mut d = t.detach(a);
    assert!(!d.exit_in_order(Dir::Original, 5));
    assert!(d.exit_in_order(Dir::Original, 30));
    assert!(t.attach(a, d));
    assert!(
        !t.exit_in_order(a, Dir::Original, 25),
        "30 left while detached"
    );
    assert!(!t.exit_in_order(a, Dir::Reply, 14));
    // freed, then reused by another flow: no order carried over
    t.remove(a);
    let b = t
        .insert(FlowKey::of(&tuple(2)).0, state::Side::Lo, 2, |_, _, _| {})
        .unwrap();
    assert_eq!(a, b, "the freed slot is reused");
    assert!(t.exit_in_order(b, Dir::Original, 1));
}

/// The index starts small and doubles as flows arrive, up to the size the
/// capacity needs and no further; every flow is found across the doublings
/// (keys and aliases, under a weak hash) while the keys move to the new
/// buckets a few at a time.
#[test]
fn the_index_grows_with_the_flows_up_to_the_capacity() {
    let mut t: FlowTable<Option<u32>> = FlowTable::new(cfg(5_000, CapPolicy::Refuse));
    let first = t.index_buckets();
    assert!(first <= 64, "a new table's index is small: {first}");
    let mut ids = Vec::new();
    for i in 0..5_000u32 {
        let (k, s) = FlowKey::of(&tuple(i));
        let id = t.insert(k, s, weak_hash(i), |_, _, _| {}).unwrap();
        if i % 2 == 0 {
            let (a, side) = FlowKey::of(&tuple(100_000 + i));
            t.add_alias(id, 0, a, side, weak_hash(100_000 + i));
        }
        ids.push(id);
    }
    // 7 500 keys at load ≤ ½: 16 384 buckets, as the capacity's 20 000 keys
    // would need 32 768
    assert_eq!(t.index_buckets(), 16_384);
    let st = t.stats().clone();
    assert_eq!(st.index_grown, (16_384f64 / first as f64).log2() as u64);
    for (i, id) in ids.iter().enumerate() {
        let (k, s) = FlowKey::of(&tuple(i as u32));
        assert_eq!(
            t.lookup(&k, s, weak_hash(i as u32)).map(|l| l.id),
            Some(*id)
        );
        if i % 2 == 0 {
            let (a, side) = FlowKey::of(&tuple(100_000 + i as u32));
            let l = t.lookup(&a, side, weak_hash(100_000 + i as u32));
            assert_eq!(l.map(|l| l.id), Some(*id), "alias {i}");
        }
    }
    // flows that leave and others that come: the index grows no more
    for (i, id) in ids.iter().enumerate().take(2_500) {
        let _ = i;
        t.remove(*id);
    }
    for i in 0..2_500u32 {
        let (k, s) = FlowKey::of(&tuple(200_000 + i));
        t.insert(k, s, weak_hash(200_000 + i), |_, _, _| {})
            .unwrap();
    }
    assert_eq!(t.index_buckets(), 16_384);
    assert_eq!(t.stats().index_grown, st.index_grown);
    // full, with every alias: the size the capacity needs, no more
    let mut big: FlowTable<Option<u32>> = FlowTable::new(cfg(1_000, CapPolicy::Refuse));
    for i in 0..1_000u32 {
        let (k, s) = FlowKey::of(&tuple(i));
        let id = big.insert(k, s, i, |_, _, _| {}).unwrap();
        let (a, side) = FlowKey::of(&tuple(100_000 + i));
        big.add_alias(id, 0, a, side, 100_000 + i);
    }
    assert_eq!(big.index_buckets(), 4_096);
}
