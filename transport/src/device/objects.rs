//! Verbs objects: protection domains, memory regions, completion queues and queue pairs —
//! creation, destruction and queries (`ibv_alloc_pd`, `ibv_reg_mr`, `ibv_create_cq`,
//! `ibv_create_qp`, ...).

use super::Device;
use crate::config::QpnShard;
use crate::cq::Cq;
use crate::mr::{AppMemory, MemoryRegion, MrMemory};
use crate::qp::Qp;
use crate::time::Instant;
use crate::verbs::*;
use rand_core::Rng;
use uroce_wire::Qpn;

/// Identifies a registered memory region to the application.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MrInfo {
    /// Local key.
    pub lkey: u32,
    /// Remote key.
    pub rkey: u32,
    /// Virtual address of the first byte.
    pub addr: u64,
    /// Length in bytes.
    pub length: usize,
}

const MAX_QP_WR: u32 = 16384; // rxe RXE_MAX_QP_WR
const MAX_INLINE: u32 = 4096;
const MAX_CQE: usize = 1 << 20;

impl Device {
    /// `ibv_alloc_pd`.
    pub fn alloc_pd(&mut self) -> PdHandle {
        if let Some(i) = self.pds.iter().position(|used| !used) {
            self.pds[i] = true;
            return PdHandle(i as u32);
        }
        self.pds.push(true);
        PdHandle(self.pds.len() as u32 - 1)
    }

    pub(super) fn pd_ok(&self, pd: PdHandle) -> bool {
        self.pds.get(pd.0 as usize).copied().unwrap_or(false)
    }

    /// `ibv_dealloc_pd`: fails with EBUSY while MRs or QPs use it.
    pub fn dealloc_pd(&mut self, pd: PdHandle) -> Result<(), VerbsError> {
        if !self.pd_ok(pd) {
            return Err(VerbsError::NoSuchObject("PD"));
        }
        if self.mrs.count_in_pd(pd) > 0 || self.qps.values().any(|q| q.pd == pd) || self.srqs_in_pd(pd) {
            return Err(VerbsError::Busy("PD"));
        }
        self.pds[pd.0 as usize] = false;
        Ok(())
    }

    /// `ibv_reg_mr`: register `memory` (moved in; its address is the region's address).
    pub fn reg_mr(&mut self, pd: PdHandle, memory: Box<[u8]>, access: AccessFlags) -> Result<MrInfo, VerbsError> {
        self.reg_mr_inner(pd, MrMemory::Owned(memory), None, access)
    }

    /// `ibv_reg_mr` over memory the application keeps using while it is registered
    /// ([`AppMemory`]; e.g. `uroce_mem::SharedMemory`, or `uroce_mem::RawMemory` for a C
    /// caller's `(addr, length)`): the region's address is the memory's, and every access the
    /// engine makes is checked against the registered range, as for owned memory.
    pub fn reg_mr_app(
        &mut self,
        pd: PdHandle,
        memory: Box<dyn AppMemory>,
        access: AccessFlags,
    ) -> Result<MrInfo, VerbsError> {
        self.reg_mr_inner(pd, MrMemory::App(memory), None, access)
    }

    /// `ibv_reg_mr_iova` over application memory ([`Device::reg_mr_app`] at `iova`).
    pub fn reg_mr_app_iova(
        &mut self,
        pd: PdHandle,
        memory: Box<dyn AppMemory>,
        iova: u64,
        access: AccessFlags,
    ) -> Result<MrInfo, VerbsError> {
        self.reg_mr_inner(pd, MrMemory::App(memory), Some(iova), access)
    }

    /// `ibv_reg_mr_iova`: register `memory` at virtual address `iova`.
    pub fn reg_mr_iova(
        &mut self,
        pd: PdHandle,
        memory: Box<[u8]>,
        iova: u64,
        access: AccessFlags,
    ) -> Result<MrInfo, VerbsError> {
        self.reg_mr_inner(pd, MrMemory::Owned(memory), Some(iova), access)
    }

