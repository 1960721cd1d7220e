//! `flowshift trace stats`: summarise a capture, read a chunk at a time.

use std::path::PathBuf;

use clap::Args;
use trace::{CaptureReader, StatsBuilder, Trace};

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
    // read a chunk at a time: memory grows with the connections, not the
    // capture
    let mut r = CaptureReader::open(&a.file)?;
    let mut b = StatsBuilder::default();
    let mut chunk = Trace::new();
    let mut filled = 0;
    loop {
        chunk.clear();
        if r.fill(&mut chunk, runtime::replay::CHUNK_BYTES)? == 0 {
            break;
        }
        filled += chunk.filled();
        b.add(&chunk);
    }
    let tl = r.timeline();
    launch::packets::warn_read(&a.file, tl.back, filled, tl.jumps);
    let s = b.finish(a.top);
    if a.json {
        println!("{}", serde_json::to_string_pretty(&s)?);
    } else {
        print!("{s}");
    }
    Ok(())
}
