//! Replays recorded perftest TCP exchanges against uroce's client and server: uroce's side must
//! write byte for byte what the recorded perftest wrote, one message per `write` call, and must
//! parse the recorded peer's keys and report. The RoCE frames of the same captures confirm what
//! the key fields mean (the first request of each side carries its advertised PSN to the
//! peer's QPN, with the peer's RKey and VAddr).
//!
//! Recordings: the public rxe captures (`fixtures/rxe-public/`: perftest "6.20", two Linux rxe
//! hosts, one run per file, bw and lat tests) and every perftest run of the project's own
//! fixtures (`fixtures/rxe-*.pcap`: bookworm's perftest 4.5 = "6.06", which writes `"done"`,
//! and trixie's 25.01 = "6.24"; the bw tests over IPv4, IPv6 and link-local GIDs).

mod common;

use std::net::{IpAddr, Ipv6Addr};

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
    // perftest <= 6.16 writes "done\0" after the close handshake (not in the latency tests
    // without one).
    let stream = match PerftestVersion::decode(&version).unwrap().sends_done() && test.has_close_handshake() {
        true => stream.strip_suffix(b"done\0").expect("a \"done\" at the end"),
        false => stream,
    };
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

fn conversation(file: &str) -> TcpConversation {
    common::tcp_conversation(&common::public_captures().join(file), DEFAULT_PORT)
}

/// Replay one public capture's single run (perftest "6.20").
fn replay(file: &str, test: TestKind) {
    let path = common::public_captures().join(file);
    let conv = conversation(file);
    let frames = common::roce_frames_indexed(&path);
    let v = replay_run(file, &conv, &frames, test);
    assert_eq!(v.text(), b"6.20", "{file}: the public captures are perftest 6.20");
}

/// Replay one recorded run against uroce's client and server; returns the recorded version.
fn replay_run(
    file: &str,
    conv: &TcpConversation,
    frames: &[(usize, IpAddr, Vec<u8>)],
    test: TestKind,
) -> PerftestVersion {
    let shape = conv.shape();
    let client = side(&conv.client, test);
    let server = side(&conv.server, test);
    assert_eq!(server.version, client.version, "{file}");
    let version = PerftestVersion::decode(&client.version).unwrap();
    let done = version.sends_done() && test.has_close_handshake();

    // The recorded exchange has exactly the shape TestKind::script predicts.
    let mut want = vec![16, 4, 4, 2];
    for (h, _) in test.script(1) {
        if h == uroce_rxe_compat::perftest::Handshake::Report {
            want.extend([8; 5]);
        } else {
            want.push(108);
        }
    }
    if done {
        want.push(5);
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
        assert_eq!(fin.peer_sent_done, done, "{file}: \"done\" from a {:?} peer", version.text());

        // With uroce's default version only the 16 version bytes differ (and uroce's "6.24"
        // writes no "done").
        let cfg = SessionConfig { version: PerftestVersion::uroce_default(), ..config(test, me) };
        let (fake, peer_keys, _) = run(role, cfg, me, theirs);
        assert_eq!(&fake.written[..16], b"6.24\0\0\0\0\0\0\0\0\0\0\0\0");
        let mine_no_done = if done { &mine[..mine.len() - 5] } else { &mine[..] };
        assert_eq!(&fake.written[16..], &mine_no_done[16..], "{file} {role:?}");
        assert_eq!(peer_keys, vec![peer.key]);
    }

    // Session-derived peer info matches the bytes.
    let mut fake = ReplayStream::new(&conv.server);
    let s = PerftestSession::client(&mut fake, config(test, &client)).unwrap();
    assert_eq!(s.peer().mtu, IbMtu::Mtu1024);
    assert_eq!((s.peer().cycle_buffer, s.peer().cache_line_size), (4096, 64));
    assert_eq!(s.agreed().mtu, IbMtu::Mtu1024);

    let run_frames: Vec<_> = frames.iter().filter(|(no, _, _)| conv.frames.contains(no)).collect();
    check_roce_frames(file, &run_frames, &client.key, &server.key);
    version
}

/// The RoCE address of a perftest GID (IPv4-mapped or IPv6).
fn gid_addr(gid: &[u8; 16]) -> IpAddr {
    let v6 = Ipv6Addr::from(*gid);
    v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4)
}

