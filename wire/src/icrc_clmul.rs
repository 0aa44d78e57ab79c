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

#[path = "icrc_ymm.rs"]
pub(crate) mod ymm;

const K3: i64 = 0x1751997d0;
const K4: i64 = 0x0ccaa009e;
const K5: i64 = 0x163cd6124;
const P_X: i64 = 0x1DB710641;
const U_PRIME: i64 = 0x1F7011641;

/// A CPU-feature answer worked out once: 0 unknown, 1 no, 2 yes (one relaxed load after the
/// first call; std caches the CPUID bits the same way).
#[cfg(feature = "std")]
fn cached(flag: &core::sync::atomic::AtomicU8, detect: impl FnOnce() -> bool) -> bool {
    use core::sync::atomic::Ordering;
    match flag.load(Ordering::Relaxed) {
        2 => true,
        1 => false,
        _ => {
            let yes = detect();
            flag.store(if yes { 2 } else { 1 }, Ordering::Relaxed);
            yes
        }
    }
}

/// Whether the CPU has what [`crc_masked`] needs.
#[inline]
pub(crate) fn available() -> bool {
    #[cfg(feature = "std")]
    {
        static HAVE: core::sync::atomic::AtomicU8 = core::sync::atomic::AtomicU8::new(0);
        cached(&HAVE, || {
            std::is_x86_feature_detected!("pclmulqdq")
                && std::is_x86_feature_detected!("sse4.1")
                && std::is_x86_feature_detected!("ssse3")
        })
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
        return Some(super::continue_crc(reduce_to_crc(x, &[]), rest));
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
#[inline]
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

/// Whether the CPU has what [`copy_crc_avx512`] and [`crc_masked_wide`] need.
#[inline]
pub(crate) fn wide_available() -> bool {
    #[cfg(feature = "std")]
    {
        static HAVE: core::sync::atomic::AtomicU8 = core::sync::atomic::AtomicU8::new(0);
        cached(&HAVE, || {
            available()
                && std::is_x86_feature_detected!("avx512f")
                && std::is_x86_feature_detected!("vpclmulqdq")
                && std::is_x86_feature_detected!("avx2")
        })
    }
    #[cfg(not(feature = "std"))]
    {
        available() && cfg!(all(target_feature = "avx512f", target_feature = "vpclmulqdq", target_feature = "avx2"))
    }
}

// Fold distances for the 16-stream (4 × ZMM) loop: 2048 bits, and 512 bits to collapse the four
// ZMM accumulators into one (crc32fast's K_2048 pair and the paper's K1/K2).
const K_2048_LOW: i64 = 0x11542778a;
const K_2048_HIGH: i64 = 0x1322d1430;
const K1: i64 = 0x154442bd4;
const K2: i64 = 0x1c6e41596;

/// Copy `src` into `dst` (same length) and return the CRC of `src` continued from `init`: what
/// `crc32fast::Hasher::new_with_initial(init)` fed with `src` finalizes to. One pass over the
/// bytes instead of a copy pass and a CRC pass: each 64-byte load is stored and folded. The
/// bulk (whole 256-byte groups) folds 16 streams in four ZMM registers (crc32fast's AVX-512
/// kernel); the rest (< 256 bytes) is copied and then CRC-ed from `dst`, still in L1.
/// Returns `None` (nothing copied) if the lengths differ.
///
/// # Safety
/// The CPU must support what [`wide_available`] checks. No memory-safety precondition: every
/// load and store is through a bounds-checked 64-byte array.
#[target_feature(
    enable = "pclmulqdq",
    enable = "sse2",
    enable = "sse4.1",
    enable = "ssse3",
    enable = "avx",
    enable = "avx2",
    enable = "avx512f",
    enable = "vpclmulqdq"
)]
pub(crate) unsafe fn copy_crc_avx512(init: u32, src: &[u8], dst: &mut [u8]) -> Option<u32> {
    if src.len() != dst.len() {
        return None;
    }
    let bulk = src.len() / 256 * 256;
    let mut crc = init;
    if bulk > 0 {
        let mut step = |i: usize| -> Option<arch::__m512i> {
            let s = src.get(i..)?.first_chunk::<64>()?;
            let d = dst.get_mut(i..)?.first_chunk_mut::<64>()?;
            // SAFETY: `s` and `d` are exactly 64 readable / writable bytes; `loadu`/`storeu` have
            // no alignment requirement.
            let v = unsafe { arch::_mm512_loadu_si512(s.as_ptr().cast()) };
            unsafe { arch::_mm512_storeu_si512(d.as_mut_ptr().cast(), v) };
            Some(v)
        };
        let mut v0 = step(0)?;
        let (mut v1, mut v2, mut v3) = (step(64)?, step(128)?, step(192)?);
        v0 = arch::_mm512_xor_si512(v0, arch::_mm512_castsi128_si512(arch::_mm_cvtsi32_si128(!crc as i32)));
        let k = k_2048();
        let mut i = 256;
        while i < bulk {
            v0 = fold512(v0, step(i)?, k);
            v1 = fold512(v1, step(i + 64)?, k);
            v2 = fold512(v2, step(i + 128)?, k);
            v3 = fold512(v3, step(i + 192)?, k);
            i += 256;
        }
        crc = reduce_to_crc(lanes_to_128(collapse4(v0, v1, v2, v3)), &[]);
    }
    let tail = dst.get_mut(bulk..)?;
    tail.copy_from_slice(src.get(bulk..)?);
    if !tail.is_empty() {
        crc = super::continue_crc(crc, tail);
    }
    Some(crc)
}

