//! The IBTA BTH opcode table for RC, UC and UD, plus CNP — declared once.
//!
//! Each opcode is declared by its transport, its operation and its position in a message
//! (first / middle / last / only). Everything else — which extension headers follow the BTH,
//! in what order, at which offsets, whether a payload follows — is *derived* from those three
//! facts by `const fn`s below, so no offset is summed by hand (rxe's `rxe_opcode.c` sums every
//! `.length` and `.offset` by hand; see `tests::table_matches_ibta_transcription`).
//!
//! Sources: IBTA Vol. 1 §9.2 Table 38 "OpCode field" (transport prefix in bits 7:5, operation in
//! bits 4:0) and §9.3 "Transport headers" for which headers each packet carries; IBA 1.5 adds
//! FLUSH (0x1c) and ATOMIC WRITE (0x1d) to RC; CNP is 0x81 (IBTA Annex A17, A17.9.2 / the
//! "CNP" opcode of Table 38's 0x80 range).

use core::fmt;

/// Transport service of an opcode (bits 7:5 of the opcode).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Transport {
    /// Reliable connection, 0x00.
    Rc,
    /// Unreliable connection, 0x20.
    Uc,
    /// Unreliable datagram, 0x60.
    Ud,
    /// Congestion notification, 0x80.
    Cnp,
}

impl Transport {
    /// The opcode prefix.
    pub const fn prefix(self) -> u8 {
        match self {
            Transport::Rc => 0x00,
            Transport::Uc => 0x20,
            Transport::Ud => 0x60,
            Transport::Cnp => 0x80,
        }
    }
    /// Name as used in opcode names.
    pub const fn name(self) -> &'static str {
        match self {
            Transport::Rc => "RC",
            Transport::Uc => "UC",
            Transport::Ud => "UD",
            Transport::Cnp => "CNP",
        }
    }
}

/// What an opcode does.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Operation {
    /// SEND.
    Send,
    /// SEND with immediate (ImmDt on the last/only packet).
    SendWithImm,
    /// SEND with invalidate (IETH on the last/only packet).
    SendWithInv,
    /// RDMA WRITE.
    Write,
    /// RDMA WRITE with immediate.
    WriteWithImm,
    /// RDMA READ request.
    ReadRequest,
    /// RDMA READ response.
    ReadResponse,
    /// ACKNOWLEDGE (ACK, RNR NAK, NAK).
    Acknowledge,
    /// ATOMIC ACKNOWLEDGE.
    AtomicAcknowledge,
    /// ATOMIC compare & swap.
    CompareSwap,
    /// ATOMIC fetch & add.
    FetchAdd,
    /// FLUSH (IBA 1.5).
    Flush,
    /// ATOMIC WRITE (IBA 1.5).
    AtomicWrite,
    /// Congestion notification packet.
    Cnp,
}

/// Position of a packet in its message.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Position {
    /// First packet of a multi-packet message.
    First,
    /// Middle packet.
    Middle,
    /// Last packet.
    Last,
    /// The only packet.
    Only,
}

impl Position {
    /// First or only: the packet that starts a message.
    pub const fn is_start(self) -> bool {
        matches!(self, Position::First | Position::Only)
    }
    /// Last or only: the packet that ends a message.
    pub const fn is_end(self) -> bool {
        matches!(self, Position::Last | Position::Only)
    }
}

/// An extension header kind, in the order the headers follow the BTH.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
#[repr(u8)]
pub enum HeaderKind {
    /// Datagram ETH (Q_Key, SrcQP): 8 bytes.
    Deth = 0,
    /// FLUSH ETH: 4 bytes (precedes the RETH, as in rxe).
    Feth = 1,
    /// RDMA ETH (VA, R_Key, DMA length): 16 bytes.
    Reth = 2,
    /// Atomic ETH (VA, R_Key, swap/add, compare): 28 bytes.
    AtomicEth = 3,
    /// ACK ETH (syndrome, MSN): 4 bytes.
    Aeth = 4,
    /// Atomic ACK ETH (original remote data): 8 bytes.
    AtomicAckEth = 5,
    /// Immediate data: 4 bytes.
    ImmDt = 6,
    /// Invalidate ETH (R_Key): 4 bytes.
    Ieth = 7,
    /// The 16 reserved bytes after a CNP's BTH.
    CnpReserved = 8,
}

