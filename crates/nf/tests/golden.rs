//! Golden tests (FastClick `.clicktest` style): each `tests/golden/*.test` file holds
//! a chain config, input packets and the expected verdict and output header of each.
//! The input is written as a pcap and read back, processed, and the forwarded
//! packets are written as a pcap that tshark must accept (checksums validated).
//!
//! Packet lines:
//! `T_MS PROTO SRC:PORT > DST:PORT [FLAGS] ["PAYLOAD"] => VERDICT [SRC:PORT > DST:PORT] [ttl=N] [dmac=M]`
//! - PROTO `tcp`, `udp`, `icmp` (ports are the echo id; FLAGS `echo` or `reply`);
//!   FLAGS for TCP are letters S A F R P (`-` for none when a payload follows).
//! - PAYLOAD: the packet's payload text (default `golden`).
//! - VERDICT `forward` or `drop(CAUSE)`; the optional header is the expected output,
//!   `ttl=` its IPv4 TTL / IPv6 hop limit, `dmac=` its destination MAC.
//! - A port `$name` in an expected output binds what the chain wrote; in an input
//!   it uses that value. `*` matches any port.

mod common;

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use nf::{ChainConfig, DropCause, Verdict};
use wire::TcpFlags;

struct Line {
    no: usize,
    t_ms: u64,
    proto: String,
    src: (IpAddr, String),
    dst: (IpAddr, String),
    flags: String,
    payload: Vec<u8>,
    verdict: Verdict,
    out: Option<((IpAddr, String), (IpAddr, String))>,
    ttl: Option<u8>,
    dmac: Option<[u8; 6]>,
}

fn endpoint(s: &str) -> (IpAddr, String) {
    let (a, p) = s
        .rsplit_once(':')
        .unwrap_or_else(|| panic!("`{s}`: expected ADDR:PORT"));
    (
        a.trim_matches(|c| c == '[' || c == ']')
            .parse()
            .unwrap_or_else(|_| panic!("bad address `{a}`")),
        p.to_string(),
    )
}

fn parse(text: &str) -> (String, Vec<Line>) {
    let (cfg, pk) = text.split_once("%packets").expect("a %packets section");
    let base = cfg.lines().count();
    let cfg = cfg
        .split_once("%config")
        .expect("a %config section")
        .1
        .to_string();
    let mut lines = Vec::new();
    for (i, l) in pk.lines().enumerate() {
        let l = l.split('#').next().unwrap().trim();
        if l.is_empty() {
            continue;
        }
        let (input, expect) = l
            .split_once("=>")
            .unwrap_or_else(|| panic!("line `{l}`: missing =>"));
        let (input, payload) = match input.split_once('"') {
            Some((head, rest)) => (
                head,
                rest.rsplit_once('"')
                    .unwrap_or_else(|| panic!("line `{l}`: unclosed payload"))
                    .0
                    .as_bytes()
                    .to_vec(),
            ),
            None => (input, b"golden".to_vec()),
        };
        let t: Vec<&str> = input.split_whitespace().collect();
        assert!(t.len() >= 5 && t[3] == ">", "line `{l}`");
        let mut ttl = None;
        let mut dmac = None;
        let e: Vec<&str> = expect
            .split_whitespace()
            .filter(|w| {
                if let Some(v) = w.strip_prefix("ttl=") {
                    ttl = Some(v.parse().expect("ttl=N"));
                    false
                } else if let Some(v) = w.strip_prefix("dmac=") {
                    let b: Vec<u8> = v
                        .split(':')
                        .map(|x| u8::from_str_radix(x, 16).expect("dmac=aa:bb:…"))
                        .collect();
                    dmac = Some(b.try_into().expect("six bytes"));
                    false
                } else {
                    true
                }
            })
            .collect();
        let verdict = match e[0] {
            "forward" => Verdict::Forward,
            d => {
                let c = d
                    .strip_prefix("drop(")
                    .and_then(|x| x.strip_suffix(')'))
                    .expect("drop(CAUSE)");
                Verdict::Drop(
                    DropCause::from_name(c).unwrap_or_else(|| panic!("unknown cause {c}")),
                )
            }
        };
        let out = (e.len() == 4).then(|| (endpoint(e[1]), endpoint(e[3])));
        lines.push(Line {
            no: base + i,
            t_ms: t[0].parse().unwrap(),
            proto: t[1].into(),
            src: endpoint(t[2]),
            dst: endpoint(t[4]),
            flags: t.get(5).copied().unwrap_or("").into(),
            payload,
            verdict,
            out,
            ttl,
            dmac,
        });
    }
    (cfg, lines)
}

fn port(p: &str, vars: &HashMap<String, u16>) -> u16 {
    match p.strip_prefix('$') {
        Some(v) => *vars
            .get(v)
            .unwrap_or_else(|| panic!("${v} used before it is bound")),
        None => p.parse().unwrap_or_else(|_| panic!("bad port `{p}`")),
    }
}

