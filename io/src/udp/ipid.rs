//! The IPv4 identification and DF bit as the ICRC sees them: linear algebra over GF(2).
//!
//! A kernel UDP socket neither reports the IPv4 identification (ID) of a received datagram
//! nor lets a sender choose it, yet the ICRC covers the ID and the flags (IBTA A17.4.5.1: only
//! ToS, TTL and the header checksum are masked). A CRC is affine in its input, so flipping
//! bits of the header changes the ICRC by a value that depends only on *which* bits flipped and
//! on how many bytes follow them:
//!
//! ```text
//! ICRC(header with ID = i, DF = d) = ICRC(header with ID 0, DF 1) ⊕ Σ_bits δ_len(bit)
//! ```
//!
//! where `δ_len(bit) = T[bit] · x^(8·k) mod P` (`T` the byte table of the reflected CRC-32,
//! `k` the bytes after the flipped byte). This gives the UDP backend two cheap operations:
//!
//! * [`IdSolver::delta`]: the ICRC change for an ID/DF change (patch a frame the engine built
//!   for ID 0 into the frame the kernel will put on the wire with ID `i`: UDP GSO numbers its
//!   segments 0, 1, 2, ...);
//! * [`IdSolver::solve`]: given the ICRC a received datagram carries and the one computed with
//!   ID 0 + DF, find the (ID, DF) the sender used — 17 unknowns, 32 equations, solved by
//!   Gaussian elimination over the 17 columns `δ_len`. The columns are linearly independent
//!   (a CRC-32 detects every burst of ≤ 32 bits, and the 17 bits lie within 3 bytes), so a
//!   solution, when there is one, is unique.
//!
//! Cost: `x^(8k) mod P` by square-and-multiply (zlib's `x2nmodp`, ≤ 13 GF(2^32) products),
//! 17 more products for the columns, a 17-step elimination; cached per IPv4 total length in a
//! 64-entry direct-mapped cache (a WRITE burst is a run of equal lengths). Measured by the
//! unit test `solver_cost` in a release build on this VM: 1.3 µs for a new length, 8 ns for a
//! cached one.
//!
//! The price of recovering the ID: of the 2^32 possible ICRC mismatches only 2^17 are
//! explained by an (ID, DF) pair, so a corrupted datagram slips through with probability
//! 2^-15 instead of 2^-32 (Ethernet's FCS and, when the peer sends one, the UDP checksum still
//! stand in front of it).

/// The reflected CRC-32 polynomial (zlib / IEEE 802.3; the ICRC uses it).
const POLY: u32 = 0xedb8_8320;

/// `a · b mod P` in the reflected representation (zlib `multmodp`): bit 31 is x^0.
const fn multmodp(a: u32, mut b: u32) -> u32 {
    let mut p = 0u32;
    let mut m = 1u32 << 31;
    while m != 0 {
        if a & m != 0 {
            p ^= b;
        }
        m >>= 1;
        b = if b & 1 != 0 { (b >> 1) ^ POLY } else { b >> 1 };
    }
    p
}

/// `x^(2^k) mod P` for k = 0..32.
const X2N: [u32; 32] = {
    let mut t = [0u32; 32];
    let mut p = 1u32 << 30; // x^1
    let mut k = 0;
    while k < 32 {
        t[k] = p;
        p = multmodp(p, p);
        k += 1;
    }
    t
};

/// `x^(8n) mod P`: the effect of `n` zero bytes on a CRC register.
const fn x8nmodp(mut n: u64) -> u32 {
    let mut p = 1u32 << 31; // x^0
    let mut k = 3; // 8 = 2^3
    while n != 0 {
        if n & 1 != 0 {
            p = multmodp(X2N[k & 31], p);
        }
        n >>= 1;
        k += 1;
    }
    p
}

/// The raw CRC register after feeding byte `e` into a zero register (`crc32` table entry).
const fn byte_table(e: u8) -> u32 {
    let mut c = e as u32;
    let mut i = 0;
    while i < 8 {
        c = if c & 1 != 0 { (c >> 1) ^ POLY } else { c >> 1 };
        i += 1;
    }
    c
}

