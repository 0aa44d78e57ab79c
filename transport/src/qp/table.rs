//! The device's QPs: a slab of QP states and a compact QPN → slot index.
//!
//! Every frame and every verb names a QP by number. With thousands of QPs their states do not
//! fit in the cache, and a hash map holding the states inline costs two misses per lookup (its
//! control bytes, then the key inside a ~700-byte entry) before the state's own. Here the
//! index holds only `QPN → slot` (8-byte entries: 10,000 QPs in ~150 KiB, which stay cached),
//! and the states live in a slab: one lookup that hits the cache, then the state, whose lines
//! the device prefetches at once (`uroce_wire::copy::prefetch_value`).

use super::Qp;
use crate::mr::U32Map;

/// QPs by number.
#[derive(Debug, Default)]
pub(crate) struct QpTable {
    index: U32Map<u32>,
    slots: Vec<Option<Qp>>,
    free: Vec<u32>,
}

impl QpTable {
    /// Number of QPs.
    pub fn len(&self) -> usize {
        self.index.len()
    }
    /// Whether QP `qpn` exists.
    pub fn contains_key(&self, qpn: &u32) -> bool {
        self.index.contains_key(qpn)
    }
    /// QP `qpn`.
    #[inline]
    pub fn get(&self, qpn: &u32) -> Option<&Qp> {
        let i = *self.index.get(qpn)?;
        self.slots.get(i as usize)?.as_ref()
    }
    /// QP `qpn`, writable.
    #[inline]
    pub fn get_mut(&mut self, qpn: &u32) -> Option<&mut Qp> {
        let i = *self.index.get(qpn)?;
        self.slots.get_mut(i as usize)?.as_mut()
    }
    /// Add (or replace) QP `qpn`.
    pub fn insert(&mut self, qpn: u32, qp: Qp) {
        if let Some(&i) = self.index.get(&qpn) {
            self.slots[i as usize] = Some(qp);
            return;
        }
        let i = match self.free.pop() {
            Some(i) => {
                self.slots[i as usize] = Some(qp);
                i
            }
            None => {
                self.slots.push(Some(qp));
                (self.slots.len() - 1) as u32
            }
        };
        self.index.insert(qpn, i);
    }
    /// Remove QP `qpn`.
    pub fn remove(&mut self, qpn: &u32) -> Option<Qp> {
        let i = self.index.remove(qpn)?;
        self.free.push(i);
        self.slots[i as usize].take()
    }
    /// Every QP.
    pub fn values(&self) -> impl Iterator<Item = &Qp> {
        self.slots.iter().flatten()
    }
}
