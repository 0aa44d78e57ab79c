//! Communication management messages (IBTA Vol. 1 ch. 12, §12.6): the MADs of class 0x07 that
//! set up, refuse and tear down connections — REQ, MRA, REJ, REP, RTU, DREQ, DREP — and the UD
//! service ID resolution pair SIDR_REQ/SIDR_REP. Offsets are into the MAD's 232 data bytes, as
//! Tables 106–120 give them (Linux `include/rdma/ibta_vol1_c12.h` names the same fields); a
//! bit position counts from the byte's most significant bit.
//!
//! Every bit pattern of a message's fields parses: what a value means for a connection (a
//! reserved transport type, a QPN that is not ours) is the CM state machine's decision, not the
//! parser's. What does not parse is a MAD that is not a CM message this module knows: another
//! class or class version, a method other than Send, an attribute without a layout here.
//! Reserved bits read as nothing and are written as zero.
//!
//! [`ip`] holds RDMA-CM's use of these messages (IBTA Annex A11: IP service IDs and the
//! private-data header carrying the IP addresses).

pub mod ip;
mod msg;

pub use msg::{sidr_status, MraRepr, PathRepr, RejRepr, RepRepr, ReqRepr, SidrRepRepr, SidrReqRepr};

use crate::error::{Error, Layer};
use crate::field::{get_u32, set_u32};
use crate::mad::{Mad, MadHeaderRepr, Method, MgmtClass, BASE_VERSION, DATA_LEN, HEADER_LEN, MAD_LEN};

/// The CM class version (IBTA §12.11.1: 2).
pub const CLASS_VERSION: u8 = 2;

/// CM attribute IDs (IBTA §12.6, Table 104).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct AttrId(pub u16);

impl AttrId {
    /// ClassPortInfo.
    pub const CLASS_PORT_INFO: AttrId = AttrId(0x0001);
    /// ConnectRequest.
    pub const REQ: AttrId = AttrId(0x0010);
    /// MsgRcptAck.
    pub const MRA: AttrId = AttrId(0x0011);
    /// ConnectReject.
    pub const REJ: AttrId = AttrId(0x0012);
    /// ConnectReply.
    pub const REP: AttrId = AttrId(0x0013);
    /// ReadyToUse.
    pub const RTU: AttrId = AttrId(0x0014);
    /// DisconnectRequest.
    pub const DREQ: AttrId = AttrId(0x0015);
    /// DisconnectReply.
    pub const DREP: AttrId = AttrId(0x0016);
    /// ServiceIDResReq.
    pub const SIDR_REQ: AttrId = AttrId(0x0017);
    /// ServiceIDResReqResp.
    pub const SIDR_REP: AttrId = AttrId(0x0018);
    /// LoadAlternatePath.
    pub const LAP: AttrId = AttrId(0x0019);
    /// AlternatePathResponse.
    pub const APR: AttrId = AttrId(0x001a);

    /// The message's short name, as IBTA and Linux's counters spell it.
    pub const fn name(self) -> &'static str {
        match self.0 {
            0x0001 => "ClassPortInfo",
            0x0010 => "REQ",
            0x0011 => "MRA",
            0x0012 => "REJ",
            0x0013 => "REP",
            0x0014 => "RTU",
            0x0015 => "DREQ",
            0x0016 => "DREP",
            0x0017 => "SIDR_REQ",
            0x0018 => "SIDR_REP",
            0x0019 => "LAP",
            0x001a => "APR",
            _ => "unknown",
        }
    }
}

/// A REJ's reason (IBTA §12.6.7.2, Table 109; Linux `enum ib_cm_rej_reason`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct RejReason(pub u16);

