//! What the threaded and the sharded runtime's progress loops share: moving an engine CQ's
//! completions into the lock-free queue an application polls (with its notification), and
//! sleeping on the backend's descriptors and a wake-up eventfd.

use crossbeam::queue::ArrayQueue;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;
use uroce_transport::{CqHandle, Device, WorkCompletion};

/// A CQ whose completions the runtime moves into a lock-free queue the application polls
/// ([`Runtime::poll_watched`]), with an optional notification: after [`WatchedCq::arm`], the
/// next completion moved (or, armed solicited-only, the next one that
/// [`WorkCompletion::raises_solicited_event`]) calls the notifier once — `ibv_req_notify_cq`'s
/// contract (IBTA §11.4.2.2).
pub struct WatchedCq {
    cq: CqHandle,
    queue: ArrayQueue<WorkCompletion>,
    /// 0: not armed; [`ARMED_NEXT`]; [`ARMED_SOLICITED`].
    armed: AtomicU8,
    notify: Option<Notify>,
}

/// What a [`WatchedCq`] calls when an armed notification fires.
pub type Notify = Box<dyn Fn() + Send + Sync>;

const ARMED_NEXT: u8 = 1;
const ARMED_SOLICITED: u8 = 2;

impl WatchedCq {
    pub(super) fn new(cq: CqHandle, depth: usize, notify: Option<Notify>) -> WatchedCq {
        WatchedCq { cq, queue: ArrayQueue::new(depth.max(1)), armed: AtomicU8::new(0), notify }
    }

    /// The engine's CQ.
    pub fn handle(&self) -> CqHandle {
        self.cq
    }

    /// Request one notification for the next completion (`solicited_only`: the next solicited
    /// or unsuccessful one). Arming again before it fires keeps the broader request.
    pub fn arm(&self, solicited_only: bool) {
        let want = if solicited_only { ARMED_SOLICITED } else { ARMED_NEXT };
        let _ = self.armed.fetch_update(Ordering::AcqRel, Ordering::Acquire, |a| match a {
            ARMED_NEXT => None,
            _ => Some(want),
        });
    }

    /// Completions moved but not yet polled.
    pub fn pending(&self) -> usize {
        self.queue.len()
    }

    /// Remove the moved completions of QP `qpn`, keeping the others in order (a QP modified to
    /// RESET: the engine removes its completions from the engine CQ, this from what was already
    /// moved). Call it with the engine locked, so that nothing is moved meanwhile.
    pub fn discard_qp(&self, qpn: u32) -> usize {
        let mut keep = Vec::with_capacity(self.queue.len());
        let mut gone = 0;
        while let Some(wc) = self.queue.pop() {
            if wc.qp_num == qpn {
                gone += 1;
            } else {
                keep.push(wc);
            }
        }
        for wc in keep {
            let _ = self.queue.push(wc);
        }
        gone
    }

    pub(super) fn pop_into(&self, out: &mut [WorkCompletion]) -> usize {
        let mut n = 0;
        while n < out.len() {
            match self.queue.pop() {
                Some(wc) => {
                    out[n] = wc;
                    n += 1;
                }
                None => break,
            }
        }
        n
    }

    /// Move the engine CQ's completions in while there is room; fire an armed notification.
    pub(super) fn feed(&self, dev: &mut Device, buf: &mut [WorkCompletion]) -> usize {
        let mut fire = false;
        let mut moved = 0;
        loop {
            let room = self.queue.capacity().saturating_sub(self.queue.len()).min(buf.len());
            if room == 0 {
                break;
            }
            let n = dev.poll_cq(self.cq, &mut buf[..room]).unwrap_or(0);
            for wc in &buf[..n] {
                let _ = self.queue.push(*wc);
            }
            moved += n;
            if n > 0 {
                fire |= match self.armed.load(Ordering::Acquire) {
                    ARMED_NEXT => true,
                    ARMED_SOLICITED => buf[..n].iter().any(WorkCompletion::raises_solicited_event),
                    _ => false,
                };
            }
            if n < room {
                break;
            }
        }
        if fire && self.armed.swap(0, Ordering::AcqRel) != 0 {
            if let Some(f) = &self.notify {
                f();
            }
        }
        moved
    }
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
