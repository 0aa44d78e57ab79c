use super::*;
use crate::mad::{Mad, MAD_LEN};
use proptest::prelude::*;

const ATTRS: [u16; 12] =
    [0x0001, 0x0010, 0x0011, 0x0012, 0x0013, 0x0014, 0x0015, 0x0016, 0x0017, 0x0018, 0x0019, 0x001a];

fn mad_with(attr: u16, data: &[u8; DATA_LEN]) -> [u8; MAD_LEN] {
    let mut m = [0u8; MAD_LEN];
    let h = MadHeaderRepr {
        base_version: 1,
        mgmt_class: MgmtClass::CM,
        class_version: 2,
        method: Method::SEND,
        status: 0,
        class_specific: 0,
        tid: 7,
        attr_id: attr,
        attr_mod: 0,
    };
    h.emit(&mut m).unwrap();
    m[HEADER_LEN..].copy_from_slice(data);
    m
}

proptest! {
    /// Any data under any attribute parses or fails typed; what parses re-emits to bytes that
    /// parse to the same message (reserved bits are the only bytes that may change).
    #[test]
    fn any_data_round_trips(data in any::<[u8; DATA_LEN]>(), a in 0usize..ATTRS.len()) {
        let m = mad_with(ATTRS[a], &data);
        let mad = Mad::parse(&m, 0).unwrap();
        match CmMessage::parse(&mad, 0) {
            Ok(msg) => {
                let mut out = [0u8; MAD_LEN];
                msg.emit(7, 0, &mut out).unwrap();
                let again = Mad::parse(&out, 0).unwrap();
                prop_assert_eq!(CmMessage::parse(&again, 0).unwrap(), msg);
                prop_assert_eq!(&out[..HEADER_LEN], &m[..HEADER_LEN]);
            }
            Err(e) => {
                let unsupported = matches!(e, Error::Unsupported { layer: Layer::Cm, .. });
                prop_assert!(unsupported, "{:?}", e);
            }
        }
    }
}

#[test]
fn not_a_cm_message_is_a_typed_error() {
    let d = [0u8; DATA_LEN];
    let check = |patch: &dyn Fn(&mut [u8; MAD_LEN]), field: &str| {
        let mut m = mad_with(0x0010, &d);
        patch(&mut m);
        let mad = Mad::parse(&m, 0).unwrap();
        match CmMessage::parse(&mad, 42) {
            Err(Error::BadField { layer: Layer::Cm, offset: 42, field: f, .. }) => assert_eq!(f, field),
            other => panic!("{field}: {other:?}"),
        }
    };
    check(&|m| m[1] = 0x03, "MgmtClass");
    check(&|m| m[2] = 1, "ClassVersion");
    check(&|m| m[3] = 0x01, "Method");
    check(&|m| m[17] = 0x20, "AttributeID");
    let m = mad_with(0x0019, &d);
    assert_eq!(
        CmMessage::parse(&Mad::parse(&m, 0).unwrap(), 3),
        Err(Error::Unsupported { layer: Layer::Cm, offset: 3, what: "LAP" })
    );
}

