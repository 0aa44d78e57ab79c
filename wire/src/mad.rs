//! Management datagrams (IBTA Vol. 1 §13.4): the 256-byte MAD that a UD SEND to QP1 (the
//! general services interface, GSI) carries, and its 24-byte common header. On RoCEv2 a MAD
//! travels as `UD_SEND_ONLY` to QP 1 with the GSI Q_Key, the GRH's addresses being the IP ones.
//!
//! ```text
//! byte 0      BaseVersion (1)
//! byte 1      MgmtClass (0x07: communication management)
//! byte 2      ClassVersion (CM: 2)
//! byte 3      R(0x80) | Method(0x7f)
//! bytes 4-5   Status
//! bytes 6-7   ClassSpecific
//! bytes 8-15  TransactionID
//! bytes 16-17 AttributeID
//! bytes 18-19 Reserved
//! bytes 20-23 AttributeModifier
//! bytes 24-255 the class's data (232 bytes)
//! ```
//!
//! Parsing checks only what every class shares (the length and the base version, as Linux's
//! `ib_mad_recv_done` does); what a class makes of the rest is its own parser's job ([`crate::cm`]).

use crate::error::{need, Error, Layer};
use crate::field::{get_u16, get_u32, get_u64, set_u16, set_u32, set_u64};
use crate::psn::Qpn;

/// A MAD's length: every GMP is exactly 256 bytes (IBTA §13.4.2).
pub const MAD_LEN: usize = 256;
/// The common MAD header's length.
pub const HEADER_LEN: usize = 24;
/// The class data after the common header.
pub const DATA_LEN: usize = MAD_LEN - HEADER_LEN;
/// The only base version a GMP carries (IBTA §13.4.2, C13-4).
pub const BASE_VERSION: u8 = 1;
/// The GSI's Q_Key (IBTA §13.4.6.1, C13-11: `0x80010000`).
pub const GSI_QKEY: u32 = 0x8001_0000;
/// The GSI's QP number.
pub const GSI_QPN: Qpn = Qpn::new(1);

/// A management class (IBTA §13.4.4, Table 146). A newtype, so that any byte is representable.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct MgmtClass(pub u8);

impl MgmtClass {
    /// Subnet management, LID routed.
    pub const SUBN_LID_ROUTED: MgmtClass = MgmtClass(0x01);
    /// Subnet administration.
    pub const SUBN_ADM: MgmtClass = MgmtClass(0x03);
    /// Performance management.
    pub const PERF: MgmtClass = MgmtClass(0x04);
    /// Baseboard management.
    pub const BM: MgmtClass = MgmtClass(0x05);
    /// Device management.
    pub const DEVICE: MgmtClass = MgmtClass(0x06);
    /// Communication management (IBTA ch. 12).
    pub const CM: MgmtClass = MgmtClass(0x07);
    /// SNMP tunnelling.
    pub const SNMP: MgmtClass = MgmtClass(0x08);
    /// Subnet management, directed route.
    pub const SUBN_DIRECTED_ROUTE: MgmtClass = MgmtClass(0x81);
}

/// A MAD method (IBTA §13.4.5, Table 147): bit 7 is R (a response).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct Method(pub u8);

impl Method {
    /// Get.
    pub const GET: Method = Method(0x01);
    /// Set.
    pub const SET: Method = Method(0x02);
    /// Send: a datagram that needs no response (every CM message is one).
    pub const SEND: Method = Method(0x03);
    /// Trap.
    pub const TRAP: Method = Method(0x05);
    /// GetResp.
    pub const GET_RESP: Method = Method(0x81);
    /// The response bit.
    pub const RESPONSE_BIT: u8 = 0x80;

    /// True for a response method (R set).
    pub const fn is_response(self) -> bool {
        self.0 & Self::RESPONSE_BIT != 0
    }
}

mod field {
    pub const BASE_VERSION: usize = 0;
    pub const MGMT_CLASS: usize = 1;
    pub const CLASS_VERSION: usize = 2;
    pub const METHOD: usize = 3;
    pub const STATUS: usize = 4;
    pub const CLASS_SPECIFIC: usize = 6;
    pub const TID: usize = 8;
    pub const ATTR_ID: usize = 16;
    pub const RESERVED: usize = 18;
    pub const ATTR_MOD: usize = 20;
}

/// The common MAD header's meaning.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct MadHeaderRepr {
    /// Base version (1).
    pub base_version: u8,
    /// Management class.
    pub mgmt_class: MgmtClass,
    /// The class's version.
    pub class_version: u8,
    /// Method, R bit included.
    pub method: Method,
    /// Status (responses).
    pub status: u16,
    /// Class-specific word.
    pub class_specific: u16,
    /// Transaction ID: chosen by the requester, echoed in the response.
    pub tid: u64,
    /// Attribute ID: which message of the class.
    pub attr_id: u16,
    /// Attribute modifier (the CM carries the ECE vendor ID here in REQ and REP, else 0).
    pub attr_mod: u32,
}

