//! Verbs types with libibverbs names, numeric values and semantics (`<infiniband/verbs.h>`):
//! QP states and attributes, access flags, work requests and work completions.

use core::fmt;
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use uroce_wire::EthernetAddress;

macro_rules! flags {
    ($(#[$m:meta])* $name:ident : $t:ty { $($(#[$fm:meta])* $f:ident = $v:expr),* $(,)? }) => {
        $(#[$m])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
        pub struct $name(pub $t);
        #[allow(missing_docs)]
        impl $name {
            pub const NONE: $name = $name(0);
            $( $(#[$fm])* pub const $f: $name = $name($v); )*
            /// All bits of `o` set in `self`?
            pub const fn contains(self, o: $name) -> bool { self.0 & o.0 == o.0 }
            /// Any bit of `o` set in `self`?
            pub const fn intersects(self, o: $name) -> bool { self.0 & o.0 != 0 }
            /// Bits set in `self` but not in `o`.
            pub const fn minus(self, o: $name) -> $name { $name(self.0 & !o.0) }
            /// Is no bit set?
            pub const fn is_empty(self) -> bool { self.0 == 0 }
        }
        impl core::ops::BitOr for $name {
            type Output = $name;
            fn bitor(self, o: $name) -> $name { $name(self.0 | o.0) }
        }
        impl core::ops::BitOrAssign for $name {
            fn bitor_assign(&mut self, o: $name) { self.0 |= o.0 }
        }
        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                let mut first = true;
                write!(f, "{}(", stringify!($name))?;
                $( if $v != 0 && self.contains($name($v)) {
                    if !first { f.write_str("|")?; }
                    first = false;
                    f.write_str(stringify!($f))?;
                } )*
                let known = 0 $(| $v)*;
                if self.0 & !known != 0 {
                    if !first { f.write_str("|")?; }
                    write!(f, "{:#x}", self.0 & !known)?;
                }
                f.write_str(")")
            }
        }
    };
}

flags!(
    /// `enum ibv_access_flags`.
    AccessFlags: u32 {
        LOCAL_WRITE = 1,
        REMOTE_WRITE = 2,
        REMOTE_READ = 4,
        REMOTE_ATOMIC = 8,
        MW_BIND = 16,
        ZERO_BASED = 32,
        ON_DEMAND = 64,
    }
);

flags!(
    /// `enum ibv_qp_attr_mask`.
    QpAttrMask: u32 {
        STATE = 1 << 0,
        CUR_STATE = 1 << 1,
        EN_SQD_ASYNC_NOTIFY = 1 << 2,
        ACCESS_FLAGS = 1 << 3,
        PKEY_INDEX = 1 << 4,
        PORT = 1 << 5,
        QKEY = 1 << 6,
        AV = 1 << 7,
        PATH_MTU = 1 << 8,
        TIMEOUT = 1 << 9,
        RETRY_CNT = 1 << 10,
        RNR_RETRY = 1 << 11,
        RQ_PSN = 1 << 12,
        MAX_QP_RD_ATOMIC = 1 << 13,
        ALT_PATH = 1 << 14,
        MIN_RNR_TIMER = 1 << 15,
        SQ_PSN = 1 << 16,
        MAX_DEST_RD_ATOMIC = 1 << 17,
        PATH_MIG_STATE = 1 << 18,
        CAP = 1 << 19,
        DEST_QPN = 1 << 20,
    }
);

flags!(
    /// `enum ibv_send_flags`.
    SendFlags: u32 {
        FENCE = 1,
        SIGNALED = 2,
        SOLICITED = 4,
        INLINE = 8,
    }
);

flags!(
    /// `enum ibv_wc_flags`.
    WcFlags: u32 {
        GRH = 1,
        WITH_IMM = 2,
        IP_CSUM_OK = 4,
        WITH_INV = 8,
    }
);

/// `enum ibv_qp_state`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default, PartialOrd, Ord)]
#[repr(u8)]
pub enum QpState {
    /// IBV_QPS_RESET
    #[default]
    Reset = 0,
    /// IBV_QPS_INIT
    Init = 1,
    /// IBV_QPS_RTR (ready to receive)
    Rtr = 2,
    /// IBV_QPS_RTS (ready to send)
    Rts = 3,
    /// IBV_QPS_SQD (send queue drained)
    Sqd = 4,
    /// IBV_QPS_SQE (send queue error; UC/UD only)
    Sqe = 5,
    /// IBV_QPS_ERR
    Err = 6,
}

impl QpState {
    /// Every state.
    pub const ALL: [QpState; 7] =
        [QpState::Reset, QpState::Init, QpState::Rtr, QpState::Rts, QpState::Sqd, QpState::Sqe, QpState::Err];
}

/// `enum ibv_qp_type` (the transports uroce knows).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub enum QpType {
    /// IBV_QPT_RC
    #[default]
    Rc,
    /// IBV_QPT_UC: connected, unreliable (no ACKs, no retransmission; SEND and RDMA WRITE).
    Uc,
    /// IBV_QPT_UD: datagrams of at most one path MTU to any QP, addressed per WR by an
    /// [`AddressHandle`], with a Q_Key.
    Ud,
}

impl QpType {
    /// Reliable (RC): acknowledged, retransmitted.
    pub const fn is_reliable(self) -> bool {
        matches!(self, QpType::Rc)
    }
    /// Connected (RC, UC): one peer, fixed by the path set at RTR.
    pub const fn is_connected(self) -> bool {
        !matches!(self, QpType::Ud)
    }
}

/// `enum ibv_mtu`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default, PartialOrd, Ord)]
#[repr(u8)]
pub enum Mtu {
    /// IBV_MTU_256
    #[default]
    Mtu256 = 1,
    /// IBV_MTU_512
    Mtu512 = 2,
    /// IBV_MTU_1024
    Mtu1024 = 3,
    /// IBV_MTU_2048
    Mtu2048 = 4,
    /// IBV_MTU_4096
    Mtu4096 = 5,
}

impl Mtu {
    /// Bytes of payload per packet.
    pub const fn bytes(self) -> usize {
        128 << self as u8
    }
    /// From the enum value (1..=5).
    pub const fn from_enum(v: u8) -> Option<Mtu> {
        match v {
            1 => Some(Mtu::Mtu256),
            2 => Some(Mtu::Mtu512),
            3 => Some(Mtu::Mtu1024),
            4 => Some(Mtu::Mtu2048),
            5 => Some(Mtu::Mtu4096),
            _ => None,
        }
    }
    /// From a byte count (256, 512, 1024, 2048, 4096).
    pub const fn from_bytes(b: usize) -> Option<Mtu> {
        match b {
            256 => Some(Mtu::Mtu256),
            512 => Some(Mtu::Mtu512),
            1024 => Some(Mtu::Mtu1024),
            2048 => Some(Mtu::Mtu2048),
            4096 => Some(Mtu::Mtu4096),
            _ => None,
        }
    }
    /// The largest IB MTU a link MTU carries, as rxe sets its port MTU
    /// (`rxe_set_mtu`: netdev MTU minus `RXE_MAX_HDR_LENGTH` = 80, clamped to 4096).
    pub const fn for_link_mtu(link: usize) -> Mtu {
        let b = link.saturating_sub(80);
        if b >= 4096 {
            Mtu::Mtu4096
        } else if b >= 2048 {
            Mtu::Mtu2048
        } else if b >= 1024 {
            Mtu::Mtu1024
        } else if b >= 512 {
            Mtu::Mtu512
        } else {
            Mtu::Mtu256
        }
    }
}

/// A 128-bit global identifier. RoCEv2 GIDs are IPv6 addresses; IPv4 addresses appear as
/// IPv4-mapped IPv6 (`::ffff:a.b.c.d`), as rxe builds them.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct Gid(pub [u8; 16]);

impl Gid {
    /// The GID of an IP address (IPv4 → IPv4-mapped).
    pub fn from_ip(ip: IpAddr) -> Gid {
        match ip {
            IpAddr::V4(v4) => Gid(v4.to_ipv6_mapped().octets()),
            IpAddr::V6(v6) => Gid(v6.octets()),
        }
    }
    /// The IP address the GID stands for (IPv4 when IPv4-mapped).
    pub fn to_ip(self) -> IpAddr {
        let v6 = Ipv6Addr::from(self.0);
        match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        }
    }
    /// IPv4-mapped?
    pub fn is_ipv4(self) -> bool {
        self.to_ip().is_ipv4()
    }
    /// The link-local GID rxe puts at index 0: fe80::/64 with the EUI-64 of the MAC.
    pub fn link_local(mac: EthernetAddress) -> Gid {
        let m = mac.0;
        Gid([0xfe, 0x80, 0, 0, 0, 0, 0, 0, m[0] ^ 2, m[1], m[2], 0xff, 0xfe, m[3], m[4], m[5]])
    }
}