impl HeaderKind {
    /// Every kind, in wire order (IBTA §9.3: RDETH, DETH, RETH, AtomicETH, AETH,
    /// AtomicAckETH, ImmDt, IETH; FETH before RETH per rxe).
    pub const ORDER: [HeaderKind; 9] = [
        HeaderKind::Deth,
        HeaderKind::Feth,
        HeaderKind::Reth,
        HeaderKind::AtomicEth,
        HeaderKind::Aeth,
        HeaderKind::AtomicAckEth,
        HeaderKind::ImmDt,
        HeaderKind::Ieth,
        HeaderKind::CnpReserved,
    ];

    /// Length in bytes.
    pub const fn size(self) -> usize {
        match self {
            HeaderKind::Deth => 8,
            HeaderKind::Feth => 4,
            HeaderKind::Reth => 16,
            HeaderKind::AtomicEth => 28,
            HeaderKind::Aeth => 4,
            HeaderKind::AtomicAckEth => 8,
            HeaderKind::ImmDt => 4,
            HeaderKind::Ieth => 4,
            HeaderKind::CnpReserved => 16,
        }
    }

    pub(crate) const fn bit(self) -> u16 {
        1 << self as u8
    }
}

/// A set of extension headers.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct Headers(u16);

impl Headers {
    /// No extension header.
    pub const NONE: Headers = Headers(0);

    /// Add a header kind.
    pub const fn with(self, h: HeaderKind) -> Headers {
        Headers(self.0 | h.bit())
    }
    /// Is `h` in the set?
    pub const fn contains(self, h: HeaderKind) -> bool {
        self.0 & h.bit() != 0
    }
    /// Total bytes of the headers in the set.
    pub const fn len(self) -> usize {
        let mut n = 0;
        let mut i = 0;
        while i < HeaderKind::ORDER.len() {
            if self.contains(HeaderKind::ORDER[i]) {
                n += HeaderKind::ORDER[i].size();
            }
            i += 1;
        }
        n
    }
    /// True when the set is empty.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }
    /// The set as bits (`1 << kind as u8` for each kind present).
    pub(crate) const fn bits(self) -> u16 {
        self.0
    }
    /// Offset of `h` from the start of the BTH, if present.
    pub const fn offset(self, h: HeaderKind) -> Option<usize> {
        if !self.contains(h) {
            return None;
        }
        let mut off = crate::bth::HEADER_LEN;
        let mut i = 0;
        while i < HeaderKind::ORDER.len() {
            let k = HeaderKind::ORDER[i];
            if k as u8 == h as u8 {
                return Some(off);
            }
            if self.contains(k) {
                off += k.size();
            }
            i += 1;
        }
        None
    }
}

/// Everything the table knows about an opcode.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct OpcodeInfo {
    /// The opcode byte.
    pub code: u8,
    /// IBTA name, e.g. `RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE`.
    pub name: &'static str,
    /// Transport service.
    pub transport: Transport,
    /// Operation.
    pub operation: Operation,
    /// Position in the message.
    pub position: Position,
    /// Extension headers after the BTH (derived).
    pub headers: Headers,
    /// BTH + extension header bytes (derived).
    pub header_len: usize,
    /// Offset of each extension header from the BTH start, indexed by `HeaderKind as usize`;
    /// 0 = absent (derived; a table so the per-packet path does not recompute it).
    pub offsets: [u8; 9],
    /// Whether packets with this opcode carry a payload (derived).
    pub has_payload: bool,
}

impl OpcodeInfo {
    /// Sent by a requester (as opposed to a responder's response/ack, or a CNP).
    pub const fn is_request(&self) -> bool {
        !matches!(
            self.operation,
            Operation::ReadResponse | Operation::Acknowledge | Operation::AtomicAcknowledge | Operation::Cnp
        )
    }
    /// A response (read response, ACK, atomic ACK): carries an AETH on first/last/only.
    pub const fn is_response(&self) -> bool {
        matches!(self.operation, Operation::ReadResponse | Operation::Acknowledge | Operation::AtomicAcknowledge)
    }
    /// Offset of an extension header from the start of the BTH.
    #[inline]
    pub const fn offset(&self, h: HeaderKind) -> Option<usize> {
        match self.offsets[h as usize] {
            0 => None,
            o => Some(o as usize),
        }
    }
}

