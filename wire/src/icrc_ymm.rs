//! The one-pass kernels of [`super`] with 256-bit `VPCLMULQDQ` and no AVX-512 (AMD Zen 3,
//! Intel Alder Lake and later cores): copy + CRC, the masked ICRC with a prefetch stream, and
//! the transmit stream that copies a payload into its packet while folding the whole packet.
//!
//! The folding is crc32fast 1.5.5's `calculate_avx2` (8 streams in four YMM registers, 128 bytes
//! a step), with the copy, the masks and the tail fused in as the AVX-512 kernels do: a payload
//! is read once, and a packet pays one reduction. Where an AVX-512 kernel assembles a chunk
//! straddling headers and payload with byte-masked loads, which AVX2 lacks, the stream here
//! first copies the few payload bytes that share a 32-byte chunk with the headers (at most 31,
//! once per packet) and then reads that chunk from the packet; and the small-packet kernel
//! shifts its first chunk in with dword-masked loads, so it takes packets whose length is a
//! multiple of 4 (every RoCEv2 packet: headers and padded payload are).

use super::{arch, fold_key, reduce128, reduce_to_crc, stream_end, SmallLayout, K3, K4, SMALL_KEYS};

/// Whether the CPU has what this module's kernels need.
#[inline]
pub(crate) fn available() -> bool {
    #[cfg(feature = "std")]
    {
        static HAVE: core::sync::atomic::AtomicU8 = core::sync::atomic::AtomicU8::new(0);
        super::cached(&HAVE, || {
            super::available() && std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("vpclmulqdq")
        })
    }
    #[cfg(not(feature = "std"))]
    {
        super::available() && cfg!(all(target_feature = "avx2", target_feature = "vpclmulqdq"))
    }
}

/// Fold distances: 1024 bits (one step of four YMM accumulators) and 256 bits (one register).
const K_1024: (i64, i64) = (fold_key(1024 + 32), fold_key(1024 - 32));
const K_256: (i64, i64) = (fold_key(256 + 32), fold_key(256 - 32));

/// A fold key pair in both 128-bit lanes (low half's key in the low quadword).
#[inline]
#[target_feature(enable = "avx")]
fn keys(k: (i64, i64)) -> arch::__m256i {
    arch::_mm256_set_epi64x(k.1, k.0, k.1, k.0)
}

/// Fold `a` forward by the distance `k` encodes and add `b`, in each 128-bit lane.
#[inline]
#[target_feature(enable = "avx2", enable = "vpclmulqdq")]
fn fold(a: arch::__m256i, b: arch::__m256i, k: arch::__m256i) -> arch::__m256i {
    let t1 = arch::_mm256_clmulepi64_epi128(a, k, 0x00);
    let t2 = arch::_mm256_clmulepi64_epi128(a, k, 0x11);
    arch::_mm256_xor_si256(b, arch::_mm256_xor_si256(t1, t2))
}

/// Four accumulators (in stream order) folded into one.
#[inline]
#[target_feature(enable = "avx2", enable = "vpclmulqdq")]
fn collapse4(v: [arch::__m256i; 4]) -> arch::__m256i {
    let k = keys(K_256);
    fold(fold(fold(v[0], v[1], k), v[2], k), v[3], k)
}

/// The two 128-bit lanes of an accumulator (in stream order) folded into one.
#[inline]
#[target_feature(enable = "avx2", enable = "pclmulqdq")]
fn lanes_to_128(v: arch::__m256i) -> arch::__m128i {
    let k3k4 = arch::_mm_set_epi64x(K4, K3);
    // SAFETY: only needs the CPU features this function is compiled for.
    unsafe { reduce128(arch::_mm256_castsi256_si128(v), arch::_mm256_extracti128_si256(v, 1), k3k4) }
}

/// 32 bytes of `s` from `i`.
#[inline]
#[target_feature(enable = "avx")]
fn load(s: &[u8], i: usize) -> Option<arch::__m256i> {
    let s = s.get(i..)?.first_chunk::<32>()?;
    // SAFETY: `s` is exactly 32 readable bytes; `loadu` has no alignment requirement.
    Some(unsafe { arch::_mm256_loadu_si256(s.as_ptr().cast()) })
}