impl From<Ipv4Addr> for Gid {
    fn from(a: Ipv4Addr) -> Gid {
        Gid::from_ip(IpAddr::V4(a))
    }
}

impl From<Ipv6Addr> for Gid {
    fn from(a: Ipv6Addr) -> Gid {
        Gid::from_ip(IpAddr::V6(a))
    }
}

impl fmt::Debug for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", Ipv6Addr::from(self.0))
    }
}

impl fmt::Display for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// `struct ibv_ah_attr` with its GRH, as RoCEv2 uses it.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct AddressVector {
    /// Destination GID (the peer's IP address).
    pub dgid: Gid,
    /// Index of the source GID in the device's GID table.
    pub sgid_index: u8,
    /// IPv4 TTL / IPv6 hop limit (rxe: 64 unless set; 0 here means 64).
    pub hop_limit: u8,
    /// IPv4 ToS / IPv6 traffic class: DSCP << 2 | ECN, sent verbatim like rxe.
    pub traffic_class: u8,
    /// IPv6 flow label (20 bits); also feeds the UDP source port (0 = derive from the QPNs).
    pub flow_label: u32,
    /// Service level / 802.1p priority (0..=7).
    pub sl: u8,
    /// The peer's MAC: the runtime resolves it from the kernel's neighbour table, as
    /// `ibv_modify_qp` does through the kernel.
    pub dmac: EthernetAddress,
}

