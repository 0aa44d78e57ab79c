//! The layouts of the CM messages with more than IDs and private data: REQ (Table 106), MRA
//! (107), REJ (108), REP (110), SIDR_REQ (119), SIDR_REP (120). `parse` reads a MAD's 232 data
//! bytes (always all there: [`crate::mad::Mad`] checked them), `emit` writes into zeroed ones.

use super::{put_private, CommIds, MsgRef, RejReason};
use crate::error::Error;
use crate::field::{get_u16, get_u32, get_u64, set_u16, set_u32, set_u64};
use crate::mad::DATA_LEN;
use core::net::Ipv6Addr;

type Data = [u8; DATA_LEN];

fn get_u24_hi(d: &Data, at: usize) -> u32 {
    get_u32(d, at) >> 8
}

/// Write a 24-bit value into the three bytes at `at`, keeping the fourth.
fn set_u24_hi(d: &mut Data, at: usize, v: u32) {
    d[at..at + 3].copy_from_slice(&(v & 0x00ff_ffff).to_be_bytes()[1..]);
}

fn gid(d: &Data, at: usize) -> Ipv6Addr {
    let mut g = [0u8; 16];
    g.copy_from_slice(&d[at..at + 16]);
    Ipv6Addr::from(g)
}

/// One path of a REQ (primary at data offset 52, alternate at 96): 44 bytes.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct PathRepr {
    /// The sender's port LID (RoCE: 0xffff, the permissive LID).
    pub local_lid: u16,
    /// The receiver's port LID.
    pub remote_lid: u16,
    /// The sender's GID (RoCEv2: its IP address; IPv4 as `::ffff:a.b.c.d`).
    pub local_gid: Ipv6Addr,
    /// The receiver's GID.
    pub remote_gid: Ipv6Addr,
    /// Flow label (20 bits).
    pub flow_label: u32,
    /// Static rate (6 bits, `enum ib_rate`).
    pub packet_rate: u8,
    /// Traffic class (RoCEv2: the DSCP/ECN byte).
    pub traffic_class: u8,
    /// Hop limit (RoCEv2: the TTL).
    pub hop_limit: u8,
    /// Service level (4 bits).
    pub sl: u8,
    /// Subnet local: the path does not leave the subnet (no GRH on IB).
    pub subnet_local: bool,
    /// Local ACK timeout (5 bits: 4.096 µs · 2^t).
    pub local_ack_timeout: u8,
}

impl PathRepr {
    /// The all-zero path (a REQ without an alternate).
    pub const NONE: PathRepr = PathRepr {
        local_lid: 0,
        remote_lid: 0,
        local_gid: Ipv6Addr::UNSPECIFIED,
        remote_gid: Ipv6Addr::UNSPECIFIED,
        flow_label: 0,
        packet_rate: 0,
        traffic_class: 0,
        hop_limit: 0,
        sl: 0,
        subnet_local: false,
        local_ack_timeout: 0,
    };

    fn parse(d: &Data, at: usize) -> PathRepr {
        PathRepr {
            local_lid: get_u16(d, at),
            remote_lid: get_u16(d, at + 2),
            local_gid: gid(d, at + 4),
            remote_gid: gid(d, at + 20),
            flow_label: get_u32(d, at + 36) >> 12,
            packet_rate: d[at + 39] & 0x3f,
            traffic_class: d[at + 40],
            hop_limit: d[at + 41],
            sl: d[at + 42] >> 4,
            subnet_local: d[at + 42] & 0x08 != 0,
            local_ack_timeout: d[at + 43] >> 3,
        }
    }

    fn emit(&self, d: &mut Data, at: usize) {
        set_u16(d, at, self.local_lid);
        set_u16(d, at + 2, self.remote_lid);
        d[at + 4..at + 20].copy_from_slice(&self.local_gid.octets());
        d[at + 20..at + 36].copy_from_slice(&self.remote_gid.octets());
        set_u32(d, at + 36, ((self.flow_label & 0xf_ffff) << 12) | (self.packet_rate & 0x3f) as u32);
        d[at + 40] = self.traffic_class;
        d[at + 41] = self.hop_limit;
        d[at + 42] = ((self.sl & 0xf) << 4) | ((self.subnet_local as u8) << 3);
        d[at + 43] = (self.local_ack_timeout & 0x1f) << 3;
    }
}

