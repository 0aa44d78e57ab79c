//! The crate's one error type. Every variant says which layer failed and, for received bytes,
//! the byte offset of that layer's header in the frame.

use core::fmt;

/// The protocol layer an [`Error`] refers to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[allow(missing_docs)]
pub enum Layer {
    Ethernet,
    Vlan,
    Ipv4,
    Ipv6,
    Udp,
    Bth,
    Deth,
    Reth,
    Feth,
    AtomicEth,
    Aeth,
    AtomicAckEth,
    ImmDt,
    Ieth,
    /// The 16 reserved bytes that follow the BTH of a CNP.
    CnpReserved,
    /// An 802.3 MAC control frame (PAUSE, 802.1Qbb PFC).
    MacControl,
    /// A management datagram's common header (UD payload to QP1).
    Mad,
    /// A communication management message (MAD class 0x07).
    Cm,
    /// RDMA-CM's IP header in a CM message's private data (IBTA Annex A11).
    CmIp,
    Payload,
    Icrc,
}

impl fmt::Display for Layer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            Layer::Ethernet => "Ethernet",
            Layer::Vlan => "802.1Q",
            Layer::Ipv4 => "IPv4",
            Layer::Ipv6 => "IPv6",
            Layer::Udp => "UDP",
            Layer::Bth => "BTH",
            Layer::Deth => "DETH",
            Layer::Reth => "RETH",
            Layer::Feth => "FETH",
            Layer::AtomicEth => "AtomicETH",
            Layer::Aeth => "AETH",
            Layer::AtomicAckEth => "AtomicAckETH",
            Layer::ImmDt => "ImmDt",
            Layer::Ieth => "IETH",
            Layer::CnpReserved => "CNP reserved",
            Layer::MacControl => "MAC control",
            Layer::Mad => "MAD",
            Layer::Cm => "CM",
            Layer::CmIp => "RDMA-CM IP header",
            Layer::Payload => "payload",
            Layer::Icrc => "ICRC",
        };
        f.write_str(s)
    }
}

/// Why a well-formed frame is not a RoCEv2 frame at all (as opposed to a broken one).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NotRoce {
    /// The EtherType (after any 802.1Q tag) is neither IPv4 nor IPv6.
    EtherType(u16),
    /// The IP protocol / next header is not UDP.
    IpProtocol(u8),
    /// The UDP destination port is not 4791.
    UdpPort(u16),
}

/// A parse or emit failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Error {
    /// The buffer ends before the header (or the length a header declares) does.
    Truncated {
        /// Layer being decoded.
        layer: Layer,
        /// Offset of that layer in the frame.
        offset: usize,
        /// Bytes the layer needs from `offset`.
        need: usize,
        /// Bytes available from `offset`.
        have: usize,
    },
    /// A field holds a value the layer cannot carry (IP version, IHL, TVer, ...).
    BadField {
        /// Layer being decoded.
        layer: Layer,
        /// Offset of that layer in the frame.
        offset: usize,
        /// Field name, as the spec names it.
        field: &'static str,
        /// The value found.
        value: u32,
    },
    /// Valid, but something a RoCEv2 packet never uses (IPv4 options, fragments,
    /// IPv6 extension headers).
    Unsupported {
        /// Layer being decoded.
        layer: Layer,
        /// Offset of that layer in the frame.
        offset: usize,
        /// What was found.
        what: &'static str,
    },
    /// Well-formed, but not RoCEv2 (not IP, not UDP, not port 4791).
    NotRoce {
        /// Offset of the layer that decided.
        offset: usize,
        /// Why.
        why: NotRoce,
    },
    /// A BTH opcode with no entry in the opcode table (reserved or an unsupported transport).
    UnknownOpcode {
        /// Offset of the BTH.
        offset: usize,
        /// The opcode byte.
        opcode: u8,
    },
    /// A length field disagrees with the bytes present (IP total length, UDP length,
    /// a payload shorter than the pad, payload on an opcode that carries none, ...).
    Length {
        /// Layer whose length field is wrong.
        layer: Layer,
        /// Offset of that layer in the frame.
        offset: usize,
        /// The field.
        field: &'static str,
        /// The value the field declares.
        declared: usize,
        /// The value the bytes imply.
        actual: usize,
    },
    /// The ICRC stored in the frame is not the one computed over it.
    IcrcMismatch {
        /// Offset of the ICRC in the frame.
        offset: usize,
        /// ICRC computed over the frame, as a little-endian u32 of the wire bytes.
        computed: u32,
        /// ICRC found in the frame, same convention.
        found: u32,
    },
    /// Emit: the output buffer is smaller than the frame.
    BufferTooSmall {
        /// Bytes the frame needs.
        need: usize,
        /// Bytes the buffer has.
        have: usize,
    },
    /// Emit: the repr is inconsistent (e.g. the extension headers do not match the opcode).
    InvalidRepr {
        /// What is inconsistent.
        what: &'static str,
    },
}

