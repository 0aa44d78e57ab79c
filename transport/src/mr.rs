//! Memory regions: the registered memory, key generation, and the access and bounds checks
//! both sides of a transfer need.
//!
//! A region's memory ([`MrMemory`]) is either
//! * *owned* (`Box<[u8]>` moved in by `reg_mr`, handed back by `dereg_mr`), so safe code can
//!   neither free memory the engine still writes to nor alias it; or
//! * *the application's* ([`AppMemory`], `Device::reg_mr_app`): memory the application keeps
//!   using while it is registered, as every verbs program does with `ibv_reg_mr(pd, addr, len,
//!   access)`. The engine stays free of `unsafe` (`#![forbid(unsafe_code)]`): it reaches such
//!   memory only through the [`AppMemory`] trait, whose implementations — the raw-pointer
//!   access — live in one audited crate, `uroce-mem` (`mem/src/lib.rs`): shared buffers for
//!   Rust programs, raw `(ptr, len)` registrations for the C ABI.
//!
//! Either way, every access goes through [`MrTable::check`] / [`MrTable::slice`] /
//! [`MrTable::slice_mut`]: key, PD, access right and bounds, so the engine reads and writes
//! only inside the registered range. A region's virtual address is the buffer's address (as
//! `ibv_reg_mr` uses the user pointer) unless an explicit IOVA is given (`ibv_reg_mr_iova`).
//! L_Key and R_Key are the same random 32-bit value drawn from the device's seeded RNG: not
//! sequential, not guessable from other keys.

use crate::verbs::{AccessFlags, PdHandle};
use std::collections::HashMap;
use std::fmt;

/// Memory an application keeps while it is registered (`ibv_reg_mr` over the application's
/// own buffer).
///
/// A safe trait: an implementation in safe Rust (over a `Vec`, say) cannot break anything. One
/// over raw memory needs `unsafe` inside, and that is where its obligations lie: from
/// registration until it is dropped (after `dereg_mr`)
/// * [`AppMemory::bytes`] and [`AppMemory::bytes_mut`] return slices over the same `len`
///   bytes at the same address every time, valid for reads (and, for `bytes_mut`, writes) for
///   as long as the borrow lasts;
/// * nothing else holds a Rust reference to those bytes while such a borrow lasts. The engine
///   borrows only inside one of its calls, for one copy; the application may read and write the
///   memory between calls, and during them as the verbs contract allows (not the bytes of a
///   work request that is still outstanding), through raw-pointer or copying accessors, never
///   through a long-lived `&mut [u8]`.
pub trait AppMemory: Send {
    /// The bytes.
    fn bytes(&self) -> &[u8];
    /// The bytes, writable.
    fn bytes_mut(&mut self) -> &mut [u8];
}

/// What a region covers: owned bytes or the application's.
pub enum MrMemory {
    /// Moved in by `reg_mr`; `dereg_mr` gives it back.
    Owned(Box<[u8]>),
    /// The application's ([`AppMemory`]); `dereg_mr` gives the handle back.
    App(Box<dyn AppMemory>),
}

impl MrMemory {
    /// The bytes.
    #[inline]
    pub fn bytes(&self) -> &[u8] {
        match self {
            MrMemory::Owned(b) => b,
            MrMemory::App(m) => m.bytes(),
        }
    }
    /// The bytes, writable.
    #[inline]
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        match self {
            MrMemory::Owned(b) => b,
            MrMemory::App(m) => m.bytes_mut(),
        }
    }
    /// The owned buffer, if the region owned its memory.
    pub fn into_owned(self) -> Option<Box<[u8]>> {
        match self {
            MrMemory::Owned(b) => Some(b),
            MrMemory::App(_) => None,
        }
    }
}

impl std::ops::Deref for MrMemory {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.bytes()
    }
}

impl PartialEq for MrMemory {
    fn eq(&self, other: &MrMemory) -> bool {
        self.bytes() == other.bytes()
    }
}

impl fmt::Debug for MrMemory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = if matches!(self, MrMemory::Owned(_)) { "Owned" } else { "App" };
        write!(f, "MrMemory::{kind}({} bytes at {:p})", self.bytes().len(), self.bytes().as_ptr())
    }
}

/// A hasher for 32-bit keys that are already random or dense (QPNs, memory keys): one
/// multiplication (Fibonacci hashing) instead of SipHash, on the per-packet lookup path.
/// Keys come from the device's RNG or from the peer; a peer choosing keys to collide only
/// slows its own lookups (hashbrown's probing stays correct).
#[derive(Clone, Copy, Default, Debug)]
pub struct U32Hasher(u64);