/// A REQ (IBTA §12.6.5, Table 106).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct ReqRepr<'a> {
    /// The active side's communication ID.
    pub local_comm_id: u32,
    /// Service ID: what the passive side listens on (RDMA-CM: [`super::ip::service_id`]).
    pub service_id: u64,
    /// The active side's CA GUID.
    pub local_ca_guid: u64,
    /// The active side's Q_Key (UD/RD; 0 for RC).
    pub local_qkey: u32,
    /// The active side's QPN (24 bits).
    pub local_qpn: u32,
    /// RDMA READ/atomic requests the active side accepts at once (its max_dest_rd_atomic).
    pub responder_resources: u8,
    /// Local EE context (RD; 24 bits).
    pub local_eecn: u32,
    /// RDMA READ/atomic requests the active side issues at once (its max_rd_atomic).
    pub initiator_depth: u8,
    /// Remote EE context (RD; 24 bits).
    pub remote_eecn: u32,
    /// How long the passive side may take to answer (5 bits: 4.096 µs · 2^t).
    pub remote_cm_response_timeout: u8,
    /// Transport service type (2 bits: 0 RC, 1 UC, 2 RD, 3 see `extended_transport`).
    pub transport: u8,
    /// End-to-end flow control.
    pub e2e_flow_control: bool,
    /// Starting PSN (24 bits): the PSN the passive side sends from — the active side's receive
    /// PSN (Linux's passive `cm_req_handler` takes it as its `sq_psn`).
    pub starting_psn: u32,
    /// How long the active side takes to answer (5 bits).
    pub local_cm_response_timeout: u8,
    /// Transport retry count (3 bits).
    pub retry_count: u8,
    /// P_Key.
    pub pkey: u16,
    /// Path MTU (4 bits, `enum ibv_mtu`: 1 = 256 … 5 = 4096).
    pub path_mtu: u8,
    /// RDC exists (RD).
    pub rdc_exists: bool,
    /// RNR retry count (3 bits; 7 = forever).
    pub rnr_retry_count: u8,
    /// How often the active side resends the REQ (4 bits).
    pub max_cm_retries: u8,
    /// The active side's QP uses an SRQ.
    pub srq: bool,
    /// Extended transport type (3 bits; 1 = XRC when `transport` is 3).
    pub extended_transport: u8,
    /// Primary path.
    pub primary: PathRepr,
    /// Alternate path (all zero when none).
    pub alternate: PathRepr,
    /// Private data (92 bytes on parse; at most 92 on emit).
    pub private_data: &'a [u8],
}

impl<'a> ReqRepr<'a> {
    pub(crate) fn parse(d: &'a Data) -> ReqRepr<'a> {
        ReqRepr {
            local_comm_id: get_u32(d, 0),
            service_id: get_u64(d, 8),
            local_ca_guid: get_u64(d, 16),
            local_qkey: get_u32(d, 28),
            local_qpn: get_u24_hi(d, 32),
            responder_resources: d[35],
            local_eecn: get_u24_hi(d, 36),
            initiator_depth: d[39],
            remote_eecn: get_u24_hi(d, 40),
            remote_cm_response_timeout: d[43] >> 3,
            transport: (d[43] >> 1) & 3,
            e2e_flow_control: d[43] & 1 != 0,
            starting_psn: get_u24_hi(d, 44),
            local_cm_response_timeout: d[47] >> 3,
            retry_count: d[47] & 7,
            pkey: get_u16(d, 48),
            path_mtu: d[50] >> 4,
            rdc_exists: d[50] & 0x08 != 0,
            rnr_retry_count: d[50] & 7,
            max_cm_retries: d[51] >> 4,
            srq: d[51] & 0x08 != 0,
            extended_transport: d[51] & 7,
            primary: PathRepr::parse(d, 52),
            alternate: PathRepr::parse(d, 96),
            private_data: &d[140..],
        }
    }

    pub(crate) fn emit(&self, d: &mut Data) -> Result<(), Error> {
        set_u32(d, 0, self.local_comm_id);
        set_u64(d, 8, self.service_id);
        set_u64(d, 16, self.local_ca_guid);
        set_u32(d, 28, self.local_qkey);
        set_u24_hi(d, 32, self.local_qpn);
        d[35] = self.responder_resources;
        set_u24_hi(d, 36, self.local_eecn);
        d[39] = self.initiator_depth;
        set_u24_hi(d, 40, self.remote_eecn);
        d[43] =
            ((self.remote_cm_response_timeout & 0x1f) << 3) | ((self.transport & 3) << 1) | self.e2e_flow_control as u8;
        set_u24_hi(d, 44, self.starting_psn);
        d[47] = ((self.local_cm_response_timeout & 0x1f) << 3) | (self.retry_count & 7);
        set_u16(d, 48, self.pkey);
        d[50] = ((self.path_mtu & 0xf) << 4) | ((self.rdc_exists as u8) << 3) | (self.rnr_retry_count & 7);
        d[51] = ((self.max_cm_retries & 0xf) << 4) | ((self.srq as u8) << 3) | (self.extended_transport & 7);
        self.primary.emit(d, 52);
        self.alternate.emit(d, 96);
        put_private(d, 140, self.private_data)
    }
}

/// An MRA (IBTA §12.6.6, Table 107): "I got your message; I need longer to answer".
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct MraRepr<'a> {
    /// Communication IDs.
    pub ids: CommIds,
    /// The message acknowledged.
    pub message: MsgRef,
    /// How much longer the sender needs (5 bits: 4.096 µs · 2^t).
    pub service_timeout: u8,
    /// Private data (222 bytes).
    pub private_data: &'a [u8],
}

