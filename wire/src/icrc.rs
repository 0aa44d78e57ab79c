//! The invariant CRC (ICRC), exactly as Linux rxe computes it (`rxe_icrc.c`).
//!
//! IBTA Annex A17 (RoCEv2), A17.4.5: the ICRC is a CRC-32 over a pseudo-packet made of
//! 8 bytes of 0xFF standing in for the LRH, the IP header, the UDP header, the BTH, the
//! extension headers, the payload and the pad, with the *variant* fields set to all ones:
//!
//! | header | masked (set to ones) | why |
//! |---|---|---|
//! | IPv4 | ToS (DSCP+ECN), TTL, header checksum | routers rewrite them |
//! | IPv6 | traffic class, flow label, hop limit | routers rewrite them |
//! | UDP | checksum | may be 0 or recomputed |
//! | BTH | byte 4: FECN, BECN, resv6 | switches set FECN/BECN |
//!
//! Everything else is covered, notably the IPv4 identification and flags and both length
//! fields, so they must be final before the ICRC is computed. The CRC is the reflected
//! CRC-32 of zlib (`crc32fast`); its value is stored in the 4 bytes after the pad as a
//! **little-endian** u32 (rxe: `*icrcp = ~crc` on x86). Wireshark and scapy show those four
//! bytes read big-endian.
//!
//! One CRC pass, no payload copy: on x86-64 the masks are OR-ed into the header blocks in
//! registers (`PCLMULQDQ` folding); elsewhere the up-to-60 header bytes that need masking are
//! copied to the stack, masked and fed first, and the rest of the packet straight from the frame.

use crate::error::{need, Error, Layer};

/// crc32 of the 8-byte 0xFF LRH stand-in, as a finished CRC value to continue from.
/// rxe folds the same prefix into its seed 0xdebb20e3 (= the raw register, `!LRH_CRC`).
pub const LRH_CRC: u32 = 0x2144_df1c;

const UDP_LEN: usize = 8;
const BTH_LEN: usize = crate::bth::HEADER_LEN;

/// Length of the IP + UDP + BTH prefix that holds every masked field, and whether the
/// packet is IPv6. Errors if those headers are not all there.
fn prefix(l3: &[u8]) -> Result<(usize, bool), Error> {
    need(Layer::Ipv4, 0, 1, l3.len())?;
    let v6 = l3[0] >> 4 == 6;
    let ip_len = if v6 { crate::ipv6::HEADER_LEN } else { crate::ipv4::HEADER_LEN };
    let n = ip_len + UDP_LEN + BTH_LEN;
    need(if v6 { Layer::Ipv6 } else { Layer::Ipv4 }, 0, n, l3.len())?;
    Ok((n, v6))
}

/// Set the variant fields of a copied prefix to ones (the table in the module docs).
fn mask(p: &mut [u8], v6: bool) {
    let ip_len = if v6 {
        // Version nibble kept; traffic class (8 bits) and flow label (20 bits) set to ones.
        p[0] |= 0x0f;
        p[1] = 0xff;
        p[2] = 0xff;
        p[3] = 0xff;
        p[7] = 0xff; // hop limit
        crate::ipv6::HEADER_LEN
    } else {
        p[1] = 0xff; // ToS
        p[8] = 0xff; // TTL
        p[10] = 0xff; // header checksum
        p[11] = 0xff;
        crate::ipv4::HEADER_LEN
    };
    p[ip_len + 6] = 0xff; // UDP checksum
    p[ip_len + 7] = 0xff;
    p[ip_len + UDP_LEN + 4] = 0xff; // BTH FECN | BECN | resv6
}

/// The masks of [`mask`] as 16-byte words (little-endian), for the prefix chunks 0..4: set
/// bits are the variant fields. IPv4: ToS (1), TTL (8), header checksum (10, 11), UDP checksum
/// (26, 27), BTH byte 4 (32). IPv6: traffic class and flow label (low nibble of 0, 1..=3), hop
/// limit (7), UDP checksum (46, 47), BTH byte 4 (52).
const fn byte_mask(bytes: &[(usize, u8)]) -> [u128; 4] {
    let mut m = [0u128; 4];
    let mut i = 0;
    while i < bytes.len() {
        let (at, v) = bytes[i];
        m[at / 16] |= (v as u128) << ((at % 16) * 8);
        i += 1;
    }
    m
}
const MASK_V4: [u128; 4] =
    byte_mask(&[(1, 0xff), (8, 0xff), (10, 0xff), (11, 0xff), (26, 0xff), (27, 0xff), (32, 0xff)]);
