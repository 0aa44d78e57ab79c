//! Whole RoCEv2 packets: parse a frame into reprs (one pass over the headers, no copy) and
//! emit reprs into a buffer (headers in place, the payload through a closure, one ICRC pass).
//!
//! ```text
//! | Ethernet [802.1Q] | IPv4 / IPv6 | UDP (dport 4791) | BTH | ext headers | payload | pad | ICRC |
//!                     ^ l3          ^ udp              ^ bth               ^ payload       ^ icrc
//! ```

use crate::bth::{BthHeader, BthRepr};
use crate::error::{need, Error, Layer, NotRoce};
use crate::ethernet::{EtherType, EthernetFrame, EthernetRepr};
use crate::ext::ExtHeaders;
use crate::ip::IpRepr;
use crate::ipv4::{Ipv4Packet, Ipv4Repr, PROTOCOL_UDP};
use crate::ipv6::{Ipv6Packet, Ipv6Repr};
use crate::opcode::OpcodeInfo;
use crate::udp::{UdpPacket, UdpRepr, ROCE_V2_PORT};
use crate::{icrc, ICRC_LEN};

/// The transport part of a RoCEv2 packet: BTH, extension headers and payload length.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct RoceRepr {
    /// The BTH. Its `pad_count` must equal `(-payload_len) & 3` on emit.
    pub bth: BthRepr,
    /// Extension headers; exactly those the opcode requires.
    pub ext: ExtHeaders,
    /// Payload bytes, pad excluded.
    pub payload_len: usize,
}

/// Pad bytes for a payload of `len` bytes (BTH PadCnt).
pub const fn pad_for(len: usize) -> u8 {
    (len.wrapping_neg() & 3) as u8
}

impl RoceRepr {
    /// The opcode's table entry, if the opcode is known.
    pub fn info(&self) -> Option<&'static OpcodeInfo> {
        self.bth.opcode.info()
    }

    /// Bytes from the BTH to the end of the ICRC (the UDP payload length).
    pub fn buffer_len(&self) -> usize {
        let hdr = self.info().map_or(crate::bth::HEADER_LEN, |i| i.header_len);
        hdr + self.payload_len + self.bth.pad_count as usize + ICRC_LEN
    }

    /// Parse a UDP payload (BTH .. ICRC). `off` is the BTH's offset in the frame, for errors.
    /// Returns the repr and the payload's range within `b`.
    #[inline(always)]
    pub fn parse(b: &[u8], off: usize) -> Result<(RoceRepr, core::ops::Range<usize>), Error> {
        let bth_view = BthHeader::new_checked(b).map_err(|_| Error::Truncated {
            layer: Layer::Bth,
            offset: off,
            need: crate::bth::HEADER_LEN,
            have: b.len(),
        })?;
        let bth = BthRepr::parse(&bth_view, off)?;
        let info = bth.opcode.info().ok_or(Error::UnknownOpcode { offset: off, opcode: bth.opcode.0 })?;
        let hl = info.header_len;
        need(Layer::Bth, off, hl + ICRC_LEN, b.len()).map_err(|_| {
            // Name the first extension header that does not fit.
            let mut layer = Layer::Icrc;
            for k in crate::opcode::HeaderKind::ORDER {
                if let Some(o) = info.offset(k) {
                    if o + k.size() > b.len() {
                        layer = ext_layer(k);
                        break;
                    }
                }
            }
            Error::Truncated { layer, offset: off, need: hl + ICRC_LEN, have: b.len() }
        })?;
        let ext = ExtHeaders::parse(info, &b[crate::bth::HEADER_LEN..hl]);
        let payload_len = payload_len(info, bth.pad_count, b.len() - hl - ICRC_LEN, off + hl)?;
        Ok((RoceRepr { bth, ext, payload_len }, hl..hl + payload_len))
    }

    /// Check the repr is emittable: known opcode, matching extension headers, consistent pad.
    pub fn check(&self) -> Result<&'static OpcodeInfo, Error> {
        let info = self.info().ok_or(Error::InvalidRepr { what: "unknown opcode" })?;
        self.ext.check(info)?;
        if !info.has_payload && self.payload_len != 0 {
            return Err(Error::InvalidRepr { what: "payload on an opcode that carries none" });
        }
        if self.bth.pad_count != pad_for(self.payload_len) {
            return Err(Error::InvalidRepr { what: "PadCnt does not match the payload length" });
        }
        Ok(info)
    }

    /// Write BTH, extension headers, payload (through `fill`) and zero pad into
    /// `b[..buffer_len() - 4]`; the ICRC is left to the caller (it covers the IP/UDP headers).
    pub fn emit(&self, b: &mut [u8], fill: impl FnOnce(&mut [u8])) -> Result<(), Error> {
        let info = self.check()?;
        let len = self.buffer_len();
        if b.len() < len - ICRC_LEN {
            return Err(Error::BufferTooSmall { need: len - ICRC_LEN, have: b.len() });
        }
        let hl = info.header_len;
        self.bth.emit(&mut BthHeader::new_unchecked(&mut b[..crate::bth::HEADER_LEN]));
        self.ext.emit(info, &mut b[crate::bth::HEADER_LEN..hl]);
        fill(&mut b[hl..hl + self.payload_len]);
        b[hl + self.payload_len..len - ICRC_LEN].fill(0);
        Ok(())
    }
}

