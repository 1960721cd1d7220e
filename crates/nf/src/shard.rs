//! A shard: its flow table and its NFs' shard-local state, owned by one
//! core at a time; moving a shard moves all of it.

use state::FlowTable;

use crate::{FlowState, ShardLocal};

/// A shard: its flow table and its NFs' shard-local state. Owned by one core at a
/// time; moving a shard moves all of it.
#[derive(Debug)]
pub struct Shard {
    /// Which shard.
    pub info: ShardInfo,
    /// The flow table.
    pub table: FlowTable<Option<FlowState>>,
    /// Shard-local state, one per NF.
    pub locals: Vec<ShardLocal>,
    /// In emergency mode (see [`ChainOptions::emergency`](crate::ChainOptions::emergency)): the chain
    /// decides it as the shard's number of flows moves.
    pub emergency: bool,
    /// The table's number of flows when `emergency` was last brought up to
    /// date (`usize::MAX`: never); at that number it is up to date still.
    pub(crate) emergency_at: usize,
}

/// Which shard a context belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShardInfo {
    /// Shard index.
    pub index: usize,
    /// Number of shards (a power of two).
    pub count: usize,
    /// Indirection-table size − 1: the hash bits that select a bucket.
    pub bucket_mask: u32,
}
