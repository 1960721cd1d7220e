//! BIRD 2, the BGP speaker of the pool's router and nodes (`pool::bgp`
//! writes their configuration): starting the daemon, tied to its parent or
//! not, and its control socket — the text protocol `birdc` speaks (a request
//! line; reply lines `NNNN-…` continued, `NNNN …` the last; codes from 8000
//! are errors).

use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The `bird` program: on `PATH` or in `/usr/sbin` (Debian's `bird2`).
pub fn program() -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin")])
        .map(|d| d.join("bird"))
        .find(|p| p.is_file())
}

fn missing() -> io::Error {
    io::Error::new(
        io::ErrorKind::NotFound,
        "no `bird` program (BIRD 2; on Debian: apt install bird2)",
    )
}

/// Checks a configuration file as `bird -p` does: its error names the line.
pub fn check(conf: &Path) -> io::Result<()> {
    let bird = program().ok_or_else(missing)?;
    let out = Command::new(bird).arg("-p").arg("-c").arg(conf).output()?;
    if out.status.success() {
        return Ok(());
    }
    Err(io::Error::other(format!(
        "{}: {}",
        conf.display(),
        String::from_utf8_lossy(&out.stderr).trim()
    )))
}

/// How a daemon's life is bound to the process that starts it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tie {
    /// Killed (SIGKILL) by the kernel when the thread that started it ends —
    /// the main thread, for a node: a node's process that dies, `kill -9`
    /// included, takes its announcements with it (the router's session
    /// closes).
    DiesWithParent,
    /// In a process group of its own, living on after its starter (a pool's
    /// router outlives its controller).
    Detached,
}

/// A running `bird -f`: killed on drop.
#[derive(Debug)]
pub struct Daemon {
    child: Child,
    /// Its control socket.
    pub socket: PathBuf,
    /// With [`Tie::DiesWithParent`]: the process that kills it as soon as
    /// this one starts to exit (`crate::guard`).
    guard: Option<u32>,
}

impl Daemon {
    /// Starts `bird -f -c conf -s socket` (in namespace `ns`, if any), its
    /// messages appended to `log`, and waits (up to 5 s) until its control
    /// socket answers.
    pub fn start(
        conf: &Path,
        socket: &Path,
        log: &Path,
        ns: Option<&str>,
        tie: Tie,
    ) -> io::Result<Daemon> {
        use std::os::unix::process::CommandExt;
        let bird = program().ok_or_else(missing)?;
        let _ = std::fs::remove_file(socket);
        let mut cmd = match ns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns]).arg(&bird);
                c
            }
            None => Command::new(&bird),
        };
        cmd.arg("-f").arg("-c").arg(conf).arg("-s").arg(socket);
        let err = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)?;
        cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(err);
        match tie {
            Tie::DiesWithParent => {
                // SAFETY: the closure runs in the forked child before exec
                // and only calls prctl(2), which is async-signal-safe; it
                // touches no memory of the parent's.
                unsafe {
                    cmd.pre_exec(|| {
                        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                            return Err(io::Error::last_os_error());
                        }
                        Ok(())
                    });
                }
            }
            Tie::Detached => {
                cmd.process_group(0);
            }
        }
        let mut child = cmd.spawn()?;
        let t = Instant::now();
        loop {
            if Control::connect(socket).is_ok() {
                // PR_SET_PDEATHSIG acts only once this process is torn down
                // (seconds, loaded); the guard as soon as it starts to exit
                let guard = match tie {
                    Tie::DiesWithParent => {
                        Some(crate::guard::spawn(std::process::id(), child.id())?)
                    }
                    Tie::Detached => None,
                };
                return Ok(Daemon {
                    child,
                    socket: socket.to_path_buf(),
                    guard,
                });
            }
            if let Some(st) = child.try_wait()? {
                return Err(io::Error::other(format!(
                    "bird -c {} ended at its start ({st}); see {}",
                    conf.display(),
                    log.display()
                )));
            }
            if t.elapsed() > Duration::from_secs(5) {
                let _ = child.kill();
                let _ = child.wait();
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("bird's control socket {} never answered", socket.display()),
                ));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Leaves it running after this value is gone.
    pub fn detach(self) {
        std::mem::forget(self);
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(g) = self.guard {
            let mut status = 0;
            // SAFETY: kill(2) and waitpid(2) on the guard, this process's
            // own child; `status` is a local
            unsafe {
                libc::kill(g as libc::pid_t, libc::SIGKILL);
                libc::waitpid(g as libc::pid_t, &mut status, 0);
            }
        }
    }
}

/// A protocol's line of `show protocols`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Protocol {
    pub name: String,
    /// `up`, `down`, `start`, …
    pub state: String,
    /// For BGP: `Established`, `Active`, `Connect`, …
    pub info: String,
}

impl Protocol {
    /// A BGP session that carries routes.
    pub fn established(&self) -> bool {
        self.state == "up" && self.info.starts_with("Established")
    }
}

/// A connection to a daemon's control socket.
pub struct Control {
    r: BufReader<UnixStream>,
}

impl Control {
    /// Connects and reads the greeting; a reply that takes more than 5 s is
    /// an error.
    pub fn connect(socket: &Path) -> io::Result<Control> {
        Self::connect_waiting(socket, Duration::from_secs(5))
    }

    /// [`connect`](Self::connect), a reply waited for at most `wait`.
    pub fn connect_waiting(socket: &Path, wait: Duration) -> io::Result<Control> {
        let s = UnixStream::connect(socket)?;
        s.set_read_timeout(Some(wait))?;
        let mut c = Control {
            r: BufReader::new(s),
        };
        c.reply()?;
        Ok(c)
    }

