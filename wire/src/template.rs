//! Per-flow header templates: the Ethernet, IP, UDP and fixed BTH bytes of one connection
//! rendered once, then copied and patched for every packet.
//!
//! Every packet of an RC connection carries the same addresses, ports, P_Key and destination
//! QP; only the lengths, the IPv4 identification and checksum, the BTH opcode / flags / PSN,
//! the extension headers and the payload change. [`emit_frame`](crate::emit_frame) builds all
//! of it from reprs each time; [`HeaderTemplate::emit`] copies the rendered bytes and writes
//! only what changes (the IPv4 header checksum incrementally, from the sum of the fixed words),
//! and produces byte-for-byte the frame `emit_frame` would (a property test holds the two to
//! that).

use crate::bth::HEADER_LEN as BTH_LEN;
use crate::error::Error;
use crate::ethernet::EthernetRepr;
use crate::ext::ExtHeaders;
use crate::ip::IpRepr;
use crate::opcode::Opcode;
use crate::packet::{emit_frame, finish_udp_checksum, pad_for, RoceRepr, UdpChecksum};
use crate::udp::UdpRepr;
use crate::{icrc, BthRepr, ICRC_LEN};

/// Bytes of the largest rendered prefix: 802.1Q Ethernet (18) + IPv6 (40) + UDP (8) + BTH (12).
const MAX_PREFIX: usize = 18 + 40 + 8 + BTH_LEN;
/// The prefix as stored: whole 16-byte words, so that stamping it is five vector moves (a
/// 78-byte array copy compiles to a `memcpy` call).
const PREFIX_WORDS: usize = MAX_PREFIX.div_ceil(16);

/// What changes from packet to packet of a flow (besides the extension headers and payload).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct PacketFields {
    /// IPv4 identification (ignored for IPv6).
    pub ident: u16,
    /// BTH opcode.
    pub opcode: Opcode,
    /// BTH SE (solicited event).
    pub solicited: bool,
    /// BTH AckReq.
    pub ack_req: bool,
    /// BTH PSN.
    pub psn: crate::Psn,
}

/// The fixed part of every frame of one flow, ready to be stamped into a transmit buffer.
#[derive(Clone, Debug)]
pub struct HeaderTemplate {
    words: [[u8; 16]; PREFIX_WORDS],
    /// Offset of the IP header (14, or 18 with a VLAN tag).
    l3: usize,
    /// Offset of the BTH.
    bth: usize,
    v6: bool,
    csum: UdpChecksum,
    /// IPv4: the one's-complement sum of the header's 16-bit words with total length,
    /// identification and checksum zero.
    ip_sum: u32,
    /// BTH byte 1 with SE and PadCnt clear (MigReq, TVer from the template).
    bth_flags: u8,
}

impl HeaderTemplate {
    /// Render the headers of `eth`, `ip`, `udp` and the fixed BTH fields of `bth` (P_Key,
    /// FECN/BECN, MigReq, destination QP). Per-packet fields of `ip` (payload length, IPv4
    /// identification) and of `bth` (opcode, SE, PadCnt, AckReq, PSN) are ignored.
    pub fn new(
        eth: &EthernetRepr,
        ip: &IpRepr,
        udp: &UdpRepr,
        bth: &BthRepr,
        csum: UdpChecksum,
    ) -> Result<HeaderTemplate, Error> {
        let mut ip = *ip;
        if let IpRepr::V4(v4) = &mut ip {
            v4.ident = 0;
        }
        let mut b = *bth;
        b.opcode = Opcode::RC_SEND_ONLY;
        b.pad_count = 0;
        b.solicited = false;
        let roce = RoceRepr { bth: b, ext: ExtHeaders::default(), payload_len: 0 };
        let mut buf = [0u8; MAX_PREFIX + ICRC_LEN];
        emit_frame(eth, &ip, udp, &roce, &mut buf, UdpChecksum::Zero, |_| {})?;
        let l3 = eth.header_len();
        let v6 = matches!(ip, IpRepr::V6(_));
        let bth_off = l3 + ip.header_len() + crate::udp::HEADER_LEN;
        let mut bytes = [0u8; MAX_PREFIX];
        bytes[..bth_off + BTH_LEN].copy_from_slice(&buf[..bth_off + BTH_LEN]);
        let mut ip_sum = 0u32;
        if !v6 {
            let h = &mut bytes[l3..l3 + crate::ipv4::HEADER_LEN];
            h[2..6].fill(0); // total length, identification
            h[10..12].fill(0); // checksum
            ip_sum = h.chunks_exact(2).map(|w| u16::from_be_bytes([w[0], w[1]]) as u32).sum();
        }
        let bth_flags = bytes[bth_off + 1] & 0x4f;
        let mut words = [[0u8; 16]; PREFIX_WORDS];
        for (w, b) in words.iter_mut().flat_map(|w| w.iter_mut()).zip(bytes) {
            *w = b;
        }
        Ok(HeaderTemplate { words, l3, bth: bth_off, v6, csum, ip_sum, bth_flags })
    }

