//! The extended QP and its post-send API: `ibv_create_qp_ex` (through the context's
//! `create_qp_ex` op, as the inline in `verbs.h` calls it), `ibv_qp_to_qp_ex`, and the
//! `ibv_wr_*` calls (static inlines calling the pointers in `struct ibv_qp_ex`).
//!
//! `ibv_wr_start` opens a batch; each opcode call (`ibv_wr_send`, `ibv_wr_rdma_write`, ...)
//! begins a WR with the `wr_id` and `wr_flags` the program set just before; `ibv_wr_set_sge`,
//! `_sge_list`, `_inline_data`, `_inline_data_list` and `_ud_addr` complete the last one;
//! `ibv_wr_complete` posts the batch all or none and returns 0 or an errno (the first error
//! any call of the batch met: a call out of order, an operation the QP was not created for),
//! and `ibv_wr_abort` drops it — rdma-core's semantics (`verbs.h`; rxe's `wr_*` in
//! `providers/rxe/rxe.c`). Inline data is copied when it is set, so the program may reuse its
//! buffer at once. Misuse (a call before `ibv_wr_start`, a set before an opcode) is an error
//! of the batch, never a crash; a handle that is not a live extended QP is ignored (the calls
//! return nothing) and `ibv_wr_complete` answers it `EINVAL`.

use crate::abi::*;
use crate::datapath::{create_qp, fail, post_all, Gather, Post, QPS};
use core::ffi::{c_int, c_void};
use uroce_transport::verbs::{SendFlags, Sge, WrOpcode};

/// `IBV_QP_INIT_ATTR_*` (`enum ibv_qp_init_attr_mask`).
const INIT_ATTR_PD: u32 = 1 << 0;
const INIT_ATTR_CREATE_FLAGS: u32 = 1 << 2;
const INIT_ATTR_SEND_OPS_FLAGS: u32 = 1 << 6;

/// `IBV_QP_EX_WITH_*` (`enum ibv_qp_create_send_ops_flags`) uroce carries out.
pub const WITH_RDMA_WRITE: u64 = 1 << 0;
/// `IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM`.
pub const WITH_RDMA_WRITE_WITH_IMM: u64 = 1 << 1;
/// `IBV_QP_EX_WITH_SEND`.
pub const WITH_SEND: u64 = 1 << 2;
/// `IBV_QP_EX_WITH_SEND_WITH_IMM`.
pub const WITH_SEND_WITH_IMM: u64 = 1 << 3;
/// `IBV_QP_EX_WITH_RDMA_READ`.
pub const WITH_RDMA_READ: u64 = 1 << 4;
/// `IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP`.
pub const WITH_ATOMIC_CMP_AND_SWP: u64 = 1 << 5;
/// `IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD`.
pub const WITH_ATOMIC_FETCH_AND_ADD: u64 = 1 << 6;
/// `IBV_QP_EX_WITH_SEND_WITH_INV`.
pub const WITH_SEND_WITH_INV: u64 = 1 << 9;
/// Every operation above. Memory windows (`BIND_MW`, `LOCAL_INV`), TSO, FLUSH and ATOMIC_WRITE
/// are not: asking for them is `EOPNOTSUPP` at creation.
pub const SUPPORTED_SEND_OPS: u64 = WITH_RDMA_WRITE
    | WITH_RDMA_WRITE_WITH_IMM
    | WITH_SEND
    | WITH_SEND_WITH_IMM
    | WITH_RDMA_READ
    | WITH_ATOMIC_CMP_AND_SWP
    | WITH_ATOMIC_FETCH_AND_ADD
    | WITH_SEND_WITH_INV;

/// WRs one batch may hold before `ibv_wr_complete` (more: `ENOMEM` at completion).
const MAX_BATCH: usize = 1 << 16;

/// One WR of a batch, as the calls built it.
#[derive(Default)]
struct Pending {
    wr_id: u64,
    flags: u32,
    opcode: Option<WrOpcode>,
    imm_data: u32,
    remote_addr: u64,
    rkey: u32,
    compare_add: u64,
    swap: u64,
    ud: Option<(usize, u32, u32)>,
    sges: Vec<Sge>,
    /// Inline data, copied from the program when set.
    bytes: Option<Vec<u8>>,
}

/// The WRs between `ibv_wr_start` and `ibv_wr_complete`/`ibv_wr_abort`.
#[derive(Default)]
pub struct Batch {
    open: bool,
    /// The first error of the batch (`ibv_wr_complete` returns it).
    err: Option<c_int>,
    wrs: Vec<Pending>,
}

impl Batch {
    fn fail(&mut self, e: c_int) {
        self.err.get_or_insert(e);
    }