/// Derive the extension headers from (transport, operation, position) — IBTA §9.3.
const fn derive_headers(t: Transport, op: Operation, pos: Position) -> Headers {
    let mut h = Headers::NONE;
    if let Transport::Ud = t {
        h = h.with(HeaderKind::Deth);
    }
    match op {
        Operation::Send => {}
        Operation::SendWithImm => {
            if pos.is_end() {
                h = h.with(HeaderKind::ImmDt);
            }
        }
        Operation::SendWithInv => {
            if pos.is_end() {
                h = h.with(HeaderKind::Ieth);
            }
        }
        Operation::Write | Operation::WriteWithImm => {
            if pos.is_start() {
                h = h.with(HeaderKind::Reth);
            }
            if let Operation::WriteWithImm = op {
                if pos.is_end() {
                    h = h.with(HeaderKind::ImmDt);
                }
            }
        }
        Operation::ReadRequest => h = h.with(HeaderKind::Reth),
        // C9-?: READ responses carry an AETH on FIRST, LAST and ONLY, none on MIDDLE.
        Operation::ReadResponse => {
            if !matches!(pos, Position::Middle) {
                h = h.with(HeaderKind::Aeth);
            }
        }
        Operation::Acknowledge => h = h.with(HeaderKind::Aeth),
        Operation::AtomicAcknowledge => h = h.with(HeaderKind::Aeth).with(HeaderKind::AtomicAckEth),
        Operation::CompareSwap | Operation::FetchAdd => h = h.with(HeaderKind::AtomicEth),
        Operation::Flush => h = h.with(HeaderKind::Feth).with(HeaderKind::Reth),
        Operation::AtomicWrite => h = h.with(HeaderKind::Reth),
        Operation::Cnp => h = h.with(HeaderKind::CnpReserved),
    }
    h
}

const fn derive_payload(op: Operation) -> bool {
    matches!(
        op,
        Operation::Send
            | Operation::SendWithImm
            | Operation::SendWithInv
            | Operation::Write
            | Operation::WriteWithImm
            | Operation::ReadResponse
            | Operation::AtomicWrite
    )
}

const fn derive_offsets(h: Headers) -> [u8; 9] {
    let mut out = [0u8; 9];
    let mut i = 0;
    while i < HeaderKind::ORDER.len() {
        if let Some(o) = h.offset(HeaderKind::ORDER[i]) {
            out[HeaderKind::ORDER[i] as usize] = o as u8;
        }
        i += 1;
    }
    out
}

const fn info(code: u8, name: &'static str, t: Transport, op: Operation, pos: Position) -> OpcodeInfo {
    let headers = derive_headers(t, op, pos);
    OpcodeInfo {
        offsets: derive_offsets(headers),
        code,
        name,
        transport: t,
        operation: op,
        position: pos,
        headers,
        header_len: crate::bth::HEADER_LEN + headers.len(),
        has_payload: derive_payload(op),
    }
}

use Operation as O;
use Position as P;
use Transport as T;

