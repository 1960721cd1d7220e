//! `flowshift bed up|down`: the test beds with the binary alone — built, left
//! up with instructions printed, and deleted.

use std::process::Command;

fn flowshift(args: &[&str]) -> (bool, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_flowshift"))
        .args(args)
        .output()
        .unwrap();
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr),
    )
}

fn namespaces(prefix: &str) -> Vec<String> {
    let o = Command::new("ip").args(["netns", "list"]).output().unwrap();
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with(&format!("{prefix}-")))
        .map(String::from)
        .collect()
}

#[test]
fn beds_go_up_say_how_to_use_them_and_go_down() {
    let (ok, out) = flowshift(&["bed", "up", "--prefix", "fsbd"]);
    let refused = if !ok && out.contains("needs root") {
        Err(out.clone())
    } else {
        Ok(())
    };
    if netio::testbed::privileged("the network namespace test bed", refused).is_none() {
        // (a refusal on purpose comes after the bed went up)
        let _ = flowshift(&["bed", "down", "--prefix", "fsbd"]);
        return;
    }
    assert!(ok, "{out}");
    assert!(
        out.contains("ip netns exec fsbd-f flowshift run --iface fsbda,fsbdb")
            && out.contains("none is started"),
        "{out}"
    );
    let mut ns = namespaces("fsbd");
    ns.sort();
    assert_eq!(ns, ["fsbd-c", "fsbd-f", "fsbd-s"]);
    assert!(flowshift(&["bed", "down", "--prefix", "fsbd"]).0);
    assert!(namespaces("fsbd").is_empty());
    let (ok, out) = flowshift(&["bed", "up", "--pool", "2", "--prefix", "fsbp"]);
    assert!(ok, "{out}");
    assert!(
        out.contains("node 1: ip netns exec fsbp-n1 flowshift run"),
        "{out}"
    );
    assert_eq!(
        namespaces("fsbp").len(),
        5,
        "client, router, 2 nodes, server"
    );
    assert!(flowshift(&["bed", "down", "--pool", "2", "--prefix", "fsbp"]).0);
    assert!(namespaces("fsbp").is_empty());
    let (ok, out) = flowshift(&["bed", "up", "--pool", "17"]);
    assert!(!ok && out.contains("1 to 16 nodes"), "{out}");
}