/// 32 bytes of `s` from `i`, also stored to `d` at `j`.
#[inline]
#[target_feature(enable = "avx")]
fn copy(s: &[u8], i: usize, d: &mut [u8], j: usize) -> Option<arch::__m256i> {
    let v = load(s, i)?;
    let d = d.get_mut(j..)?.first_chunk_mut::<32>()?;
    // SAFETY: `d` is exactly 32 writable bytes; `storeu` has no alignment requirement.
    unsafe { arch::_mm256_storeu_si256(d.as_mut_ptr().cast(), v) };
    Some(v)
}

/// One 128-byte step's four registers.
#[inline]
#[target_feature(enable = "avx")]
fn load4(s: &[u8; 128]) -> [arch::__m256i; 4] {
    let p = s.as_ptr();
    // SAFETY: `p .. p + 128` is readable; `loadu` has no alignment requirement.
    unsafe {
        [
            arch::_mm256_loadu_si256(p.cast()),
            arch::_mm256_loadu_si256(p.add(32).cast()),
            arch::_mm256_loadu_si256(p.add(64).cast()),
            arch::_mm256_loadu_si256(p.add(96).cast()),
        ]
    }
}

/// One 128-byte step's four registers, also stored to `d`.
#[inline]
#[target_feature(enable = "avx")]
fn copy4(s: &[u8; 128], d: &mut [u8; 128]) -> [arch::__m256i; 4] {
    let v = load4(s);
    let p = d.as_mut_ptr();
    // SAFETY: `p .. p + 128` is writable; `storeu` has no alignment requirement.
    unsafe {
        arch::_mm256_storeu_si256(p.cast(), v[0]);
        arch::_mm256_storeu_si256(p.add(32).cast(), v[1]);
        arch::_mm256_storeu_si256(p.add(64).cast(), v[2]);
        arch::_mm256_storeu_si256(p.add(96).cast(), v[3]);
    }
    v
}

/// Fold four accumulators forward by one step and add the step's registers.
#[inline]
#[target_feature(enable = "avx2", enable = "vpclmulqdq")]
fn fold4(v: &mut [arch::__m256i; 4], b: [arch::__m256i; 4], k: arch::__m256i) {
    for (a, b) in v.iter_mut().zip(b) {
        *a = fold(*a, b, k);
    }
}

/// Up to four 16-byte masks as two 32-byte registers (missing ones zero).
#[inline]
#[target_feature(enable = "avx")]
fn masks_256(masks: &[u128]) -> [arch::__m256i; 2] {
    let mut m = [0i64; 8];
    for (i, &w) in masks.iter().take(4).enumerate() {
        m[2 * i] = w as i64;
        m[2 * i + 1] = (w >> 64) as i64;
    }
    [arch::_mm256_set_epi64x(m[3], m[2], m[1], m[0]), arch::_mm256_set_epi64x(m[7], m[6], m[5], m[4])]
}

/// `!init` in the lowest 32 bits, as a CRC continued from `init` starts.
#[inline]
#[target_feature(enable = "avx")]
fn seed(init: u32) -> arch::__m256i {
    arch::_mm256_castsi128_si256(arch::_mm_cvtsi32_si128(!init as i32))
}

