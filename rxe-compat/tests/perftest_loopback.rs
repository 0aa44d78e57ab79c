//! uroce's perftest client against uroce's perftest server over real TCP on 127.0.0.1 (an
//! ephemeral port), for every test kind, 1 and 3 QPs, and mixed versions; plus scripted peers
//! for the version rules and the error paths.

mod common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::thread;
use std::time::Duration;

use common::ReplayStream;
use uroce_rxe_compat::perftest::{
    BwReport, ConfigError, Finished, Handshake, IbMtu, KeyFormat, PerftestDest, PerftestError, PerftestSession,
    PerftestVersion, Phase, SessionConfig, Step, TestKind,
};

const TIMEOUT: Duration = Duration::from_secs(10);

fn dests(seed: u32, n: usize) -> Vec<PerftestDest> {
    (0..n as u32)
        .map(|i| PerftestDest {
            lid: 0,
            out_reads: 0x80,
            qpn: 0x100 * seed + i,
            psn: (0x12_3456 * (seed + 1) + i) & 0xff_ffff,
            rkey: 0x1000 * seed + i,
            vaddr: 0x7f00_0000_0000 + u64::from(seed) * 0x10_0000 + u64::from(i) * 0x1000,
            gid: [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, seed as u8],
            srqn: 0,
            tail_markers_vaddr: 0,
        })
        .collect()
}

struct Outcome {
    peer_keys: Vec<PerftestDest>,
    agreed_mtu: IbMtu,
    agreed_cycle: u32,
    fin: Finished,
}

fn drive(
    mut s: PerftestSession<TcpStream>,
    mine: &[PerftestDest],
    report: Option<BwReport>,
) -> Result<Outcome, PerftestError> {
    assert_eq!(s.phase(), Phase::Setup);
    let peer_keys = s.exchange_keys(mine)?;
    assert_eq!(s.phase(), Phase::KeysExchanged);
    s.connected()?;
    s.start()?;
    assert_eq!(s.phase(), Phase::Started);
    let (agreed_mtu, agreed_cycle) = (s.agreed().mtu, s.agreed().cycle_buffer);
    let fin = s.finish(report.as_ref())?;
    Ok(Outcome { peer_keys, agreed_mtu, agreed_cycle, fin })
}

fn pair(
    client_cfg: SessionConfig,
    server_cfg: SessionConfig,
) -> (Result<Outcome, PerftestError>, Result<Outcome, PerftestError>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let n = server_cfg.num_qps;
    let server = thread::spawn(move || {
        let (s, _) = listener.accept().unwrap();
        s.set_read_timeout(Some(TIMEOUT)).unwrap();
        let sess = PerftestSession::server(s, server_cfg)?;
        drive(sess, &dests(2, n), None)
    });
    let c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(TIMEOUT)).unwrap();
    let client_report =
        BwReport { size: 65536, iters: 5000, bw_peak: 11.5, bw_avg: 10.25, msg_rate_avg: 0.0195, per_port: None };
    let client = PerftestSession::client(c, client_cfg)
        .and_then(|s| drive(s, &dests(1, client_cfg.num_qps), Some(client_report)));
    (client, server.join().unwrap())
}

#[test]
fn every_test_kind_over_tcp() {
    for test in TestKind::ALL {
        for qps in [1, 3] {
            let mut cc = SessionConfig::new(test);
            cc.num_qps = qps;
            cc.mtu = IbMtu::Mtu4096;
            cc.cycle_buffer = 8192;
            let mut sc = SessionConfig::new(test);
            sc.num_qps = qps;
            let (c, s) = pair(cc, sc);
            let (c, s) = (c.unwrap(), s.unwrap());
            assert_eq!(c.peer_keys, dests(2, qps), "{test:?} q{qps}");
            assert_eq!(s.peer_keys, dests(1, qps), "{test:?} q{qps}");
            // min MTU, max cycle buffer, on both sides.
            assert_eq!((c.agreed_mtu, s.agreed_mtu), (IbMtu::Mtu1024, IbMtu::Mtu1024));
            assert_eq!((c.agreed_cycle, s.agreed_cycle), (8192, 8192));
            if test.exchanges_report() {
                // The server gets the client's measurement; the client gets the server's zeros.
                assert_eq!(s.fin.peer_report.unwrap().iters, 5000, "{test:?}");
                assert_eq!(s.fin.peer_report.unwrap().bw_avg, 10.25);
                assert_eq!(c.fin.peer_report, Some(BwReport::default()));
            } else {
                assert_eq!((c.fin.peer_report, s.fin.peer_report), (None, None), "{test:?}");
            }
            assert!(!c.fin.peer_sent_done && !s.fin.peer_sent_done);
        }
    }
}

