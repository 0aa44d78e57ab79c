//! Where key material comes from: QPNs, initial PSNs, rkeys/lkeys and every other value a remote
//! attacker must not predict (ReDMArk V1/V2/V5/V6).
//!
//! A run given `--seed S` is reproducible: everything derives from `S`. A run without one takes
//! its seed from the operating system (`getrandom(2)`), never from the clock or the pid — a seed
//! of `time ^ pid` was recovered from one observed QPN in about a second. The engine itself is
//! sans-IO and only ever sees the resulting `DeviceConfig::seed`; the runtime's `Port::open` asks
//! [`key_seed`] for it, with the user's `--seed` or `None`, so every CLI, runtime and ABI entry point
//! gets the same rule.

use anyhow::{Context, Result};

/// A source of entropy: fills the buffer or fails. [`os_entropy`] in production; tests inject
/// their own to show what the seed does (and does not) depend on.
pub type Entropy<'a> = &'a mut dyn FnMut(&mut [u8]) -> std::io::Result<()>;

/// The operating system's CSPRNG (`getrandom(2)`).
pub fn os_entropy(buf: &mut [u8]) -> std::io::Result<()> {
    getrandom::fill(buf).map_err(|e| std::io::Error::other(format!("getrandom: {e}")))
}

/// The seed of a run's key material: `explicit` when the user gave one (`--seed`), else 64 bits
/// from the operating system.
pub fn key_seed(explicit: Option<u64>) -> Result<u64> {
    key_seed_from(explicit, &mut os_entropy)
}

/// [`key_seed`] with the entropy source injected.
pub fn key_seed_from(explicit: Option<u64>, entropy: Entropy<'_>) -> Result<u64> {
    if let Some(s) = explicit {
        return Ok(s);
    }
    let mut b = [0u8; 8];
    entropy(&mut b).context("read a random seed from the operating system")?;
    Ok(u64::from_le_bytes(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An entropy source that hands out `bytes` and records how often it was asked.
    fn fixed(bytes: [u8; 8], calls: &mut u32) -> impl FnMut(&mut [u8]) -> std::io::Result<()> + '_ {
        move |buf: &mut [u8]| {
            *calls += 1;
            buf.copy_from_slice(&bytes[..buf.len()]);
            Ok(())
        }
    }

    #[test]
    fn the_seed_is_the_entropy_and_nothing_else() {
        // Two "processes" started in the same nanosecond with the same pid: all they can differ
        // in is what the OS hands them. The seed is exactly those bytes (nothing of the clock or
        // the pid is mixed in), so two different draws give unrelated seeds and equal draws
        // give equal seeds whenever and wherever they are made.
        let (a_bytes, b_bytes) = ([0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88], [0xa5; 8]);
        let (mut na, mut nb) = (0, 0);
        let a = key_seed_from(None, &mut fixed(a_bytes, &mut na)).unwrap();
        let b = key_seed_from(None, &mut fixed(b_bytes, &mut nb)).unwrap();
        assert_eq!(a, 0x8877_6655_4433_2211, "the entropy's bytes are the seed");
        assert_eq!(b, 0xa5a5_a5a5_a5a5_a5a5);
        assert_eq!((na, nb), (1, 1), "one draw per seed");
        // Later, on another thread (another clock reading, another thread id): the same bytes give
        // the same seed.
        let again = std::thread::spawn(move || key_seed_from(None, &mut fixed(a_bytes, &mut 0)).unwrap());
        assert_eq!(again.join().unwrap(), a, "nothing but the entropy goes in");
        // Every bit of the entropy reaches the seed.
        for bit in 0..64 {
            let mut bytes = a_bytes;
            bytes[bit / 8] ^= 1 << (bit % 8);
            let s = key_seed_from(None, &mut fixed(bytes, &mut 0)).unwrap();
            assert_eq!(s ^ a, 1u64 << bit, "bit {bit}");
        }
    }

    #[test]
    fn an_explicit_seed_wins_and_asks_no_entropy() {
        let mut calls = 0;
        assert_eq!(key_seed_from(Some(7), &mut fixed([0xff; 8], &mut calls)).unwrap(), 7);
        assert_eq!(calls, 0);
    }

    #[test]
    fn failing_entropy_is_an_error_not_a_weak_fallback() {
        let mut broken = |_: &mut [u8]| -> std::io::Result<()> { Err(std::io::Error::other("no entropy")) };
        let e = key_seed_from(None, &mut broken).unwrap_err();
        assert!(format!("{e:#}").contains("random seed from the operating system: no entropy"), "{e:#}");
    }

    #[test]
    fn the_os_source_gives_different_seeds() {
        // 64 bits from getrandom(2): two draws are equal with probability 2^-64.
        let (a, b) = (key_seed(None).unwrap(), key_seed(None).unwrap());
        assert_ne!(a, b);
    }
}
