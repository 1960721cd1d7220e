//! Authenticated, replay-proof pool messages. Every datagram between pool
//! nodes and their controller — replicas, acknowledgements, heartbeats and
//! their answers, bulk-sync copies and orders, re-ring orders — travels in an
//! envelope:
//!
//! ```text
//! "FA" | sender (u64) | sequence (u64) | time, µs (u64) | body | tag (16 B)
//! ```
//!
//! The tag is BLAKE3 keyed with the pool's key over everything before it; a
//! message whose tag does not match is refused. Each sending endpoint (a
//! socket's owner) draws a random sender id and numbers its messages from 0;
//! a receiver keeps, per sender, the highest number it took and which of the
//! [`WINDOW`] before it it took, so a recorded message sent again is refused
//! as a replay. A message whose time is more than [`MAX_AGE_US`] away from
//! the receiver's clock, or from before the receiver started (a recording
//! from before a restart, whose window is gone), is refused as stale — the
//! pool's clocks must agree within that (one machine's do; NTP does).
//!
//! Without a key ([`Seal::plain`], the `insecure` setting) the body travels
//! bare, as on a fabric one trusts.
//!
//! Pure: times are arguments; the sender id comes from the caller.

use std::collections::HashMap;

/// Bytes of a key.
pub const KEY_LEN: usize = 32;
/// Bytes the envelope adds to a body.
pub const OVERHEAD: usize = HEAD + TAG;
const MAGIC: [u8; 2] = *b"FA";
const HEAD: usize = 2 + 8 + 8 + 8;
const TAG: usize = 16;
/// Sequence numbers below a sender's highest that are still taken once.
pub const WINDOW: u64 = 1024;
/// How far a message's time may be from the receiver's clock, µs.
pub const MAX_AGE_US: u64 = 2_000_000;
/// Senders a receiver keeps windows for before it forgets those not heard
/// from within [`MAX_AGE_US`] (their messages are stale by then anyway).
const SENDERS: usize = 4096;

/// The pool's key.
#[derive(Clone)]
pub struct Key([u8; KEY_LEN]);

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Key(..)")
    }
}

impl Key {
    /// A key from its bytes.
    pub fn new(bytes: [u8; KEY_LEN]) -> Key {
        Key(bytes)
    }

    /// A key from a key file's text: 64 hexadecimal digits (white space
    /// around them ignored).
    pub fn parse(text: &str) -> Result<Key, String> {
        let t = text.trim();
        if t.len() != 2 * KEY_LEN || !t.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(format!(
                "a pool key is {} hexadecimal digits (e.g. from `openssl rand -hex {KEY_LEN}`); \
                 this has {} characters",
                2 * KEY_LEN,
                t.len()
            ));
        }
        let mut k = [0u8; KEY_LEN];
        for (i, b) in k.iter_mut().enumerate() {
            *b = u8::from_str_radix(&t[2 * i..2 * i + 2], 16).expect("checked hex digits");
        }
        Ok(Key(k))
    }

    /// Its bytes.
    pub fn bytes(&self) -> [u8; KEY_LEN] {
        self.0
    }

    /// The key as a key file holds it.
    pub fn to_hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }

    fn tag(&self, signed: &[u8]) -> [u8; TAG] {
        let h = blake3::keyed_hash(&self.0, signed);
        let mut t = [0u8; TAG];
        t.copy_from_slice(&h.as_bytes()[..TAG]);
        t
    }
}

/// Why a datagram was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Refused {
    /// Shorter than an envelope, or not one.
    Malformed,
    /// The tag does not match: not made with the pool's key, or changed.
    Tag,
    /// Its time is too far from the receiver's clock, or before the
    /// receiver started.
    Stale,
    /// A message taken before (or below the sender's window).
    Replay,
}

impl Refused {
    /// Every cause, in report order.
    pub const ALL: [Refused; 4] = [
        Refused::Malformed,
        Refused::Tag,
        Refused::Stale,
        Refused::Replay,
    ];

    /// Its name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Refused::Malformed => "malformed",
            Refused::Tag => "bad_tag",
            Refused::Stale => "stale",
            Refused::Replay => "replayed",
        }
    }
}

/// One sending endpoint: the key, its sender id and its next number.
#[derive(Clone, Debug)]
pub struct Seal {
    key: Option<Key>,
    sender: u64,
    seq: u64,
}

impl Seal {
    /// An endpoint sealing with `key` as sender `sender` (random per
    /// endpoint, so two endpoints' numbers never meet in one window).
    pub fn new(key: Key, sender: u64) -> Seal {
        Seal {
            key: Some(key),
            sender,
            seq: 0,
        }
    }

    /// An endpoint sending bodies bare (no key: a trusted fabric).
    pub fn plain() -> Seal {
        Seal {
            key: None,
            sender: 0,
            seq: 0,
        }
    }