/// A "6.06" side (bookworm's perftest 4.5) writes "done" after the close handshake and the
/// other side reads it; the 6.24 side writes none.
#[test]
fn old_version_done_is_sent_and_read() {
    for test in TestKind::ALL {
        let old = SessionConfig { version: PerftestVersion::new("6.06").unwrap(), ..SessionConfig::new(test) };
        let new = SessionConfig::new(test);
        for (cc, sc, client_old) in [(old, new, true), (new, old, false)] {
            let (c, s) = pair(cc, sc);
            let (c, s) = (c.unwrap(), s.unwrap());
            let expect = test.has_close_handshake();
            assert_eq!(s.fin.peer_sent_done, expect && client_old, "{test:?}");
            assert_eq!(c.fin.peer_sent_done, expect && !client_old, "{test:?}");
        }
    }
}

#[test]
fn per_port_reports_and_other_key_formats() {
    for f in [KeyFormat::Plain, KeyFormat::GidDv, KeyFormat::Legacy] {
        let cfg = SessionConfig { key_format: f, report_per_port: true, ..SessionConfig::new(TestKind::WriteBw) };
        let (c, s) = pair(cfg, cfg);
        let (c, s) = (c.unwrap(), s.unwrap());
        let mut want = dests(2, 1);
        if f == KeyFormat::Legacy {
            want[0].srqn = 0;
        }
        if !f.has_gid() {
            want[0].gid = [0; 16];
        }
        assert_eq!(c.peer_keys, want, "{f:?}");
        assert!(s.fin.peer_report.unwrap().per_port.is_some());
    }
}

/// Replies scripted by hand: what a stock peer of another version sends.
fn scripted_peer(version: &[u8; 16], rest: &[u8]) -> ReplayStream {
    let mut v = version.to_vec();
    v.extend_from_slice(&4096u32.to_be_bytes());
    v.extend_from_slice(&64u32.to_be_bytes());
    v.extend_from_slice(b"3\0");
    v.extend_from_slice(rest);
    ReplayStream::new(&v)
}

/// A perftest 6.29 peer skips negotiate_params because we advertise 6.24 (< 6.28): its next
/// message after the MTU is a key message, and we must send ours, not a negotiation struct.
#[test]
fn new_peer_does_not_negotiate_with_us() {
    let peer_key = KeyFormat::Gid.encode(&dests(2, 1)[0]).unwrap();
    let mut rest = Vec::new();
    for (h, _) in TestKind::WriteBw.script(1) {
        if h == Handshake::Report {
            rest.extend_from_slice(&[0u8; 40]);
        } else {
            rest.extend_from_slice(&peer_key);
        }
    }
    let mut fake = scripted_peer(b"6.29\0\0\0\0\0\0\0\0\0\0\0\0", &rest);
    let mut s = PerftestSession::client(&mut fake, SessionConfig::new(TestKind::WriteBw)).unwrap();
    assert_eq!(s.peer().version.to_string(), "6.29");
    assert_eq!(s.exchange_keys(&dests(1, 1)).unwrap(), dests(2, 1));
    s.connected().unwrap();
    s.start().unwrap();
    s.finish(None).unwrap();
    // Our bytes: version, 4, 4, 2, then straight to 108-byte keys.
    assert_eq!(&fake.writes[..5], &[16, 4, 4, 2, 108]);
    assert_eq!(fake.unread(), 0);
}

#[test]
fn own_version_must_skip_negotiation_and_be_compatible() {
    for v in ["6.28", "6.29", "7.0", "6.3", "5.69"] {
        let cfg = SessionConfig { version: PerftestVersion::new(v).unwrap(), ..SessionConfig::new(TestKind::ReadBw) };
        let mut fake = ReplayStream::new(&[]);
        match PerftestSession::client(&mut fake, cfg) {
            Err(PerftestError::Config(ConfigError::UnsupportedOwnVersion(_))) => {}
            other => panic!("{v}: {other:?}"),
        }
        assert!(fake.written.is_empty(), "nothing may be sent with a refused config");
    }
    let cfg = SessionConfig { num_qps: 0, ..SessionConfig::new(TestKind::ReadBw) };
    assert!(matches!(
        PerftestSession::client(&mut ReplayStream::new(&[]), cfg),
        Err(PerftestError::Config(ConfigError::NoQps))
    ));
}

#[test]
fn old_peer_is_refused_like_perftest_does() {
    let mut fake = scripted_peer(b"5.60\0\0\0\0\0\0\0\0\0\0\0\0", &[]);
    match PerftestSession::server(&mut fake, SessionConfig::new(TestKind::WriteBw)) {
        Err(PerftestError::IncompatibleVersion { peer }) => assert_eq!(peer.to_string(), "5.60"),
        other => panic!("{other:?}"),
    }
    let mut fake = ReplayStream::new(&[b'?'; 16]);
    assert!(matches!(
        PerftestSession::client(&mut fake, SessionConfig::new(TestKind::WriteBw)),
        Err(PerftestError::Message { step: Step::Version, .. })
    ));
}