impl std::hash::Hasher for U32Hasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ b as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }
    fn write_u32(&mut self, n: u32) {
        self.0 = (n as u64 ^ 0x5555_5555).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

/// `BuildHasher` for [`U32Hasher`].
pub type U32Map<V> = HashMap<u32, V, std::hash::BuildHasherDefault<U32Hasher>>;

/// A registered memory region.
#[derive(Debug)]
pub struct MemoryRegion {
    /// Local key.
    pub lkey: u32,
    /// Remote key (equal to `lkey`, as in rxe).
    pub rkey: u32,
    /// Virtual address of the first byte.
    pub addr: u64,
    /// Access rights.
    pub access: AccessFlags,
    /// Protection domain.
    pub pd: PdHandle,
    memory: MrMemory,
}

impl MemoryRegion {
    /// Bytes covered.
    pub fn len(&self) -> usize {
        self.memory.len()
    }
    /// Zero-length region?
    pub fn is_empty(&self) -> bool {
        self.memory.is_empty()
    }
    /// The memory.
    #[inline]
    pub fn as_slice(&self) -> &[u8] {
        self.memory.bytes()
    }
    /// The memory, writable.
    #[inline]
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        self.memory.bytes_mut()
    }
    /// Whether the region is over application memory ([`AppMemory`]).
    pub fn is_app_memory(&self) -> bool {
        matches!(self.memory, MrMemory::App(_))
    }
    /// Offset of `[va, va + len)` inside the region, if it lies inside (`mr_check_range`).
    pub fn offset_of(&self, va: u64, len: u64) -> Option<usize> {
        let off = va.checked_sub(self.addr)?;
        let end = off.checked_add(len)?;
        (end <= self.len() as u64).then_some(off as usize)
    }
}

/// Why an access to a region is refused.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum AccessError {
    /// No region has this key.
    NoSuchKey,
    /// The region belongs to another protection domain.
    WrongPd,
    /// The region lacks the access right.
    NoPermission,
    /// The range is not inside the region.
    OutOfBounds,
}

/// All regions of a device, by key (a [`KeyedSlab`](crate::slab::KeyedSlab): a run of packets
/// through one region skips the hash lookup).
#[derive(Debug, Default)]
pub struct MrTable {
    by_key: crate::slab::KeyedSlab<MemoryRegion>,
}

impl MrTable {
    /// Add a region under the first key drawn by `next_key` that is non-zero and free (up to 8
    /// draws). Returns the key and the region's address, or `None` if no key was found.
    pub fn insert(
        &mut self,
        pd: PdHandle,
        memory: MrMemory,
        iova: Option<u64>,
        access: AccessFlags,
        next_key: &mut dyn FnMut() -> u32,
    ) -> Option<(u32, u64)> {
        let key = (0..8).map(|_| next_key()).find(|k| *k != 0 && !self.by_key.contains_key(*k))?;
        let addr = iova.unwrap_or(memory.bytes().as_ptr() as u64);
        self.by_key.insert(key, MemoryRegion { lkey: key, rkey: key, addr, access, pd, memory });
        Some((key, addr))
    }

    /// Give the region under `key` new memory (at `iova`, or the memory's own address), keeping
    /// its key; the old memory comes back. `None`: no such key.
    pub fn retranslate(&mut self, key: u32, memory: MrMemory, iova: Option<u64>) -> Option<MrMemory> {
        let mr = self.by_key.get_mut(key)?;
        mr.addr = iova.unwrap_or(memory.bytes().as_ptr() as u64);
        Some(core::mem::replace(&mut mr.memory, memory))
    }

    /// Remove a region and hand its memory back.
    pub fn remove(&mut self, key: u32) -> Option<MrMemory> {
        self.by_key.remove(key).map(|m| m.memory)
    }

    /// Look up by key.
    pub fn get(&self, key: u32) -> Option<&MemoryRegion> {
        self.by_key.get(key)
    }

    /// Look up by key, writable.
    pub fn get_mut(&mut self, key: u32) -> Option<&mut MemoryRegion> {
        self.by_key.get_mut(key)
    }

    /// Number of regions in `pd`.
    pub fn count_in_pd(&self, pd: PdHandle) -> usize {
        self.by_key.values().filter(|m| m.pd == pd).count()
    }