#[test]
fn every_field_lands_where_ibta_puts_it() {
    let pd = [0xa5u8; 10];
    let req = ReqRepr {
        local_comm_id: 0x0102_0304,
        service_id: ip::service_id(ip::PortSpace::Tcp, 18515),
        local_ca_guid: 0x1122_3344_5566_7788,
        local_qkey: 0x0bad_cafe,
        local_qpn: 0x00ab_cdef,
        responder_resources: 16,
        local_eecn: 0x12_3456,
        initiator_depth: 15,
        remote_eecn: 0x65_4321,
        remote_cm_response_timeout: 20,
        transport: 1,
        e2e_flow_control: true,
        starting_psn: 0x7c_c204,
        local_cm_response_timeout: 19,
        retry_count: 6,
        pkey: 0xffff,
        path_mtu: 3,
        rdc_exists: true,
        rnr_retry_count: 7,
        max_cm_retries: 15,
        srq: true,
        extended_transport: 0,
        primary: PathRepr {
            local_lid: 0xffff,
            remote_lid: 0xfffe,
            local_gid: "::ffff:10.1.16.62".parse().unwrap(),
            remote_gid: "::ffff:10.1.16.61".parse().unwrap(),
            flow_label: 0x0091a,
            packet_rate: 0x11,
            traffic_class: 0x68,
            hop_limit: 64,
            sl: 5,
            subnet_local: true,
            local_ack_timeout: 17,
        },
        alternate: PathRepr::NONE,
        private_data: &pd,
    };
    let mut m = [0xffu8; MAD_LEN];
    CmMessage::Req(req).emit(0x1234, 0, &mut m).unwrap();
    let d = &m[HEADER_LEN..];
    assert_eq!(&d[0..4], &[1, 2, 3, 4]);
    assert_eq!(&d[4..8], &[0; 4]);
    assert_eq!(&d[8..16], &[0, 0, 0, 0, 0x01, 0x06, 0x48, 0x53]);
    assert_eq!(&d[32..36], &[0xab, 0xcd, 0xef, 16]);
    assert_eq!(&d[36..44], &[0x12, 0x34, 0x56, 15, 0x65, 0x43, 0x21, (20 << 3) | (1 << 1) | 1]);
    assert_eq!(&d[44..52], &[0x7c, 0xc2, 0x04, (19 << 3) | 6, 0xff, 0xff, 0x3f, 0xf8]);
    assert_eq!(&d[52..56], &[0xff, 0xff, 0xff, 0xfe]);
    assert_eq!(&d[88..96], &[0x00, 0x91, 0xa0, 0x11, 0x68, 64, 0x58, 17 << 3]);
    assert_eq!(&d[96..140], &[0u8; 44]);
    assert_eq!(&d[140..150], &pd);
    assert_eq!(&d[150..], &[0u8; 82]);
    let back = CmMessage::parse(&Mad::parse(&m, 0).unwrap(), 0).unwrap();
    let CmMessage::Req(r) = back else { panic!("{back:?}") };
    assert_eq!(ReqRepr { private_data: &pd, ..r }, req);
    assert_eq!(r.private_data.len(), private_len::REQ);

    let rep = RepRepr {
        ids: CommIds { local: 0x8988_f456, remote: 0x64c0_c56d },
        local_qkey: 0,
        local_qpn: 0x3b,
        local_eecn: 0,
        starting_psn: 0x72_7d6d,
        responder_resources: 1,
        initiator_depth: 2,
        target_ack_delay: 15,
        failover_accepted: 2,
        e2e_flow_control: false,
        rnr_retry_count: 7,
        srq: true,
        local_ca_guid: 0x0250_56ff_fea7_129f,
        private_data: &[],
    };
    CmMessage::Rep(rep).emit(1, 0, &mut m).unwrap();
    let d = &m[HEADER_LEN..];
    assert_eq!(&d[12..16], &[0, 0, 0x3b, 0]);
    assert_eq!(&d[20..28], &[0x72, 0x7d, 0x6d, 0, 1, 2, (15 << 3) | (2 << 1), 0xf0]);

    let rej = RejRepr {
        ids: CommIds { local: 5, remote: 6 },
        message: MsgRef::Rep,
        ari_len: 3,
        reason: RejReason::STALE_CONN,
        ari: &[9, 9, 9],
        private_data: &[1],
    };
    CmMessage::Rej(rej).emit(1, 0, &mut m).unwrap();
    let d = &m[HEADER_LEN..];
    assert_eq!(&d[8..15], &[0x40, 3 << 1, 0, 10, 9, 9, 9]);
    assert_eq!(d[84], 1);

    let mra = MraRepr {
        ids: CommIds { local: 5, remote: 6 },
        message: MsgRef::Other,
        service_timeout: 31,
        private_data: &[],
    };
    CmMessage::Mra(mra).emit(1, 0, &mut m).unwrap();
    assert_eq!(&m[HEADER_LEN + 8..HEADER_LEN + 10], &[0x80, 0xf8]);

    let dreq = DreqRepr { ids: CommIds { local: 5, remote: 6 }, remote_qpn: 0x01_0203, private_data: &[] };
    CmMessage::Dreq(dreq).emit(1, 0, &mut m).unwrap();
    assert_eq!(&m[HEADER_LEN + 8..HEADER_LEN + 12], &[1, 2, 3, 0]);

    let sidr = SidrRepRepr {
        request_id: 9,
        status: sidr_status::SUCCESS,
        add_info_len: 0,
        qpn: 0x12,
        service_id: ip::service_id(ip::PortSpace::Udp, 7174),
        qkey: ip::UDP_QKEY,
        additional_info: &[],
        private_data: &[],
    };
    CmMessage::SidrRep(sidr).emit(1, 0, &mut m).unwrap();
    let d = &m[HEADER_LEN..];
    assert_eq!(&d[8..24], &[0, 0, 0x12, 0, 0, 0, 0, 0, 0x01, 0x11, 0x1c, 0x06, 0x01, 0x23, 0x45, 0x67]);
}

