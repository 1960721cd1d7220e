//! What the migration machines and their drivers tell each other: a
//! working core's start ([`WorkingStart`]), the periodic duties due
//! ([`Due`]) and the actions it gives its driver ([`Action`]); the
//! controller's orders ([`Order`]). Plain data, logged step by step
//! (`steps`).

use super::offload::Recall;
use crate::{CoreId, ShardId, Version};

/// What the controller's driver must do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Order {
    /// Rewrite the indirection-table entries of `shard` to `to`'s queue and
    /// publish `version` (now, or after the NIC's update delay).
    Rewrite {
        /// The shard.
        shard: ShardId,
        /// The new owner.
        to: CoreId,
        /// The table version after the rewrite.
        version: Version,
    },
    /// Tell working core `from` to release `shard` to `to`.
    Release {
        /// The current owner.
        from: CoreId,
        /// The shard.
        shard: ShardId,
        /// The new owner.
        to: CoreId,
    },
    /// Tell working core `core` to set r_s of `shard`.
    SetRatio {
        /// The owner.
        core: CoreId,
        /// The shard.
        shard: ShardId,
        /// r_s in units of `1 / RATIO_ONE`.
        ratio: u32,
    },
    /// Tell working core `core` to offload to `to` (none: stop offloading).
    SetOffloader {
        /// The working core.
        core: CoreId,
        /// Its new offloading core.
        to: Option<CoreId>,
    },
}

/// What the driver must do, in the order given.
#[derive(Debug, PartialEq, Eq)]
pub enum Action<P> {
    /// Push this recall marker into the ring of offloading core `to`, behind
    /// every packet pushed so far.
    PushRecall(Recall),
    /// Hand the shard object of `shard` to working core `to` (the core no longer
    /// holds it).
    SendShard {
        /// The shard.
        shard: ShardId,
        /// The new owner.
        to: CoreId,
    },
    /// Run these packets here, in this order, before any other packet of their
    /// shards (a hand-over's held packets, or a recall's pending ones).
    RunHere(Vec<P>),
    /// Tell the controller that `shard` arrived here, after its `held` packets
    /// (those of the `RunHere` just before) were run.
    Arrived {
        /// The shard.
        shard: ShardId,
        /// Packets held for it.
        held: u64,
    },
}

/// Which periodic duties fell due in [`WorkingCore::handle_time`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Due {
    /// Run the owned shards' idle timeouts now.
    pub timers: bool,
    /// A heavy-flow window closed: [`WorkingCore::heavy_shares`] changed for the
    /// shards held here.
    pub window: bool,
}

/// How a working core starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkingStart {
    /// The working core's index.
    pub core: CoreId,
    /// Shards in the run.
    pub shards: usize,
    /// The shards it owns at the start.
    pub owned: Vec<ShardId>,
    /// Its offloading core (none: it does not offload).
    pub offloader: Option<CoreId>,
    /// r_s of the shards it owns at the start (units of `1 / RATIO_ONE`).
    pub ratio: u32,
    /// Offload the heaviest flows first (instead of hash slices below r_s).
    pub heaviest: bool,
    /// The time it starts at, ns.
    pub now_ns: u64,
    /// The first heavy-flow window's length, ns.
    pub window_ns: u64,
}
