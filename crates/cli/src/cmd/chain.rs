//! `flowshift chain check`: validate a chain configuration and show what it does.

use std::path::PathBuf;

use clap::Args;

/// Options of `flowshift chain check`.
#[derive(Args, Debug)]
pub struct CheckArgs {
    /// Chain configuration (TOML); without it, the default chain
    /// (firewall → NAT → sequence check).
    #[arg(long)]
    pub config: Option<PathBuf>,
}

pub fn run(a: CheckArgs) -> anyhow::Result<()> {
    // the file `run` takes: the chain, and a `[run]` table checked too
    let (cfg, _run, base) = launch::run::load(a.config.as_deref())?;
    let chain = cfg.build(&base)?;
    print!("{}", chain.describe());
    Ok(())
}