impl<'a> MraRepr<'a> {
    pub(crate) fn parse(d: &'a Data) -> MraRepr<'a> {
        MraRepr {
            ids: CommIds { local: get_u32(d, 0), remote: get_u32(d, 4) },
            message: MsgRef::from_bits(d[8] >> 6),
            service_timeout: d[9] >> 3,
            private_data: &d[10..],
        }
    }

    pub(crate) fn emit(&self, d: &mut Data) -> Result<(), Error> {
        set_u32(d, 0, self.ids.local);
        set_u32(d, 4, self.ids.remote);
        d[8] = self.message.bits() << 6;
        d[9] = (self.service_timeout & 0x1f) << 3;
        put_private(d, 10, self.private_data)
    }
}

/// A REJ (IBTA §12.6.7, Table 108).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct RejRepr<'a> {
    /// Communication IDs (the remote one 0 when rejecting a REQ).
    pub ids: CommIds,
    /// The message rejected.
    pub message: MsgRef,
    /// Bytes of `ari` that mean something (7 bits).
    pub ari_len: u8,
    /// Why.
    pub reason: RejReason,
    /// Additional rejection information (72 bytes).
    pub ari: &'a [u8],
    /// Private data (148 bytes).
    pub private_data: &'a [u8],
}

impl<'a> RejRepr<'a> {
    pub(crate) fn parse(d: &'a Data) -> RejRepr<'a> {
        RejRepr {
            ids: CommIds { local: get_u32(d, 0), remote: get_u32(d, 4) },
            message: MsgRef::from_bits(d[8] >> 6),
            ari_len: d[9] >> 1,
            reason: RejReason(get_u16(d, 10)),
            ari: &d[12..84],
            private_data: &d[84..],
        }
    }

    pub(crate) fn emit(&self, d: &mut Data) -> Result<(), Error> {
        set_u32(d, 0, self.ids.local);
        set_u32(d, 4, self.ids.remote);
        d[8] = self.message.bits() << 6;
        d[9] = (self.ari_len & 0x7f) << 1;
        set_u16(d, 10, self.reason.0);
        match d.get_mut(12..12 + self.ari.len()) {
            Some(dst) if self.ari.len() <= 72 => dst.copy_from_slice(self.ari),
            _ => return Err(Error::InvalidRepr { what: "REJ additional rejection information longer than 72 bytes" }),
        }
        put_private(d, 84, self.private_data)
    }
}

/// A REP (IBTA §12.6.8, Table 110).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct RepRepr<'a> {
    /// Communication IDs.
    pub ids: CommIds,
    /// The passive side's Q_Key.
    pub local_qkey: u32,
    /// The passive side's QPN (24 bits).
    pub local_qpn: u32,
    /// Local EE context (24 bits).
    pub local_eecn: u32,
    /// Starting PSN (24 bits): the PSN the active side sends from — the passive side's
    /// receive PSN.
    pub starting_psn: u32,
    /// READ/atomic requests the passive side accepts at once.
    pub responder_resources: u8,
    /// READ/atomic requests the passive side issues at once.
    pub initiator_depth: u8,
    /// Target ACK delay (5 bits).
    pub target_ack_delay: u8,
    /// Failover accepted (2 bits).
    pub failover_accepted: u8,
    /// End-to-end flow control.
    pub e2e_flow_control: bool,
    /// RNR retry count (3 bits).
    pub rnr_retry_count: u8,
    /// The passive side's QP uses an SRQ.
    pub srq: bool,
    /// The passive side's CA GUID.
    pub local_ca_guid: u64,
    /// Private data (196 bytes).
    pub private_data: &'a [u8],
}

