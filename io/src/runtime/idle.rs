//! What the threaded and the sharded runtime's progress loops share: moving an engine CQ's
//! completions into the lock-free queue an application polls, and sleeping on the backend's
//! descriptors and a wake-up eventfd.

use crossbeam::queue::ArrayQueue;
use std::os::fd::RawFd;
use std::time::Duration;
use uroce_transport::{CqHandle, Device, WorkCompletion};

/// Move completions of `cq` into `q` while it has room (`buf`: scratch); returns how many.
pub(super) fn feed_cq(
    dev: &mut Device,
    cq: CqHandle,
    q: &ArrayQueue<WorkCompletion>,
    buf: &mut [WorkCompletion],
) -> usize {
    let mut moved = 0;
    while q.len() < q.capacity() {
        let room = (q.capacity() - q.len()).min(buf.len());
        let n = dev.poll_cq(cq, &mut buf[..room]).unwrap_or(0);
        for wc in &buf[..n] {
            let _ = q.push(*wc);
        }
        moved += n;
        if n < room {
            break;
        }
    }
    moved
}

/// Sleep until one of `sockets` or the wake-up eventfd `wake` is readable, or `timeout` (at
/// most 1 s); a zero timeout returns at once.
pub(super) fn wait(sockets: &[RawFd], wake: RawFd, timeout: Duration) {
    if timeout.is_zero() {
        std::hint::spin_loop();
        return;
    }
    let mut fds: Vec<libc::pollfd> = std::iter::once(wake)
        .chain(sockets.iter().copied())
        .map(|fd| libc::pollfd { fd, events: libc::POLLIN, revents: 0 })
        .collect();
    let t = timeout.min(Duration::from_secs(1));
    let ts = libc::timespec { tv_sec: t.as_secs() as libc::time_t, tv_nsec: t.subsec_nanos() as libc::c_long };
    // SAFETY: `fds` is a valid array of `fds.len()` pollfd structures and `ts` a valid timespec
    // for the duration of the call; a null signal mask means "unchanged".
    unsafe { libc::ppoll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, &ts, std::ptr::null()) };
    if fds[0].revents & libc::POLLIN != 0 {
        let mut v: u64 = 0;
        // SAFETY: reading 8 bytes into a valid u64 from our eventfd clears it.
        unsafe { libc::read(wake, (&mut v as *mut u64).cast(), 8) };
    }
}
