//! Migration protocols (RSS++ §3.3, Dyssect Algorithms 1–3).

pub mod heavy;
pub mod offload;
pub mod shard_move;

pub use offload::{slice_of, OffloadStats, Recall, Route, WorkingOffload, RATIO_ONE};
pub use shard_move::{Command, MoveError, Mover, Received, WorkerMoves};