fn check_port(want: &str, got: u16, vars: &mut HashMap<String, u16>) -> bool {
    match want.strip_prefix('$') {
        Some(v) => *vars.entry(v.to_string()).or_insert(got) == got,
        None => want == "*" || want.parse::<u16>() == Ok(got),
    }
}

fn flags(proto: &str, f: &str) -> TcpFlags {
    if proto == "icmp" {
        return if f == "echo" {
            TcpFlags::SYN
        } else {
            TcpFlags::default()
        };
    }
    let mut v = TcpFlags::default();
    for c in f.chars() {
        v = v | match c {
            'S' => TcpFlags::SYN,
            'A' => TcpFlags::ACK,
            'F' => TcpFlags::FIN,
            'R' => TcpFlags::RST,
            'P' => TcpFlags::PSH,
            '-' => TcpFlags::default(),
            o => panic!("flag {o}"),
        };
    }
    v
}

fn run_file(path: &Path) {
    let name = path.file_stem().unwrap().to_string_lossy().to_string();
    let (cfg, lines) = parse(&std::fs::read_to_string(path).unwrap());
    let mut chain = ChainConfig::from_toml(&cfg)
        .unwrap()
        .build(Path::new("."))
        .unwrap();
    let mut shards = chain.new_shards();
    let tmp = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let mut vars = HashMap::new();
    // the input pcap; ports bound by earlier outputs are known once those run, so
    // packets are written one at a time as they are reached
    let mut inputs: Vec<(u64, Vec<u8>)> = Vec::new();
    let mut outputs: Vec<(u64, Vec<u8>)> = Vec::new();
    for l in &lines {
        let f = common::frame(
            &l.proto,
            l.src.0,
            port(&l.src.1, &vars),
            l.dst.0,
            port(&l.dst.1, &vars),
            flags(&l.proto, &l.flags),
            &l.payload,
        );
        inputs.push((l.t_ms * 1_000_000, f));
        let in_path = tmp.join(format!("golden-{name}-in.pcap"));
        trace::write_pcap(&in_path, inputs.iter().map(|(t, f)| (*t, &f[..]))).unwrap();
        let read = trace::read_pcap(&in_path).unwrap();
        let i = read.len() - 1;
        let now = read.ts_ns(i);
        for s in shards.iter_mut() {
            chain.expire(s, now);
        }
        let mut p = chain.packet(read.frame(i).to_vec(), now).unwrap();
        let s = chain.shard_of(p.hash);
        let v = chain.process(&mut shards[s], &mut p, now);
        assert_eq!(v, l.verdict, "{name}:{}: verdict", l.no + 1);
        if let Some(((sa, sp), (da, dp))) = &l.out {
            let t = p.info.tuple;
            assert_eq!((t.src, t.dst), (*sa, *da), "{name}:{}: addresses", l.no + 1);
            assert!(
                check_port(sp, t.src_port, &mut vars),
                "{name}:{}: source port {}",
                l.no + 1,
                t.src_port
            );
            assert!(
                check_port(dp, t.dst_port, &mut vars),
                "{name}:{}: destination port {}",
                l.no + 1,
                t.dst_port
            );
            assert_eq!(
                wire::parse(&p.data).unwrap().tuple,
                t,
                "{name}:{}: bytes agree with metadata",
                l.no + 1
            );
        }
        if let Some(ttl) = l.ttl {
            let off = 14 + if p.info.tuple.src.is_ipv4() { 8 } else { 7 };
            assert_eq!(p.data[off], ttl, "{name}:{}: ttl", l.no + 1);
        }
        if let Some(m) = l.dmac {
            assert_eq!(p.data[..6], m, "{name}:{}: destination MAC", l.no + 1);
        }
        if v == Verdict::Forward {
            outputs.push((now, p.data));
        }
    }
    // the input pcap itself is valid (as built, before any NF touched it)
    let in_path = tmp.join(format!("golden-{name}-in.pcap"));
    let r = trace::tshark::validate(&in_path).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        (r.packets, r.bad_checksums, r.errors),
        (lines.len() as u64, 0, 0),
        "{name} input: {:?}",
        r.samples
    );
    let out_path = tmp.join(format!("golden-{name}-out.pcap"));
    trace::write_pcap(&out_path, outputs.iter().map(|(t, f)| (*t, &f[..]))).unwrap();
    let r = trace::tshark::validate(&out_path).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.packets, outputs.len() as u64);
    assert_eq!(r.bad_checksums, 0, "{name}: {:?}", r.samples);
    assert_eq!(r.errors, 0, "{name}: {:?}", r.samples);
}

#[test]
fn golden_files() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert!(files.len() >= 3, "golden files present");
    for f in files {
        run_file(&f);
    }
}