    /// Emit one frame into `buf`: the template's headers with the per-packet fields `f` (IPv4
    /// identification; BTH opcode, SE, AckReq, PSN), the extension headers `ext` (exactly those the opcode requires), `payload_len` payload bytes written by
    /// `fill`, zero pad, the ICRC and (if the template says so) the UDP checksum. Returns the
    /// frame length. Byte for byte what [`emit_frame`] writes for the same reprs.
    #[inline]
    pub fn emit(
        &self,
        buf: &mut [u8],
        f: PacketFields,
        ext: &ExtHeaders,
        payload_len: usize,
        fill: impl FnOnce(&mut [u8]),
    ) -> Result<usize, Error> {
        let (payload, total) = self.stamp(buf, f, ext, payload_len)?;
        fill(&mut buf[payload..payload + payload_len]);
        let icrc_at = total - ICRC_LEN;
        let c = icrc::compute(&buf[self.l3..icrc_at])?;
        self.seal(buf, c, total)
    }

    /// [`HeaderTemplate::emit`] with the payload appended by `fill` through a [`PayloadWriter`],
    /// which copies each piece into the frame and folds it into the ICRC in the same pass.
    /// `fill` must append exactly `payload_len` bytes and return `true`; otherwise nothing valid
    /// is emitted and the result is an error.
    #[inline]
    pub fn emit_copy(
        &self,
        buf: &mut [u8],
        f: PacketFields,
        ext: &ExtHeaders,
        payload_len: usize,
        fill: impl FnOnce(&mut PayloadWriter<'_>) -> bool,
    ) -> Result<usize, Error> {
        let (payload, total) = self.stamp(buf, f, ext, payload_len)?;
        let h = payload - self.l3;
        let mut w =
            PayloadWriter { l3: &mut buf[self.l3..total - ICRC_LEN], h, len: payload_len, at: 0, crc: Crc::Fresh };
        if !fill(&mut w) || w.at != payload_len {
            return Err(Error::InvalidRepr { what: "payload writer did not fill the payload" });
        }
        let c = w.finish()?;
        self.seal(buf, c, total)
    }

    /// Write the headers of a frame and zero its pad; returns the payload offset and the frame
    /// length.
    #[inline]
    fn stamp(
        &self,
        buf: &mut [u8],
        f: PacketFields,
        ext: &ExtHeaders,
        payload_len: usize,
    ) -> Result<(usize, usize), Error> {
        let PacketFields { ident, opcode, solicited, ack_req, psn } = f;
        let info = opcode.info().ok_or(Error::InvalidRepr { what: "unknown opcode" })?;
        ext.check(info)?;
        if !info.has_payload && payload_len != 0 {
            return Err(Error::InvalidRepr { what: "payload on an opcode that carries none" });
        }
        let pad = pad_for(payload_len) as usize;
        let hl = info.header_len;
        let udp_len = crate::udp::HEADER_LEN + hl + payload_len + pad + ICRC_LEN;
        let udp_off = self.bth - crate::udp::HEADER_LEN;
        let ip_hl = udp_off - self.l3;
        let total = udp_off + udp_len;
        if total - self.l3 > u16::MAX as usize + if self.v6 { ip_hl } else { 0 } {
            return Err(Error::InvalidRepr { what: "packet longer than the IP length field allows" });
        }
        if buf.len() < total {
            return Err(Error::BufferTooSmall { need: total, have: buf.len() });
        }
        let (l3, bth) = (self.l3, self.bth);
        // The prefix (a fixed-size copy of the whole array when the buffer has room, which a
        // transmit buffer always does), then the per-packet fields over it.
        match buf.first_chunk_mut::<{ 16 * PREFIX_WORDS }>() {
            Some(b) => {
                for (d, w) in b.chunks_exact_mut(16).zip(&self.words) {
                    d.copy_from_slice(&u128::from_ne_bytes(*w).to_ne_bytes());
                }
            }
            None => {
                for (d, s) in buf[..bth + BTH_LEN].iter_mut().zip(self.words.iter().flatten()) {
                    *d = *s;
                }
            }
        }
        if self.v6 {
            buf[l3 + 4..l3 + 6].copy_from_slice(&(udp_len as u16).to_be_bytes());
        } else {
            let total_len = (ip_hl + udp_len) as u16;
            let mut sum = self.ip_sum + total_len as u32 + ident as u32;
            sum = (sum & 0xffff) + (sum >> 16);
            sum = (sum & 0xffff) + (sum >> 16);
            buf[l3 + 2..l3 + 4].copy_from_slice(&total_len.to_be_bytes());
            buf[l3 + 4..l3 + 6].copy_from_slice(&ident.to_be_bytes());
            buf[l3 + 10..l3 + 12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
        }
        buf[udp_off + 4..udp_off + 6].copy_from_slice(&(udp_len as u16).to_be_bytes());
        buf[bth] = opcode.0;
        buf[bth + 1] = self.bth_flags | (solicited as u8) << 7 | (pad as u8) << 4;
        let word = (ack_req as u32) << 31 | psn.value();
        buf[bth + 8..bth + 12].copy_from_slice(&word.to_be_bytes());
        ext.emit(info, &mut buf[bth + BTH_LEN..bth + hl]);
        let payload = bth + hl;
        // At most three bytes: stored one by one (`fill` would call `memset`, pad or not).
        for b in &mut buf[payload + payload_len..payload + payload_len + pad] {
            *b = 0;
        }
        Ok((payload, total))
    }

    /// Store the ICRC `c` in the last four bytes of the `total`-byte frame and, if configured,
    /// the UDP checksum.
    #[inline]
    fn seal(&self, buf: &mut [u8], c: u32, total: usize) -> Result<usize, Error> {
        buf[total - ICRC_LEN..total].copy_from_slice(&c.to_le_bytes());
        if self.csum == UdpChecksum::Compute {
            finish_udp_checksum(&mut buf[self.l3..total]);
        }
        Ok(total)
    }
}

/// Appends a packet's payload for [`HeaderTemplate::emit_copy`]: each piece is copied into the
/// frame and, for payloads of [`FUSE_MIN`] bytes and more, folded into the ICRC in the same
/// pass (a payload appended in one piece: one pass over the whole packet, headers included).
pub struct PayloadWriter<'a> {
    /// The packet from the IP header to the end of the pad.
    l3: &'a mut [u8],
    /// Payload offset in `l3`.
    h: usize,
    len: usize,
    at: usize,
    crc: Crc,
}

/// How far a [`PayloadWriter`]'s ICRC has got.
#[derive(Clone, Copy)]
enum Crc {
    /// Nothing appended yet.
    Fresh,
    /// Plain copies: the ICRC is computed over the packet at the end.
    Later,
    /// The CRC of `l3[..h + at]` (masked headers, the payload so far).
    Running(u32),
    /// The ICRC of the whole packet (one-pass kernel).
    Done(u32),
}

/// Payloads from this size on are copied and CRC-ed in one pass.
const FUSE_MIN: usize = 512;

impl PayloadWriter<'_> {
    /// Bytes still to append.
    pub fn remaining(&self) -> usize {
        self.len - self.at
    }