/// Unknowns: bits 0..16 of the ID value (bit 15 = MSB of header byte 4), then DF.
pub const UNKNOWNS: usize = 17;
/// Index of the DF unknown.
pub const DF_BIT: usize = 16;

/// Column `i` of the system for a packet whose flags byte (IPv4 header byte 6) is followed by
/// `k` bytes: `COL[i] · x^(8k)`. `COL` holds each bit's effect as if followed by 0 bytes.
const COL: [u32; UNKNOWNS] = {
    let mut c = [0u32; UNKNOWNS];
    let x8 = x8nmodp(1);
    let x16 = x8nmodp(2);
    let mut j = 0;
    while j < 8 {
        // ID bit j (low byte, header byte 5: one byte before the flags byte).
        c[j] = multmodp(x8, byte_table(1 << j));
        // ID bit 8 + j (high byte, header byte 4: two bytes before the flags byte).
        c[8 + j] = multmodp(x16, byte_table(1 << j));
        j += 1;
    }
    c[DF_BIT] = byte_table(0x40); // DF: 0x40 in header byte 6
    c
};

/// The ICRC stream is 8 bytes of 0xFF, then the IP packet up to (not including) the ICRC; the
/// flags byte sits at stream offset 8 + 6. Bytes after it, for an IPv4 total length `total`:
fn bytes_after_flags(total: usize) -> u64 {
    // stream length = 8 + total - 4; after offset 14: (8 + total - 4) - 14 - 1
    (total as u64).saturating_sub(11)
}

/// The reduced system for one packet length.
#[derive(Clone, Copy, Debug)]
struct Basis {
    total: usize,
    /// Column values (the δ of each unknown).
    cols: [u32; UNKNOWNS],
    /// Row-echelon vectors, each with the unknowns it combines; `n` are valid.
    vecs: [(u32, u32); UNKNOWNS],
    /// Pivot bit of each echelon vector.
    pivots: [u32; UNKNOWNS],
    n: usize,
}

impl Basis {
    fn new(total: usize, allowed: u32) -> Basis {
        let k = x8nmodp(bytes_after_flags(total));
        let mut cols = [0u32; UNKNOWNS];
        for (c, base) in cols.iter_mut().zip(COL) {
            *c = multmodp(k, base);
        }
        let mut b = Basis { total, cols, vecs: [(0, 0); UNKNOWNS], pivots: [0; UNKNOWNS], n: 0 };
        for (i, &c) in cols.iter().enumerate() {
            if allowed & (1 << i) == 0 {
                continue;
            }
            let (mut v, mut m) = (c, 1u32 << i);
            for j in 0..b.n {
                if v & b.pivots[j] != 0 {
                    v ^= b.vecs[j].0;
                    m ^= b.vecs[j].1;
                }
            }
            if v != 0 {
                // Highest set bit as pivot.
                let p = 1u32 << (31 - v.leading_zeros());
                b.vecs[b.n] = (v, m);
                b.pivots[b.n] = p;
                b.n += 1;
            }
        }
        b
    }

    fn solve(&self, syndrome: u32) -> Option<u32> {
        let (mut s, mut m) = (syndrome, 0u32);
        for j in 0..self.n {
            if s & self.pivots[j] != 0 {
                s ^= self.vecs[j].0;
                m ^= self.vecs[j].1;
            }
        }
        (s == 0).then_some(m)
    }
}

/// What a received datagram's sender put in the IPv4 header, as recovered from its ICRC.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IdDf {
    /// Identification.
    pub ident: u16,
    /// Don't-fragment flag.
    pub dont_frag: bool,
}

/// Cached ICRC deltas and solvers, per IPv4 total length (a small direct-mapped cache).
#[derive(Clone, Debug)]
pub struct IdSolver {
    cache: Vec<Option<Basis>>,
    allowed: u32,
}

