//! The CM MADs of the public rxe captures (`rdma_cm.pcap`: two rdma_cm connections and their
//! teardown, one a simultaneous DREQ; `rping.pcap`: one rping run): every one decodes, its fields
//! are the ones Wireshark's CM dissector shows (but one, below), and it re-emits to the same 256
//! bytes. What Linux's CM does with transaction IDs is asserted too, since a peer that answers
//! rxe must do the same.

mod common;

use uroce_wire::cm::ip::{self, IpCmHeader, PortSpace};
use uroce_wire::cm::{CmMessage, CmSummary};
use uroce_wire::mad::{Mad, GSI_QKEY, MAD_LEN};
use uroce_wire::{parse_frame, Opcode};

/// (frame number from 1, source IP, TID, MAD bytes) of every MAD in a public capture.
fn mads(name: &str) -> Vec<(usize, std::net::IpAddr, u64, Vec<u8>)> {
    let path =
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../rxe-compat/fixtures/rxe-public").join(name);
    let mut out = Vec::new();
    for (i, f) in common::read_pcap(&path).iter().enumerate() {
        if !common::is_roce(f) {
            continue;
        }
        let p = parse_frame(f).unwrap();
        if p.roce.bth.dest_qp.value() != 1 {
            continue;
        }
        assert_eq!(p.roce.bth.opcode, Opcode::UD_SEND_ONLY);
        let deth = p.roce.ext.deth.unwrap();
        assert_eq!((deth.qkey, deth.src_qp.value()), (GSI_QKEY, 1), "frame {}", i + 1);
        let mad = Mad::parse(p.payload(), p.offsets.payload).unwrap();
        out.push((i + 1, p.ip.src_addr(), mad.header.tid, p.payload().to_vec()));
    }
    out
}

fn names(m: &[(usize, std::net::IpAddr, u64, Vec<u8>)]) -> Vec<&'static str> {
    m.iter()
        .map(|(_, _, _, b)| {
            let mad = Mad::parse(b, 0).unwrap();
            CmMessage::parse(&mad, 0).unwrap().attr_id().name()
        })
        .collect()
}

#[test]
fn every_cm_mad_decodes_and_re_emits_to_its_bytes() {
    let mut n = 0;
    for file in ["rdma_cm.pcap", "rping.pcap"] {
        for (frame, _, tid, b) in mads(file) {
            let mad = Mad::parse(&b, 0).unwrap();
            let msg = CmMessage::parse(&mad, 0).unwrap();
            let mut out = [0u8; MAD_LEN];
            msg.emit(tid, mad.header.attr_mod, &mut out).unwrap();
            assert_eq!(out[..], b[..], "{file} frame {frame}: {}", CmSummary(&msg));
            n += 1;
        }
    }
    assert_eq!(n, 17);
}

#[test]
fn the_exchanges_are_the_ones_wireshark_shows() {
    let cm = mads("rdma_cm.pcap");
    assert_eq!(names(&cm), ["REQ", "REP", "RTU", "REQ", "REP", "RTU", "DREQ", "DREQ", "DREP", "DREP", "DREQ", "DREP"]);
    assert_eq!(names(&mads("rping.pcap")), ["REQ", "REP", "RTU", "DREQ", "DREP"]);

    // Linux's CM: REP and RTU carry the REQ's TID, a DREP its DREQ's; a DREQ gets a new one.
    let tid = |i: usize| cm[i].2;
    assert_eq!((tid(1), tid(2)), (tid(0), tid(0)));
    assert_ne!(tid(6), tid(0));
    assert_eq!(tid(8), tid(6), "frame 93 answers frame 91");
    assert_eq!(tid(9), tid(7), "frame 94 answers frame 92");
    assert_eq!(tid(11), tid(10));
}

#[test]
fn req_and_rep_fields_are_wiresharks() {
    let cm = mads("rdma_cm.pcap");
    let (frame, src, _, b) = &cm[0];
    assert_eq!((*frame, src.to_string().as_str()), (1, "10.1.16.62"));
    let mad = Mad::parse(b, 0).unwrap();
    let CmMessage::Req(r) = CmMessage::parse(&mad, 0).unwrap() else { panic!() };
    assert_eq!(r.local_comm_id, 0x64c0_c56d);
    assert_eq!(ip::port_of(r.service_id), Some((PortSpace::Tcp, 18515)));
    assert_eq!(r.local_ca_guid, 0x0250_56ff_fea7_7d03);
    assert_eq!((r.local_qkey, r.local_qpn, r.responder_resources, r.initiator_depth), (0, 0x3d, 0, 0));
    assert_eq!((r.remote_cm_response_timeout, r.transport, r.e2e_flow_control), (20, 0, false));
    assert_eq!((r.starting_psn, r.local_cm_response_timeout, r.retry_count), (0x7c_c204, 20, 7));
    assert_eq!((r.pkey, r.path_mtu, r.rdc_exists, r.rnr_retry_count), (0xffff, 3, false, 7));
    assert_eq!((r.max_cm_retries, r.srq, r.extended_transport), (15, false, 0));
    let p = r.primary;
    assert_eq!((p.local_lid, p.remote_lid), (0xffff, 0xffff));
    assert_eq!(p.local_gid.to_string(), "::ffff:10.1.16.62");
    assert_eq!(p.remote_gid.to_string(), "::ffff:10.1.16.61");
    // Wireshark 4.0's dissector shows flow label 0x0091a and packet rate 0x11 here. The bytes (data offset 88: 91 a3 c0 00) hold 0x91a3c and rate 0, which is rdma_cm's
    // flow label for this connection: (sport * 31 + dport) & 0xfffff, `rdma_calc_flow_label`.
    assert_eq!(p.flow_label, (0xccf7 * 31 + 18515) & 0xf_ffff);
    assert_eq!((p.flow_label, p.packet_rate, p.traffic_class, p.hop_limit), (0x91a3c, 0, 0, 64));
    assert_eq!((p.sl, p.subnet_local, p.local_ack_timeout), (0, false, 17));
    assert_eq!(r.alternate, uroce_wire::cm::PathRepr::NONE);
    let h = IpCmHeader::parse(r.private_data, 0).unwrap();
    assert_eq!(h.version, 0);
    assert_eq!(h.src_port, 0xccf7);
    assert_eq!((h.src.to_string(), h.dst.to_string()), ("10.1.16.62".into(), "10.1.16.61".into()));

    let mad = Mad::parse(&cm[1].3, 0).unwrap();
    let CmMessage::Rep(p) = CmMessage::parse(&mad, 0).unwrap() else { panic!() };
    assert_eq!((p.ids.local, p.ids.remote), (0x8988_f456, 0x64c0_c56d));
    assert_eq!((p.local_qkey, p.local_qpn, p.local_eecn, p.starting_psn), (0, 0x3b, 0, 0x72_7d6d));
    assert_eq!((p.responder_resources, p.initiator_depth, p.target_ack_delay), (0, 0, 15));
    assert_eq!((p.failover_accepted, p.e2e_flow_control, p.rnr_retry_count, p.srq), (0, false, 7, false));
    assert_eq!(p.local_ca_guid, 0x0250_56ff_fea7_129f);
    let s = CmSummary(&CmMessage::Rep(p)).to_string();
    assert_eq!(s, "CM REP comm=0x8988f456/0x64c0c56d qpn=0x00003b psn=0x727d6d");
}