fn ext_layer(k: crate::opcode::HeaderKind) -> Layer {
    use crate::opcode::HeaderKind as K;
    match k {
        K::Deth => Layer::Deth,
        K::Feth => Layer::Feth,
        K::Reth => Layer::Reth,
        K::AtomicEth => Layer::AtomicEth,
        K::Aeth => Layer::Aeth,
        K::AtomicAckEth => Layer::AtomicAckEth,
        K::ImmDt => Layer::ImmDt,
        K::Ieth => Layer::Ieth,
        K::CnpReserved => Layer::CnpReserved,
    }
}

/// Byte offsets of each layer within a parsed frame.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct Offsets {
    /// IP header.
    pub l3: usize,
    /// UDP header.
    pub udp: usize,
    /// BTH.
    pub bth: usize,
    /// Payload.
    pub payload: usize,
    /// ICRC.
    pub icrc: usize,
    /// One past the ICRC (the end of the IP packet; Ethernet padding may follow).
    pub end: usize,
}

/// A decoded RoCEv2 frame, borrowing the bytes it came from.
#[derive(Clone, Copy, Debug)]
pub struct ParsedFrame<'a> {
    /// The Ethernet header, when parsed from a frame (`None` from [`parse_ip`]).
    pub eth: Option<EthernetRepr>,
    /// IP layer.
    pub ip: IpRepr,
    /// UDP layer.
    pub udp: UdpRepr,
    /// RoCE transport layer.
    pub roce: RoceRepr,
    /// Where each layer starts.
    pub offsets: Offsets,
    bytes: &'a [u8],
}

impl<'a> ParsedFrame<'a> {
    /// The payload (pad excluded).
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        &self.bytes[self.offsets.payload..self.offsets.payload + self.roce.payload_len]
    }
    /// The bytes the frame was parsed from.
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }
    /// The ICRC stored in the frame (little-endian u32 of the wire bytes).
    pub fn icrc(&self) -> u32 {
        let s = &self.bytes[self.offsets.icrc..self.offsets.end];
        u32::from_le_bytes([s[0], s[1], s[2], s[3]])
    }
    /// Recompute and compare the ICRC.
    #[inline]
    pub fn check_icrc(&self) -> Result<(), Error> {
        icrc::verify(&self.bytes[self.offsets.l3..self.offsets.end], self.offsets.icrc)
    }
    /// [`ParsedFrame::check_icrc`], and meanwhile bring the cache lines of `dst` (where the
    /// payload is about to be copied) into the cache ([`icrc::compute_prefetching`]).
    #[inline]
    pub fn check_icrc_prefetching(&self, dst: &[u8]) -> Result<(), Error> {
        icrc::verify_prefetching(&self.bytes[self.offsets.l3..self.offsets.end], self.offsets.icrc, dst)
    }
    /// The full frame repr (for an Ethernet frame).
    pub fn repr(&self) -> Option<FrameRepr> {
        self.eth.map(|eth| FrameRepr { eth, ip: self.ip, udp: self.udp, roce: self.roce })
    }
}

/// Parse an Ethernet frame carrying RoCEv2. Checks every length, the IPv4 header checksum,
/// the UDP port and the opcode; does not check the ICRC (see [`ParsedFrame::check_icrc`]).
/// Trailing bytes after the IP packet (Ethernet padding) are ignored.
#[inline(always)]
pub fn parse_frame(frame: &[u8]) -> Result<ParsedFrame<'_>, Error> {
    match parse_common_ipv4(frame) {
        Some(p) => Ok(p),
        None => parse_general(frame),
    }
}

/// [`parse_frame`] without its common-case shortcut, for differential tests and fuzzing: the
/// two must agree on every input.
#[doc(hidden)]
pub fn parse_frame_general(frame: &[u8]) -> Result<ParsedFrame<'_>, Error> {
    parse_general(frame)
}

impl ParsedFrame<'_> {
    /// Field-by-field equality with another parse of the same bytes (for differential tests).
    #[doc(hidden)]
    pub fn same_as(&self, other: &ParsedFrame<'_>) -> bool {
        self.eth == other.eth
            && self.ip == other.ip
            && self.udp == other.udp
            && self.roce == other.roce
            && self.offsets == other.offsets
            && core::ptr::eq(self.bytes, other.bytes)
    }
}

/// [`parse_frame`] layer by layer: every shape, every error.
#[inline(always)]
fn parse_general(frame: &[u8]) -> Result<ParsedFrame<'_>, Error> {
    let eth = EthernetFrame::new_checked(frame)?;
    let repr = EthernetRepr::parse(&eth);
    let l3 = eth.header_len();
    let mut p = parse_at(frame, l3, repr.ethertype)?;
    p.eth = Some(repr);
    Ok(p)
}

