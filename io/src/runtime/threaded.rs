//! A port on its own progress threads: one per receive queue of the backend (an AF_XDP socket
//! each on a multi-queue NIC), each servicing its queue's rings and sleeping on its socket.
//! The threads share the port's engine through one lock: the I/O of each queue (ring
//! servicing, wake-ups, fill-ring refills, transmit kicks) has its own thread, while engine
//! work is serialized — parallel engine work needs QPs sharded across engines, which this
//! layout leaves room for (a `Port` per shard).
//!
//! Application threads drive the port too: a poll of an empty watched CQ runs a progress round
//! in the caller's thread when the lock is free, and posting work transmits it before the call
//! returns. While the application keeps polling (a poll in the last [`APP_ACTIVE`]), its
//! polls are the rounds: the progress threads stay off the port (its lock
//! and its sockets) and sleep on their wake-up eventfds until that activity lapses; then they
//! take over arrivals and timers again.
//!
//! In a two-way exchange (the application's port receives the peer's requests), a poll that
//! returns completions first lingers: it keeps running rounds, up to [`Runtime::set_linger`]'s
//! budget, until the peer's next request has arrived (`Shared::linger`). A program that polls
//! its CQ for its own operation and then spins on memory for the peer's (`ib_write_lat`) finds
//! the peer's data already placed, with no thread to wake; where the wait is in vain, lingering
//! stops for a while.

use super::idle::{self, Notify, WatchedCq};
use super::Port;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use uroce_transport::{AsyncEvent, CqHandle, Device, WorkCompletion};

struct Inner {
    port: Port,
    cqs: Vec<Arc<WatchedCq>>,
    scratch: Box<[WorkCompletion; 64]>,
    /// Where the engine's asynchronous events go ([`Runtime::set_event_handler`]).
    on_event: Option<EventHandler>,
    /// Work that rides on every round (the connection manager on QP1: [`Runtime::add_round_hook`]).
    hooks: Vec<RoundHook>,
    /// The queue an application thread's next round serves (several queues: in turn, so each
    /// queue's socket transmits, as each progress thread's does).
    next_queue: usize,
}

impl Inner {
    /// One progress round: the port's I/O and timers, then the watched CQs fed.
    fn round(&mut self, queue: Option<usize>) -> bool {
        let n = self.port.queues();
        let queue = queue.or_else(|| {
            (n > 1).then(|| {
                self.next_queue = (self.next_queue + 1) % n;
                self.next_queue
            })
        });
        let polled = match queue {
            Some(q) => self.port.poll_queue(q),
            None => self.port.poll(),
        };
        let work = polled.unwrap_or_else(|e| {
            tracing::error!(%e, "port I/O error");
            false
        });
        let Inner { port, cqs, scratch, on_event, hooks, .. } = self;
        let mut work = work;
        for h in hooks.iter_mut() {
            work |= h(port);
        }
        for c in cqs.iter() {
            c.feed(port.device(), &mut scratch[..]);
        }
        if let Some(f) = on_event {
            while let Some(e) = port.device().poll_event() {
                f(e);
            }
        }
        work
    }
}

/// Work done in every progress round, on the port, under its lock (whichever thread drives
/// it): `true` when it did something. It must not call back into the runtime. A hook's timers
/// are served at the rounds' pace: at least every 100 ms ([`Port::idle_timeout`]'s cap).
pub type RoundHook = Box<dyn FnMut(&mut Port) -> bool + Send>;

/// What receives the engine's asynchronous events (QP fatal, CQ overflow, SQ drained). It runs
/// under the port's lock, on whichever thread drives the port: it must not call back into the
/// runtime.
pub type EventHandler = Box<dyn Fn(AsyncEvent) + Send + Sync>;

struct Shared {
    inner: Mutex<Inner>,
    stop: AtomicBool,
    /// One wake-up eventfd per progress thread.
    wakes: Vec<OwnedFd>,
    /// When the application last polled ([`clock`] ns; 0: never, or it is blocked).
    app_polled: AtomicU64,
    /// The application handed the port over ([`Shared::hand_over`]) and has not called since.
    handed_over: AtomicBool,
    /// The engine's `rcvd_in_seq_requests` after the last round, and when it last grew.
    requests: AtomicU64,
    request_at: AtomicU64,
    /// Its value when the application last posted (or made any other call through
    /// [`Runtime::with`]): a linger waits for a request newer than that.
    requests_at_post: AtomicU64,
    /// The linger budget (ns; 0: none) and the time before which lingering is off (a linger
    /// waited in vain).
    linger: AtomicU64,
    linger_off_until: AtomicU64,
    /// Lingers in a row that waited in vain.
    linger_misses: AtomicU64,
}

