//! The test bed and the sockets: a plain bridge of two `PacketSocket`s in the
//! middle namespace carries a real UDP exchange and a real TCP connection
//! between the client and the server namespaces, byte for byte.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use netio::testbed::{Bed, CLIENT, SERVER};
use netio::{netns, PacketSocket};

/// A bed, or `None` (with a message) when this kernel refuses namespaces.
fn bed(prefix: &str) -> Option<Bed> {
    netio::testbed::privileged("the network namespace test bed", Bed::up(prefix))
}

#[test]
fn a_bridge_of_two_sockets_carries_udp_and_tcp() {
    let Some(bed) = bed("fsnio") else { return };
    let stop = Arc::new(AtomicBool::new(false));
    // the bridge and the server are ready before the client starts
    let ready = Arc::new(std::sync::Barrier::new(3));
    let (a, b) = bed.ifaces();
    let mid = bed.middle();
    let bridge = {
        let (stop, ready) = (stop.clone(), ready.clone());
        std::thread::spawn(move || {
            netns::enter(&mid).unwrap();
            let (sa, sb) = (
                PacketSocket::open(&a).unwrap(),
                PacketSocket::open(&b).unwrap(),
            );
            ready.wait();
            let mut buf = Vec::new();
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let mut idle = true;
                for (rx, tx) in [(&sa, &sb), (&sb, &sa)] {
                    while rx.recv(&mut buf).unwrap() {
                        tx.send(&buf).unwrap();
                        n += 1;
                        idle = false;
                    }
                }
                if idle {
                    std::thread::sleep(Duration::from_micros(50));
                }
            }
            n
        })
    };
    let srv = bed.server();
    let r = ready.clone();
    let server = std::thread::spawn(move || {
        netns::enter(&srv).unwrap();
        let udp = UdpSocket::bind((SERVER, 7000)).unwrap();
        let tcp = TcpListener::bind((SERVER, 7001)).unwrap();
        r.wait();
        let mut buf = [0u8; 64];
        let (n, from) = udp.recv_from(&mut buf).unwrap();
        udp.send_to(&buf[..n], from).unwrap();
        let (mut s, _) = tcp.accept().unwrap();
        let data: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        s.write_all(&data).unwrap();
    });
    ready.wait();
    let cli = bed.client();
    let client = std::thread::spawn(move || {
        netns::enter(&cli).unwrap();
        let udp = UdpSocket::bind((CLIENT, 0)).unwrap();
        udp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        udp.send_to(b"ping", (SERVER, 7000)).unwrap();
        let mut buf = [0u8; 64];
        let (n, _) = udp.recv_from(&mut buf).expect("the UDP echo comes back");
        assert_eq!(&buf[..n], b"ping");
        let to = std::net::SocketAddr::new(SERVER.parse().unwrap(), 7001);
        let mut s = TcpStream::connect_timeout(&to, Duration::from_secs(5)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut got = Vec::new();
        s.read_to_end(&mut got).unwrap();
        got
    });
    let got = client.join().unwrap();
    server.join().unwrap();
    stop.store(true, Ordering::Relaxed);
    let frames = bridge.join().unwrap();
    let want: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    assert_eq!(got, want, "every byte, in order");
    assert!(frames > 100, "{frames} frames bridged");
}