    /// The WR being built, for a `wr_set_*` call.
    fn last(&mut self) -> Option<&mut Pending> {
        if !self.open {
            return None;
        }
        if self.wrs.is_empty() {
            self.fail(libc::EINVAL);
        }
        self.wrs.last_mut()
    }
}

/// `struct ibv_qp_ex`'s operations for a new QP.
pub(crate) fn ops() -> QpExTail {
    QpExTail {
        comp_mask: 0,
        wr_id: 0,
        wr_flags: 0,
        wr_atomic_cmp_swp: Some(wr_atomic_cmp_swp),
        wr_atomic_fetch_add: Some(wr_atomic_fetch_add),
        wr_bind_mw: Some(wr_bind_mw),
        wr_local_inv: Some(wr_local_inv),
        wr_rdma_read: Some(wr_rdma_read),
        wr_rdma_write: Some(wr_rdma_write),
        wr_rdma_write_imm: Some(wr_rdma_write_imm),
        wr_send: Some(wr_send),
        wr_send_imm: Some(wr_send_imm),
        wr_send_inv: Some(wr_send_inv),
        wr_send_tso: Some(wr_send_tso),
        wr_set_ud_addr: Some(wr_set_ud_addr),
        wr_set_xrc_srqn: Some(wr_set_xrc_srqn),
        wr_set_inline_data: Some(wr_set_inline_data),
        wr_set_inline_data_list: Some(wr_set_inline_data_list),
        wr_set_sge: Some(wr_set_sge),
        wr_set_sge_list: Some(wr_set_sge_list),
        wr_start: Some(wr_start),
        wr_complete: Some(wr_complete),
        wr_abort: Some(wr_abort),
        wr_atomic_write: Some(wr_atomic_write),
        wr_flush: Some(wr_flush),
    }
}

/// `verbs_context.create_qp_ex` (the inline `ibv_create_qp_ex`): RC, UC or UD in
/// `attr->pd`, with the post-send operations `send_ops_flags` names. The caps granted are
/// written back.
pub(crate) unsafe extern "C" fn create_qp_ex_op(ctx: *mut IbvContext, attr: *mut QpInitAttrExC) -> *mut IbvQp {
    if attr.is_null() {
        return fail(libc::EINVAL);
    }
    // SAFETY: the caller's struct ibv_qp_init_attr_ex.
    let a = unsafe { &mut *attr };
    if a.comp_mask & INIT_ATTR_PD == 0 {
        return fail(libc::EINVAL);
    }
    // XRC domains, RSS indirection tables, TSO headers and source QPNs: not in uroce.
    if a.comp_mask & !(INIT_ATTR_PD | INIT_ATTR_CREATE_FLAGS | INIT_ATTR_SEND_OPS_FLAGS) != 0
        || (a.comp_mask & INIT_ATTR_CREATE_FLAGS != 0 && a.create_flags != 0)
    {
        return fail(libc::EOPNOTSUPP);
    }
    let send_ops = if a.comp_mask & INIT_ATTR_SEND_OPS_FLAGS != 0 { a.send_ops_flags } else { 0 };
    if send_ops & !SUPPORTED_SEND_OPS != 0 {
        return fail(libc::EOPNOTSUPP);
    }
    match crate::device::PDS.get(a.pd.cast()) {
        Some(p) if p.ibv.context == ctx => {}
        _ => return fail(libc::EINVAL),
    }
    let mut r = QpInitAttrC {
        qp_context: a.qp_context,
        send_cq: a.send_cq,
        recv_cq: a.recv_cq,
        srq: a.srq,
        cap: a.cap,
        qp_type: a.qp_type,
        sq_sig_all: a.sq_sig_all,
    };
    let qp = create_qp(a.pd, &mut r, send_ops);
    if !qp.is_null() {
        a.cap = r.cap;
    }
    qp
}

/// `ibv_qp_to_qp_ex(3)`: the extended QP of a QP created with `send_ops_flags`, else NULL.
#[no_mangle]
pub extern "C" fn ibv_qp_to_qp_ex(qp: *mut IbvQp) -> *mut c_void {
    match QPS.get(qp.cast()) {
        // The ibv_qp_ex is the QP's struct itself: qp_base first, the tail after it.
        Some(q) if q.send_ops != 0 => qp.cast(),
        _ => core::ptr::null_mut(),
    }
}

/// Run `f` on the batch of the extended QP `qpx` (nothing for a handle that is not one).
fn with_batch<'a, R>(qpx: *mut c_void, f: impl FnOnce(&'a crate::datapath::Qp, &mut Batch) -> R) -> Option<R> {
    let q = QPS.get(qpx).filter(|q| q.send_ops != 0)?;
    let mut b = q.batch.lock().unwrap_or_else(|p| p.into_inner());
    Some(f(q, &mut b))
}