const MASK_V6: [u128; 4] =
    byte_mask(&[(0, 0x0f), (1, 0xff), (2, 0xff), (3, 0xff), (7, 0xff), (46, 0xff), (47, 0xff), (52, 0xff)]);

/// The ICRC of a RoCEv2 packet. `l3` runs from the first byte of the IP header to the last
/// byte of the pad (the 4 ICRC bytes excluded). Returns the value whose little-endian bytes
/// go on the wire.
///
/// One pass over the packet, no copy of the payload. On x86-64 with `PCLMULQDQ` the masks are
/// OR-ed into the first blocks in registers ([`clmul`](self): one fold and one reduction, so a
/// 64-byte packet costs about what a plain CRC pass over it does). Elsewhere, two `crc32fast`
/// updates: the masked IP + UDP + BTH prefix (40 or 60 bytes) built on the stack, then the rest
/// in place. The prefix is masked with 16-byte OR-and-store operations, not byte stores: a byte
/// store followed at once by the CRC's 16-byte load of the same bytes defeats store-to-load
/// forwarding and stalls the CPU (measured: ~14 ns per packet).
pub fn compute(l3: &[u8]) -> Result<u32, Error> {
    compute_prefetching(l3, &[])
}

/// [`compute`], and meanwhile bring the cache lines of `dst` (memory the caller is about to
/// write: the payload's destination) into the cache, so that their fetch overlaps the CRC
/// instead of stalling the copy that follows. `dst` is neither read nor written: a hint.
pub fn compute_prefetching(l3: &[u8], dst: &[u8]) -> Result<u32, Error> {
    #[cfg(target_arch = "x86_64")]
    #[allow(unsafe_code)]
    if l3.len() >= 256 && clmul::wide_available() {
        let (m, chunks) = if l3[0] >> 4 == 6 { (&MASK_V6, 4) } else { (&MASK_V4, 3) };
        // SAFETY: `wide_available` checked every CPU feature the kernel is compiled for; it has
        // no other precondition (its loads are bounds-checked, its prefetches cannot fault).
        if let Some(c) = unsafe { clmul::crc_masked_wide(LRH_CRC, l3, &m[..chunks], dst) } {
            return Ok(c);
        }
    }
    #[cfg(target_arch = "x86_64")]
    #[allow(unsafe_code)]
    if l3.len() >= 256 && clmul::ymm::available() {
        let (m, chunks) = if l3[0] >> 4 == 6 { (&MASK_V6, 4) } else { (&MASK_V4, 3) };
        // SAFETY: `ymm::available` checked every CPU feature the kernel is compiled for; it has
        // no other precondition (its loads are bounds-checked, its prefetches cannot fault).
        if let Some(c) = unsafe { clmul::ymm::crc_masked(LRH_CRC, l3, &m[..chunks], dst) } {
            return Ok(c);
        }
    }
    #[cfg(target_arch = "x86_64")]
    #[allow(unsafe_code)]
    if l3.len() >= 64 && l3.len() < 256 && clmul::stream_available() {
        // SAFETY: `stream_available` checked every CPU feature the kernel is compiled for; it
        // has no other precondition (its accesses are bounds-checked).
        if let Some(c) = unsafe { clmul::crc_masked_small(l3, l3[0] >> 4 == 6) } {
            crate::copy::prefetch(dst);
            return Ok(c);
        }
    }
    #[cfg(target_arch = "x86_64")]
    #[allow(unsafe_code)]
    if l3.len() >= 64 && l3.len() < 256 && clmul::ymm::available() {
        // SAFETY: `ymm::available` checked every CPU feature the kernel is compiled for; it has
        // no other precondition (its accesses are bounds-checked).
        if let Some(c) = unsafe { clmul::ymm::crc_masked_small(l3, l3[0] >> 4 == 6) } {
            crate::copy::prefetch(dst);
            return Ok(c);
        }
    }
    crate::copy::prefetch(dst);
    compute_narrow(l3)
}

