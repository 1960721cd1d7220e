//! A test bed on this machine: three network namespaces in a line,
//!
//! ```text
//!  {p}-c            {p}-f (flowshift)            {p}-s
//!  {p}c0 ─── veth ─── {p}a      {p}b ─── veth ─── {p}s0
//!  10.0.0.2/24                                 198.51.100.2/24
//! ```
//!
//! flowshift runs in `{p}-f` on `{p}a,{p}b` as a bump in the wire: it forwards
//! frames between the two with their MAC addresses as they are. The endpoints
//! know each other's MAC addresses statically (no ARP crosses flowshift): the
//! client reaches 198.51.100.0/24 directly, the server reaches the NAT pool
//! 203.0.113.0/24 and 10.0.0.0/8 through a gateway address whose MAC is the
//! client's. Offloads are off on every veth end, so frames carry full checksums
//! and no segment is larger than the MTU. Dropping the bed deletes the
//! namespaces (and with them the veth pairs).

use std::io;

use crate::netns::{exec, ip, mac};

/// The client's address.
pub const CLIENT: &str = "10.0.0.2";
/// The server's address.
pub const SERVER: &str = "198.51.100.2";

/// The three namespaces; deleted on drop.
#[derive(Debug)]
pub struct Bed {
    /// The prefix of every name.
    pub prefix: String,
}

impl Bed {
    /// Builds the bed with names starting with `prefix` (at most 8 characters,
    /// so interface names fit Linux's 15).
    pub fn up(prefix: &str) -> io::Result<Bed> {
        Bed::up_with_queues(prefix, 1)
    }

    /// The bed with veth pairs of `queues` receive and transmit queues each
    /// (a multi-queue NIC's shape: the kernel puts a frame on the receive
    /// queue of the transmit queue its sender picked, by flow).
    pub fn up_with_queues(prefix: &str, queues: u32) -> io::Result<Bed> {
        assert!(prefix.len() <= 8, "prefix too long for interface names");
        assert!((1..=64).contains(&queues), "1 to 64 queues");
        let bed = Bed {
            prefix: prefix.to_string(),
        };
        // a bed left by an earlier run that died goes first
        bed.remove();
        bed.build(queues)?;
        Ok(bed)
    }

    /// Client namespace.
    pub fn client(&self) -> String {
        format!("{}-c", self.prefix)
    }

    /// flowshift's namespace.
    pub fn middle(&self) -> String {
        format!("{}-f", self.prefix)
    }

    /// Server namespace.
    pub fn server(&self) -> String {
        format!("{}-s", self.prefix)
    }

    /// flowshift's interfaces: towards the client, towards the server.
    pub fn ifaces(&self) -> (String, String) {
        (format!("{}a", self.prefix), format!("{}b", self.prefix))
    }

    fn build(&self, queues: u32) -> io::Result<()> {
        let (c, f, s) = (self.client(), self.middle(), self.server());
        let p = &self.prefix;
        let (c0, s0) = (format!("{p}c0"), format!("{p}s0"));
        let (a, b) = self.ifaces();
        for ns in [&c, &f, &s] {
            ip(&["netns", "add", ns])?;
            exec(ns, "ip", &["link", "set", "lo", "up"])?;
        }
        let q = queues.to_string();
        for (end, ns, peer, peer_ns) in [(&c0, &c, &a, &f), (&s0, &s, &b, &f)] {
            ip(&[
                "link",
                "add",
                end,
                "netns",
                ns,
                "numtxqueues",
                &q,
                "numrxqueues",
                &q,
                "type",
                "veth",
                "peer",
                "name",
                peer,
                "netns",
                peer_ns,
                "numtxqueues",
                &q,
                "numrxqueues",
                &q,
            ])?;
        }
        for (ns, dev) in [(&c, &c0), (&f, &a), (&f, &b), (&s, &s0)] {
            quiet(ns, dev)?;
        }
        let (cmac, smac) = (mac(&c, &c0)?, mac(&s, &s0)?);
        exec(
            &c,
            "ip",
            &["addr", "add", &format!("{CLIENT}/24"), "dev", &c0],
        )?;
        exec(&c, "ip", &["route", "add", "198.51.100.0/24", "dev", &c0])?;
        neighbour(&c, SERVER, &smac, &c0)?;
        exec(
            &s,
            "ip",
            &["addr", "add", &format!("{SERVER}/24"), "dev", &s0],
        )?;
        neighbour(&s, "198.51.100.1", &cmac, &s0)?;
        for net in ["203.0.113.0/24", "10.0.0.0/8"] {
            exec(
                &s,
                "ip",
                &[
                    "route",
                    "add",
                    net,
                    "via",
                    "198.51.100.1",
                    "dev",
                    &s0,
                    "onlink",
                ],
            )?;
        }
        Ok(())
    }