/// Begin a WR of `opcode` (`op`: its `IBV_QP_EX_WITH_*` bit) with the `wr_id` and
/// `wr_flags` the program set; `set` fills in the opcode's arguments.
fn begin(qpx: *mut c_void, opcode: WrOpcode, op: u64, set: impl FnOnce(&mut Pending)) {
    with_batch(qpx, |q, b| {
        if !b.open {
            return;
        }
        if q.send_ops & op == 0 {
            // The QP was not created for this operation (mlx5 and rxe leave it undefined).
            return b.fail(libc::EINVAL);
        }
        if b.wrs.len() >= MAX_BATCH {
            return b.fail(libc::ENOMEM);
        }
        // SAFETY: the tail of the program's struct ibv_qp_ex; it writes wr_id and wr_flags
        // only between calls, from the thread making them.
        let (wr_id, flags) = unsafe { ((*q.ex.get()).wr_id, (*q.ex.get()).wr_flags) };
        let mut p = Pending { wr_id, flags, opcode: Some(opcode), ..Default::default() };
        set(&mut p);
        b.wrs.push(p);
    });
}

unsafe extern "C" fn wr_start(qpx: *mut c_void) {
    with_batch(qpx, |_, b| {
        b.wrs.clear();
        b.err = None;
        b.open = true;
    });
}

unsafe extern "C" fn wr_abort(qpx: *mut c_void) {
    with_batch(qpx, |_, b| {
        b.wrs.clear();
        b.err = None;
        b.open = false;
    });
}

unsafe extern "C" fn wr_complete(qpx: *mut c_void) -> c_int {
    let Some((q, wrs, err)) = with_batch(qpx, |q, b| {
        let open = std::mem::take(&mut b.open);
        let err = if open { b.err.take() } else { Some(libc::EINVAL) };
        (q, std::mem::take(&mut b.wrs), err)
    }) else {
        return libc::EINVAL;
    };
    if let Some(e) = err {
        return e;
    }
    let posts: Vec<Post> = wrs
        .iter()
        .map(|p| Post {
            wr_id: p.wr_id,
            opcode: p.opcode.unwrap_or(WrOpcode::Send),
            flags: SendFlags(p.flags),
            imm_data: p.imm_data,
            remote_addr: p.remote_addr,
            rkey: p.rkey,
            compare_add: p.compare_add,
            swap: p.swap,
            ud: p.ud.map(|(ah, qpn, qkey)| (ah as *const c_void, qpn, qkey)),
            data: match &p.bytes {
                Some(b) => Gather::Bytes(b),
                None => Gather::Sges(&p.sges),
            },
        })
        .collect();
    match crate::datapath::rt_of(q.ibv.context) {
        Ok((_, rt)) => rt.with(|d| post_all(d, q, &posts)).err().unwrap_or(0),
        Err(e) => e,
    }
}

unsafe extern "C" fn wr_send(qpx: *mut c_void) {
    begin(qpx, WrOpcode::Send, WITH_SEND, |_| {});
}

unsafe extern "C" fn wr_send_imm(qpx: *mut c_void, imm: u32) {
    begin(qpx, WrOpcode::SendWithImm, WITH_SEND_WITH_IMM, |p| p.imm_data = imm);
}

unsafe extern "C" fn wr_send_inv(qpx: *mut c_void, rkey: u32) {
    begin(qpx, WrOpcode::SendWithInv, WITH_SEND_WITH_INV, |p| p.imm_data = rkey);
}

unsafe extern "C" fn wr_rdma_write(qpx: *mut c_void, rkey: u32, addr: u64) {
    begin(qpx, WrOpcode::RdmaWrite, WITH_RDMA_WRITE, |p| (p.rkey, p.remote_addr) = (rkey, addr));
}

unsafe extern "C" fn wr_rdma_write_imm(qpx: *mut c_void, rkey: u32, addr: u64, imm: u32) {
    begin(qpx, WrOpcode::RdmaWriteWithImm, WITH_RDMA_WRITE_WITH_IMM, |p| {
        (p.rkey, p.remote_addr, p.imm_data) = (rkey, addr, imm)
    });
}

unsafe extern "C" fn wr_rdma_read(qpx: *mut c_void, rkey: u32, addr: u64) {
    begin(qpx, WrOpcode::RdmaRead, WITH_RDMA_READ, |p| (p.rkey, p.remote_addr) = (rkey, addr));
}