/// The default linger budget ([`Runtime::set_linger`]).
pub const LINGER: Duration = Duration::from_micros(50);
/// A poll lingers only while the peer's requests arrived this recently, or within
/// [`LINGER_RECENT_BUDGETS`] budgets when that is longer (a larger budget is a longer wait
/// for a slower peer).
const LINGER_RECENT: Duration = Duration::from_millis(1);
const LINGER_RECENT_BUDGETS: u64 = 20;
/// After this many lingers in a row that waited in vain, none for [`LINGER_BACKOFF`].
const LINGER_MISSES: u64 = 3;
const LINGER_BACKOFF: Duration = Duration::from_millis(1);

/// How recent an application call (a poll or a post) keeps the progress threads off the port.
/// The trade: a program that polls its CQ and then spins on memory (`ib_write_lat`) waits up
/// to this long for a progress thread to take an arrival; a shorter window wakes the idle
/// progress threads more often while the program polls. Measured with stock perftest over the
/// library, two processes on one veth pair, 2 CPUs (2026-12-05, polls only; `ib_write_lat -s
/// 8` t_typical / t_avg µs, `ib_write_bw -R` 64 KiB average MB/s): 20 µs 52–59 / 185–217,
/// 209–257; 50 µs 64–69 / 94–142, 309–419; **100 µs** 89–92 / 102–105, 319–336; 500 µs
/// 293–295 / 303–347, 296–362; and before the progress threads stayed off the port (500 µs,
/// sleeping on the sockets) 28–56 / 285–1346, 167–170. Posts counting too: `ib_write_bw -R`
/// 462–529, `ib_write_bw` 661, `ib_write_lat` 90 / 108–120.
pub const APP_ACTIVE: Duration = Duration::from_micros(100);

static EPOCH: OnceLock<Instant> = OnceLock::new();

/// Nanoseconds since the first call (never 0 after it).
fn clock() -> u64 {
    clock_at(Instant::now())
}

