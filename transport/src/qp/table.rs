//! The device's QPs, by number: a [`KeyedSlab`] (a slab of QP states, a compact QPN → slot
//! index, a small table of recent lookups in front of it). With thousands of QPs the states do
//! not stay cached: the device prefetches a state's lines when a call names it
//! (`uroce_wire::copy::prefetch_value`).

use super::Qp;
use crate::slab::KeyedSlab;

/// QPs by number.
pub(crate) type QpTable = KeyedSlab<Qp>;
