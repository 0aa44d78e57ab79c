//! Real Linux rxe captures: the project's own rxe-to-rxe fixtures (`rxe-compat/fixtures/`, kernel
//! 6.1 and 6.17 rxe, IPv4 and IPv6) and the public rxe captures copied beside them
//! (`rxe-compat/fixtures/rxe-public/`): every RoCEv2 frame decodes and every ICRC verifies;
//! single-bit flips in covered fields break the ICRC, flips in masked fields do not. Both sets
//! are part of the repository, so nothing here depends on anything outside it.

mod common;

use std::path::PathBuf;
use uroce_wire::{icrc, parse_frame, IpRepr, Opcode};

/// (file name, frame) of every RoCEv2 frame of `files`.
fn roce_frames(files: &[PathBuf]) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for f in files {
        for fr in common::read_pcap(f) {
            if common::is_roce(&fr) {
                out.push((f.file_name().unwrap().to_string_lossy().into_owned(), fr));
            }
        }
    }
    out
}

/// Every frame decodes, verifies and re-emits to the same bytes; returns the opcodes seen.
fn decode_all(frames: &[(String, Vec<u8>)]) -> std::collections::BTreeSet<Opcode> {
    let mut opcodes = std::collections::BTreeSet::new();
    for (file, f) in frames {
        let p = parse_frame(f).unwrap_or_else(|e| panic!("{file}: {e}"));
        p.check_icrc().unwrap_or_else(|e| panic!("{file}: {e}"));
        opcodes.insert(p.roce.bth.opcode);
        // Re-emitting the parsed repr reproduces the frame exactly, except the UDP checksum
        // (rxe sends 0) and Ethernet padding.
        let r = p.repr().unwrap();
        let mut buf = vec![0u8; r.buffer_len()];
        let n = r.emit(&mut buf, uroce_wire::UdpChecksum::Zero, |b| b.copy_from_slice(p.payload())).unwrap();
        assert_eq!(&buf[..n], &f[..p.offsets.end], "{file}: re-emit differs");
    }
    opcodes
}

#[test]
fn every_public_rxe_frame_decodes_with_a_good_icrc() {
    let frames = roce_frames(&common::public_captures());
    assert_eq!(frames.len(), 301, "the rxe-public captures hold 301 RoCE frames");
    let opcodes = decode_all(&frames);
    // The captures cover these opcodes (rxe write/read/send/atomic/UD traffic).
    for op in [
        Opcode::RC_SEND_ONLY,
        Opcode::RC_RDMA_WRITE_FIRST,
        Opcode::RC_RDMA_WRITE_MIDDLE,
        Opcode::RC_RDMA_WRITE_LAST,
        Opcode::RC_RDMA_READ_REQUEST,
        Opcode::RC_RDMA_READ_RESPONSE_FIRST,
        Opcode::RC_RDMA_READ_RESPONSE_LAST,
        Opcode::RC_ACKNOWLEDGE,
        Opcode::RC_FETCH_ADD,
        Opcode::RC_ATOMIC_ACKNOWLEDGE,
        Opcode::UD_SEND_ONLY,
    ] {
        assert!(opcodes.contains(&op), "no {op} in the captures");
    }
}

