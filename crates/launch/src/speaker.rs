//! A pool node's BGP speaker (`[pool.bgp]`, Sirius §3.2): a BIRD started by
//! the node and dying with it (a node killed takes its routes along: the
//! router's session closes), announcing nothing until the node forwards, and
//! withdrawing everything when the node drains (its first Ctrl-C or SIGTERM:
//! the router moves its traffic to the secondaries, which hold its flows'
//! state, and the node stops a moment later), loses a link (the node stays
//! up for the flows it backs up, but takes no traffic it cannot deliver) or
//! loses its session to the router (the router gave its flows to its
//! secondary, which has changed them since: this node's copies are stale, so
//! it must not take them back when the session returns).
//! What to announce and with which AS path is `pool::bgp`'s, and so are the
//! decisions (`pool::bgp::Watch`, pure): this thread only looks and acts.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use netio::bird::{Control, Daemon, Tie};
use pool::bgp::{Act, Node, Seen, Watch, Withdraw, ANNOUNCE, PROMOTE};

/// A node's running speaker.
pub struct Speaker {
    _daemon: Daemon,
    /// Its control socket.
    pub ctl: PathBuf,
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
        })
    }
}

/// Announces (`on`) or withdraws everything through the speaker at `ctl`
/// (promoted prefixes too).
pub fn announce(ctl: &Path, on: bool) -> std::io::Result<()> {
    let mut c = Control::connect(ctl)?;
    if on {
        c.enable(ANNOUNCE)
    } else {
        c.disable(ANNOUNCE)?;
        c.disable(PROMOTE)
    }
}

/// Ctrl-C and SIGTERM set the returned flag (the node drains); a second one,
/// half a second or more later, exits at once (`netio::stop`).
pub fn drain_on_signals() -> anyhow::Result<Arc<AtomicBool>> {
    let drain = Arc::new(AtomicBool::new(false));
    netio::stop::on_stop_signals(drain.clone())?;
    Ok(drain)
}

/// How long a drained node goes on forwarding after its withdrawal: the
/// router's switch and the packets already on their way.
const DRAIN: Duration = Duration::from_millis(300);
/// How often the watch looks.
const TICK: Duration = Duration::from_millis(2);
/// How often it asks BIRD about the session (a lost session is back no
/// sooner than BIRD's error wait, a second).
const SESSION_LOOK: Duration = Duration::from_millis(20);

/// The time of day (UTC, ms), for the node's log: what the speaker did
/// lines up with BIRD's log and the router's.
fn now() -> String {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let ms = t.as_millis() % 86_400_000;
    format!(
        "{:02}:{:02}:{:02}.{:03}",
        ms / 3_600_000,
        ms / 60_000 % 60,
        ms / 1000 % 60,
        ms % 1000
    )
}

/// Promotes the node — every prefix it backs up announced promoted, one
/// prepend: its primary's from the start ([`PROMOTE`]) and those it was
/// given since the pool re-paired (`promote<k>` for each `backup<k>`
/// enabled) — or demotes it, through the speaker at `ctl`.
fn promote(ctl: &Path, on: bool) -> std::io::Result<()> {
    let mut c = Control::connect(ctl)?;
    let protocols = c.protocols()?;
    let up = |name: &str| protocols.iter().any(|p| p.name == name && p.state == "up");
    let adopted = (0..)
        .map_while(|k| {
            let b = pool::bgp::backup_protocol(k);
            protocols.iter().any(|p| p.name == b).then_some(k)
        })
        .collect::<Vec<_>>();
    let mut names = vec![PROMOTE.to_string()];
    for k in adopted {
        if !on || up(&pool::bgp::backup_protocol(k)) {
            names.push(pool::bgp::promote_protocol(k));
        }
    }
    for n in names {
        if on {
            c.enable(&n)?;
        } else if up(&n) {
            c.disable(&n)?;
        }
    }
    Ok(())
}

/// Watches the node until the run stops: on `drain`, withdraws, waits
/// [`DRAIN`] and stops the run; when a link of `ifaces` loses its carrier,
/// withdraws (once; the run goes on); while `primary_lost` is set (the
/// primary this node backs up is silent), announces that primary's prefixes
/// promoted (`Role::Promoted`: preferred to a backup, not to a primary that
/// still announces). What it does goes to stderr.
pub fn watch(
    s: Speaker,
    ifaces: Vec<String>,
    drain: Arc<AtomicBool>,
    primary_lost: Option<runspec::Flag>,
    stop: runspec::Stop,
) {
    std::thread::Builder::new()
        .name("bgp-watch".into())
        .spawn(move || {
            // the whole speaker lives in this thread (its BIRD with it), not
            // only the fields the loop reads
            let s = s;
            let mut w = Watch::default();
            // (a slow answer must not hold the link and drain checks up)
            let look = || Control::connect_waiting(&s.ctl, SESSION_LOOK * 5).ok();
            let mut session = look();
            let mut next_look = std::time::Instant::now();
            while !stop.is_set() {
                let session_up =
                    if std::time::Instant::now() >= next_look && w.withdrawn().is_none() {
                        next_look = std::time::Instant::now() + SESSION_LOOK;
                        let up = session.as_mut().and_then(|c| c.protocols().ok()).map(|ps| {
                            ps.iter()
                                .any(|p| p.name == pool::bgp::UPLINK && p.established())
                        });
                        if up.is_none() {
                            session = look();
                        }
                        up
                    } else {
                        None
                    };
                let seen = Seen {
                    // `Relaxed`: a flag set by a signal handler and polled
                    drain: drain.load(Ordering::Relaxed),
                    link_down: ifaces
                        .iter()
                        .any(|i| matches!(netio::bird::carrier(i), Ok(false))),
                    session_up,
                    primary_lost: primary_lost.as_ref().is_some_and(runspec::Flag::is_set),
                };
                match w.look(seen) {
                    Some(Act::Withdraw(why)) => {
                        let why = match why {
                            Withdraw::Drain => "draining".to_string(),
                            Withdraw::LinkDown => {
                                let i = ifaces
                                    .iter()
                                    .find(|i| matches!(netio::bird::carrier(i), Ok(false)));
                                format!("link {} down", i.map_or("?", |i| i.as_str()))
                            }
                            Withdraw::SessionLost => "the session to the router went down".into(),
                        };
                        match announce(&s.ctl, false) {
                            Ok(()) => {
                                eprintln!("flowshift: {} {why}: announcements withdrawn", now())
                            }
                            Err(e) => {
                                eprintln!("flowshift: {} {why}: withdrawing failed: {e}", now())
                            }
                        }
                        if w.withdrawn() == Some(Withdraw::SessionLost) {
                            eprintln!(
                                "flowshift: its flows are its secondary's now: this node \
                                 announces nothing until it is synced and restarted"
                            );
                        }
                        if w.withdrawn() == Some(Withdraw::Drain) {
                            std::thread::sleep(DRAIN);
                            // (`Relaxed`: see `Stop::is_set`)
                            stop.0.store(true, Ordering::Relaxed);
                            return;
                        }
                    }
                    Some(Act::Promote(on)) => match promote(&s.ctl, on) {
                        Ok(()) if on => eprintln!(
                            "flowshift: {} the primary is silent: its prefixes announced promoted",
                            now()
                        ),
                        Ok(()) => eprintln!(
                            "flowshift: {} the primary beats again: its prefixes announced as \
                             backup",
                            now()
                        ),
                        Err(e) => eprintln!("flowshift: re-announcing failed: {e}"),
                    },
                    None => {}
                }
                std::thread::sleep(TICK);
            }
        })
        .expect("a thread");
}
