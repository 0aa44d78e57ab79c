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
    /// `create_cq_ex` (the inline `ibv_create_cq_ex` calls it).
    pub create_cq_ex: Option<unsafe extern "C" fn(*mut IbvContext, *mut CqInitAttrExC) -> *mut IbvCq>,
    /// `priv`.
    pub priv_: usize,
    /// `query_device_ex(ctx, input, attr, attr_size)`: what the inline `ibv_query_device_ex`
    /// calls.
    pub query_device_ex: Option<QueryDeviceExFn>,
    /// `ibv_destroy_flow`, a placeholder, `ibv_create_flow`, a placeholder, `open_qp`.
    pub _ops_b: [usize; 5],
    /// `create_qp_ex` (the inline `ibv_create_qp_ex` calls it).
    pub create_qp_ex: Option<unsafe extern "C" fn(*mut IbvContext, *mut QpInitAttrExC) -> *mut IbvQp>,
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

/// `struct ibv_ah` (24 bytes).
#[repr(C)]
pub struct IbvAh {
    /// `context`.
    pub context: *mut IbvContext,
    /// `pd`.
    pub pd: *mut IbvPd,
    /// `handle`.
    pub handle: u32,
}

/// `struct ibv_srq` (128 bytes).
#[repr(C)]
pub struct IbvSrq {
    /// `context`.
    pub context: *mut IbvContext,
    /// `srq_context`.
    pub srq_context: *mut c_void,
    /// `pd`.
    pub pd: *mut IbvPd,
    /// `handle`.
    pub handle: u32,
    /// `mutex`.
    pub mutex: libc::pthread_mutex_t,
    /// `cond`.
    pub cond: libc::pthread_cond_t,
    /// `events_completed`.
    pub events_completed: u32,
}

/// `struct ibv_srq_attr` (12 bytes).
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct SrqAttrC {
    /// `max_wr`.
    pub max_wr: u32,
    /// `max_sge`.
    pub max_sge: u32,
    /// `srq_limit`.
    pub srq_limit: u32,
}

/// `struct ibv_srq_init_attr` (24 bytes).
#[repr(C)]
pub struct SrqInitAttrC {
    /// `srq_context`.
    pub srq_context: *mut c_void,
    /// `attr`.
    pub attr: SrqAttrC,
}

/// `struct ibv_grh` (40 bytes): the first 40 bytes of a UD receive buffer.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct Grh {
    /// `version_tclass_flow` (network order).
    pub version_tclass_flow: u32,
    /// `paylen` (network order).
    pub paylen: u16,
    /// `next_hdr`.
    pub next_hdr: u8,
    /// `hop_limit`.
    pub hop_limit: u8,
    /// `sgid`.
    pub sgid: Gid,
    /// `dgid`.
    pub dgid: Gid,
}

/// `struct ibv_mr` (48 bytes).
#[repr(C)]
pub struct IbvMr {
    /// `context`.
    pub context: *mut IbvContext,
    /// `pd`.
    pub pd: *mut IbvPd,
    /// `addr`.
    pub addr: *mut c_void,
    /// `length`.
    pub length: usize,
    /// `handle`.
    pub handle: u32,
    /// `lkey`.
    pub lkey: u32,
    /// `rkey`.
    pub rkey: u32,
}

/// `struct ibv_comp_channel` (16 bytes).
#[repr(C)]
pub struct IbvCompChannel {
    /// `context`.
    pub context: *mut IbvContext,
    /// `fd`.
    pub fd: c_int,
    /// `refcnt`.
    pub refcnt: c_int,
}

/// `verbs_context.query_device_ex`.
pub type QueryDeviceExFn = unsafe extern "C" fn(*mut IbvContext, *const c_void, *mut u8, usize) -> c_int;

/// `sizeof(struct ibv_device_attr_ex)` (rdma-core 44 and 56): `orig_attr` (a
/// `struct ibv_device_attr`) first, `phys_port_cnt_ex` (u32) last.
pub const DEVICE_ATTR_EX_LEN: usize = 400;
/// `offsetof(struct ibv_device_attr_ex, phys_port_cnt_ex)`.
pub const PHYS_PORT_CNT_EX_OFFSET: usize = 396;

