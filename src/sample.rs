//! Sample RoCEv2 frames built with `uroce-wire`: one of every opcode in the table, over IPv4
//! and IPv6, with realistic field values. Used by `uroce gen-pcap`, by the tshark cross-check
//! and as a seed corpus for the fuzzers.

use std::net::{Ipv4Addr, Ipv6Addr};
use uroce_wire::opcode::{HeaderKind, OPCODES};
use uroce_wire::packet::pad_for;
use uroce_wire::*;

/// The source and destination MACs of sample frames.
pub const MACS: [EthernetAddress; 2] =
    [EthernetAddress([0x02, 0, 0, 0x77, 0, 0x0b]), EthernetAddress([0x02, 0, 0, 0x77, 0, 0x0c])];

/// A frame repr for `opcode` with a payload of `payload_len` (ignored for opcodes without
/// payload), over IPv6 when `v6`.
pub fn frame_repr(opcode: Opcode, payload_len: usize, v6: bool, psn: u32) -> FrameRepr {
    let info = opcode.info().expect("sample opcodes come from the table");
    let h = info.headers;
    let payload_len = if info.has_payload { payload_len } else { 0 };
    let ext = ExtHeaders {
        deth: h.contains(HeaderKind::Deth).then_some(DethRepr { qkey: 0x1111_1111, src_qp: Qpn::new(0x12) }),
        feth: h.contains(HeaderKind::Feth).then_some(FethRepr { selectivity: 1, placement: 1 }),
        reth: h.contains(HeaderKind::Reth).then_some(RethRepr {
            va: 0x0000_5634_dca7_5000,
            rkey: 0x0000_0247,
            dma_len: payload_len.max(1) as u32 * 3,
        }),
        atomic_eth: h.contains(HeaderKind::AtomicEth).then_some(AtomicEthRepr {
            va: 0x0000_5634_dca7_5000,
            rkey: 0x0000_0247,
            swap_add: 1,
            compare: 0,
        }),
        aeth: h.contains(HeaderKind::Aeth).then_some(AethRepr { syndrome: Syndrome::ACK_UNLIMITED, msn: Msn::new(7) }),
        atomic_ack_eth: h.contains(HeaderKind::AtomicAckEth).then_some(AtomicAckEthRepr { orig: 41 }),
        immdt: h.contains(HeaderKind::ImmDt).then_some(0x1234_5678),
        ieth: h.contains(HeaderKind::Ieth).then_some(0x0000_0261),
    };
    let ip = if v6 {
        IpRepr::V6(Ipv6Repr {
            src_addr: Ipv6Addr::new(0xfd00, 0x77, 0, 0, 0, 0, 0, 0x0b),
            dst_addr: Ipv6Addr::new(0xfd00, 0x77, 0, 0, 0, 0, 0, 0x0c),
            dscp: 26,
            ecn: Ecn::Ect0,
            flow_label: 0x12345,
            hop_limit: 64,
            next_header: 17,
            payload_len: 0,
        })
    } else {
        IpRepr::V4(Ipv4Repr {
            src_addr: Ipv4Addr::new(10, 77, 0, 11),
            dst_addr: Ipv4Addr::new(10, 77, 0, 12),
            dscp: 0,
            ecn: Ecn::NotEct,
            ident: 0,
            dont_frag: true,
            ttl: 64,
            protocol: 17,
            payload_len: 0,
        })
    };
    FrameRepr {
        eth: EthernetRepr { src_addr: MACS[0], dst_addr: MACS[1], vlan: None, ethertype: EtherType::IPV4 },
        ip,
        udp: UdpRepr { src_port: 0xc121, dst_port: ROCE_V2_PORT },
        roce: RoceRepr {
            bth: BthRepr {
                opcode,
                solicited: false,
                mig_req: false,
                pad_count: pad_for(payload_len),
                pkey: bth::DEFAULT_PKEY,
                fecn: false,
                becn: opcode == Opcode::CNP,
                dest_qp: Qpn::new(0x11),
                ack_req: info.position.is_end() && info.is_request(),
                psn: Psn::new(psn),
            },
            ext,
            payload_len,
        },
    }
}

/// One frame of every opcode, IPv4 then IPv6, payloads of 1..=33 bytes (odd sizes, so pad
/// counts 1..3 all occur).
pub fn frames() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for v6 in [false, true] {
        for (i, info) in OPCODES.iter().enumerate() {
            let r = frame_repr(Opcode(info.code), 1 + i % 33, v6, 0x9a_6100 + i as u32);
            let mut buf = vec![0u8; r.buffer_len()];
            let n = r
                .emit(&mut buf, UdpChecksum::Zero, |p| {
                    for (j, b) in p.iter_mut().enumerate() {
                        *b = (j * 31 + i) as u8;
                    }
                })
                .expect("sample reprs are valid");
            buf.truncate(n);
            out.push(buf);
        }
    }
    out
}
