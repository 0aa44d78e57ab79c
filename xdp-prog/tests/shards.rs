//! The sharded program (`ProgramConfig::shards > 1`): a matching frame goes to XSKMAP slot
//! `rx_queue_index * shards + dest_qpn % shards`, checked with `BPF_PROG_TEST_RUN`.
//!
//! How the redirect target is observed: the probe build's fallback is `XDP_DROP`, and
//! `bpf_redirect_map` returns `XDP_REDIRECT` only when the slot it looks up holds a socket.
//! One real AF_XDP socket (copy mode, bound to queue 0 of a veth in a private network
//! namespace) is put into exactly one slot at a time; a frame then comes out `XDP_REDIRECT`
//! if and only if the program computed that slot, `XDP_DROP` for any other slot, and
//! `XDP_PASS` if it did not match at all. Queues other than 0 are driven through
//! `BPF_PROG_TEST_RUN`'s `xdp_md` context (`ingress_ifindex` = the veth, which has 4 RX
//! queues).
//!
//! Needs root (CAP_BPF + CAP_NET_ADMIN). Without it: skipped with a message, or a failure
//! when `CI=1`.

mod common;

use std::os::fd::{AsFd, BorrowedFd, FromRawFd, OwnedFd};

use common::*;
use uroce_xdp_prog::{ifindex, AttachMode, Error, ProgramConfig, XdpAction, XdpProgram, XdpSteering, MAX_SHARDS};

const PORT: u16 = 4791;
const QUEUES: u32 = 4;
const DEV: &str = "vs0";

// AF_XDP uapi (linux/if_xdp.h).
const AF_XDP: i32 = 44;
const SOL_XDP: i32 = 283;
const XDP_RX_RING: i32 = 2;
const XDP_UMEM_REG: i32 = 4;
const XDP_UMEM_FILL_RING: i32 = 5;
const XDP_UMEM_COMPLETION_RING: i32 = 6;
const XDP_COPY: u16 = 1 << 1;
const FRAME: usize = 4096;
const FRAMES: usize = 16;
const RING: u32 = 16;

/// `struct xdp_umem_reg` as of Linux 4.18 (the kernel accepts this shorter layout).
#[repr(C)]
struct UmemRegV1 {
    addr: u64,
    len: u64,
    chunk_size: u32,
    headroom: u32,
}

/// `struct sockaddr_xdp`.
#[repr(C)]
struct SockaddrXdp {
    family: u16,
    flags: u16,
    ifindex: u32,
    queue_id: u32,
    shared_umem_fd: u32,
}

/// A minimal bound AF_XDP socket: enough for the kernel to accept it in an XSKMAP. Its rings
/// are never mapped; nothing is received through it. Field order = drop order: the socket
/// (which pins the UMEM pages) is closed before the UMEM is unmapped.
struct Xsk {
    fd: OwnedFd,
    _umem: Umem,
}

/// An anonymous mapping of `FRAME * FRAMES` bytes, unmapped on drop.
struct Umem(*mut libc::c_void);

impl Drop for Umem {
    fn drop(&mut self) {
        // SAFETY: `self.0` is the mapping of FRAME * FRAMES bytes made in `Xsk::bind`,
        // unmapped exactly once, here.
        unsafe { libc::munmap(self.0, FRAME * FRAMES) };
    }
}

fn check(rc: i32, what: &str) {
    assert!(rc >= 0, "{what}: {}", std::io::Error::last_os_error());
}

