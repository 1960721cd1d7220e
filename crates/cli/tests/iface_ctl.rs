//! `flowshift ctl` against a running FW → NAT on the netns bed, as an
//! operator uses it: 24 connections held open through the NAT; `ctl flows`
//! lists exactly them (each inside address and port as the client sees it,
//! each mapped one as the server sees it); `ctl flows delete` of one removes
//! exactly it, whose next segment is then refused by the firewall as
//! `ct_invalid` (mid-stream, no SYN) while the others still carry data.
//! Then live reload: while 100 downloads run, the configuration is reloaded
//! with a changed ACL, and a broken file is refused — every download arrives
//! whole; afterwards an ACL line denying the client stops new connections
//! while a connection opened before goes on.

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::Command;
use std::sync::mpsc;
use std::time::Duration;

use netio::netns;
use netio::testbed::{Bed, CLIENT, SERVER};

mod common;
use common::Running;

const PORT: u16 = 7311;
const DOWNLOAD: u16 = 7312;
const BYTES: usize = 1_000_000;
const CONNECTIONS: usize = 24;

fn tmp(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name)
}

/// The server: reports each peer (as the NAT maps it) and echoes.
fn server(bed: &Bed) -> mpsc::Receiver<SocketAddr> {
    common::echo_server(
        &bed.server(),
        SocketAddr::new(SERVER.parse().unwrap(), PORT),
    )
}

/// `CONNECTIONS` connections from the client namespace, each echoed once.
fn connect(bed: &Bed) -> Vec<TcpStream> {
    let ns = bed.client();
    std::thread::spawn(move || {
        netns::enter(&ns).unwrap();
        let to = SocketAddr::new(SERVER.parse().unwrap(), PORT);
        (0..CONNECTIONS)
            .map(|k| {
                let mut s = TcpStream::connect_timeout(&to, Duration::from_secs(5))
                    .unwrap_or_else(|e| panic!("connection {k}: {e}"));
                s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                assert!(echoes(&mut s, k as u8), "connection {k} echoes");
                s
            })
            .collect()
    })
    .join()
    .unwrap()
}

/// True when `s` echoes a byte.
fn echoes(s: &mut TcpStream, b: u8) -> bool {
    let mut got = [0u8; 1];
    s.write_all(&[b]).is_ok() && s.read_exact(&mut got).is_ok() && got[0] == b
}

/// `flowshift ctl --socket SOCK --json ARGS…`'s answer.
fn ctl(sock: &std::path::Path, args: &[&str]) -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_flowshift"))
        .args(["ctl", "--socket", sock.to_str().unwrap(), "--json"])
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "ctl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// (inside endpoints, mapped endpoints) of the listed flows.
type Endpoints = BTreeSet<(String, u16)>;

fn endpoints(flows: &serde_json::Value) -> (Endpoints, Endpoints) {
    let ep = |t: &serde_json::Value| {
        (
            t["src"].as_str().unwrap().to_string(),
            t["sport"].as_u64().unwrap() as u16,
        )
    };
    let rows = flows.as_array().unwrap();
    (
        rows.iter().map(|r| ep(&r["orig"])).collect(),
        rows.iter().map(|r| ep(&r["translated"])).collect(),
    )
}

