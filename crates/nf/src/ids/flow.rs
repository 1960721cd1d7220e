//! The IDS's per-flow state: each direction's matcher stream and the rules part-way.

use super::handoff::Recall;
use super::matcher::{Progress, Stream};

/// The IDS's per-flow state: the matcher's states per direction, how far each
/// direction got through multi-piece rules (allocated only once one is part-way),
/// and whether a rule dropped the flow. With the matcher on its own core, the
/// matcher states live there and only `dropped` and `gaps` are used.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IdsFlow {
    /// Original and reply direction.
    pub st: [Stream; 2],
    /// Multi-piece rules part-way, per direction.
    pub progress: Option<Box<[Progress; 2]>>,
    /// A `drop` or `blacklist` rule fired: every later packet is dropped.
    pub dropped: bool,
    /// Per direction (bit 0 original, bit 1 reply): a payload could not be handed
    /// to the matching component, so its stream restarts with the next one.
    pub gaps: u8,
    /// The generation of the rules its streams are of (a live reload starts
    /// them again).
    pub generation: u32,
    /// Its matcher states are at this matching component (placement
    /// `core`), not in `st`.
    pub at: Option<u8>,
    /// Its states are coming back from the component ([`super::handoff`]).
    pub recall: Option<Recall>,
}

impl IdsFlow {
    /// Both directions' streams start again from `start` (the matcher's
    /// start state), no rule part-way.
    pub fn restart_streams(&mut self, start: Stream) {
        self.st = [start; 2];
        self.progress = None;
    }
}