/// An address handle (`ibv_create_ah`): a checked [`AddressVector`] in a protection domain,
/// naming the destination of UD sends. Made only by `Device::create_ah`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct AddressHandle {
    pub(crate) pd: PdHandle,
    pub(crate) av: AddressVector,
}

impl AddressHandle {
    /// The address vector.
    pub fn av(&self) -> &AddressVector {
        &self.av
    }
    /// The protection domain.
    pub fn pd(&self) -> PdHandle {
        self.pd
    }
}

/// Where a UD send goes (`ibv_send_wr.wr.ud`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct UdDest {
    /// The destination's address.
    pub ah: AddressHandle,
    /// The destination QP.
    pub remote_qpn: u32,
    /// The Q_Key to send; with its high bit set, the QP's own Q_Key (IBTA §10.2.5, C10-15).
    pub remote_qkey: u32,
}

/// `struct ibv_qp_cap`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct QpCap {
    /// Send queue depth.
    pub max_send_wr: u32,
    /// Receive queue depth.
    pub max_recv_wr: u32,
    /// Scatter/gather entries per send WR.
    pub max_send_sge: u32,
    /// Scatter/gather entries per receive WR.
    pub max_recv_sge: u32,
    /// Bytes of inline data per send WR.
    pub max_inline_data: u32,
}

impl Default for QpCap {
    fn default() -> Self {
        QpCap { max_send_wr: 128, max_recv_wr: 128, max_send_sge: 4, max_recv_sge: 4, max_inline_data: 64 }
    }
}