/// [`clock`] at `t` (a time already read: a round's, [`Port::polled_at`]).
fn clock_at(t: Instant) -> u64 {
    t.saturating_duration_since(*EPOCH.get_or_init(Instant::now)).as_nanos() as u64 + 1
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

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether the application counts as polling at `now` ([`clock`]).
    fn app_active_at(&self, now: u64) -> bool {
        self.app_active_until(now).is_some()
    }

    /// A progress round by whichever thread holds `g`, noting the peer's requests it took.
    fn round(&self, g: &mut Inner, queue: Option<usize>) -> bool {
        let work = g.round(queue);
        let r = g.port.device_ref().counters().rcvd_in_seq_requests;
        if r != self.requests.load(Ordering::Relaxed) {
            self.requests.store(r, Ordering::Relaxed);
            self.request_at.store(clock(), Ordering::Relaxed);
        }
        work
    }

    /// Before a poll returns completions: in a two-way exchange (the peer's requests arrived in
    /// the last [`LINGER_RECENT`], or 20 budgets) and unless lingering is off, run rounds until a request has
    /// arrived since the application last posted, for at most the budget. [`LINGER_MISSES`]
    /// lingers in a row that see none turn lingering off for [`LINGER_BACKOFF`]. Where the
    /// request is awaited and no linger brings it (in vain, or lingering is off), the
    /// application is about to wait for it somewhere the runtime cannot see (`ib_write_lat`
    /// spins on memory): the progress threads take over at once ([`Shared::hand_over`]).
    fn linger(&self, start: u64) {
        let budget = self.linger.load(Ordering::Relaxed);
        let mark = self.requests_at_post.load(Ordering::Relaxed);
        let awaited = budget > 0
            && self.requests.load(Ordering::Relaxed) == mark
            && start.saturating_sub(self.request_at.load(Ordering::Relaxed))
                < (LINGER_RECENT.as_nanos() as u64).max(budget.saturating_mul(LINGER_RECENT_BUDGETS));
        if !awaited {
            return;
        }
        if start < self.linger_off_until.load(Ordering::Relaxed) {
            self.hand_over();
            return;
        }
        let mut rounds = 0u32;
        while self.requests.load(Ordering::Relaxed) == mark {
            // The clock every 8th round: it costs as much as an idle round.
            rounds += 1;
            if rounds.is_multiple_of(8) && clock() - start > budget {
                // In vain: after LINGER_MISSES of these in a row, none for a while.
                if self.linger_misses.fetch_add(1, Ordering::Relaxed) + 1 >= LINGER_MISSES {
                    self.linger_misses.store(0, Ordering::Relaxed);
                    self.linger_off_until.store(clock() + LINGER_BACKOFF.as_nanos() as u64, Ordering::Relaxed);
                }
                self.hand_over();
                return;
            }
            match self.inner.try_lock() {
                Ok(mut g) => {
                    self.round(&mut g, None);
                }
                Err(_) => std::hint::spin_loop(),
            }
        }
        self.linger_misses.store(0, Ordering::Relaxed);
    }

    /// The application stops counting as active and the progress threads are woken to drive
    /// the port until its next call.
    fn hand_over(&self) {
        self.handed_over.store(true, Ordering::Relaxed);
        self.kick();
    }

    /// The application called (a poll or a post) at `now` ([`clock`]): it drives the port
    /// again. (One clock read per call: the callers pass the one they took.)
    fn app_called(&self, now: u64) {
        self.app_polled.store(now, Ordering::Relaxed);
        if self.handed_over.load(Ordering::Relaxed) {
            self.handed_over.store(false, Ordering::Relaxed);
        }
    }

    /// Whether the application called within `d` (handed over or not).
    fn app_called_within(&self, d: Duration) -> bool {
        let t = self.app_polled.load(Ordering::Relaxed);
        t != 0 && clock().saturating_sub(t) < d.as_nanos() as u64
    }

    /// How much longer the application counts as polling (`None`: it does not).
    fn app_active_for(&self) -> Option<Duration> {
        self.app_active_until(clock())
    }

    /// [`Shared::app_active_for`] at `now`.
    fn app_active_until(&self, now: u64) -> Option<Duration> {
        if self.handed_over.load(Ordering::Relaxed) {
            return None;
        }
        let t = self.app_polled.load(Ordering::Relaxed);
        let left = (APP_ACTIVE.as_nanos() as u64).checked_sub(now.saturating_sub(t))?;
        (t != 0 && left > 0).then(|| Duration::from_nanos(left))
    }
}

/// A port driven by progress threads and by the application's own calls. Application threads
/// reach the engine through [`Runtime::with`] (a short lock; the work it posted is transmitted
/// before it returns) and read completions of CQs registered with [`Runtime::watch_cq`] from a
/// lock-free queue ([`Runtime::poll_watched`]).
pub struct Runtime {
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
}

