//! An entry's image: everything a flow entry holds — its keys, each NF's slot
//! with the time it has left, whether the flow saw both directions — taken out
//! of one table and installed in another, possibly in another process (a
//! Sirius secondary, §3.2). Deadlines travel as time *left*, so the tables'
//! clocks need not agree.

use serde::{Deserialize, Serialize};

use super::{FlowTable, InsertError, Slot};
use crate::{EntryId, FlowKey, Side};

/// A flow entry's content, independent of the table it came from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Image<S> {
    /// The key the entry was created with, and the side that sent first.
    pub key: FlowKey,
    /// The side of `key` that sent the first packet.
    pub orig: Side,
    /// The RSS hash of the first packet (what the entry is indexed by).
    pub hash: u32,
    /// The second key, as [`FlowTable::add_alias`] took it: (key, side of the
    /// translated original-direction tuple, hash, owning slot).
    pub alias: Option<(FlowKey, Side, u32, u16)>,
    /// One per slot: its state, and ns left before it expires (0: no deadline).
    pub slots: Vec<(S, u64)>,
    /// Both directions were seen.
    pub assured: bool,
}

impl<S> Image<S> {
    /// The same entry with each slot's state turned by `f` (e.g. into a form
    /// that can leave the process, and back).
    pub fn map_slots<T>(self, mut f: impl FnMut(S) -> T) -> Image<T> {
        Image {
            key: self.key,
            orig: self.orig,
            hash: self.hash,
            alias: self.alias,
            slots: self
                .slots
                .into_iter()
                .map(|(s, left)| (f(s), left))
                .collect(),
            assured: self.assured,
        }
    }
}

impl<S: Slot> FlowTable<S> {
    /// The tuple of live entry `id`'s first packet, and its translated
    /// original-direction tuple when it has an alias key (without copying
    /// its slots, as [`image`](Self::image) does).
    pub fn tuples(&self, id: EntryId) -> (wire::FiveTuple, Option<wire::FiveTuple>) {
        let i = id.0 as usize;
        let m = &self.meta[i];
        let alias = m.has_alias.then(|| {
            let side = match m.alias_side {
                Side::Lo => Side::Hi,
                Side::Hi => Side::Lo,
            };
            self.aliases[i].tuple(side)
        });
        (m.key.tuple(m.orig), alias)
    }
}

impl<S: Slot + Clone> FlowTable<S> {
    /// The image of live entry `id` at `now_ns`.
    pub fn image(&self, id: EntryId, now_ns: u64) -> Image<S> {
        let i = id.0 as usize;
        let m = &self.meta[i];
        let n = self.cfg.slots;
        let alias = m.has_alias.then(|| {
            let (k, h) = self.alias_of(i);
            // `alias_side` is the side replies come from: the tuple's own is
            // the other one
            let side = match m.alias_side {
                Side::Lo => Side::Hi,
                Side::Hi => Side::Lo,
            };
            (k, side, h, m.alias_owner)
        });
        Image {
            key: m.key,
            orig: m.orig,
            hash: m.hash,
            alias,
            slots: self.slots[i * n..(i + 1) * n]
                .iter()
                .map(|c| {
                    let left = if c.deadline == 0 {
                        0
                    } else {
                        c.deadline.saturating_sub(now_ns).max(1)
                    };
                    (c.state.clone(), left)
                })
                .collect(),
            assured: m.assured,
        }
    }

    /// Installs `image` at `now_ns`: into the entry of its key when there is
    /// one (its slots, deadlines and alias replaced), else into a new entry.
    /// State it replaces, and slots it leaves empty, are handed to `release`;
    /// an image with only empty slots leaves no entry. A table
    /// full under its policy refuses it. Returns the entry, if one remains.
    pub fn install(
        &mut self,
        image: &Image<S>,
        now_ns: u64,
        mut release: impl FnMut(EntryId, usize, S),
    ) -> Result<Option<EntryId>, InsertError> {
        assert_eq!(
            image.slots.len(),
            self.cfg.slots,
            "an image of another chain's entry"
        );
        self.note_time(now_ns);
        let id = match self.lookup(&image.key, image.orig, image.hash) {
            Some(l) => l.id,
            None => {
                if image.slots.iter().all(|(s, _)| s.is_empty()) {
                    return Ok(None);
                }
                self.insert(image.key, image.orig, image.hash, &mut release)?
            }
        };
        let i = id.0 as usize;
        for (nf, (state, left)) in image.slots.iter().enumerate() {
            if state.is_empty() {
                let old = self.clear_slot(id, nf);
                if !old.is_empty() {
                    release(id, nf, old);
                }
                continue;
            }
            let old = core::mem::replace(
                &mut self.slots[i * self.cfg.slots + nf].state,
                state.clone(),
            );
            if !old.is_empty() {
                release(id, nf, old);
            }
            if *left != 0 {
                self.set_deadline(id, nf, now_ns.saturating_add(*left));
            }
        }
        if let Some((k, side, h, owner)) = image.alias {
            if !self.slots[i * self.cfg.slots + usize::from(owner)]
                .state
                .is_empty()
            {
                self.add_alias(id, usize::from(owner), k, side, h);
            }
        }
        if image.assured {
            self.meta[i].assured = true;
        }
        if self.release_if_empty(id) {
            return Ok(None);
        }
        Ok(Some(id))
    }
}
