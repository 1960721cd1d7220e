//! Streaming multi-pattern matching (NFLOW/MVT's FSM MVT): every piece of every
//! rule's pattern (each content, each pcre) is compiled once, at load time, into
//! one of three automata — contents into Aho-Corasick DFAs (case-sensitive and
//! ASCII case-insensitive), pcres into one multi-pattern dense regex DFA — and a
//! flow direction keeps the three DFA state ids and its byte offset ([`Stream`],
//! 16 bytes). A packet's payload is fed byte by byte from the saved states, so a
//! pattern split across packets matches as if the stream were one buffer; the
//! states move with the flow's entry like any other per-flow state.
//!
//! A rule of one piece fires on that piece's match. A rule of several pieces
//! (contents in order, then a pcre) fires when they match in order; a flow
//! direction remembers how far each such rule got ([`Progress`], allocated only
//! once some rule is part-way). The pieces are matched separately on purpose: a
//! regex DFA over `a.*b`-style joins of many rules has exponentially many states
//! (every rule can independently be part-way), while separate pieces stay as
//! small as the patterns themselves.
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

use super::rules::{Piece, Rule};

/// A flow direction's matcher state: three DFA state ids and the stream offset.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Stream {
    ac: u32,
    aci: u32,
    re: u32,
    /// Bytes fed so far (wrapping; only differences within a flow are compared).
    off: u32,
}

impl Stream {
    /// Bytes of the direction's payload matched so far (modulo 2^32).
    pub fn fed(&self) -> u32 {
        self.off
    }
}

/// How far a flow direction got through the multi-piece rules: `(rule, next
/// piece, end offset of the last piece matched)` for each rule part-way.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Progress(Vec<(u32, u16, u32)>);

