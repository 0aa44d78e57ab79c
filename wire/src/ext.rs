//! Extension transport headers (IBTA Vol. 1 §9.3): views and reprs for DETH, FETH, RETH,
//! AtomicETH, AETH, AtomicAckETH, ImmDt and IETH, and [`ExtHeaders`], the set a packet carries.
//! All fields are big-endian.
//!
//! | header | bytes | layout |
//! |---|---|---|
//! | DETH | 8 | Q_Key u32, resv8, SrcQP u24 |
//! | FETH | 4 | resv26, selectivity level u2, placement type u4 (IBA 1.5 FLUSH) |
//! | RETH | 16 | VA u64, R_Key u32, DMA length u32 |
//! | AtomicETH | 28 | VA u64, R_Key u32, swap/add data u64, compare data u64 |
//! | AETH | 4 | syndrome u8, MSN u24 |
//! | AtomicAckETH | 8 | original remote data u64 |
//! | ImmDt | 4 | immediate data (opaque, kept in network order as a u32) |
//! | IETH | 4 | R_Key to invalidate |

use crate::aeth::Syndrome;
use crate::error::{Error, Layer};
use crate::field::{get_u24, get_u32, get_u64, set_u24, set_u32, set_u64};
use crate::opcode::{HeaderKind, OpcodeInfo};
use crate::psn::{Msn, Qpn};

