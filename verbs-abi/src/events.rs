//! Completion channels and async events, with no kernel: a channel is a pipe. Arming a CQ
//! (`ibv_req_notify_cq`) arms its [`WatchedCq`](uroce_io::runtime::WatchedCq); when the
//! runtime next moves a qualifying completion into the CQ's queue, it writes the CQ's address
//! to the channel's pipe, whose read end is `ibv_comp_channel.fd`. So the descriptor is
//! readable exactly when an event is queued, and a program may `poll`/`epoll` it or make it
//! non-blocking (`ibv_get_cq_event` then fails with `EAGAIN`), as with the kernel's event file
//! (rdma-core `ibv_get_cq_event`, `ib_uverbs_comp_handler`).
//!
//! Event accounting is rdma-core's: `ibv_get_cq_event` counts the events it hands out per CQ,
//! `ibv_ack_cq_events` adds to `cq->comp_events_completed` under `cq->mutex` and signals
//! `cq->cond`, and `ibv_destroy_cq` waits until every event handed out has been acknowledged
//! (the `ibv_get_cq_event(3)` contract). An event of a CQ destroyed before it was read is
//! skipped, as the kernel drops a destroyed CQ's queued events (`ib_uverbs_release_ucq`).
//!
//! Async events ([`AsyncEvents`]): the engine's (QP fatal, SQ drained, CQ overflow) are handed
//! by the runtime to the context's queue, whose eventfd is `ibv_context.async_fd`.

use crate::abi::*;
use crate::datapath::{Cq, CQS};
use crate::device::context;
use crate::{set_errno, Registry};
use core::ffi::{c_int, c_void};
use core::ptr::null_mut;
use std::collections::{BTreeMap, VecDeque};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use uroce_io::runtime::Notify;
use uroce_transport::AsyncEvent;

/// A completion channel.
#[repr(C)]
pub struct Channel {
    /// What the program sees (`fd`: the pipe's read end, owned here).
    pub ibv: IbvCompChannel,
    /// The pipe's write end (non-blocking: a full pipe never stalls the runtime).
    write: OwnedFd,
}

impl Drop for Channel {
    fn drop(&mut self) {
        // SAFETY: the read end is the channel's own, made in ibv_create_comp_channel; nothing
        // uses it once the channel is unregistered.
        unsafe { libc::close(self.ibv.fd) };
    }
}

/// Live completion channels.
pub static CHANNELS: Registry<Channel> = Registry::new();

/// `ibv_create_comp_channel(3)`.
#[no_mangle]
pub unsafe extern "C" fn ibv_create_comp_channel(ctx: *mut IbvContext) -> *mut IbvCompChannel {
    if context(ctx).is_none() {
        set_errno(libc::EINVAL);
        return null_mut();
    }
    let mut fds = [0 as c_int; 2];
    // SAFETY: `fds` has room for the two descriptors pipe2 writes.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return null_mut();
    }
    // SAFETY: fresh descriptors nobody else owns; the write end becomes non-blocking.
    let write = unsafe {
        libc::fcntl(fds[1], libc::F_SETFL, libc::O_NONBLOCK);
        OwnedFd::from_raw_fd(fds[1])
    };
    let ch = Box::into_raw(Box::new(Channel { ibv: IbvCompChannel { context: ctx, fd: fds[0], refcnt: 0 }, write }));
    CHANNELS.insert(ch.cast(), ch);
    ch.cast()
}

/// `ibv_destroy_comp_channel(3)`: `EBUSY` while a CQ uses it.
#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_comp_channel(channel: *mut IbvCompChannel) -> c_int {
    let Some(users) = refcnt(channel) else { return libc::EINVAL };
    if users.load(Ordering::Acquire) > 0 {
        return libc::EBUSY;
    }
    drop(CHANNELS.take(channel.cast()));
    0
}

