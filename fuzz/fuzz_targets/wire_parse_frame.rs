//! Arbitrary bytes as an Ethernet frame and as an IP packet: parsing, the ICRC check and the
//! one-line summary must never panic, and the frame parser's common-case shortcut must return
//! exactly what the general layer-by-layer parser returns, and so must the receive fast path's
//! bare parser when it takes a frame. (ICRC and IPv4 checksum checks are
//! skipped under cfg(fuzzing) inside the parser so the fuzzer reaches the transport headers.)
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::fmt::Write;
use std::net::IpAddr;
use uroce_wire::{packet::parse_frame_general, parse_bare_ipv4, parse_frame, parse_ip, pretty::Summary, ExtHeaders};

fuzz_target!(|data: &[u8]| {
    match (parse_frame(data), parse_frame_general(data)) {
        (Ok(a), Ok(b)) => assert!(a.same_as(&b), "fast and general parses differ: {a:?} vs {b:?}"),
        (Err(a), Err(b)) => assert_eq!(a, b),
        (a, b) => panic!("fast and general parsers disagree: {a:?} vs {b:?}"),
    }
    if let Some(b) = parse_bare_ipv4(data) {
        let g = parse_frame_general(data).expect("the general parser accepts what the bare parser accepts");
        assert_eq!(g.ip.src_addr(), IpAddr::V4(b.src));
        assert_eq!(g.ip.dst_addr(), IpAddr::V4(b.dst));
        assert_eq!(g.roce.bth, b.bth);
        assert_eq!(g.roce.ext, ExtHeaders { reth: b.reth, ..ExtHeaders::default() });
        assert_eq!(g.payload(), b.payload);
        assert_eq!(g.check_icrc(), b.check_icrc_prefetching(&[]));
    }
    for p in [parse_frame(data), parse_ip(data)].into_iter().flatten() {
        let _ = p.check_icrc();
        let _ = p.payload();
        let _ = p.repr();
        let mut s = String::new();
        let _ = write!(s, "{}", Summary(&p));
    }
});
