//! Shared receive queues: `ibv_create_srq`, `ibv_modify_srq`, `ibv_query_srq`,
//! `ibv_post_srq_recv`, `ibv_destroy_srq` (IBTA §10.2.9, §11.2.3). The queue itself and how a
//! QP takes from it are [`crate::qp::srq`].

use super::Device;
use crate::qp::srq::Srq;
use crate::verbs::*;

/// rxe's limits (`rxe_param.h` `RXE_MAX_SRQ_WR`, `RXE_MAX_SRQ_SGE`).
pub const MAX_SRQ_WR: u32 = 1 << 15;

impl Device {
    /// `ibv_create_srq`: `max_wr` receive WRs of up to `max_sge` SGEs, the limit armed at
    /// `srq_limit` (0: not armed; it must be below `max_wr`).
    pub fn create_srq(&mut self, pd: PdHandle, attr: &SrqAttr) -> Result<SrqHandle, VerbsError> {
        if !self.pd_ok(pd) {
            return Err(VerbsError::NoSuchObject("PD"));
        }
        if attr.max_wr == 0 || attr.max_wr > MAX_SRQ_WR {
            return Err(VerbsError::InvalidArgument("srq max_wr"));
        }
        if attr.max_sge == 0 || attr.max_sge as usize > crate::qp::MAX_SGE {
            return Err(VerbsError::InvalidArgument("srq max_sge"));
        }
        if attr.srq_limit >= attr.max_wr {
            return Err(VerbsError::InvalidArgument("srq_limit not below max_wr"));
        }
        let srq = Srq::new(pd, *attr);
        let i = match self.srqs.iter().position(Option::is_none) {
            Some(i) => {
                self.srqs[i] = Some(srq);
                i
            }
            None => {
                self.srqs.push(Some(srq));
                self.srqs.len() - 1
            }
        };
        Ok(SrqHandle(i as u32))
    }

    fn srq_mut(&mut self, srq: SrqHandle) -> Result<&mut Srq, VerbsError> {
        self.srqs.get_mut(srq.0 as usize).and_then(Option::as_mut).ok_or(VerbsError::NoSuchObject("SRQ"))
    }

    /// The PD of `srq`, if it exists.
    pub(super) fn srq_pd(&self, srq: SrqHandle) -> Option<PdHandle> {
        self.srqs.get(srq.0 as usize)?.as_ref().map(|s| s.pd)
    }

    /// Whether any SRQ lives in `pd`.
    pub(super) fn srqs_in_pd(&self, pd: PdHandle) -> bool {
        self.srqs.iter().flatten().any(|s| s.pd == pd)
    }

    /// `ibv_modify_srq`: arm the limit (`LIMIT`); resizing (`MAX_WR`) is not supported
    /// (`EINVAL`, as for a device without `IBV_DEVICE_SRQ_RESIZE`).
    pub fn modify_srq(&mut self, srq: SrqHandle, attr: &SrqAttr, mask: SrqAttrMask) -> Result<(), VerbsError> {
        let s = self.srq_mut(srq)?;
        if mask.contains(SrqAttrMask::MAX_WR) {
            return Err(VerbsError::InvalidArgument("SRQ resize"));
        }
        if mask.contains(SrqAttrMask::LIMIT) {
            if attr.srq_limit >= s.attr.max_wr {
                return Err(VerbsError::InvalidArgument("srq_limit not below max_wr"));
            }
            s.attr.srq_limit = attr.srq_limit;
        }
        Ok(())
    }

    /// `ibv_query_srq`: its sizes and the limit (0 once it fired).
    pub fn query_srq(&self, srq: SrqHandle) -> Result<SrqAttr, VerbsError> {
        self.srqs.get(srq.0 as usize).and_then(Option::as_ref).map(|s| s.attr).ok_or(VerbsError::NoSuchObject("SRQ"))
    }

    /// `ibv_post_srq_recv`.
    pub fn post_srq_recv(&mut self, srq: SrqHandle, wr: &RecvWr<'_>) -> Result<(), VerbsError> {
        let s = self.srq_mut(srq)?;
        if wr.sg_list.len() > s.attr.max_sge as usize {
            return Err(VerbsError::InvalidArgument("num_sge exceeds the SRQ's max_sge"));
        }
        if s.queue.len() >= s.attr.max_wr as usize {
            return Err(VerbsError::QueueFull);
        }
        s.queue.push(wr.wr_id, wr.sg_list);
        Ok(())
    }

    /// WRs waiting in `srq`.
    pub fn srq_len(&self, srq: SrqHandle) -> Option<usize> {
        self.srqs.get(srq.0 as usize)?.as_ref().map(|s| s.queue.len())
    }

    /// `ibv_destroy_srq`: `EBUSY` while a QP receives from it.
    pub fn destroy_srq(&mut self, srq: SrqHandle) -> Result<(), VerbsError> {
        self.srq_mut(srq)?;
        if self.qps.values().any(|q| q.srq == Some(srq)) {
            return Err(VerbsError::Busy("SRQ"));
        }
        self.srqs[srq.0 as usize] = None;
        Ok(())
    }
}