/// What `ibv_create_cq` needs to attach a CQ to `channel` (NULL: none): the notifier the
/// runtime calls, and the slot it learns the CQ's address from once the CQ exists.
pub(crate) fn notifier(
    ctx: *mut IbvContext,
    channel: *mut IbvCompChannel,
) -> Result<Option<(Notify, Arc<AtomicUsize>)>, c_int> {
    if channel.is_null() {
        return Ok(None);
    }
    let ch = CHANNELS.get(channel.cast()).ok_or(libc::EINVAL)?;
    if ch.ibv.context != ctx {
        return Err(libc::EINVAL);
    }
    let fd = ch.write.as_raw_fd();
    let slot = Arc::new(AtomicUsize::new(0));
    let at = slot.clone();
    let f = move || {
        let addr = at.load(Ordering::Acquire) as u64;
        // SAFETY: `fd` is the channel's write end, open while a CQ uses the channel (destroying
        // the channel is EBUSY until then); 8 bytes (< PIPE_BUF) are written whole or not at
        // all. A full pipe (thousands of unread events) loses this event, never memory.
        unsafe { libc::write(fd, (&addr as *const u64).cast(), 8) };
    };
    Ok(Some((Box::new(f), slot)))
}

/// The channel's `refcnt` (CQs attached), if `channel` is a live one of ours.
fn refcnt<'a>(channel: *mut IbvCompChannel) -> Option<&'a AtomicI32> {
    CHANNELS.get(channel.cast())?;
    // SAFETY: a live channel (registered): its `refcnt` is an aligned i32 that lives as long
    // as the channel, and uroce touches it only atomically.
    Some(unsafe { AtomicI32::from_ptr(core::ptr::addr_of_mut!((*channel).refcnt)) })
}

/// `ibv_create_cq` attached a CQ to `channel`.
pub(crate) fn attach(channel: *mut IbvCompChannel) {
    if let Some(r) = refcnt(channel) {
        r.fetch_add(1, Ordering::AcqRel);
    }
}

/// `ibv_destroy_cq` detached a CQ from `channel`.
pub(crate) fn detach(channel: *mut IbvCompChannel) {
    if let Some(r) = refcnt(channel) {
        r.fetch_sub(1, Ordering::AcqRel);
    }
}

/// `ops.req_notify_cq`: arm the CQ for its next completion (`solicited_only`: its next
/// solicited or unsuccessful one).
pub unsafe extern "C" fn req_notify_cq(cq: *mut c_void, solicited_only: c_int) -> c_int {
    let Some(c) = CQS.get(cq) else { return libc::EINVAL };
    if c.ibv.channel.is_null() {
        return libc::EINVAL;
    }
    c.watch.arm(solicited_only != 0);
    0
}

/// `ibv_get_cq_event(3)`: the next event of `channel` (blocking unless its descriptor was made
/// non-blocking). Returns 0, or -1 with `errno`.
#[no_mangle]
pub unsafe extern "C" fn ibv_get_cq_event(
    channel: *mut IbvCompChannel,
    cq: *mut *mut IbvCq,
    cq_context: *mut *mut c_void,
) -> c_int {
    let Some(ch) = CHANNELS.get(channel.cast()) else {
        set_errno(libc::EINVAL);
        return -1;
    };
    if cq.is_null() || cq_context.is_null() {
        set_errno(libc::EINVAL);
        return -1;
    }
    // Arrivals while this thread sleeps are the progress threads' at once.
    if let Some(rt) = context(ch.ibv.context).and_then(|c| c.runtime.get()).and_then(|r| r.as_deref().ok()) {
        rt.app_blocking();
    }
    loop {
        let mut addr = 0u64;
        // SAFETY: reads 8 bytes into `addr` from the channel's own descriptor.
        let n = unsafe { libc::read(ch.ibv.fd, (&mut addr as *mut u64).cast(), 8) };
        if n != 8 {
            if n >= 0 {
                set_errno(libc::EIO);
            }
            return -1;
        }
        let p = addr as usize as *mut IbvCq;
        let Some(c) = CQS.get(p.cast()) else { continue };
        if c.ibv.channel != channel {
            continue;
        }
        c.events_read.fetch_add(1, Ordering::AcqRel);
        // SAFETY: the caller's out-pointers, checked non-NULL above.
        unsafe {
            *cq = p;
            *cq_context = c.ibv.cq_context;
        }
        return 0;
    }
}

/// `ibv_ack_cq_events(3)`: acknowledge `n` events of `cq` (rdma-core's code: under
/// `cq->mutex`, signalling `cq->cond` for a waiting `ibv_destroy_cq`).
#[no_mangle]
pub unsafe extern "C" fn ibv_ack_cq_events(cq: *mut IbvCq, n: u32) {
    let Some(_) = CQS.get(cq.cast()) else { return };
    // SAFETY: a live CQ of ours: its mutex and cond were initialised in ibv_create_cq.
    unsafe {
        count_acked(&mut (*cq).mutex, &mut (*cq).cond, &mut (*cq).comp_events_completed, n);
    }
}