/// `struct ibv_async_event` (16 bytes): the object (`cq`, `qp`, `srq`, `wq` or `port_num`)
/// and `event_type` (`enum ibv_event_type`).
#[repr(C)]
pub struct IbvAsyncEvent {
    /// `element`.
    pub element: *mut c_void,
    /// `event_type`.
    pub event_type: c_int,
}

/// `struct ibv_cq` (128 bytes).
#[repr(C)]
pub struct IbvCq {
    /// `context`.
    pub context: *mut IbvContext,
    /// `channel`.
    pub channel: *mut IbvCompChannel,
    /// `cq_context`.
    pub cq_context: *mut c_void,
    /// `handle`.
    pub handle: u32,
    /// `cqe`.
    pub cqe: c_int,
    /// `mutex`.
    pub mutex: libc::pthread_mutex_t,
    /// `cond`.
    pub cond: libc::pthread_cond_t,
    /// `comp_events_completed`.
    pub comp_events_completed: u32,
    /// `async_events_completed`.
    pub async_events_completed: u32,
}

/// `struct ibv_qp` (160 bytes).
#[repr(C)]
pub struct IbvQp {
    /// `context`.
    pub context: *mut IbvContext,
    /// `qp_context`.
    pub qp_context: *mut c_void,
    /// `pd`.
    pub pd: *mut IbvPd,
    /// `send_cq`.
    pub send_cq: *mut IbvCq,
    /// `recv_cq`.
    pub recv_cq: *mut IbvCq,
    /// `srq`.
    pub srq: *mut c_void,
    /// `handle`.
    pub handle: u32,
    /// `qp_num`.
    pub qp_num: u32,
    /// `state` (`enum ibv_qp_state`).
    pub state: c_int,
    /// `qp_type` (`IBV_QPT_RC` = 2).
    pub qp_type: c_int,
    /// `mutex`.
    pub mutex: libc::pthread_mutex_t,
    /// `cond`.
    pub cond: libc::pthread_cond_t,
    /// `events_completed`.
    pub events_completed: u32,
}

/// `struct ibv_qp_cap` (20 bytes).
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct QpCapC {
    /// `max_send_wr`.
    pub max_send_wr: u32,
    /// `max_recv_wr`.
    pub max_recv_wr: u32,
    /// `max_send_sge`.
    pub max_send_sge: u32,
    /// `max_recv_sge`.
    pub max_recv_sge: u32,
    /// `max_inline_data`.
    pub max_inline_data: u32,
}

/// `struct ibv_qp_init_attr` (64 bytes).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct QpInitAttrC {
    /// `qp_context`.
    pub qp_context: *mut c_void,
    /// `send_cq`.
    pub send_cq: *mut IbvCq,
    /// `recv_cq`.
    pub recv_cq: *mut IbvCq,
    /// `srq`.
    pub srq: *mut c_void,
    /// `cap`.
    pub cap: QpCapC,
    /// `qp_type`.
    pub qp_type: c_int,
    /// `sq_sig_all`.
    pub sq_sig_all: c_int,
}

/// `struct ibv_global_route` (24 bytes). Aligned to 8 as in C, where `union ibv_gid` has 64-bit members.
#[repr(C, align(8))]
#[derive(Clone, Copy, Default)]
pub struct GlobalRoute {
    /// `dgid`.
    pub dgid: Gid,
    /// `flow_label`.
    pub flow_label: u32,
    /// `sgid_index`.
    pub sgid_index: u8,
    /// `hop_limit`.
    pub hop_limit: u8,
    /// `traffic_class`.
    pub traffic_class: u8,
}

/// `struct ibv_ah_attr` (32 bytes). Aligned to 8 as in C, where `union ibv_gid` has 64-bit members.
#[repr(C, align(8))]
#[derive(Clone, Copy, Default)]
pub struct AhAttrC {
    /// `grh`.
    pub grh: GlobalRoute,
    /// `dlid`.
    pub dlid: u16,
    /// `sl`.
    pub sl: u8,
    /// `src_path_bits`.
    pub src_path_bits: u8,
    /// `static_rate`.
    pub static_rate: u8,
    /// `is_global`.
    pub is_global: u8,
    /// `port_num`.
    pub port_num: u8,
}