/// The widest ICRC kernels this CPU runs, for benchmark reports (figures from hosts with
/// different kernels do not compare): `"AVX-512 + VPCLMULQDQ"`, `"AVX2 + VPCLMULQDQ"`,
/// `"PCLMULQDQ"` (then crc32fast for the bulk) or `"portable (crc32fast)"`.
pub fn kernels() -> &'static str {
    #[cfg(target_arch = "x86_64")]
    {
        if clmul::stream_available() {
            return "AVX-512 + VPCLMULQDQ";
        }
        if clmul::ymm::available() {
            return "AVX2 + VPCLMULQDQ";
        }
        if clmul::available() {
            return "PCLMULQDQ";
        }
    }
    "portable (crc32fast)"
}

/// [`compute`] without the wide kernel.
fn compute_narrow(l3: &[u8]) -> Result<u32, Error> {
    #[cfg(target_arch = "x86_64")]
    #[allow(unsafe_code)]
    if l3.len() >= 64 && clmul::available() {
        // 64 bytes hold the masked blocks of either prefix (IPv4: 3 blocks, IPv6: 4).
        let (m, chunks) = if l3[0] >> 4 == 6 { (&MASK_V6, 4) } else { (&MASK_V4, 3) };
        // SAFETY: `available` checked every CPU feature `crc_masked` is compiled for; it has
        // no other precondition (its loads are bounds-checked).
        if let Some(c) = unsafe { clmul::crc_masked(LRH_CRC, l3, &m[..chunks]) } {
            return Ok(c);
        }
    }
    let (n, v6) = prefix(l3)?;
    let chunks = n.div_ceil(16);
    if l3.len() < chunks * 16 {
        // A packet barely longer than its headers: mask byte by byte.
        let mut hdr = [0u8; 64];
        hdr[..n].copy_from_slice(&l3[..n]);
        mask(&mut hdr[..n], v6);
        return Ok(crc_after_prefix(&hdr[..n], &l3[n..]));
    }
    let m = if v6 { &MASK_V6 } else { &MASK_V4 };
    let mut hdr = [0u8; 64];
    for (i, mask) in m.iter().enumerate().take(chunks) {
        let mut w = [0u8; 16];
        w.copy_from_slice(&l3[i * 16..i * 16 + 16]);
        let v = u128::from_le_bytes(w) | mask;
        hdr[i * 16..i * 16 + 16].copy_from_slice(&v.to_le_bytes());
    }
    Ok(crc_after_prefix(&hdr[..n], &l3[n..]))
}

fn crc_after_prefix(masked_prefix: &[u8], rest: &[u8]) -> u32 {
    continue_crc(continue_crc(LRH_CRC, masked_prefix), rest)
}

/// The portable path of [`compute`] (two `crc32fast` updates), for differential tests.
#[doc(hidden)]
pub fn compute_portable(l3: &[u8]) -> Result<u32, Error> {
    let (n, v6) = prefix(l3)?;
    let mut hdr = [0u8; 64];
    hdr[..n].copy_from_slice(&l3[..n]);
    mask(&mut hdr[..n], v6);
    let mut h = crc32fast::Hasher::new_with_initial(LRH_CRC);
    h.update(&hdr[..n]);
    h.update(&l3[n..]);
    Ok(h.finalize())
}

#[cfg(target_arch = "x86_64")]
#[path = "icrc_clmul.rs"]
#[allow(unsafe_code)]
mod clmul;