impl Error {
    /// True when the frame is simply not RoCEv2 (not an error in the frame itself).
    pub fn is_not_roce(&self) -> bool {
        matches!(self, Error::NotRoce { .. })
    }

    /// The layer the error is about.
    pub fn layer(&self) -> Option<Layer> {
        match *self {
            Error::Truncated { layer, .. }
            | Error::BadField { layer, .. }
            | Error::Unsupported { layer, .. }
            | Error::Length { layer, .. } => Some(layer),
            Error::NotRoce { why, .. } => Some(match why {
                NotRoce::EtherType(_) => Layer::Ethernet,
                NotRoce::IpProtocol(_) => Layer::Ipv4,
                NotRoce::UdpPort(_) => Layer::Udp,
            }),
            Error::UnknownOpcode { .. } => Some(Layer::Bth),
            Error::IcrcMismatch { .. } => Some(Layer::Icrc),
            Error::BufferTooSmall { .. } | Error::InvalidRepr { .. } => None,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Error::Truncated { layer, offset, need, have } => {
                write!(f, "{layer} at offset {offset}: truncated, need {need} bytes, have {have}")
            }
            Error::BadField { layer, offset, field, value } => {
                write!(f, "{layer} at offset {offset}: bad {field} {value:#x}")
            }
            Error::Unsupported { layer, offset, what } => {
                write!(f, "{layer} at offset {offset}: unsupported {what}")
            }
            Error::NotRoce { offset, why } => match why {
                NotRoce::EtherType(t) => write!(f, "not RoCEv2: EtherType {t:#06x} at offset {offset}"),
                NotRoce::IpProtocol(p) => write!(f, "not RoCEv2: IP protocol {p} at offset {offset}"),
                NotRoce::UdpPort(p) => write!(f, "not RoCEv2: UDP destination port {p} at offset {offset}"),
            },
            Error::UnknownOpcode { offset, opcode } => {
                write!(f, "BTH at offset {offset}: unknown or reserved opcode {opcode:#04x}")
            }
            Error::Length { layer, offset, field, declared, actual } => {
                write!(f, "{layer} at offset {offset}: {field} says {declared}, bytes say {actual}")
            }
            Error::IcrcMismatch { offset, computed, found } => write!(
                f,
                "ICRC at offset {offset}: computed {:#010x}, found {:#010x} (wire byte order)",
                u32::from_be_bytes(computed.to_le_bytes()),
                u32::from_be_bytes(found.to_le_bytes())
            ),
            Error::BufferTooSmall { need, have } => {
                write!(f, "emit: buffer too small, need {need} bytes, have {have}")
            }
            Error::InvalidRepr { what } => write!(f, "emit: invalid repr: {what}"),
        }
    }
}

impl core::error::Error for Error {}

/// Length check helper: `Ok` when `have >= need`, else `Error::Truncated`.
#[inline]
pub(crate) fn need(layer: Layer, offset: usize, need: usize, have: usize) -> Result<(), Error> {
    if have < need {
        Err(Error::Truncated { layer, offset, need, have })
    } else {
        Ok(())
    }
}