/// rdma-core's acknowledgement: add `n` to an object's event counter under its mutex and
/// signal its cond (which a destroy may be waiting on).
///
/// # Safety
/// The three point into one live object whose mutex and cond are initialised.
unsafe fn count_acked(m: *mut libc::pthread_mutex_t, c: *mut libc::pthread_cond_t, counter: *mut u32, n: u32) {
    // SAFETY: the caller's contract.
    unsafe {
        libc::pthread_mutex_lock(m);
        *counter = (*counter).wrapping_add(n);
        libc::pthread_cond_signal(c);
        libc::pthread_mutex_unlock(m);
    }
}

/// Before `cq` is destroyed: wait until every event handed out for it has been acknowledged.
pub(crate) fn wait_acked(cq: *mut IbvCq, c: &Cq) {
    let want = c.events_read.load(Ordering::Acquire);
    // SAFETY: a live CQ of ours (registered); its mutex and cond are initialised.
    unsafe {
        libc::pthread_mutex_lock(&mut (*cq).mutex);
        while ((*cq).comp_events_completed.wrapping_sub(want) as i32) < 0 {
            libc::pthread_cond_wait(&mut (*cq).cond, &mut (*cq).mutex);
        }
        libc::pthread_mutex_unlock(&mut (*cq).mutex);
    }
}

/// A context's asynchronous events: the engine's, queued by the runtime's handler, with an
/// eventfd in semaphore mode (`async_fd`: readable while one is queued, one read per event)
/// and the QPs and CQs they can name. Shared by the context and its runtime's handler, so the
/// descriptor outlives both.
pub struct AsyncEvents {
    fd: OwnedFd,
    queue: Mutex<VecDeque<AsyncEvent>>,
    /// The context's QPs by number and CQs by engine handle: the objects events name.
    qps: Mutex<BTreeMap<u32, usize>>,
    cqs: Mutex<BTreeMap<u32, usize>>,
    srqs: Mutex<BTreeMap<u32, usize>>,
}

