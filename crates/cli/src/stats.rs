//! `flowshift trace stats`: summarise a pcap.

use std::path::PathBuf;

use clap::Args;
use trace::{read_pcap, TraceStats};

/// Options of `flowshift trace stats`.
#[derive(Args, Debug)]
pub struct StatsArgs {
    /// The pcap file.
    pub file: PathBuf,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
    /// How many of the largest flows to list.
    #[arg(long, default_value_t = 10)]
    pub top: usize,
}

pub fn run(a: StatsArgs) -> anyhow::Result<()> {
    let t = read_pcap(&a.file)?;
    crate::packets::warn_read(&a.file, t.clamped(), t.filled(), t.jumps());
    let s = TraceStats::compute(&t, a.top);
    if a.json {
        println!("{}", serde_json::to_string_pretty(&s)?);
    } else {
        print!("{s}");
    }
    Ok(())
}