    /// Register `memory` at `iova` under a chosen key (L_Key = R_Key = `key`), for replaying
    /// captured traffic and for crafting traffic at another implementation. Normal code uses
    /// [`Device::reg_mr`], whose keys are random.
    pub fn reg_mr_with_key(
        &mut self,
        pd: PdHandle,
        memory: Box<[u8]>,
        iova: u64,
        access: AccessFlags,
        key: u32,
    ) -> Result<MrInfo, VerbsError> {
        if key == 0 || self.mrs.get(key).is_some() {
            return Err(VerbsError::Busy("memory key"));
        }
        let mut once = Some(key);
        self.reg_mr_keyed(pd, MrMemory::Owned(memory), Some(iova), access, &mut || once.take().unwrap_or(0))
    }

    fn reg_mr_inner(
        &mut self,
        pd: PdHandle,
        memory: MrMemory,
        iova: Option<u64>,
        access: AccessFlags,
    ) -> Result<MrInfo, VerbsError> {
        // Random 32-bit keys (eight candidates: a collision with a live key is vanishingly rare).
        let mut keys = [0u32; 8];
        keys.iter_mut().for_each(|k| *k = self.rng.next_u32());
        let mut it = keys.into_iter();
        self.reg_mr_keyed(pd, memory, iova, access, &mut || it.next().unwrap_or(0))
    }

    fn reg_mr_keyed(
        &mut self,
        pd: PdHandle,
        memory: MrMemory,
        iova: Option<u64>,
        access: AccessFlags,
        next_key: &mut dyn FnMut() -> u32,
    ) -> Result<MrInfo, VerbsError> {
        if !self.pd_ok(pd) {
            return Err(VerbsError::NoSuchObject("PD"));
        }
        // verbs: remote write and remote atomic require local write (ibv_reg_mr → EINVAL).
        if access.intersects(AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC)
            && !access.contains(AccessFlags::LOCAL_WRITE)
        {
            return Err(VerbsError::InvalidArgument("REMOTE_WRITE/REMOTE_ATOMIC need LOCAL_WRITE"));
        }
        if let Some(va) = iova {
            if va.checked_add(memory.len() as u64).is_none() {
                return Err(VerbsError::InvalidArgument("iova + length overflows"));
            }
        }
        let length = memory.len();
        let (key, addr) =
            self.mrs.insert(pd, memory, iova, access, next_key).ok_or(VerbsError::Exhausted("memory keys"))?;
        Ok(MrInfo { lkey: key, rkey: key, addr, length })
    }

    /// `ibv_rereg_mr`: change a region's PD, access rights and/or memory (`memory`: the new
    /// bytes and their `iova`, `None` for the memory's own address), keeping its keys, as
    /// rxe keeps them. The rules of `ibv_reg_mr` apply to the result (a live PD; remote write
    /// and atomic need local write; `iova + length` does not wrap). The old memory comes back
    /// when it was replaced. Nothing changes when a check fails.
    pub fn rereg_mr(
        &mut self,
        lkey: u32,
        pd: Option<PdHandle>,
        access: Option<AccessFlags>,
        memory: Option<(MrMemory, Option<u64>)>,
    ) -> Result<Option<MrMemory>, VerbsError> {
        let mr = self.mrs.get(lkey).ok_or(VerbsError::NoSuchObject("MR"))?;
        let (new_pd, new_access) = (pd.unwrap_or(mr.pd), access.unwrap_or(mr.access));
        if !self.pd_ok(new_pd) {
            return Err(VerbsError::NoSuchObject("PD"));
        }
        if new_access.intersects(AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC)
            && !new_access.contains(AccessFlags::LOCAL_WRITE)
        {
            return Err(VerbsError::InvalidArgument("REMOTE_WRITE/REMOTE_ATOMIC need LOCAL_WRITE"));
        }
        if let Some((m, Some(va))) = &memory {
            if va.checked_add(m.len() as u64).is_none() {
                return Err(VerbsError::InvalidArgument("iova + length overflows"));
            }
        }
        let old = memory.and_then(|(m, iova)| self.mrs.retranslate(lkey, m, iova));
        let mr = self.mrs.get_mut(lkey).expect("looked up above");
        (mr.pd, mr.access) = (new_pd, new_access);
        Ok(old)
    }

    /// `ibv_dereg_mr`: the memory comes back (owned bytes, or the application's handle; both
    /// dereference to the bytes). After this the engine never touches it again.
    pub fn dereg_mr(&mut self, lkey: u32) -> Result<MrMemory, VerbsError> {
        self.mrs.remove(lkey).ok_or(VerbsError::NoSuchObject("MR"))
    }

