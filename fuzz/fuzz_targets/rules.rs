//! Any text as each kind of rules file, checked against a reference where one
//! exists: a firewall ACL compiled into the disjoint classifier must pick the
//! same rule as naive first match at every rule's corners; a route table must
//! answer as longest-prefix match over the routes; IDS rules that parse are
//! compiled into the streaming matcher and fed the input. Errors are fine;
//! panics, hangs and runaway memory are not.
#![no_main]

use std::net::IpAddr;

use libfuzzer_sys::fuzz_target;
use nf::firewall::acl::{first_match, Action, Fields};
use nf::firewall::Classifier;
use nf::router::{lpm, RouteTable};

fuzz_target!(|data: &[u8]| {
    let Some((&which, rest)) = data.split_first() else {
        return;
    };
    let Ok(text) = std::str::from_utf8(rest) else {
        return;
    };
    match which % 3 {
        0 => acl(text),
        1 => routes(text),
        _ => ids(text),
    }
});

fn acl(text: &str) {
    let Ok(rules) = nf::firewall::parse_rules(text) else {
        return;
    };
    let c = Classifier::new(rules.clone(), Action::Deny);
    for r in &rules {
        for pick in 0..4u32 {
            let end = |range: (u128, u128)| match pick {
                0 => range.0,
                1 => range.1,
                2 => range.0.wrapping_sub(1),
                _ => range.1.wrapping_add(1),
            };
            let port = |range: (u32, u32)| {
                (end((range.0.into(), range.1.into())) as u32).min(nf::firewall::acl::NO_PORT)
            };
            let f = Fields {
                proto: port(r.proto).min(255),
                src: end(r.src),
                sport: port(r.sport),
                dst: end(r.dst),
                dport: port(r.dport),
            };
            assert_eq!(c.rule_of(&f), first_match(&rules, &f), "{f:?}");
        }
    }
}

fn routes(text: &str) {
    let Ok(routes) = nf::router::parse_routes(text.lines()) else {
        return;
    };
    let Ok(table) = RouteTable::compile(&routes) else {
        return;
    };
    for r in &routes {
        let (lo, hi) = (r.prefix.network(), r.prefix.broadcast());
        for a in [lo, hi, step(lo, -1), step(hi, 1)] {
            assert_eq!(table.lookup(a), lpm(&routes, a), "{a}");
        }
    }
}

/// The address next to `a` (wrapping).
fn step(a: IpAddr, d: i8) -> IpAddr {
    match a {
        IpAddr::V4(a) => IpAddr::V4(u32::from(a).wrapping_add_signed(d.into()).into()),
        IpAddr::V6(a) => IpAddr::V6(u128::from(a).wrapping_add_signed(d.into()).into()),
    }
}

fn ids(text: &str) {
    let Ok(rules) = nf::ids::parse(text) else {
        return;
    };
    if let Ok(m) = nf::ids::Matcher::new(&rules) {
        let (mut st, mut pr) = (m.start(), nf::ids::Progress::default());
        m.feed(&mut st, &mut pr, text.as_bytes(), |_| {});
    }
}
