//! Shared helpers for the privileged tests: the root/CI gate, frame builders, a netns guard.

#![allow(dead_code)]

use std::process::Command;

/// True when running under CI (`CI` set to anything but empty/0/false), the same rule as
/// `uroce_rxe_compat::harness::in_ci` (this crate does not depend on that one).
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "0" && v != "false")
}

/// True if the test may run. Not root: under CI ([`in_ci`]) this panics, otherwise it prints
/// why the test is skipped and returns false.
pub fn privileged(test: &str) -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        return true;
    }
    let reason = format!("{test}: needs root (CAP_BPF + CAP_NET_ADMIN)");
    if in_ci() {
        panic!("{reason} (CI set: a missing prerequisite fails the test)");
    }
    // Straight to fd 2: libtest captures eprintln!, and a skip must be visible.
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "SKIP {reason} (with CI=1 this fails)");
    false
}

pub const SRC_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
pub const DST_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x02];

pub fn eth(ethertype: u16, vlan: Option<u16>) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&DST_MAC);
    f.extend_from_slice(&SRC_MAC);
    if let Some(tci) = vlan {
        f.extend_from_slice(&0x8100u16.to_be_bytes());
        f.extend_from_slice(&tci.to_be_bytes());
    }
    f.extend_from_slice(&ethertype.to_be_bytes());
    f
}

pub fn udp(src: u16, dst: u16, payload: &[u8]) -> Vec<u8> {
    let mut u = Vec::new();
    u.extend_from_slice(&src.to_be_bytes());
    u.extend_from_slice(&dst.to_be_bytes());
    u.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    u.extend_from_slice(&[0, 0]);
    u.extend_from_slice(payload);
    u
}

/// IPv4 header with `options` (multiple of 4 bytes), protocol `proto`, frag field `frag`.
pub fn ipv4(proto: u8, frag: u16, options: &[u8], l4: &[u8]) -> Vec<u8> {
    assert_eq!(options.len() % 4, 0);
    let ihl = 5 + options.len() / 4;
    let total = ihl * 4 + l4.len();
    let mut h = vec![
        0x40 | ihl as u8,
        0,
        (total >> 8) as u8,
        total as u8,
        0x12,
        0x34,
        (frag >> 8) as u8,
        frag as u8,
        64,
        proto,
        0,
        0,
        10,
        0,
        0,
        1,
        10,
        0,
        0,
        2,
    ];
    h.extend_from_slice(options);
    let sum = checksum(&h);
    h[10..12].copy_from_slice(&sum.to_be_bytes());
    h.extend_from_slice(l4);
    h
}

pub fn ipv6(next_header: u8, l4: &[u8]) -> Vec<u8> {
    let mut h = vec![0x60, 0, 0, 0];
    h.extend_from_slice(&(l4.len() as u16).to_be_bytes());
    h.push(next_header);
    h.push(64);
    h.extend_from_slice(&[0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
    h.extend_from_slice(&[0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
    h.extend_from_slice(l4);
    h
}

pub fn checksum(data: &[u8]) -> u16 {
    let mut sum = 0u32;
    for c in data.chunks(2) {
        let w = if c.len() == 2 { u16::from_be_bytes([c[0], c[1]]) } else { u16::from_be_bytes([c[0], 0]) };
        sum += u32::from(w);
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

pub fn cat(a: Vec<u8>, b: Vec<u8>) -> Vec<u8> {
    let mut a = a;
    a.extend_from_slice(&b);
    a
}

/// A network namespace created with `ip netns add`, deleted on drop (also on panic).
pub struct Netns {
    pub name: String,
}

pub fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("run ip(8)");
    assert!(out.status.success(), "ip {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
}

pub fn ip_output(args: &[&str]) -> String {
    let out = Command::new("ip").args(args).output().expect("run ip(8)");
    assert!(out.status.success(), "ip {args:?} failed");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

impl Netns {
    pub fn new(tag: &str) -> Self {
        let name = format!("uxp{}{}", tag, std::process::id());
        // A leftover from a crashed run with a recycled pid: remove it first.
        let _ = Command::new("ip").args(["netns", "del", &name]).output();
        ip(&["netns", "add", &name]);
        let ns = Netns { name };
        ip(&["-n", &ns.name, "link", "set", "lo", "up"]);
        ns
    }

    /// Run `f` on a thread that has joined this namespace.
    pub fn run<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> T {
        run_in(&self.name, f)
    }
}

/// Run `f` on a new thread that has joined the named namespace; returns its result and
/// re-raises its panic.
pub fn run_in<T: Send + 'static>(name: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let path = format!("/run/netns/{name}");
    {
        std::thread::spawn(move || {
            let file = std::fs::File::open(&path).expect("open netns");
            use std::os::fd::AsRawFd;
            // SAFETY: setns on a valid netns fd; it changes only this thread's namespace.
            let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
            assert_eq!(rc, 0, "setns: {}", std::io::Error::last_os_error());
            f()
        })
        .join()
        .unwrap_or_else(|e| std::panic::resume_unwind(e))
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.name]).output();
    }
}

/// A UD SEND ONLY to QP1 (BTH, DETH with the GSI's Q_Key) carrying CM message `msg`: the UDP
/// payload of a RoCEv2 MAD.
pub fn mad_to_qp1(msg: &uroce_wire::cm::CmMessage<'_>) -> Vec<u8> {
    let mut b = vec![0x64, 0, 0xff, 0xff, 0, 0, 0, 1, 0, 0, 0, 0];
    b.extend_from_slice(&[0x80, 0x01, 0, 0, 0, 0, 0, 1]); // DETH: Q_Key 0x80010000, source QP 1
    assert_eq!(b.len() + 8, uroce_wire::cm::steer::MAD_IN_UDP);
    let mut mad = [0u8; uroce_wire::mad::MAD_LEN];
    msg.emit(0x1234, 0, &mut mad).unwrap();
    b.extend_from_slice(&mad);
    b
}

/// [`mad_to_qp1`] of a REQ (`attr` 0x0010) or SIDR REQ (0x0017) for `service_id`, its other
/// fields zero.
pub fn mad_for_service(attr: u16, service_id: u64) -> Vec<u8> {
    use uroce_wire::cm::CmMessage;
    use uroce_wire::mad::{Mad, MadHeaderRepr, Method, MgmtClass, MAD_LEN};
    let h = MadHeaderRepr {
        base_version: 1,
        mgmt_class: MgmtClass::CM,
        class_version: 2,
        method: Method::SEND,
        status: 0,
        class_specific: 0,
        tid: 1,
        attr_id: attr,
        attr_mod: 0,
    };
    let mut hdr = [0u8; MAD_LEN];
    h.emit(&mut hdr).unwrap();
    let mad = Mad::parse(&hdr, 0).unwrap();
    match CmMessage::parse(&mad, 0).unwrap() {
        CmMessage::Req(mut r) => {
            r.service_id = service_id;
            mad_to_qp1(&CmMessage::Req(r))
        }
        CmMessage::SidrReq(mut r) => {
            r.service_id = service_id;
            mad_to_qp1(&CmMessage::SidrReq(r))
        }
        m => panic!("not a REQ or SIDR REQ: {m:?}"),
    }
}
