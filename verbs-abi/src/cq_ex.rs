//! The extended CQ: `ibv_create_cq_ex` (through the context's `create_cq_ex` op, as the
//! inline in `verbs.h` calls it) and its polling API (`ibv_start_poll`, `ibv_next_poll`,
//! `ibv_end_poll`, `ibv_wc_read_*`: static inlines calling the pointers in `struct
//! ibv_cq_ex`).
//!
//! An extended CQ is an ordinary uroce CQ whose struct continues past `struct ibv_cq`: the
//! program may also poll it with `ibv_poll_cq(ibv_cq_ex_to_cq(cq))`, arm it and destroy it
//! as any CQ. `ibv_start_poll` takes the next completion (`ENOENT` when there is none) and
//! makes it current: its `status` and `wr_id` are written into the struct, the `read_*`
//! functions answer from it, until `ibv_next_poll` takes the next one; `ibv_end_poll` ends the
//! pass. RoCE has no LIDs: `read_slid` and `read_dlid_path_bits` answer 0, as rxe's do.
//! Timestamps, VLAN stripping, flow tags and tag matching are not offered (`EOPNOTSUPP` when
//! asked for at creation).

use crate::abi::*;
use crate::datapath::{create_cq, fail, rt_of, wc_of, Cq, CQS};
use core::ffi::{c_int, c_void};
use uroce_transport::verbs::WorkCompletion;

/// `IBV_WC_EX_WITH_*` uroce fills in: byte length, immediate, QP number, source QP, SLID,
/// SL and DLID path bits (`IBV_WC_STANDARD_FLAGS`).
pub const STANDARD_WC_FLAGS: u64 = 0x7f;
/// Marks a CQ made by `ibv_create_cq_ex` in [`Cq::wc_flags`] (above every `IBV_WC_EX_WITH_*`).
pub const EXTENDED: u64 = 1 << 63;

/// `IBV_CQ_INIT_ATTR_MASK_FLAGS`, `_PD`.
const INIT_ATTR_MASK_FLAGS: u32 = 1 << 0;
const INIT_ATTR_MASK_PD: u32 = 1 << 1;
/// `IBV_CREATE_CQ_ATTR_SINGLE_THREADED` (a hint: uroce's CQs are safe either way) and
/// `IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN` (not offered).
const ATTR_SINGLE_THREADED: u32 = 1 << 0;

/// `struct ibv_cq_ex`'s functions for a new CQ.
pub(crate) fn ops() -> CqExTail {
    CqExTail {
        comp_mask: 0,
        status: 0,
        wr_id: 0,
        start_poll: Some(start_poll),
        next_poll: Some(next_poll),
        end_poll: Some(end_poll),
        read_opcode: Some(read_opcode),
        read_vendor_err: Some(read_vendor_err),
        read_byte_len: Some(read_byte_len),
        read_imm_data: Some(read_imm_data),
        read_qp_num: Some(read_qp_num),
        read_src_qp: Some(read_src_qp),
        read_wc_flags: Some(read_wc_flags),
        read_slid: Some(read_slid),
        read_sl: Some(read_sl),
        read_dlid_path_bits: Some(read_dlid_path_bits),
        read_completion_ts: Some(read_u64_zero),
        read_cvlan: Some(read_cvlan),
        read_flow_tag: Some(read_flow_tag),
        read_tm_info: Some(read_tm_info),
        read_completion_wallclock_ns: Some(read_u64_zero),
    }
}

/// `verbs_context.create_cq_ex` (the inline `ibv_create_cq_ex`).
pub(crate) unsafe extern "C" fn create_cq_ex_op(ctx: *mut IbvContext, attr: *mut CqInitAttrExC) -> *mut IbvCq {
    if attr.is_null() {
        return fail(libc::EINVAL);
    }
    // SAFETY: the caller's struct ibv_cq_init_attr_ex.
    let a = unsafe { &*attr };
    if a.wc_flags & !STANDARD_WC_FLAGS != 0 {
        return fail(libc::EOPNOTSUPP);
    }
    if a.comp_mask & !(INIT_ATTR_MASK_FLAGS | INIT_ATTR_MASK_PD) != 0 {
        return fail(libc::EINVAL);
    }
    if a.comp_mask & INIT_ATTR_MASK_PD != 0 && !a.parent_domain.is_null() {
        return fail(libc::EOPNOTSUPP);
    }
    if a.comp_mask & INIT_ATTR_MASK_FLAGS != 0 && a.flags & !ATTR_SINGLE_THREADED != 0 {
        return fail(libc::EOPNOTSUPP);
    }
    let (Ok(cqe), Ok(vector)) = (c_int::try_from(a.cqe), c_int::try_from(a.comp_vector)) else {
        return fail(libc::EINVAL);
    };
    create_cq(ctx, cqe, a.cq_context, a.channel, vector, a.wc_flags | EXTENDED)
}

