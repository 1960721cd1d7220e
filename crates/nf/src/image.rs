//! A flow entry as bytes: its keys and every NF's state in it, for another
//! chain — in another process — to install (a Sirius secondary keeping a copy
//! of each flow its primary changes, §3.2). Encoded with `postcard`; the NFs
//! whose state can travel say so by having a variant here.

use serde::{Deserialize, Serialize};
use state::{EntryId, Image};

use crate::chain::Chain;
use crate::firewall::Conn;
use crate::nat::NatMap;
use crate::seqcheck::SeqState;
use crate::shard::Shard;
use crate::FlowState;

/// The per-flow states that can leave their process.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
enum Portable {
    Conn(Conn),
    Nat(NatMap),
    Seq(SeqState),
}

impl Portable {
    fn of(s: &FlowState) -> Option<Portable> {
        match s {
            FlowState::Conn(c) => Some(Portable::Conn(*c)),
            FlowState::Nat(m) => Some(Portable::Nat(*m)),
            FlowState::Seq(q) => Some(Portable::Seq(*q)),
            _ => None,
        }
    }

    fn into_state(self) -> FlowState {
        match self {
            Portable::Conn(c) => FlowState::Conn(c),
            Portable::Nat(m) => FlowState::Nat(m),
            Portable::Seq(q) => FlowState::Seq(q),
        }
    }
}

/// Why an entry's bytes could not be installed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum InstallError {
    /// Not an entry image, or one of another chain.
    #[error("not an entry image of this chain: {0}")]
    Malformed(String),
    /// The shard's table is full under its policy.
    #[error("the flow table is full")]
    TableFull,
}

impl Chain {
    /// Whether every NF's per-flow state can leave its process (an error names
    /// the first that cannot).
    pub fn portable(&self) -> Result<(), String> {
        let mut kinds = self
            .nfs
            .iter()
            .filter(|n| n.keeps_entries())
            .map(|n| n.kind());
        match kinds.find(|k| !matches!(*k, "firewall" | "nat" | "seqcheck")) {
            Some(k) => Err(format!(
                "the `{k}` NF's per-flow state cannot be replicated to another node (firewall, nat and seqcheck can)"
            )),
            None => Ok(()),
        }
    }

    /// Entry `id` of `shard` as bytes, at `now_ns` (deadlines as time left).
    /// The state of an NF that cannot travel (see [`portable`](Self::portable))
    /// goes as none.
    pub fn export(&self, shard: &Shard, id: EntryId, now_ns: u64) -> Vec<u8> {
        let img = shard
            .table
            .image(id, now_ns)
            .map_slots(|s| s.as_ref().and_then(Portable::of));
        postcard::to_stdvec(&img).expect("an image encodes")
    }

    /// Installs an entry's bytes from [`export`](Self::export) in `shard` at
    /// `now_ns`: into the entry of its key, or a new one; state it replaces or
    /// clears goes back to its NF. Returns the entry, if one remains.
    pub fn install(
        &mut self,
        shard: &mut Shard,
        bytes: &[u8],
        now_ns: u64,
    ) -> Result<Option<EntryId>, InstallError> {
        let img: Image<Option<Portable>> =
            postcard::from_bytes(bytes).map_err(|e| InstallError::Malformed(e.to_string()))?;
        if img.slots.len() != self.nfs.len() {
            return Err(InstallError::Malformed(format!(
                "{} slots for a chain of {} NFs",
                img.slots.len(),
                self.nfs.len()
            )));
        }
        if let Some((_, _, _, owner)) = img.alias {
            if usize::from(owner) >= img.slots.len() {
                return Err(InstallError::Malformed(format!("alias of slot {owner}")));
            }
        }
        let img = img.map_slots(|s| s.map(Portable::into_state));
        let Shard { table, locals, .. } = shard;
        let nfs = &mut self.nfs;
        let id = table
            .install(&img, now_ns, |_, nf, st| {
                if let Some(st) = st {
                    nfs[nf].release(&mut locals[nf], st);
                }
            })
            .map_err(|_| InstallError::TableFull)?;
        if let Some(id) = id {
            for (nf, f) in nfs.iter_mut().enumerate() {
                if let Some(st) = table.slot(id, nf) {
                    f.adopt(&mut locals[nf], st);
                }
            }
        }
        Ok(id)
    }
}