unsafe extern "C" fn wr_atomic_cmp_swp(qpx: *mut c_void, rkey: u32, addr: u64, compare: u64, swap: u64) {
    begin(qpx, WrOpcode::AtomicCmpAndSwp, WITH_ATOMIC_CMP_AND_SWP, |p| {
        (p.rkey, p.remote_addr, p.compare_add, p.swap) = (rkey, addr, compare, swap)
    });
}

unsafe extern "C" fn wr_atomic_fetch_add(qpx: *mut c_void, rkey: u32, addr: u64, add: u64) {
    begin(qpx, WrOpcode::AtomicFetchAndAdd, WITH_ATOMIC_FETCH_AND_ADD, |p| {
        (p.rkey, p.remote_addr, p.compare_add) = (rkey, addr, add)
    });
}

/// An operation uroce does not carry out (creation refuses QPs asking for it): the batch fails.
fn unsupported(qpx: *mut c_void) {
    with_batch(qpx, |_, b| {
        if b.open {
            b.fail(libc::EOPNOTSUPP)
        }
    });
}

unsafe extern "C" fn wr_bind_mw(qpx: *mut c_void, _mw: *mut c_void, _rkey: u32, _info: *const c_void) {
    unsupported(qpx);
}

unsafe extern "C" fn wr_local_inv(qpx: *mut c_void, _rkey: u32) {
    unsupported(qpx);
}

unsafe extern "C" fn wr_send_tso(qpx: *mut c_void, _hdr: *mut c_void, _hdr_sz: u16, _mss: u16) {
    unsupported(qpx);
}

unsafe extern "C" fn wr_set_xrc_srqn(qpx: *mut c_void, _srqn: u32) {
    unsupported(qpx);
}

unsafe extern "C" fn wr_atomic_write(qpx: *mut c_void, _rkey: u32, _addr: u64, _wr: *const c_void) {
    unsupported(qpx);
}

unsafe extern "C" fn wr_flush(qpx: *mut c_void, _rkey: u32, _addr: u64, _len: usize, _ty: u8, _level: u8) {
    unsupported(qpx);
}

unsafe extern "C" fn wr_set_ud_addr(qpx: *mut c_void, ah: *mut c_void, qpn: u32, qkey: u32) {
    with_batch(qpx, |_, b| {
        if let Some(p) = b.last() {
            p.ud = Some((ah as usize, qpn, qkey));
        }
    });
}

unsafe extern "C" fn wr_set_sge(qpx: *mut c_void, lkey: u32, addr: u64, length: u32) {
    with_batch(qpx, |_, b| {
        if let Some(p) = b.last() {
            p.sges = vec![Sge { addr, length, lkey }];
            p.bytes = None;
        }
    });
}

unsafe extern "C" fn wr_set_sge_list(qpx: *mut c_void, n: usize, list: *const SgeC) {
    with_batch(qpx, |_, b| {
        let Some(p) = b.last() else { return };
        let Ok(count) = c_int::try_from(n) else { return b.fail(libc::EINVAL) };
        // SAFETY: the caller's array of `n` SGEs (`sges` checks the count and NULL).
        match unsafe { crate::datapath::sges(list, count) } {
            Some((s, k)) => {
                p.sges = s[..k].to_vec();
                p.bytes = None;
            }
            None => b.fail(libc::EINVAL),
        }
    });
}

unsafe extern "C" fn wr_set_inline_data(qpx: *mut c_void, addr: *const c_void, length: usize) {
    let buf = DataBufC { addr, length };
    // SAFETY: one buffer, on the stack.
    unsafe { wr_set_inline_data_list(qpx, 1, &buf) };
}

unsafe extern "C" fn wr_set_inline_data_list(qpx: *mut c_void, n: usize, bufs: *const DataBufC) {
    with_batch(qpx, |q, b| {
        let Some(p) = b.last() else { return };
        if n > 0 && bufs.is_null() {
            return b.fail(libc::EINVAL);
        }
        let mut data = Vec::new();
        for i in 0..n {
            // SAFETY: the caller's array of `n` buffers.
            let d = unsafe { bufs.add(i).read() };
            if data.len() + d.length > q.inline_capacity() {
                return b.fail(libc::EINVAL);
            }
            if d.length > 0 {
                if d.addr.is_null() {
                    return b.fail(libc::EINVAL);
                }
                // SAFETY: the program's readable buffer of `length` bytes, copied now.
                data.extend_from_slice(unsafe { core::slice::from_raw_parts(d.addr.cast::<u8>(), d.length) });
            }
        }
        p.bytes = Some(data);
        p.sges.clear();
        p.flags |= SendFlags::INLINE.0;
    });
}
