//! Base Transport Header (IBTA Vol. 1 §9.2), 12 bytes.
//!
//! ```text
//! byte 0     OpCode
//! byte 1     SE(0x80) | MigReq(0x40) | PadCnt(0x30) | TVer(0x0f, must be 0)
//! bytes 2-3  P_Key
//! byte 4     FECN(0x80) | BECN(0x40) | resv6(0x3f)   <- masked (all ones) in the ICRC
//! bytes 5-7  DestQP
//! byte 8     AckReq(0x80) | resv7(0x7f)
//! bytes 9-11 PSN
//! ```

use crate::error::{need, Error, Layer};
use crate::field::{get_u16, get_u24, set_u16, set_u24};
use crate::opcode::Opcode;
use crate::psn::{Psn, Qpn};

/// BTH length.
pub const HEADER_LEN: usize = 12;
/// The default full-membership P_Key (rxe `IB_DEFAULT_PKEY_FULL`).
pub const DEFAULT_PKEY: u16 = 0xffff;

mod field {
    pub const OPCODE: usize = 0;
    pub const FLAGS: usize = 1;
    pub const PKEY: usize = 2;
    pub const BECN_FECN: usize = 4;
    pub const DEST_QP: usize = 5;
    pub const ACK_REQ: usize = 8;
    pub const PSN: usize = 9;
}

/// A view of a BTH.
#[derive(Debug, Clone)]
pub struct BthHeader<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> BthHeader<T> {
    /// Wrap without checking (emit path only).
    pub const fn new_unchecked(buffer: T) -> Self {
        BthHeader { buffer }
    }
    /// Wrap and check that 12 bytes are present.
    pub fn new_checked(buffer: T) -> Result<Self, Error> {
        need(Layer::Bth, 0, HEADER_LEN, buffer.as_ref().len())?;
        Ok(BthHeader { buffer })
    }
    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }
    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    /// Opcode.
    pub fn opcode(&self) -> Opcode {
        Opcode(self.b()[field::OPCODE])
    }
    /// Solicited event.
    pub fn solicited(&self) -> bool {
        self.b()[field::FLAGS] & 0x80 != 0
    }
    /// Migration request.
    pub fn mig_req(&self) -> bool {
        self.b()[field::FLAGS] & 0x40 != 0
    }
    /// Pad count (0..=3).
    pub fn pad_count(&self) -> u8 {
        (self.b()[field::FLAGS] >> 4) & 3
    }
    /// Transport header version (must be 0).
    pub fn tver(&self) -> u8 {
        self.b()[field::FLAGS] & 0x0f
    }
    /// P_Key.
    pub fn pkey(&self) -> u16 {
        get_u16(self.b(), field::PKEY)
    }
    /// Forward explicit congestion notification.
    pub fn fecn(&self) -> bool {
        self.b()[field::BECN_FECN] & 0x80 != 0
    }
    /// Backward explicit congestion notification.
    pub fn becn(&self) -> bool {
        self.b()[field::BECN_FECN] & 0x40 != 0
    }
    /// Destination QP.
    pub fn dest_qp(&self) -> Qpn {
        Qpn::new(get_u24(self.b(), field::DEST_QP))
    }
    /// Acknowledge request.
    pub fn ack_req(&self) -> bool {
        self.b()[field::ACK_REQ] & 0x80 != 0
    }
    /// Packet sequence number.
    pub fn psn(&self) -> Psn {
        Psn::new(get_u24(self.b(), field::PSN))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> BthHeader<T> {
    fn bm(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }
    /// Set the opcode.
    pub fn set_opcode(&mut self, o: Opcode) {
        self.bm()[field::OPCODE] = o.0;
    }
    /// Set SE, MigReq, PadCnt; TVer = 0.
    pub fn set_flags(&mut self, se: bool, mig_req: bool, pad: u8) {
        self.bm()[field::FLAGS] = ((se as u8) << 7) | ((mig_req as u8) << 6) | ((pad & 3) << 4);
    }
    /// Set the P_Key.
    pub fn set_pkey(&mut self, v: u16) {
        set_u16(self.bm(), field::PKEY, v)
    }
    /// Set FECN/BECN (reserved bits zero).
    pub fn set_fecn_becn(&mut self, fecn: bool, becn: bool) {
        self.bm()[field::BECN_FECN] = ((fecn as u8) << 7) | ((becn as u8) << 6);
    }
    /// Set the destination QP.
    pub fn set_dest_qp(&mut self, q: Qpn) {
        set_u24(self.bm(), field::DEST_QP, q.value())
    }
    /// Set AckReq (reserved bits zero).
    pub fn set_ack_req(&mut self, a: bool) {
        self.bm()[field::ACK_REQ] = (a as u8) << 7;
    }
    /// Set the PSN.
    pub fn set_psn(&mut self, p: Psn) {
        set_u24(self.bm(), field::PSN, p.value())
    }
}

/// The meaning of a BTH.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct BthRepr {
    /// Opcode.
    pub opcode: Opcode,
    /// Solicited event.
    pub solicited: bool,
    /// MigReq (rxe sends 0, ConnectX sends 1 on ACKs; receivers must not care).
    pub mig_req: bool,
    /// Pad count: bytes of zero padding after the payload (`(-len) & 3`).
    pub pad_count: u8,
    /// P_Key.
    pub pkey: u16,
    /// FECN.
    pub fecn: bool,
    /// BECN (set on CNPs).
    pub becn: bool,
    /// Destination QP.
    pub dest_qp: Qpn,
    /// AckReq.
    pub ack_req: bool,
    /// PSN.
    pub psn: Psn,
}