#[allow(missing_docs)]
impl RejReason {
    pub const NO_QP: RejReason = RejReason(1);
    pub const NO_EEC: RejReason = RejReason(2);
    pub const NO_RESOURCES: RejReason = RejReason(3);
    pub const TIMEOUT: RejReason = RejReason(4);
    pub const UNSUPPORTED: RejReason = RejReason(5);
    pub const INVALID_COMM_ID: RejReason = RejReason(6);
    pub const INVALID_COMM_INSTANCE: RejReason = RejReason(7);
    pub const INVALID_SERVICE_ID: RejReason = RejReason(8);
    pub const INVALID_TRANSPORT_TYPE: RejReason = RejReason(9);
    pub const STALE_CONN: RejReason = RejReason(10);
    pub const RDC_NOT_EXIST: RejReason = RejReason(11);
    pub const INVALID_GID: RejReason = RejReason(12);
    pub const INVALID_LID: RejReason = RejReason(13);
    pub const INVALID_SL: RejReason = RejReason(14);
    pub const INVALID_TRAFFIC_CLASS: RejReason = RejReason(15);
    pub const INVALID_HOP_LIMIT: RejReason = RejReason(16);
    pub const INVALID_PACKET_RATE: RejReason = RejReason(17);
    pub const INVALID_ALT_GID: RejReason = RejReason(18);
    pub const INVALID_ALT_LID: RejReason = RejReason(19);
    pub const INVALID_ALT_SL: RejReason = RejReason(20);
    pub const INVALID_ALT_TRAFFIC_CLASS: RejReason = RejReason(21);
    pub const INVALID_ALT_HOP_LIMIT: RejReason = RejReason(22);
    pub const INVALID_ALT_PACKET_RATE: RejReason = RejReason(23);
    pub const PORT_CM_REDIRECT: RejReason = RejReason(24);
    pub const PORT_REDIRECT: RejReason = RejReason(25);
    pub const INVALID_MTU: RejReason = RejReason(26);
    pub const INSUFFICIENT_RESP_RESOURCES: RejReason = RejReason(27);
    pub const CONSUMER_DEFINED: RejReason = RejReason(28);
    pub const INVALID_RNR_RETRY: RejReason = RejReason(29);
    pub const DUPLICATE_LOCAL_COMM_ID: RejReason = RejReason(30);
    pub const INVALID_CLASS_VERSION: RejReason = RejReason(31);
    pub const INVALID_FLOW_LABEL: RejReason = RejReason(32);
    pub const INVALID_ALT_FLOW_LABEL: RejReason = RejReason(33);
    pub const VENDOR_OPTION_NOT_SUPPORTED: RejReason = RejReason(35);
}

/// Which message an MRA acknowledges or a REJ refuses (the 2-bit "Message MRAed/Rejected").
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum MsgRef {
    /// The REQ.
    Req,
    /// The REP.
    Rep,
    /// A LAP (MRA) or no message at all (REJ: "other").
    Other,
    /// The reserved value 3.
    Reserved,
}

impl MsgRef {
    pub(crate) const fn from_bits(b: u8) -> MsgRef {
        match b & 3 {
            0 => MsgRef::Req,
            1 => MsgRef::Rep,
            2 => MsgRef::Other,
            _ => MsgRef::Reserved,
        }
    }
    pub(crate) const fn bits(self) -> u8 {
        match self {
            MsgRef::Req => 0,
            MsgRef::Rep => 1,
            MsgRef::Other => 2,
            MsgRef::Reserved => 3,
        }
    }
}

/// The two communication IDs that every connected-mode message after the REQ carries.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct CommIds {
    /// The sender's communication ID.
    pub local: u32,
    /// The receiver's communication ID (0 where the sender does not know it yet).
    pub remote: u32,
}

/// An RTU, DREQ or DREP: the communication IDs and private data (DREQ also the remote QPN).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct SimpleRepr<'a> {
    /// Communication IDs.
    pub ids: CommIds,
    /// The private data field (224 bytes in RTU and DREP; 220 in DREQ).
    pub private_data: &'a [u8],
}

/// A DREQ (IBTA §12.6.10, Table 112).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct DreqRepr<'a> {
    /// Communication IDs.
    pub ids: CommIds,
    /// The receiver's QPN (24 bits), so that a stale DREQ cannot close a newer connection.
    pub remote_qpn: u32,
    /// Private data (220 bytes).
    pub private_data: &'a [u8],
}

