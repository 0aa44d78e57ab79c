//! libibverbs' public structs, as `#[repr(C)]` (x86-64; rdma-core 44 and 56 agree on all of
//! them except `ibv_port_attr`, which grew from 52 to 56 bytes: see [`PortAttr`]). Only the
//! fields uroce reads or writes are named; the rest are padding of the right size. Every size
//! and offset is checked against Debian's `libibverbs-dev` headers by `tests/layout.rs`, which
//! compiles a C program that prints them.

use core::ffi::{c_char, c_int, c_void};

/// `IBV_SYSFS_NAME_MAX`.
pub const SYSFS_NAME_MAX: usize = 64;
/// `IBV_SYSFS_PATH_MAX`.
pub const SYSFS_PATH_MAX: usize = 256;

/// `enum ibv_node_type`: `IBV_NODE_CA`.
pub const NODE_CA: c_int = 1;
/// `enum ibv_transport_type`: `IBV_TRANSPORT_IB`.
pub const TRANSPORT_IB: c_int = 0;

/// `struct ibv_device` (664 bytes).
#[repr(C)]
pub struct IbvDevice {
    /// `_ops`: two obsolete function pointers, NULL.
    pub ops: [usize; 2],
    /// `node_type`.
    pub node_type: c_int,
    /// `transport_type`.
    pub transport_type: c_int,
    /// `name`: the device's name (`ibv_get_device_name`).
    pub name: [c_char; SYSFS_NAME_MAX],
    /// `dev_name` (the uverbs device's name: none here, so the device name again).
    pub dev_name: [c_char; SYSFS_NAME_MAX],
    /// `dev_path`.
    pub dev_path: [c_char; SYSFS_PATH_MAX],
    /// `ibdev_path`.
    pub ibdev_path: [c_char; SYSFS_PATH_MAX],
}

/// `struct ibv_context_ops` (256 bytes): the slots libibverbs' inline verbs call through.
#[repr(C)]
pub struct IbvContextOps {
    /// `_compat_query_device` … `_compat_create_cq` (11 obsolete or unused slots).
    pub _head: [usize; 11],
    /// `poll_cq(cq, num_entries, wc)`.
    pub poll_cq: Option<unsafe extern "C" fn(*mut c_void, c_int, *mut c_void) -> c_int>,
    /// `req_notify_cq(cq, solicited_only)`.
    pub req_notify_cq: Option<unsafe extern "C" fn(*mut c_void, c_int) -> c_int>,
    /// `_compat_cq_event` … `_compat_destroy_srq` (7 slots).
    pub _mid1: [usize; 7],
    /// `post_srq_recv(srq, wr, bad_wr)`.
    pub post_srq_recv: Option<unsafe extern "C" fn(*mut c_void, *mut c_void, *mut *mut c_void) -> c_int>,
    /// `_compat_create_qp` … `_compat_destroy_qp` (4 slots).
    pub _mid2: [usize; 4],
    /// `post_send(qp, wr, bad_wr)`.
    pub post_send: Option<unsafe extern "C" fn(*mut c_void, *mut c_void, *mut *mut c_void) -> c_int>,
    /// `post_recv(qp, wr, bad_wr)`.
    pub post_recv: Option<unsafe extern "C" fn(*mut c_void, *mut c_void, *mut *mut c_void) -> c_int>,
    /// `_compat_create_ah` … `_compat_async_event` (5 slots).
    pub _tail: [usize; 5],
}

/// `struct ibv_context` (328 bytes).
#[repr(C)]
pub struct IbvContext {
    /// `device`.
    pub device: *mut IbvDevice,
    /// `ops`.
    pub ops: IbvContextOps,
    /// `cmd_fd`: -1 (there is no kernel command channel).
    pub cmd_fd: c_int,
    /// `async_fd`: a descriptor uroce owns, readable when an async event is queued.
    pub async_fd: c_int,
    /// `num_comp_vectors`.
    pub num_comp_vectors: c_int,
    /// `mutex`.
    pub mutex: libc::pthread_mutex_t,
    /// `abi_compat`: `UINTPTR_MAX` marks the extended context (`verbs_get_ctx`).
    pub abi_compat: *mut c_void,
}

/// `query_port(context, port_num, port_attr, port_attr_len)`.
pub type QueryPortFn = unsafe extern "C" fn(*mut IbvContext, u8, *mut PortAttr, usize) -> c_int;

