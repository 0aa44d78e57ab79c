//! The ICRC kernels against the bit-at-a-time reference, on arbitrary packets: whichever
//! kernel this CPU runs (AVX-512, AVX2 + `VPCLMULQDQ`, `PCLMULQDQ`, portable) for a packet's
//! length, `compute` must equal the reference and the portable path (or both must refuse the
//! packet alike), and the transmit stream (`copy_payload_icrc`: payload copied in while the
//! whole packet is folded) and `copy_and_continue` (copy + CRC in one pass) must equal a copy
//! followed by the reference, writing exactly the payload's bytes and nothing when they decline.
#![no_main]

use libfuzzer_sys::fuzz_target;
use uroce_wire::icrc;

fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else { return };
    // The packet: the version nibble chosen by the selector, so IPv4 and IPv6 prefixes both run.
    let mut l3 = rest.to_vec();
    if let Some(b) = l3.first_mut() {
        *b = (*b & 0x0f) | if sel & 1 == 0 { 0x40 } else { 0x60 };
    }
    let general = icrc::compute(&l3);
    assert_eq!(general, icrc::compute_portable(&l3), "len {}", l3.len());
    if let Ok(c) = general {
        assert_eq!(c, icrc::reference::icrc(&l3), "len {}", l3.len());
    }

    // The transmit stream: headers `h` (from the selector), a payload split off the end.
    let h = [40usize, 44, 56, 60, 64, 76, 80, 96, 128][(sel as usize >> 1) % 9].min(l3.len());
    let pad = (sel as usize >> 5) & 3;
    let body = l3.len() - h;
    let len = body.saturating_sub(pad);
    let src: Vec<u8> = l3[h..h + len].iter().map(|b| b.wrapping_mul(31).wrapping_add(7)).collect();
    let mut built = l3.clone();
    let before = built.clone();
    match icrc::copy_payload_icrc(&mut built, h, &src, &l3) {
        Some(c) => {
            let mut want = l3.clone();
            want[h..h + len].copy_from_slice(&src);
            assert_eq!(built, want, "h {h} len {len}");
            assert_eq!(c, icrc::reference::icrc(&want), "h {h} len {len}");
        }
        None => assert_eq!(built, before, "nothing written when declined"),
    }

    // Copy + CRC continued from a value the selector picks.
    let init = u32::from(sel).wrapping_mul(0x9e37_79b9);
    let mut dst = vec![0xa5u8; rest.len()];
    let mut crc = init;
    assert!(icrc::copy_and_continue(&mut crc, rest, &mut dst));
    assert_eq!(dst, rest);
    assert_eq!(crc, icrc::continue_crc(init, rest));
});
