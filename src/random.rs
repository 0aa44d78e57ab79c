//! Where key material comes from: QPNs, initial PSNs, rkeys/lkeys and every other value a remote
//! attacker must not predict (ReDMArk V1/V2/V5/V6).
//!
//! A run given `--seed S` is reproducible: everything derives from `S`. A run without one takes
//! its seed from the operating system (`getrandom(2)`), never from the clock or the pid — a seed
//! of `time ^ pid` was recovered from one observed QPN in about a second. The engine itself is
//! sans-IO and only ever sees the resulting `DeviceConfig::seed`; every CLI, runtime and ABI entry
//! point asks [`key_seed`] for it.

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