/// `struct ibv_qp_attr` (144 bytes). Aligned to 8 as in C, where `union ibv_gid` has 64-bit members.
#[repr(C, align(8))]
#[derive(Clone, Copy, Default)]
pub struct QpAttrC {
    /// `qp_state`.
    pub qp_state: c_int,
    /// `cur_qp_state`.
    pub cur_qp_state: c_int,
    /// `path_mtu`.
    pub path_mtu: c_int,
    /// `path_mig_state`.
    pub path_mig_state: c_int,
    /// `qkey`.
    pub qkey: u32,
    /// `rq_psn`.
    pub rq_psn: u32,
    /// `sq_psn`.
    pub sq_psn: u32,
    /// `dest_qp_num`.
    pub dest_qp_num: u32,
    /// `qp_access_flags`.
    pub qp_access_flags: u32,
    /// `cap`.
    pub cap: QpCapC,
    /// `ah_attr`.
    pub ah_attr: AhAttrC,
    /// `alt_ah_attr`.
    pub alt_ah_attr: AhAttrC,
    /// `pkey_index`.
    pub pkey_index: u16,
    /// `alt_pkey_index`.
    pub alt_pkey_index: u16,
    /// `en_sqd_async_notify`.
    pub en_sqd_async_notify: u8,
    /// `sq_draining`.
    pub sq_draining: u8,
    /// `max_rd_atomic`.
    pub max_rd_atomic: u8,
    /// `max_dest_rd_atomic`.
    pub max_dest_rd_atomic: u8,
    /// `min_rnr_timer`.
    pub min_rnr_timer: u8,
    /// `port_num`.
    pub port_num: u8,
    /// `timeout`.
    pub timeout: u8,
    /// `retry_cnt`.
    pub retry_cnt: u8,
    /// `rnr_retry`.
    pub rnr_retry: u8,
    /// `alt_port_num`.
    pub alt_port_num: u8,
    /// `alt_timeout`.
    pub alt_timeout: u8,
    /// `rate_limit`.
    pub rate_limit: u32,
}

