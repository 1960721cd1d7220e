//! `flowshift bench-kernel` end to end, small: every variant (kernel routing,
//! nftables firewall + NAT, flowshift with kernel and user steering, receive
//! and transmit rings, AF_XDP with user and kernel steering) forwards the sender's frames, flowshift's own report
//! balances, and nothing is left behind (namespaces, processes).

use std::process::Command;

mod common;

/// The bench builds its bed under one prefix: one test at a time.
static BED: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn bench_kernel_measures_every_variant() {
    let _one = BED.lock().unwrap_or_else(|p| p.into_inner());
    // the bench builds its own bed under this prefix: skip where the kernel
    // refuses network namespaces
    let Some(probe) = common::bed("fsbk") else {
        return;
    };
    drop(probe);
    let json = std::env::temp_dir().join(format!("fs-bench-kernel-{}.json", std::process::id()));
    let out = Command::new(env!("CARGO_BIN_EXE_flowshift"))
        // a rate every variant carries: under overload, a working core that
        // shares its CPU with the kernel's receive work may be starved
        .args([
            "bench-kernel",
            "--seconds",
            "0.5",
            "--rounds",
            "1",
            "--rate",
            "0.02",
        ])
        .args(["--flows", "300", "--json", json.to_str().unwrap()])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success()
        && stderr.contains("error: nft: ")
        && (stderr.contains("Operation not supported") || stderr.contains("Protocol not supported"))
    {
        // the kernel peer needs nf_tables and NAT: a kernel without them
        // cannot be compared with (a wrong ruleset still fails the test)
        netio::testbed::skip("the nftables ruleset", &stderr);
        return;
    }
    assert!(out.status.success(), "{stdout}\n{stderr}");
    println!("{stdout}\n{stderr}");
    let samples: Vec<serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let _ = std::fs::remove_file(&json);
    assert_eq!(samples.len(), 8, "{samples:?}");
    for s in &samples {
        let (sent, delivered) = (
            s["sent"].as_u64().unwrap(),
            s["delivered"].as_u64().unwrap(),
        );
        assert!(sent > 5000, "{s}");
        assert!(delivered * 10 > sent * 9, "{s}: less than 90 % delivered");
        // the server's counter also sees the odd IPv6 neighbour message (and
        // a late probe)
        let probes = s["probes"].as_u64().unwrap();
        assert!(
            delivered <= sent + probes + 16,
            "{s}: more delivered than sent"
        );
        if let Some(f) = s["flowshift"]["counts"].as_array() {
            let [pin, pout, dropped] = [0, 1, 2].map(|i| f[i].as_u64().unwrap());
            assert_eq!(pin, pout + dropped, "{s}");
            // flowshift read what was sent, the probes that found it up and
            // the odd IPv6 neighbour message; it forwarded what the server got
            // (which also hears the middle namespace's own neighbour messages)
            assert!(pin >= sent && pin <= sent + probes + 16, "{s}");
            assert!(pout + 16 >= delivered, "{s}");
        }
    }
    let names: Vec<&str> = samples
        .iter()
        .map(|s| s["variant"].as_str().unwrap())
        .collect();
    assert!(names.iter().any(|n| n.starts_with("nftables")), "{names:?}");
    assert!(names.contains(&"flowshift fw+nat --io xdp"), "{names:?}");
    assert!(
        names.contains(&"flowshift fw+nat --io xdp --steer kernel"),
        "{names:?}"
    );
    // the other sender, and the XDP program's receive work in threads on
    // the network function's CPU
    let out = Command::new(env!("CARGO_BIN_EXE_flowshift"))
        .args(["bench-kernel", "--seconds", "0.5", "--rounds", "1"])
        .args(["--rate", "0.02", "--flows", "300", "--sender", "packet"])
        .args(["--only", "xdp --steer kernel", "--napi-on-nf-cpu"])
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("sender (Packet)"), "{stderr}");
    let samples: Vec<serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let _ = std::fs::remove_file(&json);
    assert_eq!(samples.len(), 2, "{samples:?}");
    for s in &samples {
        let (sent, delivered) = (
            s["sent"].as_u64().unwrap(),
            s["delivered"].as_u64().unwrap(),
        );
        // most of it: the receive work's NAPI threads share the CPU with the
        // spinning working core here (the starvation EXPERIMENTS §8
        // measures), so on a loaded machine a tenth or more can be lost
        // (89 % delivered in one CI run); the first run checks 90 %
        assert!(sent > 5000 && delivered * 4 > sent * 3, "{s}");
    }
    // the bench's namespaces are gone
    let ns = Command::new("ip").args(["netns", "list"]).output().unwrap();
    assert!(
        !String::from_utf8_lossy(&ns.stdout).contains("fsbk-"),
        "namespaces left behind"
    );
}

/// `bench-kernel --tcp`: iperf3 through kernel routing, nftables and
/// flowshift (AF_XDP and AF_PACKET), 1 and 4 streams: every variant carries
/// TCP, and nothing is left behind.
#[test]
fn bench_kernel_tcp_carries_iperf3_through_every_variant() {
    let _one = BED.lock().unwrap_or_else(|p| p.into_inner());
    let Some(probe) = common::bed("fsbk") else {
        return;
    };
    drop(probe);
    let json = std::env::temp_dir().join(format!("fs-bench-tcp-{}.json", std::process::id()));
    let out = Command::new(env!("CARGO_BIN_EXE_flowshift"))
        .args(["bench-kernel", "--tcp", "--seconds", "1", "--rounds", "1"])
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    println!("{stdout}\n{stderr}");
    let samples: Vec<serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let _ = std::fs::remove_file(&json);
    assert_eq!(samples.len(), 8, "{samples:?}");
    for s in &samples {
        // a loaded 2-CPU machine still moves well over 50 Mbit/s
        assert!(s["gbps"].as_f64().unwrap() > 0.05, "{s}");
    }
    let ns = Command::new("ip").args(["netns", "list"]).output().unwrap();
    assert!(
        !String::from_utf8_lossy(&ns.stdout).contains("fsbk-"),
        "namespaces left behind"
    );
    let ps = Command::new("pgrep")
        .args(["-x", "iperf3"])
        .output()
        .unwrap();
    assert!(ps.stdout.is_empty(), "an iperf3 left running");
}

/// `--program-cost`: every way the XDP program steers is timed by the kernel
/// on the same frames, the hash first (the ratios' base), no bed built.
#[test]
fn bench_kernel_times_the_steering_program() {
    if netio::testbed::privileged("eBPF maps", netio::bpf::Map::array(1, 4)).is_none() {
        return;
    }
    let out = Command::new(env!("CARGO_BIN_EXE_flowshift"))
        .args(["bench-kernel", "--program-cost"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Vec<(String, f64, f64)> = text
        .lines()
        .filter_map(|l| {
            let mut w = l.rsplitn(3, ' ').filter(|s| !s.is_empty());
            let ratio = w.next()?.parse().ok()?;
            let rest = w.next()?.trim_end();
            let (name, ns) = rest.rsplit_once(' ')?;
            Some((name.trim().to_string(), ns.parse().ok()?, ratio))
        })
        .collect();
    let names: Vec<&str> = rows.iter().map(|r| r.0.as_str()).collect();
    assert_eq!(
        names,
        [
            "hash (Toeplitz, 12 table lookups)",
            "8 ternary rules, then the hash",
            "64 cells as 64 exact rules",
            "64 cells read from the fields"
        ],
        "{text}"
    );
    assert_eq!(rows[0].2, 1.0, "{text}");
    assert!(rows.iter().all(|r| r.1 > 0.0), "{text}");
}