impl BthRepr {
    /// Parse a checked header. Rejects TVer != 0 (rxe `hdr_check`: "bad tver").
    #[inline(always)]
    pub fn parse<T: AsRef<[u8]>>(h: &BthHeader<T>, off: usize) -> Result<BthRepr, Error> {
        if h.tver() != 0 {
            return Err(Error::BadField { layer: Layer::Bth, offset: off, field: "TVer", value: h.tver() as u32 });
        }
        // One fixed-size read of the 12 bytes (a checked view always holds them).
        let b = h.b().first_chunk::<12>().ok_or(Error::Truncated {
            layer: Layer::Bth,
            offset: off,
            need: HEADER_LEN,
            have: h.b().len(),
        })?;
        Ok(BthRepr {
            opcode: Opcode(b[0]),
            solicited: b[1] & 0x80 != 0,
            mig_req: b[1] & 0x40 != 0,
            pad_count: (b[1] >> 4) & 3,
            pkey: u16::from_be_bytes([b[2], b[3]]),
            fecn: b[4] & 0x80 != 0,
            becn: b[4] & 0x40 != 0,
            dest_qp: Qpn::new(u32::from_be_bytes([0, b[5], b[6], b[7]])),
            ack_req: b[8] & 0x80 != 0,
            psn: Psn::new(u32::from_be_bytes([0, b[9], b[10], b[11]])),
        })
    }

    /// Write the 12 bytes.
    #[inline]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut BthHeader<T>) {
        h.set_opcode(self.opcode);
        h.set_flags(self.solicited, self.mig_req, self.pad_count);
        h.set_pkey(self.pkey);
        h.set_fecn_becn(self.fecn, self.becn);
        h.set_dest_qp(self.dest_qp);
        h.set_ack_req(self.ack_req);
        h.set_psn(self.psn);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // BTH of protocol.md vector B: UC_SEND_ONLY, MigReq, PadCnt 2, pkey ffff, QP 211, PSN 0xcf1710.
    static VEC_B: [u8; 12] = [0x24, 0x60, 0xff, 0xff, 0x00, 0x00, 0x00, 0xd3, 0x00, 0xcf, 0x17, 0x10];
    // BTH of vector A: CNP, BECN, QP 0x118.
    static VEC_A: [u8; 12] = [0x81, 0x00, 0xff, 0xff, 0x40, 0x00, 0x01, 0x18, 0x00, 0x00, 0x00, 0x00];

    proptest::proptest! {
        /// The fixed-size decode gives what the field accessors give, for any 12 bytes.
        #[test]
        fn parse_matches_accessors(b in proptest::prelude::any::<[u8; 12]>()) {
            let h = BthHeader::new_checked(&b[..]).unwrap();
            match BthRepr::parse(&h, 0) {
                Ok(r) => {
                    proptest::prop_assert_eq!(h.tver(), 0);
                    let want = BthRepr {
                        opcode: h.opcode(), solicited: h.solicited(), mig_req: h.mig_req(),
                        pad_count: h.pad_count(), pkey: h.pkey(), fecn: h.fecn(), becn: h.becn(),
                        dest_qp: h.dest_qp(), ack_req: h.ack_req(), psn: h.psn(),
                    };
                    proptest::prop_assert_eq!(r, want);
                }
                Err(_) => proptest::prop_assert_ne!(h.tver(), 0),
            }
        }
    }

    fn repr_b() -> BthRepr {
        BthRepr {
            opcode: Opcode::UC_SEND_ONLY,
            solicited: false,
            mig_req: true,
            pad_count: 2,
            pkey: 0xffff,
            fecn: false,
            becn: false,
            dest_qp: Qpn::new(211),
            ack_req: false,
            psn: Psn::new(13571856),
        }
    }

    #[test]
    fn test_deconstruct() {
        let h = BthHeader::new_checked(&VEC_B[..]).unwrap();
        assert_eq!(h.opcode(), Opcode::UC_SEND_ONLY);
        assert!(h.mig_req() && !h.solicited());
        assert_eq!(h.pad_count(), 2);
        assert_eq!(h.tver(), 0);
        assert_eq!(h.pkey(), 0xffff);
        assert_eq!(h.dest_qp(), Qpn::new(211));
        assert_eq!(h.psn(), Psn::new(0xcf1710));
        let h = BthHeader::new_checked(&VEC_A[..]).unwrap();
        assert!(h.becn() && !h.fecn());
        assert_eq!(h.dest_qp(), Qpn::new(0x118));
    }

    #[test]
    fn test_parse_emit() {
        let h = BthHeader::new_checked(&VEC_B[..]).unwrap();
        assert_eq!(BthRepr::parse(&h, 0).unwrap(), repr_b());
        let mut buf = [0xa5u8; 12];
        repr_b().emit(&mut BthHeader::new_unchecked(&mut buf[..]));
        assert_eq!(buf, VEC_B);
    }

    #[test]
    fn test_impossible_len_and_tver() {
        assert_eq!(
            BthHeader::new_checked(&VEC_B[..11]).unwrap_err(),
            Error::Truncated { layer: Layer::Bth, offset: 0, need: 12, have: 11 }
        );
        let mut b = VEC_B;
        b[1] |= 1;
        let h = BthHeader::new_checked(&b[..]).unwrap();
        assert!(matches!(BthRepr::parse(&h, 42), Err(Error::BadField { field: "TVer", offset: 42, value: 1, .. })));
    }
}