/// The fold constants for 16 streams in four ZMM registers (2048 bits), in every lane.
#[inline]
#[target_feature(enable = "avx512f")]
fn k_2048() -> arch::__m512i {
    arch::_mm512_set_epi64(
        K_2048_HIGH,
        K_2048_LOW,
        K_2048_HIGH,
        K_2048_LOW,
        K_2048_HIGH,
        K_2048_LOW,
        K_2048_HIGH,
        K_2048_LOW,
    )
}

/// The fold constants for one ZMM register's worth (512 bits), in every lane.
#[inline]
#[target_feature(enable = "avx512f")]
fn k_512() -> arch::__m512i {
    arch::_mm512_set_epi64(K2, K1, K2, K1, K2, K1, K2, K1)
}

/// Four accumulators (in stream order) folded into one.
#[inline]
#[target_feature(enable = "avx512f", enable = "vpclmulqdq")]
fn collapse4(v0: arch::__m512i, v1: arch::__m512i, v2: arch::__m512i, v3: arch::__m512i) -> arch::__m512i {
    let k = k_512();
    fold512(fold512(fold512(v0, v1, k), v2, k), v3, k)
}

/// The four 128-bit lanes of an accumulator (in stream order) folded into one.
#[inline]
#[target_feature(enable = "avx512f", enable = "pclmulqdq")]
fn lanes_to_128(v: arch::__m512i) -> arch::__m128i {
    let k3k4 = arch::_mm_set_epi64x(K4, K3);
    let mut x = arch::_mm512_castsi512_si128(v);
    // SAFETY: only needs the CPU features this function is compiled for.
    x = unsafe { reduce128(x, arch::_mm512_extracti32x4_epi32(v, 1), k3k4) };
    x = unsafe { reduce128(x, arch::_mm512_extracti32x4_epi32(v, 2), k3k4) };
    unsafe { reduce128(x, arch::_mm512_extracti32x4_epi32(v, 3), k3k4) }
}

/// Up to four 16-byte masks as one 64-byte register (missing ones zero).
#[inline]
#[target_feature(enable = "avx512f")]
fn masks_512(masks: &[u128]) -> arch::__m512i {
    let mut m = [0i64; 8];
    for (i, &w) in masks.iter().take(4).enumerate() {
        m[2 * i] = w as i64;
        m[2 * i + 1] = (w >> 64) as i64;
    }
    arch::_mm512_set_epi64(m[7], m[6], m[5], m[4], m[3], m[2], m[1], m[0])
}