impl Xsk {
    /// Socket bound in copy mode to `queue` of `ifindex` (calling thread's namespace).
    fn bind(ifindex: u32, queue: u32) -> Xsk {
        // SAFETY: plain socket(2) call with constant arguments.
        let raw = unsafe { libc::socket(AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        check(raw, "socket(AF_XDP)");
        // SAFETY: `raw` is a fresh socket owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let len = FRAME * FRAMES;
        // SAFETY: anonymous private mapping with no address hint; checked for MAP_FAILED.
        let umem = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(umem, libc::MAP_FAILED, "mmap UMEM: {}", std::io::Error::last_os_error());
        let xsk = Xsk { fd, _umem: Umem(umem) };
        let fd = std::os::fd::AsRawFd::as_raw_fd(&xsk.fd);
        let reg = UmemRegV1 { addr: umem as u64, len: len as u64, chunk_size: FRAME as u32, headroom: 0 };
        let setopt = |opt: i32, val: *const libc::c_void, size: usize, what: &str| {
            // SAFETY: `val` points at a live value of `size` bytes for the duration of the call.
            check(unsafe { libc::setsockopt(fd, SOL_XDP, opt, val, size as libc::socklen_t) }, what);
        };
        setopt(XDP_UMEM_REG, &reg as *const UmemRegV1 as *const _, std::mem::size_of::<UmemRegV1>(), "XDP_UMEM_REG");
        for (opt, what) in
            [(XDP_UMEM_FILL_RING, "fill ring"), (XDP_UMEM_COMPLETION_RING, "completion ring"), (XDP_RX_RING, "rx ring")]
        {
            setopt(opt, &RING as *const u32 as *const _, 4, what);
        }
        let sa = SockaddrXdp { family: AF_XDP as u16, flags: XDP_COPY, ifindex, queue_id: queue, shared_umem_fd: 0 };
        // SAFETY: `sa` is a live sockaddr_xdp and its exact size is passed.
        let rc = unsafe {
            libc::bind(
                fd,
                &sa as *const SockaddrXdp as *const libc::sockaddr,
                std::mem::size_of::<SockaddrXdp>() as libc::socklen_t,
            )
        };
        check(rc, "bind(AF_XDP, copy mode)");
        xsk
    }

    fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// A namespace (`tag` tells the tests of this binary apart: they run in parallel in one
/// process) with a veth pair whose `vs0` end has `QUEUES` RX queues.
fn veth_ns(tag: &str) -> Netns {
    let ns = Netns::new(tag);
    let q = QUEUES.to_string();
    #[rustfmt::skip]
    ip(&["-n", &ns.name, "link", "add", DEV, "numrxqueues", &q, "numtxqueues", &q, "type", "veth",
         "peer", "name", "vs1", "numrxqueues", &q, "numtxqueues", &q]);
    ip(&["-n", &ns.name, "link", "set", DEV, "up"]);
    ip(&["-n", &ns.name, "link", "set", "vs1", "up"]);
    ns
}

/// A 12-byte BTH (opcode RC SEND ONLY) for destination QP `qpn`, with the reserved byte and
/// the neighbouring fields set to non-zero junk so that only bytes 5..8 can matter, plus a
/// few payload bytes.
fn bth(qpn: u32) -> Vec<u8> {
    let q = qpn.to_be_bytes();
    vec![0x04, 0x40, 0xff, 0xff, 0xa5, q[1], q[2], q[3], 0x80, 0x12, 0x34, 0x56, 1, 2, 3, 4]
}

/// Matching frames for `qpn`: (name, frame, length up to and including the BTH).
fn frames(qpn: u32) -> Vec<(&'static str, Vec<u8>, usize)> {
    frames_of(bth(qpn))
}

/// Matching frames carrying UDP payload `pl` (a BTH and what follows).
fn frames_of(pl: Vec<u8>) -> Vec<(&'static str, Vec<u8>, usize)> {
    let f = |name, frame: Vec<u8>| {
        let bth_end = frame.len() - pl.len() + 12;
        (name, frame, bth_end)
    };
    vec![
        f("IPv4", cat(eth(0x0800, None), ipv4(17, 0, &[], &udp(49152, PORT, &pl)))),
        f("IPv4 in 802.1Q", cat(eth(0x0800, Some(0x2064)), ipv4(17, 0x4000, &[], &udp(1, PORT, &pl)))),
        f("IPv4 IHL 15, 802.1Q", cat(eth(0x0800, Some(5)), ipv4(17, 0, &[1; 40], &udp(1, PORT, &pl)))),
        f("IPv6", cat(eth(0x86dd, None), ipv6(17, &udp(49152, PORT, &pl)))),
        f("IPv6 in 802.1Q", cat(eth(0x86dd, Some(7)), ipv6(17, &udp(49152, PORT, &pl)))),
    ]
}

/// Frames the sharded program must still pass whatever their "BTH" says.
fn non_roce() -> Vec<(&'static str, Vec<u8>)> {
    let pl = bth(0x000001);
    vec![
        ("IPv4 UDP/4792", cat(eth(0x0800, None), ipv4(17, 0, &[], &udp(PORT, 4792, &pl)))),
        ("IPv6 UDP/53", cat(eth(0x86dd, None), ipv6(17, &udp(PORT, 53, &pl)))),
        ("IPv4 TCP", cat(eth(0x0800, None), ipv4(6, 0, &[], &udp(1, PORT, &pl)))),
        ("IPv4 MF fragment", cat(eth(0x0800, None), ipv4(17, 0x2000, &[], &udp(1, PORT, &pl)))),
        (
            "IPv6 fragment header",
            cat(eth(0x86dd, None), ipv6(44, &cat(vec![17, 0, 0, 1, 0, 0, 0, 1], udp(1, PORT, &pl)))),
        ),
        ("ARP", cat(eth(0x0806, None), vec![0, 1, 8, 0, 6, 4, 0, 1].into_iter().chain([0; 20]).collect())),
    ]
}

const QPNS: [u32; 12] = [0, 1, 2, 3, 4, 5, 6, 7, 0x11, 0x0001_0003, 0x0012_3456, 0x00ff_ffff];

fn probe(shards: u32) -> XdpProgram {
    XdpProgram::load(&ProgramConfig { fallback: XdpAction::Drop, shards, ..ProgramConfig::default() }, QUEUES)
        .unwrap_or_else(|e| panic!("load probe program with {shards} shards: {e}"))
}

fn action(r: Result<uroce_xdp_prog::TestRun, Error>, what: &str) -> XdpAction {
    r.unwrap_or_else(|e| panic!("{what}: test_run: {e}")).action().expect("known XDP action")
}

/// Queue 0 (plain `BPF_PROG_TEST_RUN`): with the socket in slot `s` (< N), a frame is
/// redirected exactly when `qpn % N == s`, for every frame family.
#[test]
fn queue0_slot_is_qpn_mod_shards() {
    if !privileged("queue0_slot_is_qpn_mod_shards") {
        return;
    }
    let ns = veth_ns("s0");
    ns.run(|| {
        let xsk = Xsk::bind(ifindex(DEV).unwrap(), 0);
        let mut failures = Vec::new();
        for n in [2u32, 4] {
            let p = probe(n);
            assert_eq!(p.xsk_map().max_entries(), QUEUES * n);
            for s in 0..n {
                let slot = p.slot(0, s).unwrap();
                assert_eq!(slot, s);
                p.xsk_map().insert(slot, xsk.fd()).unwrap();
                for qpn in QPNS {
                    for (name, frame, _) in frames(qpn) {
                        let want = if qpn % n == s { XdpAction::Redirect } else { XdpAction::Drop };
                        let got = action(p.test_run(&frame), name);
                        if got != want {
                            failures
                                .push(format!("N={n} socket in slot {s}, {name} qpn {qpn:#x}: {got:?}, want {want:?}"));
                        }
                    }
                }
                for (name, frame) in non_roce() {
                    let got = action(p.test_run(&frame), name);
                    if got != XdpAction::Pass {
                        failures.push(format!("N={n} socket in slot {s}, {name}: {got:?}, want Pass"));
                    }
                }
                p.xsk_map().remove(slot).unwrap();
            }
            // Empty map: every matching frame gets the fallback.
            for (name, frame, _) in frames(0x123) {
                assert_eq!(action(p.test_run(&frame), name), XdpAction::Drop, "N={n} empty map, {name}");
            }
        }
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    });
}

/// Other RX queues (through the `xdp_md` context): the slot is `queue * N + qpn % N`, so the
/// socket in slot `q * N + s` is hit only by frames received on queue `q` with `qpn % N == s`.
/// Also non-power-of-two shard counts and the maximum.
#[test]
fn slot_is_queue_times_shards_plus_qpn_mod_shards() {
    if !privileged("slot_is_queue_times_shards_plus_qpn_mod_shards") {
        return;
    }
    let ns = veth_ns("sq");
    ns.run(|| {
        let idx = ifindex(DEV).unwrap();
        let xsk = Xsk::bind(idx, 0);
        let mut failures = Vec::new();
        for n in [2u32, 3, 4, 7, MAX_SHARDS] {
            let p = probe(n);
            for (q, s) in [(1u32, 0u32), (2, 1), (3, n - 1)] {
                let slot = p.slot(q, s).unwrap();
                assert_eq!(slot, q * n + s);
                p.xsk_map().insert(slot, xsk.fd()).unwrap();
                for rxq in 0..QUEUES {
                    for qpn in QPNS.into_iter().chain([n - 1, n, n + 1, 2 * n + s]) {
                        for (name, frame, _) in frames(qpn) {
                            let hit = rxq == q && qpn % n == s;
                            let want = if hit { XdpAction::Redirect } else { XdpAction::Drop };
                            let got = action(p.test_run_on_queue(&frame, idx, rxq), name);
                            if got != want {
                                failures.push(format!(
                                    "N={n} socket in slot {slot} (q{q}, s{s}), rx queue {rxq}, {name} qpn {qpn:#x}: \
                                     {got:?}, want {want:?}"
                                ));
                            }
                        }
                    }
                }
                p.xsk_map().remove(slot).unwrap();
            }
        }
        assert!(failures.is_empty(), "{}", failures.join("\n"));
        // The kernel itself refuses a queue the device does not have.
        let p = probe(2);
        let frame = frames(1).remove(0).1;
        let e = p.test_run_on_queue(&frame, idx, QUEUES).unwrap_err();
        assert_eq!(e.errno(), Some(libc::EINVAL), "{e}");
    });
}

/// A matching frame cut anywhere before the end of its BTH is `XDP_PASS` (it cannot be
/// steered to a shard; the kernel handles it like any other malformed UDP/4791 frame), from
/// the end of the BTH on it gets the redirect/fallback path.
#[test]
fn short_bth_passes() {
    if !privileged("short_bth_passes") {
        return;
    }
    for n in [2u32, 4] {
        let p = probe(n);
        for (name, frame, bth_end) in frames(0x0012_3457) {
            for len in 14..=frame.len() {
                let want = if len >= bth_end { XdpAction::Drop } else { XdpAction::Pass };
                let got = action(p.test_run(&frame[..len]), name);
                assert_eq!(got, want, "N={n} {name} truncated to {len} bytes (BTH ends at {bth_end})");
            }
        }
    }
    // One shard does not look at the BTH: the UDP header is enough (as before).
    let one = probe(1);
    for (name, frame, bth_end) in frames(5) {
        let got = action(one.test_run(&frame[..bth_end - 12]), name);
        assert_eq!(got, XdpAction::Drop, "N=1 {name} without a BTH");
    }
}

#[test]
fn shard_count_and_slot_limits() {
    if !privileged("shard_count_and_slot_limits") {
        return;
    }
    for bad in [0u32, MAX_SHARDS + 1] {
        let e = XdpProgram::load(&ProgramConfig { shards: bad, ..ProgramConfig::default() }, 1).unwrap_err();
        assert!(matches!(e, Error::InvalidArgument(_)), "shards {bad}: {e:?}");
    }
    let e = XdpProgram::load(&ProgramConfig { shards: 64, ..ProgramConfig::default() }, u32::MAX / 32).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e:?}");

    let p = probe(4);
    assert_eq!(p.queues(), QUEUES);
    assert_eq!(p.xsk_map().max_entries(), 16);
    assert_eq!(p.slot(3, 3).unwrap(), 15);
    assert!(matches!(p.slot(0, 4), Err(Error::InvalidArgument(_))));
    assert!(matches!(p.slot(4, 0), Err(Error::InvalidArgument(_))));
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    assert!(matches!(p.xsk_map().insert(16, udp.as_fd()), Err(Error::InvalidArgument(_))));
    p.xsk_map().remove(15).unwrap();

    // One shard: slot == queue, map == queues.
    let one = probe(1);
    assert_eq!(one.xsk_map().max_entries(), QUEUES);
    assert_eq!(one.slot(3, 0).unwrap(), 3);
    assert!(matches!(one.slot(0, 1), Err(Error::InvalidArgument(_))));
}

/// `XdpSteering::install` sizes the XSKMAP `max_rx_queues * shards` and registers any slot
/// below that; a socket bound to queue 0 is registered in shard 1's slot of queue 0.
#[test]
fn install_sizes_the_map_for_all_shards() {
    if !privileged("install_sizes_the_map_for_all_shards") {
        return;
    }
    let ns = veth_ns("si");
    ns.run(|| {
        let ch = uroce_xdp_prog::channels(DEV).unwrap();
        let cfg = ProgramConfig { shards: 3, ..ProgramConfig::default() };
        let s = XdpSteering::install(DEV, &cfg, AttachMode::Generic).unwrap();
        assert_eq!(s.program().config().shards, 3);
        assert_eq!(s.program().queues(), ch.max_rx_queues());
        assert_eq!(s.program().xsk_map().max_entries(), ch.max_rx_queues() * 3);
        let xsk = Xsk::bind(ifindex(DEV).unwrap(), 0);
        let slot = s.slot(0, 1).unwrap();
        assert_eq!(slot, 1);
        s.register(slot, xsk.fd()).unwrap();
        let last = s.slot(ch.max_rx_queues() - 1, 2).unwrap();
        assert_eq!(last, ch.max_rx_queues() * 3 - 1);
        s.register(last, xsk.fd()).unwrap();
        s.unregister(last).unwrap();
        s.unregister(slot).unwrap();
        assert!(matches!(s.register(last + 1, xsk.fd()), Err(Error::InvalidArgument(_))));
    });
}

/// The program for several processes (`by_block`): slot `queue * 256 + (qpn >> 16)`, so the
/// socket of QPN block `b` on queue `q` receives exactly the frames received on `q` whose
/// destination QP is in block `b`; PFC frames and block 0 find no socket (fallback).
#[test]
fn by_block_slot_is_queue_times_256_plus_qpn_block() {
    if !privileged("by_block_slot_is_queue_times_256_plus_qpn_block") {
        return;
    }
    let ns = veth_ns("sb");
    ns.run(|| {
        let idx = ifindex(DEV).unwrap();
        let xsk = Xsk::bind(idx, 0);
        let cfg = ProgramConfig { fallback: XdpAction::Drop, by_block: true, ..ProgramConfig::default() };
        let p = XdpProgram::load(&cfg, QUEUES).expect("load the by-block program");
        assert_eq!(p.xsk_map().max_entries(), QUEUES * 256);
        let blocks = [0x01_0000u32, 0x01_ffff, 0x02_0000, 0x02_0011, 0x07_1234, 0xff_ffff, 0x00_0001];
        let mut failures = Vec::new();
        for (q, b) in [(0u32, 1u32), (0, 2), (1, 2), (3, 255)] {
            let slot = p.slot(q, b).unwrap();
            assert_eq!(slot, q * 256 + b);
            p.xsk_map().insert(slot, xsk.fd()).unwrap();
            for rxq in 0..QUEUES {
                for qpn in blocks {
                    for (name, frame, _) in frames(qpn) {
                        let hit = rxq == q && qpn >> 16 == b;
                        let want = if hit { XdpAction::Redirect } else { XdpAction::Drop };
                        let got = action(p.test_run_on_queue(&frame, idx, rxq), name);
                        if got != want {
                            failures.push(format!(
                                "socket in slot {slot} (q{q}, block {b}), rx queue {rxq}, {name} qpn {qpn:#x}: \
                                 {got:?}, want {want:?}"
                            ));
                        }
                    }
                }
            }
            for (name, frame) in non_roce() {
                let got = action(p.test_run(&frame), name);
                if got != XdpAction::Pass {
                    failures.push(format!("{name}: {got:?}, want Pass"));
                }
            }
            p.xsk_map().remove(slot).unwrap();
        }
        assert!(failures.is_empty(), "{}", failures.join("\n"));
        // Shards inside a block are not offered.
        let e = XdpProgram::load(&ProgramConfig { shards: 2, ..cfg }, 1).unwrap_err();
        assert!(matches!(e, Error::InvalidArgument(_)), "{e:?}");
    });
}

/// QP1 is everyone's: with `by_block`, a CM MAD goes to the block it names — a REQ or SIDR REQ
/// to its service's listener (the program's `ServiceMap`), any other message to the top byte
/// of the receiver's ID — and one it cannot place (another class, a service nobody listens on,
/// a frame cut short) to block 0, nobody's (the fallback), over every header layout.
#[test]
fn by_block_steers_mads_to_qp1_by_what_they_name() {
    use uroce_wire::cm::{CmMessage, CommIds, SidrRepRepr, SimpleRepr};
    if !privileged("by_block_steers_mads_to_qp1_by_what_they_name") {
        return;
    }
    let ns = veth_ns("sm");
    ns.run(|| {
        let idx = ifindex(DEV).unwrap();
        let xsk = Xsk::bind(idx, 0);
        let cfg = ProgramConfig { fallback: XdpAction::Drop, by_block: true, ..ProgramConfig::default() };
        let p = XdpProgram::load(&cfg, QUEUES).expect("load the by-block program");
        let services = p.services().expect("a by-block program has a listeners' map");
        p.xsk_map().insert(p.slot(0, 2).unwrap(), xsk.fd()).unwrap();
        let (mine, theirs, nobodys) = (0x0000_0001_0106_4e20u64, 0x0000_0001_0106_4e21u64, 0x0000_0001_0111_0001u64);
        services.listen(mine, 2).unwrap();
        services.listen(theirs, 3).unwrap();
        let simple = |remote: u32| {
            mad_to_qp1(&CmMessage::Rtu(SimpleRepr { ids: CommIds { local: 0x0909_0909, remote }, private_data: &[] }))
        };
        let sidr_rep = |request_id: u32| {
            mad_to_qp1(&CmMessage::SidrRep(SidrRepRepr {
                request_id,
                status: 0,
                add_info_len: 0,
                qpn: 5,
                service_id: mine,
                qkey: 0,
                additional_info: &[],
                private_data: &[],
            }))
        };
        let mut other_class = simple(0x0200_0001);
        other_class[20 + 1] = 0x04; // PerfMgt
        let mut short = simple(0x0200_0001);
        short.truncate(20 + 24 + 4); // the remote ID begins at MAD byte 28
        let cases: Vec<(&str, Vec<u8>, bool)> = vec![
            ("REQ for my service", mad_for_service(0x0010, mine), true),
            ("SIDR_REQ for my service", mad_for_service(0x0017, mine), true),
            ("REQ for block 3's service", mad_for_service(0x0010, theirs), false),
            ("REQ nobody listens for", mad_for_service(0x0010, nobodys), false),
            ("RTU to an ID of block 2", simple(0x02ab_cdef), true),
            ("RTU to an ID of block 3", simple(0x03ab_cdef), false),
            ("SIDR_REP to a request of block 2", sidr_rep(0x0200_0007), true),
            ("SIDR_REP to a request of block 4", sidr_rep(0x0400_0007), false),
            ("another class", other_class, false),
            ("cut short", short, false),
        ];
        let mut failures = Vec::new();
        for (what, pl, hit) in cases {
            for (name, frame, _) in frames_of(pl) {
                let want = if hit { XdpAction::Redirect } else { XdpAction::Drop };
                let got = action(p.test_run_on_queue(&frame, idx, 0), name);
                if got != want {
                    failures.push(format!("{what}, {name}: {got:?}, want {want:?}"));
                }
            }
        }
        // A listener that stops: its REQs are nobody's.
        services.unlisten(mine).unwrap();
        for (name, frame, _) in frames_of(mad_for_service(0x0010, mine)) {
            let got = action(p.test_run_on_queue(&frame, idx, 0), name);
            if got != XdpAction::Drop {
                failures.push(format!("REQ after unlisten, {name}: {got:?}"));
            }
        }
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    });
}
