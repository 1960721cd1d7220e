//! The IDS rule language: a documented subset of Snort/Suricata syntax.
//!
//! ```text
//! ACTION PROTO SRC SPORT DIR DST DPORT (OPTION; OPTION; …)
//! ```
//!
//! - ACTION: `alert` (log), `drop` (log, drop the packet and every later packet of
//!   the flow), `blacklist` (log, drop, and drop every later packet from the
//!   source address, on every core).
//! - PROTO: `tcp`, `udp`, `ip` (any).
//! - SRC / DST: `any`, an address or a prefix (IPv4 or IPv6).
//! - SPORT / DPORT: `any`, `N` or `LO:HI`.
//! - DIR: `->` (packets from SRC to DST) or `<>` (either way).
//! - OPTIONS: `msg:"text"`, `sid:N` (required, unique), `content:"text"` with
//!   `|41 42|` hex bytes inside, `nocase` (applies to the content before it),
//!   `pcre:"/REGEX/FLAGS"` (flags `i` and `s`), `rev:N` and `classtype:…`
//!   (accepted, ignored). Several contents (and a pcre) must match **in the order
//!   written**, anywhere in the flow's byte stream of that direction — across
//!   packet boundaries (as if each content had `distance:0`): a content counts
//!   when it starts after the previous piece ends, a pcre when it ends after the
//!   previous piece ends. `^` and `$` anchors are not supported (a flow's stream
//!   has no end the matcher can see).
//!
//! Lines starting with `#` and blank lines are skipped; errors name the line.

use core::net::IpAddr;

use ipnet::IpNet;

/// What a matching rule does.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Log an alert.
    Alert,
    /// Log, drop the flow.
    Drop,
    /// Log, drop the flow and every later packet from the source.
    Blacklist,
}

impl Action {
    /// The name in rules and alerts.
    pub fn name(self) -> &'static str {
        match self {
            Action::Alert => "alert",
            Action::Drop => "drop",
            Action::Blacklist => "blacklist",
        }
    }
}

/// A rule's 5-tuple predicate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    /// IP protocol (`None`: any).
    pub proto: Option<u8>,
    /// Source prefix (`None`: any).
    pub src: Option<IpNet>,
    /// Source ports.
    pub sport: (u16, u16),
    /// Destination prefix.
    pub dst: Option<IpNet>,
    /// Destination ports.
    pub dport: (u16, u16),
    /// `<>`: also the reverse direction.
    pub both: bool,
}

impl Header {
    /// True if a packet `src:sport → dst:dport` of `proto` is covered.
    pub fn covers(&self, proto: u8, src: IpAddr, sport: u16, dst: IpAddr, dport: u16) -> bool {
        let one = |s: IpAddr, sp: u16, d: IpAddr, dp: u16| {
            self.src.is_none_or(|n| n.contains(&s))
                && self.dst.is_none_or(|n| n.contains(&d))
                && (self.sport.0..=self.sport.1).contains(&sp)
                && (self.dport.0..=self.dport.1).contains(&dp)
        };
        self.proto.is_none_or(|p| p == proto)
            && (one(src, sport, dst, dport) || (self.both && one(dst, dport, src, sport)))
    }
}

/// One rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    /// Line number (1-based) in the rules text.
    pub line: usize,
    /// Action.
    pub action: Action,
    /// Predicate.
    pub header: Header,
    /// `msg`.
    pub msg: String,
    /// `sid`.
    pub sid: u32,
    /// What the rule looks for, in order: its contents, then its pcre. Each piece
    /// is matched on its own (so rules never multiply into one another's automaton
    /// states) and the matcher tracks each flow's progress through the pieces.
    pub pieces: Vec<Piece>,
}

/// One piece of a rule's pattern.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Piece {
    /// A content: matched by the multi-literal automata.
    Literal {
        /// Bytes.
        bytes: Vec<u8>,
        /// ASCII case-insensitive.
        nocase: bool,
    },
    /// A pcre: one pattern of the multi-regex DFA.
    Regex(String),
}

fn port_range(s: &str) -> Option<(u16, u16)> {
    if s == "any" {
        return Some((0, u16::MAX));
    }
    match s.split_once(':') {
        Some((lo, hi)) => {
            let lo = if lo.is_empty() { 0 } else { lo.parse().ok()? };
            let hi = if hi.is_empty() {
                u16::MAX
            } else {
                hi.parse().ok()?
            };
            (lo <= hi).then_some((lo, hi))
        }
        None => s.parse().ok().map(|p| (p, p)),
    }
}

fn net(s: &str) -> Option<Option<IpNet>> {
    if s == "any" {
        return Some(None);
    }
    s.parse::<IpNet>()
        .or_else(|_| s.parse::<IpAddr>().map(IpNet::from))
        .ok()
        .map(|n| Some(n.trunc()))
}

