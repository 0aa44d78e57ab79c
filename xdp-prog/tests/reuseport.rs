//! The `SK_REUSEPORT` steering on real sockets (loopback): each datagram reaches the socket
//! in its destination QP's block slot; short datagrams and unheld blocks go to some socket of
//! the group; a closed socket leaves its slot. Needs root.

mod common;

use common::*;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::{AsFd, FromRawFd, OwnedFd};
use std::time::Duration;
use uroce_xdp_prog::reuseport::qpn_block;
use uroce_xdp_prog::ReuseportSteering;

/// A UDP socket with SO_REUSEPORT bound to `addr`.
fn reuseport_socket(addr: SocketAddr) -> UdpSocket {
    // SAFETY: plain socket(2)/setsockopt(2)/bind(2) on a fresh descriptor; results checked.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        assert!(fd >= 0);
        let one: libc::c_int = 1;
        let rc = libc::setsockopt(fd, libc::SOL_SOCKET, libc::SO_REUSEPORT, (&one as *const libc::c_int).cast(), 4);
        assert_eq!(rc, 0);
        let SocketAddr::V4(v4) = addr else { panic!("v4 only") };
        let sa = libc::sockaddr_in {
            sin_family: libc::AF_INET as u16,
            sin_port: v4.port().to_be(),
            sin_addr: libc::in_addr { s_addr: u32::from_ne_bytes(v4.ip().octets()) },
            sin_zero: [0; 8],
        };
        let rc = libc::bind(fd, (&sa as *const libc::sockaddr_in).cast(), size_of::<libc::sockaddr_in>() as u32);
        assert_eq!(rc, 0, "{}", std::io::Error::last_os_error());
        let s = UdpSocket::from(OwnedFd::from_raw_fd(fd));
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s
    }
}

/// A UDP payload that starts with a BTH to `qpn` (opcode SEND ONLY), tagged with `tag`.
fn bth_to(qpn: u32, tag: u8) -> Vec<u8> {
    let mut b = vec![0x04, 0, 0xff, 0xff, 0];
    b.extend_from_slice(&qpn.to_be_bytes()[1..]);
    b.extend_from_slice(&[0, 0, 0, 0, tag]);
    b
}

fn recv_tag(s: &UdpSocket) -> u8 {
    let mut buf = [0u8; 512];
    let n = s.recv(&mut buf).expect("datagram");
    buf[n - 1]
}

fn pending(s: &UdpSocket) -> bool {
    s.set_nonblocking(true).unwrap();
    let mut buf = [0u8; 64];
    let r = s.recv(&mut buf).is_ok();
    s.set_nonblocking(false).unwrap();
    r
}

/// The steering and two sockets of one group on loopback, in blocks 1 (`a`) and 2 (`b`).
fn two_members() -> (ReuseportSteering, UdpSocket, UdpSocket, SocketAddr) {
    let steering = ReuseportSteering::create().expect("maps and program");
    let a = reuseport_socket("127.0.0.1:0".parse().unwrap());
    let addr = a.local_addr().unwrap();
    let b = reuseport_socket(addr);
    steering.attach(a.as_fd()).expect("attach");
    steering.insert(1, a.as_fd()).unwrap();
    steering.insert(2, b.as_fd()).unwrap();
    (steering, a, b, addr)
}