macro_rules! view {
    ($(#[$m:meta])* $name:ident, $layer:expr, $len:expr, {
        $( $(#[$fm:meta])* $get:ident / $set:ident : $ty:ident @ $at:expr ),* $(,)?
    }) => {
        $(#[$m])*
        #[derive(Debug, Clone)]
        pub struct $name<T: AsRef<[u8]>> { buffer: T }

        impl<T: AsRef<[u8]>> $name<T> {
            /// Header length.
            pub const LEN: usize = $len;
            /// Wrap without checking (emit path only).
            pub const fn new_unchecked(buffer: T) -> Self { $name { buffer } }
            /// Wrap and check the length.
            pub fn new_checked(buffer: T) -> Result<Self, Error> {
                crate::error::need($layer, 0, $len, buffer.as_ref().len())?;
                Ok($name { buffer })
            }
            /// The wrapped buffer.
            pub fn into_inner(self) -> T { self.buffer }
            $( $(#[$fm])* pub fn $get(&self) -> view!(@ty $ty) { view!(@get $ty, self.buffer.as_ref(), $at) } )*
        }

        impl<T: AsRef<[u8]> + AsMut<[u8]>> $name<T> {
            $( $(#[$fm])* pub fn $set(&mut self, v: view!(@ty $ty)) { view!(@set $ty, self.buffer.as_mut(), $at, v) } )*
        }
    };
    (@ty u8) => { u8 };
    (@ty u24) => { u32 };
    (@ty u32) => { u32 };
    (@ty u64) => { u64 };
    (@get u8, $b:expr, $at:expr) => { $b[$at] };
    (@get u24, $b:expr, $at:expr) => { get_u24($b, $at) };
    (@get u32, $b:expr, $at:expr) => { get_u32($b, $at) };
    (@get u64, $b:expr, $at:expr) => { get_u64($b, $at) };
    (@set u8, $b:expr, $at:expr, $v:expr) => { $b[$at] = $v };
    (@set u24, $b:expr, $at:expr, $v:expr) => { set_u24($b, $at, $v) };
    (@set u32, $b:expr, $at:expr, $v:expr) => { set_u32($b, $at, $v) };
    (@set u64, $b:expr, $at:expr, $v:expr) => { set_u64($b, $at, $v) };
}

view!(
    /// A view of a Datagram Extended Transport Header.
    DethHeader, Layer::Deth, 8, {
        /// Q_Key.
        qkey / set_qkey: u32 @ 0,
        /// Reserved byte.
        resv8 / set_resv8: u8 @ 4,
        /// Source QP.
        src_qp / set_src_qp: u24 @ 5,
    }
);
view!(
    /// A view of a FLUSH Extended Transport Header.
    FethHeader, Layer::Feth, 4, {
        /// The whole 32-bit word (placement type in bits 3:0, selectivity level in bits 5:4).
        word / set_word: u32 @ 0,
    }
);
view!(
    /// A view of an RDMA Extended Transport Header.
    RethHeader, Layer::Reth, 16, {
        /// Virtual address.
        va / set_va: u64 @ 0,
        /// R_Key.
        rkey / set_rkey: u32 @ 8,
        /// DMA length.
        dma_len / set_dma_len: u32 @ 12,
    }
);
view!(
    /// A view of an Atomic Extended Transport Header.
    AtomicEthHeader, Layer::AtomicEth, 28, {
        /// Virtual address.
        va / set_va: u64 @ 0,
        /// R_Key.
        rkey / set_rkey: u32 @ 8,
        /// Swap (compare & swap) or add (fetch & add) data.
        swap_add / set_swap_add: u64 @ 12,
        /// Compare data.
        compare / set_compare: u64 @ 20,
    }
);
view!(
    /// A view of an ACK Extended Transport Header.
    AethHeader, Layer::Aeth, 4, {
        /// Syndrome byte.
        syndrome_byte / set_syndrome_byte: u8 @ 0,
        /// MSN.
        msn / set_msn: u24 @ 1,
    }
);
view!(
    /// A view of an Atomic ACK Extended Transport Header.
    AtomicAckEthHeader, Layer::AtomicAckEth, 8, {
        /// Original remote data.
        orig / set_orig: u64 @ 0,
    }
);
view!(
    /// A view of a 4-byte ImmDt or IETH.
    Word32Header, Layer::ImmDt, 4, {
        /// The 32-bit value.
        value / set_value: u32 @ 0,
    }
);

/// DETH meaning.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct DethRepr {
    /// Q_Key (GSI: 0x80010000).
    pub qkey: u32,
    /// Source QP.
    pub src_qp: Qpn,
}

/// FETH meaning (IBA 1.5 FLUSH).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct FethRepr {
    /// Selectivity level (2 bits).
    pub selectivity: u8,
    /// Placement type (4 bits).
    pub placement: u8,
}

/// RETH meaning.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct RethRepr {
    /// Remote virtual address.
    pub va: u64,
    /// R_Key.
    pub rkey: u32,
    /// DMA length of the whole message.
    pub dma_len: u32,
}

impl RethRepr {
    /// Read a RETH from its 16 bytes (`s` holds at least 16: the caller checked).
    #[inline(always)]
    pub(crate) fn read(s: &[u8]) -> RethRepr {
        RethRepr { va: get_u64(s, 0), rkey: get_u32(s, 8), dma_len: get_u32(s, 12) }
    }
}

/// AtomicETH meaning.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct AtomicEthRepr {
    /// Remote virtual address (8-byte aligned).
    pub va: u64,
    /// R_Key.
    pub rkey: u32,
    /// Swap value (compare & swap) or add value (fetch & add).
    pub swap_add: u64,
    /// Compare value (compare & swap).
    pub compare: u64,
}

/// AETH meaning.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct AethRepr {
    /// Syndrome.
    pub syndrome: Syndrome,
    /// Message sequence number.
    pub msn: Msn,
}

/// AtomicAckETH meaning.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct AtomicAckEthRepr {
    /// The remote value before the atomic operation.
    pub orig: u64,
}

/// The extension headers of one packet. Which ones are present is fixed by the opcode
/// ([`OpcodeInfo::headers`]); [`ExtHeaders::check`] enforces that.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct ExtHeaders {
    /// DETH (UD).
    pub deth: Option<DethRepr>,
    /// FETH (FLUSH).
    pub feth: Option<FethRepr>,
    /// RETH (WRITE first/only, READ request, FLUSH, ATOMIC WRITE).
    pub reth: Option<RethRepr>,
    /// AtomicETH (compare & swap, fetch & add).
    pub atomic_eth: Option<AtomicEthRepr>,
    /// AETH (responses).
    pub aeth: Option<AethRepr>,
    /// AtomicAckETH (atomic acknowledge).
    pub atomic_ack_eth: Option<AtomicAckEthRepr>,
    /// Immediate data.
    pub immdt: Option<u32>,
    /// R_Key to invalidate.
    pub ieth: Option<u32>,
}

