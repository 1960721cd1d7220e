//! Any bytes as an Ethernet frame: the single parse every packet gets (with
//! IPv4 fragments too, as the NIC model parses), and the full read-back into
//! a representation. Offsets it returns must lie inside the frame, a frame
//! that is no fragment parses alike both ways, and a frame it accepts must
//! re-emit into one that parses to the same 5-tuple.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wire::PacketRepr;

fn within(info: &wire::PacketInfo, frame: &[u8]) {
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
}

fuzz_target!(|frame: &[u8]| {
    let any = wire::parse_fragmentable(frame);
    if let Ok(info) = &any {
        within(info, frame);
        if !info.fragment {
            assert_eq!(wire::parse(frame).as_ref(), Ok(info));
        }
    }
    let Ok(info) = wire::parse(frame) else {
        return;
    };
    assert_eq!(any.as_ref(), Ok(&info), "what parses parses alike with fragments");
    within(&info, frame);
    let _ = info.payload(frame);
    if let Ok(Some(repr)) = PacketRepr::parse(frame) {
        let again = repr.to_bytes();
        let back = wire::parse(&again).expect("an emitted frame parses");
        assert_eq!(back.tuple, info.tuple);
    }
});