impl Progress {
    /// Rules part-way.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// True when no rule is part-way.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// What a piece is: which rule, which of its pieces, its length for a content.
#[derive(Copy, Clone, Debug)]
struct PieceOf {
    rule: u32,
    idx: u16,
    /// The rule's number of pieces.
    of: u16,
    /// A content's length (`None`: a pcre).
    len: Option<u32>,
}

struct Ac {
    dfa: AcDfa,
    /// Pattern id → pieces.
    pieces: Vec<Vec<u32>>,
}

struct Re {
    dfa: dense::DFA<Vec<u32>>,
    /// Pattern id → piece.
    pieces: Vec<u32>,
}

/// The compiled rule set.
pub struct Matcher {
    ac: Option<Ac>,
    aci: Option<Ac>,
    re: Option<Re>,
    pieces: Vec<PieceOf>,
    start: Stream,
}

fn piece_table(rules: &[Rule]) -> Vec<(PieceOf, &Piece)> {
    let mut out = Vec::new();
    for (i, r) in rules.iter().enumerate() {
        for (k, p) in r.pieces.iter().enumerate() {
            let len = match p {
                Piece::Literal { bytes, .. } => Some(bytes.len() as u32),
                Piece::Regex(_) => None,
            };
            out.push((
                PieceOf {
                    rule: i as u32,
                    idx: k as u16,
                    of: r.pieces.len() as u16,
                    len,
                },
                p,
            ));
        }
    }
    out
}

fn ac(table: &[(PieceOf, &Piece)], nocase: bool) -> Result<Option<Ac>, String> {
    let mut pats: Vec<Vec<u8>> = Vec::new();
    let mut map: Vec<Vec<u32>> = Vec::new();
    for (i, (_, p)) in table.iter().enumerate() {
        if let Piece::Literal { bytes, nocase: n } = p {
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
    Ok(Some(Ac { dfa, pieces: map }))
}

/// The most memory the regex DFA (and its construction) may take. A set of
/// unanchored regexes can determinize into very many states; past this the rules
/// are refused with an error instead of exhausting memory.
pub const REGEX_DFA_LIMIT: usize = 256 << 20;

/// The most one pcre's DFA alone may take. Each pattern is built alone first
/// under this smaller limit, so a pattern that explodes (a bounded repeat of a
/// wide class such as `.{40}x` has up to 2^40 states) is refused, naming its
/// line, in a fraction of the time the whole set would take to reach its limit.
pub const REGEX_PIECE_LIMIT: usize = 8 << 20;

/// A dense DFA builder for the IDS's pcres, within `limit` bytes.
fn re_builder(limit: usize) -> dense::Builder {
    let mut b = dense::Builder::new();
    b.configure(
        dense::DFA::config()
            .match_kind(MatchKind::All)
            .start_kind(StartKind::Unanchored)
            .dfa_size_limit(Some(limit))
            .determinize_size_limit(Some(limit)),
    )
    .syntax(syntax());
    b
}

/// `a` is at or after `b` in a stream whose offsets wrap.
#[inline]
fn at_or_after(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) >= 0
}

impl Matcher {
    /// Compiles the rules' pieces (seconds for thousands of regexes: do it once,
    /// at load time). Errors name the rule's line.
    pub fn new(rules: &[Rule]) -> Result<Matcher, String> {
        let table = piece_table(rules);
        let ac_cs = ac(&table, false)?;
        let ac_ci = ac(&table, true)?;
        let mut res = Vec::new();
        let mut map = Vec::new();
        for (i, (p, piece)) in table.iter().enumerate() {
            if let Piece::Regex(re) = piece {
                // check alone first, so an error names its line
                let line = rules[p.rule as usize].line;
                regex_automata::util::syntax::parse_with(re, &syntax())
                    .map_err(|e| format!("line {line}: pcre: {e}"))?;
                re_builder(REGEX_PIECE_LIMIT).build(re).map_err(|e| {
                    format!(
                        "line {line}: pcre `{re}` alone needs a DFA over the size limit of \
                         {} MiB ({e}): bounded repeats of wide classes (e.g. `.{{40}}x`) grow \
                         it exponentially; simplify it",
                        REGEX_PIECE_LIMIT >> 20
                    )
                })?;
                res.push(re.as_str());
                map.push(i as u32);
            }
        }
        let re = if res.is_empty() {
            None
        } else {
            let dfa = re_builder(REGEX_DFA_LIMIT).build_many(&res).map_err(|e| {
                format!(
                    "building the regex DFA of {} pcre rules: {e} (limit {} MiB: \
                         fewer or simpler pcre patterns)",
                    res.len(),
                    REGEX_DFA_LIMIT >> 20
                )
            })?;
            Some(Re { dfa, pieces: map })
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
            off: 0,
        };
        Ok(Matcher {
            ac: ac_cs,
            aci: ac_ci,
            re,
            pieces: table.into_iter().map(|(p, _)| p).collect(),
            start,
        })
    }

    /// A new flow direction's state.
    pub fn start(&self) -> Stream {
        self.start
    }

    /// Feeds `bytes` from `st` (and `progress`, the direction's multi-piece
    /// progress), calling `hit(rule index)` for every rule that matches; `st` is
    /// left where the bytes end.
    pub fn feed(
        &self,
        st: &mut Stream,
        progress: &mut Progress,
        bytes: &[u8],
        mut hit: impl FnMut(u32),
    ) {
        if bytes.is_empty() {
            return;
        }
        let base = st.off;
        // pieces of multi-piece rules found in this packet: (end offset, piece)
        let mut found: Vec<(u32, u32)> = Vec::new();
        let mut piece = |p: u32, end: u32, found: &mut Vec<(u32, u32)>| {
            let info = self.pieces[p as usize];
            if info.of == 1 {
                hit(info.rule);
            } else {
                found.push((end, p));
            }
        };
        for (a, s) in [(&self.ac, &mut st.ac), (&self.aci, &mut st.aci)] {
            let Some(a) = a else { continue };
            let mut sid = AcState::from_u32_unchecked(*s);
            for (i, &b) in bytes.iter().enumerate() {
                sid = a.dfa.next_state(AcAnchored::No, sid, b);
                if a.dfa.is_match(sid) {
                    let end = base.wrapping_add(i as u32 + 1);
                    for k in 0..a.dfa.match_len(sid) {
                        for &p in &a.pieces[a.dfa.match_pattern(sid, k).as_usize()] {
                            piece(p, end, &mut found);
                        }
                    }
                }
            }
            *s = sid.as_u32();
        }
        if let Some(re) = &self.re {
            let mut report = |sid: ReState, end: u32, found: &mut Vec<(u32, u32)>| {
                if re.dfa.is_match_state(sid) {
                    for k in 0..re.dfa.match_len(sid) {
                        piece(
                            re.pieces[re.dfa.match_pattern(sid, k).as_usize()],
                            end,
                            found,
                        );
                    }
                }
            };
            let mut sid = ReState::new_unchecked(st.re as usize);
            for (i, &b) in bytes.iter().enumerate() {
                sid = re.dfa.next_state(sid, b);
                // the first byte's delayed report was made by the previous
                // packet's end-of-input peek
                if i > 0 {
                    report(sid, base.wrapping_add(i as u32), &mut found);
                }
            }
            report(
                re.dfa.next_eoi_state(sid),
                base.wrapping_add(bytes.len() as u32),
                &mut found,
            );
            st.re = sid.as_u32();
        }
        st.off = base.wrapping_add(bytes.len() as u32);
        if found.is_empty() {
            return;
        }
        // in stream order, so a piece is only counted after the one before it
        found.sort_by_key(|&(end, p)| (end.wrapping_sub(base), p));
        for (end, p) in found {
            let info = self.pieces[p as usize];
            let slot = progress.0.iter().position(|e| e.0 == info.rule);
            let (next, prev_end) = slot.map_or((0, 0), |i| (progress.0[i].1, progress.0[i].2));
            if info.idx != next {
                continue;
            }
            if info.idx > 0 {
                let ok = match info.len {
                    Some(len) => at_or_after(end.wrapping_sub(len), prev_end),
                    None => at_or_after(end, prev_end.wrapping_add(1)),
                };
                if !ok {
                    continue;
                }
            }
            if info.idx + 1 == info.of {
                hit(info.rule);
                if let Some(i) = slot {
                    progress.0.swap_remove(i);
                }
            } else if let Some(i) = slot {
                progress.0[i] = (info.rule, next + 1, end);
            } else {
                progress.0.push((info.rule, 1, end));
            }
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
        let mut pr = Progress::default();
        let mut out = Vec::new();
        for c in chunks {
            m.feed(&mut st, &mut pr, c, |r| out.push(r));
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

    #[test]
    fn pieces_match_in_order_across_packets() {
        let rules = parse(
            "alert tcp any any -> any any (sid:1; content:\"user\"; content:\"pass\"; pcre:\"/[0-9]{4}x/\";)\n\
             alert tcp any any -> any any (sid:2; content:\"ab\"; content:\"ab\";)\n\
             alert tcp any any -> any any (sid:3; content:\"abc\"; content:\"cd\";)\n",
        )
        .unwrap();
        let m = Matcher::new(&rules).unwrap();
        let whole: &[u8] = b"user=x pass=1234x";
        assert_eq!(hits(&m, &[whole]), vec![0]);
        for i in 0..whole.len() {
            assert_eq!(
                hits(&m, &[&whole[..i], &whole[i..]]),
                vec![0],
                "split at {i}"
            );
        }
        // out of order, or a piece missing: nothing
        assert!(hits(&m, &[b"pass user 1234x"]).is_empty());
        assert!(hits(&m, &[b"1234x user pass"]).is_empty());
        assert!(hits(&m, &[b"user 1234x"]).is_empty());
        // the second "ab" must start after the first ends; "abc" then "cd" may not
        // share the "c"
        assert!(hits(&m, &[b"aba"]).is_empty());
        assert_eq!(hits(&m, &[b"ab", b"ab"]), vec![1]);
        assert!(hits(&m, &[b"abcd"]).is_empty());
        assert_eq!(hits(&m, &[b"abc-cd"]), vec![2]);
    }

    #[test]
    fn many_content_plus_pcre_rules_build_small() {
        // joined into one regex each (`a.*?b`), 64 such rules determinize into
        // exponentially many states; as separate pieces they stay small
        let mut text = String::new();
        for i in 0..64 {
            text.push_str(&format!(
                "alert tcp any any -> any any (sid:{}; content:\"k{i:03}\"; pcre:\"/v{i:03}[0-9]{{2,4}}x/i\";)\n",
                i + 1
            ));
        }
        let m = Matcher::new(&parse(&text).unwrap()).unwrap();
        assert!(m.memory() < 16 << 20, "{} bytes", m.memory());
        assert_eq!(hits(&m, &[b"..k017..", b"V017123X"]), vec![17]);
        assert!(hits(&m, &[b"v017123x k017"]).is_empty());
    }
}
