//! What the C-ABI tests share: the attribute masks and the bring-up of a connected RC QP.
#![allow(dead_code)]

use core::ffi::c_int;
use uroce_verbs::abi::*;
use uroce_verbs::datapath::ibv_modify_qp;

/// The calling thread's `errno`.
pub fn errno() -> c_int {
    // SAFETY: the calling thread's errno.
    unsafe { *libc::__errno_location() }
}

// enum ibv_qp_attr_mask
pub const STATE: c_int = 1;
pub const ACCESS_FLAGS: c_int = 8;
pub const PKEY_INDEX: c_int = 16;
pub const PORT: c_int = 32;
pub const AV: c_int = 128;
pub const PATH_MTU: c_int = 256;
pub const TIMEOUT: c_int = 512;
pub const RETRY_CNT: c_int = 1024;
pub const RNR_RETRY: c_int = 2048;
pub const RQ_PSN: c_int = 4096;
pub const MAX_QP_RD_ATOMIC: c_int = 8192;
pub const MIN_RNR_TIMER: c_int = 32768;
pub const SQ_PSN: c_int = 65536;
pub const MAX_DEST_RD_ATOMIC: c_int = 131072;
pub const DEST_QPN: c_int = 1 << 20;
// access flags, send flags, opcodes
pub const ALL_ACCESS: c_int = 1 | 2 | 4 | 8;
pub const SIGNALED: u32 = 2;
pub const SOLICITED: u32 = 4;
pub const WR_RDMA_WRITE: c_int = 0;
pub const WR_SEND_WITH_IMM: c_int = 3;

/// RESET → INIT → RTR → RTS, connected to `dest` at `gid` (GID index 1 on both sides).
pub unsafe fn connect(qp: *mut IbvQp, dest: u32, psn: u32, dest_psn: u32, gid: Gid) {
    let mut a = QpAttrC { qp_state: 1, port_num: 1, qp_access_flags: ALL_ACCESS as u32, ..Default::default() };
    assert_eq!(ibv_modify_qp(qp, &mut a, STATE | PKEY_INDEX | PORT | ACCESS_FLAGS), 0, "INIT");
    let mut a = QpAttrC {
        qp_state: 2,
        path_mtu: 3,
        dest_qp_num: dest,
        rq_psn: dest_psn,
        max_dest_rd_atomic: 1,
        min_rnr_timer: 12,
        ..Default::default()
    };
    a.ah_attr.is_global = 1;
    a.ah_attr.port_num = 1;
    a.ah_attr.grh = GlobalRoute { dgid: gid, sgid_index: 1, hop_limit: 64, ..Default::default() };
    let m = STATE | AV | PATH_MTU | DEST_QPN | RQ_PSN | MAX_DEST_RD_ATOMIC | MIN_RNR_TIMER;
    assert_eq!(ibv_modify_qp(qp, &mut a, m), 0, "RTR");
    let mut a = QpAttrC {
        qp_state: 3,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        sq_psn: psn,
        max_rd_atomic: 1,
        ..Default::default()
    };
    assert_eq!(
        ibv_modify_qp(qp, &mut a, STATE | TIMEOUT | RETRY_CNT | RNR_RETRY | SQ_PSN | MAX_QP_RD_ATOMIC),
        0,
        "RTS"
    );
}
