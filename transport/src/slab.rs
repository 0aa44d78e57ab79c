//! Values named by sparse 32-bit keys (QPNs, memory keys): a slab of values, a compact
//! `key → slot` index, and the recent lookups remembered.
//!
//! Every frame and every verb names a QP and a memory region by key. With thousands of them
//! their states do not fit in the cache, and a hash map holding the states inline costs two
//! misses per lookup (its control bytes, then the key inside a large entry) before the state's
//! own. Here the index holds only `key → slot` (8-byte entries: 10,000 keys in ~150 KiB) and
//! the values live in a slab. In front of the index, a small direct-mapped table of recent
//! lookups (2 KiB, [`RECENT`] entries: it stays in the L1 cache where the index, with thousands
//! of QP states streaming past it, does not) answers for the keys in use now — one QP's run of
//! frames, the QPs with messages in flight, one region's packets. An entry is used only when
//! its slot still holds its key (a slot records its key), so a removed or reused slot can
//! never answer for another key.

use crate::mr::U32Map;
use std::sync::atomic::{AtomicU64, Ordering};

/// Values by 32-bit key.
#[derive(Debug)]
pub struct KeyedSlab<T> {
    index: U32Map<u32>,
    slots: Vec<Option<(u32, T)>>,
    free: Vec<u32>,
    /// Recent lookups, by a hash of the key: the key (low half) and its slot (high half).
    /// Relaxed atomics: hints that lookups through `&self` may update, verified against the
    /// slot before use.
    recent: Box<[AtomicU64; RECENT]>,
}

/// Entries in a [`KeyedSlab`]'s table of recent lookups.
pub const RECENT: usize = 256;

/// The recent-lookup entry of `key` (Fibonacci hashing: keys from an RNG or a counter spread).
#[inline]
fn recent_of(key: u32) -> usize {
    (key.wrapping_mul(0x9e37_79b1) >> 24) as usize % RECENT
}

impl<T> Default for KeyedSlab<T> {
    fn default() -> Self {
        KeyedSlab {
            index: U32Map::default(),
            slots: Vec::new(),
            free: Vec::new(),
            recent: Box::new([const { AtomicU64::new(u64::MAX) }; RECENT]),
        }
    }
}

impl<T> KeyedSlab<T> {
    /// Number of values.
    pub fn len(&self) -> usize {
        self.index.len()
    }
    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }
    /// Whether `key` names a value.
    pub fn contains_key(&self, key: u32) -> bool {
        self.index.contains_key(&key)
    }

    /// The slot holding `key`: the remembered one if it still holds it, else the index's.
    #[inline]
    fn slot_of(&self, key: u32) -> Option<usize> {
        let r = &self.recent[recent_of(key)];
        let e = r.load(Ordering::Relaxed);
        if e as u32 == key {
            let s = (e >> 32) as usize;
            if matches!(self.slots.get(s), Some(Some((k, _))) if *k == key) {
                return Some(s);
            }
        }
        let s = *self.index.get(&key)?;
        r.store(key as u64 | (s as u64) << 32, Ordering::Relaxed);
        Some(s as usize)
    }

    /// The value under `key`.
    #[inline]
    pub fn get(&self, key: u32) -> Option<&T> {
        let s = self.slot_of(key)?;
        self.slots.get(s)?.as_ref().map(|(_, v)| v)
    }
    /// The value under `key`, writable.
    #[inline]
    pub fn get_mut(&mut self, key: u32) -> Option<&mut T> {
        let s = self.slot_of(key)?;
        self.slots.get_mut(s)?.as_mut().map(|(_, v)| v)
    }
    /// Put `value` under `key`, replacing (and returning) what was there.
    pub fn insert(&mut self, key: u32, value: T) -> Option<T> {
        if let Some(&s) = self.index.get(&key) {
            return self.slots[s as usize].replace((key, value)).map(|(_, v)| v);
        }
        let s = match self.free.pop() {
            Some(s) => {
                self.slots[s as usize] = Some((key, value));
                s
            }
            None => {
                self.slots.push(Some((key, value)));
                (self.slots.len() - 1) as u32
            }
        };
        self.index.insert(key, s);
        None
    }
    /// Remove the value under `key`.
    pub fn remove(&mut self, key: u32) -> Option<T> {
        let s = self.index.remove(&key)?;
        self.free.push(s);
        self.slots[s as usize].take().map(|(_, v)| v)
    }
    /// Every value.
    pub fn values(&self) -> impl Iterator<Item = &T> {
        self.slots.iter().flatten().map(|(_, v)| v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    proptest! {
        /// Against a `HashMap` model, whatever the order of inserts, removals and lookups:
        /// the remembered slot never answers for a key it no longer holds.
        #[test]
        fn behaves_as_a_map(ops in proptest::collection::vec((0u8..4, 0u32..6, any::<u16>()), 0..200), spread in any::<bool>()) {
            let shared: Vec<u32> = (0..).filter(|&k| recent_of(k) == recent_of(0)).take(6).collect();
            let mut s = KeyedSlab::default();
            let mut m = HashMap::new();
            for (op, k, v) in ops {
                // Keys 0..6, or six keys that share one recent-lookup entry.
                let k = if spread { k } else { shared[k as usize] };
                match op {
                    0 => prop_assert_eq!(s.insert(k, v), m.insert(k, v)),
                    1 => prop_assert_eq!(s.remove(k), m.remove(&k)),
                    2 => prop_assert_eq!(s.get(k), m.get(&k)),
                    _ => prop_assert_eq!(s.get_mut(k).map(|x| { *x ^= 1; *x }), m.get_mut(&k).map(|x| { *x ^= 1; *x })),
                }
                prop_assert_eq!(s.len(), m.len());
                prop_assert_eq!(s.contains_key(k), m.contains_key(&k));
            }
            let mut a: Vec<_> = s.values().copied().collect();
            let mut b: Vec<_> = m.values().copied().collect();
            a.sort_unstable();
            b.sort_unstable();
            prop_assert_eq!(a, b);
        }
    }
}