/// Decodes a content string: text with `|41 42|` hex runs.
fn content(s: &str) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    let mut parts = s.split('|');
    let mut hex = false;
    for part in parts.by_ref() {
        if hex {
            for h in part.split_whitespace() {
                if h.len() != 2 {
                    return Err(format!("content: `{h}` is not a hex byte (two digits)"));
                }
                out.push(
                    u8::from_str_radix(h, 16)
                        .map_err(|_| format!("content: `{h}` is not a hex byte"))?,
                );
            }
        } else {
            out.extend_from_slice(part.as_bytes());
        }
        hex = !hex;
    }
    if !hex {
        return Err("content: unbalanced `|`".into());
    }
    if out.is_empty() {
        return Err("content: empty".into());
    }
    Ok(out)
}

/// Escapes bytes for a regex (every byte as `\xNN`, so any byte is literal).
/// The most contents (and pcre) one rule may have.
pub const MAX_PIECES: usize = 16;

/// Splits `a; b:"x;y"; c` at semicolons outside quotes.
fn options(body: &str) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    let mut escaped = false;
    for ch in body.chars() {
        match ch {
            _ if escaped => {
                cur.push(ch);
                escaped = false;
            }
            '\\' if quoted => {
                cur.push(ch);
                escaped = true;
            }
            '"' => {
                quoted = !quoted;
                cur.push(ch);
            }
            ';' if !quoted => {
                let o = cur.trim().to_string();
                if !o.is_empty() {
                    out.push(o);
                }
                cur.clear();
            }
            _ => cur.push(ch),
        }
    }
    if quoted {
        return Err("unterminated quote in options".into());
    }
    if !cur.trim().is_empty() {
        return Err(format!("`{}`: options end with `;`", cur.trim()));
    }
    Ok(out
        .into_iter()
        .map(|o| match o.split_once(':') {
            Some((k, v)) => (k.trim().to_string(), v.trim().to_string()),
            None => (o, String::new()),
        })
        .collect())
}

fn unquote(v: &str) -> Result<String, String> {
    v.strip_prefix('"')
        .and_then(|v| v.strip_suffix('"'))
        .map(|v| {
            v.replace("\\\"", "\"")
                .replace("\\;", ";")
                .replace("\\\\", "\\")
        })
        .ok_or_else(|| format!("`{v}`: expected a quoted string"))
}

fn rule(line: usize, text: &str) -> Result<Rule, String> {
    let open = text
        .find('(')
        .ok_or("expected `(options)` after the header")?;
    let body = text[open + 1..]
        .trim_end()
        .strip_suffix(')')
        .ok_or("options must end with `)`")?;
    let h: Vec<&str> = text[..open].split_whitespace().collect();
    let [action, proto, src, sport, dir, dst, dport] = h[..] else {
        return Err("expected `ACTION PROTO SRC SPORT -> DST DPORT (…)`".into());
    };
    let action = match action {
        "alert" => Action::Alert,
        "drop" => Action::Drop,
        "blacklist" => Action::Blacklist,
        a => return Err(format!("action `{a}`: expected alert, drop or blacklist")),
    };
    let proto = match proto {
        "tcp" => Some(wire::proto::TCP),
        "udp" => Some(wire::proto::UDP),
        "ip" | "any" => None,
        p => return Err(format!("protocol `{p}`: expected tcp, udp or ip")),
    };
    let both = match dir {
        "->" => false,
        "<>" => true,
        d => return Err(format!("direction `{d}`: expected -> or <>")),
    };
    let header = Header {
        proto,
        src: net(src)
            .ok_or_else(|| format!("source `{src}`: expected any, an address or a prefix"))?,
        sport: port_range(sport)
            .ok_or_else(|| format!("source port `{sport}`: expected any, N or LO:HI"))?,
        dst: net(dst)
            .ok_or_else(|| format!("destination `{dst}`: expected any, an address or a prefix"))?,
        dport: port_range(dport)
            .ok_or_else(|| format!("destination port `{dport}`: expected any, N or LO:HI"))?,
        both,
    };
    let (mut msg, mut sid) = (String::new(), None);
    let mut parts: Vec<(Vec<u8>, bool)> = Vec::new();
    let mut pcre: Option<String> = None;
    for (k, v) in options(body)? {
        match k.as_str() {
            "msg" => msg = unquote(&v)?,
            "sid" => {
                sid = Some(
                    v.parse::<u32>()
                        .map_err(|_| format!("sid `{v}`: expected a number"))?,
                )
            }
            "content" => {
                if pcre.is_some() {
                    return Err("content after pcre: put contents first".into());
                }
                parts.push((content(&unquote(&v)?)?, false));
            }
            "nocase" => parts.last_mut().ok_or("nocase before any content")?.1 = true,
            "pcre" => {
                let p = unquote(&v)?;
                let (re, flags) = p
                    .strip_prefix('/')
                    .and_then(|p| p.rsplit_once('/'))
                    .ok_or_else(|| format!("pcre `{p}`: expected /REGEX/FLAGS"))?;
                if re.starts_with('^') || (re.ends_with('$') && !re.ends_with("\\$")) {
                    return Err(format!("pcre `{p}`: anchors are not supported in streams"));
                }
                let mut f = String::new();
                for c in flags.chars() {
                    match c {
                        'i' | 's' => f.push(c),
                        c => return Err(format!("pcre flag `{c}`: only i and s are supported")),
                    }
                }
                pcre = Some(if f.is_empty() {
                    format!("(?:{re})")
                } else {
                    format!("(?{f}:{re})")
                });
            }
            "rev" | "classtype" | "flow" | "metadata" | "reference" => {}
            o => return Err(format!("option `{o}` is not supported")),
        }
    }
    let sid = sid.ok_or("missing sid")?;
    if parts.is_empty() && pcre.is_none() {
        return Err("a rule needs a content or a pcre".into());
    }
    if parts.iter().any(|(b, _)| b.is_empty()) {
        return Err("empty content".into());
    }
    if parts.len() + usize::from(pcre.is_some()) > MAX_PIECES {
        return Err(format!("more than {MAX_PIECES} contents"));
    }
    let mut pieces: Vec<Piece> = parts
        .into_iter()
        .map(|(bytes, nocase)| Piece::Literal { bytes, nocase })
        .collect();
    pieces.extend(pcre.map(Piece::Regex));
    Ok(Rule {
        line,
        action,
        header,
        msg,
        sid,
        pieces,
    })
}