/// [`parse_frame`] for the frames a RoCEv2 port receives almost always: untagged Ethernet,
/// IPv4 without options or fragmentation, UDP to 4791 with consistent lengths. The headers are
/// read from one fixed-size array instead of layer by layer; anything else (or anything wrong)
/// returns `None` and the general path parses the frame and names the error. The result is
/// exactly what the general path returns (a property test holds the two to that).
#[inline(always)]
fn parse_common_ipv4(frame: &[u8]) -> Option<ParsedFrame<'_>> {
    const L3: usize = crate::ethernet::HEADER_LEN;
    const UDP: usize = L3 + crate::ipv4::HEADER_LEN;
    const BTH: usize = UDP + crate::udp::HEADER_LEN;
    let (h, total) = common_ipv4_prefix(frame)?;
    let ip: &[u8; 20] = h[L3..UDP].try_into().ok()?;
    let flags_frag = u16::from_be_bytes([ip[6], ip[7]]);
    let udp = &h[UDP..BTH];
    let end = L3 + total;
    let (roce, payload) = RoceRepr::parse(frame.get(BTH..end)?, BTH).ok()?;
    let mac = |o: usize| crate::ethernet::EthernetAddress([h[o], h[o + 1], h[o + 2], h[o + 3], h[o + 4], h[o + 5]]);
    Some(ParsedFrame {
        eth: Some(EthernetRepr { dst_addr: mac(0), src_addr: mac(6), vlan: None, ethertype: EtherType::IPV4 }),
        ip: IpRepr::V4(Ipv4Repr {
            src_addr: core::net::Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15]),
            dst_addr: core::net::Ipv4Addr::new(ip[16], ip[17], ip[18], ip[19]),
            dscp: ip[1] >> 2,
            ecn: crate::Ecn::from_bits(ip[1]),
            ident: u16::from_be_bytes([ip[4], ip[5]]),
            dont_frag: flags_frag & 0x4000 != 0,
            ttl: ip[8],
            protocol: PROTOCOL_UDP,
            payload_len: total - 20,
        }),
        udp: UdpRepr { src_port: u16::from_be_bytes([udp[0], udp[1]]), dst_port: ROCE_V2_PORT },
        roce,
        offsets: Offsets { l3: L3, udp: UDP, bth: BTH, payload: BTH + payload.start, icrc: end - ICRC_LEN, end },
        bytes: frame,
    })
}

/// The payload length of a packet whose `rest` bytes between its headers and its ICRC are
/// payload and pad, PadCnt `pad`, the headers ending at frame offset `at` (for errors): the
/// rules both [`RoceRepr::parse`] and [`parse_bare_ipv4`] apply.
#[inline(always)]
fn payload_len(info: &OpcodeInfo, pad: u8, rest: usize, at: usize) -> Result<usize, Error> {
    let pad = pad as usize;
    if !info.has_payload && rest != 0 {
        return Err(Error::Length {
            layer: Layer::Payload,
            offset: at,
            field: "payload (opcode carries none)",
            declared: 0,
            actual: rest,
        });
    }
    // Payload and pad fill whole 4-byte words (IBTA §9.3: PadCnt pads the payload "to a
    // multiple of 4 bytes"); with that, PadCnt always equals `pad_for(payload_len)`.
    if !rest.is_multiple_of(4) {
        return Err(Error::Length {
            layer: Layer::Payload,
            offset: at,
            field: "payload + pad (not a multiple of 4)",
            declared: rest,
            actual: rest - rest % 4,
        });
    }
    if pad > rest {
        return Err(Error::Length { layer: Layer::Payload, offset: at, field: "PadCnt", declared: pad, actual: rest });
    }
    Ok(rest - pad)
}

/// The IPv4 and UDP checks of the common-case parsers ([`parse_common_ipv4`],
/// [`parse_bare_ipv4`]): untagged Ethernet, IPv4 without options or fragmentation, the header
/// checksum right, UDP to 4791 with a length that agrees with the IP length, room for UDP + BTH
/// + ICRC, all inside the frame. Returns the headers up to the BTH and the IP total length.
#[inline(always)]
fn common_ipv4_prefix(frame: &[u8]) -> Option<(&[u8; 42], usize)> {
    const L3: usize = crate::ethernet::HEADER_LEN;
    const UDP: usize = L3 + crate::ipv4::HEADER_LEN;
    let h = frame.first_chunk::<42>()?;
    // EtherType IPv4 (untagged), version 4, IHL 5.
    if h[12..15] != [0x08, 0x00, 0x45] {
        return None;
    }
    let ip: &[u8; 20] = h[L3..UDP].try_into().ok()?;
    let total = u16::from_be_bytes([ip[2], ip[3]]) as usize;
    let flags_frag = u16::from_be_bytes([ip[6], ip[7]]);
    // Not a fragment, UDP, room for UDP + BTH + ICRC, inside the frame, checksum right.
    if flags_frag & 0x3fff != 0 || ip[9] != PROTOCOL_UDP || total < 20 + 8 + 12 + ICRC_LEN || L3 + total > frame.len() {
        return None;
    }
    if !cfg!(fuzzing) && crate::ipv4::internet_checksum(ip) != 0 {
        return None;
    }
    let udp = &h[UDP..];
    let udp_len = u16::from_be_bytes([udp[4], udp[5]]) as usize;
    if u16::from_be_bytes([udp[2], udp[3]]) != ROCE_V2_PORT || udp_len != total - 20 {
        return None;
    }
    Some((h, total))
}