/// `struct verbs_context` (648 bytes): the extended ops, then the `ibv_context` as its last
/// member. An op is used only if `sz ≥ 648 − its offset` and it is not NULL.
#[repr(C)]
pub struct VerbsContext {
    /// `query_port`: what the inline `ibv_query_port` calls.
    pub query_port: Option<QueryPortFn>,
    /// `advise_mr` … `query_rt_values` (24 slots).
    pub _ops_a: [usize; 24],
    /// `create_cq_ex`.
    pub create_cq_ex: usize,
    /// `priv`.
    pub priv_: usize,
    /// `query_device_ex`.
    pub query_device_ex: usize,
    /// `ibv_destroy_flow`, a placeholder, `ibv_create_flow`, a placeholder, `open_qp`.
    pub _ops_b: [usize; 5],
    /// `create_qp_ex`.
    pub create_qp_ex: usize,
    /// `get_srq_num`, `create_srq_ex`, `open_xrcd`, `close_xrcd`.
    pub _ops_c: [usize; 4],
    /// `_ABI_placeholder3`.
    pub _placeholder3: u64,
    /// `sz`: the size of this struct, 648.
    pub sz: usize,
    /// `context`.
    pub context: IbvContext,
}

/// `struct ibv_device_attr` (232 bytes).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct DeviceAttr {
    /// `fw_ver`.
    pub fw_ver: [c_char; 64],
    /// `node_guid` (network byte order).
    pub node_guid: u64,
    /// `sys_image_guid` (network byte order).
    pub sys_image_guid: u64,
    /// `max_mr_size`.
    pub max_mr_size: u64,
    /// `page_size_cap`.
    pub page_size_cap: u64,
    /// `vendor_id`.
    pub vendor_id: u32,
    /// `vendor_part_id`.
    pub vendor_part_id: u32,
    /// `hw_ver`.
    pub hw_ver: u32,
    /// `max_qp`.
    pub max_qp: c_int,
    /// `max_qp_wr`.
    pub max_qp_wr: c_int,
    /// `device_cap_flags`.
    pub device_cap_flags: u32,
    /// `max_sge`.
    pub max_sge: c_int,
    /// `max_sge_rd`.
    pub max_sge_rd: c_int,
    /// `max_cq`.
    pub max_cq: c_int,
    /// `max_cqe`.
    pub max_cqe: c_int,
    /// `max_mr`.
    pub max_mr: c_int,
    /// `max_pd`.
    pub max_pd: c_int,
    /// `max_qp_rd_atom`.
    pub max_qp_rd_atom: c_int,
    /// `max_ee_rd_atom`.
    pub max_ee_rd_atom: c_int,
    /// `max_res_rd_atom`.
    pub max_res_rd_atom: c_int,
    /// `max_qp_init_rd_atom`.
    pub max_qp_init_rd_atom: c_int,
    /// `max_ee_init_rd_atom`.
    pub max_ee_init_rd_atom: c_int,
    /// `atomic_cap` (`IBV_ATOMIC_HCA` = 1).
    pub atomic_cap: c_int,
    /// `max_ee`, `max_rdd`, `max_mw`, `max_raw_ipv6_qp`, `max_raw_ethy_qp`.
    pub _unsupported: [c_int; 5],
    /// `max_mcast_grp`.
    pub max_mcast_grp: c_int,
    /// `max_mcast_qp_attach`.
    pub max_mcast_qp_attach: c_int,
    /// `max_total_mcast_qp_attach`.
    pub max_total_mcast_qp_attach: c_int,
    /// `max_ah`.
    pub max_ah: c_int,
    /// `max_fmr`, `max_map_per_fmr`.
    pub _fmr: [c_int; 2],
    /// `max_srq`.
    pub max_srq: c_int,
    /// `max_srq_wr`.
    pub max_srq_wr: c_int,
    /// `max_srq_sge`.
    pub max_srq_sge: c_int,
    /// `max_pkeys`.
    pub max_pkeys: u16,
    /// `local_ca_ack_delay`.
    pub local_ca_ack_delay: u8,
    /// `phys_port_cnt`.
    pub phys_port_cnt: u8,
}

