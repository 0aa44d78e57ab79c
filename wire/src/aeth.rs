//! The AETH syndrome as a sum type, with the credit-count and RNR-timer tables.
//!
//! ```text
//! bit 7 = 0 ; bits 6:5 = type ; bits 4:0 = value           (IBTA Vol. 1 §9.3.5, Table 43)
//! 00 ACK      value = credit count code (rxe always sends 0x1f "invalid/unlimited")
//! 01 RNR NAK  value = RNR timer code (Table 45)
//! 10 reserved
//! 11 NAK      value = NAK code (Table 44)
//! ```
//! Unlike rxe's `enum aeth_syndrome` (where `AETH_NAK == AETH_NAK_PSN_SEQ_ERROR == 0x60`), each
//! meaning has its own variant, and every byte round-trips.

use core::fmt;

/// The 5-bit credit count code of an ACK (IBTA §9.7.7.2.1, Table 46).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct CreditCount(u8);

/// Credit count code → number of receive WQEs (rdmavt `credit_table`). Code 31 is "invalid"
/// (the responder does not do end-to-end flow control).
pub const CREDIT_TABLE: [u32; 31] = [
    0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144,
    8192, 12288, 16384, 24576, 32768,
];

impl CreditCount {
    /// Code 31: credits not tracked. What rxe sends (`AETH_ACK_UNLIMITED`).
    pub const UNLIMITED: CreditCount = CreditCount(0x1f);
    /// From a 5-bit code (higher bits dropped).
    pub const fn new(code: u8) -> CreditCount {
        CreditCount(code & 0x1f)
    }
    /// The 5-bit code.
    pub const fn code(self) -> u8 {
        self.0
    }
    /// Credits, or `None` for code 31.
    pub fn credits(self) -> Option<u32> {
        CREDIT_TABLE.get(self.0 as usize).copied()
    }
}

/// The 5-bit RNR NAK timer code (IBTA §9.7.5.2.8, Table 45): how long the requester waits
/// before retrying after an RNR NAK.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct RnrTimer(u8);

/// RNR timer code → microseconds, as the spec gives them (Table 45: 0 = 655.36 ms,
/// 1 = 0.01 ms, ..., 31 = 491.52 ms).
pub const RNR_TIMER_US: [u32; 32] = [
    655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1_280, 1_920, 2_560, 3_840, 5_120, 7_680,
    10_240, 15_360, 20_480, 30_720, 40_960, 61_440, 81_920, 122_880, 163_840, 245_760, 327_680, 491_520,
];

/// rxe's table (`rxe_comp.c` `rnrnak_usec`): identical except code 25, where rxe has 61410 µs
/// instead of the spec's 61.44 ms — a typo in rxe. uroce uses the spec value.
pub const RXE_RNR_TIMER_US: [u32; 32] = {
    let mut t = RNR_TIMER_US;
    t[25] = 61_410;
    t
};

impl RnrTimer {
    /// From a 5-bit code (higher bits dropped).
    pub const fn new(code: u8) -> RnrTimer {
        RnrTimer(code & 0x1f)
    }
    /// The 5-bit code.
    pub const fn code(self) -> u8 {
        self.0
    }
    /// The delay in microseconds (spec table).
    pub const fn micros(self) -> u32 {
        RNR_TIMER_US[self.0 as usize]
    }
    /// The delay in nanoseconds.
    pub const fn nanos(self) -> u64 {
        self.micros() as u64 * 1000
    }
}

/// NAK codes (IBTA §9.7.5.2.4, Table 44).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum NakCode {
    /// 0: PSN sequence error.
    PsnSequenceError,
    /// 1: invalid request.
    InvalidRequest,
    /// 2: remote access error.
    RemoteAccessError,
    /// 3: remote operational error.
    RemoteOperationalError,
    /// 4: invalid RD request.
    InvalidRdRequest,
    /// 5..=31: reserved.
    Reserved(u8),
}

impl NakCode {
    /// From a 5-bit value.
    pub const fn from_value(v: u8) -> NakCode {
        match v & 0x1f {
            0 => NakCode::PsnSequenceError,
            1 => NakCode::InvalidRequest,
            2 => NakCode::RemoteAccessError,
            3 => NakCode::RemoteOperationalError,
            4 => NakCode::InvalidRdRequest,
            r => NakCode::Reserved(r),
        }
    }
    /// The 5-bit value.
    pub const fn value(self) -> u8 {
        match self {
            NakCode::PsnSequenceError => 0,
            NakCode::InvalidRequest => 1,
            NakCode::RemoteAccessError => 2,
            NakCode::RemoteOperationalError => 3,
            NakCode::InvalidRdRequest => 4,
            NakCode::Reserved(r) => r & 0x1f,
        }
    }
}