/// A RoCEv2 packet with nothing between its BTH and its payload but, at most, a RETH, as a
/// receive fast path wants it: the addresses, the BTH, the RETH, the packet and the payload,
/// without the reprs of a [`ParsedFrame`]. [`parse_bare_ipv4`] returns one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BareFrame<'a> {
    /// Ethernet source address.
    pub src_mac: crate::EthernetAddress,
    /// UDP source port.
    pub src_port: u16,
    /// IPv4 source address.
    pub src: core::net::Ipv4Addr,
    /// IPv4 destination address.
    pub dst: core::net::Ipv4Addr,
    /// The BTH.
    pub bth: BthRepr,
    /// The RETH, for the opcodes that carry one (RDMA WRITE FIRST and ONLY).
    pub reth: Option<crate::ext::RethRepr>,
    /// The payload (pad excluded).
    pub payload: &'a [u8],
    /// The IP packet, IP header to ICRC (its four bytes included).
    l3: &'a [u8],
}

impl BareFrame<'_> {
    /// The IPv4 header's ECN field.
    #[inline]
    pub fn ecn(&self) -> crate::Ecn {
        crate::Ecn::from_bits(self.l3.get(1).copied().unwrap_or(0))
    }

    /// Check the ICRC, bringing `dst`'s cache lines in meanwhile
    /// ([`ParsedFrame::check_icrc_prefetching`]).
    #[inline]
    pub fn check_icrc_prefetching(&self, dst: &[u8]) -> Result<(), Error> {
        icrc::verify_prefetching(self.l3, crate::ethernet::HEADER_LEN + self.l3.len() - ICRC_LEN, dst)
    }
}

/// [`parse_frame`] for the packets a receiver handles most, reduced to what it acts on: an
/// untagged IPv4 frame (the checks of [`parse_frame`]'s common path) whose opcode carries a
/// payload and either no extension header (SEND and RDMA WRITE MIDDLE and LAST, SEND ONLY, READ
/// response MIDDLE, ...) or a RETH alone (RDMA WRITE FIRST and ONLY). `None` for anything else,
/// including every frame [`parse_frame`] refuses; when it returns a frame, [`parse_frame`]
/// returns the same fields (a property test holds the two to that).
#[inline]
pub fn parse_bare_ipv4(frame: &[u8]) -> Option<BareFrame<'_>> {
    const L3: usize = crate::ethernet::HEADER_LEN;
    const BTH: usize = L3 + crate::ipv4::HEADER_LEN + crate::udp::HEADER_LEN;
    let (h, total) = common_ipv4_prefix(frame)?;
    let l3 = frame.get(L3..L3 + total)?;
    let b = l3.get(BTH - L3..)?;
    let bth = BthRepr::parse(&BthHeader::new_checked(b).ok()?, BTH).ok()?;
    let info = bth.opcode.info()?;
    let reth = crate::opcode::Headers::NONE.with(crate::opcode::HeaderKind::Reth);
    if !(info.headers.is_empty() || info.headers == reth) || !info.has_payload {
        return None;
    }
    let hl = info.header_len;
    let rest = b.len().checked_sub(hl + ICRC_LEN)?;
    let n = payload_len(info, bth.pad_count, rest, BTH + hl).ok()?;
    let reth = (hl > crate::bth::HEADER_LEN).then(|| crate::ext::RethRepr::read(&b[crate::bth::HEADER_LEN..hl]));
    let ip = &h[L3..L3 + 20];
    let mac = &h[6..12];
    Some(BareFrame {
        src_mac: crate::EthernetAddress([mac[0], mac[1], mac[2], mac[3], mac[4], mac[5]]),
        src_port: u16::from_be_bytes([h[L3 + 20], h[L3 + 21]]),
        src: core::net::Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15]),
        dst: core::net::Ipv4Addr::new(ip[16], ip[17], ip[18], ip[19]),
        bth,
        reth,
        payload: b.get(hl..hl + n)?,
        l3,
    })
}

/// [`parse_frame`], then [`ParsedFrame::check_icrc`]. An ICRC mismatch is
/// `Error::IcrcMismatch`. The ICRC check is skipped in fuzzing builds (`cfg(fuzzing)`), where it
/// would stop the fuzzer from reaching anything behind it.
#[inline(always)]
pub fn parse_frame_verified(frame: &[u8]) -> Result<ParsedFrame<'_>, Error> {
    let p = parse_frame(frame)?;
    if !cfg!(fuzzing) {
        p.check_icrc()?;
    }
    Ok(p)
}

/// Parse an IP packet (IPv4 or IPv6, by its version nibble) carrying RoCEv2.
pub fn parse_ip(packet: &[u8]) -> Result<ParsedFrame<'_>, Error> {
    need(Layer::Ipv4, 0, 1, packet.len())?;
    let t = match packet[0] >> 4 {
        4 => EtherType::IPV4,
        6 => EtherType::IPV6,
        v => return Err(Error::BadField { layer: Layer::Ipv4, offset: 0, field: "version", value: v as u32 }),
    };
    parse_at(packet, 0, t)
}