/// `struct ibv_qp_attr` (the fields an RC QP uses).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct QpAttr {
    /// Target state.
    pub qp_state: QpState,
    /// Assumed current state (checked when `CUR_STATE` is in the mask).
    pub cur_qp_state: QpState,
    /// Path MTU.
    pub path_mtu: Mtu,
    /// Remote access the QP allows (REMOTE_WRITE / REMOTE_READ / REMOTE_ATOMIC).
    pub qp_access_flags: AccessFlags,
    /// P_Key table index (the table holds the default 0xffff only).
    pub pkey_index: u16,
    /// Port (1).
    pub port_num: u8,
    /// Q_Key (UD).
    pub qkey: u32,
    /// Primary path.
    pub ah_attr: AddressVector,
    /// Remote QP number.
    pub dest_qp_num: u32,
    /// Expected PSN of the first incoming request.
    pub rq_psn: u32,
    /// PSN of the first outgoing request.
    pub sq_psn: u32,
    /// Local ACK timeout exponent: 4.096 µs × 2^timeout; 0 = infinite.
    pub timeout: u8,
    /// Transport retries (0..=7).
    pub retry_cnt: u8,
    /// RNR retries (0..=7; 7 = infinite).
    pub rnr_retry: u8,
    /// RNR NAK timer code this QP sends (0..=31).
    pub min_rnr_timer: u8,
    /// Outstanding READ/atomic requests this QP may issue.
    pub max_rd_atomic: u8,
    /// Outstanding READ/atomic requests this QP accepts as responder.
    pub max_dest_rd_atomic: u8,
    /// Ask for an event when the SQ has drained (SQD).
    pub en_sqd_async_notify: bool,
}

/// `struct ibv_qp_init_attr`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct QpInitAttr {
    /// Transport.
    pub qp_type: QpType,
    /// CQ for send completions.
    pub send_cq: CqHandle,
    /// CQ for receive completions.
    pub recv_cq: CqHandle,
    /// Queue sizes.
    pub cap: QpCap,
    /// Every send WR generates a completion, regardless of `SIGNALED`.
    pub sq_sig_all: bool,
    /// Receive from this shared receive queue instead of the QP's own (`ibv_qp_init_attr.srq`).
    pub srq: Option<SrqHandle>,
}

/// A shared receive queue handle.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default, PartialOrd, Ord)]
pub struct SrqHandle(pub u32);

/// `struct ibv_srq_attr`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct SrqAttr {
    /// Receive WRs the SRQ holds.
    pub max_wr: u32,
    /// Scatter/gather entries per receive WR.
    pub max_sge: u32,
    /// The limit: when the SRQ falls below this many WRs, `IBV_EVENT_SRQ_LIMIT_REACHED` is
    /// raised once, and the limit disarmed (0: disarmed).
    pub srq_limit: u32,
}

flags!(
    /// `enum ibv_srq_attr_mask`.
    SrqAttrMask: u32 {
        MAX_WR = 1,
        LIMIT = 2,
    }
);

/// A protection domain handle.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default, PartialOrd, Ord)]
pub struct PdHandle(pub u32);

/// A completion queue handle.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default, PartialOrd, Ord)]
pub struct CqHandle(pub u32);

/// `struct ibv_sge`: `addr` is a virtual address inside the MR named by `lkey`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct Sge {
    /// Start address.
    pub addr: u64,
    /// Length in bytes.
    pub length: u32,
    /// Local key of the MR.
    pub lkey: u32,
}

/// `enum ibv_wr_opcode`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
#[repr(u8)]
pub enum WrOpcode {
    /// IBV_WR_RDMA_WRITE
    RdmaWrite = 0,
    /// IBV_WR_RDMA_WRITE_WITH_IMM
    RdmaWriteWithImm = 1,
    /// IBV_WR_SEND
    #[default]
    Send = 2,
    /// IBV_WR_SEND_WITH_IMM
    SendWithImm = 3,
    /// IBV_WR_RDMA_READ
    RdmaRead = 4,
    /// IBV_WR_ATOMIC_CMP_AND_SWP
    AtomicCmpAndSwp = 5,
    /// IBV_WR_ATOMIC_FETCH_AND_ADD
    AtomicFetchAndAdd = 6,
    /// IBV_WR_SEND_WITH_INV
    SendWithInv = 9,
}