/// One `span`-byte step's share of a prefetch stream: `PREFETCHT0` for the next `span / 64`
/// cache lines of `prefetch` from `*fetched` on. A hint: it reads and writes nothing and never
/// faults.
#[inline]
#[target_feature(enable = "sse")]
fn prefetch_step(prefetch: &[u8], fetched: &mut usize, span: usize) {
    let to = prefetch.len().min(*fetched + span);
    while *fetched < to {
        arch::_mm_prefetch::<{ arch::_MM_HINT_T0 }>(prefetch.as_ptr().wrapping_add(*fetched).cast());
        *fetched += 64;
    }
}

/// Fold `a` forward by the distance `k` encodes and add `b`, in each 128-bit lane.
#[inline]
#[target_feature(enable = "avx512f", enable = "vpclmulqdq")]
fn fold512(a: arch::__m512i, b: arch::__m512i, k: arch::__m512i) -> arch::__m512i {
    let t1 = arch::_mm512_clmulepi64_epi128(a, k, 0x00);
    let t2 = arch::_mm512_clmulepi64_epi128(a, k, 0x11);
    // b ^ t1 ^ t2 in one instruction.
    arch::_mm512_ternarylogic_epi64(b, t1, t2, 0x96)
}

/// [`crc_masked`] for packets of 256 bytes and more, in one pass with `VPCLMULQDQ`: the masks
/// (at most 64 bytes of them) are OR-ed into the first 64-byte load, 256-byte groups fold as 16
/// streams in four ZMM registers, the rest folds 64 bytes at a time into one, and the last
/// < 64 bytes go through the 128-bit tail of [`reduce_to_crc`]: one reduction for the whole
/// packet. Returns `None` (nothing computed) unless `masks.len() <= 4` and `data.len() >= 256`.
///
/// Each 256-byte step also issues `PREFETCHT0` for the next four cache lines of `prefetch`
/// (empty: none), memory the caller is about to write: those lines are fetched while the CRC
/// runs instead of when the copy reaches them. Spread like this, the prefetches never wait for
/// a free line-fill buffer, as 64 issued back to back do (measured on the engine benchmark:
/// 4 lines per step beats 2, 8, all up front, and `PREFETCHW`).
///
/// # Safety
/// The CPU must support what [`wide_available`] checks. No memory-safety precondition: every
/// load is from a bounds-checked 64-byte array, and a prefetch reads nothing and never faults.
#[target_feature(
    enable = "pclmulqdq",
    enable = "sse2",
    enable = "sse4.1",
    enable = "ssse3",
    enable = "avx",
    enable = "avx2",
    enable = "avx512f",
    enable = "vpclmulqdq"
)]
pub(crate) unsafe fn crc_masked_wide(init: u32, data: &[u8], masks: &[u128], prefetch: &[u8]) -> Option<u32> {
    if masks.len() > 4 || data.len() < 256 {
        return None;
    }
    let mut fetched = 0;
    let load = |i: usize| -> Option<arch::__m512i> {
        let s = data.get(i..)?.first_chunk::<64>()?;
        // SAFETY: `s` is exactly 64 readable bytes; `loadu` has no alignment requirement.
        Some(unsafe { arch::_mm512_loadu_si512(s.as_ptr().cast()) })
    };
    let mask = masks_512(masks);
    let mut v0 = arch::_mm512_or_si512(load(0)?, mask);
    v0 = arch::_mm512_xor_si512(v0, arch::_mm512_castsi128_si512(arch::_mm_cvtsi32_si128(!init as i32)));
    let (mut v1, mut v2, mut v3) = (load(64)?, load(128)?, load(192)?);
    let k2048 = k_2048();
    let mut i = 256;
    while i + 256 <= data.len() {
        prefetch_step(prefetch, &mut fetched, 256);
        v0 = fold512(v0, load(i)?, k2048);
        v1 = fold512(v1, load(i + 64)?, k2048);
        v2 = fold512(v2, load(i + 128)?, k2048);
        v3 = fold512(v3, load(i + 192)?, k2048);
        i += 256;
    }
    let k1k2 = k_512();
    let mut v = collapse4(v0, v1, v2, v3);
    while i + 64 <= data.len() {
        v = fold512(v, load(i)?, k1k2);
        i += 64;
    }
    Some(reduce_to_crc(lanes_to_128(v), data.get(i..)?))
}