/// The declaration: every opcode, once.
pub const OPCODES: &[OpcodeInfo] = &[
    info(0x00, "RC_SEND_FIRST", T::Rc, O::Send, P::First),
    info(0x01, "RC_SEND_MIDDLE", T::Rc, O::Send, P::Middle),
    info(0x02, "RC_SEND_LAST", T::Rc, O::Send, P::Last),
    info(0x03, "RC_SEND_LAST_WITH_IMMEDIATE", T::Rc, O::SendWithImm, P::Last),
    info(0x04, "RC_SEND_ONLY", T::Rc, O::Send, P::Only),
    info(0x05, "RC_SEND_ONLY_WITH_IMMEDIATE", T::Rc, O::SendWithImm, P::Only),
    info(0x06, "RC_RDMA_WRITE_FIRST", T::Rc, O::Write, P::First),
    info(0x07, "RC_RDMA_WRITE_MIDDLE", T::Rc, O::Write, P::Middle),
    info(0x08, "RC_RDMA_WRITE_LAST", T::Rc, O::Write, P::Last),
    info(0x09, "RC_RDMA_WRITE_LAST_WITH_IMMEDIATE", T::Rc, O::WriteWithImm, P::Last),
    info(0x0a, "RC_RDMA_WRITE_ONLY", T::Rc, O::Write, P::Only),
    info(0x0b, "RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", T::Rc, O::WriteWithImm, P::Only),
    info(0x0c, "RC_RDMA_READ_REQUEST", T::Rc, O::ReadRequest, P::Only),
    info(0x0d, "RC_RDMA_READ_RESPONSE_FIRST", T::Rc, O::ReadResponse, P::First),
    info(0x0e, "RC_RDMA_READ_RESPONSE_MIDDLE", T::Rc, O::ReadResponse, P::Middle),
    info(0x0f, "RC_RDMA_READ_RESPONSE_LAST", T::Rc, O::ReadResponse, P::Last),
    info(0x10, "RC_RDMA_READ_RESPONSE_ONLY", T::Rc, O::ReadResponse, P::Only),
    info(0x11, "RC_ACKNOWLEDGE", T::Rc, O::Acknowledge, P::Only),
    info(0x12, "RC_ATOMIC_ACKNOWLEDGE", T::Rc, O::AtomicAcknowledge, P::Only),
    info(0x13, "RC_COMPARE_SWAP", T::Rc, O::CompareSwap, P::Only),
    info(0x14, "RC_FETCH_ADD", T::Rc, O::FetchAdd, P::Only),
    info(0x16, "RC_SEND_LAST_WITH_INVALIDATE", T::Rc, O::SendWithInv, P::Last),
    info(0x17, "RC_SEND_ONLY_WITH_INVALIDATE", T::Rc, O::SendWithInv, P::Only),
    info(0x1c, "RC_FLUSH", T::Rc, O::Flush, P::Only),
    info(0x1d, "RC_ATOMIC_WRITE", T::Rc, O::AtomicWrite, P::Only),
    info(0x20, "UC_SEND_FIRST", T::Uc, O::Send, P::First),
    info(0x21, "UC_SEND_MIDDLE", T::Uc, O::Send, P::Middle),
    info(0x22, "UC_SEND_LAST", T::Uc, O::Send, P::Last),
    info(0x23, "UC_SEND_LAST_WITH_IMMEDIATE", T::Uc, O::SendWithImm, P::Last),
    info(0x24, "UC_SEND_ONLY", T::Uc, O::Send, P::Only),
    info(0x25, "UC_SEND_ONLY_WITH_IMMEDIATE", T::Uc, O::SendWithImm, P::Only),
    info(0x26, "UC_RDMA_WRITE_FIRST", T::Uc, O::Write, P::First),
    info(0x27, "UC_RDMA_WRITE_MIDDLE", T::Uc, O::Write, P::Middle),
    info(0x28, "UC_RDMA_WRITE_LAST", T::Uc, O::Write, P::Last),
    info(0x29, "UC_RDMA_WRITE_LAST_WITH_IMMEDIATE", T::Uc, O::WriteWithImm, P::Last),
    info(0x2a, "UC_RDMA_WRITE_ONLY", T::Uc, O::Write, P::Only),
    info(0x2b, "UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", T::Uc, O::WriteWithImm, P::Only),
    info(0x64, "UD_SEND_ONLY", T::Ud, O::Send, P::Only),
    info(0x65, "UD_SEND_ONLY_WITH_IMMEDIATE", T::Ud, O::SendWithImm, P::Only),
    info(0x81, "CNP", T::Cnp, O::Cnp, P::Only),
];

const fn build_index() -> [u8; 256] {
    let mut idx = [u8::MAX; 256];
    let mut i = 0;
    while i < OPCODES.len() {
        idx[OPCODES[i].code as usize] = i as u8;
        i += 1;
    }
    idx
}

