//! Replays the perftest TCP exchanges of the public rxe captures (perftest "6.20", two Linux
//! rxe hosts) against uroce's client and server: uroce's side must write byte for byte what
//! the recorded perftest wrote, one message per `write` call, and must parse the recorded
//! peer's keys and report. The RoCE frames of the same captures confirm what the key fields
//! mean (the first request of each side carries its advertised PSN to the peer's QPN, with
//! the peer's RKey and VAddr).
//!
//! Skips (with a printed reason) when ../shared is absent.

mod common;

use common::{Dir, ReplayStream, TcpConversation};
use uroce_rxe_compat::perftest::{
    BwReport, Finished, IbMtu, KeyFormat, PerftestDest, PerftestSession, PerftestVersion, Role, SessionConfig,
    TestKind, DEFAULT_PORT,
};
use uroce_wire::parse_frame;

/// What one side of a recorded exchange sent, decoded by hand (not by the session).
struct Side {
    version: [u8; 16],
    cycle_buffer: u32,
    cache_line: u32,
    mtu: IbMtu,
    key: PerftestDest,
    report: Option<BwReport>,
}

fn side(stream: &[u8], test: TestKind) -> Side {
    let version: [u8; 16] = stream[..16].try_into().unwrap();
    let cycle_buffer = u32::from_be_bytes(stream[16..20].try_into().unwrap());
    let cache_line = u32::from_be_bytes(stream[20..24].try_into().unwrap());
    let mtu = IbMtu::decode(stream[24..26].try_into().unwrap()).unwrap();
    let key = KeyFormat::Gid.decode(&stream[26..26 + 108]).unwrap();
    // The report is the 40 bytes before the final (close) 108-byte handshake.
    let report = test.exchanges_report().then(|| {
        let end = stream.len() - 108;
        BwReport::decode(&stream[end - 40..end]).unwrap()
    });
    Side { version, cycle_buffer, cache_line, mtu, key, report }
}

fn config(test: TestKind, s: &Side) -> SessionConfig {
    SessionConfig {
        version: PerftestVersion::decode(&s.version).unwrap(),
        mtu: s.mtu,
        cycle_buffer: s.cycle_buffer,
        cache_line_size: s.cache_line,
        ..SessionConfig::new(test)
    }
}

/// Run a whole session as `role` against the recorded other side.
fn run(role: Role, cfg: SessionConfig, me: &Side, peer_bytes: &[u8]) -> (ReplayStream, Vec<PerftestDest>, Finished) {
    let mut fake = ReplayStream::new(peer_bytes);
    let mut s = match role {
        Role::Client => PerftestSession::client(&mut fake, cfg),
        Role::Server => PerftestSession::server(&mut fake, cfg),
    }
    .unwrap();
    let theirs = s.exchange_keys(&[me.key]).unwrap();
    s.connected().unwrap();
    s.start().unwrap();
    let fin = s.finish(me.report.as_ref()).unwrap();
    (fake, theirs, fin)
}

fn conversation(file: &str) -> Option<TcpConversation> {
    let dir = common::shared_captures()?;
    Some(common::tcp_conversation(&dir.join(file), DEFAULT_PORT))
}

fn replay(file: &str, test: TestKind) {
    let Some(conv) = conversation(file) else {
        return;
    };
    let shape = conv.shape();
    let client = side(&conv.client, test);
    let server = side(&conv.server, test);
    assert_eq!(&client.version[..5], b"6.20\0", "{file}: the public captures are perftest 6.20");
    assert_eq!(server.version, client.version);

    // The recorded exchange has exactly the shape TestKind::script predicts.
    let mut want = vec![16, 4, 4, 2];
    for (h, _) in test.script(1) {
        if h == uroce_rxe_compat::perftest::Handshake::Report {
            want.extend([8; 5]);
        } else {
            want.push(108);
        }
    }
    assert_eq!(conv.sizes(Dir::ToServer), want, "{file}: client side {shape}");
    assert_eq!(conv.sizes(Dir::ToClient), want, "{file}: server side {shape}");

    for role in [Role::Client, Role::Server] {
        let (me, peer, mine, theirs) = match role {
            Role::Client => (&client, &server, &conv.client, &conv.server),
            Role::Server => (&server, &client, &conv.server, &conv.client),
        };
        let (fake, peer_keys, fin) = run(role, config(test, me), me, theirs);
        assert_eq!(fake.unread(), 0, "{file} {role:?}: did not read all of the peer's bytes");
        assert_eq!(&fake.written, mine, "{file} {role:?}: bytes differ from the recorded perftest");
        assert_eq!(fake.writes, want, "{file} {role:?}: one write per message");
        assert_eq!(peer_keys, vec![peer.key], "{file} {role:?}");
        assert_eq!(fin.peer_report, peer.report, "{file} {role:?}");
        assert!(!fin.peer_sent_done, "{file}: 6.20 sends no \"done\"");

        // With uroce's default version only the 16 version bytes differ.
        let cfg = SessionConfig { version: PerftestVersion::uroce_default(), ..config(test, me) };
        let (fake, peer_keys, _) = run(role, cfg, me, theirs);
        assert_eq!(&fake.written[..16], b"6.24\0\0\0\0\0\0\0\0\0\0\0\0");
        assert_eq!(&fake.written[16..], &mine[16..], "{file} {role:?}");
        assert_eq!(peer_keys, vec![peer.key]);
    }

    // Session-derived peer info matches the bytes.
    let mut fake = ReplayStream::new(&conv.server);
    let s = PerftestSession::client(&mut fake, config(test, &client)).unwrap();
    assert_eq!(s.peer().mtu, IbMtu::Mtu1024);
    assert_eq!((s.peer().cycle_buffer, s.peer().cache_line_size), (4096, 64));
    assert_eq!(s.agreed().mtu, IbMtu::Mtu1024);

    check_roce_frames(file, &conv, &client.key, &server.key);
}

