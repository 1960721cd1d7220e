//! Generated traffic as a 5G UPF sees it (`flowshift gen --gtp-ues N`):
//! each connection's client becomes one of N UEs (`10.60.0.1` on, as
//! [`UeRange`] numbers them), its packets to the server go up the N3 tunnel —
//! GTP-U from the gNB (`192.0.2.2`) to the UPF (`192.0.2.1`) with the UE's
//! uplink TEID — and the server's packets to it come from the data network
//! plain, addressed to the UE. A UPF configured with the same range
//! (`[nf.ues]`) holds a session for every UE.

use core::net::IpAddr;

use wire::gtpu::{self, UeRange};
use wire::{Ipv4Packet, TcpPacket, UdpPacket};

use crate::gen::CLIENT_MAC;

/// `frame` (a generated IPv4 frame) as a UPF serving `r` sees it: the
/// client replaced by its UE, tunnelled when it is uplink. IPv6 frames are
/// left alone (UEs are IPv4 here).
pub fn tunnel(r: &UeRange, mut frame: Vec<u8>) -> Vec<u8> {
    let Ok(info) = wire::parse(&frame) else {
        return frame;
    };
    let (IpAddr::V4(src), IpAddr::V4(dst)) = (info.tuple.src, info.tuple.dst) else {
        return frame;
    };
    let uplink = frame[6..12] == CLIENT_MAC;
    let client = if uplink { src } else { dst };
    // a client keeps its UE for the whole trace
    let i = (u32::from(client).wrapping_mul(0x9e37_79b1) >> 8) % r.count;
    let (ue, teid, _) = r.ue(i);
    let (l3, end) = (info.l3_offset as usize, info.l3_end as usize);
    {
        let mut ip = Ipv4Packet::new_unchecked(&mut frame[l3..end]);
        if uplink {
            ip.set_src_addr(ue);
        } else {
            ip.set_dst_addr(ue);
        }
        ip.fill_checksum();
    }
    let (s, d) = if uplink { (ue, dst) } else { (src, ue) };
    let seg = &mut frame[info.l4_offset as usize..end];
    match info.tuple.proto {
        wire::proto::TCP => TcpPacket::new_unchecked(seg).fill_checksum(s.into(), d.into()),
        wire::proto::UDP => UdpPacket::new_unchecked(seg).fill_checksum(s.into(), d.into()),
        _ => {}
    }
    if uplink {
        let outer = gtpu::Outer {
            src: r.gnb,
            dst: UeRange::N3,
            teid,
            qfi: Some(9),
        };
        gtpu::encap(&mut frame, l3, end, &outer);
    }
    frame
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Generator, TraceSpec};

    #[test]
    fn uplink_is_tunnelled_to_the_upf_and_downlink_goes_to_the_ue() {
        let spec = TraceSpec {
            flows: 50,
            packets: 2_000,
            ..TraceSpec::default()
        };
        let r = UeRange::new(8);
        let (mut up, mut down) = (0, 0);
        for p in Generator::new(&spec).unwrap() {
            let uplink = p.frame[6..12] == CLIENT_MAC;
            let f = tunnel(&r, p.frame);
            let info = wire::parse(&f).unwrap();
            let ip = Ipv4Packet::new_checked(&f[14..info.l3_end as usize]).unwrap();
            assert!(ip.verify_checksum());
            if uplink {
                up += 1;
                assert_eq!(info.tuple.dst, IpAddr::V4(UeRange::N3));
                let g = gtpu::Gtpu::parse(info.payload(&f)).unwrap();
                assert!((1..=8).contains(&g.teid));
                let inner = &info.payload(&f)[g.header_len..];
                let inner = Ipv4Packet::new_checked(inner).unwrap();
                assert_eq!(inner.src_addr(), r.ue(g.teid - 1).0, "the TEID's own UE");
            } else {
                down += 1;
                let IpAddr::V4(d) = info.tuple.dst else {
                    panic!()
                };
                assert!((1..=8).contains(&(u32::from(d) - u32::from(r.ue).wrapping_sub(1))));
            }
        }
        assert!(up > 500 && down > 500, "{up} {down}");
    }
}
