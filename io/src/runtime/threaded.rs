//! A port on its own progress threads: one per receive queue of the backend (an AF_XDP socket
//! each on a multi-queue NIC), each servicing its queue's rings and sleeping on its socket.
//! The threads share the port's engine through one lock: the I/O of each queue (ring
//! servicing, wake-ups, fill-ring refills, transmit kicks) has its own thread, while engine
//! work is serialized — parallel engine work needs QPs sharded across engines, which this
//! layout leaves room for (a `Port` per shard).

use super::{idle, Port};
use crossbeam::queue::ArrayQueue;
use std::collections::HashMap;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;
use uroce_transport::{CqHandle, Device, WorkCompletion};

struct Shared {
    port: Mutex<Port>,
    stop: AtomicBool,
    /// One wake-up eventfd per progress thread.
    wakes: Vec<OwnedFd>,
    /// Completion queues the progress thread drains into lock-free queues.
    cqs: Mutex<HashMap<u32, Arc<ArrayQueue<WorkCompletion>>>>,
}

impl Shared {
    fn kick(&self) {
        let one: u64 = 1;
        for w in &self.wakes {
            // SAFETY: `w` is an eventfd we own; writing 8 bytes from a valid u64 is its ABI.
            // A failure (counter overflow, impossible here) only loses a wake-up, never memory.
            unsafe { libc::write(w.as_raw_fd(), (&one as *const u64).cast(), 8) };
        }
    }

    fn lock(&self) -> MutexGuard<'_, Port> {
        self.port.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A port driven by a progress thread. Application threads reach the engine through
/// [`Runtime::with`] (a short lock; posting work wakes the progress thread at once) and
/// poll completions either the same way or, for CQs registered with [`Runtime::watch_cq`],
/// from a lock-free queue the progress thread fills.
pub struct Runtime {
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
}

/// Idle polls spent spinning before the progress thread sleeps.
const SPIN_ROUNDS: u32 = 200;

impl Runtime {
    /// Start the progress threads: one per receive queue of the port's backend.
    pub fn start(port: Port) -> std::io::Result<Runtime> {
        let n = port.queues().max(1);
        let mut wakes = Vec::with_capacity(n);
        for _ in 0..n {
            // SAFETY: plain syscall; the returned descriptor is checked and then owned.
            let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
            if fd < 0 {
                return Err(std::io::Error::last_os_error());
            }
            // SAFETY: `fd` is a fresh descriptor nobody else owns.
            wakes.push(unsafe { OwnedFd::from_raw_fd(fd) });
        }
        let shared = Arc::new(Shared {
            port: Mutex::new(port),
            stop: AtomicBool::new(false),
            wakes,
            cqs: Mutex::new(HashMap::new()),
        });
        let mut rt = Runtime { shared, threads: Vec::with_capacity(n) };
        for q in 0..n {
            let s = rt.shared.clone();
            let queue = (n > 1).then_some(q);
            let t = std::thread::Builder::new()
                .name(format!("uroce-progress-q{q}"))
                .spawn(move || progress(&s, queue, q))?;
            rt.threads.push(t);
        }
        Ok(rt)
    }

    /// Progress threads running (one per receive queue).
    pub fn progress_threads(&self) -> usize {
        self.threads.len()
    }

    /// Run `f` on the engine (a short lock), then wake the progress thread so work it posted
    /// goes out at once.
    pub fn with<R>(&self, f: impl FnOnce(&mut Device) -> R) -> R {
        let r = f(self.shared.lock().device());
        self.shared.kick();
        r
    }

    /// Run `f` on the whole port.
    pub fn with_port<R>(&self, f: impl FnOnce(&mut Port) -> R) -> R {
        let r = f(&mut self.shared.lock());
        self.shared.kick();
        r
    }

    /// From now on the progress thread moves `cq`'s completions into a lock-free queue of
    /// `depth` entries; read them with [`Runtime::poll_cq`] without taking the port's lock.
    pub fn watch_cq(&self, cq: CqHandle, depth: usize) {
        self.shared.cqs.lock().unwrap_or_else(|e| e.into_inner()).insert(cq.0, Arc::new(ArrayQueue::new(depth.max(1))));
    }

    /// Up to `out.len()` completions of a watched CQ, lock-free. Unwatched CQs: polled under
    /// the lock.
    pub fn poll_cq(&self, cq: CqHandle, out: &mut [WorkCompletion]) -> usize {
        let q = self.shared.cqs.lock().unwrap_or_else(|e| e.into_inner()).get(&cq.0).cloned();
        match q {
            Some(q) => {
                let mut n = 0;
                while n < out.len() {
                    match q.pop() {
                        Some(wc) => {
                            out[n] = wc;
                            n += 1;
                        }
                        None => break,
                    }
                }
                n
            }
            None => self.with(|d| d.poll_cq(cq, out).unwrap_or(0)),
        }
    }

    /// Stop the progress thread and give the port back (`None` only if another handle to
    /// the shared state is still alive, which the API does not allow).
    pub fn stop(mut self) -> Option<Port> {
        self.halt();
        let shared = self.shared.clone();
        drop(self);
        Arc::try_unwrap(shared).ok().map(|s| s.port.into_inner().unwrap_or_else(|e| e.into_inner()))
    }

    fn halt(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        self.shared.kick();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        self.halt();
    }
}

/// The loop of one progress thread: `queue` is the receive queue it serves (`None`: the
/// port's only thread, serving everything); `wake` indexes its eventfd.
fn progress(s: &Shared, queue: Option<usize>, wake: usize) {
    let mut idle = 0u32;
    let mut buf = [WorkCompletion::default(); 64];
    while !s.stop.load(Ordering::Acquire) {
        let (work, sleep, fd) = {
            let mut p = s.lock();
            let polled = match queue {
                Some(q) => p.poll_queue(q),
                None => p.poll(),
            };
            let work = match polled {
                Ok(w) => w,
                Err(e) => {
                    tracing::error!(%e, "port I/O error");
                    false
                }
            };
            // Feed the watched CQs.
            let cqs = s.cqs.lock().unwrap_or_else(|e| e.into_inner()).clone();
            for (cq, q) in cqs {
                idle::feed_cq(p.device(), CqHandle(cq), &q, &mut buf);
            }
            // With a descriptor to wait on (arrivals wake us; posted work kicks the eventfd),
            // sleep until the next engine timer, at most 100 ms; without one, poll every 1 ms.
            let fd = match queue {
                Some(q) => p.queue_fd(q),
                None => p.raw_fd(),
            };
            let cap = if fd.is_some() { Duration::from_millis(100) } else { Duration::from_millis(1) };
            (work, p.idle_timeout(cap), fd)
        };
        if work {
            idle = 0;
            continue;
        }
        idle += 1;
        if idle < SPIN_ROUNDS {
            std::hint::spin_loop();
            continue;
        }
        idle::wait(fd.as_slice(), s.wakes[wake].as_raw_fd(), sleep);
    }
}