/// Whether the CPU has what [`copy_icrc_stream`] needs ([`wide_available`] and AVX-512BW's
/// byte-masked loads and stores).
#[inline]
pub(crate) fn stream_available() -> bool {
    #[cfg(feature = "std")]
    {
        static HAVE: core::sync::atomic::AtomicU8 = core::sync::atomic::AtomicU8::new(0);
        cached(&HAVE, || wide_available() && std::is_x86_feature_detected!("avx512bw"))
    }
    #[cfg(not(feature = "std"))]
    {
        wide_available() && cfg!(target_feature = "avx512bw")
    }
}

/// Where the payload of a transmit stream ends (`h + src_len`), if both stream kernels can
/// take the packet: at most four masks, and they only set header bits (bytes before `h`);
/// headers of at most 128 bytes; the payload inside the packet (`l3_len`), and the headers and
/// payload together at least 256 bytes (a whole first step of either kernel and more).
fn stream_end(l3_len: usize, h: usize, src_len: usize, masks: &[u128]) -> Option<usize> {
    let end = h.checked_add(src_len)?;
    if masks.len() > 4 || h > 128 || end > l3_len || end < 256 {
        return None;
    }
    for (i, &w) in masks.iter().enumerate() {
        let keep = h.saturating_sub(16 * i);
        if keep < 16 && w >> (8 * keep) != 0 {
            return None;
        }
    }
    Some(end)
}

/// The ICRC of a packet being built, with its payload copied in on the way: `l3` runs from the
/// IP header to the end of the pad, its first `h` bytes (IP .. extension headers) and the pad
/// after `h + src.len()` are in place, and `src` is copied to `l3[h..h + src.len()]` in the same
/// pass that folds the whole packet into one CRC continued from `init` (block `i` OR-ed with
/// `masks[i]` first, as [`crc_masked`]). The stream's 64-byte chunks straddling the headers and
/// the payload are assembled with byte-masked loads (only the selected bytes are read) and the
/// payload part stored with a byte-masked store. Returns `None` (nothing written) unless the
/// masks only cover bytes before `h`, `h <= 128`, `h + src.len() <= l3.len()` and `h + src.len() >= 256`.
///
/// # Safety
/// The CPU must support what [`stream_available`] checks. No memory-safety precondition: every
/// load and store is within a bounds-checked subslice of `l3` or `src` (a masked access only
/// touches its selected bytes, which lie inside the subslice the pointer comes from).
#[target_feature(
    enable = "pclmulqdq",
    enable = "sse2",
    enable = "sse4.1",
    enable = "ssse3",
    enable = "avx",
    enable = "avx2",
    enable = "avx512f",
    enable = "avx512bw",
    enable = "vpclmulqdq"
)]
pub(crate) unsafe fn copy_icrc_stream(
    init: u32,
    l3: &mut [u8],
    h: usize,
    src: &[u8],
    masks: &[u128],
    prefetch: &[u8],
) -> Option<u32> {
    let end = stream_end(l3.len(), h, src.len(), masks)?;
    // Stream bytes `o .. o + 64` (o a multiple of 64, o + 64 <= end): headers from `l3`, payload
    // from `src`; the payload bytes are also stored into `l3`.
    let mut chunk = |o: usize| -> Option<arch::__m512i> {
        if o >= h {
            let s = src.get(o - h..)?.first_chunk::<64>()?;
            let d = l3.get_mut(o..)?.first_chunk_mut::<64>()?;
            // SAFETY: `s` and `d` are exactly 64 readable / writable bytes (no alignment needed).
            let v = unsafe { arch::_mm512_loadu_si512(s.as_ptr().cast()) };
            unsafe { arch::_mm512_storeu_si512(d.as_mut_ptr().cast(), v) };
            return Some(v);
        }
        let d = l3.get_mut(o..)?.first_chunk_mut::<64>()?;
        if o + 64 <= h {
            // SAFETY: 64 readable bytes.
            return Some(unsafe { arch::_mm512_loadu_si512(d.as_ptr().cast()) });
        }
        // Bytes 0 .. k of the chunk are headers, k .. 64 payload (src[0 .. 64 - k]).
        let k = h - o;
        let hdr_lanes: u64 = (1u64 << k) - 1;
        let p = src.get(..64 - k)?;
        // SAFETY: the header lanes are `d[..k]`; the payload lanes `k..64` read
        // `p.as_ptr() - k + lane`, i.e. exactly `p[0 .. 64 - k]`; the masked store writes
        // `d[k..64]`. Masked-off lanes are not accessed (the pointer is formed with wrapping
        // arithmetic and never dereferenced outside the selected lanes).
        let hv = unsafe { arch::_mm512_maskz_loadu_epi8(hdr_lanes, d.as_ptr().cast()) };
        let pv = unsafe { arch::_mm512_maskz_loadu_epi8(!hdr_lanes, p.as_ptr().wrapping_sub(k).cast()) };
        unsafe { arch::_mm512_mask_storeu_epi8(d.as_mut_ptr().cast(), !hdr_lanes, pv) };
        Some(arch::_mm512_or_si512(hv, pv))
    };
    let mask = masks_512(masks);
    let mut v0 = arch::_mm512_or_si512(chunk(0)?, mask);
    v0 = arch::_mm512_xor_si512(v0, arch::_mm512_castsi128_si512(arch::_mm_cvtsi32_si128(!init as i32)));
    let (mut v1, mut v2, mut v3) = (chunk(64)?, chunk(128)?, chunk(192)?);
    let k2048 = k_2048();
    let bulk = end / 256 * 256;
    let mut i = 256;
    let mut fetched = 0;
    while i < bulk {
        prefetch_step(prefetch, &mut fetched, 256);
        v0 = fold512(v0, chunk(i)?, k2048);
        v1 = fold512(v1, chunk(i + 64)?, k2048);
        v2 = fold512(v2, chunk(i + 128)?, k2048);
        v3 = fold512(v3, chunk(i + 192)?, k2048);
        i += 256;
    }
    // The rest of the payload (< 256 bytes; `bulk >= 256 > h`), then fold what follows in the
    // frame (that payload, then the pad) from `l3`, still in L1.
    l3.get_mut(bulk..end)?.copy_from_slice(src.get(bulk - h..)?);
    let k1k2 = k_512();
    let mut v = collapse4(v0, v1, v2, v3);
    let load = |i: usize| -> Option<arch::__m512i> {
        let s = l3.get(i..)?.first_chunk::<64>()?;
        // SAFETY: 64 readable bytes.
        Some(unsafe { arch::_mm512_loadu_si512(s.as_ptr().cast()) })
    };
    while i + 64 <= l3.len() {
        v = fold512(v, load(i)?, k1k2);
        i += 64;
    }
    Some(reduce_to_crc(lanes_to_128(v), l3.get(i..)?))
}

