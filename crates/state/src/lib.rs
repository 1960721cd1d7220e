//! Flow state, disaggregated from the network functions (Dyssect §II-A).
//!
//! - A [`FlowTable`] belongs to one shard and is used by one core at a time, so it
//!   has no lock. It is indexed by the RSS hash the NIC model already computed
//!   (never hashed again) and returns an [`EntryId`] that the packet carries through
//!   the chain: every NF reaches its state with that id, no NF looks up again.
//! - A flow entry holds the flow's key (and optionally one alias key, e.g. the
//!   translated reply tuple of a NAT) and **one slot per NF** of the chain. The entry
//!   is freed when every slot is empty.
//! - Each slot has its own idle deadline; a lazy [`TimerWheel`] driven by a time
//!   argument expires them.
//! - A capacity cap with a stated [`CapPolicy`]: refuse new flows, or evict the
//!   oldest *unassured* flow (one that has not seen traffic in both directions). An
//!   assured flow is never evicted to make room, so a SYN flood cannot push
//!   established connections out.
//! - [`merge`] has the state that NFs keep per core and merge periodically
//!   (GranularNF §4): counters, count-min sketches, HyperLogLog.
//!
//! Pure logic: no threads, no clocks, no I/O. Time is always an argument (ns).

mod key;
pub mod merge;
mod prefetch;
pub use prefetch::prefetch;
mod table;
mod wheel;

pub use key::{Dir, FlowKey, Side};
pub use table::{
    CapPolicy, Detached, EntryId, Exits, FlowTable, Image, IndexHash, InsertError, Lookup, Probe,
    Rearm, Slot, SlotMut, TableConfig, TableStats,
};
pub use wheel::TimerWheel;