/// Copy `src` into `dst` (same length; `false` and nothing copied otherwise) and continue the
/// CRC `crc` over the copied bytes: `crc` is a finished CRC-32 value (as [`compute`] returns
/// for the bytes before), and the result is the CRC of those bytes followed by `src`. One pass
/// over the data on x86-64 with `VPCLMULQDQ` (AVX-512 or AVX2: every 64- or 32-byte load is
/// stored and folded); elsewhere a copy then a `crc32fast` pass. The transmit path writes a packet's
/// payload through this, so the payload is read once for both the copy and the ICRC.
pub fn copy_and_continue(crc: &mut u32, src: &[u8], dst: &mut [u8]) -> bool {
    if src.len() != dst.len() {
        return false;
    }
    #[cfg(target_arch = "x86_64")]
    #[allow(unsafe_code)]
    if src.len() >= 256 && clmul::wide_available() {
        // SAFETY: `wide_available` checked every CPU feature the kernel is compiled for; it has
        // no other precondition (its loads and stores are bounds-checked).
        if let Some(c) = unsafe { clmul::copy_crc_avx512(*crc, src, dst) } {
            *crc = c;
            return true;
        }
    }
    #[cfg(target_arch = "x86_64")]
    #[allow(unsafe_code)]
    if src.len() >= 128 && clmul::ymm::available() {
        // SAFETY: `ymm::available` checked every CPU feature the kernel is compiled for; it has
        // no other precondition (its loads and stores are bounds-checked).
        if let Some(c) = unsafe { clmul::ymm::copy_crc(*crc, src, dst) } {
            *crc = c;
            return true;
        }
    }
    dst.copy_from_slice(src);
    *crc = continue_crc(*crc, dst);
    true
}

/// The ICRC of a packet being built whose payload is copied in on the way, in one pass: `l3`
/// runs from the IP header to the end of the pad (ICRC excluded), its first `h` bytes (IP ..
/// extension headers) and its pad are written, and `src` is copied to `l3[h..h + src.len()]`
/// while the whole packet is folded into the ICRC. `None` (nothing written) when this CPU lacks
/// the instructions (x86-64 with `VPCLMULQDQ` and AVX-512BW or AVX2) or the packet is shorter than 256
/// bytes: the caller then copies and computes separately.
///
/// `prefetch` (may be empty) is memory the caller reads next (the next packet's payload): its
/// cache lines are fetched during the pass, four per 256-byte step, a hint that changes nothing.
pub fn copy_payload_icrc(l3: &mut [u8], h: usize, src: &[u8], prefetch: &[u8]) -> Option<u32> {
    #[cfg(target_arch = "x86_64")]
    #[allow(unsafe_code)]
    if clmul::stream_available() && !l3.is_empty() {
        let (m, chunks) = if l3[0] >> 4 == 6 { (&MASK_V6, 4) } else { (&MASK_V4, 3) };
        // SAFETY: `stream_available` checked every CPU feature the kernel is compiled for; it
        // has no other precondition (its accesses are bounds-checked).
        return unsafe { clmul::copy_icrc_stream(LRH_CRC, l3, h, src, &m[..chunks], prefetch) };
    }
    #[cfg(target_arch = "x86_64")]
    #[allow(unsafe_code)]
    if clmul::ymm::available() && !l3.is_empty() {
        let (m, chunks) = if l3[0] >> 4 == 6 { (&MASK_V6, 4) } else { (&MASK_V4, 3) };
        // SAFETY: `ymm::available` checked every CPU feature the kernel is compiled for; it has
        // no other precondition (its accesses are bounds-checked).
        return unsafe { clmul::ymm::copy_icrc_stream(LRH_CRC, l3, h, src, &m[..chunks], prefetch) };
    }
    let _ = (l3, h, src, prefetch);
    None
}

/// Continue the finished CRC-32 value `crc` over `data`.
pub fn continue_crc(crc: u32, data: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new_with_initial(crc);
    h.update(data);
    h.finalize()
}

/// Verify the ICRC of `l3`, which runs from the IP header to the end of the ICRC.
/// `icrc_offset_in_frame` only labels the error.
pub fn verify(l3: &[u8], icrc_offset_in_frame: usize) -> Result<(), Error> {
    verify_prefetching(l3, icrc_offset_in_frame, &[])
}

/// [`verify`], fetching `dst`'s cache lines meanwhile ([`compute_prefetching`]).
pub fn verify_prefetching(l3: &[u8], icrc_offset_in_frame: usize, dst: &[u8]) -> Result<(), Error> {
    let Some(body_len) = l3.len().checked_sub(crate::ICRC_LEN) else {
        return Err(Error::Truncated { layer: Layer::Icrc, offset: icrc_offset_in_frame, need: 4, have: l3.len() });
    };
    let computed = compute_prefetching(&l3[..body_len], dst)?;
    let s = &l3[body_len..];
    let found = u32::from_le_bytes([s[0], s[1], s[2], s[3]]);
    if computed == found {
        Ok(())
    } else {
        Err(Error::IcrcMismatch { offset: icrc_offset_in_frame, computed, found })
    }
}