#[test]
fn errors_name_the_step() {
    let cfg = SessionConfig::new(TestKind::SendBw);
    // EOF in the middle of the peer's cache line size.
    let mut fake = ReplayStream::new(b"6.24\0\0\0\0\0\0\0\0\0\0\0\0\0\0\x10\0\0\0");
    match PerftestSession::client(&mut fake, cfg) {
        Err(PerftestError::PeerClosed { step: Step::CacheLineSize, received: 2, expected: 4 }) => {}
        other => panic!("{other:?}"),
    }
    // Bad MTU digit.
    let mut raw = b"6.24\0\0\0\0\0\0\0\0\0\0\0\0".to_vec();
    raw.extend_from_slice(&4096u32.to_be_bytes());
    raw.extend_from_slice(&64u32.to_be_bytes());
    raw.extend_from_slice(b"9\0");
    assert!(matches!(
        PerftestSession::client(&mut ReplayStream::new(&raw), cfg),
        Err(PerftestError::Message { step: Step::Mtu, .. })
    ));
    // Negative cycle buffer.
    let mut raw = b"6.24\0\0\0\0\0\0\0\0\0\0\0\0".to_vec();
    raw.extend_from_slice(&(-1i32).to_be_bytes());
    assert!(matches!(
        PerftestSession::client(&mut ReplayStream::new(&raw), cfg),
        Err(PerftestError::Message { step: Step::CycleBuffer, .. })
    ));
    // A garbage key message fails the first key handshake and poisons the session.
    let mut fake = scripted_peer(b"6.24\0\0\0\0\0\0\0\0\0\0\0\0", &[b'x'; 108]);
    let mut s = PerftestSession::client(&mut fake, cfg).unwrap();
    match s.exchange_keys(&dests(1, 1)) {
        Err(PerftestError::Key { step: Step::Handshake { purpose: Handshake::Keys, qp: 0 }, .. }) => {}
        other => panic!("{other:?}"),
    }
    assert_eq!(s.phase(), Phase::Failed);
    assert!(matches!(s.connected(), Err(PerftestError::OutOfOrder { call: "connected", phase: Phase::Failed })));
    // Calls out of order.
    let key = KeyFormat::Gid.encode(&dests(2, 1)[0]).unwrap();
    let mut fake = scripted_peer(b"6.24\0\0\0\0\0\0\0\0\0\0\0\0", &key);
    let mut s = PerftestSession::client(&mut fake, cfg).unwrap();
    assert!(matches!(s.start(), Err(PerftestError::OutOfOrder { call: "start", phase: Phase::Setup })));
    assert!(matches!(s.exchange_keys(&dests(1, 2)), Err(PerftestError::QpCount { expected: 1, got: 2 })));
    assert_eq!(s.phase(), Phase::Setup, "a refused call does not poison the session");
    // Keys that change in a later handshake.
    let mut other = dests(2, 1)[0];
    other.psn ^= 1;
    let mut rest = key.clone();
    rest.extend_from_slice(&KeyFormat::Gid.encode(&other).unwrap());
    let mut fake = scripted_peer(b"6.24\0\0\0\0\0\0\0\0\0\0\0\0", &rest);
    let mut s = PerftestSession::client(&mut fake, cfg).unwrap();
    s.exchange_keys(&dests(1, 1)).unwrap();
    assert!(matches!(
        s.connected(),
        Err(PerftestError::KeysChanged { step: Step::Handshake { purpose: Handshake::AfterConnect, qp: 0 }, .. })
    ));
    // A non-IPv4-mapped GID against an IPv4-mapped one (ctx_check_gid_compatibility).
    let mut v6 = dests(2, 1)[0];
    v6.gid = [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8];
    let mut fake = scripted_peer(b"6.24\0\0\0\0\0\0\0\0\0\0\0\0", &KeyFormat::Gid.encode(&v6).unwrap());
    let mut s = PerftestSession::client(&mut fake, cfg).unwrap();
    assert!(matches!(
        s.exchange_keys(&dests(1, 1)),
        Err(PerftestError::GidTypeMismatch { ours_v4_mapped: true, peer_v4_mapped: false })
    ));
    // An old peer that sends something else than "done" after the close handshake.
    let mut rest = Vec::new();
    for _ in 0..5 {
        rest.extend_from_slice(&key);
    }
    rest.extend_from_slice(b"nope\0");
    let mut fake = scripted_peer(b"6.06\0\0\0\0\0\0\0\0\0\0\0\0", &rest);
    let mut s = PerftestSession::client(&mut fake, cfg).unwrap();
    s.exchange_keys(&dests(1, 1)).unwrap();
    s.connected().unwrap();
    s.start().unwrap();
    assert!(matches!(s.finish(None), Err(PerftestError::UnexpectedTrailer { .. })));
}

/// The read timeout of the TcpStream turns into Timeout { step } (no sleeps: the peer just
/// never answers).
#[test]
fn timeout_names_the_step() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let c = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (mut srv, _) = listener.accept().unwrap();
    c.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
    match PerftestSession::client(&c, SessionConfig::new(TestKind::WriteLat)) {
        Err(PerftestError::Timeout { step: Step::Version }) => {}
        other => panic!("{other:?}"),
    }
    // The server saw exactly our 16-byte version.
    srv.set_read_timeout(Some(TIMEOUT)).unwrap();
    let mut v = [0u8; 16];
    srv.read_exact(&mut v).unwrap();
    assert_eq!(&v[..5], b"6.24\0");
    srv.write_all(b"x").unwrap();
}