/// An AETH syndrome.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Syndrome {
    /// Positive acknowledgement with a credit count.
    Ack(CreditCount),
    /// Receiver not ready; retry after the timer.
    RnrNak(RnrTimer),
    /// Negative acknowledgement.
    Nak(NakCode),
    /// Type 0b10 or bit 7 set: reserved encodings, kept verbatim.
    Reserved(u8),
}

impl Syndrome {
    /// ACK with code 31, as rxe sends.
    pub const ACK_UNLIMITED: Syndrome = Syndrome::Ack(CreditCount::UNLIMITED);

    /// Decode a syndrome byte.
    pub const fn from_byte(b: u8) -> Syndrome {
        if b & 0x80 != 0 {
            return Syndrome::Reserved(b);
        }
        match (b >> 5) & 3 {
            0 => Syndrome::Ack(CreditCount::new(b)),
            1 => Syndrome::RnrNak(RnrTimer::new(b)),
            2 => Syndrome::Reserved(b),
            _ => Syndrome::Nak(NakCode::from_value(b)),
        }
    }

    /// Encode.
    pub const fn to_byte(self) -> u8 {
        match self {
            Syndrome::Ack(c) => c.code(),
            Syndrome::RnrNak(t) => 0x20 | t.code(),
            Syndrome::Nak(n) => 0x60 | n.value(),
            Syndrome::Reserved(b) => b,
        }
    }

    /// True for a positive ACK.
    pub const fn is_ack(self) -> bool {
        matches!(self, Syndrome::Ack(_))
    }
}

impl fmt::Display for Syndrome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Syndrome::Ack(c) => match c.credits() {
                Some(n) => write!(f, "ACK(credits {n})"),
                None => write!(f, "ACK"),
            },
            Syndrome::RnrNak(t) => write!(f, "RNR_NAK({}us)", t.micros()),
            Syndrome::Nak(NakCode::PsnSequenceError) => write!(f, "NAK(PSN_SEQ_ERR)"),
            Syndrome::Nak(NakCode::InvalidRequest) => write!(f, "NAK(INV_REQ)"),
            Syndrome::Nak(NakCode::RemoteAccessError) => write!(f, "NAK(REM_ACCESS_ERR)"),
            Syndrome::Nak(NakCode::RemoteOperationalError) => write!(f, "NAK(REM_OP_ERR)"),
            Syndrome::Nak(NakCode::InvalidRdRequest) => write!(f, "NAK(INV_RD_REQ)"),
            Syndrome::Nak(NakCode::Reserved(r)) => write!(f, "NAK(reserved {r})"),
            Syndrome::Reserved(b) => write!(f, "reserved({b:#04x})"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_byte_round_trips() {
        for b in 0..=255u8 {
            assert_eq!(Syndrome::from_byte(b).to_byte(), b, "{b:#x}");
        }
    }

    #[test]
    fn known_syndromes() {
        assert_eq!(Syndrome::from_byte(0x1f), Syndrome::ACK_UNLIMITED);
        assert_eq!(Syndrome::from_byte(0x60), Syndrome::Nak(NakCode::PsnSequenceError));
        assert_eq!(Syndrome::from_byte(0x61), Syndrome::Nak(NakCode::InvalidRequest));
        assert_eq!(Syndrome::from_byte(0x62), Syndrome::Nak(NakCode::RemoteAccessError));
        assert_eq!(Syndrome::from_byte(0x63), Syndrome::Nak(NakCode::RemoteOperationalError));
        assert_eq!(Syndrome::from_byte(0x20 | 12), Syndrome::RnrNak(RnrTimer::new(12)));
        assert_eq!(Syndrome::from_byte(0x40), Syndrome::Reserved(0x40));
        assert_eq!(CreditCount::new(31).credits(), None);
        assert_eq!(CreditCount::new(30).credits(), Some(32768));
    }

    #[test]
    fn rnr_table_is_the_spec_table() {
        // IBTA Table 45, in milliseconds × 100.
        let spec_cms: [u32; 32] = [
            65536, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072,
            4096, 6144, 8192, 12288, 16384, 24576, 32768, 49152,
        ];
        for (code, cms) in spec_cms.iter().enumerate() {
            assert_eq!(RnrTimer::new(code as u8).micros(), cms * 10, "code {code}");
        }
        // rxe differs only at code 25.
        for code in 0..32 {
            assert_eq!(RNR_TIMER_US[code] == RXE_RNR_TIMER_US[code], code != 25);
        }
    }
}