    /// Append `src`; `false` (nothing appended) if it does not fit.
    #[inline]
    pub fn copy(&mut self, src: &[u8]) -> bool {
        self.copy_prefetching(src, &[])
    }

    /// [`PayloadWriter::copy`], and meanwhile bring `next` (what the caller reads next: the
    /// next packet's payload) into the cache, where the one-pass kernel runs
    /// ([`icrc::copy_payload_icrc`]). `next` is neither read nor written: a hint.
    #[inline]
    pub fn copy_prefetching(&mut self, src: &[u8], next: &[u8]) -> bool {
        if src.len() > self.remaining() {
            return false;
        }
        if let Crc::Fresh = self.crc {
            if self.len >= FUSE_MIN {
                // The whole payload in one piece: one pass over the packet. Otherwise CRC the
                // headers now and fold each piece in as it is copied.
                if src.len() == self.len {
                    if let Some(c) = icrc::copy_payload_icrc(self.l3, self.h, src, next) {
                        self.crc = Crc::Done(c);
                        self.at = self.len;
                        return true;
                    }
                }
                let Ok(c) = icrc::compute(&self.l3[..self.h]) else { return false };
                self.crc = Crc::Running(c);
            }
        }
        let start = self.h + self.at;
        match self.crc {
            Crc::Fresh | Crc::Later => {
                self.l3[start..start + src.len()].copy_from_slice(src);
                self.crc = Crc::Later;
            }
            Crc::Running(mut c) => {
                if !icrc::copy_and_continue(&mut c, src, &mut self.l3[start..start + src.len()]) {
                    return false;
                }
                self.crc = Crc::Running(c);
            }
            Crc::Done(_) => return src.is_empty(),
        }
        self.at += src.len();
        true
    }