impl WrOpcode {
    /// RDMA READ or an atomic: consumes a responder resource (max_rd_atomic).
    pub const fn is_read_or_atomic(self) -> bool {
        matches!(self, WrOpcode::RdmaRead | WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd)
    }
    /// An atomic operation.
    pub const fn is_atomic(self) -> bool {
        matches!(self, WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd)
    }
    /// The completion opcode of this WR.
    pub const fn wc_opcode(self) -> WcOpcode {
        match self {
            WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm => WcOpcode::RdmaWrite,
            WrOpcode::Send | WrOpcode::SendWithImm | WrOpcode::SendWithInv => WcOpcode::Send,
            WrOpcode::RdmaRead => WcOpcode::RdmaRead,
            WrOpcode::AtomicCmpAndSwp => WcOpcode::CompSwap,
            WrOpcode::AtomicFetchAndAdd => WcOpcode::FetchAdd,
        }
    }
}

/// `struct ibv_send_wr`. The SGE list is borrowed: the engine copies it into
/// a preallocated WQE slot, so posting never allocates.
#[derive(Clone, Copy, Debug, Default)]
pub struct SendWr<'a> {
    /// Returned in the completion.
    pub wr_id: u64,
    /// Operation.
    pub opcode: WrOpcode,
    /// Local buffers (gathered for SEND/WRITE, scattered into for READ/atomics).
    pub sg_list: &'a [Sge],
    /// FENCE / SIGNALED / SOLICITED / INLINE.
    pub send_flags: SendFlags,
    /// Immediate data (the 32-bit value that goes on the wire in ImmDt, network order).
    pub imm_data: u32,
    /// R_Key to invalidate at the responder (SEND_WITH_INV).
    pub invalidate_rkey: u32,
    /// Remote address (RDMA and atomics).
    pub remote_addr: u64,
    /// Remote key (RDMA and atomics).
    pub rkey: u32,
    /// Compare value (compare & swap) or add value (fetch & add).
    pub compare_add: u64,
    /// Swap value (compare & swap).
    pub swap: u64,
    /// UD: the destination (required on a UD QP, ignored elsewhere).
    pub ud: Option<UdDest>,
}

/// `struct ibv_recv_wr`.
#[derive(Clone, Copy, Debug, Default)]
pub struct RecvWr<'a> {
    /// Returned in the completion.
    pub wr_id: u64,
    /// Buffers the incoming SEND is scattered into.
    pub sg_list: &'a [Sge],
}

/// `enum ibv_wc_status`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
#[repr(u8)]
pub enum WcStatus {
    /// IBV_WC_SUCCESS
    #[default]
    Success = 0,
    /// IBV_WC_LOC_LEN_ERR: a local buffer is too small (e.g. a SEND larger than the receive buffer).
    LocLenErr = 1,
    /// IBV_WC_LOC_QP_OP_ERR: an internal QP consistency error.
    LocQpOpErr = 2,
    /// IBV_WC_LOC_EEC_OP_ERR
    LocEecOpErr = 3,
    /// IBV_WC_LOC_PROT_ERR: a local SGE does not lie in an MR of the QP's PD with the right access.
    LocProtErr = 4,
    /// IBV_WC_WR_FLUSH_ERR: flushed because the QP went to the error state.
    WrFlushErr = 5,
    /// IBV_WC_MW_BIND_ERR
    MwBindErr = 6,
    /// IBV_WC_BAD_RESP_ERR: an unexpected response opcode.
    BadRespErr = 7,
    /// IBV_WC_LOC_ACCESS_ERR: a protection error on a local buffer during a READ/atomic response.
    LocAccessErr = 8,
    /// IBV_WC_REM_INV_REQ_ERR: the responder NAKed the request as invalid.
    RemInvReqErr = 9,
    /// IBV_WC_REM_ACCESS_ERR: the responder NAKed an R_Key, bounds or access violation.
    RemAccessErr = 10,
    /// IBV_WC_REM_OP_ERR: the responder could not complete the operation.
    RemOpErr = 11,
    /// IBV_WC_RETRY_EXC_ERR: transport retries exhausted (no ACK, or repeated sequence NAKs).
    RetryExcErr = 12,
    /// IBV_WC_RNR_RETRY_EXC_ERR: RNR retries exhausted.
    RnrRetryExcErr = 13,
    /// IBV_WC_LOC_RDD_VIOL_ERR
    LocRddViolErr = 14,
    /// IBV_WC_REM_INV_RD_REQ_ERR
    RemInvRdReqErr = 15,
    /// IBV_WC_REM_ABORT_ERR
    RemAbortErr = 16,
    /// IBV_WC_INV_EECN_ERR
    InvEecnErr = 17,
    /// IBV_WC_INV_EEC_STATE_ERR
    InvEecStateErr = 18,
    /// IBV_WC_FATAL_ERR
    FatalErr = 19,
    /// IBV_WC_RESP_TIMEOUT_ERR
    RespTimeoutErr = 20,
    /// IBV_WC_GENERAL_ERR
    GeneralErr = 21,
}

