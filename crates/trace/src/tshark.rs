//! Independent validation of pcap files with Wireshark's `tshark`: malformed
//! packets, IP/TCP/UDP/ICMP checksums, expert-info severities, TCP handshakes.
//!
//! Used by the test suite on every pcap flowshift writes. Every dissector above L4
//! is disabled — generated payloads are synthetic, and translated ports land on
//! whatever port another protocol claims — so what is checked is exactly the layers
//! flowshift writes: Ethernet, VLAN, IPv4/IPv6 (with extension headers), TCP, UDP,
//! ICMP/ICMPv6.

use std::path::Path;
use std::process::Command;
use std::sync::OnceLock;

/// The protocols left enabled (with `data` for payloads).
pub const KEPT: [&str; 14] = [
    "frame",
    "eth",
    "ethertype",
    "vlan",
    "ip",
    "ipv6",
    "ipv6.hopopts",
    "ipv6.routing",
    "ipv6.fraghdr",
    "ipv6.dstopts",
    "tcp",
    "udp",
    "icmp",
    "icmpv6",
];

/// Every protocol tshark knows except [`KEPT`] and `data` (asked once).
fn disabled() -> Result<&'static [String], String> {
    static LIST: OnceLock<Result<Vec<String>, String>> = OnceLock::new();
    LIST.get_or_init(|| {
        let out = Command::new("tshark").args(["-G", "protocols"]).output().map_err(|e| {
            format!(
                "cannot run tshark ({e}); install it with `bash scripts/test.sh` or `apt-get install tshark`"
            )
        })?;
        Ok(String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.split('\t').nth(2))
            .filter(|p| *p != "data" && !KEPT.contains(p))
            .map(str::to_string)
            .collect())
    })
    .as_ref()
    .map(|v| v.as_slice())
    .map_err(Clone::clone)
}

/// tshark's expert severities.
pub mod severity {
    /// Chat.
    pub const CHAT: u32 = 0x0020_0000;
    /// Note.
    pub const NOTE: u32 = 0x0040_0000;
    /// Warning.
    pub const WARN: u32 = 0x0060_0000;
    /// Error (malformed packets are errors).
    pub const ERROR: u32 = 0x0080_0000;
}

/// What tshark said about a file.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TsharkReport {
    /// Packets read.
    pub packets: u64,
    /// Packets with a bad checksum at any layer (IP, TCP, UDP, ICMP, ICMPv6).
    pub bad_checksums: u64,
    /// Packets whose checksums were verified good at every checksummed layer.
    pub good_checksums: u64,
    /// Packets with an expert item of severity warning.
    pub warnings: u64,
    /// Packets with an expert item of severity error (malformed included).
    pub errors: u64,
    /// SYN without ACK (TCP connection attempts).
    pub syn_only: u64,
    /// The first few offending lines, for messages.
    pub samples: Vec<String>,
}

/// Runs tshark on `path` with checksum validation on.
pub fn validate(path: &Path) -> Result<TsharkReport, String> {
    let fields = [
        "frame.number",
        "ip.checksum.status",
        "tcp.checksum.status",
        "udp.checksum.status",
        "icmp.checksum.status",
        "icmpv6.checksum.status",
        "_ws.expert.severity",
        "tcp.flags.syn",
        "tcp.flags.ack",
    ];
    let rows = dissect(path, &[], &fields)?;
    let mut r = TsharkReport::default();
    for row in &rows {
        let f: Vec<&str> = row.iter().map(String::as_str).collect();
        let line = row.join("|");
        if f.len() != fields.len() {
            return Err(format!("unexpected tshark line: {line}"));
        }
        r.packets += 1;
        // status: 0 = bad, 1 = good, 2 = unverified; a field may repeat (ICMP errors)
        let statuses: Vec<&str> = f[1..6]
            .iter()
            .flat_map(|s| s.split(','))
            .filter(|s| !s.is_empty())
            .collect();
        let bad = statuses.contains(&"0");
        r.bad_checksums += u64::from(bad);
        r.good_checksums += u64::from(!statuses.is_empty() && statuses.iter().all(|s| *s == "1"));
        let sev: Vec<u32> = f[6].split(',').filter_map(|s| s.parse().ok()).collect();
        let warn = sev.contains(&severity::WARN);
        let err = sev.iter().any(|s| *s >= severity::ERROR);
        r.warnings += u64::from(warn);
        r.errors += u64::from(err);
        let syn = matches!(f[7], "1" | "True");
        let ack = matches!(f[8], "1" | "True");
        r.syn_only += u64::from(syn && !ack);
        if (bad || warn || err) && r.samples.len() < 5 {
            r.samples.push(line);
        }
    }
    Ok(r)
}

/// Runs tshark on `path` with the dissectors of [`KEPT`] and `also` (e.g.
/// `gtp`, `pfcp`: the layers flowshift writes; payloads stay synthetic) and
/// checksum validation, and returns `fields` of each packet (tshark's `-T
/// fields`; several values of one field joined by `,`).
pub fn dissect(path: &Path, also: &[&str], fields: &[&str]) -> Result<Vec<Vec<String>>, String> {
    let mut cmd = Command::new("tshark");
    cmd.arg("-r").arg(path).arg("-n");
    for p in disabled()?.iter().filter(|p| !also.contains(&p.as_str())) {
        cmd.args(["--disable-protocol", p]);
    }
    for pref in [
        "ip.check_checksum",
        "udp.check_checksum",
        "tcp.check_checksum",
    ] {
        cmd.args(["-o", &format!("{pref}:TRUE")]);
    }
    cmd.args(["-T", "fields", "-E", "separator=|", "-E", "aggregator=,"]);
    for f in fields {
        cmd.args(["-e", f]);
    }
    let out = cmd.output().map_err(|e| {
        format!("cannot run tshark ({e}); install it with `bash scripts/test.sh` or `apt-get install tshark`")
    })?;
    if !out.status.success() {
        return Err(format!(
            "tshark failed on {}: {}",
            path.display(),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.split('|').map(str::to_string).collect())
        .collect())
}