#[inline(always)]
fn parse_at(frame: &[u8], l3: usize, ethertype: EtherType) -> Result<ParsedFrame<'_>, Error> {
    let (ip, ip_hl, ip_payload_len) = match ethertype {
        EtherType::IPV4 => {
            let p = Ipv4Packet::new_unchecked(&frame[l3..]);
            p.check_len_at(l3)?;
            let r = Ipv4Repr::parse(&p, l3)?;
            if r.protocol != PROTOCOL_UDP {
                return Err(Error::NotRoce { offset: l3, why: NotRoce::IpProtocol(r.protocol) });
            }
            (IpRepr::V4(r), crate::ipv4::HEADER_LEN, r.payload_len)
        }
        EtherType::IPV6 => {
            let p = Ipv6Packet::new_unchecked(&frame[l3..]);
            p.check_len_at(l3)?;
            let r = Ipv6Repr::parse(&p);
            if r.next_header != PROTOCOL_UDP {
                return Err(Error::NotRoce { offset: l3, why: NotRoce::IpProtocol(r.next_header) });
            }
            (IpRepr::V6(r), crate::ipv6::HEADER_LEN, r.payload_len)
        }
        other => return Err(Error::NotRoce { offset: l3 - 2, why: NotRoce::EtherType(other.0) }),
    };
    let udp_off = l3 + ip_hl;
    let end = udp_off + ip_payload_len; // validated against the buffer by check_len_at
    let udp_bytes = &frame[udp_off..end];
    let udp_view = UdpPacket::new_unchecked(udp_bytes);
    udp_view.check_len_at(udp_off)?;
    let udp = UdpRepr::parse(&udp_view);
    if udp.dst_port != ROCE_V2_PORT {
        return Err(Error::NotRoce { offset: udp_off, why: NotRoce::UdpPort(udp.dst_port) });
    }
    if udp_view.len() as usize != ip_payload_len {
        return Err(Error::Length {
            layer: Layer::Udp,
            offset: udp_off,
            field: "length",
            declared: udp_view.len() as usize,
            actual: ip_payload_len,
        });
    }
    let bth_off = udp_off + crate::udp::HEADER_LEN;
    let (roce, payload) = RoceRepr::parse(&frame[bth_off..end], bth_off)?;
    Ok(ParsedFrame {
        eth: None,
        ip,
        udp,
        roce,
        offsets: Offsets {
            l3,
            udp: udp_off,
            bth: bth_off,
            payload: bth_off + payload.start,
            icrc: end - ICRC_LEN,
            end,
        },
        bytes: frame,
    })
}

/// How to fill the UDP checksum on emit.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub enum UdpChecksum {
    /// Write 0, as Linux rxe and ConnectX do (IPv4: "no checksum"; IPv6: allowed for tunnels,
    /// RFC 6935, and accepted by rxe's UDP tunnel socket).
    #[default]
    Zero,
    /// Compute it over the pseudo-header and the datagram (a second pass over the payload).
    Compute,
}

/// A whole RoCEv2 Ethernet frame.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct FrameRepr {
    /// Ethernet header. Its EtherType is overwritten to match `ip` on emit.
    pub eth: EthernetRepr,
    /// IP header. Its payload length is derived on emit.
    pub ip: IpRepr,
    /// UDP header.
    pub udp: UdpRepr,
    /// Transport headers and payload length.
    pub roce: RoceRepr,
}

impl FrameRepr {
    /// Frame length (no FCS).
    pub fn buffer_len(&self) -> usize {
        self.eth.header_len() + self.ip_len()
    }

    /// Length from the IP header to the end of the ICRC.
    pub fn ip_len(&self) -> usize {
        self.ip.header_len() + crate::udp::HEADER_LEN + self.roce.buffer_len()
    }

    /// Set the IP payload length (and EtherType) from the rest of the repr, as emit does.
    pub fn fixup(&mut self) {
        let udp_len = crate::udp::HEADER_LEN + self.roce.buffer_len();
        self.ip.set_payload_len(udp_len);
        self.eth.ethertype = match self.ip {
            IpRepr::V4(_) => EtherType::IPV4,
            IpRepr::V6(_) => EtherType::IPV6,
        };
    }

    /// Emit the whole frame into `buf`: headers, payload (written by `fill` into the payload
    /// slice), pad, ICRC and (optionally) the UDP checksum. Returns the frame length.
    pub fn emit(&self, buf: &mut [u8], csum: UdpChecksum, fill: impl FnOnce(&mut [u8])) -> Result<usize, Error> {
        emit_frame(&self.eth, &self.ip, &self.udp, &self.roce, buf, csum, fill)
    }

    /// Emit from the IP header on (no Ethernet header) into `buf`; returns the IP packet length.
    pub fn emit_ip(&self, buf: &mut [u8], csum: UdpChecksum, fill: impl FnOnce(&mut [u8])) -> Result<usize, Error> {
        let len = self.emit_ip_unsealed(buf, fill)?;
        seal_ip(&mut buf[..len], csum)?;
        Ok(len)
    }

    /// Everything [`FrameRepr::emit_ip`] writes except the ICRC and the UDP checksum (left
    /// zero): for callers that patch the packet (e.g. a fault injector) before sealing it with
    /// [`seal_ip`]. Returns the IP packet length.
    pub fn emit_ip_unsealed(&self, buf: &mut [u8], fill: impl FnOnce(&mut [u8])) -> Result<usize, Error> {
        let mut r = *self;
        r.fixup();
        r.emit_ip_fixed(buf, fill)
    }

