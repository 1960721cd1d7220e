//! The IDS in a chain: a pattern split across packets matches (streaming, state
//! per flow and direction), the 5-tuple predicate decides, actions alert / drop
//! flow / blacklist source, alerts written as JSON lines, errors name the line.

mod common;

use std::net::IpAddr;
use std::time::{Duration, Instant};

use common::{chain, frame, run};
use nf::{Chain, ChainConfig, DropCause, Shard, Verdict};
use wire::TcpFlags;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn cfg(alerts: &std::path::Path) -> String {
    format!(
        r#"
[[nf]]
kind = "ids"
alerts = "{}"
rules = '''
# a comment
alert tcp any any -> any 80 (msg:"attack seen"; content:"attack"; sid:1;)
drop tcp any any -> any 80 (msg:"exploit"; content:"GET"; pcre:"/\/exploit[0-9]+/"; sid:2;)
blacklist tcp any any <> any any (msg:"worm"; content:"|de ad be ef|"; sid:3;)
'''
"#,
        alerts.display()
    )
}

fn send(
    c: &mut Chain,
    s: &mut [Shard],
    src: &str,
    sport: u16,
    dport: u16,
    payload: &[u8],
) -> Verdict {
    let f = frame(
        "tcp",
        ip(src),
        sport,
        ip("10.9.0.1"),
        dport,
        TcpFlags::ACK,
        payload,
    );
    run(c, s, f, 0).0
}

fn counters(c: &Chain) -> std::collections::BTreeMap<&'static str, u64> {
    c.nfs()[0].counters().into_iter().collect()
}

/// Alert lines, once the writer thread has written `n` of them.
fn alerts(path: &std::path::Path, n: usize) -> Vec<serde_json::Value> {
    let t = Instant::now();
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let v: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        if v.len() >= n || t.elapsed() > Duration::from_secs(10) {
            return v;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn matches_across_packets_and_applies_actions() {
    let path = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("ids-alerts.json");
    let _ = std::fs::remove_file(&path);
    let (mut c, mut s) = chain(&cfg(&path));
    // "attack" split over two packets of one flow: alert on the second, both pass
    assert_eq!(
        send(&mut c, &mut s, "10.0.0.1", 1000, 80, b"an att"),
        Verdict::Forward
    );
    assert_eq!(counters(&c)["alerts"], 0);
    assert_eq!(
        send(&mut c, &mut s, "10.0.0.1", 1000, 80, b"ack here"),
        Verdict::Forward
    );
    assert_eq!(counters(&c)["alerts"], 1);
    // the same bytes to another port: the rule's predicate does not cover it
    send(&mut c, &mut s, "10.0.0.1", 1001, 8080, b"an att");
    send(&mut c, &mut s, "10.0.0.1", 1001, 8080, b"ack here");
    assert_eq!(counters(&c)["alerts"], 1);
    // two flows interleaved keep their own states: "att"+"ack" only within a flow
    send(&mut c, &mut s, "10.0.0.2", 2000, 80, b"att");
    send(&mut c, &mut s, "10.0.0.3", 3000, 80, b"ack");
    assert_eq!(counters(&c)["alerts"], 1);
    // drop: content then pcre, across three packets; the flow is dropped from the
    // matching packet on, other flows of the source are not
    assert_eq!(
        send(&mut c, &mut s, "10.0.0.4", 4000, 80, b"GET /expl"),
        Verdict::Forward
    );
    assert_eq!(
        send(&mut c, &mut s, "10.0.0.4", 4000, 80, b"oit"),
        Verdict::Forward
    );
    assert_eq!(
        send(&mut c, &mut s, "10.0.0.4", 4000, 80, b"42 HTTP/1.1"),
        Verdict::Drop(DropCause::IdsDrop)
    );
    assert_eq!(
        send(&mut c, &mut s, "10.0.0.4", 4000, 80, b"more"),
        Verdict::Drop(DropCause::IdsDrop)
    );
    assert_eq!(
        send(&mut c, &mut s, "10.0.0.4", 4001, 80, b"fine"),
        Verdict::Forward
    );
    // blacklist: the source's every later packet, any flow, is dropped
    assert_eq!(
        send(&mut c, &mut s, "10.0.0.5", 5000, 443, b"\xde\xad"),
        Verdict::Forward
    );
    assert_eq!(
        send(&mut c, &mut s, "10.0.0.5", 5000, 443, b"\xbe\xef"),
        Verdict::Drop(DropCause::IdsDrop)
    );
    assert_eq!(
        send(&mut c, &mut s, "10.0.0.5", 5999, 22, b"hello"),
        Verdict::Drop(DropCause::IdsBlacklisted)
    );
    assert_eq!(
        send(&mut c, &mut s, "10.0.0.6", 5999, 22, b"hello"),
        Verdict::Forward
    );
    let k = counters(&c);
    assert_eq!(
        (
            k["alerts"],
            k["flows_dropped"],
            k["blacklisted"],
            k["alerts_lost"]
        ),
        (3, 2, 1, 0)
    );
    // the alerts, as JSON lines, once the writer has them
    drop((c, s));
    let a = alerts(&path, 3);
    assert_eq!(a.len(), 3, "{a:?}");
    let sids: Vec<u64> = a
        .iter()
        .map(|x| x["alert"]["signature_id"].as_u64().unwrap())
        .collect();
    assert_eq!(sids, vec![1, 2, 3]);
    assert_eq!(a[0]["event_type"], "alert");
    assert_eq!(a[0]["src_ip"], "10.0.0.1");
    assert_eq!(a[0]["dest_port"], 80);
    assert_eq!(a[0]["alert"]["action"], "allowed");
    assert_eq!(a[1]["alert"]["action"], "blocked");
    assert_eq!(a[2]["alert"]["signature"], "worm");
}

#[test]
fn rule_errors_name_the_field_and_line() {
    for (rules, want) in [
        ("alert tcp any any -> any 80 (content:\"x\"; sid:1;)\nalert tcp any any -> any 80 (content:\"x\";)", "line 2: missing sid"),
        ("alert tcp any any -> any 80 (pcre:\"/a(b/\"; sid:1;)", "line 1: pcre"),
    ] {
        let toml = format!("[[nf]]\nkind = \"ids\"\nrules = '''\n{rules}'''\n");
        let e = ChainConfig::from_toml(&toml)
            .and_then(|c| c.build(std::path::Path::new(".")))
            .err()
            .unwrap_or_else(|| panic!("accepted: {rules}"));
        assert!(e.to_string().contains(want), "`{want}` not in: {e}");
    }
}
