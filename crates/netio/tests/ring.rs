//! The `TPACKET_V3` receive ring: frames sent into an interface come out of
//! the ring whole and in order — many blocks' worth, the ring wrapping around
//! twice.

use std::time::{Duration, Instant};

use netio::testbed::Bed;
use netio::{netns, set_rx_mode, PacketSocket, RxBatch, RxMode};

fn frame(i: u32, len: usize) -> Vec<u8> {
    let mut f = vec![0u8; len];
    f[..6].copy_from_slice(&[0x02, 0, 0, 0, 0, 0xaa]); // to
    f[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0, 0xbb]); // from
    f[12..14].copy_from_slice(&0x88b5u16.to_be_bytes()); // local experimental
    f[14..18].copy_from_slice(&i.to_be_bytes());
    for (k, b) in f[18..].iter_mut().enumerate() {
        *b = (i as usize + k) as u8;
    }
    f
}

/// Sends `count` frames from the client end and reads them on the middle's
/// end: their indices in the order read.
fn pass(bed: &Bed, count: u32, len: usize) -> (Vec<u32>, &'static str) {
    let (a, _) = bed.ifaces();
    let (mid, cli) = (bed.middle(), bed.client());
    let (open_tx, open_rx) = std::sync::mpsc::channel();
    let rx = std::thread::scope(|s| {
        let rx = s.spawn(|| {
            netns::enter(&mid).unwrap();
            let sock = PacketSocket::open(&a).unwrap();
            let mode = sock.rx_mode();
            // the sender starts once this socket is open
            open_tx.send(()).unwrap();
            let mut got = Vec::new();
            let mut b = RxBatch::new(32);
            let started = Instant::now();
            while got.len() < count as usize && started.elapsed() < Duration::from_secs(20) {
                let n = sock.recv_batch(&mut b).unwrap();
                for k in 0..n {
                    let f = b.frame(k);
                    if f.len() != len || f[12..14] != 0x88b5u16.to_be_bytes() {
                        continue; // the kernel's own frames (IPv6 solicitations)
                    }
                    let i = u32::from_be_bytes(f[14..18].try_into().unwrap());
                    assert_eq!(f, &frame(i, len)[..], "frame {i} changed");
                    got.push(i);
                }
                if n == 0 {
                    std::thread::sleep(Duration::from_micros(100));
                }
            }
            (got, mode)
        });
        open_rx.recv().unwrap();
        s.spawn(|| {
            netns::enter(&cli).unwrap();
            let tx = PacketSocket::open_tx(&format!("{}c0", bed.prefix)).unwrap();
            for i in 0..count {
                tx.send(&frame(i, len)).unwrap();
                if i % 64 == 63 {
                    // paced below what the reader drains, so nothing is dropped
                    std::thread::sleep(Duration::from_micros(200));
                }
            }
        });
        rx.join().unwrap()
    });
    rx
}

#[test]
fn frames_come_out_of_the_ring_whole_and_in_order() {
    set_rx_mode(RxMode::Ring);
    let Some(bed) = netio::testbed::privileged("the network namespace test bed", Bed::up("fsring"))
    else {
        return;
    };
    // 30 000 × 600 B: about 18 MiB, more than twice the ring's 8 MiB
    let (got, mode) = pass(&bed, 30_000, 600);
    assert_eq!(mode, "ring");
    assert_eq!(got.len(), 30_000, "frames lost");
    assert!(
        got.windows(2).all(|w| w[0] + 1 == w[1]),
        "frames out of order"
    );
}
