//! Migration protocols (RSS++ §3.3, Dyssect Algorithms 1–3).

pub mod shard_move;

pub use shard_move::{Command, MoveError, Mover, Received, WorkerMoves};
