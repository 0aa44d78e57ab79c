//! librdmacm's public structs (`<rdma/rdma_cma.h>`, rdma-core 44), `#[repr(C)]`, checked
//! against the C header by `tests/layout.rs`.

use crate::abi::{AhAttrC, IbvContext, IbvPd, IbvQp};
use core::ffi::{c_int, c_void};

/// `struct rdma_event_channel`: the descriptor the program polls.
#[repr(C)]
pub struct RdmaEventChannelC {
    /// `fd`.
    pub fd: c_int,
}

/// `struct rdma_ib_addr`.
#[repr(C, align(8))]
#[derive(Clone, Copy, Default)]
pub struct RdmaIbAddrC {
    /// `sgid`.
    pub sgid: [u8; 16],
    /// `dgid`.
    pub dgid: [u8; 16],
    /// `pkey` (network order).
    pub pkey: u16,
}

/// `struct rdma_addr`: two `sockaddr_storage` unions and the GIDs.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct RdmaAddrC {
    /// `src_storage` (and `src_addr`, `src_sin`, `src_sin6`).
    pub src: libc::sockaddr_storage,
    /// `dst_storage`.
    pub dst: libc::sockaddr_storage,
    /// `addr.ibaddr`.
    pub ibaddr: RdmaIbAddrC,
}

/// `struct rdma_route`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct RdmaRouteC {
    /// `addr`.
    pub addr: RdmaAddrC,
    /// `path_rec` (`struct ibv_sa_path_rec *`).
    pub path_rec: *mut c_void,
    /// `num_paths`.
    pub num_paths: c_int,
}

/// `struct rdma_cm_id`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct RdmaCmIdC {
    /// `verbs`.
    pub verbs: *mut IbvContext,
    /// `channel`.
    pub channel: *mut RdmaEventChannelC,
    /// `context`.
    pub context: *mut c_void,
    /// `qp`.
    pub qp: *mut IbvQp,
    /// `route`.
    pub route: RdmaRouteC,
    /// `ps` (`enum rdma_port_space`).
    pub ps: c_int,
    /// `port_num`.
    pub port_num: u8,
    /// `event`.
    pub event: *mut RdmaCmEventC,
    /// `send_cq_channel`.
    pub send_cq_channel: *mut c_void,
    /// `send_cq`.
    pub send_cq: *mut c_void,
    /// `recv_cq_channel`.
    pub recv_cq_channel: *mut c_void,
    /// `recv_cq`.
    pub recv_cq: *mut c_void,
    /// `srq`.
    pub srq: *mut c_void,
    /// `pd`.
    pub pd: *mut IbvPd,
    /// `qp_type` (`enum ibv_qp_type`).
    pub qp_type: c_int,
}

/// `struct rdma_conn_param`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct RdmaConnParamC {
    /// `private_data`.
    pub private_data: *const c_void,
    /// `private_data_len`.
    pub private_data_len: u8,
    /// `responder_resources`.
    pub responder_resources: u8,
    /// `initiator_depth`.
    pub initiator_depth: u8,
    /// `flow_control`.
    pub flow_control: u8,
    /// `retry_count`.
    pub retry_count: u8,
    /// `rnr_retry_count`.
    pub rnr_retry_count: u8,
    /// `srq`.
    pub srq: u8,
    /// `qp_num`.
    pub qp_num: u32,
}

/// `struct rdma_ud_param`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct RdmaUdParamC {
    /// `private_data`.
    pub private_data: *const c_void,
    /// `private_data_len`.
    pub private_data_len: u8,
    /// `ah_attr`.
    pub ah_attr: AhAttrC,
    /// `qp_num`.
    pub qp_num: u32,
    /// `qkey`.
    pub qkey: u32,
}

/// `union { struct rdma_conn_param conn; struct rdma_ud_param ud; }`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union RdmaEventParamC {
    /// `conn`.
    pub conn: RdmaConnParamC,
    /// `ud`.
    pub ud: RdmaUdParamC,
}

/// `struct rdma_cm_event`.
#[repr(C)]
pub struct RdmaCmEventC {
    /// `id`.
    pub id: *mut RdmaCmIdC,
    /// `listen_id`.
    pub listen_id: *mut RdmaCmIdC,
    /// `event` (`enum rdma_cm_event_type`).
    pub event: c_int,
    /// `status`.
    pub status: c_int,
    /// `param`.
    pub param: RdmaEventParamC,
}

/// `RDMA_PS_TCP`.
pub const RDMA_PS_TCP: c_int = 0x0106;
/// `RDMA_PS_UDP`.
pub const RDMA_PS_UDP: c_int = 0x0111;
/// `RDMA_PS_IB`.
pub const RDMA_PS_IB: c_int = 0x013f;
/// `RDMA_PS_IPOIB`.
pub const RDMA_PS_IPOIB: c_int = 0x0002;

/// `IBV_QPT_RC`.
pub const IBV_QPT_RC: c_int = 2;
/// `IBV_QPT_UD`.
pub const IBV_QPT_UD: c_int = 4;