/// A CM message.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum CmMessage<'a> {
    /// ConnectRequest.
    Req(ReqRepr<'a>),
    /// MsgRcptAck.
    Mra(MraRepr<'a>),
    /// ConnectReject.
    Rej(RejRepr<'a>),
    /// ConnectReply.
    Rep(RepRepr<'a>),
    /// ReadyToUse.
    Rtu(SimpleRepr<'a>),
    /// DisconnectRequest.
    Dreq(DreqRepr<'a>),
    /// DisconnectReply.
    Drep(SimpleRepr<'a>),
    /// ServiceIDResReq.
    SidrReq(SidrReqRepr<'a>),
    /// ServiceIDResReqResp.
    SidrRep(SidrRepRepr<'a>),
}

/// Which of several CMs on one address a CM message is for: the listener of a service, or the
/// holder of a communication ID.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Receiver {
    /// REQ and SIDR_REQ: whoever listens on this service ID.
    Service(u64),
    /// Every other message: whoever allocated this ID (the remote communication ID, or a SIDR
    /// REP's request ID: the ID the receiver chose when it sent the REQ or SIDR REQ).
    Id(u32),
}

/// Where the field that names a CM message's receiver lies, for a steering program that cannot
/// parse the message (`uroce_xdp_prog::reuseport`): offsets into the MAD's data, and into the
/// UDP datagram of a RoCEv2 MAD to QP1 (UDP header, BTH, DETH, then the MAD).
pub mod steer {
    use super::{AttrId, DATA_LEN, HEADER_LEN};
    use crate::field::get_u32;
    use crate::mad::Mad;

    /// REQ (Table 106) and SIDR_REQ (Table 119): the 8-byte service ID.
    pub const SERVICE_ID: usize = 8;
    /// SIDR_REP (Table 120): the 4-byte request ID.
    pub const REQUEST_ID: usize = 0;
    /// MRA, REJ, REP, RTU, DREQ, DREP, LAP, APR (Tables 107–118): the 4-byte remote
    /// communication ID.
    pub const REMOTE_COMM_ID: usize = 4;
    /// The MAD's offset in the UDP datagram (UDP header, BTH, DETH).
    pub const MAD_IN_UDP: usize = crate::udp::HEADER_LEN + crate::bth::HEADER_LEN + 8;
    /// The MAD data's offset in the UDP datagram.
    pub const DATA_IN_UDP: usize = MAD_IN_UDP + HEADER_LEN;
    /// The management class's offset in the UDP datagram.
    pub const MGMT_CLASS_IN_UDP: usize = MAD_IN_UDP + 1;
    /// The attribute ID's offset in the UDP datagram (2 bytes, big-endian).
    pub const ATTR_ID_IN_UDP: usize = MAD_IN_UDP + 16;

    /// The receiver a CM MAD names: by its attribute ID, a field at a fixed offset, whatever
    /// the rest holds (the rule the steering program applies byte for byte). `None`: not a CM
    /// MAD.
    pub fn receiver(mad: &Mad<'_>) -> Option<super::Receiver> {
        if mad.header.mgmt_class != crate::mad::MgmtClass::CM {
            return None;
        }
        let d: &[u8; DATA_LEN] = mad.data;
        let id = |at: usize| super::Receiver::Id(get_u32(d, at));
        Some(match AttrId(mad.header.attr_id) {
            AttrId::REQ | AttrId::SIDR_REQ => {
                let mut b = [0; 8];
                b.copy_from_slice(&d[SERVICE_ID..SERVICE_ID + 8]);
                super::Receiver::Service(u64::from_be_bytes(b))
            }
            AttrId::SIDR_REP => id(REQUEST_ID),
            _ => id(REMOTE_COMM_ID),
        })
    }
}

/// Private data field sizes (IBTA §12.6, Tables 106–120).
pub mod private_len {
    /// REQ.
    pub const REQ: usize = 92;
    /// MRA.
    pub const MRA: usize = 222;
    /// REJ.
    pub const REJ: usize = 148;
    /// REP.
    pub const REP: usize = 196;
    /// RTU.
    pub const RTU: usize = 224;
    /// DREQ.
    pub const DREQ: usize = 220;
    /// DREP.
    pub const DREP: usize = 224;
    /// SIDR_REQ.
    pub const SIDR_REQ: usize = 216;
    /// SIDR_REP.
    pub const SIDR_REP: usize = 136;
}

impl<'a> CmMessage<'a> {
    /// Parse a MAD's CM message. The MAD must be class CM, class version 2, method Send (the
    /// only method Linux's CM registers for), with one of the nine attribute IDs above; LAP,
    /// APR and ClassPortInfo are `Unsupported` (no alternate paths; nothing asks for port info).
    pub fn parse(mad: &Mad<'a>, off: usize) -> Result<CmMessage<'a>, Error> {
        let h = &mad.header;
        let bad = |field, value: u32| Error::BadField { layer: Layer::Cm, offset: off, field, value };
        if h.mgmt_class != MgmtClass::CM {
            return Err(bad("MgmtClass", h.mgmt_class.0 as u32));
        }
        if h.class_version != CLASS_VERSION {
            return Err(bad("ClassVersion", h.class_version as u32));
        }
        if h.method != Method::SEND {
            return Err(bad("Method", h.method.0 as u32));
        }
        let d: &'a [u8; DATA_LEN] = mad.data;
        let ids = CommIds { local: get_u32(d, 0), remote: get_u32(d, 4) };
        Ok(match AttrId(h.attr_id) {
            AttrId::REQ => CmMessage::Req(ReqRepr::parse(d)),
            AttrId::MRA => CmMessage::Mra(MraRepr::parse(d)),
            AttrId::REJ => CmMessage::Rej(RejRepr::parse(d)),
            AttrId::REP => CmMessage::Rep(RepRepr::parse(d)),
            AttrId::RTU => CmMessage::Rtu(SimpleRepr { ids, private_data: &d[8..] }),
            AttrId::DREQ => CmMessage::Dreq(DreqRepr { ids, remote_qpn: get_u32(d, 8) >> 8, private_data: &d[12..] }),
            AttrId::DREP => CmMessage::Drep(SimpleRepr { ids, private_data: &d[8..] }),
            AttrId::SIDR_REQ => CmMessage::SidrReq(SidrReqRepr::parse(d)),
            AttrId::SIDR_REP => CmMessage::SidrRep(SidrRepRepr::parse(d)),
            AttrId::LAP | AttrId::APR | AttrId::CLASS_PORT_INFO => {
                return Err(Error::Unsupported { layer: Layer::Cm, offset: off, what: AttrId(h.attr_id).name() })
            }
            AttrId(other) => return Err(bad("AttributeID", other as u32)),
        })
    }

    /// The message's attribute ID.
    pub const fn attr_id(&self) -> AttrId {
        match self {
            CmMessage::Req(_) => AttrId::REQ,
            CmMessage::Mra(_) => AttrId::MRA,
            CmMessage::Rej(_) => AttrId::REJ,
            CmMessage::Rep(_) => AttrId::REP,
            CmMessage::Rtu(_) => AttrId::RTU,
            CmMessage::Dreq(_) => AttrId::DREQ,
            CmMessage::Drep(_) => AttrId::DREP,
            CmMessage::SidrReq(_) => AttrId::SIDR_REQ,
            CmMessage::SidrRep(_) => AttrId::SIDR_REP,
        }
    }

    /// The sender's and the receiver's communication IDs (SIDR: the request ID as `local`).
    pub fn ids(&self) -> CommIds {
        match self {
            CmMessage::Req(r) => CommIds { local: r.local_comm_id, remote: 0 },
            CmMessage::Mra(m) => m.ids,
            CmMessage::Rej(m) => m.ids,
            CmMessage::Rep(m) => m.ids,
            CmMessage::Rtu(m) | CmMessage::Drep(m) => m.ids,
            CmMessage::Dreq(m) => m.ids,
            CmMessage::SidrReq(m) => CommIds { local: m.request_id, remote: 0 },
            CmMessage::SidrRep(m) => CommIds { local: m.request_id, remote: 0 },
        }
    }

    /// The MAD header a CM message travels under (IBTA §12.11.1; Linux `cm_format_mad_hdr`).
    pub const fn header(&self, tid: u64, attr_mod: u32) -> MadHeaderRepr {
        MadHeaderRepr {
            base_version: BASE_VERSION,
            mgmt_class: MgmtClass::CM,
            class_version: CLASS_VERSION,
            method: Method::SEND,
            status: 0,
            class_specific: 0,
            tid,
            attr_id: self.attr_id().0,
            attr_mod,
        }
    }

    /// Write the whole 256-byte MAD into `out[..256]`: header, fields, reserved bits zero and
    /// private data zero-padded to its field. Private data longer than the field is an
    /// `InvalidRepr` error.
    pub fn emit(&self, tid: u64, attr_mod: u32, out: &mut [u8]) -> Result<(), Error> {
        let Some(mad) = out.get_mut(..MAD_LEN) else {
            return Err(Error::BufferTooSmall { need: MAD_LEN, have: out.len() });
        };
        let (hdr, data) = mad.split_at_mut(HEADER_LEN);
        let Ok(d) = <&mut [u8; DATA_LEN]>::try_from(data) else {
            return Err(Error::BufferTooSmall { need: MAD_LEN, have: MAD_LEN });
        };
        self.header(tid, attr_mod).emit(hdr)?;
        d.fill(0);
        let put_ids = |d: &mut [u8; DATA_LEN], ids: CommIds| {
            set_u32(d, 0, ids.local);
            set_u32(d, 4, ids.remote);
        };
        match self {
            CmMessage::Req(r) => r.emit(d),
            CmMessage::Mra(m) => m.emit(d),
            CmMessage::Rej(m) => m.emit(d),
            CmMessage::Rep(m) => m.emit(d),
            CmMessage::Rtu(m) | CmMessage::Drep(m) => {
                put_ids(d, m.ids);
                put_private(d, 8, m.private_data)
            }
            CmMessage::Dreq(m) => {
                put_ids(d, m.ids);
                set_u32(d, 8, (m.remote_qpn & 0x00ff_ffff) << 8);
                put_private(d, 12, m.private_data)
            }
            CmMessage::SidrReq(m) => m.emit(d),
            CmMessage::SidrRep(m) => m.emit(d),
        }
    }
}

/// Copy private data into its field at `at` (the rest of the MAD), or fail when it is longer.
pub(crate) fn put_private(d: &mut [u8; DATA_LEN], at: usize, p: &[u8]) -> Result<(), Error> {
    match d.get_mut(at..at + p.len()) {
        Some(dst) => {
            dst.copy_from_slice(p);
            Ok(())
        }
        None => Err(Error::InvalidRepr { what: "private data longer than the message's field" }),
    }
}

/// The one-line summary `uroce pcap` prints for a CM MAD: the message name and the fields a
/// person follows a connection by.
pub struct CmSummary<'a, 'b>(pub &'b CmMessage<'a>);

impl core::fmt::Display for CmSummary<'_, '_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let m = self.0;
        write!(f, "CM {}", m.attr_id().name())?;
        match m {
            CmMessage::Req(r) => {
                write!(f, " comm={:#010x} sid={:#018x}", r.local_comm_id, r.service_id)?;
                if let Some((space, port)) = ip::port_of(r.service_id) {
                    write!(f, " ({space} {port})")?;
                }
                write!(f, " qpn={:#08x} psn={:#08x} mtu={}", r.local_qpn, r.starting_psn, r.path_mtu)
            }
            CmMessage::Rep(r) => write!(
                f,
                " comm={:#010x}/{:#010x} qpn={:#08x} psn={:#08x}",
                r.ids.local, r.ids.remote, r.local_qpn, r.starting_psn
            ),
            CmMessage::Rej(r) => write!(
                f,
                " comm={:#010x}/{:#010x} reason={} msg={:?}",
                r.ids.local, r.ids.remote, r.reason.0, r.message
            ),
            CmMessage::Mra(r) => write!(
                f,
                " comm={:#010x}/{:#010x} msg={:?} timeout={}",
                r.ids.local, r.ids.remote, r.message, r.service_timeout
            ),
            CmMessage::Rtu(r) | CmMessage::Drep(r) => write!(f, " comm={:#010x}/{:#010x}", r.ids.local, r.ids.remote),
            CmMessage::Dreq(r) => {
                write!(f, " comm={:#010x}/{:#010x} qpn={:#08x}", r.ids.local, r.ids.remote, r.remote_qpn)
            }
            CmMessage::SidrReq(r) => write!(f, " req={:#010x} sid={:#018x}", r.request_id, r.service_id),
            CmMessage::SidrRep(r) => {
                write!(f, " req={:#010x} status={} qpn={:#08x} qkey={:#010x}", r.request_id, r.status, r.qpn, r.qkey)
            }
        }
    }
}

#[cfg(test)]
mod tests;