impl ExtHeaders {
    /// Parse the extension headers of an opcode from `b`, which starts right after the BTH and
    /// holds at least `info.header_len - 12` bytes (the caller checked).
    #[inline(always)]
    pub(crate) fn parse(info: &OpcodeInfo, b: &[u8]) -> ExtHeaders {
        if info.headers.is_empty() {
            // MIDDLE packets and bare SEND/WRITE/READ-response packets: the common case.
            return ExtHeaders::default();
        }
        // Offsets in the table are from the BTH start.
        let at = |k: HeaderKind| {
            info.offset(k).map(|o| &b[o - crate::bth::HEADER_LEN..o - crate::bth::HEADER_LEN + k.size()])
        };
        ExtHeaders {
            deth: at(HeaderKind::Deth).map(|s| DethRepr { qkey: get_u32(s, 0), src_qp: Qpn::new(get_u24(s, 5)) }),
            feth: at(HeaderKind::Feth).map(|s| {
                let w = get_u32(s, 0);
                FethRepr { selectivity: ((w >> 4) & 3) as u8, placement: (w & 0xf) as u8 }
            }),
            reth: at(HeaderKind::Reth).map(RethRepr::read),
            atomic_eth: at(HeaderKind::AtomicEth).map(|s| AtomicEthRepr {
                va: get_u64(s, 0),
                rkey: get_u32(s, 8),
                swap_add: get_u64(s, 12),
                compare: get_u64(s, 20),
            }),
            aeth: at(HeaderKind::Aeth)
                .map(|s| AethRepr { syndrome: Syndrome::from_byte(s[0]), msn: Msn::new(get_u24(s, 1)) }),
            atomic_ack_eth: at(HeaderKind::AtomicAckEth).map(|s| AtomicAckEthRepr { orig: get_u64(s, 0) }),
            immdt: at(HeaderKind::ImmDt).map(|s| get_u32(s, 0)),
            ieth: at(HeaderKind::Ieth).map(|s| get_u32(s, 0)),
        }
    }

    /// Check that exactly the headers the opcode requires are present.
    pub fn check(&self, info: &OpcodeInfo) -> Result<(), Error> {
        // One set of present headers compared with the opcode's (branch-free, this runs for
        // every packet a template stamps).
        let bit = |k: HeaderKind, present: bool| if present { k.bit() } else { 0 };
        let present = bit(HeaderKind::Deth, self.deth.is_some())
            | bit(HeaderKind::Feth, self.feth.is_some())
            | bit(HeaderKind::Reth, self.reth.is_some())
            | bit(HeaderKind::AtomicEth, self.atomic_eth.is_some())
            | bit(HeaderKind::Aeth, self.aeth.is_some())
            | bit(HeaderKind::AtomicAckEth, self.atomic_ack_eth.is_some())
            | bit(HeaderKind::ImmDt, self.immdt.is_some())
            | bit(HeaderKind::Ieth, self.ieth.is_some());
        // A CNP's reserved bytes are not an extension header with a repr.
        if present == info.headers.bits() & !HeaderKind::CnpReserved.bit() {
            Ok(())
        } else {
            Err(Error::InvalidRepr { what: "extension headers do not match the opcode" })
        }
    }

