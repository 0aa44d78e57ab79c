//! A raw AF_PACKET socket on an interface (root), for tests that inject or capture frames
//! below IP.

#![allow(dead_code)]

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// An AF_PACKET socket bound to `ifname` for every protocol, with a 100 ms receive timeout.
pub fn packet_socket(ifname: &str) -> OwnedFd {
    let c = std::ffi::CString::new(ifname).expect("name");
    // SAFETY: `c` is NUL-terminated and outlives the call.
    let ifindex = unsafe { libc::if_nametoindex(c.as_ptr()) };
    assert_ne!(ifindex, 0, "no interface {ifname}");
    let proto = (libc::ETH_P_ALL as u16).to_be();
    // SAFETY: plain socket(2); checked below.
    let raw = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, i32::from(proto)) };
    assert!(raw >= 0, "AF_PACKET socket: {}", std::io::Error::last_os_error());
    // SAFETY: fresh descriptor.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    // SAFETY: sockaddr_ll is plain old data.
    let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_protocol = proto;
    sll.sll_ifindex = ifindex as i32;
    // SAFETY: `sll` is a sockaddr_ll of the size given.
    let rc = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&sll as *const libc::sockaddr_ll).cast(),
            std::mem::size_of::<libc::sockaddr_ll>() as u32,
        )
    };
    assert_eq!(rc, 0, "bind AF_PACKET: {}", std::io::Error::last_os_error());
    let tv = libc::timeval { tv_sec: 0, tv_usec: 100_000 };
    // SAFETY: `tv` is a timeval of the size given.
    unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            (&tv as *const libc::timeval).cast(),
            std::mem::size_of::<libc::timeval>() as u32,
        )
    };
    fd
}

/// Send `frame` out of the interface `fd` is bound to.
pub fn send_raw(fd: &OwnedFd, frame: &[u8]) {
    // SAFETY: `frame` is valid for `frame.len()` bytes; the socket is bound to an interface.
    let n = unsafe { libc::send(fd.as_raw_fd(), frame.as_ptr().cast(), frame.len(), 0) };
    assert_eq!(n, frame.len() as isize, "send on AF_PACKET: {}", std::io::Error::last_os_error());
}
