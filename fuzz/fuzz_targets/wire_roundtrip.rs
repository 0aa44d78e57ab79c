//! parse -> emit -> parse: whatever parses must re-emit, and re-parse to the same reprs and
//! payload, with a valid ICRC.
#![no_main]

use libfuzzer_sys::fuzz_target;
use uroce_wire::{parse_frame, UdpChecksum};

fuzz_target!(|data: &[u8]| {
    let Ok(p) = parse_frame(data) else { return };
    let r = p.repr().expect("parse_frame gives an Ethernet repr");
    let mut buf = vec![0u8; r.buffer_len()];
    let n = r
        .emit(&mut buf, UdpChecksum::Zero, |b| b.copy_from_slice(p.payload()))
        .expect("a parsed repr is emittable");
    let q = parse_frame(&buf[..n]).expect("an emitted frame parses");
    q.check_icrc().expect("an emitted frame has a valid ICRC");
    let mut want = r;
    want.fixup();
    assert_eq!(q.repr().unwrap(), want);
    assert_eq!(q.payload(), p.payload());
});
