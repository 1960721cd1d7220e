//! Streaming multi-pattern matching (NFLOW/MVT's FSM MVT): every rule's pattern
//! is compiled once, at load time, into one of three automata — literals into
//! Aho-Corasick DFAs (case-sensitive and ASCII case-insensitive), everything else
//! into one multi-pattern dense regex DFA — and a flow keeps only the three DFA
//! state ids per direction ([`Stream`], 12 bytes). A packet's payload is fed byte
//! by byte from the saved states, so a pattern split across packets matches as if
//! the stream were one buffer; the states move with the flow's entry like any
//! other per-flow state.
//!
//! Regex DFA matches are reported one byte late (regex-automata's DFAs see a
//! match when the next byte arrives); at the end of each packet the matcher peeks
//! at the end-of-input transition so a match ending at the packet's last byte is
//! reported with that packet, and ignores the delayed report at the next packet's
//! first byte (the same match).

use aho_corasick::automaton::{Automaton as _, StateID as AcState};
use aho_corasick::{dfa::DFA as AcDfa, Anchored as AcAnchored, MatchKind as AcKind};
use regex_automata::dfa::{dense, Automaton as _, StartKind};
use regex_automata::util::primitives::StateID as ReState;
use regex_automata::util::start;
use regex_automata::{Anchored, MatchKind};

use super::rules::{Pattern, Rule};

/// A flow direction's matcher state: three DFA state ids.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Stream {
    ac: u32,
    aci: u32,
    re: u32,
}

struct Ac {
    dfa: AcDfa,
    /// Pattern id → rules.
    rules: Vec<Vec<u32>>,
}

struct Re {
    dfa: dense::DFA<Vec<u32>>,
    rules: Vec<u32>,
}

/// The compiled rule set.
pub struct Matcher {
    ac: Option<Ac>,
    aci: Option<Ac>,
    re: Option<Re>,
    start: Stream,
}

fn ac(rules: &[Rule], nocase: bool) -> Result<Option<Ac>, String> {
    let mut pats: Vec<Vec<u8>> = Vec::new();
    let mut map: Vec<Vec<u32>> = Vec::new();
    for (i, r) in rules.iter().enumerate() {
        if let Pattern::Literal { bytes, nocase: n } = &r.pattern {
            if *n != nocase {
                continue;
            }
            match pats.iter().position(|p| p == bytes) {
                Some(k) => map[k].push(i as u32),
                None => {
                    pats.push(bytes.clone());
                    map.push(vec![i as u32]);
                }
            }
        }
    }
    if pats.is_empty() {
        return Ok(None);
    }
    let dfa = AcDfa::builder()
        .match_kind(AcKind::Standard)
        .ascii_case_insensitive(nocase)
        .start_kind(aho_corasick::StartKind::Unanchored)
        .build(&pats)
        .map_err(|e| format!("building the literal automaton: {e}"))?;
    Ok(Some(Ac { dfa, rules: map }))
}

/// The most memory the regex DFA (and its construction) may take. A set of
/// unanchored regexes can determinize into exponentially many states; past this the
/// rules are refused with an error instead of exhausting memory.
pub const REGEX_DFA_LIMIT: usize = 256 << 20;

impl Matcher {
    /// Compiles the rules' patterns (seconds for thousands of regexes: do it once,
    /// at load time). Errors name the rule's line.
    pub fn new(rules: &[Rule]) -> Result<Matcher, String> {
        let ac_cs = ac(rules, false)?;
        let ac_ci = ac(rules, true)?;
        let mut res = Vec::new();
        let mut map = Vec::new();
        for (i, r) in rules.iter().enumerate() {
            if let Pattern::Regex(re) = &r.pattern {
                // check alone first, so an error names its line
                regex_automata::util::syntax::parse_with(re, &syntax())
                    .map_err(|e| format!("line {}: pcre: {e}", r.line))?;
                res.push(re.as_str());
                map.push(i as u32);
            }
        }
        let re = if res.is_empty() {
            None
        } else {
            let dfa = dense::Builder::new()
                .configure(
                    dense::DFA::config()
                        .match_kind(MatchKind::All)
                        .start_kind(StartKind::Unanchored)
                        .dfa_size_limit(Some(REGEX_DFA_LIMIT))
                        .determinize_size_limit(Some(REGEX_DFA_LIMIT)),
                )
                .syntax(syntax())
                .build_many(&res)
                .map_err(|e| {
                    format!(
                        "building the regex DFA of {} pcre rules: {e} (limit {} MiB: \
                         fewer or simpler pcre patterns)",
                        res.len(),
                        REGEX_DFA_LIMIT >> 20
                    )
                })?;
            Some(Re { dfa, rules: map })
        };
        let ac_start = |a: &Option<Ac>| {
            a.as_ref().map_or(Ok(0), |a| {
                a.dfa
                    .start_state(AcAnchored::No)
                    .map(|s| s.as_u32())
                    .map_err(|e| e.to_string())
            })
        };
        let re_start = match &re {
            Some(r) => r
                .dfa
                .start_state(&start::Config::new().anchored(Anchored::No))
                .map_err(|e| e.to_string())?
                .as_u32(),
            None => 0,
        };
        let start = Stream {
            ac: ac_start(&ac_cs)?,
            aci: ac_start(&ac_ci)?,
            re: re_start,
        };
        Ok(Matcher {
            ac: ac_cs,
            aci: ac_ci,
            re,
            start,
        })
    }