/// Idle polls spent spinning before a progress thread sleeps (while the application has not
/// called for [`APP_RECENT`]).
const SPIN_ROUNDS: u32 = 200;
/// An application that called this recently is only paused (spinning on memory, preempted):
/// a progress thread that takes over does not spin, which would keep a core from it.
const APP_RECENT: Duration = Duration::from_millis(1);

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
        let inner = Inner {
            port,
            cqs: Vec::new(),
            scratch: Box::new([WorkCompletion::default(); 64]),
            on_event: None,
            hooks: Vec::new(),
            next_queue: 0,
        };
        let shared = Arc::new(Shared {
            inner: Mutex::new(inner),
            stop: AtomicBool::new(false),
            wakes,
            app_polled: AtomicU64::new(0),
            handed_over: AtomicBool::new(false),
            requests: AtomicU64::new(0),
            request_at: AtomicU64::new(0),
            requests_at_post: AtomicU64::new(0),
            linger: AtomicU64::new(LINGER.as_nanos() as u64),
            linger_off_until: AtomicU64::new(0),
            linger_misses: AtomicU64::new(0),
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

    /// How long a poll that returns completions may linger for the peer's next request
    /// (default [`LINGER`]; zero: never).
    pub fn set_linger(&self, budget: Duration) {
        self.shared.linger.store(budget.as_nanos().min(u64::MAX as u128) as u64, Ordering::Relaxed);
    }

    /// Progress threads running (one per receive queue).
    pub fn progress_threads(&self) -> usize {
        self.threads.len()
    }

    /// Run `f` on the engine (a short lock), then run a progress round so the work it posted
    /// goes out before this returns. The application counts as active from here, as after a
    /// poll (a program posting a window of 64 KiB WRITEs spends longer posting than polling):
    /// what the round left, a progress thread takes once that lapses.
    pub fn with<R>(&self, f: impl FnOnce(&mut Device) -> R) -> R {
        let (r, now) = {
            let mut g = self.shared.lock();
            // The peer's requests so far, under the lock: a round that another thread ran has
            // published its count (a mark taken before the lock could miss the request whose
            // data the program just saw, and the next linger would take that one for the
            // peer's next request).
            let seen = g.port.device_ref().counters().rcvd_in_seq_requests;
            self.shared.requests_at_post.store(seen, Ordering::Relaxed);
            let r = f(g.port.device());
            self.shared.round(&mut g, None);
            // the round's clock: the time of this call
            (r, clock_at(g.port.polled_at()))
        };
        let was_active = self.shared.app_active_at(now);
        self.shared.app_called(now);
        if !was_active {
            // a progress thread asleep on its sockets computed its timeout before this post
            // (the new work's timers): wake it to take the window over
            self.shared.kick();
        }
        r
    }

    /// Run `f` on the whole port.
    pub fn with_port<R>(&self, f: impl FnOnce(&mut Port) -> R) -> R {
        let r = f(&mut self.shared.lock().port);
        self.shared.kick();
        r
    }

    /// From now on the runtime moves `cq`'s completions into a lock-free queue of `depth`
    /// entries; read them with [`Runtime::poll_watched`] without taking the port's lock.
    pub fn watch_cq(&self, cq: CqHandle, depth: usize) -> Arc<WatchedCq> {
        self.watch_cq_notify(cq, depth, None)
    }

    /// [`Runtime::watch_cq`] with a notifier that [`WatchedCq::arm`] arms (a completion
    /// channel's event). It runs on whichever thread moves the completion, under the port's
    /// lock: it must not call back into the runtime.
    pub fn watch_cq_notify(&self, cq: CqHandle, depth: usize, notify: Option<Notify>) -> Arc<WatchedCq> {
        let w = Arc::new(WatchedCq::new(cq, depth, notify));
        let mut g = self.shared.lock();
        g.cqs.retain(|c| c.handle() != cq);
        g.cqs.push(w.clone());
        w
    }

    /// From now on the engine's asynchronous events go to `f` as the runtime meets them
    /// (before, they wait in the engine for [`Device::poll_event`]).
    pub fn set_event_handler(&self, f: EventHandler) {
        self.shared.lock().on_event = Some(f);
    }

    /// From now on `h` runs in every progress round.
    pub fn add_round_hook(&self, h: RoundHook) {
        self.shared.lock().hooks.push(h);
    }

    /// Stop watching `cq` (before destroying it).
    pub fn unwatch_cq(&self, cq: CqHandle) {
        self.shared.lock().cqs.retain(|c| c.handle() != cq);
    }

    /// Up to `out.len()` completions of a watched CQ, lock-free. When it has none, the caller
    /// runs a progress round itself if no progress thread holds the port.
    pub fn poll_watched(&self, w: &WatchedCq, out: &mut [WorkCompletion]) -> usize {
        if out.is_empty() {
            return 0;
        }
        // Polling, whatever it finds: its next poll of an empty queue runs the round (a program
        // that finds completions at every poll still drains them, and they come from rounds).
        let mut n = w.pop_into(out);
        let mut at = None;
        if n == 0 {
            if let Ok(mut g) = self.shared.inner.try_lock() {
                self.shared.round(&mut g, None);
                at = Some(g.port.polled_at());
            }
            n = w.pop_into(out);
        }
        // The round's clock where it ran one (a poll loop's every call: no second read).
        let now = at.map_or_else(clock, clock_at);
        self.shared.app_called(now);
        if n > 0 {
            self.shared.linger(now);
        }
        n
    }

    /// [`Runtime::poll_watched`] by handle (unwatched CQs: polled under the lock).
    pub fn poll_cq(&self, cq: CqHandle, out: &mut [WorkCompletion]) -> usize {
        let w = self.shared.lock().cqs.iter().find(|c| c.handle() == cq).cloned();
        match w {
            Some(w) => self.poll_watched(&w, out),
            None => self.with(|d| d.poll_cq(cq, out).unwrap_or(0)),
        }
    }

    /// The application is about to block (waiting for a completion event): the progress
    /// threads take over arrivals at once.
    pub fn app_blocking(&self) {
        self.shared.hand_over();
    }

    /// Stop the progress thread and give the port back (`None` only if another handle to
    /// the shared state is still alive, which the API does not allow).
    pub fn stop(mut self) -> Option<Port> {
        self.halt();
        let shared = self.shared.clone();
        drop(self);
        Arc::try_unwrap(shared).ok().map(|s| s.inner.into_inner().unwrap_or_else(|e| e.into_inner()).port)
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
/// port's only thread, serving everything); `wake` indexes its eventfd. It only try-locks the
/// port: when an application thread holds it, that thread is doing the round, and blocking on
/// the lock would cost both a futex sleep and a wake-up.
fn progress(s: &Shared, queue: Option<usize>, wake: usize) {
    let fd = {
        let g = s.lock();
        match queue {
            Some(q) => g.port.queue_fd(q),
            None => g.port.raw_fd(),
        }
    };
    // With a descriptor to wait on (arrivals wake us; posted work kicks the eventfd), sleep
    // until the next engine timer, at most 100 ms; without one, poll every 1 ms.
    let cap = if fd.is_some() { Duration::from_millis(100) } else { Duration::from_millis(1) };
    let mut idle = 0u32;
    // The least the next look at an active application waits: doubling from [`APP_ACTIVE`]
    // up to [`ACTIVE_RECHECK_MAX`] while it stays active, zero once it was not.
    let mut backoff = Duration::ZERO;
    while !s.stop.load(Ordering::Acquire) {
        if let Some(left) = s.app_active_for() {
            // The application is polling and runs the rounds itself (arrivals, transmits,
            // timers): stay off the port's lock and off its socket until it stops. A round
            // here would only contend with it — and with more busy threads than cores, a
            // progress thread preempted while holding the lock left the application's polls
            // failing `try_lock` for a whole scheduler tick (perftest -R: ACKs 4 ms late) —
            // and even sleeping in `ppoll` on an AF_XDP socket in copy mode runs its transmit
            // path, on the socket mutex the application's `sendto` takes. Posted work does
            // not kick while the application is active; `app_blocking` does.
            //
            // Each look wakes this thread, and on a machine whose cores the application's
            // threads keep busy a wake-up preempts one of them (`ib_write_lat` over the
            // library: every ~12th round trip 10–20 µs late at a look every 100 µs): while
            // the application stays active, look ever less often. Where it stops calling to
            // wait for something the runtime cannot see, it hands over itself (`linger`).
            idle::wait(&[], s.wakes[wake].as_raw_fd(), left.max(backoff));
            backoff = (backoff * 2).clamp(APP_ACTIVE, ACTIVE_RECHECK_MAX);
            idle = 0;
            continue;
        }
        backoff = Duration::ZERO;
        let (work, sleep) = match s.inner.try_lock() {
            Ok(mut g) => (s.round(&mut g, queue), g.port.idle_timeout(cap)),
            Err(std::sync::TryLockError::Poisoned(p)) => {
                let mut g = p.into_inner();
                (s.round(&mut g, queue), g.port.idle_timeout(cap))
            }
            // An application thread is running a round: look again shortly. Not woken by the
            // sockets: what is waiting there is that round's to take, and a thread woken by it
            // at once while the holder is preempted (more busy threads than cores) only keeps
            // the holder off a core.
            Err(std::sync::TryLockError::WouldBlock) => {
                idle::wait(&[], s.wakes[wake].as_raw_fd(), BUSY_RECHECK);
                continue;
            }
        };
        if work {
            idle = 0;
            continue;
        }
        idle += 1;
        if idle < SPIN_ROUNDS && !s.app_called_within(APP_RECENT) {
            std::hint::spin_loop();
            continue;
        }
        idle::wait(fd.as_slice(), s.wakes[wake].as_raw_fd(), sleep);
    }
}

/// The longest a progress thread sleeps between looks at whether the application still polls
/// (it starts at [`APP_ACTIVE`] and doubles while the application stays active): a program
/// that stops calling without blocking and without a linger's hand-over waits up to this long
/// (plus [`APP_ACTIVE`]) for a progress thread.
const ACTIVE_RECHECK_MAX: Duration = Duration::from_micros(1600);

/// How long a progress thread that found the port busy sleeps before it looks again (kicks
/// wake it sooner).
const BUSY_RECHECK: Duration = Duration::from_micros(100);
