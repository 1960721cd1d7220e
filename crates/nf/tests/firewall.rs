//! The compiled classifier agrees with naive first-match on 10⁵ random packets over
//! random overlapping rule sets; rule-file errors name the line.

use nf::firewall::acl::{first_match, Fields, Rule, NO_PORT};
use nf::firewall::{parse_rules, Action, Classifier};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Addresses from a small universe (so prefixes overlap a lot), IPv4-mapped or IPv6.
fn addr(rng: &mut ChaCha8Rng, v6: bool) -> u128 {
    let x: u32 = rng.gen_range(0..64) << 26 | rng.gen_range(0..4) << 8 | rng.gen_range(0..4);
    if v6 {
        0x2001_0db8u128 << 96 | u128::from(x)
    } else {
        0xffff_0000_0000u128 | u128::from(x)
    }
}

fn prefix(rng: &mut ChaCha8Rng, v6: bool) -> (u128, u128) {
    if rng.gen_bool(0.15) {
        return (0, u128::MAX);
    }
    let bits = if v6 { 128 } else { 32 };
    let len = rng.gen_range(0..=bits);
    let host_bits = bits - len;
    let a = addr(rng, v6);
    let mask = if host_bits == 128 {
        u128::MAX
    } else {
        (1u128 << host_bits) - 1
    };
    (a & !mask, a | mask)
}

fn ports(rng: &mut ChaCha8Rng) -> (u32, u32) {
    match rng.gen_range(0..4) {
        0 => (0, NO_PORT),
        1 => {
            let p = rng.gen_range(0..100);
            (p, p)
        }
        _ => {
            let a = rng.gen_range(0..120);
            (a, rng.gen_range(a..=130))
        }
    }
}

fn rule(rng: &mut ChaCha8Rng, line: usize) -> Rule {
    let v6 = rng.gen_bool(0.3);
    let proto = match rng.gen_range(0..4) {
        0 => (0, 255),
        1 => (6, 6),
        2 => (17, 17),
        _ => (1, 1),
    };
    let ported = matches!(proto, (6, 6) | (17, 17));
    Rule {
        line,
        action: if rng.gen_bool(0.5) {
            Action::Allow
        } else {
            Action::Deny
        },
        proto,
        src: prefix(rng, v6),
        sport: if ported { ports(rng) } else { (0, NO_PORT) },
        dst: prefix(rng, v6),
        dport: if ported { ports(rng) } else { (0, NO_PORT) },
    }
}

fn packet(rng: &mut ChaCha8Rng) -> Fields {
    let v6 = rng.gen_bool(0.3);
    let proto = [6u32, 17, 1, 47][rng.gen_range(0..4)];
    let ported = proto == 6 || proto == 17;
    let port = |rng: &mut ChaCha8Rng| {
        if ported {
            rng.gen_range(0..135)
        } else {
            NO_PORT
        }
    };
    Fields {
        proto,
        src: addr(rng, v6),
        sport: port(rng),
        dst: addr(rng, v6),
        dport: port(rng),
    }
}

#[test]
fn classifier_equals_first_match_on_100k_packets() {
    let mut rng = ChaCha8Rng::seed_from_u64(42);
    let mut checked = 0;
    let mut matched = 0;
    for set in 0..10 {
        let n = [5, 10, 20, 40, 60][set % 5];
        let rules: Vec<Rule> = (0..n).map(|i| rule(&mut rng, i + 1)).collect();
        let default = if set % 2 == 0 {
            Action::Deny
        } else {
            Action::Allow
        };
        let c = Classifier::new(rules.clone(), default);
        for _ in 0..10_000 {
            let f = packet(&mut rng);
            let want = first_match(&rules, &f);
            assert_eq!(c.rule_of(&f), want, "set {set}, packet {f:?}");
            assert_eq!(c.classify(&f), want.map_or(default, |r| rules[r].action));
            matched += usize::from(want.is_some());
            checked += 1;
        }
    }
    assert_eq!(checked, 100_000);
    // the generator must exercise both matching and non-matching packets
    assert!(
        matched > 20_000 && matched < 95_000,
        "{matched} of {checked} matched"
    );
}

#[test]
fn rule_file_errors_name_the_line() {
    let e =
        parse_rules("allow tcp any -> any:80\n\n# c\nallow tcp any -> 300.1.1.1\n").unwrap_err();
    assert_eq!(e.line, 4);
    assert!(e.to_string().contains("300.1.1.1"), "{e}");
}