/// The members of `struct ibv_qp_ex` after its `qp_base` (`struct ibv_qp`, 160 bytes): the
/// extended post-send API (`ibv_wr_*` are static inlines calling these pointers). 200 bytes,
/// so `ibv_qp_ex` is 360 as in rdma-core 56 (`wr_flush` last; 44's ends before it, at 352).
#[repr(C)]
pub struct QpExTail {
    /// `comp_mask`.
    pub comp_mask: u64,
    /// `wr_id`: the program sets it before each `wr_*` opcode call.
    pub wr_id: u64,
    /// `wr_flags` (`enum ibv_send_flags`), likewise.
    pub wr_flags: u32,
    /// `wr_atomic_cmp_swp(qp, rkey, remote_addr, compare, swap)`.
    pub wr_atomic_cmp_swp: Option<unsafe extern "C" fn(*mut c_void, u32, u64, u64, u64)>,
    /// `wr_atomic_fetch_add(qp, rkey, remote_addr, add)`.
    pub wr_atomic_fetch_add: Option<unsafe extern "C" fn(*mut c_void, u32, u64, u64)>,
    /// `wr_bind_mw(qp, mw, rkey, bind_info)`.
    pub wr_bind_mw: Option<unsafe extern "C" fn(*mut c_void, *mut c_void, u32, *const c_void)>,
    /// `wr_local_inv(qp, invalidate_rkey)`.
    pub wr_local_inv: Option<unsafe extern "C" fn(*mut c_void, u32)>,
    /// `wr_rdma_read(qp, rkey, remote_addr)`.
    pub wr_rdma_read: Option<unsafe extern "C" fn(*mut c_void, u32, u64)>,
    /// `wr_rdma_write(qp, rkey, remote_addr)`.
    pub wr_rdma_write: Option<unsafe extern "C" fn(*mut c_void, u32, u64)>,
    /// `wr_rdma_write_imm(qp, rkey, remote_addr, imm_data)`.
    pub wr_rdma_write_imm: Option<unsafe extern "C" fn(*mut c_void, u32, u64, u32)>,
    /// `wr_send(qp)`.
    pub wr_send: Option<unsafe extern "C" fn(*mut c_void)>,
    /// `wr_send_imm(qp, imm_data)`.
    pub wr_send_imm: Option<unsafe extern "C" fn(*mut c_void, u32)>,
    /// `wr_send_inv(qp, invalidate_rkey)`.
    pub wr_send_inv: Option<unsafe extern "C" fn(*mut c_void, u32)>,
    /// `wr_send_tso(qp, hdr, hdr_sz, mss)`.
    pub wr_send_tso: Option<unsafe extern "C" fn(*mut c_void, *mut c_void, u16, u16)>,
    /// `wr_set_ud_addr(qp, ah, remote_qpn, remote_qkey)`.
    pub wr_set_ud_addr: Option<unsafe extern "C" fn(*mut c_void, *mut c_void, u32, u32)>,
    /// `wr_set_xrc_srqn(qp, remote_srqn)`.
    pub wr_set_xrc_srqn: Option<unsafe extern "C" fn(*mut c_void, u32)>,
    /// `wr_set_inline_data(qp, addr, length)`.
    pub wr_set_inline_data: Option<unsafe extern "C" fn(*mut c_void, *const c_void, usize)>,
    /// `wr_set_inline_data_list(qp, num_buf, buf_list)` (`struct ibv_data_buf`: addr, length).
    pub wr_set_inline_data_list: Option<unsafe extern "C" fn(*mut c_void, usize, *const DataBufC)>,
    /// `wr_set_sge(qp, lkey, addr, length)`.
    pub wr_set_sge: Option<unsafe extern "C" fn(*mut c_void, u32, u64, u32)>,
    /// `wr_set_sge_list(qp, num_sge, sg_list)`.
    pub wr_set_sge_list: Option<unsafe extern "C" fn(*mut c_void, usize, *const SgeC)>,
    /// `wr_start(qp)`.
    pub wr_start: Option<unsafe extern "C" fn(*mut c_void)>,
    /// `wr_complete(qp)`.
    pub wr_complete: Option<unsafe extern "C" fn(*mut c_void) -> c_int>,
    /// `wr_abort(qp)`.
    pub wr_abort: Option<unsafe extern "C" fn(*mut c_void)>,
    /// `wr_atomic_write(qp, rkey, remote_addr, atomic_wr)`.
    pub wr_atomic_write: Option<unsafe extern "C" fn(*mut c_void, u32, u64, *const c_void)>,
    /// `wr_flush(qp, rkey, remote_addr, len, type, level)` (rdma-core 56).
    pub wr_flush: Option<unsafe extern "C" fn(*mut c_void, u32, u64, usize, u8, u8)>,
}

/// `struct ibv_data_buf` (16 bytes).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct DataBufC {
    /// `addr`.
    pub addr: *const c_void,
    /// `length`.
    pub length: usize,
}

/// `struct ibv_qp_init_attr_ex` (136 bytes): `struct ibv_qp_init_attr`'s members, then the
/// extensions `comp_mask` selects.
#[repr(C)]
pub struct QpInitAttrExC {
    /// `qp_context`.
    pub qp_context: *mut c_void,
    /// `send_cq`.
    pub send_cq: *mut IbvCq,
    /// `recv_cq`.
    pub recv_cq: *mut IbvCq,
    /// `srq`.
    pub srq: *mut c_void,
    /// `cap`.
    pub cap: QpCapC,
    /// `qp_type`.
    pub qp_type: c_int,
    /// `sq_sig_all`.
    pub sq_sig_all: c_int,
    /// `comp_mask` (`IBV_QP_INIT_ATTR_*`), in what is `ibv_qp_init_attr`'s tail padding.
    pub comp_mask: u32,
    /// `pd` (`IBV_QP_INIT_ATTR_PD`).
    pub pd: *mut IbvPd,
    /// `xrcd`.
    pub xrcd: *mut c_void,
    /// `create_flags`.
    pub create_flags: u32,
    /// `max_tso_header`.
    pub max_tso_header: u16,
    /// `rwq_ind_tbl`.
    pub rwq_ind_tbl: *mut c_void,
    /// `rx_hash_conf` (function, key length, key pointer, fields mask).
    pub rx_hash_conf: [u64; 3],
    /// `source_qpn`.
    pub source_qpn: u32,
    /// `send_ops_flags` (`IBV_QP_EX_WITH_*`).
    pub send_ops_flags: u64,
}