#[test]
fn datagrams_reach_the_socket_of_their_qpn_block() {
    if !privileged("datagrams_reach_the_socket_of_their_qpn_block") {
        return;
    }
    let (_steering, a, b, addr) = two_members();
    let tx = UdpSocket::bind("127.0.0.1:0").unwrap();

    // Many QPNs of each block, from one source (one 4-tuple hash): each lands by its block.
    for i in 0..64u32 {
        let (qa, qb) = (0x01_0000 | ((i * 977) & 0xffff), 0x02_0000 | ((i * 1231) & 0xffff));
        assert_eq!((qpn_block(qa), qpn_block(qb)), (1, 2));
        tx.send_to(&bth_to(qa, 0xa0), addr).unwrap();
        tx.send_to(&bth_to(qb, 0xb0), addr).unwrap();
        assert_eq!(recv_tag(&a), 0xa0, "QPN {qa:#x}");
        assert_eq!(recv_tag(&b), 0xb0, "QPN {qb:#x}");
    }

    // Unheld block and a datagram too short for the byte: some member of the group gets it.
    tx.send_to(&bth_to(0x07_0001, 0xc0), addr).unwrap();
    tx.send_to(&[1, 2, 3], addr).unwrap();
    let mut got = 0;
    for s in [&a, &b] {
        while pending(s) {
            got += 1;
        }
    }
    // Both may not have arrived yet when polled; wait for the rest on whichever holds them.
    while got < 2 {
        let mut fds = [
            libc::pollfd { fd: std::os::fd::AsRawFd::as_raw_fd(&a), events: libc::POLLIN, revents: 0 },
            libc::pollfd { fd: std::os::fd::AsRawFd::as_raw_fd(&b), events: libc::POLLIN, revents: 0 },
        ];
        // SAFETY: `fds` is a live array of two pollfds.
        assert!(unsafe { libc::poll(fds.as_mut_ptr(), 2, 5000) } > 0, "datagram lost");
        for s in [&a, &b] {
            while pending(s) {
                got += 1;
            }
        }
    }

    // B closes: its slot empties with it, and block 2 falls back to the hash (to A, alone).
    drop(b);
    tx.send_to(&bth_to(0x02_0042, 0xd0), addr).unwrap();
    assert_eq!(recv_tag(&a), 0xd0);
}

/// [`mad_to_qp1`] tagged with `tag` in the MAD's last byte (private data, which steering never
/// reads).
fn tagged(mut pl: Vec<u8>, tag: u8) -> Vec<u8> {
    *pl.last_mut().unwrap() = tag;
    pl
}

#[test]
fn mads_to_qp1_reach_the_listener_or_the_holder_of_the_id() {
    use uroce_wire::cm::{CmMessage, CommIds, SidrRepRepr, SimpleRepr};
    if !privileged("mads_to_qp1_reach_the_listener_or_the_holder_of_the_id") {
        return;
    }
    let (steering, a, b, addr) = two_members();
    let tx = UdpSocket::bind("127.0.0.1:0").unwrap();

    // A REQ (and a SIDR REQ) for a service: its listener's socket, whatever the source.
    let (svc_b, svc_a) = (0x0000_0001_0106_4e20u64, 0x0000_0001_0111_4e21u64);
    steering.services().listen(svc_b, 2).unwrap();
    steering.services().listen(svc_a, 1).unwrap();
    for (attr, svc, to_b) in [(0x0010u16, svc_b, true), (0x0010, svc_a, false), (0x0017, svc_b, true)] {
        for i in 0..8u8 {
            // different sources: different 4-tuple hashes
            let from = UdpSocket::bind("127.0.0.1:0").unwrap();
            from.send_to(&tagged(mad_for_service(attr, svc), i), addr).unwrap();
            assert_eq!(recv_tag(if to_b { &b } else { &a }), i, "attr {attr:#x} service {svc:#x}");
        }
    }
    // Listening twice on one service: refused, until the first stops.
    assert!(steering.services().listen(svc_b, 1).is_err());
    steering.services().unlisten(svc_b).unwrap();
    steering.services().listen(svc_b, 1).unwrap();

    // Every other message by the receiver's ID's top byte; a SIDR REP by its request ID's.
    for (remote, to_b) in [(0x02ab_cdefu32, true), (0x0100_0001, false), (0x02ff_ffff, true)] {
        let ids = CommIds { local: 0x7777_7777, remote };
        for msg in [
            CmMessage::Rtu(SimpleRepr { ids, private_data: &[] }),
            CmMessage::Drep(SimpleRepr { ids, private_data: &[] }),
        ] {
            tx.send_to(&tagged(mad_to_qp1(&msg), 0x5a), addr).unwrap();
            assert_eq!(recv_tag(if to_b { &b } else { &a }), 0x5a, "{msg:?}");
        }
        let sidr = SidrRepRepr {
            request_id: remote,
            status: 0,
            add_info_len: 0,
            qpn: 0x0300_0005 & 0xff_ffff,
            service_id: svc_a,
            qkey: 0,
            additional_info: &[],
            private_data: &[],
        };
        tx.send_to(&tagged(mad_to_qp1(&CmMessage::SidrRep(sidr)), 0x6b), addr).unwrap();
        assert_eq!(recv_tag(if to_b { &b } else { &a }), 0x6b, "SIDR REP {remote:#x}");
    }
    // A data frame to a QP of block 2 still goes by its QPN.
    tx.send_to(&bth_to(0x02_0042, 0xd0), addr).unwrap();
    assert_eq!(recv_tag(&b), 0xd0);
}