/// A bit-at-a-time reference implementation of the same ICRC, for differential tests.
pub mod reference {
    /// Reflected CRC-32 (poly 0xEDB88320), init all ones, final complement.
    pub fn crc32(data: impl IntoIterator<Item = u8>) -> u32 {
        let mut crc = 0xffff_ffffu32;
        for b in data {
            crc ^= b as u32;
            for _ in 0..8 {
                crc = if crc & 1 != 0 { (crc >> 1) ^ 0xedb8_8320 } else { crc >> 1 };
            }
        }
        !crc
    }

    /// The ICRC of `l3` (IP header .. end of pad), masking field by field from the spec's
    /// description rather than from byte offsets shared with the fast path.
    pub fn icrc(l3: &[u8]) -> u32 {
        let v6 = l3[0] >> 4 == 6;
        let ip_len = if v6 { 40 } else { 20 };
        let lrh = core::iter::repeat_n(0xffu8, 8);
        let masked = l3.iter().enumerate().map(|(i, &b)| {
            let in_ip = i < ip_len;
            let udp = i.wrapping_sub(ip_len);
            let bth = i.wrapping_sub(ip_len + 8);
            match () {
                _ if in_ip && v6 && i == 0 => b | 0x0f,                    // TC high nibble
                _ if in_ip && v6 && (1..=3).contains(&i) => 0xff,          // TC low nibble + flow label
                _ if in_ip && v6 && i == 7 => 0xff,                        // hop limit
                _ if in_ip && !v6 && matches!(i, 1 | 8 | 10 | 11) => 0xff, // ToS, TTL, checksum
                _ if !in_ip && matches!(udp, 6 | 7) => 0xff,               // UDP checksum
                _ if !in_ip && bth == 4 => 0xff,                           // FECN/BECN/resv6
                _ => b,
            }
        });
        crc32(lrh.chain(masked))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn lrh_constant() {
        assert_eq!(crc32fast::hash(&[0xff; 8]), LRH_CRC);
        // rxe's seed is the un-complemented register after the same 8 bytes.
        assert_eq!(!LRH_CRC, 0xdebb_20e3);
        assert_eq!(reference::crc32([0xffu8; 8]), LRH_CRC);
    }

    /// protocol.md §1 vector A: a ConnectX-4 Lx CNP (from scapy's roce.uts), 74-byte frame.
    pub(crate) const VECTOR_A: &str = concat!(
        "e41d2dab2bc2",
        "7cfe90643b32",
        "0800", // Ethernet
        "45c2003c718c400040119161",
        "0a001101",
        "0a001201",                                                 // IPv4
        "000012b700280000",                                         // UDP
        "8100ffff400001180000000000000000000000000000000000000000", // BTH + 16 reserved
        "82fd002a",                                                 // ICRC
    );
    /// protocol.md §1 vector B: synthetic UC SEND_ONLY from scapy's tests, 78-byte frame.
    pub(crate) const VECTOR_B: &str = concat!(
        "248a07a8fa22248a07a8fa220800",
        "45010040047840004011b4d5c0a80007c0a80007",
        "c00012b7002caca2",
        "2460ffff000000d300cf1710",
        "4630818be28935d90e9a95505401be885e500000",
        "78f353f3",
    );

    fn vec_a() -> Vec<u8> {
        hex::decode(VECTOR_A).unwrap()
    }

    #[test]
    fn vector_a_cnp() {
        let f = vec_a();
        assert_eq!(f.len(), 74);
        let l3 = &f[14..];
        assert_eq!(compute(&l3[..l3.len() - 4]).unwrap().to_le_bytes(), [0x82, 0xfd, 0x00, 0x2a]);
        verify(l3, 70).unwrap();
    }

    #[test]
    fn vector_b_uc_send() {
        let f = hex::decode(VECTOR_B).unwrap();
        assert_eq!(f.len(), 78);
        let l3 = &f[14..];
        assert_eq!(compute(&l3[..l3.len() - 4]).unwrap().to_le_bytes(), [0x78, 0xf3, 0x53, 0xf3]);
        assert_eq!(reference::icrc(&l3[..l3.len() - 4]).to_le_bytes(), [0x78, 0xf3, 0x53, 0xf3]);
    }

    #[test]
    fn masked_fields_do_not_matter_covered_ones_do() {
        let f = vec_a();
        let l3 = f[14..].to_vec();
        let body = l3.len() - 4;
        let base = compute(&l3[..body]).unwrap();
        let masked_bits: &[usize] = &[1, 8, 10, 11, 26, 27, 32]; // ToS, TTL, IP csum, UDP csum, BTH byte 4
        for byte in 0..body {
            for bit in 0..8 {
                let mut m = l3.clone();
                m[byte] ^= 1 << bit;
                // A flipped version bit may make the header unparseable: that also "fails".
                let c = compute(&m[..body]).ok();
                if masked_bits.contains(&byte) {
                    assert_eq!(c, Some(base), "byte {byte} bit {bit} is masked");
                } else {
                    assert_ne!(c, Some(base), "byte {byte} bit {bit} is covered");
                }
            }
        }
    }

    /// The one-pass copy + CRC equals a copy followed by a plain CRC pass, at every length
    /// around the kernel's 64- and 256-byte steps and at unaligned offsets on both sides.
    #[test]
    fn copy_and_continue_is_copy_then_crc() {
        let src: Vec<u8> = (0..6000u32).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
        for len in (0..1100).chain([2048, 4095, 4096, 4097, 5000]) {
            for (so, d_off, init) in [(0, 0, LRH_CRC), (3, 1, 0), (17, 54, 0x1234_5678)] {
                let s = &src[so..so + len];
                let mut dst = vec![0xeeu8; len + 128];
                let mut crc = init;
                assert!(copy_and_continue(&mut crc, s, &mut dst[d_off..d_off + len]));
                assert_eq!(&dst[d_off..d_off + len], s, "len {len}");
                assert!(dst[..d_off].iter().chain(&dst[d_off + len..]).all(|&b| b == 0xee), "len {len}");
                let mut h = crc32fast::Hasher::new_with_initial(init);
                h.update(s);
                assert_eq!(crc, h.finalize(), "len {len} offsets {so}/{d_off}");
            }
        }
        let mut crc = 0;
        assert!(!copy_and_continue(&mut crc, &src[..10], &mut [0u8; 9]));
    }

    /// The one-pass copy + ICRC of a packet being built writes the payload and returns the ICRC
    /// of the finished packet, for header lengths from the bare IPv4 headers to IPv6 with RETH +
    /// ImmDt, at lengths around its 64- and 256-byte steps, with and without pad.
    #[test]
    fn copy_payload_icrc_is_copy_then_icrc() {
        let src: Vec<u8> = (0..5000u32).map(|i| (i.wrapping_mul(2654435761) >> 11) as u8).collect();
        let mut ran = 0;
        for v6 in [false, true] {
            for &h in if v6 { &[60, 64, 76, 80, 96, 128][..] } else { &[40, 44, 56, 60, 68][..] } {
                for len in (150usize..700).chain(4090..4100) {
                    let pad = len.wrapping_neg() & 3;
                    let mut l3: std::vec::Vec<u8> = (0..h + len + pad).map(|i| (i * 7) as u8).collect();
                    l3[0] = if v6 { 0x6a } else { 0x45 };
                    l3[h + len..].fill(0);
                    let mut want = l3.clone();
                    want[h..h + len].copy_from_slice(&src[..len]);
                    let before = l3.clone();
                    // Prefetching (nothing, the source's own tail, more than the pass covers)
                    // is a hint: it changes neither the copy nor the CRC.
                    let prefetch = &src[[0, len / 2, 4999][len % 3]..];
                    match copy_payload_icrc(&mut l3, h, &src[..len], prefetch) {
                        Some(c) => {
                            ran += 1;
                            assert_eq!(l3, want, "v6 {v6} h {h} len {len}");
                            assert_eq!(c, reference::icrc(&want), "v6 {v6} h {h} len {len}");
                        }
                        None => assert_eq!(l3, before, "nothing written when declined"),
                    }
                }
            }
        }
        #[cfg(target_arch = "x86_64")]
        if std::is_x86_feature_detected!("vpclmulqdq")
            && (std::is_x86_feature_detected!("avx512bw") || std::is_x86_feature_detected!("avx2"))
        {
            assert!(ran > 4000, "the kernel ran {ran} times");
        }
    }

    /// The kernel report names what this CPU has.
    #[test]
    fn kernels_name_the_cpus_instructions() {
        let k = kernels();
        #[cfg(target_arch = "x86_64")]
        {
            let has = |f: bool, name: &str| assert_eq!(k == name, f, "{k}");
            let vp = std::is_x86_feature_detected!("vpclmulqdq");
            let avx512 = vp && std::is_x86_feature_detected!("avx512bw") && std::is_x86_feature_detected!("avx512f");
            has(avx512, "AVX-512 + VPCLMULQDQ");
            has(!avx512 && vp && std::is_x86_feature_detected!("avx2"), "AVX2 + VPCLMULQDQ");
        }
        #[cfg(not(target_arch = "x86_64"))]
        assert_eq!(k, "portable (crc32fast)");
    }

    #[test]
    fn wide_masks_equal_byte_masks() {
        for v6 in [false, true] {
            let mut a = [0u8; 64];
            let n = if v6 { 60 } else { 40 };
            mask(&mut a[..n], v6);
            let m = if v6 { &MASK_V6 } else { &MASK_V4 };
            for (i, w) in m.iter().enumerate() {
                let mut expect = [0u8; 16];
                expect.copy_from_slice(&a[i * 16..i * 16 + 16]);
                assert_eq!(w.to_le_bytes(), expect, "v6={v6} chunk {i}");
            }
        }
    }

    #[test]
    fn short_packets_take_the_byte_path() {
        // A 60-byte IPv6 packet (SEND_ONLY, no payload): chunk 3 would read past the end.
        let mut l3 = vec![0u8; 60];
        l3[0] = 0x60;
        assert_eq!(compute(&l3).unwrap(), reference::icrc(&l3));
        let mut l3 = vec![0u8; 40];
        l3[0] = 0x45;
        assert_eq!(compute(&l3).unwrap(), reference::icrc(&l3));
    }

    #[test]
    fn truncated_headers_are_errors() {
        let f = vec_a();
        for n in 0..40 {
            assert!(compute(&f[14..14 + n]).is_err(), "{n}");
        }
        assert!(verify(&f[14..17], 17).is_err());
    }

    /// Every length from the bare headers to beyond crc32fast's fold-by-4 threshold after the
    /// prefix and across the wide kernel's 64- and 256-byte steps (both sides of every branch of
    /// the clmul paths), and the lengths of full 4096-MTU packets: the fast path, the portable
    /// path and the bit-by-bit reference agree.
    #[test]
    fn every_length_agrees_with_the_reference() {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for v6 in [false, true] {
            let min = if v6 { 60 } else { 40 };
            for len in (min..=1100).chain(4130..4200).chain([9000]) {
                let mut l3: std::vec::Vec<u8> = (0..len)
                    .map(|_| {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        x as u8
                    })
                    .collect();
                l3[0] = if v6 { 0x60 | (l3[0] & 0x0f) } else { 0x45 };
                let want = reference::icrc(&l3);
                assert_eq!(compute(&l3).unwrap(), want, "v6 {v6} len {len}");
                assert_eq!(compute_portable(&l3).unwrap(), want, "portable, v6 {v6} len {len}");
                // Prefetching a destination (shorter, as long as, longer than the packet) is
                // only a hint: same value, destination untouched.
                let dst: std::vec::Vec<u8> = (0..len + 200).map(|i| i as u8).collect();
                for n in [0, 1, 64, 300.min(len), len, len + 200] {
                    assert_eq!(
                        compute_prefetching(&l3, &dst[..n]).unwrap(),
                        want,
                        "prefetching {n}, v6 {v6} len {len}"
                    );
                }
                assert!(dst.iter().enumerate().all(|(i, &b)| b == i as u8));
            }
        }
    }

    proptest! {
        #[test]
        fn differential_against_reference(v6 in any::<bool>(), body in proptest::collection::vec(any::<u8>(), 60..600)) {
            let mut l3 = body;
            l3[0] = if v6 { 0x60 | (l3[0] & 0x0f) } else { 0x45 };
            prop_assert_eq!(compute(&l3).unwrap(), reference::icrc(&l3));
        }
    }
}