/// [`super::copy_crc_avx512`] with YMM registers: copy `src` into `dst` (same length) and
/// return the CRC of `src` continued from `init`, one pass over the bytes and one reduction.
/// Returns `None` (nothing copied) if the lengths differ or `src` is shorter than 128 bytes.
///
/// # Safety
/// The CPU must support what [`available`] checks. No memory-safety precondition: every load
/// and store is through a bounds-checked 32-byte array.
#[target_feature(
    enable = "pclmulqdq",
    enable = "sse2",
    enable = "sse4.1",
    enable = "ssse3",
    enable = "avx",
    enable = "avx2",
    enable = "vpclmulqdq"
)]
pub(crate) unsafe fn copy_crc(init: u32, src: &[u8], dst: &mut [u8]) -> Option<u32> {
    if src.len() != dst.len() || src.len() < 128 {
        return None;
    }
    let (s0, src) = src.split_first_chunk::<128>()?;
    let (d0, dst) = dst.split_first_chunk_mut::<128>()?;
    let mut v = copy4(s0, d0);
    v[0] = arch::_mm256_xor_si256(v[0], seed(init));
    let k = keys(K_1024);
    let mut ss = src.chunks_exact(128);
    let mut ds = dst.chunks_exact_mut(128);
    for (s, d) in (&mut ss).zip(&mut ds) {
        fold4(&mut v, copy4(s.first_chunk()?, d.first_chunk_mut()?), k);
    }
    let (src, dst) = (ss.remainder(), ds.into_remainder());
    let mut a = collapse4(v);
    let k = keys(K_256);
    let mut ss = src.chunks_exact(32);
    let mut ds = dst.chunks_exact_mut(32);
    for (s, d) in (&mut ss).zip(&mut ds) {
        a = fold(a, copy(s, 0, d, 0)?, k);
    }
    let tail = ds.into_remainder();
    tail.copy_from_slice(ss.remainder());
    Some(reduce_to_crc(lanes_to_128(a), tail))
}

/// [`super::crc_masked_wide`] with YMM registers: the CRC continued from `init` of `data` with
/// `masks` OR-ed into its first blocks, `PREFETCHT0` issued for `prefetch` along the way (four
/// lines per 256 bytes). Returns `None` unless `masks.len() <= 4` and `data.len() >= 256`.
///
/// # Safety
/// The CPU must support what [`available`] checks. No memory-safety precondition: every load
/// is from a bounds-checked 32-byte array, and a prefetch reads nothing and never faults.
#[target_feature(
    enable = "pclmulqdq",
    enable = "sse2",
    enable = "sse4.1",
    enable = "ssse3",
    enable = "avx",
    enable = "avx2",
    enable = "vpclmulqdq"
)]
pub(crate) unsafe fn crc_masked(init: u32, data: &[u8], masks: &[u128], prefetch: &[u8]) -> Option<u32> {
    if masks.len() > 4 || data.len() < 256 {
        return None;
    }
    let (head, data) = data.split_first_chunk::<128>()?;
    let m = masks_256(masks);
    let mut v = load4(head);
    v[0] = arch::_mm256_xor_si256(arch::_mm256_or_si256(v[0], m[0]), seed(init));
    v[1] = arch::_mm256_or_si256(v[1], m[1]);
    let k = keys(K_1024);
    let mut fetched = 0;
    let mut steps = data.chunks_exact(128);
    for s in &mut steps {
        super::prefetch_step(prefetch, &mut fetched, 128);
        fold4(&mut v, load4(s.first_chunk()?), k);
    }
    let mut a = collapse4(v);
    let k = keys(K_256);
    let mut rest = steps.remainder().chunks_exact(32);
    for s in &mut rest {
        a = fold(a, load(s, 0)?, k);
    }
    Some(reduce_to_crc(lanes_to_128(a), rest.remainder()))
}

