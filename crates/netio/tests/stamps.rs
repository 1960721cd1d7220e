//! Frames are read with the time the kernel received them, when a socket
//! asks (`enable_timestamps`), by `recvmmsg` and from a `TPACKET_V3` ring:
//! each stamp lies between the frame's sending and its reading, and a
//! socket's stamps rise with the frames' order; a socket that did not ask
//! reads 0.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use netio::testbed::Bed;
use netio::{netns, PacketSocket, RxBatch, RxMode};

fn wall_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

/// A frame numbered `i` (local experimental EtherType).
fn frame(i: u32) -> Vec<u8> {
    let mut f = vec![0u8; 64];
    f[..6].copy_from_slice(&[0x02, 0, 0, 0, 0, 0xaa]);
    f[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0, 0xbb]);
    f[12..14].copy_from_slice(&0x88b5u16.to_be_bytes());
    f[14..18].copy_from_slice(&i.to_be_bytes());
    f
}

const SENT: u32 = 200;

#[test]
fn received_frames_carry_the_kernels_receive_time() {
    let Some(bed) = netio::testbed::privileged("the network namespace test bed", Bed::up("fsstm"))
    else {
        return;
    };
    let (a, _) = bed.ifaces();
    let (mid, cli) = (bed.middle(), bed.client());
    let c0 = format!("{}c0", bed.prefix);
    for mode in [RxMode::Recvmmsg, RxMode::Ring] {
        netio::set_rx_mode(mode);
        let (open_tx, open_rx) = std::sync::mpsc::channel();
        let ((sent_from, sent_to), got) = std::thread::scope(|s| {
            let rx = s.spawn(|| {
                netns::enter(&mid).unwrap();
                let stamped = PacketSocket::open(&a).unwrap();
                stamped.enable_timestamps().unwrap();
                let plain = PacketSocket::open(&a).unwrap();
                open_tx.send(()).unwrap();
                // read once every frame has arrived: a stamp is the time it
                // arrived, not the time it was read
                std::thread::sleep(Duration::from_millis(300));
                let mut got: Vec<(u32, u64, u64)> = Vec::new();
                let mut plain_stamps = Vec::new();
                let mut b = RxBatch::new(32);
                let t0 = std::time::Instant::now();
                while got.len() < SENT as usize && t0.elapsed() < Duration::from_secs(10) {
                    let k = stamped.recv_batch(&mut b).unwrap();
                    let read_at = wall_ns();
                    // (the odd neighbour message is not ours)
                    for i in (0..k).filter(|&i| b.frame(i)[12..14] == [0x88, 0xb5]) {
                        let n = u32::from_be_bytes(b.frame(i)[14..18].try_into().unwrap());
                        got.push((n, b.stamp(i), read_at));
                    }
                    let k = plain.recv_batch(&mut b).unwrap();
                    plain_stamps.extend((0..k).map(|i| b.stamp(i)));
                    if k == 0 {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                }
                assert!(!plain_stamps.is_empty());
                assert!(
                    plain_stamps.iter().all(|s| *s == 0),
                    "{mode:?}: unasked stamps"
                );
                got
            });
            let (cli, c0) = (&cli, &c0);
            let sent_from = s
                .spawn(move || {
                    open_rx.recv().unwrap();
                    netns::enter(cli).unwrap();
                    let tx = PacketSocket::open_tx(c0).unwrap();
                    let from = wall_ns();
                    for i in 0..SENT {
                        tx.send(&frame(i)).unwrap();
                    }
                    (from, wall_ns())
                })
                .join()
                .unwrap();
            (sent_from, rx.join().unwrap())
        });
        assert_eq!(got.len(), SENT as usize, "{mode:?}");
        for (k, w) in got.windows(2).enumerate() {
            assert_eq!(w[1].0, w[0].0 + 1, "{mode:?}: frame {k} in order");
            assert!(w[1].1 >= w[0].1, "{mode:?}: stamps rise: {:?}", w);
        }
        for (n, stamp, read_at) in &got {
            assert!(
                *stamp >= sent_from && *stamp <= sent_to && sent_to + 100_000_000 < *read_at,
                "{mode:?}: frame {n} stamped {stamp}, sent from {sent_from} to {sent_to}, read at {read_at}"
            );
        }
    }
}