#[test]
fn every_fixture_rxe_frame_decodes_with_a_good_icrc() {
    let frames = roce_frames(&common::fixture_captures());
    assert_eq!(frames.len(), 1060, "the project's rxe fixtures hold 1060 RoCE frames");
    let v6 = frames.iter().filter(|(_, f)| matches!(parse_frame(f).map(|p| p.ip), Ok(IpRepr::V6(_)))).count();
    assert!(v6 >= 200, "{v6} IPv6 frames");
    let opcodes = decode_all(&frames);
    // Every opcode rxe-to-rxe traffic produced (fixtures/README.md, "Coverage").
    for op in [
        Opcode::RC_SEND_FIRST,
        Opcode::RC_SEND_MIDDLE,
        Opcode::RC_SEND_LAST,
        Opcode::RC_SEND_LAST_WITH_IMMEDIATE,
        Opcode::RC_SEND_ONLY,
        Opcode::RC_SEND_ONLY_WITH_IMMEDIATE,
        Opcode::RC_RDMA_WRITE_FIRST,
        Opcode::RC_RDMA_WRITE_MIDDLE,
        Opcode::RC_RDMA_WRITE_LAST,
        Opcode::RC_RDMA_WRITE_LAST_WITH_IMMEDIATE,
        Opcode::RC_RDMA_WRITE_ONLY,
        Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE,
        Opcode::RC_RDMA_READ_REQUEST,
        Opcode::RC_RDMA_READ_RESPONSE_FIRST,
        Opcode::RC_RDMA_READ_RESPONSE_MIDDLE,
        Opcode::RC_RDMA_READ_RESPONSE_LAST,
        Opcode::RC_RDMA_READ_RESPONSE_ONLY,
        Opcode::RC_ACKNOWLEDGE,
        Opcode::RC_ATOMIC_ACKNOWLEDGE,
        Opcode::RC_COMPARE_SWAP,
        Opcode::RC_FETCH_ADD,
        Opcode::RC_SEND_LAST_WITH_INVALIDATE,
        Opcode::RC_SEND_ONLY_WITH_INVALIDATE,
    ] {
        assert!(opcodes.contains(&op), "no {op} in the fixtures");
    }
}

/// Offsets (from the IP header) of the bits the ICRC masks.
fn masked(v6: bool, byte: usize, bit: u8) -> bool {
    let ip = if v6 { 40 } else { 20 };
    let in_ip_masked = if v6 {
        (byte == 0 && bit < 4) || (1..=3).contains(&byte) || byte == 7
    } else {
        matches!(byte, 1 | 8 | 10 | 11)
    };
    in_ip_masked || byte == ip + 6 || byte == ip + 7 || byte == ip + 8 + 4
}

#[test]
fn bit_flips_in_covered_fields_break_the_icrc_masked_ones_do_not() {
    let mut frames = roce_frames(&common::public_captures());
    frames.extend(roce_frames(&common::fixture_captures()));
    // Every bit of the first frame of each (opcode, IP version) (all bits of ~40 frames is
    // ~250k CRCs).
    let mut seen = std::collections::BTreeSet::new();
    let mut checked = 0;
    for (file, f) in &frames {
        let p = parse_frame(f).unwrap();
        let v6 = matches!(p.ip, IpRepr::V6(_));
        if !seen.insert((p.roce.bth.opcode, v6)) {
            continue;
        }
        let l3 = &f[p.offsets.l3..p.offsets.icrc];
        let base = icrc::compute(l3).unwrap();
        for byte in 0..l3.len() {
            for bit in 0..8u8 {
                let mut m = l3.to_vec();
                m[byte] ^= 1 << bit;
                let c = icrc::compute(&m).ok();
                if masked(v6, byte, bit) {
                    assert_eq!(c, Some(base), "{file} {}: byte {byte} bit {bit} is masked", p.roce.bth.opcode);
                } else {
                    assert_ne!(c, Some(base), "{file} {}: byte {byte} bit {bit} is covered", p.roce.bth.opcode);
                }
                checked += 1;
            }
        }
    }
    let v6 = seen.iter().filter(|(_, v6)| *v6).count();
    assert!(seen.len() >= 30 && v6 >= 10, "{} (opcode, IP version) pairs, {v6} of them IPv6", seen.len());
    assert!(checked > 10_000);
}

#[test]
fn named_masked_fields_keep_the_icrc_valid_on_a_real_frame() {
    let frames = roce_frames(&common::public_captures());
    let (_, f) = frames.iter().find(|(n, _)| n == "rdma_write_bw.pcap").unwrap();
    let mut f = f.clone();
    let o = parse_frame(&f).unwrap().offsets;
    let (l3, udp, bth) = (o.l3, o.udp, o.bth);
    f[l3 + 8] = 1; // TTL
    f[l3 + 1] |= 3; // ECN = CE
    f[udp + 6] = 0x12; // UDP checksum
    f[udp + 7] = 0x34;
    f[bth + 4] |= 0xc0; // FECN + BECN
                        // The IPv4 header checksum no longer verifies, so check the ICRC directly.
    icrc::verify(&f[l3..o.end], o.icrc).unwrap();
    // ...while the identification field is covered:
    f[l3 + 5] ^= 1;
    assert!(icrc::verify(&f[l3..o.end], o.icrc).is_err());
}