    /// Gives the middle namespace what the kernel needs to route between the
    /// two sides itself (for comparing flowshift with the kernel's own
    /// forwarding, `flowshift bench-kernel`): addresses `10.0.0.1/24` and
    /// `198.51.100.1/24`, a default route to the server with a static
    /// neighbour, no reverse-path filter. Forwarding stays off until
    /// [`set_forwarding`](Self::set_forwarding); frames flowshift forwards are
    /// addressed to the server's MAC and never reach the middle's IP stack.
    pub fn route_in_middle(&self) -> io::Result<()> {
        let (f, s) = (self.middle(), self.server());
        let (a, b) = self.ifaces();
        let smac = mac(&s, &format!("{}s0", self.prefix))?;
        exec(&f, "ip", &["addr", "add", "10.0.0.1/24", "dev", &a])?;
        exec(&f, "ip", &["addr", "add", "198.51.100.1/24", "dev", &b])?;
        exec(&f, "ip", &["route", "add", "10.0.0.0/8", "dev", &a])?;
        neighbour(&f, SERVER, &smac, &b)?;
        exec(
            &f,
            "ip",
            &["route", "add", "default", "via", SERVER, "dev", &b],
        )?;
        for k in ["all", "default", a.as_str(), b.as_str()] {
            exec(
                &f,
                "sysctl",
                &["-qw", &format!("net.ipv4.conf.{k}.rp_filter=0")],
            )?;
        }
        Ok(())
    }

    /// Where the endpoints send: to the middle namespace's interfaces (`true`:
    /// the kernel there routes, as for nftables) or to each other's MAC
    /// addresses through flowshift as a bump in the wire (`false`, as built).
    /// Needs [`route_in_middle`](Self::route_in_middle) first for `true`.
    pub fn endpoints_to_middle(&self, on: bool) -> io::Result<()> {
        let (c, f, s) = (self.client(), self.middle(), self.server());
        let p = &self.prefix;
        let (c0, s0) = (format!("{p}c0"), format!("{p}s0"));
        let (a, b) = self.ifaces();
        let (cmac, smac) = (mac(&c, &c0)?, mac(&s, &s0)?);
        if on {
            neighbour(&c, SERVER, &mac(&f, &a)?, &c0)?;
            neighbour(&s, "198.51.100.1", &mac(&f, &b)?, &s0)?;
            neighbour(&f, CLIENT, &cmac, &a)?;
        } else {
            neighbour(&c, SERVER, &smac, &c0)?;
            neighbour(&s, "198.51.100.1", &cmac, &s0)?;
        }
        Ok(())
    }

    /// Turns IPv4 forwarding in the middle namespace on or off.
    pub fn set_forwarding(&self, on: bool) -> io::Result<()> {
        let v = if on { "1" } else { "0" };
        exec(
            &self.middle(),
            "sysctl",
            &["-qw", &format!("net.ipv4.ip_forward={v}")],
        )
    }