/// The members of `struct ibv_cq_ex` after those it shares with `struct ibv_cq` (its first
/// 128 bytes): the current completion's status and `wr_id`, and the polling functions
/// (`ibv_start_poll`, `ibv_wc_read_*` are static inlines calling these). 280 bytes in all.
#[repr(C)]
pub struct CqExTail {
    /// `comp_mask`.
    pub comp_mask: u32,
    /// `status` of the current completion.
    pub status: c_int,
    /// `wr_id` of the current completion.
    pub wr_id: u64,
    /// `start_poll(cq, attr)`: 0, `ENOENT` when empty, or an errno.
    pub start_poll: Option<unsafe extern "C" fn(*mut c_void, *mut u32) -> c_int>,
    /// `next_poll(cq)`.
    pub next_poll: Option<unsafe extern "C" fn(*mut c_void) -> c_int>,
    /// `end_poll(cq)`.
    pub end_poll: Option<unsafe extern "C" fn(*mut c_void)>,
    /// `read_opcode` (`enum ibv_wc_opcode`).
    pub read_opcode: Option<unsafe extern "C" fn(*mut c_void) -> c_int>,
    /// `read_vendor_err`.
    pub read_vendor_err: Option<unsafe extern "C" fn(*mut c_void) -> u32>,
    /// `read_byte_len`.
    pub read_byte_len: Option<unsafe extern "C" fn(*mut c_void) -> u32>,
    /// `read_imm_data` (network order).
    pub read_imm_data: Option<unsafe extern "C" fn(*mut c_void) -> u32>,
    /// `read_qp_num`.
    pub read_qp_num: Option<unsafe extern "C" fn(*mut c_void) -> u32>,
    /// `read_src_qp`.
    pub read_src_qp: Option<unsafe extern "C" fn(*mut c_void) -> u32>,
    /// `read_wc_flags`.
    pub read_wc_flags: Option<unsafe extern "C" fn(*mut c_void) -> u32>,
    /// `read_slid`.
    pub read_slid: Option<unsafe extern "C" fn(*mut c_void) -> u32>,
    /// `read_sl`.
    pub read_sl: Option<unsafe extern "C" fn(*mut c_void) -> u8>,
    /// `read_dlid_path_bits`.
    pub read_dlid_path_bits: Option<unsafe extern "C" fn(*mut c_void) -> u8>,
    /// `read_completion_ts`.
    pub read_completion_ts: Option<unsafe extern "C" fn(*mut c_void) -> u64>,
    /// `read_cvlan`.
    pub read_cvlan: Option<unsafe extern "C" fn(*mut c_void) -> u16>,
    /// `read_flow_tag`.
    pub read_flow_tag: Option<unsafe extern "C" fn(*mut c_void) -> u32>,
    /// `read_tm_info(cq, tm_info)`.
    pub read_tm_info: Option<unsafe extern "C" fn(*mut c_void, *mut c_void)>,
    /// `read_completion_wallclock_ns`.
    pub read_completion_wallclock_ns: Option<unsafe extern "C" fn(*mut c_void) -> u64>,
}

/// `struct ibv_cq_init_attr_ex` (56 bytes).
#[repr(C)]
pub struct CqInitAttrExC {
    /// `cqe`.
    pub cqe: u32,
    /// `cq_context`.
    pub cq_context: *mut c_void,
    /// `channel`.
    pub channel: *mut IbvCompChannel,
    /// `comp_vector`.
    pub comp_vector: u32,
    /// `wc_flags` (`IBV_WC_EX_WITH_*`).
    pub wc_flags: u64,
    /// `comp_mask` (`IBV_CQ_INIT_ATTR_MASK_*`).
    pub comp_mask: u32,
    /// `flags` (`IBV_CREATE_CQ_ATTR_*`).
    pub flags: u32,
    /// `parent_domain`.
    pub parent_domain: *mut c_void,
}

