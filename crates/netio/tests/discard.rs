//! What a stopping run leaves in its sockets is counted: frames waiting in a
//! packet socket are read and discarded by `discard_waiting`, which says how
//! many and their bytes, stopping near its cap and leaving the rest for the
//! next call.

use std::time::{Duration, Instant};

use netio::testbed::Bed;
use netio::{netns, PacketSocket, RxBatch};

/// A frame of `len` bytes numbered `i` (local experimental EtherType).
fn frame(i: u32, len: usize) -> Vec<u8> {
    let mut f = vec![0u8; len];
    f[..6].copy_from_slice(&[0x02, 0, 0, 0, 0, 0xaa]);
    f[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0, 0xbb]);
    f[12..14].copy_from_slice(&0x88b5u16.to_be_bytes());
    f[14..18].copy_from_slice(&i.to_be_bytes());
    f
}

#[test]
fn waiting_frames_are_read_counted_and_capped() {
    let Some(bed) = netio::testbed::privileged("the network namespace test bed", Bed::up("fsdis"))
    else {
        return;
    };
    let (a, _) = bed.ifaces();
    let (mid, cli) = (bed.middle(), bed.client());
    let c0 = format!("{}c0", bed.prefix);
    const SENT: u64 = 600;
    const LEN: usize = 100;
    let (open_tx, open_rx) = std::sync::mpsc::channel();
    let (first, second, third, arrived) = std::thread::scope(|s| {
        let rx = s.spawn(|| {
            netns::enter(&mid).unwrap();
            let sock = PacketSocket::open(&a).unwrap();
            let before = netns::counter(&mid, &a, "rx_packets").unwrap();
            // the sender starts once this socket is open
            open_tx.send(()).unwrap();
            let t0 = Instant::now();
            while netns::counter(&mid, &a, "rx_packets").unwrap() < before + SENT
                && t0.elapsed() < Duration::from_secs(20)
            {
                std::thread::sleep(Duration::from_millis(10));
            }
            let arrived = netns::counter(&mid, &a, "rx_packets").unwrap() - before;
            let mut b = RxBatch::new(32);
            let first = sock.discard_waiting(&mut b, 100).unwrap();
            let second = sock.discard_waiting(&mut b, u64::MAX).unwrap();
            let third = sock.discard_waiting(&mut b, u64::MAX).unwrap();
            (first, second, third, arrived)
        });
        s.spawn(move || {
            open_rx.recv().unwrap();
            netns::enter(&cli).unwrap();
            let tx = PacketSocket::open_tx(&c0).unwrap();
            for i in 0..SENT as u32 {
                tx.send(&frame(i, LEN)).unwrap();
            }
        });
        rx.join().unwrap()
    });
    // the interface also hears the odd IPv6 neighbour message of its own
    assert!((SENT..SENT + 16).contains(&arrived), "{arrived} arrived");
    // the cap stops the first call within one batch past it
    assert!((100..132).contains(&first.0), "first call read {first:?}");
    let frames = first.0 + second.0;
    assert_eq!(frames, arrived, "every waiting frame counted once");
    // the frames of ours are LEN bytes; the kernel's own are others
    let strays = arrived - SENT;
    let ours_bytes = SENT * LEN as u64;
    let bytes = first.1 + second.1;
    assert!(
        bytes >= ours_bytes && bytes <= ours_bytes + strays * 200,
        "{bytes} bytes for {frames} frames"
    );
    assert_eq!(third, (0, 0), "nothing left");
}
