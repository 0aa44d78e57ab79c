//! Shared helpers for the wire integration tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

/// The project's own rxe-to-rxe fixtures (`rxe-compat/fixtures/`, recorded by its QEMU harness
/// with kernel 6.1 and 6.17 rxe). Part of the repository: a missing one is a failure.
pub fn fixture_captures() -> Vec<PathBuf> {
    pcaps(&PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../rxe-compat/fixtures"))
}

/// The public Linux rxe captures (`rxe-compat/fixtures/rxe-public/`, third-party, copied into
/// the repository with their licence). Part of the repository: a missing one is a failure.
pub fn public_captures() -> Vec<PathBuf> {
    pcaps(&PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../rxe-compat/fixtures/rxe-public"))
}

/// The `.pcap` files of `dir`, sorted; panics when there are none (never a silent pass).
fn pcaps(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "pcap"))
        .collect();
    v.sort();
    assert!(!v.is_empty(), "no captures in {}", dir.display());
    v
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
