//! The sharded multi-core runtime: `N` engine shards on one interface, each a [`Port`] of its
//! own (engine, clock, AF_XDP sockets) owned outright by one progress thread, which may be
//! pinned to a core. Nothing on the data path is shared between shards: no lock, no ring, no
//! UMEM.
//!
//! # Placement and steering
//!
//! * QPs are placed on shards by QPN: shard `s`'s engine is built with
//!   `DeviceConfig::qpn_shard = { index: s, count: N }`, so every QP it creates has
//!   `qpn % N == s` ([`ShardedRuntime::shard_of`]).
//! * The XDP program is installed once per interface with `ProgramConfig::shards = N` and
//!   shared by the shards' backends (an `Arc<XdpSteering>`; detached when the last shard's
//!   backend goes). A RoCE frame arriving on RX queue `q` goes to XSKMAP slot
//!   `q * N + dest_qpn % N`.
//! * Shard `s` binds one AF_XDP socket on each RX queue `q` with `q % N == s` (every `N`-th
//!   queue of `XdpOptions::queues` when that lists them; at least `N` queues needed) and
//!   registers it at slot `(q, s)`. The kernel allows one UMEM
//!   pool per (device, queue) — a second socket on a queue must share the first one's fill and
//!   completion rings, i.e. a lock between shards — so a shard owns its queues exclusively.
//!
//! What this steering guarantees: a frame reaches a shard's engine only if its destination QP
//! is that shard's. A frame for shard `t` may still *arrive* on a queue of shard `s` — on a
//! NIC whose RSS hashes addresses and UDP ports, most of them do; on veth, when a QP is
//! connected to a peer QP of another class. So shard `s`'s socket on queue `q` is registered
//! at every slot `(q, t)`, and its engine hands such a frame back unchecked
//! (`RxDrop::OtherShard`); the port's relay copies it into shard `t`'s inbox (a lock-free
//! queue of buffers from a shared pool: no allocation once warm), and shard `t`'s thread
//! feeds it to its engine, which checks it as any frame ([`PortStats::wrong_shard`],
//! `relayed`, `relay_full`, `relayed_in` count it). A relayed frame costs one copy and a
//! wake-up of a sleeping shard; a full inbox loses the frame, as a wire would (RC retransmits).
//! NIC flow steering by QPN would avoid the copy; nothing here depends on it.
//!
//! # Application interface
//!
//! Applications reach shard `s` through a per-shard lock-free command queue (crossbeam
//! `ArrayQueue` of boxed closures run on the shard's thread against its [`Port`]):
//! [`ShardedRuntime::with`] waits for the result, [`ShardedRuntime::post`] does not. A
//! sleeping shard thread is woken through its eventfd only when it announced it is about to
//! sleep. Completions of a watched CQ ([`ShardedRuntime::watch_cq`]) are moved by the shard's
//! thread into a lock-free [`ShardCq`] the application polls without involving the shard.