    /// [`FrameRepr::emit_ip_unsealed`] for a repr whose lengths are already fixed up.
    fn emit_ip_fixed(&self, buf: &mut [u8], fill: impl FnOnce(&mut [u8])) -> Result<usize, Error> {
        self.roce.check()?;
        let len = self.ip_len();
        if buf.len() < len {
            return Err(Error::BufferTooSmall { need: len, have: buf.len() });
        }
        let buf = &mut buf[..len];
        let ip_hl = self.ip.header_len();
        match self.ip {
            IpRepr::V4(v4) => v4.emit(&mut Ipv4Packet::new_unchecked(&mut buf[..ip_hl]))?,
            IpRepr::V6(v6) => v6.emit(&mut Ipv6Packet::new_unchecked(&mut buf[..ip_hl]))?,
        }
        let udp_len = len - ip_hl;
        self.udp.emit(
            &mut UdpPacket::new_unchecked(&mut buf[ip_hl..ip_hl + crate::udp::HEADER_LEN]),
            udp_len - crate::udp::HEADER_LEN,
        )?;
        let bth = ip_hl + crate::udp::HEADER_LEN;
        self.roce.emit(&mut buf[bth..len - ICRC_LEN], fill)?;
        Ok(len)
    }
}

/// Emit a whole frame from its parts (what [`FrameRepr::emit`] does, without assembling a
/// `FrameRepr`: a sender keeps the Ethernet, IP and UDP parts of a connection as a template
/// and passes each packet's transport part). Lengths and the EtherType are derived; the
/// EtherType and the IP payload length given are ignored. Returns the frame length.
#[inline]
pub fn emit_frame(
    eth: &EthernetRepr,
    ip: &IpRepr,
    udp: &UdpRepr,
    roce: &RoceRepr,
    buf: &mut [u8],
    csum: UdpChecksum,
    fill: impl FnOnce(&mut [u8]),
) -> Result<usize, Error> {
    let info = roce.check()?;
    let roce_len = info.header_len + roce.payload_len + roce.bth.pad_count as usize + ICRC_LEN;
    let udp_len = crate::udp::HEADER_LEN + roce_len;
    let ip_hl = ip.header_len();
    let l2 = eth.header_len();
    let total = l2 + ip_hl + udp_len;
    if buf.len() < total {
        return Err(Error::BufferTooSmall { need: total, have: buf.len() });
    }
    let buf = &mut buf[..total];
    let ethertype = match ip {
        IpRepr::V4(_) => EtherType::IPV4,
        IpRepr::V6(_) => EtherType::IPV6,
    };
    let mut f = EthernetFrame::new_unchecked(&mut buf[..l2]);
    f.set_dst_addr(eth.dst_addr);
    f.set_src_addr(eth.src_addr);
    f.set_ethertype(eth.vlan, ethertype);
    let l3 = &mut buf[l2..];
    match ip {
        IpRepr::V4(v4) => {
            let mut v4 = *v4;
            v4.payload_len = udp_len;
            v4.emit(&mut Ipv4Packet::new_unchecked(&mut l3[..ip_hl]))?
        }
        IpRepr::V6(v6) => {
            let mut v6 = *v6;
            v6.payload_len = udp_len;
            v6.emit(&mut Ipv6Packet::new_unchecked(&mut l3[..ip_hl]))?
        }
    }
    udp.emit(
        &mut UdpPacket::new_unchecked(&mut l3[ip_hl..ip_hl + crate::udp::HEADER_LEN]),
        udp_len - crate::udp::HEADER_LEN,
    )?;
    let bth = ip_hl + crate::udp::HEADER_LEN;
    let l3_len = ip_hl + udp_len;
    roce.emit(&mut l3[bth..l3_len - ICRC_LEN], fill)?;
    seal_ip(&mut l3[..l3_len], csum)?;
    Ok(total)
}

/// Compute and store the ICRC (and, if asked, the UDP checksum) of a complete IP packet
/// (`l3` = IP header .. end of the ICRC field). The IP and UDP length fields must be final.
pub fn seal_ip(l3: &mut [u8], csum: UdpChecksum) -> Result<(), Error> {
    let len = l3.len();
    let body = len.checked_sub(ICRC_LEN).ok_or(Error::BufferTooSmall { need: ICRC_LEN, have: len })?;
    let c = icrc::compute(&l3[..body])?;
    l3[body..].copy_from_slice(&c.to_le_bytes());
    if csum == UdpChecksum::Compute {
        finish_udp_checksum(l3);
    }
    Ok(())
}