    /// A registered region.
    pub fn mr(&self, lkey: u32) -> Option<&MemoryRegion> {
        self.mrs.get(lkey)
    }

    /// A registered region, writable (the application filling or checking its buffers).
    pub fn mr_mut(&mut self, lkey: u32) -> Option<&mut MemoryRegion> {
        self.mrs.get_mut(lkey)
    }

    /// `ibv_create_cq`.
    pub fn create_cq(&mut self, cqe: usize) -> Result<CqHandle, VerbsError> {
        if cqe == 0 || cqe > MAX_CQE {
            return Err(VerbsError::InvalidArgument("cqe"));
        }
        let cq = Cq::new(cqe);
        if let Some(i) = self.cqs.iter().position(Option::is_none) {
            self.cqs[i] = Some(cq);
            return Ok(CqHandle(i as u32));
        }
        self.cqs.push(Some(cq));
        Ok(CqHandle(self.cqs.len() as u32 - 1))
    }

    /// `ibv_destroy_cq`: fails with EBUSY while a QP uses it.
    pub fn destroy_cq(&mut self, cq: CqHandle) -> Result<(), VerbsError> {
        if !matches!(self.cqs.get(cq.0 as usize), Some(Some(_))) {
            return Err(VerbsError::NoSuchObject("CQ"));
        }
        if self.qps.values().any(|q| q.send_cq == cq || q.recv_cq == cq) {
            return Err(VerbsError::Busy("CQ"));
        }
        self.cqs[cq.0 as usize] = None;
        Ok(())
    }

    /// `ibv_poll_cq`: move up to `out.len()` completions into `out`.
    pub fn poll_cq(&mut self, cq: CqHandle, out: &mut [WorkCompletion]) -> Result<usize, VerbsError> {
        match self.cqs.get_mut(cq.0 as usize) {
            Some(Some(q)) => Ok(q.poll(out)),
            _ => Err(VerbsError::NoSuchObject("CQ")),
        }
    }

    /// The CQ object (depth, overflow state).
    pub fn cq(&self, cq: CqHandle) -> Option<&Cq> {
        self.cqs.get(cq.0 as usize).and_then(Option::as_ref)
    }

    /// `ibv_create_qp`. QP numbers are drawn at random from the device's RNG (not
    /// sequential: a peer cannot guess another connection's QPN), above the 16 rxe reserves.
    pub fn create_qp(&mut self, pd: PdHandle, init: &QpInitAttr) -> Result<u32, VerbsError> {
        if !self.pd_ok(pd) {
            return Err(VerbsError::NoSuchObject("PD"));
        }
        for cq in [init.send_cq, init.recv_cq] {
            if self.cq(cq).is_none() {
                return Err(VerbsError::NoSuchObject("CQ"));
            }
        }
        if let Some(s) = init.srq {
            // An SRQ of the QP's PD (IBTA §10.2.9: C10-?; rxe `rxe_qp_chk_init`).
            if self.srq_pd(s) != Some(pd) {
                return Err(VerbsError::InvalidArgument("srq of another PD, or none"));
            }
        }
        let c = &init.cap;
        if c.max_send_wr == 0 || c.max_send_wr > MAX_QP_WR || c.max_recv_wr > MAX_QP_WR {
            return Err(VerbsError::InvalidArgument("max_send_wr / max_recv_wr"));
        }
        if c.max_send_sge as usize > crate::qp::MAX_SGE || c.max_recv_sge as usize > crate::qp::MAX_SGE {
            return Err(VerbsError::InvalidArgument("max_send_sge / max_recv_sge"));
        }
        if c.max_inline_data > MAX_INLINE {
            return Err(VerbsError::InvalidArgument("max_inline_data"));
        }
        // Random, in this device's residue class (`DeviceConfig::qpn_shard`), above 0x10; at
        // most half the class in use, so that a draw finds a free number quickly.
        let QpnShard { index, count } = self.cfg.qpn_shard;
        let count = count.max(1);
        if index >= count {
            return Err(VerbsError::InvalidArgument("qpn_shard index not below its count"));
        }
        // A block (`DeviceConfig::qpn_block`) holds 2^16 numbers, the whole space 2^24.
        let (base, space) = match self.cfg.qpn_block {
            Some(b) => (u32::from(b) << 16, 1u32 << 16),
            None => (0, 1 << 24),
        };
        if self.qps.len() >= (1 << 20).min(space as usize / 2 / count as usize) {
            return Err(VerbsError::Exhausted("QP numbers"));
        }
        let qpn = loop {
            let r = base | (self.rng.next_u32() & (space - 1));
            let q = r - r % count + index;
            if q >= 0x11 && q >> 16 == r >> 16 && !self.qps.contains_key(q) {
                break q;
            }
        };
        self.qps.insert(qpn, Qp::new(Qpn::new(qpn), pd, init, self.cfg.active_mtu));
        Ok(qpn)
    }