impl<'a> RepRepr<'a> {
    pub(crate) fn parse(d: &'a Data) -> RepRepr<'a> {
        RepRepr {
            ids: CommIds { local: get_u32(d, 0), remote: get_u32(d, 4) },
            local_qkey: get_u32(d, 8),
            local_qpn: get_u24_hi(d, 12),
            local_eecn: get_u24_hi(d, 16),
            starting_psn: get_u24_hi(d, 20),
            responder_resources: d[24],
            initiator_depth: d[25],
            target_ack_delay: d[26] >> 3,
            failover_accepted: (d[26] >> 1) & 3,
            e2e_flow_control: d[26] & 1 != 0,
            rnr_retry_count: d[27] >> 5,
            srq: d[27] & 0x10 != 0,
            local_ca_guid: get_u64(d, 28),
            private_data: &d[36..],
        }
    }

    pub(crate) fn emit(&self, d: &mut Data) -> Result<(), Error> {
        set_u32(d, 0, self.ids.local);
        set_u32(d, 4, self.ids.remote);
        set_u32(d, 8, self.local_qkey);
        set_u24_hi(d, 12, self.local_qpn);
        set_u24_hi(d, 16, self.local_eecn);
        set_u24_hi(d, 20, self.starting_psn);
        d[24] = self.responder_resources;
        d[25] = self.initiator_depth;
        d[26] =
            ((self.target_ack_delay & 0x1f) << 3) | ((self.failover_accepted & 3) << 1) | self.e2e_flow_control as u8;
        d[27] = ((self.rnr_retry_count & 7) << 5) | ((self.srq as u8) << 4);
        set_u64(d, 28, self.local_ca_guid);
        put_private(d, 36, self.private_data)
    }
}

/// A SIDR_REQ (IBTA §12.11.2, Table 119): "which UD QP serves this service ID?".
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct SidrReqRepr<'a> {
    /// The requester's ID for this request.
    pub request_id: u32,
    /// P_Key.
    pub pkey: u16,
    /// The service asked for.
    pub service_id: u64,
    /// Private data (216 bytes).
    pub private_data: &'a [u8],
}

impl<'a> SidrReqRepr<'a> {
    pub(crate) fn parse(d: &'a Data) -> SidrReqRepr<'a> {
        SidrReqRepr {
            request_id: get_u32(d, 0),
            pkey: get_u16(d, 4),
            service_id: get_u64(d, 8),
            private_data: &d[16..],
        }
    }

    pub(crate) fn emit(&self, d: &mut Data) -> Result<(), Error> {
        set_u32(d, 0, self.request_id);
        set_u16(d, 4, self.pkey);
        set_u64(d, 8, self.service_id);
        put_private(d, 16, self.private_data)
    }
}

/// SIDR_REP status (IBTA Table 121).
#[allow(missing_docs)]
pub mod sidr_status {
    pub const SUCCESS: u8 = 0;
    pub const UNSUPPORTED: u8 = 1;
    pub const REJECT: u8 = 2;
    pub const NO_QP: u8 = 3;
    pub const REDIRECT: u8 = 4;
    pub const UNSUPPORTED_VERSION: u8 = 5;
}

/// A SIDR_REP (IBTA §12.11.3, Table 120).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct SidrRepRepr<'a> {
    /// The request answered.
    pub request_id: u32,
    /// Status ([`sidr_status`]).
    pub status: u8,
    /// Bytes of `additional_info` that mean something.
    pub add_info_len: u8,
    /// The UD QP serving the service (24 bits).
    pub qpn: u32,
    /// The service ID.
    pub service_id: u64,
    /// The Q_Key to send to it with.
    pub qkey: u32,
    /// Additional information (72 bytes).
    pub additional_info: &'a [u8],
    /// Private data (136 bytes).
    pub private_data: &'a [u8],
}

impl<'a> SidrRepRepr<'a> {
    pub(crate) fn parse(d: &'a Data) -> SidrRepRepr<'a> {
        SidrRepRepr {
            request_id: get_u32(d, 0),
            status: d[4],
            add_info_len: d[5],
            qpn: get_u24_hi(d, 8),
            service_id: get_u64(d, 12),
            qkey: get_u32(d, 20),
            additional_info: &d[24..96],
            private_data: &d[96..],
        }
    }

    pub(crate) fn emit(&self, d: &mut Data) -> Result<(), Error> {
        set_u32(d, 0, self.request_id);
        d[4] = self.status;
        d[5] = self.add_info_len;
        set_u24_hi(d, 8, self.qpn);
        set_u64(d, 12, self.service_id);
        set_u32(d, 20, self.qkey);
        match d.get_mut(24..24 + self.additional_info.len()) {
            Some(dst) if self.additional_info.len() <= 72 => dst.copy_from_slice(self.additional_info),
            _ => return Err(Error::InvalidRepr { what: "SIDR_REP additional information longer than 72 bytes" }),
        }
        put_private(d, 96, self.private_data)
    }
}
