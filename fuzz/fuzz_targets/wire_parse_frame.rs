//! Arbitrary bytes as an Ethernet frame and as an IP packet: parsing, the ICRC check and the
//! one-line summary must never panic, and the frame parser's common-case shortcut must return
//! exactly what the general layer-by-layer parser returns. (ICRC and IPv4 checksum checks are
//! skipped under cfg(fuzzing) inside the parser so the fuzzer reaches the transport headers.)
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::fmt::Write;
use uroce_wire::{packet::parse_frame_general, parse_frame, parse_ip, pretty::Summary};

fuzz_target!(|data: &[u8]| {
    match (parse_frame(data), parse_frame_general(data)) {
        (Ok(a), Ok(b)) => assert!(a.same_as(&b), "fast and general parses differ: {a:?} vs {b:?}"),
        (Err(a), Err(b)) => assert_eq!(a, b),
        (a, b) => panic!("fast and general parsers disagree: {a:?} vs {b:?}"),
    }
    for p in [parse_frame(data), parse_ip(data)].into_iter().flatten() {
        let _ = p.check_icrc();
        let _ = p.payload();
        let _ = p.repr();
        let mut s = String::new();
        let _ = write!(s, "{}", Summary(&p));
    }
});
