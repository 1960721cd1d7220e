//! The IDS matcher across packet boundaries: a payload fed in pieces (cut where
//! the input says) raises exactly the alerts it raises fed whole, as NFLOW/MVT's
//! streaming FSM promises (a pattern split across packets matches as if the
//! stream were one buffer).
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use nf::ids::{Matcher, Progress};

const RULES: &str = r#"
alert tcp any any -> any any (msg:"one"; content:"attack"; sid:1;)
alert tcp any any -> any any (msg:"nocase"; content:"SeLeCt"; nocase; sid:2;)
alert tcp any any -> any any (msg:"two pieces"; content:"GET"; content:"/admin"; sid:3;)
alert tcp any any -> any any (msg:"content then pcre"; content:"user="; pcre:"/[a-z]{3}[0-9]+;/"; sid:4;)
alert tcp any any -> any any (msg:"pcre alone"; pcre:"/ab+c/"; sid:5;)
alert tcp any any -> any any (msg:"overlap"; content:"aaa"; sid:6;)
alert tcp any any -> any any (msg:"three"; content:"x"; content:"y"; content:"z"; sid:7;)
"#;

fn matcher() -> &'static Matcher {
    static M: OnceLock<Matcher> = OnceLock::new();
    M.get_or_init(|| {
        Matcher::new(&nf::ids::parse(RULES).expect("rules parse")).expect("rules compile")
    })
}

/// Feeds `payload` cut at `cuts`, returning the rules hit, in order.
fn hits(payload: &[u8], cuts: &[usize]) -> Vec<u32> {
    let m = matcher();
    let (mut st, mut pr) = (m.start(), Progress::default());
    let mut out = Vec::new();
    let mut from = 0;
    for &c in cuts.iter().chain([&payload.len()]) {
        m.feed(&mut st, &mut pr, &payload[from..c], |r| out.push(r));
        from = c;
    }
    out
}

fuzz_target!(|data: &[u8]| {
    let Some((&n, rest)) = data.split_first() else {
        return;
    };
    let n = usize::from(n % 8).min(rest.len());
    let (cut_bytes, payload) = rest.split_at(n);
    let mut cuts: Vec<usize> = cut_bytes
        .iter()
        .map(|&b| usize::from(b) * payload.len() / 256)
        .collect();
    cuts.sort_unstable();
    let mut whole = hits(payload, &[]);
    let mut split = hits(payload, &cuts);
    whole.sort_unstable();
    split.sort_unstable();
    assert_eq!(whole, split, "cuts {cuts:?}");
});
