//! Any bytes as an Ethernet frame: the single parse every packet gets, and the
//! full read-back into a representation. Offsets it returns must lie inside the
//! frame, and a frame it accepts must re-emit into one that parses to the same
//! 5-tuple.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wire::PacketRepr;

fuzz_target!(|frame: &[u8]| {
    let Ok(info) = wire::parse(frame) else {
        return;
    };
    let len = frame.len() as u32;
    assert!(info.l3_offset <= info.l4_offset, "{info:?}");
    assert!(
        info.l4_offset <= info.l3_end && info.l3_end <= len,
        "{info:?}"
    );
    assert!(
        info.payload_offset + info.payload_len <= info.l3_end,
        "{info:?}"
    );
    let _ = info.payload(frame);
    if let Ok(Some(repr)) = PacketRepr::parse(frame) {
        let again = repr.to_bytes();
        let back = wire::parse(&again).expect("an emitted frame parses");
        assert_eq!(back.tuple, info.tuple);
    }
});
