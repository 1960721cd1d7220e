//! `flowshift ctl`: asks a running instance, through its control socket
//! (`launch::control`), for its counters and flows, and deletes flows.

use std::io::Write;
use std::path::PathBuf;

use clap::{Args, Subcommand};
use launch::control::{self, Request};
use runspec::control::FlowRow;

/// Options of `flowshift ctl`.
#[derive(Args, Debug)]
pub struct CtlArgs {
    /// The instance's control socket [default: the one running instance's
    /// in /run/flowshift].
    #[arg(long, global = true)]
    pub socket: Option<PathBuf>,
    /// Print the instance's JSON answer.
    #[arg(long, global = true)]
    pub json: bool,
    #[command(subcommand)]
    pub command: CtlCommand,
}

/// What to ask.
#[derive(Subcommand, Debug)]
pub enum CtlCommand {
    /// The live counters (what `--metrics` serves): packets, drops by cause,
    /// per-core load, migrations.
    Stats,
    /// The flow entries, or with `delete` first, deletes them (each NF's
    /// state released as expiry releases it; the flow's next packet is a new
    /// flow's). Filter terms, all of which must hold for the flow's original
    /// or translated tuple: tcp, udp, icmp, icmpv6, proto=N, src=ADDR[/LEN],
    /// dst=ADDR[/LEN], sport=N, dport=N.
    Flows {
        /// `delete`, then filter terms; or only filter terms.
        #[arg(value_name = "[delete] TERM")]
        terms: Vec<String>,
        /// With `delete` and no term: delete every flow.
        #[arg(long)]
        all: bool,
        /// List at most this many flows (the others are counted).
        #[arg(long, default_value_t = launch::control::LIMIT)]
        limit: usize,
    },
    /// Reads the configuration file again (FILE, else the running one's) and
    /// applies it while traffic flows: the NFs' rules change, flows keep their
    /// state. A file that does not validate, or changes what cannot change
    /// live (cores, shards, tables, the NFs in the chain, a NAT's ports or
    /// forwards), is refused with its reason and the running configuration
    /// stays. SIGHUP does the same with the running file.
    Reload {
        /// The new configuration file.
        file: Option<PathBuf>,
        /// Once applied, delete every flow (as `conntrack -F` after `nft
        /// -f`): every connection is then judged by the new configuration.
        #[arg(long)]
        flush: bool,
    },
}

pub fn run(a: CtlArgs) -> anyhow::Result<()> {
    let path = match a.socket {
        Some(p) => p,
        None => control::find()?,
    };
    let req = match a.command {
        CtlCommand::Stats => Request::Stats,
        CtlCommand::Reload { file, flush } => Request::Reload {
            // the instance resolves paths from its own directory
            file: file.map(|f| std::path::absolute(&f)).transpose()?,
            flush,
        },
        CtlCommand::Flows { terms, all, limit } => match terms.split_first() {
            Some((d, rest)) if d == "delete" => Request::Delete {
                filter: rest.join(" "),
                all,
                limit,
            },
            _ if all => anyhow::bail!("--all goes with `flows delete`"),
            _ => Request::Flows {
                filter: terms.join(" "),
                limit,
            },
        },
    };
    let delete = matches!(req, Request::Delete { .. });
    let v = control::request(&path, &req)?;
    // a reader that stops early (`| head`) ends the printing, not in an error
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let printed = print(&mut out, &v, a.json).and_then(|rows| Ok((rows, out.flush()?)));
    let rows = match printed {
        Ok((rows, ())) => rows,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    if a.json || v.get("stats").is_some() {
        return Ok(());
    }
    if let Some(done) = v["reloaded"].as_str() {
        eprintln!("flowshift: {done}");
        if let Some(n) = v["deleted"].as_u64() {
            eprintln!("flowshift: {n} flow(s) flushed");
            let offloaded = v["offloaded"].as_u64().unwrap_or(0);
            if offloaded > 0 {
                eprintln!(
                    "flowshift: {offloaded} flow(s) were with an offloading core and stay: \
                     ctl flows delete --all"
                );
            }
        }
        return Ok(());
    }
    if delete {
        let offloaded = v["offloaded"].as_u64().unwrap_or(0);
        eprintln!("flowshift: deleted {} flow(s)", v["deleted"]);
        if offloaded > 0 {
            eprintln!(
                "flowshift: {offloaded} matching flow(s) were with an offloading core and stay: ask again"
            );
        }
    } else {
        eprintln!("flowshift: {rows} flow(s)");
    }
    let matched = v["matched"].as_u64().unwrap_or(0);
    if matched > rows as u64 {
        eprintln!(
            "flowshift: {} more matching flow(s) not listed (--limit)",
            matched - rows as u64
        );
    }
    Ok(())
}

/// Prints the answer; the flows it listed.
fn print(out: &mut impl Write, v: &serde_json::Value, json: bool) -> std::io::Result<usize> {
    if json {
        writeln!(out, "{}", serde_json::to_string_pretty(v)?)?;
        return Ok(0);
    }
    if let Some(stats) = v["stats"].as_object() {
        for (k, x) in stats {
            writeln!(out, "{k} {x}")?;
        }
        return Ok(0);
    }
    if v.get("flows").is_none() {
        return Ok(0);
    }
    let rows: Vec<FlowRow> = serde_json::from_value(v["flows"].clone())?;
    for r in &rows {
        writeln!(out, "{}", line(r))?;
    }
    Ok(rows.len())
}

/// A flow on one line, as `conntrack -L` shows one.
fn line(r: &FlowRow) -> String {
    let mut s = r.orig.to_string();
    if let Some(t) = &r.translated {
        s += &format!("  as {t}");
    }
    if r.assured {
        s += "  [assured]";
    }
    if r.offloaded {
        s += "  [offloaded]";
    }
    s += &format!("  core {} shard {}", r.core, r.shard);
    s += &format!("  age {:.1}s", r.age_ms as f64 / 1000.0);
    if let Some(ms) = r.idle_ms {
        s += &format!("  idle {:.1}s", ms as f64 / 1000.0);
    }
    for n in &r.nfs {
        let Some(st) = &n.state else { continue };
        s += &format!("  {}: {st}", n.nf);
        if let Some(ms) = n.timeout_ms {
            s += &format!(" ({}s left)", ms.div_ceil(1000));
        }
    }
    s
}
