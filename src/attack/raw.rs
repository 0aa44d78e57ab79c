//! An `AF_PACKET` socket on one interface in promiscuous mode: every frame the interface
//! sees (not only those addressed to it), and frames sent exactly as given.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Duration;

/// See the module docs.
pub struct RawSocket {
    fd: OwnedFd,
}

fn check(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

impl RawSocket {
    /// Opens the socket on `ifname` (needs CAP_NET_RAW).
    pub fn open(ifname: &str) -> io::Result<RawSocket> {
        let name = std::ffi::CString::new(ifname).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        // SAFETY: a NUL-terminated name; the call only reads it.
        let index = unsafe { libc::if_nametoindex(name.as_ptr()) };
        if index == 0 {
            return Err(io::Error::last_os_error());
        }
        let proto = (libc::ETH_P_ALL as u16).to_be();
        // SAFETY: plain socket(2); the descriptor is owned below.
        let fd = check(unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, proto as i32) })?;
        // SAFETY: `fd` was just returned by socket(2) and is owned by nothing else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: sockaddr_ll is plain data; zeroed is a valid value to fill in.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = proto;
        sll.sll_ifindex = index as i32;
        // SAFETY: a valid sockaddr_ll and its size.
        check(unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&sll as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as u32,
            )
        })?;
        // SAFETY: packet_mreq is plain data.
        let mut mr: libc::packet_mreq = unsafe { std::mem::zeroed() };
        mr.mr_ifindex = index as i32;
        mr.mr_type = libc::PACKET_MR_PROMISC as u16;
        // SAFETY: a valid packet_mreq and its size for PACKET_ADD_MEMBERSHIP.
        check(unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_PACKET,
                libc::PACKET_ADD_MEMBERSHIP,
                (&mr as *const libc::packet_mreq).cast(),
                std::mem::size_of::<libc::packet_mreq>() as u32,
            )
        })?;
        Ok(RawSocket { fd })
    }

    /// The next frame another host sent (ours are skipped), within `timeout`.
    pub fn recv(&self, buf: &mut [u8], timeout: Duration) -> io::Result<Option<usize>> {
        let mut p = libc::pollfd { fd: self.fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd.
        let n = check(unsafe { libc::poll(&mut p, 1, timeout.as_millis().min(i32::MAX as u128) as i32) })?;
        if n == 0 {
            return Ok(None);
        }
        // SAFETY: sockaddr_ll is plain data.
        let mut from: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::sockaddr_ll>() as u32;
        // SAFETY: `buf` is writable for its length; `from`/`len` describe a valid address buffer.
        let r = unsafe {
            libc::recvfrom(
                self.fd.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                libc::MSG_DONTWAIT,
                (&mut from as *mut libc::sockaddr_ll).cast(),
                &mut len,
            )
        };
        if r < 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::WouldBlock { Ok(None) } else { Err(e) };
        }
        if from.sll_pkttype == libc::PACKET_OUTGOING {
            return Ok(None);
        }
        Ok(Some(r as usize))
    }

    /// Sends `frame` as it is.
    pub fn send(&self, frame: &[u8]) -> io::Result<()> {
        loop {
            // SAFETY: `frame` is readable for its length.
            let r = unsafe { libc::send(self.fd.as_raw_fd(), frame.as_ptr().cast(), frame.len(), 0) };
            if r >= 0 {
                return Ok(());
            }
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                // the queue is full: wait for room
                Some(libc::ENOBUFS) | Some(libc::EAGAIN) => {
                    let mut p = libc::pollfd { fd: self.fd.as_raw_fd(), events: libc::POLLOUT, revents: 0 };
                    // SAFETY: one valid pollfd.
                    unsafe { libc::poll(&mut p, 1, 10) };
                }
                _ => return Err(e),
            }
        }
    }
}
