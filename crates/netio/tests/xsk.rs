//! The AF_XDP path on the test bed's veths: an XDP program in native mode
//! redirects the frames arriving on one interface to an AF_XDP socket, which
//! hands them over byte for byte; another sends them out of the other
//! interface, where they arrive whole and in order; the program is gone with
//! its link.

use std::time::{Duration, Instant};

use netio::testbed::Bed;
use netio::xdp::Attachment;
use netio::xsk::{Sizes, Xsk};
use netio::{netns, PacketSocket, RxBatch};

/// A frame numbered `i` (local experimental EtherType), `len` bytes.
fn frame(i: u32, len: usize) -> Vec<u8> {
    let mut f = vec![0u8; len];
    f[..6].copy_from_slice(&[0x02, 0, 0, 0, 0, 0xaa]);
    f[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0, 0xbb]);
    f[12..14].copy_from_slice(&0x88b5u16.to_be_bytes());
    f[14..18].copy_from_slice(&i.to_be_bytes());
    for (k, b) in f[18..].iter_mut().enumerate() {
        *b = (k as u32 * 7 + i) as u8;
    }
    f
}

fn ours(f: &[u8]) -> bool {
    f.len() >= 18 && f[12..14] == [0x88, 0xb5]
}

const SENT: u32 = 5_000;

#[test]
fn frames_cross_an_xdp_socket_pair_whole_and_in_order() {
    let Some(bed) = netio::testbed::privileged("the network namespace test bed", Bed::up("fsxk"))
    else {
        return;
    };
    let (a, b) = bed.ifaces();
    let (mid, cli, srv) = (bed.middle(), bed.client(), bed.server());
    let (c0, s0) = (format!("{}c0", bed.prefix), format!("{}s0", bed.prefix));
    let (ready_tx, ready) = std::sync::mpsc::channel();
    let (sink_tx, sink_ready) = std::sync::mpsc::channel();
    let program = netio::xdp::program_name(std::process::id());
    std::thread::scope(|s| {
        // the server's end counts what leaves by b
        let sink = s.spawn(|| {
            netns::enter(&srv).unwrap();
            let sock = PacketSocket::open(&s0).unwrap();
            sink_tx.send(()).unwrap();
            let mut got = Vec::new();
            let mut batch = RxBatch::new(64);
            let t0 = Instant::now();
            while got.len() < SENT as usize && t0.elapsed() < Duration::from_secs(20) {
                let k = sock.recv_batch(&mut batch).unwrap();
                got.extend((0..k).map(|i| batch.frame(i).to_vec()).filter(|f| ours(f)));
                if k == 0 {
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
            got
        });
        sink_ready.recv().unwrap();
        // the middle: a → AF_XDP → b
        let mid_t = s.spawn(|| {
            netns::enter(&mid).unwrap();
            let ia = netns::ifindex(&a).unwrap();
            let ib = netns::ifindex(&b).unwrap();
            let rx = Xsk::open(ia, 0, Sizes::default()).unwrap();
            let tx = Xsk::open(ib, 0, Sizes::default()).unwrap();
            let att = Attachment::attach(ia, 1, false).unwrap();
            att.set(0, &rx).unwrap();
            assert_eq!(netio::bpf::loaded_named(&program).unwrap(), 1);
            ready_tx.send(()).unwrap();
            let (mut n, mut too_long) = (0u32, 0u64);
            let t0 = Instant::now();
            let mut burst: Vec<Vec<u8>> = Vec::new();
            while n < SENT && t0.elapsed() < Duration::from_secs(20) {
                burst.clear();
                rx.recv(64, false, |f, _| burst.push(f.to_vec())).unwrap();
                burst.retain(|f| ours(f));
                n += burst.len() as u32;
                let refs: Vec<&[u8]> = burst.iter().map(Vec::as_slice).collect();
                let mut at = 0;
                while at < refs.len() {
                    at += tx.send(&refs[at..], &mut too_long).unwrap();
                }
                if burst.is_empty() {
                    std::thread::sleep(Duration::from_micros(100));
                }
            }
            let (dropped, invalid) = rx.statistics().unwrap();
            drop(att);
            (n, too_long, dropped, invalid)
        });
        ready.recv().unwrap();
        // the client sends, paced so that no ring overflows
        s.spawn(|| {
            netns::enter(&cli).unwrap();
            let tx = PacketSocket::open_tx(&c0).unwrap();
            for i in 0..SENT {
                tx.send(&frame(i, 60 + (i as usize % 1400))).unwrap();
                if i % 64 == 63 {
                    std::thread::sleep(Duration::from_micros(500));
                }
            }
        });
        let (n, too_long, dropped, invalid) = mid_t.join().unwrap();
        let got = sink.join().unwrap();
        println!(
            "through AF_XDP: {n}, at the server: {}, dropped {dropped}",
            got.len()
        );
        assert_eq!((n, too_long, dropped, invalid), (SENT, 0, 0, 0));
        assert_eq!(got.len(), SENT as usize);
        for (i, f) in got.iter().enumerate() {
            assert_eq!(f, &frame(i as u32, 60 + (i % 1400)), "frame {i}");
        }
    });
    // the link went with the attachment
    let t0 = Instant::now();
    while netio::bpf::loaded_named(&program).unwrap() != 0 {
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "{program} still loaded"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