use super::idle::{self, WatchedCq};
use super::BackendKind;
use super::{Port, PortConfig, PortStats};
use crate::xdp::XdpBackend;
use crossbeam::queue::ArrayQueue;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{fence, AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;
use uroce_transport::{CqHandle, QpnShard, WorkCompletion};

/// Commands queued per shard before [`ShardedRuntime::post`] has to wait.
const COMMAND_DEPTH: usize = 1024;
/// Idle rounds a shard thread spins before it sleeps.
const SPIN_ROUNDS: u32 = 200;
/// Relayed frames queued per shard before the relay drops them.
const INBOX_DEPTH: usize = 1024;

type Command = Box<dyn FnOnce(&mut ShardState) + Send>;

/// How to open a sharded runtime.
#[derive(Clone, Debug)]
pub struct ShardedConfig {
    /// The port every shard opens (AF_XDP backend and an interface required; no capture). The
    /// seed, when given, is varied per shard.
    pub port: PortConfig,
    /// Shards (1..=64; the interface needs at least this many receive queues).
    pub shards: u32,
    /// Pin shard `s`'s thread to core `cpus[s % cpus.len()]` (`None`: no pinning).
    pub cpus: Option<Vec<usize>>,
}

/// A watched CQ's completions, filled by its shard's thread, read lock-free by applications.
#[derive(Clone)]
pub struct ShardCq(Arc<WatchedCq>);

impl ShardCq {
    /// Up to `out.len()` completions.
    pub fn poll(&self, out: &mut [WorkCompletion]) -> usize {
        self.0.pop_into(out)
    }
}

/// What a shard's thread owns.
pub struct ShardState {
    /// The shard's port.
    pub port: Port,
    cqs: Vec<Arc<WatchedCq>>,
}

struct Mailbox {
    commands: ArrayQueue<Command>,
    /// Frames other shards received for this shard's QPs.
    inbox: ArrayQueue<Vec<u8>>,
    stop: AtomicBool,
    sleeping: AtomicBool,
    wake: OwnedFd,
}

impl Mailbox {
    fn kick(&self) {
        fence(Ordering::SeqCst);
        if self.sleeping.load(Ordering::SeqCst) {
            let one: u64 = 1;
            // SAFETY: `wake` is an eventfd we own; writing 8 bytes from a valid u64 is its ABI.
            // A failure (counter overflow, impossible here) only loses a wake-up, never memory.
            unsafe { libc::write(self.wake.as_raw_fd(), (&one as *const u64).cast(), 8) };
        }
    }
}

/// Every shard's mailbox and the buffers relayed frames travel in, shared by the shards'
/// relays.
struct Relays {
    mailboxes: Vec<Arc<Mailbox>>,
    free: ArrayQueue<Vec<u8>>,
}

impl Relays {
    /// Copy `f` into shard `qpn % N`'s inbox; `false` if it is full.
    fn relay(&self, qpn: u32, f: &[u8]) -> bool {
        let mb = &self.mailboxes[QpnShard::index_of(qpn, self.mailboxes.len() as u32) as usize];
        let mut buf = self.free.pop().unwrap_or_default();
        buf.clear();
        buf.extend_from_slice(f);
        match mb.inbox.push(buf) {
            Ok(()) => {
                mb.kick();
                true
            }
            Err(buf) => {
                let _ = self.free.push(buf);
                false
            }
        }
    }
}

/// Per-shard counters.
#[derive(Clone, Debug, Default)]
pub struct ShardStats {
    /// The shard's port counters (including [`PortStats::wrong_shard`]).
    pub port: PortStats,
    /// The engine's `rcvd_pkts`.
    pub rcvd_pkts: u64,
    /// The engine's `sent_pkts`.
    pub sent_pkts: u64,
    /// Frames received per AF_XDP socket of the shard.
    pub queue_rx_frames: Vec<u64>,
}

/// `N` shards, each a port on its own progress thread (see the module documentation).
pub struct ShardedRuntime {
    mailboxes: Vec<Arc<Mailbox>>,
    threads: Vec<Option<JoinHandle<Port>>>,
}

impl ShardedRuntime {
    /// Install the sharded XDP program, open every shard's port and start its thread. Call it
    /// in the interface's network namespace.
    pub fn open(cfg: &ShardedConfig) -> anyhow::Result<ShardedRuntime> {
        use anyhow::Context;
        let n = cfg.shards;
        anyhow::ensure!((1..=64).contains(&n), "shards must be 1..=64, not {n}");
        anyhow::ensure!(cfg.port.pcap.is_none() || n == 1, "a capture file is per port: not with {n} shards");
        let BackendKind::Xdp(opts) = &cfg.port.backend else { anyhow::bail!("shards need the AF_XDP backend") };
        let ifname = cfg.port.ifname.as_deref().context("shards need an interface")?;
        let steering = Arc::new(XdpBackend::install(ifname, opts.attach, n)?);
        let mut ports = Vec::with_capacity(n as usize);
        for s in 0..n {
            let backend = XdpBackend::open_shard(ifname, opts, steering.clone(), s, n)?;
            let mut pc = cfg.port.clone();
            pc.seed = pc.seed.map(|x| x ^ (u64::from(s) << 40));
            let port = Port::open_with(pc, Some(Box::new(backend)), Some(QpnShard { index: s, count: n }))
                .with_context(|| format!("shard {s}"))?;
            ports.push(port);
        }
        drop(steering);
        let mut mailboxes = Vec::with_capacity(n as usize);
        for _ in 0..n {
            // SAFETY: plain syscall; the returned descriptor is checked and then owned.
            let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
            if fd < 0 {
                return Err(std::io::Error::last_os_error().into());
            }
            mailboxes.push(Arc::new(Mailbox {
                commands: ArrayQueue::new(COMMAND_DEPTH),
                inbox: ArrayQueue::new(INBOX_DEPTH),
                stop: AtomicBool::new(false),
                sleeping: AtomicBool::new(false),
                // SAFETY: `fd` is a fresh descriptor nobody else owns.
                wake: unsafe { OwnedFd::from_raw_fd(fd) },
            }));
        }
        let relays = Arc::new(Relays { mailboxes: mailboxes.clone(), free: ArrayQueue::new(INBOX_DEPTH * n as usize) });
        let mut rt = ShardedRuntime { mailboxes: Vec::new(), threads: Vec::new() };
        for (s, (mut port, mb)) in ports.into_iter().zip(mailboxes).enumerate() {
            let r = relays.clone();
            port.set_relay(Some(Box::new(move |qpn, f| r.relay(qpn, f))));
            let cpu = cfg.cpus.as_ref().filter(|c| !c.is_empty()).map(|c| c[s % c.len()]);
            let (m, r) = (mb.clone(), relays.clone());
            let t = std::thread::Builder::new()
                .name(format!("uroce-shard{s}"))
                .spawn(move || shard_thread(&m, &r, ShardState { port, cqs: Vec::new() }, cpu))?;
            rt.mailboxes.push(mb);
            rt.threads.push(Some(t));
        }
        Ok(rt)
    }

    /// Shards.
    pub fn shards(&self) -> usize {
        self.mailboxes.len()
    }

    /// The shard that owns `qpn`.
    pub fn shard_of(&self, qpn: u32) -> usize {
        QpnShard::index_of(qpn, self.shards() as u32) as usize
    }

    /// Run `f` on shard `s`'s thread, against its port, and wait for the result.
    pub fn with<R: Send + 'static>(&self, s: usize, f: impl FnOnce(&mut Port) -> R + Send + 'static) -> R {
        self.with_state(s, move |st| f(&mut st.port))
    }

    fn with_state<R: Send + 'static>(&self, s: usize, f: impl FnOnce(&mut ShardState) -> R + Send + 'static) -> R {
        let (tx, rx) = crossbeam::channel::bounded(1);
        self.send(
            s,
            Box::new(move |st| {
                let _ = tx.send(f(st));
            }),
        );
        rx.recv().unwrap_or_else(|_| panic!("shard {s} stopped"))
    }

    /// Queue `f` to run on shard `s`'s thread, without waiting for it.
    pub fn post(&self, s: usize, f: impl FnOnce(&mut Port) + Send + 'static) {
        self.send(s, Box::new(move |st| f(&mut st.port)));
    }

    fn send(&self, s: usize, mut c: Command) {
        let mb = &self.mailboxes[s];
        loop {
            match mb.commands.push(c) {
                Ok(()) => break,
                Err(back) => {
                    c = back;
                    mb.kick();
                    std::thread::yield_now();
                }
            }
        }
        mb.kick();
    }

    /// From now on shard `s`'s thread moves `cq`'s completions into a lock-free queue of
    /// `depth` entries, returned here.
    pub fn watch_cq(&self, s: usize, cq: CqHandle, depth: usize) -> ShardCq {
        let q = Arc::new(WatchedCq::new(cq, depth, None));
        let q2 = q.clone();
        self.with_state(s, move |st| st.cqs.push(q2));
        ShardCq(q)
    }

    /// Shard `s`'s counters.
    pub fn stats(&self, s: usize) -> ShardStats {
        self.with(s, |p| {
            let c = p.device_ref().counters();
            ShardStats {
                port: p.stats(),
                rcvd_pkts: c.rcvd_pkts,
                sent_pkts: c.sent_pkts,
                queue_rx_frames: p.queue_rx_frames(),
            }
        })
    }

    /// Stop every shard and give the ports back, in shard order.
    pub fn stop(mut self) -> Vec<Port> {
        self.halt()
    }

    fn halt(&mut self) -> Vec<Port> {
        for mb in &self.mailboxes {
            mb.stop.store(true, Ordering::SeqCst);
            mb.sleeping.store(true, Ordering::SeqCst);
            mb.kick();
        }
        self.threads.iter_mut().filter_map(|t| t.take()).filter_map(|t| t.join().ok()).collect()
    }
}