#[test]
fn ctl_lists_exactly_the_servers_connections_and_deletes_one() {
    let Some(bed) = common::bed("fsct") else {
        return;
    };
    let peers = server(&bed);
    let cfg = tmp("ctl-chain.toml");
    std::fs::write(
        &cfg,
        "[[nf]]\nkind = \"firewall\"\nrules = \"allow tcp 10.0.0.0/8 -> any\"\n\
         [[nf]]\nkind = \"nat\"\ninternal = \"10.0.0.0/8\"\nexternal = [\"203.0.113.0/24\"]\n",
    )
    .unwrap();
    let sock = tmp("ctl.sock");
    let json = tmp("ctl.json");
    let mut run = Running::start(
        &bed,
        &cfg,
        &[
            "--control",
            sock.to_str().unwrap(),
            "--json",
            json.to_str().unwrap(),
        ],
    );
    run.wait_forwarding();
    let mut conns = connect(&bed);
    let seen: Endpoints = (0..CONNECTIONS)
        .map(|_| {
            let p = peers.recv_timeout(Duration::from_secs(5)).unwrap();
            (p.ip().to_string(), p.port())
        })
        .collect();
    let inside: Endpoints = conns
        .iter()
        .map(|s| {
            let a = s.local_addr().unwrap();
            (a.ip().to_string(), a.port())
        })
        .collect();

    let listed = ctl(&sock, &["flows", "tcp", &format!("dport={PORT}")]);
    let (orig, mapped) = endpoints(&listed["flows"]);
    assert_eq!(orig, inside, "the inside endpoints, as the client has them");
    assert_eq!(
        mapped, seen,
        "the mapped endpoints, as the server sees them"
    );
    for r in listed["flows"].as_array().unwrap() {
        // answers come from the server to the mapped endpoint
        assert_eq!(r["reply"]["src"], r["translated"]["dst"], "{r}");
        assert_eq!(r["reply"]["dst"], r["translated"]["src"], "{r}");
        assert_eq!(r["reply"]["dport"], r["translated"]["sport"], "{r}");
        // each echoed a moment ago
        assert!(r["idle_ms"].as_u64().is_some_and(|ms| ms < 30_000), "{r}");
        // made before it last echoed, within the test
        let age = r["age_ms"].as_u64().unwrap();
        assert!(age >= r["idle_ms"].as_u64().unwrap() && age < 60_000, "{r}");
        assert_eq!(r["nfs"].as_array().unwrap().len(), 2, "{r}");
        assert!(
            r["nfs"][0]["state"]
                .as_str()
                .unwrap()
                .contains("ESTABLISHED"),
            "{r}"
        );
        assert!(r["nfs"][1]["timeout_ms"].as_u64().unwrap() > 0, "{r}");
    }
    // the same flows found by their mapped side
    let (_, one) = endpoints(&listed["flows"]);
    let (addr, port) = one.iter().next().unwrap().clone();
    let by_mapped = ctl(
        &sock,
        &["flows", &format!("src={addr}"), &format!("sport={port}")],
    );
    assert_eq!(by_mapped["flows"].as_array().unwrap().len(), 1);

    // delete one connection's flow: exactly it goes
    let victim = conns.remove(0);
    let vport = victim.local_addr().unwrap().port();
    let del = ctl(
        &sock,
        &["flows", "delete", "tcp", &format!("sport={vport}")],
    );
    assert_eq!(del["deleted"], 1, "{del}");
    let after = ctl(&sock, &["flows", "tcp", &format!("dport={PORT}")]);
    assert_eq!(after["flows"].as_array().unwrap().len(), CONNECTIONS - 1);
    let stats = ctl(&sock, &["stats"]);
    let invalid = |s: &serde_json::Value| {
        s["stats"]["flowshift_packets_total{what=\"dropped\",cause=\"ct_invalid\"}"]
            .as_u64()
            .unwrap_or(0)
    };
    let before = invalid(&stats);
    // its next segment is mid-stream for the firewall: refused
    let mut victim = victim;
    victim
        .set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    assert!(!echoes(&mut victim, 1), "a deleted flow carries nothing");
    // the others still carry data
    for (k, s) in conns.iter_mut().enumerate() {
        assert!(echoes(s, k as u8), "connection {k} after the delete");
    }
    std::thread::sleep(Duration::from_millis(300));
    let now = invalid(&ctl(&sock, &["stats"]));
    assert!(now > before, "ct_invalid {before} → {now}");

    // bad requests get errors, the run goes on
    let bad = Command::new(env!("CARGO_BIN_EXE_flowshift"))
        .args(["ctl", "--socket", sock.to_str().unwrap(), "flows", "port=1"])
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("unknown filter term `port=1`"));
    let all = Command::new(env!("CARGO_BIN_EXE_flowshift"))
        .args(["ctl", "--socket", sock.to_str().unwrap(), "flows", "delete"])
        .output()
        .unwrap();
    assert!(!all.status.success(), "deleting every flow needs --all");
    assert_eq!(
        ctl(&sock, &["flows", "tcp", &format!("dport={PORT}")])["flows"]
            .as_array()
            .unwrap()
            .len(),
        CONNECTIONS - 1
    );

    drop(conns);
    let out = run.interrupt();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!sock.exists(), "the socket goes with the run");
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert!(
        r["drops"]["ct_invalid"].as_u64().unwrap() >= 1,
        "{}",
        r["drops"]
    );
}

fn pattern(seed: u8) -> Vec<u8> {
    (0..BYTES)
        .map(|i| (i as u32 * 31 + u32::from(seed)) as u8)
        .collect()
}

/// The download server (`common::download_server`) at the bed's server.
fn download_server(bed: &Bed) {
    let at = SocketAddr::new(SERVER.parse().unwrap(), DOWNLOAD);
    common::download_server(&bed.server(), at, pattern);
}

/// FW → NAT whose ACL is `acl` (rules, one per line).
fn chain(acl: &str) -> String {
    format!(
        "[[nf]]\nkind = \"firewall\"\nrules = \"\"\"\n{acl}\n\"\"\"\n\
         [[nf]]\nkind = \"nat\"\ninternal = \"10.0.0.0/8\"\nexternal = [\"203.0.113.0/24\"]\n"
    )
}