    /// Receive packet steering: frames arriving on the middle's interfaces are
    /// processed (by the kernel, and handed to packet sockets) on the CPUs of
    /// `mask` rather than on the sending CPU.
    pub fn steer_middle_rx(&self, mask: u64) -> io::Result<()> {
        let (a, b) = self.ifaces();
        for dev in [a, b] {
            exec(
                &self.middle(),
                "sh",
                &[
                    "-c",
                    &format!("for q in /sys/class/net/{dev}/queues/rx-*; do echo {mask:x} > $q/rps_cpus; done"),
                ],
            )?;
        }
        Ok(())
    }

    /// Receive packet steering on the endpoints' interfaces (all CPUs, by
    /// flow hash), as a wire keeps the order frames were sent in: a veth
    /// queues each frame on its sender's CPU, so two of flowshift's cores
    /// sending one flow's frames one after the other (a shard moved between
    /// them) could otherwise reach the endpoint in the other order.
    pub fn steer_endpoints_rx(&self) -> io::Result<()> {
        let cpus = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .min(64);
        let mask: u64 = if cpus >= 64 {
            u64::MAX
        } else {
            (1u64 << cpus) - 1
        };
        self.steer_endpoints_rx_to(mask)
    }

    /// Receive packet steering on the endpoints' interfaces onto the CPUs of
    /// `mask`: what reaches the client or the server is processed there
    /// (their IP and TCP receive work included), not on the CPU that sent it.
    pub fn steer_endpoints_rx_to(&self, mask: u64) -> io::Result<()> {
        let p = &self.prefix;
        for (ns, dev) in [
            (self.client(), format!("{p}c0")),
            (self.server(), format!("{p}s0")),
        ] {
            exec(
                &ns,
                "sh",
                &[
                    "-c",
                    &format!("for q in /sys/class/net/{dev}/queues/rx-*; do echo {mask:x} > $q/rps_cpus; done"),
                ],
            )?;
        }
        Ok(())
    }

