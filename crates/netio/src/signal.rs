//! Signals to child processes (a run's nodes, a bench's `flowshift run`,
//! `perf`): SIGINT asks one to stop and write its report.

use std::io;

/// Sends SIGINT to process `pid`.
pub fn interrupt(pid: u32) -> io::Result<()> {
    let pid =
        libc::pid_t::try_from(pid).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: kill(2) takes a pid and a signal number; no memory is passed.
    if unsafe { libc::kill(pid, libc::SIGINT) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}