/// Parses a rules text; the error names the line.
pub fn parse(text: &str) -> Result<Vec<Rule>, String> {
    let mut out: Vec<Rule> = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let r = rule(i + 1, line).map_err(|e| format!("line {}: {e}", i + 1))?;
        if let Some(o) = out.iter().find(|o| o.sid == r.sid) {
            return Err(format!(
                "line {}: sid {} already used on line {}",
                i + 1,
                r.sid,
                o.line
            ));
        }
        out.push(r);
    }
    if out.is_empty() {
        return Err("no rule".into());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_subset() {
        let r = parse(
            "# comment\n\
             alert tcp any any -> 10.0.0.0/8 80 (msg:\"evil; get\"; content:\"GET |2f|evil\"; nocase; sid:1; rev:2;)\n\
             drop udp 1.2.3.4 1000:2000 <> any any (msg:\"x\"; content:\"ab\"; pcre:\"/c[0-9]+d/i\"; sid:2;)\n",
        )
        .unwrap();
        assert_eq!(r.len(), 2);
        assert_eq!(r[0].line, 2);
        assert_eq!(r[0].msg, "evil; get");
        assert_eq!(
            r[0].pieces,
            vec![Piece::Literal {
                bytes: b"GET /evil".to_vec(),
                nocase: true
            }]
        );
        assert_eq!(r[1].action, Action::Drop);
        assert_eq!(
            r[1].pieces,
            vec![
                Piece::Literal {
                    bytes: b"ab".to_vec(),
                    nocase: false
                },
                Piece::Regex("(?i:c[0-9]+d)".into())
            ]
        );
        let h = &r[1].header;
        let a: IpAddr = "1.2.3.4".parse().unwrap();
        let b: IpAddr = "9.9.9.9".parse().unwrap();
        assert!(h.covers(17, a, 1500, b, 53));
        assert!(h.covers(17, b, 53, a, 1500), "<> covers the reverse");
        assert!(!h.covers(6, a, 1500, b, 53));
        assert!(!h.covers(17, a, 999, b, 53));
    }

    #[test]
    fn errors_name_the_line_and_the_problem() {
        for (text, want) in [
            ("alert tcp any any -> any any (content:\"x\";)", "line 1: missing sid"),
            ("\n\nalert tcp any any => any any (sid:1; content:\"x\";)", "line 3: direction `=>`"),
            ("alert tpc any any -> any any (sid:1; content:\"x\";)", "protocol `tpc`"),
            ("alert tcp any any -> any any (sid:1; content:\"|4|\";)", "not a hex byte"),
            ("alert tcp any any -> any any (sid:1; content:\"|41\";)", "unbalanced"),
            ("alert tcp any any -> any any (sid:1; pcre:\"/^GET/\";)", "anchors"),
            ("alert tcp any any -> any any (sid:1; depth:4; content:\"x\";)", "option `depth`"),
            ("alert tcp any any -> any any (sid:1;)", "content or a pcre"),
            ("alert tcp any any -> any any (sid:1; content:\"\";)", "content: empty"),
            ("alert tcp any any -> any any (sid:1; content:\"x\";)\nalert tcp any any -> any any (sid:1; content:\"y\";)", "line 2: sid 1 already used on line 1"),
            ("alert tcp any 70000 -> any any (sid:1; content:\"x\";)", "source port `70000`"),
            ("", "no rule"),
        ] {
            let e = parse(text).unwrap_err();
            assert!(e.contains(want), "`{want}` not in `{e}`");
        }
    }
}