/// `struct ibv_port_attr` as rdma-core 56 has it (56 bytes; rdma-core 44's is the first 52,
/// without `active_speed_ex`). uroce copies `min(caller's size, 56)` bytes, as
/// `__lib_query_port` does.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct PortAttr {
    /// `state` (`IBV_PORT_ACTIVE` = 4).
    pub state: c_int,
    /// `max_mtu` (`enum ibv_mtu`: 1 = 256 … 5 = 4096).
    pub max_mtu: c_int,
    /// `active_mtu`.
    pub active_mtu: c_int,
    /// `gid_tbl_len`.
    pub gid_tbl_len: c_int,
    /// `port_cap_flags`.
    pub port_cap_flags: u32,
    /// `max_msg_sz`.
    pub max_msg_sz: u32,
    /// `bad_pkey_cntr`.
    pub bad_pkey_cntr: u32,
    /// `qkey_viol_cntr`.
    pub qkey_viol_cntr: u32,
    /// `pkey_tbl_len`.
    pub pkey_tbl_len: u16,
    /// `lid`.
    pub lid: u16,
    /// `sm_lid`.
    pub sm_lid: u16,
    /// `lmc`.
    pub lmc: u8,
    /// `max_vl_num`.
    pub max_vl_num: u8,
    /// `sm_sl`.
    pub sm_sl: u8,
    /// `subnet_timeout`.
    pub subnet_timeout: u8,
    /// `init_type_reply`.
    pub init_type_reply: u8,
    /// `active_width`.
    pub active_width: u8,
    /// `active_speed`.
    pub active_speed: u8,
    /// `phys_state`.
    pub phys_state: u8,
    /// `link_layer` (`IBV_LINK_LAYER_ETHERNET` = 2).
    pub link_layer: u8,
    /// `flags`.
    pub flags: u8,
    /// `port_cap_flags2`.
    pub port_cap_flags2: u16,
    /// `active_speed_ex` (rdma-core 56).
    pub active_speed_ex: u32,
}

/// The bytes of `ibv_port_attr` the exported `ibv_query_port` fills: rdma-core's
/// `struct _compat_ibv_port_attr`, the fields up to `link_layer` and a reserved byte.
pub const COMPAT_PORT_ATTR_LEN: usize = 48;

/// `union ibv_gid`.
pub type Gid = [u8; 16];

/// `struct ibv_gid_entry` (32 bytes).
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct GidEntry {
    /// `gid`.
    pub gid: Gid,
    /// `gid_index`.
    pub gid_index: u32,
    /// `port_num`.
    pub port_num: u32,
    /// `gid_type` (`IBV_GID_TYPE_ROCE_V2` = 2).
    pub gid_type: u32,
    /// `ndev_ifindex`.
    pub ndev_ifindex: u32,
}

/// `enum ibv_gid_type`: RoCEv2.
pub const GID_TYPE_ROCE_V2: u32 = 2;
/// `enum ibv_gid_type_sysfs` (the private `ibv_query_gid_type`): RoCEv2.
pub const GID_TYPE_SYSFS_ROCE_V2: c_int = 1;

/// `struct ibv_pd` (16 bytes).
#[repr(C)]
pub struct IbvPd {
    /// `context`.
    pub context: *mut IbvContext,
    /// `handle`.
    pub handle: u32,
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::mem::{offset_of, size_of};

    /// The sizes and offsets `../shared/docs/verbs-abi.md` lists (the C check is
    /// `tests/layout.rs`).
    #[test]
    fn sizes_and_offsets() {
        assert_eq!(size_of::<IbvDevice>(), 664);
        assert_eq!(size_of::<IbvContextOps>(), 256);
        assert_eq!(size_of::<IbvContext>(), 328);
        assert_eq!(offset_of!(IbvContext, ops) + offset_of!(IbvContextOps, poll_cq), 96);
        assert_eq!(offset_of!(IbvContext, ops) + offset_of!(IbvContextOps, post_send), 208);
        assert_eq!(offset_of!(IbvContext, abi_compat), 320);
        assert_eq!(size_of::<VerbsContext>(), 648);
        assert_eq!(offset_of!(VerbsContext, context), 320);
        assert_eq!(offset_of!(VerbsContext, create_qp_ex), 320 - 56);
        assert_eq!(offset_of!(VerbsContext, sz), 320 - 8);
        assert_eq!(size_of::<DeviceAttr>(), 232);
        assert_eq!(size_of::<PortAttr>(), 56);
        assert_eq!(offset_of!(PortAttr, port_cap_flags2), 48);
        assert_eq!(size_of::<GidEntry>(), 32);
    }
}