/// `x^e mod P` for the CRC-32 polynomial `P = 0x1_04C1_1DB7`, bit `i` the coefficient of `x^i`.
const fn x_pow_mod_p(e: u32) -> u32 {
    let mut r: u64 = 1;
    let mut i = 0;
    while i < e {
        r <<= 1;
        if r >> 32 != 0 {
            r ^= 0x1_04C1_1DB7;
        }
        i += 1;
    }
    r as u32
}

/// A folding constant in the bit-reflected form of the constants above
/// (`[(x^e mod P) << 32]' << 1`, Gopal et al.): `fold_key(128 + 32)` is `K3`, `fold_key(128 - 32)`
/// is `K4`, `fold_key(4 * 128 + 32)` is `K1`, `fold_key(64)` is `K5`.
const fn fold_key(e: u32) -> i64 {
    ((x_pow_mod_p(e).reverse_bits() as u64) << 1) as i64
}

// `fold_key` gives every key above: the formula and the constants cannot drift apart.
const _: () = assert!(
    fold_key(160) == K3
        && fold_key(96) == K4
        && fold_key(64) == K5
        && fold_key(544) == K1
        && fold_key(480) == K2
        && fold_key(16 * 128 + 32) == K_2048_LOW
        && fold_key(16 * 128 - 32) == K_2048_HIGH
);