    /// The middle's interfaces' NAPI (which an XDP program attached gives a
    /// veth) run in kernel threads pinned to `cpu`, as a NIC's receive work
    /// runs on the CPUs of the machine it is in: a veth otherwise runs it on
    /// the CPU that sent the frame — the other namespace's.
    pub fn napi_threads_on(&self, cpu: usize) -> io::Result<()> {
        let (a, b) = self.ifaces();
        for dev in [&a, &b] {
            exec(
                &self.middle(),
                "sh",
                &["-c", &format!("echo 1 > /sys/class/net/{dev}/threaded")],
            )?;
        }
        // the threads are named `napi/<interface>-<id>`
        let out = std::process::Command::new("sh")
            .args([
                "-c",
                &format!(
                    "for p in $(pgrep '^napi/({a}|{b})-'); do taskset -pc {cpu} $p >/dev/null || exit 1; echo $p; done"
                ),
            ])
            .output()?;
        if !out.status.success() || out.stdout.is_empty() {
            return Err(io::Error::other(format!(
                "no NAPI thread of {a} or {b} to pin (is an XDP program attached?): {}",
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        Ok(())
    }

    /// Interrupt coalescing on the middle's interfaces, as a NIC's is tuned
    /// for a poll-mode network function: once their NAPI has run (an XDP
    /// program attached gives a veth one), it runs again after `us`
    /// microseconds or when the next poll asks, rather than at every frame
    /// a sender hands over (`napi_defer_hard_irqs`, `gro_flush_timeout`).
    pub fn coalesce(&self, us: u64) -> io::Result<()> {
        let (a, b) = self.ifaces();
        for dev in [a, b] {
            exec(
                &self.middle(),
                "sh",
                &[
                    "-c",
                    &format!(
                        "echo 2 > /sys/class/net/{dev}/napi_defer_hard_irqs; \
                         echo {} > /sys/class/net/{dev}/gro_flush_timeout",
                        us * 1000
                    ),
                ],
            )?;
        }
        Ok(())
    }

    /// Leaves the bed up after this value is gone (`scripts/netns.sh up`).
    pub fn keep(self) {
        std::mem::forget(self);
    }

    /// Deletes the bed with names starting with `prefix`.
    pub fn down(prefix: &str) {
        Bed {
            prefix: prefix.to_string(),
        }
        .remove();
    }

    fn remove(&self) {
        for ns in [self.client(), self.middle(), self.server()] {
            let _ = ip(&["netns", "del", &ns]);
        }
    }
}

/// A permanent neighbour entry in namespace `ns`: `addr` is at `lladdr` on `dev`.
/// Brings `dev` up with full checksums and MTU-sized segments (no
/// offloads).
pub(crate) fn quiet(ns: &str, dev: &str) -> io::Result<()> {
    exec(ns, "ip", &["link", "set", dev, "up"])?;
    exec(
        ns,
        "ethtool",
        &[
            "-K", dev, "tx", "off", "rx", "off", "tso", "off", "gso", "off", "gro", "off",
        ],
    )
}

pub(crate) fn neighbour(ns: &str, addr: &str, lladdr: &str, dev: &str) -> io::Result<()> {
    exec(
        ns,
        "ip",
        &[
            "neigh",
            "replace",
            addr,
            "lladdr",
            lladdr,
            "dev",
            dev,
            "nud",
            "permanent",
        ],
    )
}

impl Drop for Bed {
    fn drop(&mut self) {
        self.remove();
    }
}

/// What a test that needs root, network namespaces or eBPF does when it
/// cannot have them: `what` was refused (`refused`). It prints that it
/// skipped — or, where `FLOWSHIFT_REQUIRE_PRIVILEGED=1` (CI sets it: a
/// skipped test is a test that did not run), fails. Every test that skips
/// comes here, so `FLOWSHIFT_REFUSE_PRIVILEGED=1` (see [`privileged`])
/// shows the whole suite's behaviour on a machine without the privilege.
pub fn skip(what: &str, refused: &dyn std::fmt::Display) {
    let line = format!("skipped: the kernel refused {what}: {refused}");
    if std::env::var("FLOWSHIFT_REQUIRE_PRIVILEGED").is_ok_and(|v| v == "1") {
        panic!("{line} (FLOWSHIFT_REQUIRE_PRIVILEGED=1: a privileged test must run)");
    }
    eprintln!("{line}");
    note("skipped", what);
}

/// `r` — the result of setting up what a privileged test needs (a bed, an
/// eBPF program) — or `None` after [`skip`]; and a note that the test ran.
/// `FLOWSHIFT_REFUSE_PRIVILEGED=1` makes it a refusal whatever `r` was, as
/// a machine without the privilege would.
pub fn privileged<T, E: std::fmt::Display>(what: &str, r: Result<T, E>) -> Option<T> {
    if std::env::var("FLOWSHIFT_REFUSE_PRIVILEGED").is_ok_and(|v| v == "1") {
        skip(what, &"refused on purpose (FLOWSHIFT_REFUSE_PRIVILEGED=1)");
        return None;
    }
    match r {
        Ok(t) => {
            note("ran", what);
            Some(t)
        }
        Err(e) => {
            skip(what, &e);
            None
        }
    }
}

/// Appends `ran` or `skipped` and `what` to the file `FLOWSHIFT_PRIVILEGED_LOG`
/// names (the test script counts them), if any.
fn note(outcome: &str, what: &str) {
    use std::io::Write;
    let Ok(path) = std::env::var("FLOWSHIFT_PRIVILEGED_LOG") else {
        return;
    };
    let test = std::thread::current()
        .name()
        .unwrap_or("unnamed")
        .to_string();
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
    {
        // one write of the whole line: with O_APPEND the kernel keeps lines
        // from parallel tests whole (a formatted `writeln!` writes piece by
        // piece, and two tests' pieces interleaved once)
        let _ = f.write_all(format!("{outcome}\t{test}\t{what}\n").as_bytes());
    }
}
