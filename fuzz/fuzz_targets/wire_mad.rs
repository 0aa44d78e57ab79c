//! Arbitrary bytes as a MAD (and, padded or cut to 256 bytes, as one of each CM attribute):
//! parsing never panics, and what parses re-emits to bytes that parse to the same message.
#![no_main]

use libfuzzer_sys::fuzz_target;
use uroce_wire::cm::ip::IpCmHeader;
use uroce_wire::cm::CmMessage;
use uroce_wire::mad::{Mad, MAD_LEN};

fn check(b: &[u8]) {
    let Ok(mad) = Mad::parse(b, 0) else { return };
    let Ok(msg) = CmMessage::parse(&mad, 0) else { return };
    let mut out = [0u8; MAD_LEN];
    msg.emit(mad.header.tid, mad.header.attr_mod, &mut out).expect("a parsed message emits");
    let again = Mad::parse(&out, 0).expect("an emitted MAD parses");
    assert_eq!(CmMessage::parse(&again, 0).expect("an emitted message parses"), msg);
    if let CmMessage::Req(r) = msg {
        let _ = IpCmHeader::parse(r.private_data, 0);
    }
    if let CmMessage::SidrReq(r) = msg {
        let _ = IpCmHeader::parse(r.private_data, 0);
    }
}

fuzz_target!(|data: &[u8]| {
    check(data);
    let _ = IpCmHeader::parse(data, 0);
    // The same bytes as a well-formed CM MAD of the attribute that data[0] picks.
    let mut m = [0u8; MAD_LEN];
    let n = data.len().min(MAD_LEN - 24);
    m[24..24 + n].copy_from_slice(&data[..n]);
    m[..4].copy_from_slice(&[1, 0x07, 2, 0x03]);
    m[17] = 0x10 + data.first().map_or(0, |b| b % 9);
    check(&m);
});