impl WcStatus {
    /// Every status, in `enum ibv_wc_status` order (its value is its index).
    pub const ALL: [WcStatus; 22] = [
        WcStatus::Success,
        WcStatus::LocLenErr,
        WcStatus::LocQpOpErr,
        WcStatus::LocEecOpErr,
        WcStatus::LocProtErr,
        WcStatus::WrFlushErr,
        WcStatus::MwBindErr,
        WcStatus::BadRespErr,
        WcStatus::LocAccessErr,
        WcStatus::RemInvReqErr,
        WcStatus::RemAccessErr,
        WcStatus::RemOpErr,
        WcStatus::RetryExcErr,
        WcStatus::RnrRetryExcErr,
        WcStatus::LocRddViolErr,
        WcStatus::RemInvRdReqErr,
        WcStatus::RemAbortErr,
        WcStatus::InvEecnErr,
        WcStatus::InvEecStateErr,
        WcStatus::FatalErr,
        WcStatus::RespTimeoutErr,
        WcStatus::GeneralErr,
    ];

    /// The string `ibv_wc_status_str` returns.
    pub const fn as_str(self) -> &'static str {
        match self {
            WcStatus::Success => "success",
            WcStatus::LocLenErr => "local length error",
            WcStatus::LocQpOpErr => "local QP operation error",
            WcStatus::LocEecOpErr => "local EE context operation error",
            WcStatus::LocProtErr => "local protection error",
            WcStatus::WrFlushErr => "Work Request Flushed Error",
            WcStatus::MwBindErr => "memory management operation error",
            WcStatus::BadRespErr => "bad response error",
            WcStatus::LocAccessErr => "local access error",
            WcStatus::RemInvReqErr => "remote invalid request error",
            WcStatus::RemAccessErr => "remote access error",
            WcStatus::RemOpErr => "remote operation error",
            WcStatus::RetryExcErr => "transport retry counter exceeded",
            WcStatus::RnrRetryExcErr => "RNR retry counter exceeded",
            WcStatus::LocRddViolErr => "local RDD violation error",
            WcStatus::RemInvRdReqErr => "remote invalid RD request",
            WcStatus::RemAbortErr => "aborted error",
            WcStatus::InvEecnErr => "invalid EE context number",
            WcStatus::InvEecStateErr => "invalid EE context state",
            WcStatus::FatalErr => "fatal error",
            WcStatus::RespTimeoutErr => "response timeout error",
            WcStatus::GeneralErr => "general error",
        }
    }
}

/// `enum ibv_wc_opcode`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
#[repr(u8)]
pub enum WcOpcode {
    /// IBV_WC_SEND
    #[default]
    Send = 0,
    /// IBV_WC_RDMA_WRITE
    RdmaWrite = 1,
    /// IBV_WC_RDMA_READ
    RdmaRead = 2,
    /// IBV_WC_COMP_SWAP
    CompSwap = 3,
    /// IBV_WC_FETCH_ADD
    FetchAdd = 4,
    /// IBV_WC_RECV
    Recv = 128,
    /// IBV_WC_RECV_RDMA_WITH_IMM
    RecvRdmaWithImm = 129,
}