    /// An endpoint with `key` if there is one.
    pub fn with(key: Option<&Key>, sender: u64) -> Seal {
        match key {
            Some(k) => Seal::new(k.clone(), sender),
            None => Seal::plain(),
        }
    }

    /// Writes `body` sealed at time `now_us` into `out` (cleared first).
    pub fn seal(&mut self, now_us: u64, body: &[u8], out: &mut Vec<u8>) {
        out.clear();
        let Some(key) = &self.key else {
            out.extend_from_slice(body);
            return;
        };
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&self.sender.to_be_bytes());
        out.extend_from_slice(&self.seq.to_be_bytes());
        out.extend_from_slice(&now_us.to_be_bytes());
        out.extend_from_slice(body);
        let tag = key.tag(out);
        out.extend_from_slice(&tag);
        self.seq += 1;
    }

    /// `body` sealed at `now_us`, as a new buffer.
    pub fn sealed(&mut self, now_us: u64, body: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(body.len() + OVERHEAD);
        self.seal(now_us, body, &mut out);
        out
    }
}

/// A sender's replay window: its highest number taken and which of the
/// [`WINDOW`] numbers below it were taken.
#[derive(Clone, Debug)]
struct Window {
    top: u64,
    /// Bit `i` of word `i / 64`: number `top - i` taken.
    seen: [u64; (WINDOW / 64) as usize],
    /// The last message's time, µs (to forget quiet senders).
    last_us: u64,
}

impl Window {
    fn new(seq: u64, now_us: u64) -> Window {
        let mut seen = [0u64; (WINDOW / 64) as usize];
        seen[0] = 1;
        Window {
            top: seq,
            seen,
            last_us: now_us,
        }
    }

    /// Takes number `seq` if it is new.
    fn take(&mut self, seq: u64) -> bool {
        if seq > self.top {
            self.shift(seq - self.top);
            self.top = seq;
            self.seen[0] |= 1;
            return true;
        }
        let back = self.top - seq;
        if back >= WINDOW {
            return false;
        }
        let (w, b) = ((back / 64) as usize, back % 64);
        if self.seen[w] & (1 << b) != 0 {
            return false;
        }
        self.seen[w] |= 1 << b;
        true
    }

    /// Moves the window up by `by` numbers.
    fn shift(&mut self, by: u64) {
        if by >= WINDOW {
            self.seen = [0; (WINDOW / 64) as usize];
            return;
        }
        let (words, bits) = ((by / 64) as usize, by % 64);
        let n = self.seen.len();
        for i in (0..n).rev() {
            let lo = if i >= words { self.seen[i - words] } else { 0 };
            let carry = if bits > 0 && i > words {
                self.seen[i - words - 1] >> (64 - bits)
            } else {
                0
            };
            self.seen[i] = if bits > 0 { lo << bits | carry } else { lo };
        }
    }
}

/// One receiving endpoint: the key, when it started, and a window per
/// sender.
#[derive(Debug)]
pub struct Open {
    key: Option<Key>,
    since_us: u64,
    senders: HashMap<u64, Window>,
}

impl Open {
    /// An endpoint opening with `key` (none: bodies come bare) that started
    /// at `since_us`.
    pub fn new(key: Option<&Key>, since_us: u64) -> Open {
        Open {
            key: key.cloned(),
            since_us,
            senders: HashMap::new(),
        }
    }

