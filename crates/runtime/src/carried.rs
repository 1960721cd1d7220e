//! A replica message inside a node: the frame with the flow's entry
//! appended (its length in the last two bytes) and [`REPLICA`] set in the
//! packet's port, so that the rings, the shard moves and the hand-overs
//! carry it as they carry frames.

/// Set in a packet's port: the packet is a replica message (its entry after
/// the frame, its length in the last two bytes).
pub(crate) const REPLICA: u8 = 0x80;

/// Appends `entry` and its length to a packet's frame.
pub(crate) fn append_entry(data: &mut Vec<u8>, entry: &[u8]) {
    data.extend_from_slice(entry);
    data.extend_from_slice(&(entry.len() as u16).to_be_bytes());
}

/// Takes the entry [`append_entry`] put after the frame off again.
pub(crate) fn take_entry(data: &mut Vec<u8>) -> Vec<u8> {
    let len = data.len();
    let n = usize::from(u16::from_be_bytes([data[len - 2], data[len - 1]]));
    let entry = data[len - 2 - n..len - 2].to_vec();
    data.truncate(len - 2 - n);
    entry
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_appended_to_a_frame_comes_off_whole() {
        let mut data = b"frame".to_vec();
        append_entry(&mut data, b"the entry");
        assert_eq!(take_entry(&mut data), b"the entry");
        assert_eq!(data, b"frame");
        append_entry(&mut data, b"");
        assert_eq!(take_entry(&mut data), b"");
        assert_eq!(data, b"frame");
    }
}