/// [`super::copy_icrc_stream`] with YMM registers: `src` is copied to `l3[h..h + src.len()]`
/// while the whole packet (headers from `l3`, block `i` OR-ed with `masks[i]`, then payload,
/// then what follows it in `l3`) is folded into one CRC continued from `init`. Returns `None`
/// (nothing written) unless the masks only cover bytes before `h`, `h <= 128`,
/// `h + src.len() <= l3.len()` and `h + src.len() >= 256`.
///
/// # Safety
/// The CPU must support what [`available`] checks. No memory-safety precondition: every load
/// and store is within a bounds-checked 32-byte array of `l3` or `src`, and a prefetch reads
/// nothing and never faults.
#[target_feature(
    enable = "pclmulqdq",
    enable = "sse2",
    enable = "sse4.1",
    enable = "ssse3",
    enable = "avx",
    enable = "avx2",
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
    // The payload bytes sharing a 32-byte chunk with the headers go in first, so the first
    // step (bytes 0..128, `h <= 128`) reads headers and those bytes from `l3` and the rest of
    // its payload from `src`; from byte 128 on every step copies payload.
    let hp = h.next_multiple_of(32);
    l3.get_mut(h..hp)?.copy_from_slice(src.get(..hp - h)?);
    let mut v = [arch::_mm256_setzero_si256(); 4];
    for (j, a) in v.iter_mut().enumerate() {
        let o = 32 * j;
        *a = if o < hp { load(l3, o)? } else { copy(src, o - h, l3, o)? };
    }
    let m = masks_256(masks);
    v[0] = arch::_mm256_xor_si256(arch::_mm256_or_si256(v[0], m[0]), seed(init));
    v[1] = arch::_mm256_or_si256(v[1], m[1]);
    let k = keys(K_1024);
    // Whole steps of payload: frame bytes 128 .. bulk.
    let bulk = end / 128 * 128;
    let mut fetched = 0;
    let src_bulk = src.get(128 - h..bulk - h)?;
    let dst_bulk = l3.get_mut(128..bulk)?;
    for (s, d) in src_bulk.chunks_exact(128).zip(dst_bulk.chunks_exact_mut(128)) {
        super::prefetch_step(prefetch, &mut fetched, 128);
        fold4(&mut v, copy4(s.first_chunk()?, d.first_chunk_mut()?), k);
    }
    // The rest of the payload (< 128 bytes; `bulk >= 256 > hp`), then fold what follows in the
    // frame (that payload, then the pad) from `l3`, still in L1.
    l3.get_mut(bulk..end)?.copy_from_slice(src.get(bulk - h..)?);
    let mut a = collapse4(v);
    let k = keys(K_256);
    let mut rest = l3.get(bulk..)?.chunks_exact(32);
    for s in &mut rest {
        a = fold(a, load(s, 0)?, k);
    }
    Some(reduce_to_crc(lanes_to_128(a), rest.remainder()))
}