const CACHE: usize = 64;

impl IdSolver {
    /// A solver. `recover_ident`: solve for ID and DF (17 unknowns); otherwise for DF alone.
    pub fn new(recover_ident: bool) -> IdSolver {
        let allowed = if recover_ident { (1 << UNKNOWNS) - 1 } else { 1 << DF_BIT };
        IdSolver { cache: vec![None; CACHE], allowed }
    }

    fn basis(&mut self, total: usize) -> &Basis {
        let slot = total % CACHE;
        let hit = matches!(&self.cache[slot], Some(b) if b.total == total);
        if !hit {
            self.cache[slot] = Some(Basis::new(total, self.allowed));
        }
        // Filled just above.
        self.cache[slot].as_ref().unwrap_or_else(|| unreachable!())
    }

    /// The ICRC change when the header of an IPv4 packet of `total` bytes changes from
    /// (ID `a`, DF `da`) to (ID `b`, DF `db`): `icrc_b = icrc_a ^ delta`.
    pub fn delta(&mut self, total: usize, from: IdDf, to: IdDf) -> u32 {
        let x = u32::from(from.ident ^ to.ident) | (u32::from(from.dont_frag != to.dont_frag) << DF_BIT);
        let b = self.basis(total);
        let mut d = 0;
        for (i, c) in b.cols.iter().enumerate() {
            if x & (1 << i) != 0 {
                d ^= c;
            }
        }
        d
    }