/// The first request each side sent over RoCE uses the keys exchanged on TCP: BTH dest QP =
/// peer's QPN, BTH PSN = own advertised PSN, RETH/AtomicETH rkey = peer's RKey, and the
/// first remote address = peer's VAddr.
fn check_roce_frames(file: &str, conv: &TcpConversation, client: &PerftestDest, server: &PerftestDest) {
    let dir = common::shared_captures().unwrap();
    let mut seen = [false, false];
    let mut requests = 0;
    for (src, f) in common::roce_frames(&dir.join(file)) {
        let p = parse_frame(&f).unwrap();
        if !p.roce.bth.opcode.info().is_some_and(|i| i.is_request()) {
            continue; // a response or an ACK
        }
        let (idx, me, peer) = if src == conv.client_ip {
            (0, client, server)
        } else {
            assert_eq!(src, conv.server_ip);
            (1, server, client)
        };
        requests += 1;
        assert_eq!(p.roce.bth.dest_qp.value(), peer.qpn, "{file}: request to the wrong QP");
        let remote = p.roce.ext.reth.map(|r| (r.rkey, r.va)).or(p.roce.ext.atomic_eth.map(|a| (a.rkey, a.va)));
        if let Some((rkey, va)) = remote {
            assert_eq!(rkey, peer.rkey, "{file}: rkey");
            assert!(va >= peer.vaddr, "{file}: va {va:#x} below the peer's buffer {:#x}", peer.vaddr);
            if !seen[idx] {
                assert_eq!(va, peer.vaddr, "{file}: first remote address");
            }
        }
        if !seen[idx] {
            assert_eq!(p.roce.bth.psn.value(), me.psn, "{file}: first PSN is the advertised one");
            seen[idx] = true;
        }
    }
    assert!(requests > 0 && seen[0], "{file}: no RoCE request from the client");
}

#[test]
fn write_bw() {
    replay("rdma_write_bw.pcap", TestKind::WriteBw);
}

#[test]
fn read_bw() {
    replay("rdma_read_bw.pcap", TestKind::ReadBw);
}

#[test]
fn send_bw() {
    replay("rdma_send_bw.pcap", TestKind::SendBw);
}

#[test]
fn atomic_bw() {
    replay("rdma_atomic_bw.pcap", TestKind::AtomicBw);
}

#[test]
fn write_lat() {
    replay("rdma_write_lat.pcap", TestKind::WriteLat);
}

#[test]
fn read_lat() {
    replay("rdma_read_lat.pcap", TestKind::ReadLat);
}

/// Field values decoded from the write_bw capture, written out so a regression in both the
/// codec and the test's own decoding cannot cancel out.
#[test]
fn write_bw_recorded_values() {
    let Some(conv) = conversation("rdma_write_bw.pcap") else {
        return;
    };
    let c = side(&conv.client, TestKind::WriteBw);
    let s = side(&conv.server, TestKind::WriteBw);
    assert_eq!((c.key.qpn, c.key.psn, c.key.rkey, c.key.vaddr), (0x1d, 0x533a2f, 0xe1c, 0x5e13_5cf9_b000));
    assert_eq!((s.key.qpn, s.key.psn, s.key.rkey, s.key.vaddr), (0x1b, 0x17ae1a, 0xce6, 0x5e6b_89b9_6000));
    assert_eq!(c.key.gid[10..], [0xff, 0xff, 10, 1, 16, 62]);
    assert_eq!(s.key.gid[10..], [0xff, 0xff, 10, 1, 16, 61]);
    assert_eq!((c.key.out_reads, c.key.lid, c.key.srqn), (1, 0, 0));
    let r = c.report.unwrap();
    assert_eq!((r.size, r.iters), (3000, 5)); // -s 3000 -n 5
    assert!(r.bw_avg > 0.0 && r.bw_peak >= r.bw_avg, "{r:?}");
    // read_bw / atomic_bw advertise rxe's max_qp_rd_atom (128) as out_reads.
    let Some(conv) = conversation("rdma_read_bw.pcap") else {
        return;
    };
    assert_eq!(side(&conv.client, TestKind::ReadBw).key.out_reads, 0x80);
}
