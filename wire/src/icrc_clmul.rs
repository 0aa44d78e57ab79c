//! The ICRC's CRC-32 with `PCLMULQDQ`, the masked prefix folded in registers.
//!
//! `crc32fast` does one call's work fast, but every call pays a fixed setup and a 128 → 32-bit
//! reduction, as much as the CRC of ~100 bytes. The ICRC needs the IP/UDP/BTH prefix with its
//! variant fields set to ones: through `crc32fast` that is either two calls (the masked prefix
//! from a stack copy, then the rest in place) or a copy of the whole packet. Here the masks are
//! OR-ed into the first 16-byte blocks as they are loaded, so a small packet is one fold and
//! one reduction, like a plain CRC pass over it.
//!
//! The folding and reduction are crc32fast 1.5.5's `specialized::pclmulqdq` (fold by 1, partial
//! block, Barrett reduction; MIT/Apache-2.0, after Gopal et al., "Fast CRC computation for
//! generic polynomials using PCLMULQDQ instruction", Intel 2009), with the constants unchanged.
//! Remainders of 128 bytes and more go back to `crc32fast` (its fold-by-4 and AVX kernels).

use core::arch::x86_64 as arch;

const K3: i64 = 0x1751997d0;
const K4: i64 = 0x0ccaa009e;
const K5: i64 = 0x163cd6124;
const P_X: i64 = 0x1DB710641;
const U_PRIME: i64 = 0x1F7011641;

/// Whether the CPU has what [`crc_masked`] needs.
#[inline]
pub(crate) fn available() -> bool {
    #[cfg(feature = "std")]
    {
        // One relaxed load after the first call (std caches the CPUID bits the same way).
        use core::sync::atomic::{AtomicU8, Ordering};
        static HAVE: AtomicU8 = AtomicU8::new(0); // 0 unknown, 1 no, 2 yes
        match HAVE.load(Ordering::Relaxed) {
            2 => true,
            1 => false,
            _ => {
                let yes = std::is_x86_feature_detected!("pclmulqdq")
                    && std::is_x86_feature_detected!("sse4.1")
                    && std::is_x86_feature_detected!("ssse3");
                HAVE.store(if yes { 2 } else { 1 }, Ordering::Relaxed);
                yes
            }
        }
    }
    #[cfg(not(feature = "std"))]
    {
        cfg!(all(target_feature = "pclmulqdq", target_feature = "sse4.1", target_feature = "ssse3"))
    }
}

/// What `crc32fast::Hasher::new_with_initial(init)` fed with `data`, where block `i` (bytes
/// `16 i .. 16 i + 16`) is first OR-ed with `masks[i]` (little-endian), would finalize to.
/// Returns `None` (nothing computed) unless `1 <= masks.len()` and `16 * masks.len() <=
/// data.len()`.
///
/// # Safety
/// The CPU must support `pclmulqdq`, `sse2`, `sse4.1` and `ssse3` ([`available`]). There is
/// no memory-safety precondition: every load is from a bounds-checked 16-byte slice.
#[target_feature(enable = "pclmulqdq", enable = "sse2", enable = "sse4.1", enable = "ssse3")]
pub(crate) unsafe fn crc_masked(init: u32, data: &[u8], masks: &[u128]) -> Option<u32> {
    let head = masks.len().checked_mul(16)?;
    if masks.is_empty() || head > data.len() {
        return None;
    }
    let k3k4 = arch::_mm_set_epi64x(K4, K3);
    let block = |i: usize| data.get(i * 16..).and_then(|d| d.first_chunk::<16>());
    let mut x = arch::_mm_xor_si128(load_or(block(0)?, masks[0]), arch::_mm_cvtsi32_si128(!init as i32));
    for (i, &m) in masks.iter().enumerate().skip(1) {
        x = reduce128(x, load_or(block(i)?, m), k3k4);
    }
    let rest = &data[head..];
    if rest.len() >= 128 {
        // Finish the prefix and let crc32fast's wide kernels take the bulk: CRC updates compose.
        let crc = reduce_to_crc(x, &[]);
        let mut h = crc32fast::Hasher::new_with_initial(crc);
        h.update(rest);
        return Some(h.finalize());
    }
    Some(reduce_to_crc(x, rest))
}

/// Load 16 bytes and OR the mask in.
#[inline]
#[target_feature(enable = "sse2")]
unsafe fn load_or(s: &[u8; 16], mask: u128) -> arch::__m128i {
    // SAFETY: `s` is exactly 16 readable bytes; `loadu` has no alignment requirement.
    let v = unsafe { arch::_mm_loadu_si128(s.as_ptr().cast()) };
    arch::_mm_or_si128(v, arch::_mm_set_epi64x((mask >> 64) as i64, mask as i64))
}

