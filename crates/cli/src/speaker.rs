//! A pool node's BGP speaker (`[pool.bgp]`, Sirius §3.2): a BIRD started by
//! the node and dying with it (a node killed takes its routes along: the
//! router's session closes), announcing nothing until the node forwards, and
//! withdrawing everything when the node drains (its first Ctrl-C or SIGTERM:
//! the router moves its traffic to the secondaries, which hold its flows'
//! state, and the node stops a moment later) or loses a link (the node stays
//! up for the flows it backs up, but takes no traffic it cannot deliver).
//! What to announce and with which AS path is `pool::bgp`'s.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use netio::bird::{Control, Daemon, Tie};
use pool::bgp::{Node, Role, ANNOUNCE};

/// A node's running speaker.
pub(crate) struct Speaker {
    _daemon: Daemon,
    /// Its control socket.
    pub ctl: PathBuf,
    /// Its configuration file, and what it says.
    pub conf: PathBuf,
    pub spec: Node,
}

impl Speaker {
    /// Writes `stem.bird.conf` for `spec` (its announcements disabled),
    /// checks it, and starts BIRD on it (control socket `stem.bird.ctl`, log
    /// `stem.bird.log`), tied to this thread: call from the main thread.
    pub fn start(spec: &Node, stem: &Path) -> anyhow::Result<Speaker> {
        spec.check()
            .map_err(|e| anyhow::anyhow!("[pool.bgp]: {e}"))?;
        let file = |ext: &str| {
            let mut s = stem.as_os_str().to_owned();
            s.push(ext);
            PathBuf::from(s)
        };
        let (conf, ctl, log) = (file(".bird.conf"), file(".bird.ctl"), file(".bird.log"));
        std::fs::write(&conf, spec.bird_config(true))
            .with_context(|| format!("writing {}", conf.display()))?;
        netio::bird::check(&conf).context("[pool.bgp]")?;
        let daemon = Daemon::start(&conf, &ctl, &log, None, Tie::DiesWithParent)
            .context("[pool.bgp]: starting BIRD")?;
        Ok(Speaker {
            _daemon: daemon,
            ctl,
            conf,
            spec: spec.clone(),
        })
    }
}

/// Announces (`on`) or withdraws everything through the speaker at `ctl`.
pub(crate) fn announce(ctl: &Path, on: bool) -> std::io::Result<()> {
    let mut c = Control::connect(ctl)?;
    if on {
        c.enable(ANNOUNCE)
    } else {
        c.disable(ANNOUNCE)
    }
}

/// Ctrl-C and SIGTERM set the returned flag (the node drains); a second one
/// exits at once.
pub(crate) fn drain_on_signals() -> anyhow::Result<Arc<AtomicBool>> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let drain = Arc::new(AtomicBool::new(false));
    for sig in [SIGINT, SIGTERM] {
        signal_hook::flag::register_conditional_shutdown(sig, 130, drain.clone())?;
        signal_hook::flag::register(sig, drain.clone())?;
    }
    Ok(drain)
}

/// How long a drained node goes on forwarding after its withdrawal: the
/// router's switch and the packets already on their way.
const DRAIN: Duration = Duration::from_millis(300);
/// How often the watch looks.
const TICK: Duration = Duration::from_millis(2);

/// Rewrites the speaker's configuration with its backup announcements
/// promoted (or back), its announcements disabled if `withdrawn`, and has
/// BIRD read it again.
fn promote(s: &Speaker, promoted: bool, withdrawn: bool) -> std::io::Result<()> {
    let spec = if promoted {
        s.spec.with_role(Role::Backup, Role::Promoted)
    } else {
        s.spec.clone()
    };
    std::fs::write(&s.conf, spec.bird_config(withdrawn))?;
    Control::connect(&s.ctl)?.configure()
}

/// Watches the node until the run stops: on `drain`, withdraws, waits
/// [`DRAIN`] and stops the run; when a link of `ifaces` loses its carrier,
/// withdraws (once; the run goes on); while `primary_lost` is set (the
/// primary this node backs up is silent), announces that primary's prefixes
/// promoted (`Role::Promoted`: preferred to a backup, not to a primary that
/// still announces). What it does goes to stderr.
pub(crate) fn watch(
    s: Speaker,
    ifaces: Vec<String>,
    drain: Arc<AtomicBool>,
    primary_lost: Option<runspec::Flag>,
    stop: runspec::Stop,
) {
    std::thread::Builder::new()
        .name("bgp-watch".into())
        .spawn(move || {
            let mut withdrawn = false;
            let mut promoted = false;
            let withdraw = |why: &str| match announce(&s.ctl, false) {
                Ok(()) => eprintln!("flowshift: {why}: announcements withdrawn"),
                Err(e) => eprintln!("flowshift: {why}: withdrawing failed: {e}"),
            };
            while !stop.is_set() {
                // `Relaxed`: a flag set by a signal handler and polled
                if drain.load(Ordering::Relaxed) {
                    withdraw("draining");
                    std::thread::sleep(DRAIN);
                    // (`Relaxed`: see `Stop::is_set`)
                    stop.0.store(true, Ordering::Relaxed);
                    return;
                }
                if !withdrawn {
                    if let Some(i) = ifaces
                        .iter()
                        .find(|i| matches!(netio::bird::carrier(i), Ok(false)))
                    {
                        withdraw(&format!("link {i} down"));
                        withdrawn = true;
                    }
                }
                let lost = primary_lost.as_ref().is_some_and(runspec::Flag::is_set);
                if lost != promoted {
                    promoted = lost;
                    match promote(&s, promoted, withdrawn) {
                        Ok(()) if promoted => eprintln!(
                            "flowshift: the primary is silent: its prefixes announced promoted"
                        ),
                        Ok(()) => eprintln!(
                            "flowshift: the primary beats again: its prefixes announced as backup"
                        ),
                        Err(e) => eprintln!("flowshift: re-announcing failed: {e}"),
                    }
                }
                std::thread::sleep(TICK);
            }
        })
        .expect("a thread");
}