fn locked<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl AsyncEvents {
    /// A fresh queue and its eventfd.
    pub fn new() -> std::io::Result<Arc<AsyncEvents>> {
        // SAFETY: plain syscall; the descriptor is checked, then owned.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_SEMAPHORE) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Arc::new(AsyncEvents {
            // SAFETY: a fresh descriptor nobody else owns.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            queue: Mutex::new(VecDeque::new()),
            qps: Mutex::new(BTreeMap::new()),
            cqs: Mutex::new(BTreeMap::new()),
            srqs: Mutex::new(BTreeMap::new()),
        }))
    }

    /// The descriptor (`ibv_context.async_fd`).
    pub fn fd(&self) -> c_int {
        self.fd.as_raw_fd()
    }

    /// Queue `e` if it names one of this context's QPs or CQs (the runtime's handler offers
    /// each event to the device's contexts in turn); returns whether it did.
    pub fn raise_if_mine(&self, e: AsyncEvent) -> bool {
        let mine = match e {
            AsyncEvent::QpFatal(n) | AsyncEvent::SqDrained(n) => locked(&self.qps).contains_key(&n),
            AsyncEvent::CqError(h) => locked(&self.cqs).contains_key(&h.0),
            AsyncEvent::SrqLimitReached(h) => locked(&self.srqs).contains_key(&h.0),
        };
        if mine {
            self.raise(e);
        }
        mine
    }

    /// Queue `e`.
    pub fn raise(&self, e: AsyncEvent) {
        locked(&self.queue).push_back(e);
        let one = 1u64;
        // SAFETY: 8 bytes from a valid u64 to our own eventfd; a failure (counter overflow
        // after 2^64 unread events) loses a wake-up, never memory.
        unsafe { libc::write(self.fd.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }

    /// `qp` (number `qpn`) can be named by events from now on; `None`: no longer.
    pub fn set_qp(&self, qpn: u32, qp: Option<*mut IbvQp>) {
        let mut m = locked(&self.qps);
        match qp {
            Some(p) => m.insert(qpn, p as usize),
            None => m.remove(&qpn),
        };
    }

    /// The same for the CQ with engine handle `cq`.
    pub fn set_cq(&self, cq: u32, ptr: Option<*mut IbvCq>) {
        let mut m = locked(&self.cqs);
        match ptr {
            Some(p) => m.insert(cq, p as usize),
            None => m.remove(&cq),
        };
    }

    /// The same for the SRQ with engine handle `srq`.
    pub fn set_srq(&self, srq: u32, ptr: Option<*mut IbvSrq>) {
        let mut m = locked(&self.srqs);
        match ptr {
            Some(p) => m.insert(srq, p as usize),
            None => m.remove(&srq),
        };
    }

    /// The next queued event as libibverbs names it, if its object still exists.
    fn next(&self) -> Option<Option<IbvAsyncEvent>> {
        let e = locked(&self.queue).pop_front()?;
        let qp = |n: u32| locked(&self.qps).get(&n).copied();
        Some(
            match e {
                // rxe_qp_error raises IB_EVENT_QP_FATAL for every error of a connected QP.
                AsyncEvent::QpFatal(n) => qp(n).map(|p| (p, EVENT_QP_FATAL)),
                AsyncEvent::SqDrained(n) => qp(n).map(|p| (p, EVENT_SQ_DRAINED)),
                AsyncEvent::CqError(h) => locked(&self.cqs).get(&h.0).copied().map(|p| (p, EVENT_CQ_ERR)),
                AsyncEvent::SrqLimitReached(h) => {
                    locked(&self.srqs).get(&h.0).copied().map(|p| (p, EVENT_SRQ_LIMIT_REACHED))
                }
            }
            .map(|(p, event_type)| IbvAsyncEvent { element: p as *mut c_void, event_type }),
        )
    }
}

/// `enum ibv_event_type` values uroce raises.
const EVENT_CQ_ERR: c_int = 0;
const EVENT_QP_FATAL: c_int = 1;
const EVENT_SQ_DRAINED: c_int = 5;
const EVENT_SRQ_LIMIT_REACHED: c_int = 15;

/// `ibv_get_async_event(3)`: the next event of `ctx` (blocking unless its `async_fd` was made
/// non-blocking: then -1 with `EAGAIN`). Events of objects destroyed since are skipped.
#[no_mangle]
pub unsafe extern "C" fn ibv_get_async_event(ctx: *mut IbvContext, event: *mut IbvAsyncEvent) -> c_int {
    let Some(c) = context(ctx) else {
        set_errno(libc::EINVAL);
        return -1;
    };
    if event.is_null() {
        set_errno(libc::EINVAL);
        return -1;
    }
    loop {
        let mut v = 0u64;
        // SAFETY: reads 8 bytes into `v` from the context's own eventfd.
        let n = unsafe { libc::read(c.events.fd(), (&mut v as *mut u64).cast(), 8) };
        if n != 8 {
            if n >= 0 {
                set_errno(libc::EIO);
            }
            return -1;
        }
        if let Some(Some(e)) = c.events.next() {
            // SAFETY: the caller's struct ibv_async_event, checked non-NULL.
            unsafe { event.write(e) };
            return 0;
        }
    }
}

/// `ibv_ack_async_event(3)`: counts the event on its QP (`events_completed`) or CQ
/// (`async_events_completed`) or SRQ (`events_completed`) under the object's mutex, as rdma-core
/// does.
#[no_mangle]
pub unsafe extern "C" fn ibv_ack_async_event(event: *mut IbvAsyncEvent) {
    if event.is_null() {
        return;
    }
    // SAFETY: the caller's struct ibv_async_event.
    let (el, ty) = unsafe { ((*event).element, (*event).event_type) };
    // SAFETY (both arms): a live object of ours (registered), its mutex and cond initialised.
    unsafe {
        if ty == EVENT_CQ_ERR {
            if CQS.get(el).is_some() {
                let cq = el.cast::<IbvCq>();
                count_acked(&mut (*cq).mutex, &mut (*cq).cond, &mut (*cq).async_events_completed, 1);
            }
        } else if ty == EVENT_SRQ_LIMIT_REACHED {
            if crate::srq::SRQS.get(el).is_some() {
                let srq = el.cast::<IbvSrq>();
                count_acked(&mut (*srq).mutex, &mut (*srq).cond, &mut (*srq).events_completed, 1);
            }
        } else if crate::datapath::QPS.get(el).is_some() {
            let qp = el.cast::<IbvQp>();
            count_acked(&mut (*qp).mutex, &mut (*qp).cond, &mut (*qp).events_completed, 1);
        }
    }
}
