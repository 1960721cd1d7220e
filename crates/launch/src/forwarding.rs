//! Waiting for a `flowshift run` started as a child process (a bench's run, a
//! pool's node) to say it forwards: `flowshift run --iface` prints
//! [`LINE`] once its tables are built and its threads started, which on a busy
//! machine can take seconds.

use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

use anyhow::bail;

/// What `flowshift run --iface` prints once it forwards.
pub const LINE: &str = "flowshift: forwarding";

/// Waits until `child`, its standard error going to `log`, prints [`LINE`]
/// past byte `from` of the log (a restarted node appends to its first run's);
/// fails with what it printed if it ends first or takes `limit`.
pub fn wait(log: &Path, from: u64, child: &mut Child, limit: Duration) -> anyhow::Result<()> {
    let t0 = Instant::now();
    loop {
        let text = std::fs::read(log).unwrap_or_default();
        let new = String::from_utf8_lossy(text.get(from as usize..).unwrap_or_default());
        if new.contains(LINE) {
            return Ok(());
        }
        if let Some(status) = child.try_wait()? {
            bail!("it ended before forwarding ({status}): {}", new.trim());
        }
        if t0.elapsed() > limit {
            bail!(
                "not forwarding after {limit:?} (see {}): {}",
                log.display(),
                new.trim()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