#[test]
fn oversized_fields_are_refused_at_emit() {
    let mut m = [0u8; MAD_LEN];
    let big = [0u8; private_len::RTU + 1];
    let rtu = CmMessage::Rtu(SimpleRepr { ids: CommIds::default(), private_data: &big });
    assert!(matches!(rtu.emit(0, 0, &mut m), Err(Error::InvalidRepr { .. })));
    let ok = CmMessage::Rtu(SimpleRepr { ids: CommIds::default(), private_data: &big[..private_len::RTU] });
    assert!(ok.emit(0, 0, &mut m).is_ok());
    assert_eq!(ok.emit(0, 0, &mut m[..255]), Err(Error::BufferTooSmall { need: 256, have: 255 }));
    let rej = RejRepr {
        ids: CommIds::default(),
        message: MsgRef::Req,
        ari_len: 0,
        reason: RejReason::TIMEOUT,
        ari: &[0; 73],
        private_data: &[],
    };
    assert!(matches!(CmMessage::Rej(rej).emit(0, 0, &mut m), Err(Error::InvalidRepr { .. })));
}

proptest! {
    /// The steering rule (`steer::receiver`, fixed offsets by attribute) names the same receiver
    /// the parsed message does: a REQ's or SIDR REQ's service ID, a SIDR REP's request ID, every
    /// other message's remote communication ID.
    #[test]
    fn steering_reads_the_receiver_the_parser_reads(data in any::<[u8; DATA_LEN]>(), a in 0usize..ATTRS.len()) {
        let m = mad_with(ATTRS[a], &data);
        let mad = Mad::parse(&m, 0).unwrap();
        let by_offset = steer::receiver(&mad).unwrap();
        if let Ok(msg) = CmMessage::parse(&mad, 0) {
            let parsed = match msg {
                CmMessage::Req(r) => Receiver::Service(r.service_id),
                CmMessage::SidrReq(r) => Receiver::Service(r.service_id),
                CmMessage::SidrRep(r) => Receiver::Id(r.request_id),
                other => Receiver::Id(other.ids().remote),
            };
            prop_assert_eq!(by_offset, parsed);
        }
        // and in the datagram: the offsets the steering program reads
        let mut udp = [0u8; steer::MAD_IN_UDP + MAD_LEN];
        udp[steer::MAD_IN_UDP..].copy_from_slice(&m);
        prop_assert_eq!(udp[steer::MGMT_CLASS_IN_UDP], MgmtClass::CM.0);
        prop_assert_eq!(u16::from_be_bytes([udp[steer::ATTR_ID_IN_UDP], udp[steer::ATTR_ID_IN_UDP + 1]]), ATTRS[a]);
        prop_assert_eq!(&udp[steer::DATA_IN_UDP..], &data[..]);
    }
}

#[test]
fn a_mad_of_another_class_names_no_receiver() {
    let mut m = mad_with(0x0010, &[0; DATA_LEN]);
    m[1] = 0x04; // PerfMgt
    assert_eq!(steer::receiver(&Mad::parse(&m, 0).unwrap()), None);
}