/// The extended CQ `cq` (None for a handle that is not one).
fn extended<'a>(cq: *mut c_void) -> Option<&'a Cq> {
    CQS.get(cq).filter(|c| c.wc_flags & EXTENDED != 0)
}

/// Take the next completion of `cq` and make it current.
fn advance(cq: *mut c_void) -> c_int {
    let Some(c) = extended(cq) else { return libc::EINVAL };
    let Ok((_, rt)) = rt_of(c.ibv.context) else { return libc::EINVAL };
    let mut one = [WorkCompletion::default()];
    if rt.poll_watched(&c.watch, &mut one) == 0 {
        return libc::ENOENT;
    }
    let wc = wc_of(&one[0]);
    *c.current.lock().unwrap_or_else(|p| p.into_inner()) = wc;
    // SAFETY: the tail of the program's struct ibv_cq_ex; it reads status and wr_id only
    // after the poll call returns, on the thread that made it.
    unsafe {
        (*c.ex.get()).status = wc.status;
        (*c.ex.get()).wr_id = wc.wr_id;
    }
    0
}

unsafe extern "C" fn start_poll(cq: *mut c_void, attr: *mut u32) -> c_int {
    // struct ibv_poll_cq_attr { uint32_t comp_mask; }: no extension is defined.
    // SAFETY: NULL or the caller's struct.
    if !attr.is_null() && unsafe { *attr } != 0 {
        return libc::EINVAL;
    }
    advance(cq)
}

unsafe extern "C" fn next_poll(cq: *mut c_void) -> c_int {
    advance(cq)
}

unsafe extern "C" fn end_poll(_cq: *mut c_void) {}

/// A field of the current completion (zeros for a handle that is not an extended CQ).
fn current(cq: *mut c_void) -> WcC {
    extended(cq).map(|c| *c.current.lock().unwrap_or_else(|p| p.into_inner())).unwrap_or_default()
}

/// `read_*` functions answering a field of the current completion.
macro_rules! readers {
    ($($name:ident -> $t:ty = |$w:ident| $e:expr;)*) => {$(
        unsafe extern "C" fn $name(cq: *mut c_void) -> $t {
            let $w = current(cq);
            $e
        }
    )*};
}

readers! {
    read_opcode -> c_int = |w| w.opcode;
    read_vendor_err -> u32 = |w| w.vendor_err;
    read_byte_len -> u32 = |w| w.byte_len;
    read_imm_data -> u32 = |w| w.imm_data;
    read_qp_num -> u32 = |w| w.qp_num;
    read_src_qp -> u32 = |w| w.src_qp;
    read_wc_flags -> u32 = |w| w.wc_flags;
    read_slid -> u32 = |w| u32::from(w.slid);
    read_sl -> u8 = |w| w.sl;
    read_dlid_path_bits -> u8 = |w| w.dlid_path_bits;
}

unsafe extern "C" fn read_u64_zero(_cq: *mut c_void) -> u64 {
    0
}

unsafe extern "C" fn read_cvlan(_cq: *mut c_void) -> u16 {
    0
}

unsafe extern "C" fn read_flow_tag(_cq: *mut c_void) -> u32 {
    0
}

unsafe extern "C" fn read_tm_info(_cq: *mut c_void, info: *mut c_void) {
    if !info.is_null() {
        // struct ibv_wc_tm_info { uint64_t tag; uint32_t priv; }: 16 bytes, none to report.
        // SAFETY: the caller's struct.
        unsafe { core::ptr::write_bytes(info.cast::<u8>(), 0, 16) };
    }
}
