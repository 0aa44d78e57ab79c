//! Shared helpers for the transport integration tests.
#![allow(dead_code)]

use uroce_transport::sim::setup::*;
use uroce_transport::sim::{LinkConfig, Network};
use uroce_transport::*;

/// Two nodes (0 and 1) on a network with `link`, and one connected QP pair.
pub fn pair(seed: u64, link: LinkConfig, o: &QpOptions) -> (Network, QpEnd, QpEnd) {
    let mut net = Network::new(seed, link);
    net.add(device(1, seed));
    net.add(device(2, seed));
    let (a, b) = connect(&mut net, 0, 1, o).expect("connect");
    (net, a, b)
}

/// Deterministic test pattern.
pub fn pattern(seed: u64, i: usize) -> u8 {
    let x = (i as u64).wrapping_add(seed).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    (x >> 56) as u8
}

/// Run until `n` completions arrive on `end`'s CQ (bounded), returning them.
pub fn wait_wcs(net: &mut Network, end: &QpEnd, n: usize, max_steps: u64) -> Vec<WorkCompletion> {
    let mut got = Vec::new();
    let ok = net.run_until(max_steps, |net| {
        got.extend(drain_cq(net, end.node, end.cq));
        got.len() >= n
    });
    assert!(ok, "only {} of {} completions after {max_steps} steps; got {got:?}", got.len(), n);
    got
}

pub fn sge(mr: &MrInfo, off: usize, len: usize) -> Sge {
    Sge { addr: mr.addr + off as u64, length: len as u32, lkey: mr.lkey }
}

/// Post one signaled `opcode` (RDMA WRITE or READ) of `len` bytes between the start of
/// `local` and the start of `remote` on `end`'s QP.
pub fn post_rdma(
    net: &mut Network,
    end: &QpEnd,
    wr_id: u64,
    opcode: WrOpcode,
    local: &MrInfo,
    len: usize,
    remote: &MrInfo,
) {
    let s = [sge(local, 0, len)];
    let wr = SendWr {
        wr_id,
        opcode,
        sg_list: &s,
        send_flags: SendFlags::SIGNALED,
        remote_addr: remote.addr,
        rkey: remote.rkey,
        ..Default::default()
    };
    net.dev(end.node).post_send(end.qpn, &wr).unwrap();
}

pub fn mr_bytes(net: &mut Network, node: usize, mr: &MrInfo) -> Vec<u8> {
    net.dev(node).mr(mr.lkey).unwrap().as_slice().to_vec()
}

/// A frame as an attacker on the segment builds it (good ICRC): every header field that a
/// receiver checks, chosen. [`Forged::from_peer`] starts from what node `peer` would send to
/// node `to`'s QP `qpn` (sim addresses, rxe's UDP source port 0xc000).
#[derive(Clone, Debug)]
pub struct Forged {
    pub src_mac: uroce_wire::EthernetAddress,
    pub src_ip: std::net::Ipv4Addr,
    pub dst_ip: std::net::Ipv4Addr,
    pub sport: u16,
    pub ecn: uroce_wire::Ecn,
    pub bth: uroce_wire::BthRepr,
    pub ext: uroce_wire::ExtHeaders,
    pub payload: Vec<u8>,
}

impl Forged {
    pub fn from_peer(peer: u8, to: u8, qpn: u32, psn: u32, opcode: uroce_wire::Opcode) -> Forged {
        use uroce_wire::*;
        Forged {
            src_mac: mac(peer),
            src_ip: ipv4(peer),
            dst_ip: ipv4(to),
            sport: 0xc000,
            ecn: Ecn::NotEct,
            bth: BthRepr {
                opcode,
                solicited: false,
                mig_req: false,
                pad_count: 0,
                pkey: 0xffff,
                fecn: false,
                becn: false,
                dest_qp: Qpn::new(qpn),
                ack_req: true,
                psn: Psn::new(psn),
            },
            ext: ExtHeaders::default(),
            payload: Vec::new(),
        }
    }

    /// The frame's bytes.
    pub fn emit(&self) -> Vec<u8> {
        use uroce_wire::*;
        let r = FrameRepr {
            eth: EthernetRepr { src_addr: self.src_mac, dst_addr: mac(2), vlan: None, ethertype: EtherType::IPV4 },
            ip: IpRepr::V4(Ipv4Repr {
                src_addr: self.src_ip,
                dst_addr: self.dst_ip,
                dscp: 0,
                ecn: self.ecn,
                ident: 0,
                dont_frag: true,
                ttl: 64,
                protocol: 17,
                payload_len: 0,
            }),
            udp: UdpRepr { src_port: self.sport, dst_port: ROCE_V2_PORT },
            roce: RoceRepr {
                bth: BthRepr { pad_count: uroce_wire::packet::pad_for(self.payload.len()), ..self.bth },
                ext: self.ext,
                payload_len: self.payload.len(),
            },
        };
        let mut b = vec![0u8; r.buffer_len()];
        r.emit(&mut b, UdpChecksum::Zero, |p| p.copy_from_slice(&self.payload)).unwrap();
        b
    }
}