    /// `ibv_create_qp` with a chosen QP number (replaying captures, crafting traffic).
    pub fn create_qp_with_qpn(&mut self, pd: PdHandle, init: &QpInitAttr, qpn: u32) -> Result<u32, VerbsError> {
        if qpn == 0 || qpn > 0xff_ffff || self.qps.contains_key(qpn) {
            return Err(VerbsError::InvalidArgument("QP number in use or out of range"));
        }
        let q = self.create_qp(pd, init)?;
        let mut qp = self.qps.remove(q).expect("just created");
        qp.qpn = Qpn::new(qpn);
        self.qps.insert(qpn, qp);
        Ok(qpn)
    }

    /// `ibv_destroy_qp`.
    pub fn destroy_qp(&mut self, qpn: u32) -> Result<(), VerbsError> {
        // Its timer-queue entries are dropped when they come up (`TimerQueue::examine`).
        self.qps.remove(qpn).ok_or(VerbsError::NoSuchObject("QP"))?;
        Ok(())
    }

    /// `ibv_create_ah`: an address handle for UD sends, checked as `ibv_modify_qp` checks a
    /// path (the source GID exists, both GIDs of one IP version, `sl` ≤ 7).
    pub fn create_ah(&self, pd: PdHandle, av: &AddressVector) -> Result<AddressHandle, VerbsError> {
        if !self.pd_ok(pd) {
            return Err(VerbsError::NoSuchObject("PD"));
        }
        self.validate_av(av)?;
        Ok(AddressHandle { pd, av: *av })
    }

    /// A QP, for inspection.
    pub fn qp(&self, qpn: u32) -> Option<&Qp> {
        self.qps.get(qpn)
    }

    /// `ibv_query_qp`.
    pub fn query_qp(&self, qpn: u32) -> Result<QpAttr, VerbsError> {
        self.qps.get(qpn).map(Qp::attr).ok_or(VerbsError::NoSuchObject("QP"))
    }

    /// `ibv_post_send`.
    pub fn post_send(&mut self, qpn: u32, wr: &SendWr<'_>) -> Result<(), VerbsError> {
        self.with_qp(qpn, Instant::ZERO, |qp, ctx| qp.post_send(ctx, wr)).ok_or(VerbsError::NoSuchObject("QP"))?
    }

    /// Post `wrs` all or none (`ibv_wr_complete`: the extended post-send API's batch): every
    /// WR is checked as [`Device::post_send`] checks it, and the queue must have room for all,
    /// before the first is queued. `prepare(i)` runs before WR `i` is queued (the library
    /// stages inline data there). The error names the first WR that failed.
    pub fn post_send_all(
        &mut self,
        qpn: u32,
        wrs: &[SendWr<'_>],
        mut prepare: impl FnMut(&mut Self, usize),
    ) -> Result<(), (usize, VerbsError)> {
        let qp = self.qps.get(qpn).ok_or((0, VerbsError::NoSuchObject("QP")))?;
        for (i, wr) in wrs.iter().enumerate() {
            qp.check_send(wr).map_err(|e| (i, e))?;
        }
        if wrs.len() > qp.send_queue_room() {
            return Err((qp.send_queue_room(), VerbsError::QueueFull));
        }
        for (i, wr) in wrs.iter().enumerate() {
            prepare(self, i);
            self.post_send(qpn, wr).map_err(|e| (i, e))?;
        }
        Ok(())
    }

    /// `ibv_post_recv`.
    pub fn post_recv(&mut self, qpn: u32, wr: &RecvWr<'_>) -> Result<(), VerbsError> {
        self.with_qp(qpn, Instant::ZERO, |qp, ctx| qp.post_recv(ctx, wr)).ok_or(VerbsError::NoSuchObject("QP"))?
    }
}
