//! `flowshift run`: a chain on worker threads over a trace or on interfaces,
//! with live load moved by the configured balancer; prints the report (the
//! run itself is `launch::run`).

use anyhow::bail;
use launch::run::RunArgs;

use super::report::print_report;

pub fn run(a: RunArgs) -> anyhow::Result<()> {
    // a restarted NAT hands out other ports than the run before (servers
    // may still hold those tuples in TIME_WAIT)
    nf::nat::set_port_salt(rand::random());
    let ran = launch::run::run(&a)?;
    print_report(&ran.report);
    if let Some(why) = &ran.input_failure {
        bail!("the run ended early ({why}); the report above covers it up to then");
    }
    Ok(())
}
