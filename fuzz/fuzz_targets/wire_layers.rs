//! Arbitrary bytes through every layer's checked view and repr parser on its own.
#![no_main]

use libfuzzer_sys::fuzz_target;
use uroce_wire::ext::{AethHeader, AtomicAckEthHeader, AtomicEthHeader, DethHeader, RethHeader};
use uroce_wire::*;

fuzz_target!(|data: &[u8]| {
    if let Ok(f) = EthernetFrame::new_checked(data) {
        let _ = EthernetRepr::parse(&f);
        let _ = f.payload();
    }
    if let Ok(p) = Ipv4Packet::new_checked(data) {
        let _ = Ipv4Repr::parse(&p, 0);
        let _ = p.payload();
        let _ = p.verify_checksum();
    }
    if let Ok(p) = Ipv6Packet::new_checked(data) {
        let _ = Ipv6Repr::parse(&p);
        let _ = p.payload();
    }
    if let Ok(u) = UdpPacket::new_checked(data) {
        let _ = UdpRepr::parse(&u);
        let a = std::net::IpAddr::from([1, 2, 3, 4]);
        let _ = u.verify_checksum(a, a);
    }
    if let Ok(b) = BthHeader::new_checked(data) {
        let _ = BthRepr::parse(&b, 0);
    }
    let _ = RoceRepr::parse(data, 0);
    if let Ok(h) = RethHeader::new_checked(data) {
        let _ = (h.va(), h.rkey(), h.dma_len());
    }
    if let Ok(h) = AethHeader::new_checked(data) {
        let _ = (Syndrome::from_byte(h.syndrome_byte()), h.msn());
    }
    if let Ok(h) = AtomicEthHeader::new_checked(data) {
        let _ = (h.va(), h.rkey(), h.swap_add(), h.compare());
    }
    if let Ok(h) = AtomicAckEthHeader::new_checked(data) {
        let _ = h.orig();
    }
    if let Ok(h) = DethHeader::new_checked(data) {
        let _ = (h.qkey(), h.src_qp());
    }
    let _ = icrc::compute(data);
    let _ = icrc::verify(data, 0);
});