    /// A new flow direction's state.
    pub fn start(&self) -> Stream {
        self.start
    }

    /// Feeds `bytes` from `st`, calling `hit(rule index)` for every match; `st`
    /// is left where the bytes end.
    pub fn feed(&self, st: &mut Stream, bytes: &[u8], mut hit: impl FnMut(u32)) {
        if bytes.is_empty() {
            return;
        }
        for (a, s) in [(&self.ac, &mut st.ac), (&self.aci, &mut st.aci)] {
            let Some(a) = a else { continue };
            let mut sid = AcState::from_u32_unchecked(*s);
            for &b in bytes {
                sid = a.dfa.next_state(AcAnchored::No, sid, b);
                if a.dfa.is_match(sid) {
                    for k in 0..a.dfa.match_len(sid) {
                        for &r in &a.rules[a.dfa.match_pattern(sid, k).as_usize()] {
                            hit(r);
                        }
                    }
                }
            }
            *s = sid.as_u32();
        }
        if let Some(re) = &self.re {
            let report = |sid: ReState, hit: &mut dyn FnMut(u32)| {
                if re.dfa.is_match_state(sid) {
                    for k in 0..re.dfa.match_len(sid) {
                        hit(re.rules[re.dfa.match_pattern(sid, k).as_usize()]);
                    }
                }
            };
            let mut sid = ReState::new_unchecked(st.re as usize);
            for (i, &b) in bytes.iter().enumerate() {
                sid = re.dfa.next_state(sid, b);
                // the first byte's delayed report was made by the previous
                // packet's end-of-input peek
                if i > 0 {
                    report(sid, &mut hit);
                }
            }
            report(re.dfa.next_eoi_state(sid), &mut hit);
            st.re = sid.as_u32();
        }
    }

    /// Memory of the automata, bytes.
    pub fn memory(&self) -> usize {
        let a = |a: &Option<Ac>| a.as_ref().map_or(0, |a| a.dfa.memory_usage());
        a(&self.ac) + a(&self.aci) + self.re.as_ref().map_or(0, |r| r.dfa.memory_usage())
    }
}

fn syntax() -> regex_automata::util::syntax::Config {
    regex_automata::util::syntax::Config::new()
        .unicode(false)
        .utf8(false)
}

#[cfg(test)]
mod tests {
    use super::super::rules::parse;
    use super::*;

    fn hits(m: &Matcher, chunks: &[&[u8]]) -> Vec<u32> {
        let mut st = m.start();
        let mut out = Vec::new();
        for c in chunks {
            m.feed(&mut st, c, |r| out.push(r));
        }
        out.sort_unstable();
        out
    }

    #[test]
    fn matches_across_packet_boundaries_as_in_one_buffer() {
        let rules = parse(
            "alert tcp any any -> any any (sid:1; content:\"evil\";)\n\
             alert tcp any any -> any any (sid:2; content:\"EVIL\"; nocase;)\n\
             alert tcp any any -> any any (sid:3; content:\"GET\"; pcre:\"/x[0-9]{3}y/\";)\n\
             alert tcp any any -> any any (sid:4; content:\"|00 ff|\";)\n",
        )
        .unwrap();
        let m = Matcher::new(&rules).unwrap();
        let whole: &[u8] = b"..GET /a?x123y evil \x00\xff";
        let one = hits(&m, &[whole]);
        assert_eq!(one, vec![0, 1, 2, 3]);
        // every split into two and three packets finds the same
        for i in 0..whole.len() {
            assert_eq!(hits(&m, &[&whole[..i], &whole[i..]]), one, "split at {i}");
            for j in i..whole.len() {
                assert_eq!(
                    hits(&m, &[&whole[..i], &whole[i..j], &whole[j..]]),
                    one,
                    "split at {i}, {j}"
                );
            }
        }
        assert_eq!(hits(&m, &[b"nothing here", b"ev", b"IL"]), vec![1]);
        assert_eq!(
            hits(&m, &[b"x123y GET"]),
            Vec::<u32>::new(),
            "order matters"
        );
    }
}
