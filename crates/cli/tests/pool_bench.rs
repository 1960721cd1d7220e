//! `flowshift pool bench` end to end, small and paced: both kinds of traffic
//! cross the two nodes without replication, with it sealed with the pool's
//! key, and with it bare (no key); with it, the steady
//! flows' first packets and every new flow's packet go by the secondary, whose
//! installs plus its counted drops account for every copy sent; nothing is
//! left behind.

use std::process::Command;

mod common;

#[test]
fn pool_bench_measures_replication_on_and_off() {
    let Some(probe) = common::bed("fspb") else {
        return;
    };
    drop(probe);
    let json = std::env::temp_dir().join(format!("fs-pool-bench-{}.json", std::process::id()));
    let out = Command::new(env!("CARGO_BIN_EXE_flowshift"))
        .args(["pool", "bench", "--seconds", "0.3", "--rounds", "1"])
        // a rate both nodes carry on a loaded machine
        .args(["--rate", "0.01", "--flows", "500", "--json"])
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
    assert_eq!(samples.len(), 6, "{samples:?}");
    for s in &samples {
        let [sent, delivered, replicated, installed] =
            ["sent", "delivered", "replicated", "installed"].map(|k| s[k].as_u64().unwrap());
        assert!(sent > 1000, "{s}");
        // (the server's interface also hears the odd neighbour message)
        assert!(delivered * 10 > sent * 9 && delivered <= sent + 16, "{s}");
        if s["replication"] != "off" {
            let new = s["traffic"] == "new";
            // every new flow's packet, or each steady flow's first one
            assert!(replicated >= if new { sent } else { 500 }, "{s}");
            let ring_full = s["drops"]["ring_full"].as_u64().unwrap_or(0);
            assert!(installed + ring_full >= replicated, "{s}");
            assert!(installed * 10 >= replicated * 9, "{s}: copies lost");
        } else {
            assert_eq!(replicated, 0, "{s}");
        }
    }
    let left = Command::new("ip").args(["netns", "list"]).output().unwrap();
    assert!(
        !String::from_utf8_lossy(&left.stdout).contains("fspb-"),
        "namespaces left behind"
    );
}