    /// The body of datagram `d` received at `now_us`, or why it is refused.
    /// A refused message changes nothing (its number is not taken).
    pub fn open<'a>(&mut self, now_us: u64, d: &'a [u8]) -> Result<&'a [u8], Refused> {
        let Some(key) = &self.key else {
            return Ok(d);
        };
        if d.len() < OVERHEAD || d[..2] != MAGIC {
            return Err(Refused::Malformed);
        }
        let (signed, tag) = d.split_at(d.len() - TAG);
        let want = key.tag(signed);
        // constant time: every byte compared whatever the first differing one
        if want.iter().zip(tag).fold(0u8, |a, (x, y)| a | (x ^ y)) != 0 {
            return Err(Refused::Tag);
        }
        let word = |at: usize| u64::from_be_bytes(d[at..at + 8].try_into().expect("8 bytes"));
        let (sender, seq, time) = (word(2), word(10), word(18));
        if time.abs_diff(now_us) > MAX_AGE_US || time < self.since_us {
            return Err(Refused::Stale);
        }
        if self.senders.len() >= SENDERS && !self.senders.contains_key(&sender) {
            self.senders
                .retain(|_, w| now_us.saturating_sub(w.last_us) <= MAX_AGE_US);
            if self.senders.len() >= SENDERS {
                // as many senders within the age as it keeps: this one waits
                return Err(Refused::Stale);
            }
        }
        match self.senders.get_mut(&sender) {
            Some(w) => {
                if !w.take(seq) {
                    return Err(Refused::Replay);
                }
                w.last_us = w.last_us.max(time);
            }
            None => {
                self.senders.insert(sender, Window::new(seq, time));
            }
        }
        Ok(&signed[HEAD..])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(b: u8) -> Key {
        Key::new([b; KEY_LEN])
    }

    #[test]
    fn a_sealed_body_opens_once_and_a_forged_or_changed_one_never() {
        let mut s = Seal::new(key(7), 42);
        let mut o = Open::new(Some(&key(7)), 1_000);
        let m = s.sealed(5_000, b"FSHB");
        assert_eq!(o.open(5_100, &m), Ok(&b"FSHB"[..]));
        // sent again: a replay
        assert_eq!(o.open(5_200, &m), Err(Refused::Replay));
        // another key
        let mut wrong = Seal::new(key(8), 42);
        let f = wrong.sealed(5_000, b"FSSE 10.0.0.9:1");
        assert_eq!(o.open(5_300, &f), Err(Refused::Tag));
        // one bit changed anywhere
        let m2 = s.sealed(6_000, b"FSSE 10.77.0.1:4000");
        for i in 0..m2.len() {
            let mut c = m2.clone();
            c[i] ^= 0x10;
            assert!(o.open(6_100, &c).is_err(), "byte {i}");
        }
        assert_eq!(o.open(6_100, &m2), Ok(&b"FSSE 10.77.0.1:4000"[..]));
        // the bare body, and garbage
        assert_eq!(o.open(6_200, b"FSHB"), Err(Refused::Malformed));
        assert_eq!(o.open(6_200, &m2[..OVERHEAD - 1]), Err(Refused::Malformed));
    }

    #[test]
    fn old_future_and_pre_start_messages_are_stale() {
        let mut s = Seal::new(key(1), 9);
        let mut o = Open::new(Some(&key(1)), 10_000_000);
        let old = s.sealed(10_000_000, b"x");
        assert_eq!(
            o.open(10_000_000 + MAX_AGE_US + 1, &old),
            Err(Refused::Stale)
        );
        let future = s.sealed(20_000_000, b"x");
        assert_eq!(o.open(17_000_000, &future), Err(Refused::Stale));
        // sent before the receiver started (recorded before a restart)
        let before = s.sealed(9_999_000, b"x");
        assert_eq!(o.open(10_000_100, &before), Err(Refused::Stale));
        // a refused message took no number: sent in time, it opens
        let mut s2 = Seal::new(key(1), 10);
        let ok = s2.sealed(10_500_000, b"y");
        assert_eq!(o.open(10_500_010, &ok), Ok(&b"y"[..]));
    }

    #[test]
    fn numbers_out_of_order_are_taken_once_within_the_window() {
        let mut o = Open::new(Some(&key(3)), 0);
        let mut s = Seal::new(key(3), 5);
        let msgs: Vec<Vec<u8>> = (0..3000).map(|i| s.sealed(100 + i, b"m")).collect();
        // every other one first, then the rest backwards
        for m in msgs.iter().step_by(2) {
            assert!(o.open(4_000, m).is_ok());
        }
        let mut late = 0;
        for (i, m) in msgs.iter().enumerate().skip(1).step_by(2).rev() {
            match o.open(4_000, m) {
                Ok(_) => late += 1,
                Err(e) => {
                    assert_eq!(e, Refused::Replay);
                    // only those below the window refuse
                    assert!(2999 - i as u64 >= WINDOW, "{i}");
                }
            }
        }
        assert_eq!(late, (WINDOW / 2) as usize);
        for m in &msgs {
            assert!(o.open(4_000, m).is_err());
        }
    }

    #[test]
    fn the_window_matches_a_set_of_taken_numbers() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
        let mut w = Window::new(0, 0);
        let mut taken = std::collections::BTreeSet::from([0u64]);
        for _ in 0..20_000 {
            let top = *taken.last().unwrap();
            let seq = if rng.gen_bool(0.3) {
                top + rng.gen_range(1..200)
            } else {
                top.saturating_sub(rng.gen_range(0..1100))
            };
            let fresh = !taken.contains(&seq) && top.saturating_sub(seq) < WINDOW || seq > top;
            assert_eq!(w.take(seq), fresh, "seq {seq}, top {top}");
            if fresh {
                taken.insert(seq);
            }
        }
    }

    #[test]
    fn without_a_key_bodies_pass_bare() {
        let mut s = Seal::plain();
        let mut o = Open::new(None, 0);
        let m = s.sealed(1, b"FSHB");
        assert_eq!(m, b"FSHB");
        assert_eq!(o.open(1, &m), Ok(&b"FSHB"[..]));
    }

    #[test]
    fn key_files_hold_64_hex_digits() {
        let k = key(0xab);
        assert_eq!(Key::parse(&format!("  {}\n", k.to_hex())).unwrap().0, k.0);
        assert!(Key::parse("abc").is_err());
        assert!(Key::parse(&"zz".repeat(32)).is_err());
    }
}