/// `flowshift ctl --socket SOCK reload FILE`: whether it was applied, and
/// what it said.
fn reload(sock: &std::path::Path, file: &std::path::Path) -> (bool, String) {
    reload_with(sock, file, &[])
}

fn reload_with(sock: &std::path::Path, file: &std::path::Path, extra: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_flowshift"))
        .args(["ctl", "--socket", sock.to_str().unwrap(), "reload"])
        .arg(file)
        .args(extra)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn reload_while_downloads_run_breaks_none_and_a_new_acl_judges_new_connections() {
    let Some(bed) = common::bed("fsrl") else {
        return;
    };
    download_server(&bed);
    let peers = server(&bed);
    let allow = "allow tcp 10.0.0.0/8 -> any";
    let cfg = tmp("reload-chain.toml");
    std::fs::write(&cfg, chain(allow)).unwrap();
    let sock = tmp("reload.sock");
    let json = tmp("reload.json");
    let mut run = Running::start(
        &bed,
        &cfg,
        &[
            "--control",
            sock.to_str().unwrap(),
            "--json",
            json.to_str().unwrap(),
        ],
    );
    run.wait_forwarding();

    // 100 downloads while the configuration changes under them
    let (ns, to) = (
        bed.client(),
        SocketAddr::new(SERVER.parse().unwrap(), DOWNLOAD),
    );
    let downloads = std::thread::spawn(move || common::downloads(&ns, to, 100, 4, pattern));
    let changed = tmp("reload-changed.toml");
    std::fs::write(
        &changed,
        chain(&format!("deny tcp 10.99.0.0/16 -> any\n{allow}")),
    )
    .unwrap();
    let broken = tmp("reload-broken.toml");
    std::fs::write(&broken, chain("allow tcp 10.0.0.0/8 ->")).unwrap();
    let mut applied = 0;
    while !downloads.is_finished() {
        let (ok, said) = reload(&sock, &changed);
        assert!(ok && said.contains("reloaded nf[0] firewall"), "{said}");
        let (ok, said) = reload(&sock, &broken);
        assert!(
            !ok && said.contains("nf[0].rules"),
            "a broken file is refused: {said}"
        );
        let (ok, said) = reload(&sock, &cfg);
        assert!(ok, "{said}");
        applied += 2;
        std::thread::sleep(Duration::from_millis(50));
    }
    downloads.join().expect("every download arrives whole");
    assert!(applied >= 2, "reloaded while the downloads ran");

    // a connection opened before the client is denied goes on after
    let mut held = connect_one(&bed);
    let _ = peers.recv_timeout(Duration::from_secs(5)).unwrap();
    let denied = tmp("reload-denied.toml");
    std::fs::write(
        &denied,
        chain(&format!("deny tcp {CLIENT}/32 -> any\n{allow}")),
    )
    .unwrap();
    let (ok, said) = reload(&sock, &denied);
    assert!(ok, "{said}");
    assert!(
        echoes(&mut held, 7),
        "an established connection keeps its state"
    );
    let refused = std::thread::spawn({
        let ns = bed.client();
        move || {
            netns::enter(&ns).unwrap();
            let to = SocketAddr::new(SERVER.parse().unwrap(), PORT);
            TcpStream::connect_timeout(&to, Duration::from_secs(2)).is_err()
        }
    });
    assert!(
        refused.join().unwrap(),
        "a new connection from the client is denied"
    );
    // and with the old file back, new connections pass again
    let (ok, said) = reload(&sock, &cfg);
    assert!(ok, "{said}");
    let mut again = connect_one(&bed);
    assert!(echoes(&mut again, 9));
    // the denying file with a flush: the connection opened before is gone
    // too (its next segment is judged as a new flow's, and denied)
    let (ok, said) = reload_with(&sock, &denied, &["--flush"]);
    assert!(ok && said.contains("flushed"), "{said}");
    assert!(!echoes(&mut again, 11), "a flushed connection is refused");

    drop((held, again));
    let out = run.interrupt();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert!(
        r["drops"]["policy"].as_u64().unwrap() >= 1,
        "{}",
        r["drops"]
    );

    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("flowshift: reload refused"), "{err}");
}

/// One connection to the echo server from the client namespace.
fn connect_one(bed: &Bed) -> TcpStream {
    let ns = bed.client();
    std::thread::spawn(move || {
        netns::enter(&ns).unwrap();
        let to = SocketAddr::new(SERVER.parse().unwrap(), PORT);
        let s = TcpStream::connect_timeout(&to, Duration::from_secs(5)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s
    })
    .join()
    .unwrap()
}