/// opcode byte → index into [`OPCODES`] (`u8::MAX` = not an opcode).
static INDEX: [u8; 256] = build_index();

/// A BTH opcode. Open: any byte is representable; [`Opcode::info`] says whether it is known.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Opcode(pub u8);

macro_rules! opcode_consts {
    ($($name:ident = $v:expr),* $(,)?) => {
        impl Opcode { $( #[allow(missing_docs)] pub const $name: Opcode = Opcode($v); )* }
    };
}

opcode_consts! {
    RC_SEND_FIRST = 0x00, RC_SEND_MIDDLE = 0x01, RC_SEND_LAST = 0x02,
    RC_SEND_LAST_WITH_IMMEDIATE = 0x03, RC_SEND_ONLY = 0x04, RC_SEND_ONLY_WITH_IMMEDIATE = 0x05,
    RC_RDMA_WRITE_FIRST = 0x06, RC_RDMA_WRITE_MIDDLE = 0x07, RC_RDMA_WRITE_LAST = 0x08,
    RC_RDMA_WRITE_LAST_WITH_IMMEDIATE = 0x09, RC_RDMA_WRITE_ONLY = 0x0a,
    RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE = 0x0b, RC_RDMA_READ_REQUEST = 0x0c,
    RC_RDMA_READ_RESPONSE_FIRST = 0x0d, RC_RDMA_READ_RESPONSE_MIDDLE = 0x0e,
    RC_RDMA_READ_RESPONSE_LAST = 0x0f, RC_RDMA_READ_RESPONSE_ONLY = 0x10,
    RC_ACKNOWLEDGE = 0x11, RC_ATOMIC_ACKNOWLEDGE = 0x12, RC_COMPARE_SWAP = 0x13,
    RC_FETCH_ADD = 0x14, RC_SEND_LAST_WITH_INVALIDATE = 0x16, RC_SEND_ONLY_WITH_INVALIDATE = 0x17,
    RC_FLUSH = 0x1c, RC_ATOMIC_WRITE = 0x1d,
    UC_SEND_FIRST = 0x20, UC_SEND_MIDDLE = 0x21, UC_SEND_LAST = 0x22,
    UC_SEND_LAST_WITH_IMMEDIATE = 0x23, UC_SEND_ONLY = 0x24, UC_SEND_ONLY_WITH_IMMEDIATE = 0x25,
    UC_RDMA_WRITE_FIRST = 0x26, UC_RDMA_WRITE_MIDDLE = 0x27, UC_RDMA_WRITE_LAST = 0x28,
    UC_RDMA_WRITE_LAST_WITH_IMMEDIATE = 0x29, UC_RDMA_WRITE_ONLY = 0x2a,
    UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE = 0x2b,
    UD_SEND_ONLY = 0x64, UD_SEND_ONLY_WITH_IMMEDIATE = 0x65,
    CNP = 0x81,
}

impl Opcode {
    /// The table entry, or `None` for a reserved / unsupported opcode.
    #[inline]
    pub fn info(self) -> Option<&'static OpcodeInfo> {
        let i = INDEX[self.0 as usize];
        OPCODES.get(i as usize)
    }
    /// The IBTA name, or `None`.
    pub fn name(self) -> Option<&'static str> {
        self.info().map(|i| i.name)
    }
    /// The RC opcode of a request operation at a position in its message, without a table
    /// search (the requester's per-packet path). `None` for combinations IBTA does not have
    /// (e.g. a READ request FIRST).
    #[inline]
    pub const fn rc_request(op: Operation, pos: Position) -> Option<Opcode> {
        use Operation as O;
        use Position as P;
        let code = match (op, pos) {
            (O::Send, P::First) => 0x00,
            (O::Send, P::Middle) => 0x01,
            (O::Send, P::Last) => 0x02,
            (O::SendWithImm, P::Last) => 0x03,
            (O::Send, P::Only) => 0x04,
            (O::SendWithImm, P::Only) => 0x05,
            (O::Write, P::First) => 0x06,
            (O::Write, P::Middle) => 0x07,
            (O::Write, P::Last) => 0x08,
            (O::WriteWithImm, P::Last) => 0x09,
            (O::Write, P::Only) => 0x0a,
            (O::WriteWithImm, P::Only) => 0x0b,
            (O::ReadRequest, P::Only) => 0x0c,
            (O::CompareSwap, P::Only) => 0x13,
            (O::FetchAdd, P::Only) => 0x14,
            (O::SendWithInv, P::Last) => 0x16,
            (O::SendWithInv, P::Only) => 0x17,
            (O::Flush, P::Only) => 0x1c,
            (O::AtomicWrite, P::Only) => 0x1d,
            _ => return None,
        };
        Some(Opcode(code))
    }

    /// Look up an opcode by transport, operation and position.
    pub fn find(t: Transport, op: Operation, pos: Position) -> Option<Opcode> {
        OPCODES.iter().find(|i| i.transport == t && i.operation == op && i.position == pos).map(|i| Opcode(i.code))
    }
}