#[inline]
#[target_feature(enable = "pclmulqdq", enable = "sse2")]
unsafe fn reduce128(a: arch::__m128i, b: arch::__m128i, keys: arch::__m128i) -> arch::__m128i {
    let t1 = arch::_mm_clmulepi64_si128(a, keys, 0x00);
    let t2 = arch::_mm_clmulepi64_si128(a, keys, 0x11);
    arch::_mm_xor_si128(arch::_mm_xor_si128(b, t1), t2)
}

/// Fold the remaining whole blocks of `data` into `x`, then its final partial block, then
/// reduce 128 → 64 → 32 bits (Barrett) and return the finished CRC (crc32fast's
/// `reduce_128_to_crc`).
#[target_feature(enable = "pclmulqdq", enable = "sse2", enable = "sse4.1", enable = "ssse3")]
unsafe fn reduce_to_crc(mut x: arch::__m128i, data: &[u8]) -> u32 {
    let k3k4 = arch::_mm_set_epi64x(K4, K3);
    let mut blocks = data.chunks_exact(16);
    for b in &mut blocks {
        if let Some(b) = b.first_chunk::<16>() {
            x = reduce128(x, load_or(b, 0), k3k4);
        }
    }
    let data = blocks.remainder();
    // A final partial block of n (1..=15) bytes: the accumulator's last n bytes are shifted out
    // and folded back by 128 bits, the rest shifted down to make room for the new bytes.
    let n = data.len();
    if n > 0 {
        let seq = arch::_mm_setr_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
        let shl = arch::_mm_add_epi8(seq, arch::_mm_set1_epi8(n as i8 - 16));
        let shr = arch::_mm_xor_si128(shl, arch::_mm_set1_epi8(-128));
        let overflow = arch::_mm_shuffle_epi8(x, shl);
        x = arch::_mm_shuffle_epi8(x, shr);
        let part = partial_block(data);
        let part = arch::_mm_set_epi64x((part >> 64) as i64, part as i64);
        x = arch::_mm_xor_si128(x, arch::_mm_shuffle_epi8(part, shl));
        x = reduce128(overflow, x, k3k4);
    }
    // 128 → 64 bits.
    let x = arch::_mm_xor_si128(arch::_mm_clmulepi64_si128(x, k3k4, 0x10), arch::_mm_srli_si128(x, 8));
    // 64 → 32 bits of remainder input.
    let x = arch::_mm_xor_si128(
        arch::_mm_clmulepi64_si128(
            arch::_mm_and_si128(x, arch::_mm_set_epi32(0, 0, 0, !0)),
            arch::_mm_set_epi64x(0, K5),
            0x00,
        ),
        arch::_mm_srli_si128(x, 4),
    );
    // Barrett reduction (bit-reflected variant).
    let pu = arch::_mm_set_epi64x(U_PRIME, P_X);
    let t1 = arch::_mm_clmulepi64_si128(arch::_mm_and_si128(x, arch::_mm_set_epi32(0, 0, 0, !0)), pu, 0x10);
    let t2 = arch::_mm_clmulepi64_si128(arch::_mm_and_si128(t1, arch::_mm_set_epi32(0, 0, 0, !0)), pu, 0x00);
    !(arch::_mm_extract_epi32(arch::_mm_xor_si128(x, t2), 1) as u32)
}

/// A final partial block of 1..=15 bytes as a zero-padded little-endian u128, from overlapping
/// loads (the overlapping bytes are equal, so OR is exact). Built in registers: a copy through
/// a stack buffer would be read back by a 16-byte load that the buffer's narrow stores cannot
/// forward to (measured: a quarter of the time of a 64-byte packet). crc32fast's
/// `partial_words`, without its unwraps.
#[inline]
fn partial_block(data: &[u8]) -> u128 {
    let n = data.len();
    let word = |head: Option<&[u8; 8]>| head.map_or(0, |w| u64::from_le_bytes(*w) as u128);
    let half = |head: Option<&[u8; 4]>| head.map_or(0, |w| u32::from_le_bytes(*w) as u128);
    if n >= 8 {
        word(data.first_chunk::<8>()) | word(data.last_chunk::<8>()) << (8 * (n - 8))
    } else if n >= 4 {
        half(data.first_chunk::<4>()) | half(data.last_chunk::<4>()) << (8 * (n - 4))
    } else if n > 0 {
        data[0] as u128 | (data[n / 2] as u128) << (8 * (n / 2)) | (data[n - 1] as u128) << (8 * (n - 1))
    } else {
        0
    }
}