    /// Check an access of `len` bytes at `va` through `key` from `pd` needing `need`; returns
    /// the offset in the region. A zero `need` skips the permission check (local reads).
    pub fn check(&self, key: u32, pd: PdHandle, va: u64, len: u64, need: AccessFlags) -> Result<usize, AccessError> {
        let mr = self.by_key.get(key).ok_or(AccessError::NoSuchKey)?;
        Self::check_mr(mr, pd, va, len, need)
    }

    fn check_mr(mr: &MemoryRegion, pd: PdHandle, va: u64, len: u64, need: AccessFlags) -> Result<usize, AccessError> {
        if mr.pd != pd {
            return Err(AccessError::WrongPd);
        }
        if !mr.access.contains(need) {
            return Err(AccessError::NoPermission);
        }
        mr.offset_of(va, len).ok_or(AccessError::OutOfBounds)
    }

    /// [`MrTable::check`], then the checked bytes themselves (one lookup).
    pub fn slice(&self, key: u32, pd: PdHandle, va: u64, len: usize, need: AccessFlags) -> Result<&[u8], AccessError> {
        let mr = self.by_key.get(key).ok_or(AccessError::NoSuchKey)?;
        let off = Self::check_mr(mr, pd, va, len as u64, need)?;
        Ok(&mr.as_slice()[off..off + len])
    }

    /// [`MrTable::check`], then the checked bytes, writable (one lookup).
    pub fn slice_mut(
        &mut self,
        key: u32,
        pd: PdHandle,
        va: u64,
        len: usize,
        need: AccessFlags,
    ) -> Result<&mut [u8], AccessError> {
        let mr = self.by_key.get_mut(key).ok_or(AccessError::NoSuchKey)?;
        let off = Self::check_mr(mr, pd, va, len as u64, need)?;
        Ok(&mut mr.as_mut_slice()[off..off + len])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn table() -> (MrTable, u32, u64) {
        let mut t = MrTable::default();
        let mut k = 0x1234_0000u32;
        let (key, addr) = t
            .insert(
                PdHandle(1),
                MrMemory::Owned(vec![0u8; 4096].into_boxed_slice()),
                Some(0x10_0000),
                AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
                &mut || {
                    k += 1;
                    k
                },
            )
            .unwrap();
        (t, key, addr)
    }

    #[test]
    fn checks() {
        let (t, key, addr) = table();
        assert_eq!(addr, 0x10_0000);
        assert_eq!(t.check(key, PdHandle(1), addr, 4096, AccessFlags::REMOTE_WRITE), Ok(0));
        assert_eq!(t.check(key, PdHandle(1), addr + 4000, 96, AccessFlags::REMOTE_WRITE), Ok(4000));
        assert_eq!(
            t.check(key, PdHandle(1), addr + 4000, 97, AccessFlags::REMOTE_WRITE),
            Err(AccessError::OutOfBounds)
        );
        assert_eq!(t.check(key, PdHandle(1), addr - 1, 1, AccessFlags::REMOTE_WRITE), Err(AccessError::OutOfBounds));
        assert_eq!(t.check(key, PdHandle(1), u64::MAX, 2, AccessFlags::NONE), Err(AccessError::OutOfBounds));
        assert_eq!(t.check(key, PdHandle(2), addr, 1, AccessFlags::NONE), Err(AccessError::WrongPd));
        assert_eq!(t.check(key, PdHandle(1), addr, 1, AccessFlags::REMOTE_READ), Err(AccessError::NoPermission));
        assert_eq!(t.check(key ^ 1, PdHandle(1), addr, 1, AccessFlags::NONE), Err(AccessError::NoSuchKey));
    }

    #[test]
    fn default_address_is_the_buffer() {
        let mut t = MrTable::default();
        let mem = vec![0u8; 64].into_boxed_slice();
        let p = mem.as_ptr() as u64;
        let (_, addr) = t.insert(PdHandle(0), MrMemory::Owned(mem), None, AccessFlags::NONE, &mut || 7).unwrap();
        assert_eq!(addr, p);
    }

    proptest! {
        /// The bounds check against a naive model.
        #[test]
        fn bounds_model(va in any::<u64>(), len in any::<u64>()) {
            let (t, key, addr) = table();
            let naive = va >= addr && (va as u128 + len as u128) <= addr as u128 + 4096;
            let got = t.check(key, PdHandle(1), va, len, AccessFlags::NONE);
            prop_assert_eq!(got.is_ok(), naive);
            if let Ok(off) = got {
                prop_assert_eq!(off as u64, va - addr);
            }
        }
    }
}
