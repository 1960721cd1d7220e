//! Dyssect's optimization-based controller (Dyssect §II-C) for flowshift: the
//! long- and short-timescale models ([`model`]) as mixed-integer linear programs
//! solved with HiGHS, SLOs turned into utilisation caps with Kingman's formula
//! ([`kingman`]), and the controller itself ([`Dyssect`]), a pure
//! [`balance::Balancer`]: a snapshot in, a plan out, no threads or clocks (the
//! solver's own time limit aside).
//!
//! It lives in its own crate so that only what plans with it builds HiGHS (a C++
//! build of a few minutes): the runtime takes any `Balancer`.

#![forbid(unsafe_code)]

mod instance;
pub mod kingman;
pub mod model;
pub mod start;

mod balancer;

pub use balancer::{Dyssect, DyssectConfig, DyssectStats, ShortObjective};
pub use model::{solve, Instance, Objective, Solution, SolveError};
pub use start::{balance_start, Start};