/// `struct ibv_sge` (16 bytes).
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct SgeC {
    /// `addr`.
    pub addr: u64,
    /// `length`.
    pub length: u32,
    /// `lkey`.
    pub lkey: u32,
}

/// `struct ibv_send_wr` (128 bytes).
#[repr(C)]
pub struct SendWrC {
    /// `wr_id`.
    pub wr_id: u64,
    /// `next`.
    pub next: *mut SendWrC,
    /// `sg_list`.
    pub sg_list: *mut SgeC,
    /// `num_sge`.
    pub num_sge: c_int,
    /// `opcode` (`enum ibv_wr_opcode`).
    pub opcode: c_int,
    /// `send_flags`.
    pub send_flags: u32,
    /// `imm_data` (network order) or `invalidate_rkey`.
    pub imm_data: u32,
    /// `wr.rdma.remote_addr` / `wr.atomic.remote_addr` (`wr.ud.ah` for UD).
    pub remote_addr: u64,
    /// `wr.rdma.rkey` (its low 32 bits) or `wr.atomic.compare_add`.
    pub rkey_or_compare_add: u64,
    /// `wr.atomic.swap`.
    pub swap: u64,
    /// `wr.atomic.rkey`.
    pub atomic_rkey: u32,
    /// the rest of `wr`, `qp_type` and the `bind_mw`/`tso` union.
    pub _rest: [u32; 15],
}

/// `struct ibv_recv_wr` (32 bytes).
#[repr(C)]
pub struct RecvWrC {
    /// `wr_id`.
    pub wr_id: u64,
    /// `next`.
    pub next: *mut RecvWrC,
    /// `sg_list`.
    pub sg_list: *mut SgeC,
    /// `num_sge`.
    pub num_sge: c_int,
}

/// `struct ibv_wc` (48 bytes).
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct WcC {
    /// `wr_id`.
    pub wr_id: u64,
    /// `status`.
    pub status: c_int,
    /// `opcode`.
    pub opcode: c_int,
    /// `vendor_err`.
    pub vendor_err: u32,
    /// `byte_len`.
    pub byte_len: u32,
    /// `imm_data` / `invalidated_rkey`.
    pub imm_data: u32,
    /// `qp_num`.
    pub qp_num: u32,
    /// `src_qp`.
    pub src_qp: u32,
    /// `wc_flags`.
    pub wc_flags: u32,
    /// `pkey_index`.
    pub pkey_index: u16,
    /// `slid`.
    pub slid: u16,
    /// `sl`.
    pub sl: u8,
    /// `dlid_path_bits`.
    pub dlid_path_bits: u8,
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
        assert_eq!(size_of::<IbvMr>(), 48);
        assert_eq!(size_of::<IbvCq>(), 128);
        assert_eq!(size_of::<IbvQp>(), 160);
        assert_eq!(size_of::<QpInitAttrC>(), 64);
        assert_eq!(size_of::<QpExTail>(), 200);
        assert_eq!(size_of::<IbvCq>() + size_of::<CqExTail>(), 288);
        assert_eq!(size_of::<CqInitAttrExC>(), 56);
        assert_eq!(size_of::<QpInitAttrExC>(), 136);
        assert_eq!(offset_of!(QpInitAttrExC, comp_mask), 60);
        assert_eq!(offset_of!(QpInitAttrExC, send_ops_flags), 128);
        assert_eq!(size_of::<QpAttrC>(), 144);
        assert_eq!(size_of::<SendWrC>(), 128);
        assert_eq!(offset_of!(SendWrC, atomic_rkey), 64);
        assert_eq!(size_of::<RecvWrC>(), 32);
        assert_eq!(size_of::<WcC>(), 48);
        assert_eq!(size_of::<IbvAh>(), 24);
        assert_eq!(size_of::<IbvSrq>(), 128);
        assert_eq!(size_of::<SrqInitAttrC>(), 24);
        assert_eq!(size_of::<Grh>(), 40);
    }
}
