//! `flowshift chain check`: validate a chain configuration and show what it does.

use std::path::{Path, PathBuf};

use clap::Args;
use nf::ChainConfig;

/// Options of `flowshift chain check`.
#[derive(Args, Debug)]
pub struct CheckArgs {
    /// Chain configuration (TOML); without it, the default chain
    /// (firewall → NAT → sequence check).
    #[arg(long)]
    pub config: Option<PathBuf>,
}

pub fn run(a: CheckArgs) -> anyhow::Result<()> {
    let (cfg, base) = match &a.config {
        Some(p) => ChainConfig::from_file(p)?,
        None => (ChainConfig::default_chain(), Path::new(".").to_path_buf()),
    };
    let chain = cfg.build(&base)?;
    print!("{}", chain.describe());
    Ok(())
}
