//! The `TPACKET_V2` transmit ring: frames sent through it in bursts leave whole
//! and in order — the ring wrapping around many times, with frames too long for
//! a slot (sent by the plain socket beside it) in between; a frame longer than
//! the interface takes is refused with an error, not dropped unseen.

use std::process::Command;
use std::time::{Duration, Instant};

use netio::testbed::Bed;
use netio::{netns, set_tx_mode, PacketSocket, RxBatch, TxMode};

fn frame(i: u32) -> Vec<u8> {
    // every 97th frame is longer than a ring slot (2 016 B)
    let len = if i % 97 == 50 {
        3000
    } else {
        60 + (i as usize * 7) % 1400
    };
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

fn mtu(ns: &str, dev: &str) {
    let st = Command::new("ip")
        .args(["netns", "exec", ns, "ip", "link", "set", dev, "mtu", "4000"])
        .status()
        .unwrap();
    assert!(st.success(), "mtu of {dev}");
}

#[test]
fn frames_sent_through_the_ring_arrive_whole_and_in_order() {
    set_tx_mode(TxMode::Ring);
    let Some(bed) = netio::testbed::privileged("the network namespace test bed", Bed::up("fstxr"))
    else {
        return;
    };
    let (a, _) = bed.ifaces();
    let c0 = format!("{}c0", bed.prefix);
    let (mid, cli) = (bed.middle(), bed.client());
    // room for the frames longer than a slot
    mtu(&cli, &c0);
    mtu(&mid, &a);
    const COUNT: u32 = 20_000;
    let (open_tx, open_rx) = std::sync::mpsc::channel();
    let (got, mode) = std::thread::scope(|s| {
        let rx = s.spawn(|| {
            netns::enter(&mid).unwrap();
            let sock = PacketSocket::open(&a).unwrap();
            // the sender starts once this socket is open
            open_tx.send(()).unwrap();
            let mut got = Vec::new();
            let mut b = RxBatch::new(64);
            let started = Instant::now();
            while got.len() < COUNT as usize && started.elapsed() < Duration::from_secs(20) {
                let n = sock.recv_batch(&mut b).unwrap();
                for k in 0..n {
                    let f = b.frame(k);
                    if f.len() < 18 || f[12..14] != 0x88b5u16.to_be_bytes() {
                        continue; // the kernel's own frames (IPv6 solicitations)
                    }
                    let i = u32::from_be_bytes(f[14..18].try_into().unwrap());
                    assert_eq!(f, &frame(i)[..], "frame {i} changed");
                    got.push(i);
                }
                if n == 0 {
                    std::thread::sleep(Duration::from_micros(50));
                }
            }
            got
        });
        open_rx.recv().unwrap();
        let tx = s.spawn(|| {
            netns::enter(&cli).unwrap();
            let tx = PacketSocket::open_tx(&c0).unwrap();
            let frames: Vec<Vec<u8>> = (0..COUNT).map(frame).collect();
            for burst in frames.chunks(32) {
                let mut refs: Vec<&[u8]> = burst.iter().map(Vec::as_slice).collect();
                while !refs.is_empty() {
                    match tx.send_many(&refs).unwrap() {
                        0 => std::thread::yield_now(),
                        n => {
                            refs.drain(..n);
                        }
                    }
                }
                // paced below what the reader drains, so nothing is dropped
                std::thread::sleep(Duration::from_micros(100));
            }
            // longer than the MTU and its link header: refused out loud (the
            // kernel would drop it from a ring without a word)
            let long = vec![0u8; 4000 + 14 + 1];
            assert!(
                tx.send_many(&[&long]).is_err(),
                "a frame over the MTU was taken"
            );
            tx.tx_mode()
        });
        let mode = tx.join().unwrap();
        (rx.join().unwrap(), mode)
    });
    assert_eq!(mode, "ring");
    assert_eq!(got.len(), COUNT as usize, "frames lost");
    assert!(
        got.windows(2).all(|w| w[0] + 1 == w[1]),
        "frames out of order"
    );
}