/// `struct ibv_wc`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct WorkCompletion {
    /// The WR's `wr_id`.
    pub wr_id: u64,
    /// Outcome.
    pub status: WcStatus,
    /// What completed (undefined unless `status` is SUCCESS, as in verbs; set anyway).
    pub opcode: WcOpcode,
    /// Provider detail for errors (the NAK syndrome, for remote errors).
    pub vendor_err: u32,
    /// Bytes transferred (receives, READ, atomics: 8).
    pub byte_len: u32,
    /// Immediate data (WITH_IMM) or the invalidated R_Key (WITH_INV).
    pub imm_data: u32,
    /// The local QP.
    pub qp_num: u32,
    /// The remote QP (receives).
    pub src_qp: u32,
    /// GRH / WITH_IMM / WITH_INV.
    pub wc_flags: WcFlags,
    /// P_Key index.
    pub pkey_index: u16,
    /// A receive whose message asked for a solicited event (BTH SE on its last packet). Not in
    /// `struct ibv_wc`: it decides whether a CQ armed solicited-only raises an event.
    pub solicited: bool,
}

impl WorkCompletion {
    /// Whether this completion raises the event of a CQ armed with `solicited_only`: a
    /// solicited receive or any unsuccessful completion (IBTA §11.4.2.2, "the next solicited
    /// or unsuccessful completion"; rxe `do_complete`: `bth_se(pkt)`, and 1 for errors).
    pub fn raises_solicited_event(&self) -> bool {
        self.solicited || self.status != WcStatus::Success
    }
}

/// Why a verb failed. `errno()` gives the value libibverbs would return.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum VerbsError {
    /// An attribute is out of range or not allowed here.
    InvalidArgument(&'static str),
    /// The transition is not in the QP state table.
    InvalidTransition {
        /// Current state.
        from: QpState,
        /// Requested state.
        to: QpState,
    },
    /// A transition's required attribute is missing from the mask.
    MissingAttribute {
        /// Required attributes not in the mask.
        missing: QpAttrMask,
    },
    /// The mask has attributes this transition does not accept.
    UnexpectedAttribute {
        /// Attributes not allowed.
        unexpected: QpAttrMask,
    },
    /// `CUR_STATE` given and different from the QP's state.
    StateMismatch {
        /// The QP's state.
        actual: QpState,
        /// The caller's belief.
        given: QpState,
    },
    /// The QP is not in a state that allows the verb.
    InvalidState(QpState),
    /// No such object.
    NoSuchObject(&'static str),
    /// The object is in use (e.g. a PD with MRs or QPs).
    Busy(&'static str),
    /// A queue is full.
    QueueFull,
    /// Not implemented (e.g. UD QPs today).
    Unsupported(&'static str),
    /// Out of QP numbers, keys or similar.
    Exhausted(&'static str),
}

impl VerbsError {
    /// The errno libibverbs returns for this failure.
    pub fn errno(&self) -> i32 {
        const EINVAL: i32 = 22;
        const ENOENT: i32 = 2;
        const EBUSY: i32 = 16;
        const ENOMEM: i32 = 12;
        const EOPNOTSUPP: i32 = 95;
        match self {
            VerbsError::NoSuchObject(_) => ENOENT,
            VerbsError::Busy(_) => EBUSY,
            VerbsError::QueueFull | VerbsError::Exhausted(_) => ENOMEM,
            VerbsError::Unsupported(_) => EOPNOTSUPP,
            _ => EINVAL,
        }
    }
}

impl fmt::Display for VerbsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VerbsError::InvalidArgument(w) => write!(f, "invalid argument: {w}"),
            VerbsError::InvalidTransition { from, to } => write!(f, "invalid QP transition {from:?} -> {to:?}"),
            VerbsError::MissingAttribute { missing } => write!(f, "required QP attributes missing: {missing:?}"),
            VerbsError::UnexpectedAttribute { unexpected } => {
                write!(f, "QP attributes not allowed in this transition: {unexpected:?}")
            }
            VerbsError::StateMismatch { actual, given } => {
                write!(f, "cur_qp_state {given:?} does not match the QP state {actual:?}")
            }
            VerbsError::InvalidState(s) => write!(f, "not allowed in QP state {s:?}"),
            VerbsError::NoSuchObject(w) => write!(f, "no such {w}"),
            VerbsError::Busy(w) => write!(f, "{w} is in use"),
            VerbsError::QueueFull => write!(f, "queue full"),
            VerbsError::Unsupported(w) => write!(f, "unsupported: {w}"),
            VerbsError::Exhausted(w) => write!(f, "out of {w}"),
        }
    }
}

impl std::error::Error for VerbsError {}