/// The keys that fold the four 16-byte blocks of a 64-byte chunk straight onto the last block
/// of a message, for a chunk `q` chunks before the last one: lane `l` is block `4q + 3 - l`
/// blocks from the end, multiplied (low half, high half) by `x^(128 d ± 32)`. The last block
/// itself (`q = 0`, lane 3) is not multiplied: its keys are 0 and it is added as it is.
const SMALL_KEYS: [[i64; 8]; 4] = {
    let mut t = [[0i64; 8]; 4];
    let mut q = 0;
    while q < 4 {
        let mut l = 0;
        while l < 4 {
            let d = 4 * q as u32 + 3 - l as u32;
            if d > 0 {
                t[q][2 * l] = fold_key(128 * d + 32);
                t[q][2 * l + 1] = fold_key(128 * d - 32);
            }
            l += 1;
        }
        q += 1;
    }
    t
};

/// The ICRC's prefix rule for [`crc_masked_small`], as the bytes of the first 64 that are read
/// as zero (bit `b` for byte `b`) and a 64-byte pattern XOR-ed in afterwards, 64 zero bytes on
/// either side so that it can be loaded shifted. A variant field is zeroed and then set to ones
/// by the pattern, which is `field | ones`; the pattern's first four bytes also carry the
/// LRH stand-in's CRC (`!LRH_CRC`, as [`crc_masked`] XORs in `!init`). IPv6's first byte is
/// version 6 and a traffic-class nibble set to ones: `0x6f` whole (the caller has checked the
/// version).
struct SmallPrefix {
    zero: u64,
    pattern: [u8; 192],
    /// `zero` as bytes (0x00 for a variant byte, 0xff otherwise), padded like `pattern`: what
    /// a kernel without byte-masked loads ANDs in.
    keep: [u8; 192],
}

const fn small_prefix(masks: &[u128; 4], v6: bool) -> SmallPrefix {
    let mut zero = 0u64;
    let mut pattern = [0u8; 192];
    let mut keep = [0xffu8; 192];
    let mut b = 0;
    while b < 64 {
        let m = (masks[b / 16] >> (8 * (b % 16))) as u8;
        if m != 0 {
            zero |= 1 << b;
            pattern[64 + b] = if v6 && b == 0 { 0x6f } else { 0xff };
            keep[64 + b] = 0;
        }
        b += 1;
    }
    let init = (!super::LRH_CRC).to_le_bytes();
    let mut i = 0;
    while i < 4 {
        pattern[64 + i] ^= init[i];
        i += 1;
    }
    SmallPrefix { zero, pattern, keep }
}

static SMALL_V4: SmallPrefix = small_prefix(&super::MASK_V4, false);
static SMALL_V6: SmallPrefix = small_prefix(&super::MASK_V6, true);

/// How the small kernels (this width's and [`ymm`]'s) lay out a packet of 64 to 255 bytes:
/// read as if `pad` zero bytes came first, it is `chunks` 64-byte chunks, the first holding the
/// whole masked prefix (`pre`) and `tail` the rest, whole.
struct SmallLayout<'a> {
    pre: &'static SmallPrefix,
    chunks: usize,
    /// 0..=63: the zero bytes in front that make the length a multiple of 64.
    pad: usize,
    /// Chunks 1.. of the padded packet.
    tail: &'a [u8],
}

impl<'a> SmallLayout<'a> {
    /// `None` outside 64..256 bytes.
    fn of(data: &'a [u8], v6: bool) -> Option<Self> {
        let n = data.len();
        if !(64..256).contains(&n) {
            return None;
        }
        let chunks = n.div_ceil(64);
        let tail = data.get(n - 64 * (chunks - 1)..)?;
        Some(SmallLayout { pre: if v6 { &SMALL_V6 } else { &SMALL_V4 }, chunks, pad: 64 * chunks - n, tail })
    }
}

