//! Replays the ibv_rc_pingpong TCP exchange of the public rxe capture pingpong_rc.pcap
//! (`fixtures/rxe-public/`, server on port 12345 there) against uroce's pingpong client and
//! server, and checks the exchanged fields against the capture's RoCE SENDs. Also a loopback
//! run over TCP.

mod common;

use std::net::{TcpListener, TcpStream};
use std::time::Duration;

use common::{Dir, ReplayStream};
use uroce_rxe_compat::pingpong::{self, PingpongDest, PingpongError, PingpongStep, DONE, MSG_LEN};
use uroce_wire::{parse_frame, Opcode};

const CAPTURE_PORT: u16 = 12345;

#[test]
fn rc_pingpong_capture_replay() {
    let dir = common::public_captures();
    let conv = common::tcp_conversation(&dir.join("pingpong_rc.pcap"), CAPTURE_PORT);
    assert_eq!(conv.sizes(Dir::ToServer), [MSG_LEN, DONE.len()], "{}", conv.shape());
    assert_eq!(conv.sizes(Dir::ToClient), [MSG_LEN], "{}", conv.shape());
    assert_eq!(&conv.client[MSG_LEN..], DONE);
    let client = PingpongDest::decode(&conv.client[..MSG_LEN]).unwrap();
    let server = PingpongDest::decode(&conv.server).unwrap();
    assert_eq!((client.qpn, client.psn), (0x21, 0x59dfd7));
    assert_eq!((server.qpn, server.psn), (0x20, 0x83be68));
    assert_eq!(server.gid[10..], [0xff, 0xff, 10, 1, 16, 61]);

    // uroce as the client against the recorded server.
    let mut fake = ReplayStream::new(&conv.server);
    let got = pingpong::client_exchange(&mut fake, &client).unwrap();
    assert_eq!(got, server);
    assert_eq!(fake.written, conv.client, "client bytes differ from the recorded rc_pingpong");
    assert_eq!(fake.writes, [MSG_LEN, DONE.len()]);
    assert_eq!(fake.unread(), 0);

    // uroce as the server against the recorded client.
    let mut fake = ReplayStream::new(&conv.client);
    let (got, pending) = pingpong::server_accept(&mut fake).unwrap();
    assert_eq!(got, client);
    pending.reply(&server).unwrap();
    assert_eq!(fake.written, conv.server);
    assert_eq!(fake.writes, [MSG_LEN]);
    assert_eq!(fake.unread(), 0);

    // The RoCE traffic: only SENDs, both ways, each side's first one carrying its advertised
    // PSN to the peer's QPN, PSNs consecutive after that. This capture ran 5 iterations of
    // 1024-byte messages (SEND_ONLY at path MTU 1024).
    let mut count = [0u32, 0];
    for (src, f) in common::roce_frames(&dir.join("pingpong_rc.pcap")) {
        let p = parse_frame(&f).unwrap();
        if !p.roce.bth.opcode.info().is_some_and(|i| i.is_request()) {
            continue;
        }
        let (i, me, peer) = if src == conv.client_ip { (0, &client, &server) } else { (1, &server, &client) };
        assert!(
            matches!(
                p.roce.bth.opcode,
                Opcode::RC_SEND_ONLY | Opcode::RC_SEND_FIRST | Opcode::RC_SEND_MIDDLE | Opcode::RC_SEND_LAST
            ),
            "rc_pingpong sends only SENDs, got {}",
            p.roce.bth.opcode
        );
        assert_eq!(p.roce.bth.dest_qp.value(), peer.qpn);
        assert_eq!(p.roce.bth.psn.value(), (me.psn + count[i]) & 0xff_ffff, "PSNs follow the advertised one");
        assert_eq!(p.payload().len(), 1024);
        count[i] += 1;
    }
    assert_eq!(count, [5, 5], "both sides send every iteration");
}

#[test]
fn loopback_client_and_server() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let server_dest = PingpongDest { lid: 0, qpn: 0x12, psn: 0xabcdef, gid: [0x11; 16] };
    let client_dest = PingpongDest { lid: 0, qpn: 0x34, psn: 0x000001, gid: [0x22; 16] };
    let srv = std::thread::spawn(move || {
        let (s, _) = listener.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let (peer, pending) = pingpong::server_accept(&s).unwrap();
        pending.reply(&server_dest).unwrap();
        peer
    });
    let c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    assert_eq!(pingpong::client_exchange(&c, &client_dest).unwrap(), server_dest);
    assert_eq!(srv.join().unwrap(), client_dest);
}

#[test]
fn errors_name_the_step() {
    let me = PingpongDest::default();
    // Server closes before replying.
    let mut fake = ReplayStream::new(&[]);
    match pingpong::client_exchange(&mut fake, &me) {
        Err(PingpongError::PeerClosed { step: PingpongStep::RecvAddress, received: 0, expected: 52 }) => {}
        other => panic!("{other:?}"),
    }
    // Garbage reply.
    let mut fake = ReplayStream::new(&[b'z'; 52]);
    assert!(matches!(
        pingpong::client_exchange(&mut fake, &me),
        Err(PingpongError::BadMessage { step: PingpongStep::RecvAddress, .. })
    ));
    // Client leaves without "done".
    let good = me.encode().unwrap();
    let mut fake = ReplayStream::new(&good);
    let (_, pending) = pingpong::server_accept(&mut fake).unwrap();
    assert!(matches!(pending.reply(&me), Err(PingpongError::PeerClosed { step: PingpongStep::Done, .. })));
    // Timeout from the stream.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let c = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let _held = listener.accept().unwrap();
    c.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
    assert!(matches!(
        pingpong::client_exchange(&c, &me),
        Err(PingpongError::Timeout { step: PingpongStep::RecvAddress })
    ));
}
