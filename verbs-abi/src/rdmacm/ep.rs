//! Endpoints (`rdma_create_ep(3)`, `rdma_get_request(3)`, `rdma_destroy_ep(3)`): synchronous
//! IDs made from an `rdma_getaddrinfo` result in one call, as librdmacm makes them — what the
//! `rdma_verbs.h` style of program (`rdma_server`, `rdma_client`) uses.

use super::abi::*;
use super::calls::*;
use crate::abi::{IbvPd, QpInitAttrC};
use crate::set_errno;
use core::ffi::c_int;
use core::ptr::null_mut;

/// `rdma_create_ep(3)`: a synchronous ID; passive (`RAI_PASSIVE`): bound to the source address,
/// keeping `pd` and `qp_init` for the requests `rdma_get_request` hands out; active: the
/// address and route resolved and, with `qp_init`, its QP created.
#[no_mangle]
pub unsafe extern "C" fn uroce_rdma_create_ep(
    out: *mut *mut RdmaCmIdC,
    res: *mut RdmaAddrinfoC,
    pd: *mut IbvPd,
    qp_init: *mut QpInitAttrC,
) -> c_int {
    if out.is_null() || res.is_null() {
        return err(libc::EINVAL);
    }
    // SAFETY: the caller's rdma_addrinfo.
    let r = unsafe { &*res };
    let mut id = null_mut();
    // SAFETY: `id` receives the new ID.
    if unsafe { uroce_rdma_create_id(null_mut(), &mut id, null_mut(), r.ai_port_space) } != 0 {
        return -1;
    }
    if r.ai_qp_type != 0 {
        // SAFETY: the ID just made.
        unsafe { (*id).qp_type = r.ai_qp_type };
    }
    // SAFETY: the ID just made, and the caller's addresses and attributes.
    let ret = unsafe {
        if r.ai_flags & RAI_PASSIVE != 0 {
            let b = uroce_rdma_bind_addr(id, r.ai_src_addr);
            if b == 0 {
                if !pd.is_null() {
                    (*id).pd = pd;
                }
                if !qp_init.is_null() {
                    let mut a = *qp_init;
                    a.qp_type = r.ai_qp_type;
                    if let Ok(i) = id_of(id) {
                        *super::lock(&i.qp_init) = Some(a);
                    }
                }
            }
            b
        } else {
            let mut v = uroce_rdma_resolve_addr(id, r.ai_src_addr, r.ai_dst_addr, 2000);
            if v == 0 {
                v = uroce_rdma_resolve_route(id, 2000);
            }
            if v == 0 && !qp_init.is_null() {
                (*qp_init).qp_type = r.ai_qp_type;
                v = uroce_rdma_create_qp(id, pd, qp_init);
            }
            v
        }
    };
    if ret != 0 {
        let e = crate::errno();
        // SAFETY: the ID just made.
        unsafe { uroce_rdma_destroy_ep(id) };
        set_errno(e);
        return -1;
    }
    // SAFETY: the caller's out-pointer, checked non-NULL.
    unsafe { *out = id };
    0
}

/// `rdma_destroy_ep(3)`: the ID's QP (and the CQs made for it), then the ID.
#[no_mangle]
pub unsafe extern "C" fn uroce_rdma_destroy_ep(id: *mut RdmaCmIdC) {
    if id_of(id).is_err() {
        return;
    }
    // SAFETY: a registered ID.
    unsafe {
        if !(*id).qp.is_null() {
            uroce_rdma_destroy_qp(id);
        }
        uroce_rdma_destroy_id(id);
    }
}

/// `rdma_get_request(3)`: on a synchronous listener, wait for the next connect request; its
/// ID comes back with the request in `id->event` and, if the endpoint was made with QP
/// attributes, its QP.
#[no_mangle]
pub unsafe extern "C" fn uroce_rdma_get_request(listen: *mut RdmaCmIdC, out: *mut *mut RdmaCmIdC) -> c_int {
    let Ok(l) = id_of(listen) else { return err(libc::EINVAL) };
    if out.is_null() || !l.sync.load(core::sync::atomic::Ordering::Relaxed) {
        return err(libc::EINVAL);
    }
    // SAFETY: a registered ID.
    unsafe { ack_kept(listen) };
    let mut ev = null_mut();
    // SAFETY: the listener's own channel; `ev` receives the event.
    if unsafe { uroce_rdma_get_cm_event(l.c.channel, &mut ev) } != 0 {
        return -1;
    }
    // SAFETY: the event just handed out.
    let (kind, status, child) = unsafe { ((*ev).event, (*ev).status, (*ev).id) };
    let fail = if kind == uroce_transport::rdmacm::EventKind::Rejected as c_int {
        Some(libc::ECONNREFUSED)
    } else if status != 0 {
        Some(status.abs())
    } else if kind != uroce_transport::rdmacm::EventKind::ConnectRequest as c_int {
        Some(libc::EINVAL)
    } else {
        None
    };
    let attr = *super::lock(&l.qp_init);
    // SAFETY: the listener, the request's ID and the event, all registered.
    unsafe {
        if let Some(e) = fail {
            (*listen).event = ev;
            return err(e);
        }
        if let Some(mut a) = attr {
            if uroce_rdma_create_qp(child, (*listen).pd, &mut a) != 0 {
                (*listen).event = ev;
                return -1;
            }
        }
        (*child).event = ev;
        *out = child;
    }
    0
}
