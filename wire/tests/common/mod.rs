//! Shared helpers for the wire integration tests.
#![allow(dead_code)]

use std::path::PathBuf;

/// The real rxe captures in ../shared (not part of the project; see the README).
pub fn shared_captures() -> Option<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/captures/rxe-public");
    if dir.is_dir() {
        Some(dir)
    } else {
        eprintln!(
            "SKIP: {} is not there; the real-rxe capture tests need ../shared/captures/rxe-public",
            dir.display()
        );
        None
    }
}

/// Ethernet frames of a pcap file.
pub fn read_pcap(path: &std::path::Path) -> Vec<Vec<u8>> {
    let f = std::fs::File::open(path).unwrap();
    let mut r = pcap_file::pcap::PcapReader::new(f).unwrap();
    assert_eq!(r.header().datalink, pcap_file::DataLink::ETHERNET, "{}", path.display());
    let mut out = Vec::new();
    while let Some(p) = r.next_packet() {
        out.push(p.unwrap().data.into_owned());
    }
    out
}

/// True when the frame is IPv4/IPv6 UDP to port 4791 (decided by etherparse, not by us).
pub fn is_roce(frame: &[u8]) -> bool {
    matches!(
        etherparse::SlicedPacket::from_ethernet(frame).ok().and_then(|s| s.transport),
        Some(etherparse::TransportSlice::Udp(u)) if u.destination_port() == 4791
    )
}