    /// The ICRC of the packet, once the payload is complete.
    #[inline]
    fn finish(&self) -> Result<u32, Error> {
        match self.crc {
            Crc::Done(c) => Ok(c),
            Crc::Running(c) => Ok(icrc::continue_crc(c, &self.l3[self.h + self.len..])),
            Crc::Fresh | Crc::Later => icrc::compute(self.l3),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ext::{AethRepr, AtomicEthRepr, RethRepr};
    use crate::ipv4::Ipv4Repr;
    use crate::ipv6::Ipv6Repr;
    use crate::{Ecn, EtherType, EthernetAddress, Msn, Psn, Qpn, Syndrome, VlanTag};
    use proptest::prelude::*;

    fn reprs(v6: bool, vlan: bool, seed: u64) -> (EthernetRepr, IpRepr, UdpRepr, BthRepr) {
        let b = seed.to_le_bytes();
        let eth = EthernetRepr {
            src_addr: EthernetAddress([2, b[0], b[1], b[2], b[3], b[4]]),
            dst_addr: EthernetAddress([2, b[5], b[6], b[7], 1, 2]),
            vlan: vlan.then_some(VlanTag { pcp: b[0] & 7, dei: false, vid: (seed as u16) & 0xfff }),
            ethertype: EtherType::IPV4,
        };
        let ip = if v6 {
            IpRepr::V6(Ipv6Repr {
                src_addr: core::net::Ipv6Addr::from(seed as u128 * 0x9e37_79b9_7f4a_7c15),
                dst_addr: core::net::Ipv6Addr::from(!(seed as u128) << 3),
                dscp: b[1] & 0x3f,
                ecn: Ecn::from_bits(b[2]),
                flow_label: 0,
                hop_limit: b[3],
                next_header: crate::ipv4::PROTOCOL_UDP,
                payload_len: 0,
            })
        } else {
            IpRepr::V4(Ipv4Repr {
                src_addr: core::net::Ipv4Addr::from(seed as u32),
                dst_addr: core::net::Ipv4Addr::from((seed >> 32) as u32),
                dscp: b[1] & 0x3f,
                ecn: Ecn::from_bits(b[2]),
                ident: 0,
                dont_frag: b[4] & 1 == 1,
                ttl: b[3],
                protocol: crate::ipv4::PROTOCOL_UDP,
                payload_len: 0,
            })
        };
        let udp = UdpRepr { src_port: 0xc000 | (seed as u16 & 0x3fff), dst_port: crate::ROCE_V2_PORT };
        let bth = BthRepr {
            opcode: Opcode::RC_ACKNOWLEDGE,
            solicited: false,
            mig_req: b[5] & 1 == 1,
            pad_count: 0,
            pkey: 0xffff,
            fecn: b[6] & 1 == 1,
            becn: b[6] & 2 == 2,
            dest_qp: Qpn::new((seed >> 8) as u32 & 0xff_ffff),
            ack_req: false,
            psn: Psn::new(0),
        };
        (eth, ip, udp, bth)
    }

    fn ext_for(op: Opcode, x: u64) -> ExtHeaders {
        let info = op.info().unwrap();
        let mut e = ExtHeaders::default();
        let h = info.headers;
        use crate::HeaderKind as K;
        if h.contains(K::Reth) {
            e.reth = Some(RethRepr { va: x, rkey: x as u32 ^ 0x55, dma_len: (x >> 7) as u32 });
        }
        if h.contains(K::AtomicEth) {
            e.atomic_eth = Some(AtomicEthRepr { va: x & !7, rkey: 9, swap_add: x * 3, compare: !x });
        }
        if h.contains(K::Aeth) {
            e.aeth = Some(AethRepr { syndrome: Syndrome::ACK_UNLIMITED, msn: Msn::new(x as u32 & 0xff_ffff) });
        }
        if h.contains(K::AtomicAckEth) {
            e.atomic_ack_eth = Some(crate::ext::AtomicAckEthRepr { orig: x.rotate_left(9) });
        }
        if h.contains(K::ImmDt) {
            e.immdt = Some(x as u32);
        }
        if h.contains(K::Ieth) {
            e.ieth = Some((x >> 3) as u32);
        }
        e
    }

    const OPS: [Opcode; 12] = [
        Opcode::RC_SEND_FIRST,
        Opcode::RC_SEND_MIDDLE,
        Opcode::RC_SEND_LAST_WITH_IMMEDIATE,
        Opcode::RC_SEND_ONLY_WITH_INVALIDATE,
        Opcode::RC_RDMA_WRITE_FIRST,
        Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE,
        Opcode::RC_RDMA_READ_REQUEST,
        Opcode::RC_RDMA_READ_RESPONSE_FIRST,
        Opcode::RC_RDMA_READ_RESPONSE_MIDDLE,
        Opcode::RC_ACKNOWLEDGE,
        Opcode::RC_ATOMIC_ACKNOWLEDGE,
        Opcode::RC_FETCH_ADD,
    ];

    proptest! {
        /// The template writes exactly the frame `emit_frame` writes from the same reprs.
        #[test]
        fn template_matches_emit_frame(
            seed in any::<u64>(), v6 in any::<bool>(), vlan in any::<bool>(), compute in any::<bool>(),
            op_i in 0..OPS.len(), len in 0usize..1500, big in any::<bool>(), ident in any::<u16>(), psn in 0u32..0x100_0000,
            ack_req in any::<bool>(), se in any::<bool>(), x in any::<u64>(),
        ) {
            let (eth, ip, udp, bth) = reprs(v6, vlan, seed);
            let csum = if compute { UdpChecksum::Compute } else { UdpChecksum::Zero };
            let t = HeaderTemplate::new(&eth, &ip, &udp, &bth, csum).unwrap();
            let op = OPS[op_i];
            // Large payloads reach the one-pass copy kernel's 256-byte groups.
            let len = if big { len * 6 } else { len };
            let len = if op.info().unwrap().has_payload { len } else { 0 };
            let ext = ext_for(op, x);
            let fill = |p: &mut [u8]| p.iter_mut().enumerate().for_each(|(i, b)| *b = (i as u8) ^ (x as u8));
            let mut a = vec![0xa5u8; 9300];
            let n = t.emit(&mut a, PacketFields { ident, opcode: op, solicited: se, ack_req, psn: Psn::new(psn) }, &ext, len, fill).unwrap();
            let mut ip2 = ip;
            if let IpRepr::V4(v4) = &mut ip2 { v4.ident = ident; }
            let roce = RoceRepr {
                bth: BthRepr { opcode: op, solicited: se, ack_req, psn: Psn::new(psn), pad_count: pad_for(len), ..bth },
                ext,
                payload_len: len,
            };
            let mut b = vec![0x5au8; 9300];
            let m = emit_frame(&eth, &ip2, &udp, &roce, &mut b, csum, fill).unwrap();
            prop_assert_eq!(n, m);
            prop_assert_eq!(&a[..n], &b[..m]);
            // The same payload appended in up to three pieces through the writer.
            let mut payload = vec![0u8; len];
            fill(&mut payload);
            let cut1 = (x as usize >> 8) % (len + 1);
            let cut2 = cut1 + (x as usize >> 20) % (len - cut1 + 1);
            let mut c = vec![0x3cu8; 9300];
            let k = t.emit_copy(&mut c, PacketFields { ident, opcode: op, solicited: se, ack_req, psn: Psn::new(psn) }, &ext, len, |w| {
                w.copy(&payload[..cut1]) && w.copy(&payload[cut1..cut2]) && w.copy(&payload[cut2..])
            }).unwrap();
            prop_assert_eq!(k, m);
            prop_assert_eq!(&c[..k], &b[..m]);
            // And in one piece (the one-pass kernel for large payloads).
            let mut d = vec![0xc3u8; 9300];
            let k = t.emit_copy(&mut d, PacketFields { ident, opcode: op, solicited: se, ack_req, psn: Psn::new(psn) }, &ext, len, |w| w.copy(&payload)).unwrap();
            prop_assert_eq!(&d[..k], &b[..m]);
        }
    }

    fn fields(opcode: Opcode) -> PacketFields {
        PacketFields { ident: 0, opcode, solicited: false, ack_req: false, psn: Psn::new(0) }
    }

    #[test]
    fn template_rejects_what_emit_frame_rejects() {
        let (eth, ip, udp, bth) = reprs(false, false, 7);
        let t = HeaderTemplate::new(&eth, &ip, &udp, &bth, UdpChecksum::Zero).unwrap();
        let mut buf = [0u8; 256];
        // Missing RETH on a WRITE FIRST, payload on an ACK, unknown opcode, short buffer.
        let e = ExtHeaders::default();
        assert!(t.emit(&mut buf, fields(Opcode::RC_RDMA_WRITE_FIRST), &e, 8, |_| {}).is_err());
        let ack = ext_for(Opcode::RC_ACKNOWLEDGE, 1);
        assert!(t.emit(&mut buf, fields(Opcode::RC_ACKNOWLEDGE), &ack, 4, |_| {}).is_err());
        assert!(t.emit(&mut buf, fields(Opcode(0x1f)), &e, 0, |_| {}).is_err());
        let send = ExtHeaders::default();
        assert!(t.emit(&mut buf, fields(Opcode::RC_SEND_ONLY), &send, 300, |_| {}).is_err());
        assert!(t.emit(&mut buf, fields(Opcode::RC_SEND_ONLY), &send, 100, |_| {}).is_ok());
        // A writer that appends too little or too much, or says it failed.
        let p = [7u8; 64];
        let op = Opcode::RC_SEND_ONLY;
        assert!(t.emit_copy(&mut buf, fields(op), &send, 64, |w| w.copy(&p[..63])).is_err());
        assert!(t.emit_copy(&mut buf, fields(op), &send, 63, |w| !w.copy(&p)).is_err());
        assert!(t
            .emit_copy(&mut buf, fields(op), &send, 64, |w| {
                w.copy(&p);
                false
            })
            .is_err());
        assert!(t.emit_copy(&mut buf, fields(op), &send, 64, |w| w.copy(&p)).is_ok());
    }
}
