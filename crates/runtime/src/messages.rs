//! What the runtime's threads send each other: working cores ↔ controller,
//! working core → working core (a shard hand-over), working core → offloading core
//! (the offload ring's jobs), offloading core → working core (recalled states).

use balance::migrate::offload::{EntryIdx, Ticket};
use balance::{CoreId, ShardId};
use nf::{Leased, Packet, Shard};

/// Messages to a working core.
pub(crate) enum ToWorker {
    /// Release `shard` to `to` (shard-move step 4).
    Release { shard: ShardId, to: CoreId },
    /// A shard handed over by another working core (step 5).
    Shard { shard: ShardId, state: Box<Shard> },
    /// Set the offload ratio r_s of an owned shard.
    SetRatio { shard: ShardId, ratio: u32 },
    /// Offload to another offloading core (or stop offloading).
    SetOffloader { to: Option<CoreId> },
    /// The offloading core answered recall `ticket` with these flows' states.
    Returned {
        ticket: Ticket,
        states: Vec<(ShardId, EntryIdx, Box<Leased>)>,
    },
    /// An operator's order (`flowshift ctl`): a question about the flows of
    /// the shards it owns, or a live reload; carried out between two bursts.
    Order(runspec::control::Order),
}

/// Messages to the controller.
pub(crate) enum ToController {
    /// `shard` arrived at its new owner; `entries` flow entries came with it and
    /// `held` packets had been held for it, now processed.
    Arrived {
        shard: ShardId,
        entries: u64,
        held: u64,
    },
}

/// What a working core sends its offloading core, in one FIFO ring.
pub(crate) enum ToOffload {
    /// An offloaded packet; `lease` carries the flow's state with its first one.
    Job {
        shard: ShardId,
        entry: EntryIdx,
        lease: Option<Box<Leased>>,
        pkt: Packet,
    },
    /// Send these flows' states back (after every packet before this marker).
    Recall {
        ticket: Ticket,
        entries: Vec<(ShardId, EntryIdx)>,
    },
}
