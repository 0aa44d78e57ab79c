//! # uroce-wire: the RoCEv2 wire format
//!
//! Packet *views* over byte slices and semantic *reprs* for every header a RoCEv2 frame can
//! carry: Ethernet II (with an optional 802.1Q tag), IPv4, IPv6, UDP, and the InfiniBand
//! transport headers BTH, RETH, AETH, AtomicETH, AtomicAckETH, ImmDt, IETH, DETH, FETH, plus
//! the payload, pad and the invariant CRC (ICRC). The complete IBTA opcode table for RC, UC and
//! UD (and CNP, 0x81) is declared once in [`opcode`]; every header offset is derived from it.
//!
//! ## Contract (after smoltcp's `wire`)
//!
//! * **No panic on any input.** Every `parse` function and every `*::new_checked` constructor
//!   validates lengths before any field is read; after a successful `new_checked` (or
//!   `check_len`) no accessor or setter of that view panics. `new_unchecked` exists for the
//!   emit path, where the caller has sized the buffer with `Repr::buffer_len()`; accessors on an
//!   unchecked view over a short buffer *do* panic, so never use it on received bytes.
//! * **No allocation.** The crate is `#![no_std]` without the `std` feature and never allocates.
//! * **Errors say where.** [`Error`] names the layer, the byte offset in the frame and what was
//!   wrong (truncated, bad version/IHL, not UDP/4791, unknown opcode, length or pad mismatch,
//!   ICRC mismatch, ...).
//! * **Views write in place.** Setters exist on views over `AsMut<[u8]>`, so a transmit path can
//!   build a frame directly in a TX buffer (an AF_XDP UMEM frame), and [`FrameRepr::emit`] takes
//!   the payload as a closure so the payload is written exactly once.
//!
//! ## Layout
//!
//! | module | what |
//! |---|---|
//! | [`ethernet`], [`ipv4`], [`ipv6`], [`udp`] | the encapsulation (RoCEv2 = UDP dport 4791) |
//! | [`bth`], [`ext`], [`aeth`] | InfiniBand transport headers |
//! | [`opcode`] | the opcode table: extension headers, payload, first/middle/last/only |
//! | [`icrc`] | the invariant CRC exactly as Linux rxe computes it |
//! | [`psn`] | 24-bit PSN/MSN/QPN arithmetic |
//! | [`packet`] | whole-frame parse ([`parse_frame`], [`parse_ip`]) and emit ([`FrameRepr`]) |
//! | [`cnp`] | Congestion Notification Packets in the layout ConnectX emits |
//! | [`mad`], [`cm`] | management datagrams on QP1 and the connection manager's messages (and RDMA-CM's IP header) |
//! | [`pfc`] | 802.1Qbb priority flow control frames, and the priority a frame travels in |
//! | [`copy`] | bulk copies of received payload into memory regions |
//! | [`template`] | per-flow header templates: the transmit path's copy-and-patch emit |
#![cfg_attr(not(feature = "std"), no_std)]
// No unsafe code, except the ICRC's PCLMULQDQ kernels (`icrc_clmul.rs`: CPU-feature intrinsics,
// no memory-safety precondition; every access is through a bounds-checked array or subslice),
// and the string-move copy in `copy.rs` (two slices' pointers and length).
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod aeth;
pub mod bth;
pub mod cm;
pub mod cnp;
pub mod copy;
mod error;
pub mod ethernet;
pub mod ext;
mod field;
pub mod icrc;
pub mod ip;
pub mod ipv4;
pub mod ipv6;
pub mod mad;
pub mod opcode;
pub mod packet;
pub mod pfc;
pub mod pretty;
pub mod psn;
pub mod template;
pub mod udp;

pub use aeth::{CreditCount, NakCode, RnrTimer, Syndrome};
pub use bth::{BthHeader, BthRepr};
pub use error::{Error, Layer, NotRoce};
pub use ethernet::{EtherType, EthernetAddress, EthernetFrame, EthernetRepr, VlanTag};
pub use ext::{AethRepr, AtomicAckEthRepr, AtomicEthRepr, DethRepr, ExtHeaders, FethRepr, RethRepr};
pub use ip::{Ecn, IpRepr};
pub use ipv4::{Ipv4Packet, Ipv4Repr};
pub use ipv6::{Ipv6Packet, Ipv6Repr};
pub use opcode::{HeaderKind, Headers, Opcode, OpcodeInfo, Operation, Position, Transport};
pub use packet::{
    emit_frame, parse_bare_ipv4, parse_frame, parse_frame_verified, parse_ip, seal_ip, BareFrame, FrameRepr, Offsets,
    ParsedFrame, RoceRepr, UdpChecksum,
};
pub use psn::{Msn, Psn, Qpn};
pub use template::{HeaderTemplate, PacketFields, PayloadWriter};
pub use udp::{UdpPacket, UdpRepr, ROCE_V2_PORT};

/// Bytes of the invariant CRC that ends every RoCEv2 UDP payload.
pub const ICRC_LEN: usize = 4;