impl Drop for ShardedRuntime {
    fn drop(&mut self) {
        self.halt();
    }
}

/// Pin the calling thread to `cpu`.
fn pin(cpu: usize) {
    // SAFETY: `set` is a plain-data cpu_set_t, zeroed and filled with the CPU_* helpers,
    // which index within it; sched_setaffinity reads `size_of::<cpu_set_t>()` bytes of it.
    let rc = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    if rc != 0 {
        tracing::warn!(cpu, error = %std::io::Error::last_os_error(), "cannot pin the shard thread");
    }
}

fn shard_thread(mb: &Mailbox, relays: &Relays, mut st: ShardState, cpu: Option<usize>) -> Port {
    if let Some(c) = cpu {
        pin(c);
    }
    let mut idle = 0u32;
    let mut buf = [WorkCompletion::default(); 64];
    let fds: Vec<RawFd> = (0..st.port.queues()).filter_map(|q| st.port.queue_fd(q)).collect();
    while !mb.stop.load(Ordering::Acquire) {
        let mut work = false;
        while let Some(c) = mb.commands.pop() {
            c(&mut st);
            work = true;
        }
        while let Some(f) = mb.inbox.pop() {
            st.port.receive_relayed(&f);
            let _ = relays.free.push(f);
            work = true;
        }
        match st.port.poll() {
            Ok(w) => work |= w,
            Err(e) => tracing::error!(%e, "shard port I/O error"),
        }
        let ShardState { port, cqs } = &mut st;
        for q in cqs.iter() {
            work |= q.feed(port.device(), &mut buf) > 0;
        }
        if work {
            idle = 0;
            continue;
        }
        idle += 1;
        if idle < SPIN_ROUNDS {
            std::hint::spin_loop();
            continue;
        }
        let sleep = st.port.idle_timeout(Duration::from_millis(100));
        mb.sleeping.store(true, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        if mb.commands.is_empty() && mb.inbox.is_empty() && !mb.stop.load(Ordering::SeqCst) {
            idle::wait(&fds, mb.wake.as_raw_fd(), sleep);
        }
        mb.sleeping.store(false, Ordering::SeqCst);
    }
    // Commands left behind are dropped (a waiting `with` then reports the shard stopped).
    while mb.commands.pop().is_some() {}
    st.port
}
