//! The device's QPs, by number: a [`KeyedSlab`] (a slab of QP states, a compact QPN → slot
//! index, the last lookup remembered). With thousands of QPs the index stays cached while the
//! states do not: the device prefetches a state's lines when a call names it
//! (`uroce_wire::copy::prefetch_value`).

use super::Qp;
use crate::slab::KeyedSlab;

/// QPs by number.
#[derive(Debug, Default)]
pub(crate) struct QpTable(KeyedSlab<Qp>);

impl QpTable {
    /// Number of QPs.
    pub fn len(&self) -> usize {
        self.0.len()
    }
    /// Whether QP `qpn` exists.
    pub fn contains_key(&self, qpn: &u32) -> bool {
        self.0.contains_key(*qpn)
    }
    /// QP `qpn`.
    #[inline]
    pub fn get(&self, qpn: &u32) -> Option<&Qp> {
        self.0.get(*qpn)
    }
    /// QP `qpn`, writable.
    #[inline]
    pub fn get_mut(&mut self, qpn: &u32) -> Option<&mut Qp> {
        self.0.get_mut(*qpn)
    }
    /// Add (or replace) QP `qpn`.
    pub fn insert(&mut self, qpn: u32, qp: Qp) {
        self.0.insert(qpn, qp);
    }
    /// Remove QP `qpn`.
    pub fn remove(&mut self, qpn: &u32) -> Option<Qp> {
        self.0.remove(*qpn)
    }
    /// Every QP.
    pub fn values(&self) -> impl Iterator<Item = &Qp> {
        self.0.values()
    }
}
