//! Network namespaces: created and deleted with `ip netns` (iproute2), entered by
//! one thread with `setns(2)`.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::process::Command;

/// Runs `ip ARGS…`; the error carries its stderr.
pub fn ip(args: &[&str]) -> io::Result<()> {
    run("ip", args)
}

/// Runs a command; the error carries its stderr.
pub fn run(cmd: &str, args: &[&str]) -> io::Result<()> {
    let out = Command::new(cmd).args(args).output()?;
    if out.status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "{cmd} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

/// Runs `CMD ARGS…` inside namespace `ns`.
pub fn exec(ns: &str, cmd: &str, args: &[&str]) -> io::Result<()> {
    let mut a = vec!["netns", "exec", ns, cmd];
    a.extend_from_slice(args);
    ip(&a)
}

/// `kill -9` of every process in namespace `ns` (`ip netns pids`); none
/// there, or no such namespace: nothing.
pub fn kill_all(ns: &str) {
    let Ok(out) = Command::new("ip").args(["netns", "pids", ns]).output() else {
        return;
    };
    for pid in String::from_utf8_lossy(&out.stdout).split_whitespace() {
        if let Ok(pid) = pid.parse::<libc::pid_t>() {
            // SAFETY: kill(2) takes plain integers; a pid that has gone
            // since it was listed gets ESRCH, which is ignored.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
        }
    }
}

/// Moves the calling thread into namespace `ns` (created by `ip netns add`).
/// Sockets it opens from then on live there.
pub fn enter(ns: &str) -> io::Result<()> {
    let f = File::open(format!("/run/netns/{ns}"))?;
    // SAFETY: `f` is an open namespace file for the call; setns affects only this thread.
    let r = unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The MAC address of `iface` in namespace `ns`.
pub fn mac(ns: &str, iface: &str) -> io::Result<String> {
    sysfs(ns, &format!("class/net/{iface}/address"))
}

/// Counter `name` of `iface` in namespace `ns` (`rx_packets`, `tx_packets`,
/// `rx_dropped`… from `/sys/class/net/IFACE/statistics`).
pub fn counter(ns: &str, iface: &str, name: &str) -> io::Result<u64> {
    let v = sysfs(ns, &format!("class/net/{iface}/statistics/{name}"))?;
    v.parse()
        .map_err(|_| io::Error::other(format!("{iface} in {ns}: {name} = `{v}`")))
}

/// The content of `/sys/PATH` as namespace `ns` sees it, trimmed.
fn sysfs(ns: &str, path: &str) -> io::Result<String> {
    let out = Command::new("ip")
        .args(["netns", "exec", ns, "cat", &format!("/sys/{path}")])
        .output()?;
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "/sys/{path} in {ns}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// The index of interface `iface` in this thread's network namespace.
pub fn ifindex(iface: &str) -> io::Result<i32> {
    let name = std::ffi::CString::new(iface)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "interface name with NUL"))?;
    // SAFETY: `name` is a valid NUL-terminated string for the call.
    let i = unsafe { libc::if_nametoindex(name.as_ptr()) };
    if i == 0 {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("interface `{iface}`: no such interface (see `ip link`)"),
        ));
    }
    Ok(i as i32)
}