/// [`super::crc_masked_small`] with YMM registers: the ICRC (from the LRH stand-in on) of a
/// packet of 64 to 255 bytes, a multiple of 4, whose first 64 bytes hold the whole masked
/// prefix. The packet is read as if `pad` zero bytes came first (`pad` makes the length a
/// multiple of 64), so each 16-byte block is multiplied onto the last by a fixed key. `None`
/// for other lengths.
///
/// # Safety
/// The CPU must support what [`available`] checks. No memory-safety precondition: every load
/// is within a bounds-checked subslice of `data` or of a static table (the masked loads of the
/// first chunk only touch their selected dwords, which lie inside `data`).
#[target_feature(
    enable = "pclmulqdq",
    enable = "sse2",
    enable = "sse4.1",
    enable = "ssse3",
    enable = "avx",
    enable = "avx2",
    enable = "vpclmulqdq"
)]
pub(crate) unsafe fn crc_masked_small(data: &[u8], v6: bool) -> Option<u32> {
    if !data.len().is_multiple_of(4) {
        return None;
    }
    // `pad` is then a multiple of 4 too (0..=60)
    let SmallLayout { pre, chunks, pad, tail } = SmallLayout::of(data, v6)?;
    // Variant bytes zeroed, then the pattern (ones there, the LRH seed in front) XOR-ed in, for
    // the 32 bytes at `at` of a chunk that starts `64 - at` bytes before the packet's byte 64.
    let prefix = |v: arch::__m256i, at: usize| -> Option<arch::__m256i> {
        Some(arch::_mm256_xor_si256(arch::_mm256_and_si256(v, load(&pre.keep, at)?), load(&pre.pattern, at)?))
    };
    // Chunk 0: `pad` zeros, then data[..64 - pad]. Dword `i` of half `h` is padded-packet byte
    // `32 h + 4 i`, read when that is at least `pad` (the mask's sign bit set).
    let dwords = arch::_mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
    let first = |h: usize| -> arch::__m256i {
        let at = arch::_mm256_add_epi32(dwords, arch::_mm256_set1_epi32(32 * h as i32 - pad as i32));
        let mask = arch::_mm256_xor_si256(at, arch::_mm256_set1_epi32(-1));
        // SAFETY: the dwords selected by `mask` are padded bytes `pad..64`, which read
        // `data.as_ptr() - pad + byte`, i.e. exactly within `data[0 .. 64 - pad]` (64 <= n).
        // Masked-off dwords are not accessed and do not fault: the pointer is formed with
        // wrapping arithmetic and never dereferenced outside the selected dwords.
        unsafe { arch::_mm256_maskload_epi32(data.as_ptr().wrapping_sub(pad).wrapping_add(32 * h).cast(), mask) }
    };
    let c0 = [prefix(first(0), 64 - pad)?, prefix(first(1), 96 - pad)?];
    let keys = |q: usize, h: usize| -> Option<arch::__m256i> {
        let k = SMALL_KEYS[q & 3].get(4 * h..)?.first_chunk::<4>()?;
        // SAFETY: `k` is 32 readable bytes.
        Some(unsafe { arch::_mm256_loadu_si256(k.as_ptr().cast()) })
    };
    let mul = |v: [arch::__m256i; 2], q: usize| -> Option<arch::__m256i> {
        let (k0, k1) = (keys(q, 0)?, keys(q, 1)?);
        let lo = arch::_mm256_xor_si256(
            arch::_mm256_clmulepi64_epi128(v[0], k0, 0x00),
            arch::_mm256_clmulepi64_epi128(v[0], k0, 0x11),
        );
        let hi = arch::_mm256_xor_si256(
            arch::_mm256_clmulepi64_epi128(v[1], k1, 0x00),
            arch::_mm256_clmulepi64_epi128(v[1], k1, 0x11),
        );
        Some(arch::_mm256_xor_si256(lo, hi))
    };
    // The last block of the last chunk is added as it is (its key is 0).
    let last_lane = |v: [arch::__m256i; 2]| arch::_mm256_blend_epi32::<0xf0>(arch::_mm256_setzero_si256(), v[1]);
    let chunk = |i: usize| -> Option<[arch::__m256i; 2]> { Some([load(tail, 64 * i)?, load(tail, 64 * i + 32)?]) };
    let acc = if chunks == 1 {
        arch::_mm256_xor_si256(mul(c0, 0)?, last_lane(c0))
    } else {
        // Chunk 1 holds data[64 - pad .. 128 - pad]: its first `pad` bytes may be variant
        // bytes of the prefix (which ends before byte 64).
        let mut c1 = chunk(0)?;
        if pad > 0 {
            c1 = [prefix(c1[0], 128 - pad)?, prefix(c1[1], 160 - pad)?];
        }
        let mut acc = mul(c0, chunks - 1)?;
        let mut q = chunks - 1;
        let mut last = c1;
        for i in 1..chunks - 1 {
            q -= 1;
            acc = arch::_mm256_xor_si256(acc, mul(last, q)?);
            last = chunk(i)?;
        }
        arch::_mm256_xor_si256(arch::_mm256_xor_si256(acc, mul(last, 0)?), last_lane(last))
    };
    let x = arch::_mm_xor_si128(arch::_mm256_castsi256_si128(acc), arch::_mm256_extracti128_si256(acc, 1));
    Some(reduce_to_crc(x, &[]))
}

#[cfg(all(test, feature = "std"))]
mod tests {
    use super::*;

    fn bytes(n: usize, seed: u32) -> Vec<u8> {
        (0..n as u32).map(|i| (i.wrapping_mul(2_654_435_761).wrapping_add(seed) >> 13) as u8).collect()
    }

    fn crc_of(init: u32, data: &[u8]) -> u32 {
        let mut h = crc32fast::Hasher::new_with_initial(init);
        h.update(data);
        h.finalize()
    }