/// The first request each side sent over RoCE uses the keys exchanged on TCP: BTH dest QP =
/// peer's QPN, BTH PSN = own advertised PSN, RETH/AtomicETH rkey = peer's RKey, and the
/// first remote address = peer's VAddr. Each side is known by its GID's address.
fn check_roce_frames(file: &str, frames: &[&(usize, IpAddr, Vec<u8>)], client: &PerftestDest, server: &PerftestDest) {
    let (client_ip, server_ip) = (gid_addr(&client.gid), gid_addr(&server.gid));
    let mut seen = [false, false];
    let mut requests = 0;
    for (_, src, f) in frames {
        let p = parse_frame(f).unwrap();
        if !p.roce.bth.opcode.info().is_some_and(|i| i.is_request()) {
            continue; // a response or an ACK
        }
        let (idx, me, peer) = if *src == client_ip {
            (0, client, server)
        } else {
            assert_eq!(*src, server_ip, "{file}: a request from neither GID");
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

/// The perftest test a recorded run was, from its RoCE requests (the fixtures hold bw tests
/// only); `None` for a run with immediate data (`--write_with_imm`, outside the session's scope).
fn kind_of(frames: &[&(usize, IpAddr, Vec<u8>)]) -> Option<TestKind> {
    use uroce_wire::opcode::Operation;
    let mut kinds = std::collections::HashSet::new();
    for (_, _, f) in frames {
        let p = parse_frame(f).unwrap();
        let info = p.roce.bth.opcode.info().unwrap();
        if !info.is_request() {
            continue;
        }
        kinds.insert(match info.operation {
            Operation::Write => TestKind::WriteBw,
            Operation::ReadRequest => TestKind::ReadBw,
            Operation::Send => TestKind::SendBw,
            Operation::FetchAdd | Operation::CompareSwap => TestKind::AtomicBw,
            Operation::WriteWithImm | Operation::SendWithImm => return None,
            other => panic!("unexpected request {other:?} in a perftest run"),
        });
    }
    assert_eq!(kinds.len(), 1, "one test per run: {kinds:?}");
    kinds.into_iter().next()
}

/// Every perftest run (TCP 18515) of the project's own fixtures, both generations, replayed.
#[test]
fn every_perftest_run_of_the_fixtures() {
    let mut replayed: std::collections::BTreeMap<(String, String), usize> = Default::default();
    let mut with_imm = 0;
    let mut files = 0;
    for e in std::fs::read_dir(common::fixtures_dir()).unwrap() {
        let path = e.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let Some(flavour) = name.strip_prefix("rxe-").and_then(|n| n.split('-').next()) else { continue };
        if !name.ends_with(".pcap") {
            continue;
        }
        files += 1;
        let want_version: &[u8] = match flavour {
            "bookworm" => b"6.06", // perftest 4.5+0.17
            "trixie" => b"6.24",   // perftest 25.01.0+0.80
            other => panic!("{name}: unknown flavour {other}"),
        };
        let frames = common::roce_frames_indexed(&path);
        for conv in common::tcp_conversations(&path, DEFAULT_PORT) {
            let run: Vec<_> = frames.iter().filter(|(no, _, _)| conv.frames.contains(no)).collect();
            let Some(test) = kind_of(&run) else {
                with_imm += 1;
                continue;
            };
            let label = format!("{name} (client port run at frame {})", conv.frames.start + 1);
            let v = replay_run(&label, &conv, &frames, test);
            assert_eq!(v.text(), want_version, "{label}");
            *replayed.entry((flavour.to_string(), format!("{test:?}"))).or_default() += 1;
        }
    }
    eprintln!(
        "perftest runs replayed from {files} fixtures: {replayed:?}; {with_imm} --write_with_imm runs not replayed"
    );
    assert_eq!(files, 20, "fixtures");
    // Per generation: WRITE 4 sizes + 1 (IPv6) + 1 (link-local), READ 4 + 1 + 1, SEND 4 + 1 + 1
    // + 1 (RNR), atomic 2 + 1 (IPv6).
    for flavour in ["bookworm", "trixie"] {
        for (test, n) in [(TestKind::WriteBw, 6), (TestKind::ReadBw, 6), (TestKind::SendBw, 7), (TestKind::AtomicBw, 3)]
        {
            let got = replayed.get(&(flavour.to_string(), format!("{test:?}")));
            assert_eq!(got, Some(&n), "{flavour} {test:?}: {replayed:?}");
        }
    }
    assert_eq!(with_imm, 2, "trixie's two ib_write_bw --write_with_imm runs");
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
    let conv = conversation("rdma_write_bw.pcap");
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
    let conv = conversation("rdma_read_bw.pcap");
    assert_eq!(side(&conv.client, TestKind::ReadBw).key.out_reads, 0x80);
}
