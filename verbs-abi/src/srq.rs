//! Shared receive queues over the engine's: `ibv_create_srq`, `ibv_modify_srq`,
//! `ibv_query_srq`, `ibv_destroy_srq`, and the inline `ibv_post_srq_recv` (through the
//! context's `ops.post_srq_recv`). The limit event (`IBV_EVENT_SRQ_LIMIT_REACHED`) reaches
//! the context's `async_fd` as the others do ([`crate::events`]).

use crate::abi::*;
use crate::datapath::{fail, post_list, rt_of, sges};
use crate::device::{context, PDS};
use crate::Registry;
use core::ffi::{c_int, c_void};
use uroce_transport::verbs::{RecvWr, SrqAttr, SrqAttrMask, SrqHandle};

/// An SRQ: the program's `ibv_srq`, then the engine's handle.
#[repr(C)]
pub struct Srq {
    /// What the program sees.
    pub ibv: IbvSrq,
    /// The engine's SRQ.
    pub engine: SrqHandle,
}

impl Drop for Srq {
    fn drop(&mut self) {
        // SAFETY: initialised in ibv_create_srq; nothing uses them once the SRQ is unregistered.
        unsafe {
            libc::pthread_mutex_destroy(&mut self.ibv.mutex);
            libc::pthread_cond_destroy(&mut self.ibv.cond);
        }
    }
}

/// Live SRQs, by address.
pub static SRQS: Registry<Srq> = Registry::new();

/// `ibv_create_srq(3)`: the sizes granted are written back to `init_attr->attr`.
#[no_mangle]
pub unsafe extern "C" fn ibv_create_srq(pd: *mut IbvPd, init: *mut SrqInitAttrC) -> *mut IbvSrq {
    let Some(p) = PDS.get(pd.cast()) else { return fail(libc::EINVAL) };
    let Ok((_, rt)) = rt_of(p.ibv.context) else { return fail(libc::EINVAL) };
    if init.is_null() {
        return fail(libc::EINVAL);
    }
    // SAFETY: the caller's struct ibv_srq_init_attr.
    let ia = unsafe { &mut *init };
    let a = SrqAttr { max_wr: ia.attr.max_wr, max_sge: ia.attr.max_sge.max(1), srq_limit: ia.attr.srq_limit };
    let engine = match rt.with(|d| d.create_srq(p.engine, &a)) {
        Ok(h) => h,
        Err(e) => return fail(e.errno()),
    };
    ia.attr.max_sge = a.max_sge;
    // SAFETY: integers, pointers and pthread objects (initialised below): all-zero is valid.
    let mut ibv: IbvSrq = unsafe { core::mem::zeroed() };
    (ibv.context, ibv.srq_context, ibv.pd, ibv.handle) = (p.ibv.context, ia.srq_context, pd, engine.0);
    let srq = Box::into_raw(Box::new(Srq { ibv, engine }));
    // SAFETY: fresh allocation; initialised once.
    unsafe {
        libc::pthread_mutex_init(&mut (*srq).ibv.mutex, core::ptr::null());
        libc::pthread_cond_init(&mut (*srq).ibv.cond, core::ptr::null());
    }
    SRQS.insert(srq.cast(), srq);
    if let Some(c) = context(p.ibv.context) {
        c.events.set_srq(engine.0, Some(srq.cast()));
    }
    srq.cast()
}

/// `ibv_modify_srq(3)`: `IBV_SRQ_LIMIT` arms the limit; `IBV_SRQ_MAX_WR` (resize) is `EINVAL`,
/// as on a device without `IBV_DEVICE_SRQ_RESIZE`.
#[no_mangle]
pub unsafe extern "C" fn ibv_modify_srq(srq: *mut IbvSrq, attr: *mut SrqAttrC, mask: c_int) -> c_int {
    let Some(s) = SRQS.get(srq.cast()) else { return libc::EINVAL };
    let Ok((_, rt)) = rt_of(s.ibv.context) else { return libc::EINVAL };
    if attr.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: the caller's struct ibv_srq_attr.
    let a = unsafe { *attr };
    let ea = SrqAttr { max_wr: a.max_wr, max_sge: a.max_sge, srq_limit: a.srq_limit };
    match rt.with(|d| d.modify_srq(s.engine, &ea, SrqAttrMask(mask as u32))) {
        Ok(()) => 0,
        Err(e) => e.errno(),
    }
}

/// `ibv_query_srq(3)`.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_srq(srq: *mut IbvSrq, attr: *mut SrqAttrC) -> c_int {
    let Some(s) = SRQS.get(srq.cast()) else { return libc::EINVAL };
    let Ok((_, rt)) = rt_of(s.ibv.context) else { return libc::EINVAL };
    if attr.is_null() {
        return libc::EINVAL;
    }
    match rt.with(|d| d.query_srq(s.engine)) {
        Ok(a) => {
            // SAFETY: the caller's struct ibv_srq_attr.
            unsafe { attr.write(SrqAttrC { max_wr: a.max_wr, max_sge: a.max_sge, srq_limit: a.srq_limit }) };
            0
        }
        Err(e) => e.errno(),
    }
}

/// `ibv_destroy_srq(3)`: `EBUSY` while a QP receives from it.
#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_srq(srq: *mut IbvSrq) -> c_int {
    let Some(s) = SRQS.get(srq.cast()) else { return libc::EINVAL };
    let Ok((_, rt)) = rt_of(s.ibv.context) else { return libc::EINVAL };
    match rt.with(|d| d.destroy_srq(s.engine)) {
        Ok(()) => {
            if let Some(c) = context(s.ibv.context) {
                c.events.set_srq(s.engine.0, None);
            }
            drop(SRQS.take(srq.cast()));
            0
        }
        Err(e) => e.errno(),
    }
}

/// The engine handle of the SRQ behind `srq` (`ibv_create_qp`'s `init_attr->srq`).
pub(crate) fn engine_of(srq: *mut c_void) -> Option<SrqHandle> {
    SRQS.get(srq).map(|s| s.engine)
}

/// `ops.post_srq_recv`: a chain of `ibv_recv_wr` under one engine lock; the first that fails
/// is `*bad_wr`.
pub unsafe extern "C" fn post_srq_recv(srq: *mut c_void, wr: *mut c_void, bad: *mut *mut c_void) -> c_int {
    let s = SRQS.get(srq);
    post_list(s.map(|s| s.ibv.context), wr, bad, |d, w: *mut RecvWrC| {
        let s = s.ok_or(libc::EINVAL)?;
        // SAFETY: the caller's chain of struct ibv_recv_wr.
        let c = unsafe { &*w };
        // SAFETY: its SGE array.
        let (list, n) = unsafe { sges(c.sg_list, c.num_sge) }.ok_or(libc::EINVAL)?;
        d.post_srq_recv(s.engine, &RecvWr { wr_id: c.wr_id, sg_list: &list[..n] }).map_err(|e| e.errno())?;
        Ok(c.next)
    })
}