    #[test]
    fn copy_crc_is_a_copy_then_a_crc() {
        if !available() {
            return;
        }
        for n in (0..700).chain([4096, 4097, 4127, 8191]) {
            let src = bytes(n, n as u32);
            let mut dst = vec![0xa5; n];
            // SAFETY: `available` checked the CPU features.
            let got = unsafe { copy_crc(0x1234_5678, &src, &mut dst) };
            if n < 128 {
                assert_eq!(got, None, "{n}");
                assert!(dst.iter().all(|&b| b == 0xa5));
                continue;
            }
            assert_eq!(got, Some(crc_of(0x1234_5678, &src)), "{n}");
            assert_eq!(dst, src, "{n}");
        }
        let mut short = [0u8; 200];
        // SAFETY: as above.
        assert_eq!(unsafe { copy_crc(0, &[1; 201], &mut short) }, None);
    }

    #[test]
    fn masked_crc_is_the_crc_of_the_masked_bytes() {
        if !available() {
            return;
        }
        let masks = [0x00ff_0000_ffff_0000_0000_00ff_0000_ff00u128, 0xff00, 0xffff << 80, 0x0f];
        for n in (200..700).chain([4096, 4150]) {
            let data = bytes(n, 7);
            for k in 0..=4 {
                let mut masked = data.clone();
                for (i, m) in masks[..k].iter().enumerate() {
                    for b in 0..16 {
                        masked[16 * i + b] |= (m >> (8 * b)) as u8;
                    }
                }
                let prefetch = vec![0u8; 5000];
                // SAFETY: `available` checked the CPU features.
                let got = unsafe { crc_masked(0x2144_df1c, &data, &masks[..k], &prefetch) };
                let want = (n >= 256).then(|| crc_of(0x2144_df1c, &masked));
                assert_eq!(got, want, "{n} {k}");
            }
        }
        // SAFETY: as above.
        assert_eq!(unsafe { crc_masked(0, &[0; 300], &[0; 5], &[]) }, None);
    }

    #[test]
    fn the_stream_is_a_copy_then_a_masked_crc() {
        if !available() {
            return;
        }
        let masks = [0x00ff_0000_0000_0000_0000_00ff_0000_ff00u128, 0xff00, 0xffff];
        for h in [40, 44, 56, 60, 64, 76, 96, 100, 128] {
            for len in [216, 256, 300, 1000, 1024, 4096, 4093] {
                for pad in [0, 3] {
                    let total = h + len + pad;
                    let mut l3 = bytes(total, 3);
                    let src = bytes(len, 99);
                    let mut want = l3.clone();
                    want[h..h + len].copy_from_slice(&src);
                    let mut masked = want.clone();
                    for (i, m) in masks.iter().enumerate() {
                        for b in 0..16 {
                            masked[16 * i + b] |= (m >> (8 * b)) as u8;
                        }
                    }
                    // SAFETY: `available` checked the CPU features.
                    let got = unsafe { copy_icrc_stream(0x2144_df1c, &mut l3, h, &src, &masks, &[]) };
                    if h + len < 256 {
                        assert_eq!(got, None);
                        continue;
                    }
                    assert_eq!(got, Some(crc_of(0x2144_df1c, &masked)), "{h} {len} {pad}");
                    assert_eq!(l3, want, "{h} {len} {pad}");
                }
            }
        }
        // A mask reaching into the payload is refused, nothing written.
        let mut l3 = vec![0u8; 400];
        // SAFETY: as above.
        assert_eq!(unsafe { copy_icrc_stream(0, &mut l3, 40, &[1; 300], &[0, 0, 1 << 64], &[]) }, None);
        assert!(l3.iter().all(|&b| b == 0));
    }

    #[test]
    fn the_small_kernel_is_the_icrc() {
        if !available() {
            return;
        }
        for v6 in [false, true] {
            for n in 40..300 {
                let mut l3 = bytes(n, n as u32);
                l3[0] = if v6 { 0x6a } else { 0x45 };
                // SAFETY: `available` checked the CPU features.
                let got = unsafe { crc_masked_small(&l3, v6) };
                if !(64..256).contains(&n) || !n.is_multiple_of(4) {
                    assert_eq!(got, None, "{n}");
                    continue;
                }
                assert_eq!(got, Some(crate::icrc::reference::icrc(&l3)), "v6 {v6} n {n}");
            }
        }
    }
}