    /// Reads one reply: its lines' text; an error for a code from 8000.
    fn reply(&mut self) -> io::Result<String> {
        let mut text = String::new();
        loop {
            let mut line = String::new();
            if self.r.read_line(&mut line)? == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "bird closed its control socket",
                ));
            }
            let line = line.trim_end_matches('\n');
            // `NNNN-text` (more follows), `NNNN text` (the last), ` text`
            // (continues the previous code)
            let (code, last, body) = match line.as_bytes() {
                [a, b, c, d, sep, ..] if [a, b, c, d].iter().all(|x| x.is_ascii_digit()) => {
                    let code: u32 = line[..4].parse().unwrap_or(0);
                    (Some(code), *sep == b' ', &line[5..])
                }
                _ if line.len() == 4 && line.bytes().all(|b| b.is_ascii_digit()) => {
                    (line.parse().ok(), true, "")
                }
                _ => (None, false, line.strip_prefix(' ').unwrap_or(line)),
            };
            text.push_str(body);
            text.push('\n');
            if let Some(code) = code {
                if code >= 8000 {
                    return Err(io::Error::other(format!("bird: {}", text.trim())));
                }
                if last {
                    return Ok(text);
                }
            }
        }
    }

    /// Sends `cmd` and returns the reply's text.
    pub fn request(&mut self, cmd: &str) -> io::Result<String> {
        let s = self.r.get_mut();
        s.write_all(cmd.as_bytes())?;
        s.write_all(b"\n")?;
        self.reply()
    }

    /// Reads the configuration file again (`configure`): changed
    /// announcements and filters take effect, sessions stay up.
    pub fn configure(&mut self) -> io::Result<()> {
        let r = self.request("configure")?;
        if r.contains("Reconfigured") || r.contains("Reconfiguration in progress") {
            Ok(())
        } else {
            Err(io::Error::other(format!("bird configure: {}", r.trim())))
        }
    }

    /// Enables protocol `name` (a node's announcements, say).
    pub fn enable(&mut self, name: &str) -> io::Result<()> {
        self.request(&format!("enable {name}")).map(drop)
    }

    /// Disables protocol `name`: its routes are withdrawn.
    pub fn disable(&mut self, name: &str) -> io::Result<()> {
        self.request(&format!("disable {name}")).map(drop)
    }

    /// Routes protocol `name` gave its table (`show route protocol NAME
    /// count`), whether best or not.
    pub fn routes_from(&mut self, name: &str) -> io::Result<usize> {
        let text = self.request(&format!("show route protocol {name} count"))?;
        // `4 of 4 routes for 4 networks in table master4`
        text.lines()
            .find(|l| l.contains("routes for"))
            .and_then(|l| l.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| io::Error::other(format!("bird: no route count in `{}`", text.trim())))
    }

    /// `show protocols`.
    pub fn protocols(&mut self) -> io::Result<Vec<Protocol>> {
        let text = self.request("show protocols")?;
        Ok(text
            .lines()
            .filter_map(|l| {
                let w: Vec<&str> = l.split_whitespace().collect();
                // name proto table state since [info…]; the header says "Name"
                if w.len() < 5 || w[0] == "Name" {
                    return None;
                }
                Some(Protocol {
                    name: w[0].to_string(),
                    state: w[3].to_string(),
                    info: w.get(5..).map(|i| i.join(" ")).unwrap_or_default(),
                })
            })
            .collect())
    }
}

/// Whether interface `iface` (in this process's namespace) has its carrier:
/// false when it, or a veth's peer, is down.
pub fn carrier(iface: &str) -> io::Result<bool> {
    let p = format!("/sys/class/net/{iface}/carrier");
    match std::fs::read_to_string(&p) {
        Ok(s) => Ok(s.trim() == "1"),
        // reading `carrier` of an interface that is down is EINVAL
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => Ok(false),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A control connection to a fake daemon that says `script`.
    fn fake(script: &'static str) -> Control {
        let (a, mut b) = UnixStream::pair().unwrap();
        std::thread::spawn(move || {
            b.write_all(b"0001 BIRD 2.0.12 ready.\n").unwrap();
            let mut r = BufReader::new(b.try_clone().unwrap());
            let mut line = String::new();
            r.read_line(&mut line).unwrap();
            b.write_all(script.as_bytes()).unwrap();
        });
        let mut c = Control {
            r: BufReader::new(a),
        };
        c.reply().unwrap();
        c
    }

    #[test]
    fn protocols_are_read_from_their_table() {
        let mut c = fake(
            "2002-Name       Proto      Table      State  Since         Info\n\
             1002-device1    Device     ---        up     13:20:17.065  \n \
             node0      BGP        ---        up     13:20:17.980  Established   \n \
             node1      BGP        ---        start  13:20:21.983  Active        Socket: Connection closed\n\
             0000 \n",
        );
        let p = c.protocols().unwrap();
        assert_eq!(p.len(), 3, "{p:?}");
        assert!(p[1].established());
        assert_eq!(p[2].state, "start");
        assert!(!p[2].established());
        assert!(p[2].info.starts_with("Active"));
    }

    #[test]
    fn an_error_code_is_an_error() {
        let mut c = fake("8003 No protocols match\n");
        let e = c.request("enable nothing").unwrap_err();
        assert!(e.to_string().contains("No protocols match"), "{e}");
        let mut c = fake("0002-Reading configuration from /x\n0003 Reconfigured\n");
        c.configure().unwrap();
    }
}