impl MadHeaderRepr {
    /// Parse the header of a MAD that starts at `off` in the frame. Checks the base version.
    pub fn parse(b: &[u8], off: usize) -> Result<MadHeaderRepr, Error> {
        need(Layer::Mad, off, HEADER_LEN, b.len())?;
        let base_version = b[field::BASE_VERSION];
        if base_version != BASE_VERSION {
            return Err(Error::BadField {
                layer: Layer::Mad,
                offset: off,
                field: "BaseVersion",
                value: base_version as u32,
            });
        }
        Ok(MadHeaderRepr {
            base_version,
            mgmt_class: MgmtClass(b[field::MGMT_CLASS]),
            class_version: b[field::CLASS_VERSION],
            method: Method(b[field::METHOD]),
            status: get_u16(b, field::STATUS),
            class_specific: get_u16(b, field::CLASS_SPECIFIC),
            tid: get_u64(b, field::TID),
            attr_id: get_u16(b, field::ATTR_ID),
            attr_mod: get_u32(b, field::ATTR_MOD),
        })
    }

    /// Write the 24 bytes (the reserved word zero). `b` must hold [`HEADER_LEN`] bytes.
    pub fn emit(&self, b: &mut [u8]) -> Result<(), Error> {
        if b.len() < HEADER_LEN {
            return Err(Error::BufferTooSmall { need: HEADER_LEN, have: b.len() });
        }
        b[field::BASE_VERSION] = self.base_version;
        b[field::MGMT_CLASS] = self.mgmt_class.0;
        b[field::CLASS_VERSION] = self.class_version;
        b[field::METHOD] = self.method.0;
        set_u16(b, field::STATUS, self.status);
        set_u16(b, field::CLASS_SPECIFIC, self.class_specific);
        set_u64(b, field::TID, self.tid);
        set_u16(b, field::ATTR_ID, self.attr_id);
        set_u16(b, field::RESERVED, 0);
        set_u32(b, field::ATTR_MOD, self.attr_mod);
        Ok(())
    }
}

/// A parsed MAD: its header and a borrow of its 232 data bytes.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Mad<'a> {
    /// The common header.
    pub header: MadHeaderRepr,
    /// The class data.
    pub data: &'a [u8; DATA_LEN],
}

impl<'a> Mad<'a> {
    /// Parse the MAD a UD payload carries (`off`: where it starts in the frame). A payload
    /// shorter than 256 bytes is `Truncated`; a longer one is a `Length` error (a GMP is exactly
    /// one MAD; RMPP and OPA's larger MADs are not RoCE's).
    pub fn parse(b: &'a [u8], off: usize) -> Result<Mad<'a>, Error> {
        need(Layer::Mad, off, MAD_LEN, b.len())?;
        if b.len() != MAD_LEN {
            return Err(Error::Length {
                layer: Layer::Mad,
                offset: off,
                field: "UD payload",
                declared: MAD_LEN,
                actual: b.len(),
            });
        }
        let header = MadHeaderRepr::parse(b, off)?;
        let data = b[HEADER_LEN..].first_chunk::<DATA_LEN>().ok_or(Error::Truncated {
            layer: Layer::Mad,
            offset: off,
            need: MAD_LEN,
            have: b.len(),
        })?;
        Ok(Mad { header, data })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> MadHeaderRepr {
        MadHeaderRepr {
            base_version: 1,
            mgmt_class: MgmtClass::CM,
            class_version: 2,
            method: Method::SEND,
            status: 0,
            class_specific: 0,
            tid: 0x0000_0002_6dc5_c064,
            attr_id: 0x0010,
            attr_mod: 0,
        }
    }

    #[test]
    fn header_bytes_are_rxes() {
        // The first 24 bytes of the REQ MAD in rdma_cm.pcap frame 1.
        let want =
            [0x01, 0x07, 0x02, 0x03, 0, 0, 0, 0, 0, 0, 0, 0x02, 0x6d, 0xc5, 0xc0, 0x64, 0x00, 0x10, 0, 0, 0, 0, 0, 0];
        let mut b = [0xaau8; HEADER_LEN];
        header().emit(&mut b).unwrap();
        assert_eq!(b, want);
        assert_eq!(MadHeaderRepr::parse(&want, 0).unwrap(), header());
    }

    #[test]
    fn lengths_and_versions_are_checked() {
        let mut m = [0u8; MAD_LEN + 1];
        header().emit(&mut m).unwrap();
        assert!(Mad::parse(&m[..MAD_LEN], 0).is_ok());
        assert!(matches!(Mad::parse(&m[..MAD_LEN - 1], 9), Err(Error::Truncated { layer: Layer::Mad, offset: 9, .. })));
        assert!(matches!(Mad::parse(&m, 0), Err(Error::Length { layer: Layer::Mad, actual: 257, .. })));
        m[0] = 2;
        assert!(matches!(Mad::parse(&m[..MAD_LEN], 0), Err(Error::BadField { field: "BaseVersion", value: 2, .. })));
        assert_eq!(header().emit(&mut [0u8; 23]), Err(Error::BufferTooSmall { need: 24, have: 23 }));
    }

    proptest::proptest! {
        /// Any 256 bytes parse or fail with a typed error, and re-emit to the same header bytes
        /// (the reserved word aside).
        #[test]
        fn any_bytes(b in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300)) {
            if let Ok(m) = Mad::parse(&b, 0) {
                let mut out = [0u8; HEADER_LEN];
                m.header.emit(&mut out).unwrap();
                proptest::prop_assert_eq!(&out[..18], &b[..18]);
                proptest::prop_assert_eq!(&out[20..], &b[20..24]);
            }
        }
    }
}