impl fmt::Debug for Opcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => write!(f, "{n}"),
            None => write!(f, "Opcode({:#04x})", self.0),
        }
    }
}

impl fmt::Display for Opcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A transcription of IBTA Vol. 1 Table 38 + rxe's `rxe_opcode.c` `.length` column
    /// (BTH + extension headers), typed in independently of the derivation above.
    const IBTA: &[(u8, &str, usize, bool)] = &[
        (0x00, "RC_SEND_FIRST", 12, true),
        (0x01, "RC_SEND_MIDDLE", 12, true),
        (0x02, "RC_SEND_LAST", 12, true),
        (0x03, "RC_SEND_LAST_WITH_IMMEDIATE", 16, true),
        (0x04, "RC_SEND_ONLY", 12, true),
        (0x05, "RC_SEND_ONLY_WITH_IMMEDIATE", 16, true),
        (0x06, "RC_RDMA_WRITE_FIRST", 28, true),
        (0x07, "RC_RDMA_WRITE_MIDDLE", 12, true),
        (0x08, "RC_RDMA_WRITE_LAST", 12, true),
        (0x09, "RC_RDMA_WRITE_LAST_WITH_IMMEDIATE", 16, true),
        (0x0a, "RC_RDMA_WRITE_ONLY", 28, true),
        (0x0b, "RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", 32, true),
        (0x0c, "RC_RDMA_READ_REQUEST", 28, false),
        (0x0d, "RC_RDMA_READ_RESPONSE_FIRST", 16, true),
        (0x0e, "RC_RDMA_READ_RESPONSE_MIDDLE", 12, true),
        (0x0f, "RC_RDMA_READ_RESPONSE_LAST", 16, true),
        (0x10, "RC_RDMA_READ_RESPONSE_ONLY", 16, true),
        (0x11, "RC_ACKNOWLEDGE", 16, false),
        (0x12, "RC_ATOMIC_ACKNOWLEDGE", 24, false),
        (0x13, "RC_COMPARE_SWAP", 40, false),
        (0x14, "RC_FETCH_ADD", 40, false),
        (0x16, "RC_SEND_LAST_WITH_INVALIDATE", 16, true),
        (0x17, "RC_SEND_ONLY_WITH_INVALIDATE", 16, true),
        (0x1c, "RC_FLUSH", 32, false),
        (0x1d, "RC_ATOMIC_WRITE", 28, true),
        (0x20, "UC_SEND_FIRST", 12, true),
        (0x21, "UC_SEND_MIDDLE", 12, true),
        (0x22, "UC_SEND_LAST", 12, true),
        (0x23, "UC_SEND_LAST_WITH_IMMEDIATE", 16, true),
        (0x24, "UC_SEND_ONLY", 12, true),
        (0x25, "UC_SEND_ONLY_WITH_IMMEDIATE", 16, true),
        (0x26, "UC_RDMA_WRITE_FIRST", 28, true),
        (0x27, "UC_RDMA_WRITE_MIDDLE", 12, true),
        (0x28, "UC_RDMA_WRITE_LAST", 12, true),
        (0x29, "UC_RDMA_WRITE_LAST_WITH_IMMEDIATE", 16, true),
        (0x2a, "UC_RDMA_WRITE_ONLY", 28, true),
        (0x2b, "UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", 32, true),
        (0x64, "UD_SEND_ONLY", 20, true),
        (0x65, "UD_SEND_ONLY_WITH_IMMEDIATE", 24, true),
        (0x81, "CNP", 28, false),
    ];

    #[test]
    fn table_matches_ibta_transcription() {
        assert_eq!(OPCODES.len(), IBTA.len());
        for &(code, name, len, payload) in IBTA {
            let i = Opcode(code).info().unwrap_or_else(|| panic!("{code:#x} missing"));
            assert_eq!(i.code, code);
            assert_eq!(i.name, name);
            assert_eq!(i.header_len, len, "{name}");
            assert_eq!(i.has_payload, payload, "{name}");
        }
        // Everything else is unknown.
        let known: Vec<u8> = IBTA.iter().map(|e| e.0).collect();
        for b in 0..=255u8 {
            assert_eq!(Opcode(b).info().is_some(), known.contains(&b), "{b:#x}");
        }
    }

    #[test]
    fn names_are_derived_from_variants() {
        for i in OPCODES {
            assert!(i.name.starts_with(i.transport.name()), "{}", i.name);
            assert_eq!(i.code & 0xe0, i.transport.prefix(), "{}", i.name);
            let n = i.name;
            match i.position {
                Position::First => assert!(n.contains("FIRST"), "{n}"),
                Position::Middle => assert!(n.contains("MIDDLE"), "{n}"),
                Position::Last => assert!(n.contains("LAST"), "{n}"),
                Position::Only => assert!(
                    n.contains("ONLY") || !n.contains("FIRST") && !n.contains("LAST") && !n.contains("MIDDLE"),
                    "{n}"
                ),
            }
            assert_eq!(n.contains("IMMEDIATE"), i.headers.contains(HeaderKind::ImmDt), "{n}");
            assert_eq!(n.contains("INVALIDATE"), i.headers.contains(HeaderKind::Ieth), "{n}");
            assert_eq!(Opcode::find(i.transport, i.operation, i.position), Some(Opcode(i.code)));
            if i.transport == Transport::Rc && i.is_request() {
                assert_eq!(Opcode::rc_request(i.operation, i.position), Some(Opcode(i.code)), "{}", i.name);
            }
        }
    }

    #[test]
    fn offsets_follow_wire_order() {
        let i = Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE.info().unwrap();
        assert_eq!(i.offset(HeaderKind::Reth), Some(12));
        assert_eq!(i.offset(HeaderKind::ImmDt), Some(28));
        assert_eq!(i.offset(HeaderKind::Aeth), None);
        let i = Opcode::RC_ATOMIC_ACKNOWLEDGE.info().unwrap();
        assert_eq!(i.offset(HeaderKind::Aeth), Some(12));
        assert_eq!(i.offset(HeaderKind::AtomicAckEth), Some(16));
        let i = Opcode::RC_FLUSH.info().unwrap();
        assert_eq!(i.offset(HeaderKind::Feth), Some(12));
        assert_eq!(i.offset(HeaderKind::Reth), Some(16));
        let i = Opcode::UD_SEND_ONLY_WITH_IMMEDIATE.info().unwrap();
        assert_eq!(i.offset(HeaderKind::Deth), Some(12));
        assert_eq!(i.offset(HeaderKind::ImmDt), Some(20));
        // Offsets are increasing and contiguous for every opcode.
        for i in OPCODES {
            let mut at = 12;
            for k in HeaderKind::ORDER {
                if let Some(o) = i.offset(k) {
                    assert_eq!(o, at, "{} {:?}", i.name, k);
                    at += k.size();
                }
            }
            assert_eq!(at, i.header_len, "{}", i.name);
        }
    }

    #[test]
    fn start_end_consistency() {
        for i in OPCODES {
            // Only messages that can span packets have FIRST/MIDDLE/LAST forms.
            if matches!(i.position, Position::First | Position::Middle | Position::Last) {
                assert!(i.has_payload, "{}", i.name);
            }
            assert!(i.is_request() || i.is_response() || i.operation == Operation::Cnp);
        }
    }
}
