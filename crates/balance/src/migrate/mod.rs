//! Migration protocols (RSS++ §3.3, Dyssect Algorithms 1–3).
//!
//! The protocol pieces ([`shard_move`], [`offload`], [`heavy`]) are combined into
//! one machine per side: [`WorkingCore`] for a working core and [`PlanApplier`]
//! for the controller. The runtime, the simulator, the loom models and the
//! random-interleaving tests drive these two, so every ordering rule has one copy.

pub mod apply;
pub mod heavy;
pub mod offload;
pub mod shard_move;
pub mod steps;
pub mod working;

pub use apply::{ApplyStats, Order, PlanApplier};
pub use offload::{slice_of, OffloadStats, Recall, Route, WorkingOffload, RATIO_ONE};
pub use shard_move::{Command, MoveError, Mover, Received, WorkerMoves};
pub use steps::{check_drivers, replay, Did, Exercised, Step};
pub use working::{Action, Due, WorkingCore, WorkingStart, IDLE_RECALL_NS, TIMER_NS};
