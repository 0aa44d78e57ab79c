//! Every other symbol rdma-core's library exports, so that programs and the provider
//! libraries Debian's perftest links (`libmlx5.so.1`, `libefa.so.1`; bound at load, never
//! called here) resolve. Each answers as libibverbs documents a failure of its kind: a verb
//! returning an error number returns `EOPNOTSUPP`, one returning a pointer NULL with `errno`
//! set, one returning -1 on failure -1 with `errno` set. The arguments are not read (the SysV
//! x86-64 calling convention lets a callee ignore them).
//!
//! A symbol moves out of here when uroce implements it.

use crate::set_errno;
use core::ffi::{c_char, c_int, c_void};
use core::sync::atomic::AtomicBool;
use libc::EOPNOTSUPP;

/// Verbs that return an error number.
macro_rules! returns_errno {
    ($($name:ident),* $(,)?) => {$(
        #[no_mangle]
        pub extern "C" fn $name() -> c_int {
            set_errno(EOPNOTSUPP);
            EOPNOTSUPP
        }
    )*};
}

/// Verbs that return -1 and set `errno`.
macro_rules! returns_minus_one {
    ($($name:ident),* $(,)?) => {$(
        #[no_mangle]
        pub extern "C" fn $name() -> c_int {
            set_errno(EOPNOTSUPP);
            -1
        }
    )*};
}

/// Verbs that return a pointer (NULL and `errno` on failure).
macro_rules! returns_null {
    ($($name:ident),* $(,)?) => {$(
        #[no_mangle]
        pub extern "C" fn $name() -> *mut c_void {
            set_errno(EOPNOTSUPP);
            core::ptr::null_mut()
        }
    )*};
}

/// Functions without a result.
macro_rules! returns_nothing {
    ($($name:ident),* $(,)?) => {$(
        #[no_mangle]
        pub extern "C" fn $name() {}
    )*};
}

// Public verbs not implemented yet.
returns_null!(ibv_reg_dmabuf_mr, ibv_import_device, ibv_import_pd, ibv_import_mr, ibv_import_dm,);
returns_errno!(
    ibv_resize_cq,
    ibv_attach_mcast,
    ibv_detach_mcast,
    ibv_resolve_eth_l2_from_gid,
    ibv_query_ece,
    ibv_set_ece,
);
returns_minus_one!(ibv_rate_to_mult, mult_to_ibv_rate, ibv_rate_to_mbps, mbps_to_ibv_rate);
returns_nothing!(ibv_unimport_pd, ibv_unimport_mr, ibv_unimport_dm);

/// `ibv_fork_init(3)`: nothing to do (no memory is pinned for a device's DMA).
#[no_mangle]
pub extern "C" fn ibv_fork_init() -> c_int {
    0
}

/// `ibv_is_fork_initialized(3)`: `IBV_FORK_UNNEEDED`.
#[no_mangle]
pub extern "C" fn ibv_is_fork_initialized() -> c_int {
    2
}

/// `ibv_dontfork_range(3)`.
#[no_mangle]
pub extern "C" fn ibv_dontfork_range() -> c_int {
    0
}

/// `ibv_dofork_range(3)`.
#[no_mangle]
pub extern "C" fn ibv_dofork_range() -> c_int {
    0
}

// Historical symbols rdma-core keeps for its other libraries.
returns_nothing!(
    ibv_copy_path_rec_from_kern,
    ibv_copy_path_rec_to_kern,
    ibv_copy_qp_attr_from_kern,
    ibv_copy_ah_attr_from_kern
);
returns_minus_one!(ibv_read_sysfs_file);

/// `ibv_get_sysfs_path`: there is no RDMA sysfs; NULL.
#[no_mangle]
pub extern "C" fn ibv_get_sysfs_path() -> *const c_char {
    core::ptr::null()
}

// IBVERBS_PRIVATE_34: the provider interface. The providers' constructors call
// `verbs_register_driver_34` at load (a no-op here: uroce is the only device); the rest is
// never reached.
returns_nothing!(verbs_register_driver_34, verbs_set_ops, verbs_uninit_context, __verbs_log);
returns_null!(_verbs_init_and_alloc_context, verbs_open_device);
returns_minus_one!(ibv_read_ibdev_sysfs_file);
returns_errno!(
    __ioctl_final_num_attrs,
    execute_ioctl,
    verbs_init_cq,
    ibv_cmd_advise_mr,
    ibv_cmd_alloc_dm,
    ibv_cmd_alloc_mw,
    ibv_cmd_alloc_pd,
    ibv_cmd_attach_mcast,
    ibv_cmd_close_xrcd,
    ibv_cmd_create_ah,
    ibv_cmd_create_counters,
    ibv_cmd_create_cq,
    ibv_cmd_create_cq_ex,
    ibv_cmd_create_flow,
    ibv_cmd_create_flow_action_esp,
    ibv_cmd_create_qp,
    ibv_cmd_create_qp_ex,
    ibv_cmd_create_qp_ex2,
    ibv_cmd_create_rwq_ind_table,
    ibv_cmd_create_srq,
    ibv_cmd_create_srq_ex,
    ibv_cmd_create_wq,
    ibv_cmd_dealloc_mw,
    ibv_cmd_dealloc_pd,
    ibv_cmd_dereg_mr,
    ibv_cmd_destroy_ah,
    ibv_cmd_destroy_counters,
    ibv_cmd_destroy_cq,
    ibv_cmd_destroy_flow,
    ibv_cmd_destroy_flow_action,
    ibv_cmd_destroy_qp,
    ibv_cmd_destroy_rwq_ind_table,
    ibv_cmd_destroy_srq,
    ibv_cmd_destroy_wq,
    ibv_cmd_detach_mcast,
    ibv_cmd_free_dm,
    ibv_cmd_get_context,
    ibv_cmd_modify_cq,
    ibv_cmd_modify_flow_action_esp,
    ibv_cmd_modify_qp,
    ibv_cmd_modify_qp_ex,
    ibv_cmd_modify_srq,
    ibv_cmd_modify_wq,
    ibv_cmd_open_qp,
    ibv_cmd_open_xrcd,
    ibv_cmd_poll_cq,
    ibv_cmd_post_recv,
    ibv_cmd_post_send,
    ibv_cmd_post_srq_recv,
    ibv_cmd_query_context,
    ibv_cmd_query_device_any,
    ibv_cmd_query_mr,
    ibv_cmd_query_port,
    ibv_cmd_query_qp,
    ibv_cmd_query_srq,
    ibv_cmd_read_counters,
    ibv_cmd_reg_dm_mr,
    ibv_cmd_reg_dmabuf_mr,
    ibv_cmd_reg_mr,
    ibv_cmd_req_notify_cq,
    ibv_cmd_rereg_mr,
    ibv_cmd_resize_cq,
);

/// rdma-core's `bool verbs_allow_disassociate_destroy` (a data symbol providers read).
#[no_mangle]
pub static verbs_allow_disassociate_destroy: AtomicBool = AtomicBool::new(false);
