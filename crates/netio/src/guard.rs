//! A guard process that kills a child as soon as its parent begins to exit.
//!
//! `PR_SET_PDEATHSIG` signals a child only once its parent has exited
//! completely — after the kernel has torn its memory and sockets down, which
//! on a loaded machine took a `kill -9`ed pool node 16 s, all the while its
//! BGP speaker kept announcing its routes. The kernel marks a process
//! `PF_EXITING` the moment it starts to exit; a small process forked for the
//! purpose polls that flag in `/proc/PID/stat` every 2 ms and kills the
//! child at once.

use std::ffi::CString;
use std::io;

/// `PF_EXITING` in `/proc/PID/stat`'s flags.
const PF_EXITING: u64 = 0x4;

/// How often the guard looks.
const EVERY_NS: libc::c_long = 2_000_000;

/// True if a `/proc/PID/stat` line says its process is exiting (or cannot be
/// read as one). Allocates nothing: the guard calls it after `fork`.
pub fn exiting(stat: &[u8]) -> bool {
    // after the command's name in parentheses: state, ppid, pgrp, session,
    // tty, tpgid, flags
    let Some(close) = stat.iter().rposition(|&b| b == b')') else {
        return true;
    };
    let mut fields = stat[close + 1..]
        .split(|&b| b == b' ')
        .filter(|f| !f.is_empty());
    let Some(flags) = fields.nth(6) else {
        return true;
    };
    let mut v: u64 = 0;
    for &d in flags {
        if !d.is_ascii_digit() {
            return true;
        }
        v = v.saturating_mul(10).saturating_add(u64::from(d - b'0'));
    }
    v & PF_EXITING != 0
}

/// Forks a guard that kills `child` (`SIGKILL`) as soon as process `parent`
/// is exiting or gone, and exits once `child` is gone; its process id.
pub fn spawn(parent: u32, child: u32) -> io::Result<u32> {
    let path = CString::new(format!("/proc/{parent}/stat")).expect("no NUL in a path");
    let child = libc::pid_t::try_from(child).map_err(|_| io::Error::other("a pid out of range"))?;
    // SAFETY: fork(2). The forked child runs `watch` only, which makes
    // async-signal-safe system calls alone on memory prepared before the
    // fork (`path`) and its own stack, as the child of a multithreaded
    // process must, and never returns.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if pid == 0 {
        // SAFETY: in the forked child (see above)
        unsafe { watch(&path, child) }
    }
    Ok(pid as u32)
}

/// The guard's loop (in the forked child).
///
/// # Safety
/// Only in a child just forked: it closes every file descriptor and ends
/// with `_exit`.
unsafe fn watch(path: &CString, child: libc::pid_t) -> ! {
    // SAFETY: close_range(2), prctl(2), open(2), read(2), close(2),
    // kill(2), nanosleep(2) and _exit(2) are async-signal-safe system calls; `buf`
    // and `ts` are this stack's, `path` was made before the fork and is
    // only read.
    unsafe {
        // (the parent's sockets must close when it dies, not live on here)
        libc::syscall(libc::SYS_close_range, 0u32, u32::MAX, 0u32);
        // (a name of its own: `ps` and the tests tell it from its parent)
        libc::prctl(libc::PR_SET_NAME, c"bird-guard".as_ptr());
        let ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: EVERY_NS,
        };
        let mut buf = [0u8; 1024];
        loop {
            if libc::kill(child, 0) != 0 {
                libc::_exit(0);
            }
            let fd = libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
            let gone = if fd < 0 {
                true
            } else {
                let n = libc::read(fd, buf.as_mut_ptr().cast(), buf.len());
                libc::close(fd);
                n <= 0 || exiting(&buf[..n as usize])
            };
            if gone {
                libc::kill(child, libc::SIGKILL);
                libc::_exit(0);
            }
            libc::nanosleep(&ts, std::ptr::null_mut());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;
    use std::time::{Duration, Instant};

    #[test]
    fn the_exiting_flag_is_read_from_a_stat_line() {
        let live = b"4242 (flow shift) S 1 4242 4242 0 -1 4194560 512 0 0 0";
        assert!(!exiting(live));
        let dying = b"4242 (flow shift) R 1 4242 4242 0 -1 4194564 512 0 0 0";
        assert!(exiting(dying));
        // a name with `) ` in it: the last parenthesis counts
        assert!(!exiting(b"7 (a) b) S 1 7 7 0 -1 64 0"));
        assert!(exiting(b"garbage"));
        assert!(exiting(b"7 (x) S 1"));
    }

    #[test]
    fn a_guarded_child_dies_as_its_parent_is_killed_and_the_guard_with_it() {
        let mut parent = Command::new("sleep").arg("30").spawn().unwrap();
        let mut child = Command::new("sleep").arg("30").spawn().unwrap();
        let g = spawn(parent.id(), child.id()).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        let comm = std::fs::read_to_string(format!("/proc/{g}/comm")).unwrap();
        assert_eq!(comm.trim(), "bird-guard");
        assert!(
            child.try_wait().unwrap().is_none(),
            "alive while its parent is"
        );
        parent.kill().unwrap();
        // (not reaped yet: the parent is exiting, a zombie)
        let t = Instant::now();
        let st = loop {
            if let Some(st) = child.try_wait().unwrap() {
                break st;
            }
            assert!(t.elapsed() < Duration::from_secs(2), "the child lives on");
            std::thread::sleep(Duration::from_millis(2));
        };
        assert!(!st.success());
        let _ = parent.wait();
        // the guard ends too
        let mut status = 0;
        // SAFETY: waitpid(2) on our own child, status written to a local
        let r = unsafe { libc::waitpid(g as libc::pid_t, &mut status, 0) };
        assert_eq!(r, g as libc::pid_t);
    }
}
