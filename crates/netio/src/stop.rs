//! Ctrl-C and SIGTERM for long-running commands: the first sets a flag (the
//! run drains and reports), a second one **at least [`GRACE`] later** exits
//! at once with status 130. Two signals closer together are one request:
//! `timeout -s INT` sends its signal to the command and again to its
//! process group, so the command gets it twice within microseconds, and a
//! run stopped that way must still write its report.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// Signals closer than this to the first are the same request.
pub const GRACE_NS: u64 = 500_000_000;

/// The monotonic clock in ns (async-signal-safe: `clock_gettime`).
fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC exists on
    // every Linux; clock_gettime is async-signal-safe (signal-safety(7)).
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
        .max(1)
}

/// Sets `flag` on the first SIGINT or SIGTERM; exits with 130 on another
/// one [`GRACE_NS`] or more after it.
pub fn on_stop_signals(flag: Arc<AtomicBool>) -> std::io::Result<()> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let first = Arc::new(AtomicU64::new(0));
    for sig in [SIGINT, SIGTERM] {
        let (flag, first) = (flag.clone(), first.clone());
        let handler = move || {
            let now = now_ns();
            // SeqCst (both): the first signal's time and the flag are one
            // decision, made in handlers that may run on two threads at once.
            match first.compare_exchange(0, now, Ordering::SeqCst, Ordering::SeqCst) {
                // Relaxed would do for the flag's readers (a polled stop
                // flag, `Stop::is_set`); SeqCst keeps it after `first`.
                Ok(_) => flag.store(true, Ordering::SeqCst),
                Err(at) if now.saturating_sub(at) >= GRACE_NS => {
                    // SAFETY: _exit is async-signal-safe; nothing is flushed
                    // (the user asked twice to stop at once).
                    unsafe { libc::_exit(130) }
                }
                Err(_) => {}
            }
        };
        // SAFETY: the handler only reads the monotonic clock, works on
        // atomics and may call _exit: all async-signal-safe; it allocates
        // nothing and takes no lock.
        unsafe { signal_hook::low_level::register(sig, handler) }?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two SIGINTs at once are one request (the flag, no exit); the test
    /// process would die with 130 otherwise.
    #[test]
    fn two_signals_at_once_are_one_request() {
        let flag = Arc::new(AtomicBool::new(false));
        on_stop_signals(flag.clone()).unwrap();
        // SAFETY: raising a signal this process handles.
        unsafe {
            libc::raise(libc::SIGTERM);
            libc::raise(libc::SIGTERM);
        }
        assert!(flag.load(Ordering::SeqCst));
    }
}
