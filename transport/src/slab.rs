//! Values named by sparse 32-bit keys (QPNs, memory keys): a slab of values, a compact
//! `key → slot` index, and the last lookup remembered.
//!
//! Every frame and every verb names a QP and a memory region by key. With thousands of them
//! their states do not fit in the cache, and a hash map holding the states inline costs two
//! misses per lookup (its control bytes, then the key inside a large entry) before the state's
//! own. Here the index holds only `key → slot` (8-byte entries: 10,000 keys in ~150 KiB, which
//! stay cached) and the values live in a slab. A run of calls naming the same key (one QP's
//! frames, one region's packets) skips the hash lookup altogether: the slot of the last key
//! looked up is kept, and used when the slot still holds that key (a slot records its key, so
//! a removed or reused slot can never answer for another key).

use crate::mr::U32Map;
use std::sync::atomic::{AtomicU64, Ordering};

/// Values by 32-bit key.
#[derive(Debug)]
pub struct KeyedSlab<T> {
    index: U32Map<u32>,
    slots: Vec<Option<(u32, T)>>,
    free: Vec<u32>,
    /// The last key looked up (low half) and its slot (high half). Relaxed atomics: a hint
    /// that lookups through `&self` may update, verified against the slot before use.
    last: AtomicU64,
}

impl<T> Default for KeyedSlab<T> {
    fn default() -> Self {
        KeyedSlab { index: U32Map::default(), slots: Vec::new(), free: Vec::new(), last: AtomicU64::new(u64::MAX) }
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
        let last = self.last.load(Ordering::Relaxed);
        if last as u32 == key {
            let s = (last >> 32) as usize;
            if matches!(self.slots.get(s), Some(Some((k, _))) if *k == key) {
                return Some(s);
            }
        }
        let s = *self.index.get(&key)?;
        self.last.store(key as u64 | (s as u64) << 32, Ordering::Relaxed);
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
        fn behaves_as_a_map(ops in proptest::collection::vec((0u8..4, 0u32..6, any::<u16>()), 0..200)) {
            let mut s = KeyedSlab::default();
            let mut m = HashMap::new();
            for (op, k, v) in ops {
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