/// The ICRC (from the LRH stand-in on) of a packet of 64 to 255 bytes whose first 64 hold the
/// whole masked prefix, without a serial fold chain: the packet is read as if `pad` zero bytes
/// came first (`pad` makes the length a multiple of 64; leading zeros leave a CRC's register
/// as it is), so every 16-byte block sits a fixed number of blocks before the last, and each
/// is multiplied onto the last at once by its own key ([`SMALL_KEYS`]). One to four 64-byte
/// loads, two `VPCLMULQDQ` each, a XOR tree and one reduction, where [`crc_masked`] folds up to
/// 15 blocks one after another. `None` outside 64..256 bytes.
///
/// # Safety
/// The CPU must support what [`stream_available`] checks. No memory-safety precondition: every
/// load is within a bounds-checked subslice of `data` or of a static table (the masked load of
/// the first chunk only touches its selected bytes, which lie inside `data`).
#[target_feature(
    enable = "pclmulqdq",
    enable = "sse2",
    enable = "sse4.1",
    enable = "ssse3",
    enable = "avx",
    enable = "avx2",
    enable = "avx512f",
    enable = "avx512bw",
    enable = "vpclmulqdq"
)]
pub(crate) unsafe fn crc_masked_small(data: &[u8], v6: bool) -> Option<u32> {
    let SmallLayout { pre, chunks, pad, tail } = SmallLayout::of(data, v6)?;
    let load = |i: usize| -> Option<arch::__m512i> {
        let s = tail.get(64 * i..)?.first_chunk::<64>()?;
        // SAFETY: `s` is exactly 64 readable bytes; `loadu` has no alignment requirement.
        Some(unsafe { arch::_mm512_loadu_si512(s.as_ptr().cast()) })
    };
    let pattern = |at: usize| -> Option<arch::__m512i> {
        let s = pre.pattern.get(at..)?.first_chunk::<64>()?;
        // SAFETY: 64 readable bytes.
        Some(unsafe { arch::_mm512_loadu_si512(s.as_ptr().cast()) })
    };
    // Chunk 0: `pad` zeros, then data[..64 - pad] with the variant bytes zeroed.
    let lanes0 = !pre.zero << pad;
    // SAFETY: the lanes selected by `lanes0` are `pad..64`, which read
    // `data.as_ptr() - pad + lane`, i.e. exactly `data[0 .. 64 - pad]` (64 <= n). Masked-off
    // lanes are not accessed: the pointer is formed with wrapping arithmetic and never
    // dereferenced outside the selected lanes.
    let mut c0 = unsafe { arch::_mm512_maskz_loadu_epi8(lanes0, data.as_ptr().wrapping_sub(pad).cast()) };
    c0 = arch::_mm512_xor_si512(c0, pattern(64 - pad)?);
    let keys = |q: usize| -> arch::__m512i {
        // SAFETY: `SMALL_KEYS[q]` is 64 readable bytes.
        unsafe { arch::_mm512_loadu_si512(SMALL_KEYS[q & 3].as_ptr().cast()) }
    };
    let mul = |v: arch::__m512i, q: usize| -> arch::__m512i {
        let k = keys(q);
        arch::_mm512_xor_si512(arch::_mm512_clmulepi64_epi128(v, k, 0x00), arch::_mm512_clmulepi64_epi128(v, k, 0x11))
    };
    let last_lane = |v: arch::__m512i| arch::_mm512_maskz_mov_epi64(0xc0, v);
    let acc = if chunks == 1 {
        arch::_mm512_xor_si512(mul(c0, 0), last_lane(c0))
    } else {
        // Chunk 1 holds data[64 - pad .. 128 - pad]: its first `pad` bytes may be variant
        // bytes of the prefix (which ends before byte 64).
        let mut c1 = load(0)?;
        if pad > 0 {
            let keep = !(pre.zero >> (64 - pad));
            c1 = arch::_mm512_maskz_mov_epi8(keep, c1);
            c1 = arch::_mm512_xor_si512(c1, pattern(128 - pad)?);
        }
        let mut acc = mul(c0, chunks - 1);
        let mut q = chunks - 1;
        let mut last = c1;
        for i in 1..chunks - 1 {
            q -= 1;
            acc = arch::_mm512_xor_si512(acc, mul(last, q));
            last = load(i)?;
        }
        arch::_mm512_ternarylogic_epi64(acc, mul(last, 0), last_lane(last), 0x96)
    };
    let y = arch::_mm256_xor_si256(arch::_mm512_castsi512_si256(acc), arch::_mm512_extracti64x4_epi64(acc, 1));
    let x = arch::_mm_xor_si128(arch::_mm256_castsi256_si128(y), arch::_mm256_extracti128_si256(y, 1));
    Some(reduce_to_crc(x, &[]))
}