    /// The (ID, DF) that explains an ICRC mismatch of an IPv4 packet of `total` bytes whose
    /// ICRC was `computed` with ID 0 and DF set but carries `found`; `None` if no allowed
    /// (ID, DF) explains it (then the packet is corrupt, or the sender used IPv4 options).
    pub fn solve(&mut self, total: usize, computed: u32, found: u32) -> Option<IdDf> {
        let m = self.basis(total).solve(computed ^ found)?;
        Some(IdDf { ident: (m & 0xffff) as u16, dont_frag: m & (1 << DF_BIT) == 0 })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use uroce_wire::icrc;

    #[test]
    fn gf2_helpers_match_a_bitwise_crc() {
        // x^(8n) applied to a register equals feeding n zero bytes bit by bit.
        for n in [0u64, 1, 2, 3, 7, 100, 4095] {
            let reg = 0x1234_5678u32;
            let mut r = reg;
            for _ in 0..n * 8 {
                r = if r & 1 != 0 { (r >> 1) ^ POLY } else { r >> 1 };
            }
            assert_eq!(multmodp(x8nmodp(n), reg), r, "n={n}");
        }
        assert_eq!(byte_table(1), 0x7707_3096); // crc32 table[1]
    }

    /// A minimal IPv4/UDP/BTH(SEND_ONLY)/payload packet with a sealed ICRC.
    fn packet(total: usize, ident: u16, df: bool, seed: u8) -> Vec<u8> {
        let mut p = vec![0u8; total];
        p[0] = 0x45;
        p[2..4].copy_from_slice(&(total as u16).to_be_bytes());
        p[4..6].copy_from_slice(&ident.to_be_bytes());
        p[6] = if df { 0x40 } else { 0 };
        p[8] = 64;
        p[9] = 17;
        p[12..16].copy_from_slice(&[10, 0, 0, 1]);
        p[16..20].copy_from_slice(&[10, 0, 0, 2]);
        p[20..22].copy_from_slice(&4791u16.to_be_bytes());
        p[22..24].copy_from_slice(&4791u16.to_be_bytes());
        p[24..26].copy_from_slice(&((total - 20) as u16).to_be_bytes());
        p[28] = 0x04; // SEND_ONLY
        for (i, b) in p[40..].iter_mut().enumerate() {
            *b = (i as u8).wrapping_mul(31).wrapping_add(seed);
        }
        let c = icrc::compute(&p[..total - 4]).expect("icrc");
        p[total - 4..].copy_from_slice(&c.to_le_bytes());
        p
    }

    fn icrc_of(p: &[u8]) -> u32 {
        icrc::compute(&p[..p.len() - 4]).expect("icrc")
    }

    #[test]
    fn delta_predicts_the_icrc_of_another_id() {
        let mut s = IdSolver::new(true);
        for total in [48usize, 49, 60, 61, 1000, 1068, 4136, 4164] {
            for (ident, df) in [(1u16, true), (0x8000, true), (0xffff, false), (0x1234, true), (0, false)] {
                let base = packet(total, 0, true, 3);
                let other = packet(total, ident, df, 3);
                let d = s.delta(total, IdDf { ident: 0, dont_frag: true }, IdDf { ident, dont_frag: df });
                assert_eq!(icrc_of(&base) ^ d, icrc_of(&other), "total {total} id {ident:#x} df {df}");
            }
        }
    }

    #[test]
    fn solve_recovers_every_id_and_df() {
        let mut s = IdSolver::new(true);
        let mut x = 0x9e37_79b9u32;
        for round in 0..2000 {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            let total = 44 + (x as usize % 4100);
            let ident = (x >> 7) as u16;
            let df = x & 1 == 0;
            let sent = packet(total, ident, df, round as u8);
            let mut zero = sent.clone();
            zero[4..6].copy_from_slice(&[0, 0]);
            zero[6] = 0x40;
            let computed = icrc_of(&zero);
            let found = u32::from_le_bytes(sent[total - 4..].try_into().expect("4 bytes"));
            assert_eq!(s.solve(total, computed, found), Some(IdDf { ident, dont_frag: df }), "total {total}");
        }
    }

    #[test]
    fn df_only_solver_rejects_a_nonzero_id() {
        let mut s = IdSolver::new(false);
        let total = 1068;
        let zero = icrc_of(&packet(total, 0, true, 1));
        let no_df = icrc_of(&packet(total, 0, false, 1));
        let id7 = icrc_of(&packet(total, 7, true, 1));
        assert_eq!(s.solve(total, zero, zero), Some(IdDf { ident: 0, dont_frag: true }));
        assert_eq!(s.solve(total, zero, no_df), Some(IdDf { ident: 0, dont_frag: false }));
        assert_eq!(s.solve(total, zero, id7), None);
    }

    #[test]
    fn corruption_is_mostly_not_explained_by_an_id() {
        // Flip one payload bit: the error is explained by some (ID, DF) with probability
        // 2^-15 per error pattern; none of these (fixed) ones is.
        let mut s = IdSolver::new(true);
        let total = 1068;
        let good = packet(total, 0, true, 9);
        let computed = icrc_of(&good);
        let found = computed;
        for bit in (60 * 8..(total - 4) * 8).step_by(97) {
            let mut bad = good.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            assert_eq!(s.solve(total, icrc_of(&bad), found), None, "bit {bit}");
        }
    }

    #[test]
    fn solver_cost() {
        // Uncached solves (a new length every time): report the cost; the bound is generous
        // so a loaded CI machine does not fail it, but a regression to a per-bit CRC would.
        let mut s = IdSolver::new(true);
        let n = 20_000usize;
        let t = std::time::Instant::now();
        let mut acc = 0u32;
        for i in 0..n {
            let total = 100 + (i * 7) % 4000;
            acc ^= s.solve(total, i as u32, 0).map_or(0, |r| u32::from(r.ident));
        }
        let per = t.elapsed() / n as u32;
        eprintln!("IdSolver::solve, uncached length: {per:?} per packet (acc {acc})");
        assert!(per < std::time::Duration::from_micros(if cfg!(debug_assertions) { 100 } else { 5 }));
        let t = std::time::Instant::now();
        for i in 0..n {
            acc ^= s.solve(1068, i as u32, 0).map_or(0, |r| u32::from(r.ident));
        }
        let per = t.elapsed() / n as u32;
        eprintln!("IdSolver::solve, cached length: {per:?} per packet (acc {acc})");
    }
}
