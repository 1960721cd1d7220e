//! The sequence check's per-flow state.

/// The highest sequence number seen on a connection.
#[derive(Copy, Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SeqState {
    /// Highest tag seen.
    pub last: u32,
}