    /// Write the headers the opcode requires into `b` (starting right after the BTH,
    /// `info.header_len - 12` bytes). Call [`ExtHeaders::check`] first.
    #[inline]
    pub(crate) fn emit(&self, info: &OpcodeInfo, b: &mut [u8]) {
        if info.headers.is_empty() {
            return;
        }
        let mut put = |k: HeaderKind, f: &mut dyn FnMut(&mut [u8])| {
            if let Some(o) = info.offset(k) {
                let o = o - crate::bth::HEADER_LEN;
                f(&mut b[o..o + k.size()]);
            }
        };
        if let Some(d) = self.deth {
            put(HeaderKind::Deth, &mut |s| {
                set_u32(s, 0, d.qkey);
                s[4] = 0;
                set_u24(s, 5, d.src_qp.value());
            });
        }
        if let Some(f) = self.feth {
            put(HeaderKind::Feth, &mut |s| {
                set_u32(s, 0, ((f.selectivity as u32 & 3) << 4) | (f.placement as u32 & 0xf))
            });
        }
        if let Some(r) = self.reth {
            put(HeaderKind::Reth, &mut |s| {
                set_u64(s, 0, r.va);
                set_u32(s, 8, r.rkey);
                set_u32(s, 12, r.dma_len);
            });
        }
        if let Some(a) = self.atomic_eth {
            put(HeaderKind::AtomicEth, &mut |s| {
                set_u64(s, 0, a.va);
                set_u32(s, 8, a.rkey);
                set_u64(s, 12, a.swap_add);
                set_u64(s, 20, a.compare);
            });
        }
        if let Some(a) = self.aeth {
            put(HeaderKind::Aeth, &mut |s| {
                s[0] = a.syndrome.to_byte();
                set_u24(s, 1, a.msn.value());
            });
        }
        if let Some(a) = self.atomic_ack_eth {
            put(HeaderKind::AtomicAckEth, &mut |s| set_u64(s, 0, a.orig));
        }
        if let Some(v) = self.immdt {
            put(HeaderKind::ImmDt, &mut |s| set_u32(s, 0, v));
        }
        if let Some(v) = self.ieth {
            put(HeaderKind::Ieth, &mut |s| set_u32(s, 0, v));
        }
        put(HeaderKind::CnpReserved, &mut |s| s.fill(0));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aeth::NakCode;
    use crate::opcode::Opcode;

    /// Each kind present alone (`None` for the CNP's reserved bytes, which have no repr).
    fn only(k: HeaderKind) -> Option<ExtHeaders> {
        let mut e = ExtHeaders::default();
        match k {
            HeaderKind::Deth => e.deth = Some(DethRepr::default()),
            HeaderKind::Feth => e.feth = Some(FethRepr::default()),
            HeaderKind::Reth => e.reth = Some(RethRepr::default()),
            HeaderKind::AtomicEth => e.atomic_eth = Some(AtomicEthRepr::default()),
            HeaderKind::Aeth => e.aeth = Some(AethRepr { syndrome: Syndrome::Reserved(0x40), msn: Msn::new(0) }),
            HeaderKind::AtomicAckEth => e.atomic_ack_eth = Some(AtomicAckEthRepr::default()),
            HeaderKind::ImmDt => e.immdt = Some(0),
            HeaderKind::Ieth => e.ieth = Some(0),
            HeaderKind::CnpReserved => return None,
        }
        Some(e)
    }

    /// Union of two sets of headers.
    fn or(a: ExtHeaders, b: ExtHeaders) -> ExtHeaders {
        ExtHeaders {
            deth: a.deth.or(b.deth),
            feth: a.feth.or(b.feth),
            reth: a.reth.or(b.reth),
            atomic_eth: a.atomic_eth.or(b.atomic_eth),
            aeth: a.aeth.or(b.aeth),
            atomic_ack_eth: a.atomic_ack_eth.or(b.atomic_ack_eth),
            immdt: a.immdt.or(b.immdt),
            ieth: a.ieth.or(b.ieth),
        }
    }

    #[test]
    fn check_accepts_exactly_the_opcodes_headers() {
        let mut opcodes = 0;
        for code in 0..=255u8 {
            let Some(info) = Opcode(code).info() else { continue };
            opcodes += 1;
            let want = HeaderKind::ORDER.iter().filter(|&&k| info.headers.contains(k)).filter_map(|&k| only(k));
            let exact = want.fold(ExtHeaders::default(), or);
            assert_eq!(exact.check(info), Ok(()), "{code:#x}");
            for k in HeaderKind::ORDER {
                let Some(one) = only(k) else { continue };
                // One header more, or one fewer, than the opcode carries: refused.
                let changed = if info.headers.contains(k) {
                    let mut e = exact;
                    match k {
                        HeaderKind::Deth => e.deth = None,
                        HeaderKind::Feth => e.feth = None,
                        HeaderKind::Reth => e.reth = None,
                        HeaderKind::AtomicEth => e.atomic_eth = None,
                        HeaderKind::Aeth => e.aeth = None,
                        HeaderKind::AtomicAckEth => e.atomic_ack_eth = None,
                        HeaderKind::ImmDt => e.immdt = None,
                        HeaderKind::Ieth => e.ieth = None,
                        HeaderKind::CnpReserved => unreachable!(),
                    }
                    e
                } else {
                    or(exact, one)
                };
                assert!(changed.check(info).is_err(), "{code:#x} {k:?}");
            }
        }
        assert!(opcodes > 30, "the table has {opcodes} opcodes");
    }

    #[test]
    fn test_views_deconstruct_construct() {
        let bytes: [u8; 16] = [0, 0, 0x55, 0x86, 0x72, 0x21, 0xb0, 0, 0, 0, 0x02, 0x47, 0, 0, 0x10, 0];
        let r = RethHeader::new_checked(&bytes[..]).unwrap();
        assert_eq!(r.va(), 0x5586_7221_b000);
        assert_eq!(r.rkey(), 0x247);
        assert_eq!(r.dma_len(), 4096);
        let mut out = [0xa5u8; 16];
        let mut w = RethHeader::new_unchecked(&mut out[..]);
        w.set_va(0x5586_7221_b000);
        w.set_rkey(0x247);
        w.set_dma_len(4096);
        assert_eq!(out, bytes);

        let aeth: [u8; 4] = [0x60, 0x01, 0x02, 0x03];
        let a = AethHeader::new_checked(&aeth[..]).unwrap();
        assert_eq!(Syndrome::from_byte(a.syndrome_byte()), Syndrome::Nak(NakCode::PsnSequenceError));
        assert_eq!(a.msn(), 0x010203);
        assert!(matches!(
            AtomicEthHeader::new_checked(&[0u8; 27][..]),
            Err(Error::Truncated { layer: Layer::AtomicEth, .. })
        ));
    }

    #[test]
    fn test_ext_round_trip_every_opcode() {
        for info in crate::opcode::OPCODES {
            let h = info.headers;
            let ext = ExtHeaders {
                deth: h
                    .contains(HeaderKind::Deth)
                    .then_some(DethRepr { qkey: 0x8001_0000, src_qp: Qpn::new(0x123456) }),
                feth: h.contains(HeaderKind::Feth).then_some(FethRepr { selectivity: 1, placement: 2 }),
                reth: h.contains(HeaderKind::Reth).then_some(RethRepr {
                    va: 0x1122_3344_5566_7788,
                    rkey: 0xdead_beef,
                    dma_len: 77,
                }),
                atomic_eth: h.contains(HeaderKind::AtomicEth).then_some(AtomicEthRepr {
                    va: 8,
                    rkey: 9,
                    swap_add: 10,
                    compare: 11,
                }),
                aeth: h
                    .contains(HeaderKind::Aeth)
                    .then_some(AethRepr { syndrome: Syndrome::ACK_UNLIMITED, msn: Msn::new(5) }),
                atomic_ack_eth: h.contains(HeaderKind::AtomicAckEth).then_some(AtomicAckEthRepr { orig: 42 }),
                immdt: h.contains(HeaderKind::ImmDt).then_some(0xcafe_f00d),
                ieth: h.contains(HeaderKind::Ieth).then_some(0x1234),
            };
            ext.check(info).unwrap();
            let mut b = vec![0xa5u8; h.len()];
            ext.emit(info, &mut b);
            assert_eq!(ExtHeaders::parse(info, &b), ext, "{}", info.name);
        }
        // A RETH on a SEND is rejected.
        let bad = ExtHeaders { reth: Some(RethRepr::default()), ..Default::default() };
        assert!(bad.check(Opcode::RC_SEND_ONLY.info().unwrap()).is_err());
    }
}
