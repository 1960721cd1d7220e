//! One module per `flowshift` command: its options, the call into the crate
//! that does the work, and what it prints.

pub mod bed;
pub mod chain;
pub mod ctl;
pub mod gen;
pub mod pool;
pub mod report;
pub mod run;
pub mod sim;
pub mod stats;
pub mod steer;