/// Fill the UDP checksum of a complete IP packet whose ICRC is already in place.
pub(crate) fn finish_udp_checksum(l3: &mut [u8]) {
    let (src, dst, ip_hl) = if l3[0] >> 4 == 6 {
        let p = Ipv6Packet::new_unchecked(&l3[..]);
        (p.src_addr().into(), p.dst_addr().into(), crate::ipv6::HEADER_LEN)
    } else {
        let p = Ipv4Packet::new_unchecked(&l3[..]);
        (p.src_addr().into(), p.dst_addr().into(), crate::ipv4::HEADER_LEN)
    };
    UdpPacket::new_unchecked(&mut l3[ip_hl..]).fill_checksum(src, dst);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ext::RethRepr;
    use crate::{Ecn, EthernetAddress, Opcode, Psn, Qpn};
    use proptest::prelude::*;

    fn same(a: &ParsedFrame<'_>, b: &ParsedFrame<'_>) -> bool {
        a.same_as(b)
    }

    fn frame(seed: u64, len: usize, op: Opcode) -> std::vec::Vec<u8> {
        let b = seed.to_le_bytes();
        let eth = EthernetRepr {
            src_addr: EthernetAddress([2, b[0], b[1], b[2], b[3], b[4]]),
            dst_addr: EthernetAddress([2, b[5], b[6], b[7], 1, 2]),
            vlan: None,
            ethertype: EtherType::IPV4,
        };
        let ip = IpRepr::V4(Ipv4Repr {
            src_addr: core::net::Ipv4Addr::from(seed as u32),
            dst_addr: core::net::Ipv4Addr::from((seed >> 32) as u32),
            dscp: b[1] & 0x3f,
            ecn: Ecn::from_bits(b[2]),
            ident: seed as u16,
            dont_frag: b[4] & 1 == 1,
            ttl: b[3],
            protocol: PROTOCOL_UDP,
            payload_len: 0,
        });
        let udp = UdpRepr { src_port: 0xc000 | (seed as u16 & 0x3fff), dst_port: ROCE_V2_PORT };
        let has_payload = op.info().unwrap().has_payload;
        let len = if has_payload { len } else { 0 };
        let mut ext = ExtHeaders::default();
        if op.info().unwrap().headers.contains(crate::HeaderKind::Reth) {
            ext.reth = Some(RethRepr { va: seed, rkey: 7, dma_len: len as u32 });
        }
        if op.info().unwrap().headers.contains(crate::HeaderKind::Aeth) {
            ext.aeth = Some(crate::AethRepr { syndrome: crate::Syndrome::ACK_UNLIMITED, msn: crate::Msn::new(3) });
        }
        if op.info().unwrap().headers.contains(crate::HeaderKind::ImmDt) {
            ext.immdt = Some(seed as u32);
        }
        let roce = RoceRepr {
            bth: crate::BthRepr {
                opcode: op,
                solicited: b[5] & 1 == 1,
                mig_req: false,
                pad_count: pad_for(len),
                pkey: 0xffff,
                fecn: false,
                becn: b[6] & 1 == 1,
                dest_qp: Qpn::new(seed as u32 & 0xff_ffff),
                ack_req: b[7] & 1 == 1,
                psn: Psn::new((seed >> 40) as u32 & 0xff_ffff),
            },
            ext,
            payload_len: len,
        };
        let mut buf = std::vec![0u8; 2000];
        let n = emit_frame(&eth, &ip, &udp, &roce, &mut buf, UdpChecksum::Zero, |p| p.fill(b[0])).unwrap();
        buf.truncate(n);
        buf
    }

    const OPS: [Opcode; 7] = [
        Opcode::RC_RDMA_WRITE_MIDDLE,
        Opcode::RC_RDMA_WRITE_ONLY,
        Opcode::RC_RDMA_WRITE_FIRST,
        Opcode::RC_SEND_ONLY,
        Opcode::RC_ACKNOWLEDGE,
        Opcode::RC_RDMA_WRITE_LAST,
        Opcode::RC_SEND_LAST_WITH_IMMEDIATE,
    ];

    /// A bare frame says what the general parser says of the same bytes: addresses, BTH,
    /// payload, no extension header but the RETH, and the same ICRC verdict.
    fn same_bare(b: &BareFrame<'_>, g: &ParsedFrame<'_>) -> bool {
        g.eth.is_some_and(|e| e.vlan.is_none())
            && g.ip.src_addr() == core::net::IpAddr::V4(b.src)
            && g.ip.dst_addr() == core::net::IpAddr::V4(b.dst)
            && g.roce.bth == b.bth
            && g.roce.ext == ExtHeaders { reth: b.reth, ..ExtHeaders::default() }
            && g.payload() == b.payload
            && b.check_icrc_prefetching(&[]) == g.check_icrc()
    }

    #[test]
    fn bare_path_takes_payload_packets_without_extension_headers_but_a_reth() {
        let bare = |op: Opcode, len: usize| parse_bare_ipv4(&frame(7, len, op)).is_some();
        assert!(bare(Opcode::RC_RDMA_WRITE_MIDDLE, 256));
        assert!(bare(Opcode::RC_RDMA_WRITE_LAST, 5));
        assert!(bare(Opcode::RC_SEND_ONLY, 0));
        assert!(bare(Opcode::RC_RDMA_WRITE_FIRST, 256)); // RETH
        assert!(bare(Opcode::RC_RDMA_WRITE_ONLY, 64));
        assert!(!bare(Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE, 64)); // RETH + ImmDt
        assert!(!bare(Opcode::RC_RDMA_READ_REQUEST, 0)); // RETH, no payload
        assert!(!bare(Opcode::RC_SEND_LAST_WITH_IMMEDIATE, 8)); // ImmDt
        assert!(!bare(Opcode::RC_ACKNOWLEDGE, 0)); // AETH, no payload
        let f = frame(7, 256, Opcode::RC_RDMA_WRITE_MIDDLE);
        let (b, g) = (parse_bare_ipv4(&f).unwrap(), parse_frame(&f).unwrap());
        assert!(same_bare(&b, &g));
        assert_eq!(b.payload.len(), 256);
        assert!(b.check_icrc_prefetching(&[]).is_ok());
        assert_eq!(b.reth, None);
        let f = frame(7, 64, Opcode::RC_RDMA_WRITE_ONLY);
        let (b, g) = (parse_bare_ipv4(&f).unwrap(), parse_frame(&f).unwrap());
        assert!(same_bare(&b, &g));
        assert!(b.reth.is_some() && b.reth == g.roce.ext.reth);
        assert_eq!(b.payload.len(), 64);
        let mut bad = f.clone();
        bad[100] ^= 1;
        assert!(parse_bare_ipv4(&bad).unwrap().check_icrc_prefetching(&[]).is_err());
        // What `RoceRepr::parse` refuses, the bare path declines: a PadCnt larger than the
        // payload, a payload + pad that is not whole words (IP and UDP lengths kept consistent).
        let mut padded = frame(7, 0, Opcode::RC_SEND_ONLY);
        padded[43] |= 0x30;
        assert!(parse_frame(&padded).is_err());
        assert!(parse_bare_ipv4(&padded).is_none());
        for shorter in 1..4 {
            let mut g = frame(7, 256, Opcode::RC_RDMA_WRITE_MIDDLE);
            let total = u16::from_be_bytes([g[16], g[17]]) - shorter;
            g[16..18].copy_from_slice(&total.to_be_bytes());
            g[38..40].copy_from_slice(&(total - 20).to_be_bytes());
            g[24..26].fill(0);
            let c = crate::ipv4::internet_checksum(&g[14..34]);
            g[24..26].copy_from_slice(&c.to_be_bytes());
            assert!(parse_frame(&g).is_err(), "{shorter}");
            assert!(parse_bare_ipv4(&g).is_none(), "{shorter}");
        }
    }

    proptest! {
        /// The common-case parser returns exactly what the general parser returns, or declines;
        /// on valid frames and on frames with bytes of their headers changed, cut or extended.
        #[test]
        fn common_ipv4_path_matches_general(
            seed in any::<u64>(), len in 0usize..600, op_i in 0..OPS.len(),
            edits in proptest::collection::vec((0usize..80, any::<u8>()), 0..3),

            cut in 0usize..8, extra in 0usize..3, fix_csum in any::<bool>(),
        ) {
            let mut f = frame(seed, len, OPS[op_i]);
            for (at, v) in edits {
                if at < f.len() {
                    f[at] = v;
                }
            }
            if fix_csum && f.len() >= 34 {
                // Edited IPv4 headers that still carry a valid checksum reach the later checks.
                f[24..26].fill(0);
                let c = crate::ipv4::internet_checksum(&f[14..34]);
                f[24..26].copy_from_slice(&c.to_be_bytes());
            }
            let keep = f.len().saturating_sub(if cut < 4 { cut * 3 } else { 0 });
            f.truncate(keep);
            f.extend(core::iter::repeat_n(0xee, extra));
            let general = parse_general(&f);
            if let Some(b) = parse_bare_ipv4(&f) {
                let g = general.as_ref().expect("the general path accepts what the bare path accepts");
                prop_assert!(same_bare(&b, g), "{:?} vs {:?}", b, g);
            }
            if let Some(p) = parse_common_ipv4(&f) {
                let g = general.expect("the general path accepts what the fast path accepts");
                prop_assert!(same(&p, &g), "{:?} vs {:?}", p, g);
            }
            match (parse_frame(&f), general) {
                (Ok(a), Ok(b)) => prop_assert!(same(&a, &b)),
                (Err(a), Err(b)) => prop_assert_eq!(a, b),
                (a, b) => prop_assert!(false, "{:?} vs {:?}", a, b),
            }
        }
    }

    /// Each header field the fast path checks, set to values that must send the frame down the
    /// general path (or keep it on the fast one), with the IPv4 checksum kept valid: both paths
    /// agree on every variant.
    #[test]
    fn common_ipv4_path_field_by_field() {
        let base = frame(0x0102_0304_0506_0708, 300, Opcode::RC_RDMA_WRITE_FIRST);
        let mut variants: std::vec::Vec<(usize, u8)> = std::vec::Vec::new();
        for v in [0x00, 0x20, 0x40, 0x60, 0x01, 0x41, 0x80] {
            variants.push((20, v)); // IPv4 flags / fragment offset
        }
        for v in [0x46, 0x44, 0x55, 0x65] {
            variants.push((14, v)); // version / IHL
        }
        for v in [6, 17, 0] {
            variants.push((23, v)); // protocol
        }
        for v in [0x00, 0x01, 0xff] {
            variants.push((17, v)); // total length (low byte)
            variants.push((39, v)); // UDP length (low byte)
            variants.push((37, v)); // UDP destination port (low byte)
        }
        for v in [0x86, 0x81, 0x00] {
            variants.push((12, v)); // EtherType high byte
        }
        variants.push((42, 0x1f)); // unknown opcode
        variants.push((43, 0x01)); // TVer
        for (at, v) in variants {
            let mut f = base.clone();
            f[at] = v;
            f[24..26].fill(0);
            let c = crate::ipv4::internet_checksum(&f[14..34]);
            f[24..26].copy_from_slice(&c.to_be_bytes());
            match (parse_frame(&f), parse_general(&f)) {
                (Ok(a), Ok(b)) => assert!(same(&a, &b), "byte {at} = {v:#x}"),
                (Err(a), Err(b)) => assert_eq!(a, b, "byte {at} = {v:#x}"),
                (a, b) => panic!("byte {at} = {v:#x}: {a:?} vs {b:?}"),
            }
        }
    }

    /// The fast path takes the frames it is for (so the property test compares something).
    #[test]
    fn common_ipv4_path_takes_plain_frames() {
        for (i, op) in OPS.into_iter().enumerate() {
            let f = frame(0x1234_5678_9abc_def0 + i as u64, 256, op);
            assert!(parse_common_ipv4(&f).is_some(), "{op:?}");
        }
    }
}
