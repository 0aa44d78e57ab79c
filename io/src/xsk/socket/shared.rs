//! One UMEM shared by the AF_XDP sockets of several processes on one interface queue
//! (`XDP_SHARED_UMEM`): what lets several uroce processes (two MPI ranks on one host) each
//! have their own socket on a queue that the kernel allows only one UMEM on
//! (`xp_assign_dev` refuses a second: `EBUSY`).
//!
//! The memory is a memfd every process maps: the chunks, then a control area. An *anchor*
//! socket (created by the first process, held by the broker of [`crate::share`] for as long
//! as any process shares the queue) registers the UMEM, owns its fill and completion rings and
//! is bound to the queue but steered nothing; each process's socket binds with
//! `XDP_SHARED_UMEM` to the anchor, has its own RX and TX rings, and maps the anchor's fill
//! and completion rings (Linux ≥ 6.4 allows mapping them after bind). Those two rings have one
//! producer or consumer side each, so the processes take them under one robust,
//! process-shared mutex in the control area (a process that dies holding it leaves it to the
//! next, `EOWNERDEAD`).
//!
//! Chunks: `0..rx_frames` are the queue's receive pool — they circulate fill ring → the RX ring
//! of whichever process's socket the program steered a frame to → that process → fill ring.
//! Then each of [`MAX_XDP_TENANTS`] tenant slots owns `tx_frames` transmit chunks. A transmit
//! completion reaches whichever process drains the completion ring next: a chunk of its own goes
//! to its free list, another's to that owner's return stack in the control area, which the owner
//! takes back when it next reclaims. A process killed while holding receive chunks (in its RX
//! ring or being processed) takes them out of circulation until every process of the queue has
//! left (the pool then goes with the memfd): the receive pool is four times a socket's RX ring.

use super::*;
use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicU32, Ordering};

/// Processes that can share one queue's UMEM (tenant slots).
pub const MAX_XDP_TENANTS: u32 = 8;
/// The receive pool of a shared queue (chunks, and fill ring entries).
pub const SHARED_RX_FRAMES: u32 = 8192;
/// Receive chunks a process gives back to the shared fill ring at a time (at most this many
/// less per process on the ring, of [`SHARED_RX_FRAMES`]).
pub const SHARED_REFILL_BATCH: usize = 16;
/// Transmit completions (or returned chunks) a process lets gather on the shared rings before
/// it takes them after a kick (in copy mode every kick completes at once: one lock a frame).
pub const SHARED_RECLAIM_BATCH: u32 = 16;
/// Each process's RX ring: as deep as an unshared socket's (a burst of UD or UC datagrams
/// that overflows it is lost for good).
pub const SHARED_RX_RING: u32 = 2048;
const MAGIC: u64 = 0x7572_6f63_6553_4851; // "urocESHQ"

/// Where everything is in the memfd.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// Chunk size.
    pub chunk: u32,
    /// Headroom per chunk.
    pub headroom: u32,
    /// Transmit chunks per tenant slot.
    pub tx_frames: u32,
}

#[repr(C)]
struct Control {
    magic: u64,
    chunk: u32,
    headroom: u32,
    tx_frames: u32,
    _pad: u32,
    lock: libc::pthread_mutex_t,
    /// Entries on each slot's return stack.
    returned: [u32; MAX_XDP_TENANTS as usize],
}

impl Geometry {
    /// Chunks in the UMEM.
    pub fn frames(&self) -> u32 {
        SHARED_RX_FRAMES + MAX_XDP_TENANTS * self.tx_frames
    }
    fn umem_len(&self) -> usize {
        self.frames() as usize * self.chunk as usize
    }
    /// The control header, then `MAX_XDP_TENANTS` return stacks of `tx_frames` u64 each.
    fn ctrl_len(&self) -> usize {
        size_of::<Control>().next_multiple_of(8) + (MAX_XDP_TENANTS * self.tx_frames) as usize * 8
    }
    fn len(&self) -> usize {
        self.umem_len() + self.ctrl_len()
    }
    /// The first chunk of tenant `slot`'s transmit chunks.
    fn tx_base(&self, slot: u32) -> u32 {
        SHARED_RX_FRAMES + slot * self.tx_frames
    }
    /// The tenant slot whose transmit chunk holds UMEM address `addr`.
    fn owner(&self, addr: u64) -> Option<u32> {
        let chunk = (addr / u64::from(self.chunk)) as u32;
        (chunk >= SHARED_RX_FRAMES && chunk < self.frames()).then(|| (chunk - SHARED_RX_FRAMES) / self.tx_frames)
    }
}

/// A process's view of the control area: the lock and the return stacks.
pub(crate) struct Share {
    map: MmapRaw,
    geom: Geometry,
    slot: u32,
}

// SAFETY: the mapping is shared memory accessed only under the process-shared lock (or, for
// the header's constants, read-only after creation).
unsafe impl Send for Share {}

/// The lock held: the fill and completion rings and the return stacks are this process's.
struct Held<'a>(&'a Share);

impl Drop for Held<'_> {
    fn drop(&mut self) {
        // SAFETY: the mutex is initialised and held by this thread.
        unsafe { libc::pthread_mutex_unlock(self.0.lock_ptr()) };
    }
}

impl Share {
    fn control(&self) -> *mut Control {
        self.map.as_mut_ptr().cast()
    }

    fn lock_ptr(&self) -> *mut libc::pthread_mutex_t {
        // SAFETY: the header lies at the start of the mapping.
        unsafe { &raw mut (*self.control()).lock }
    }

    fn lock(&self) -> Held<'_> {
        // SAFETY: an initialised process-shared robust mutex in the mapping.
        let r = unsafe { libc::pthread_mutex_lock(self.lock_ptr()) };
        if r == libc::EOWNERDEAD {
            // Its holder died: the rings' shared indices are the truth, and each step under
            // the lock leaves them consistent (entries are published by one index store).
            // SAFETY: we hold the mutex (EOWNERDEAD grants it).
            unsafe { libc::pthread_mutex_consistent(self.lock_ptr()) };
            tracing::warn!("a uroce process died holding the shared UMEM's lock; taken over");
        }
        Held(self)
    }

    /// Return stack `slot`'s length, looked at without the lock (a stale answer only delays
    /// the returns to the next look).
    fn returned_peek(&self, slot: u32) -> u32 {
        // SAFETY: `slot < MAX_XDP_TENANTS` (this process's slot); the counter is an aligned u32
        // in the mapping that every writer stores atomically under the lock (`stack`'s users).
        unsafe { AtomicU32::from_ptr(&raw mut (*self.control()).returned[slot as usize]) }.load(Ordering::Relaxed)
    }

    /// Return stack `slot`: (its length, its entries).
    fn stack(&self, _held: &Held<'_>, slot: u32) -> (*mut u32, *mut u64) {
        let off = size_of::<Control>().next_multiple_of(8) + (slot * self.geom.tx_frames) as usize * 8;
        // SAFETY: `slot < MAX_XDP_TENANTS` (callers: `owner` and this process's slot), so both
        // pointers are inside the control area; `_held` proves the lock is held.
        unsafe { (&raw mut (*self.control()).returned[slot as usize], self.map.as_mut_ptr().add(off).cast()) }
    }

    /// Map the control area of `memfd`, laid out as `geom`, as tenant `slot`.
    fn open(memfd: BorrowedFd<'_>, geom: Geometry, slot: u32) -> io::Result<Share> {
        if slot >= MAX_XDP_TENANTS {
            return Err(io::Error::new(
                io::ErrorKind::ResourceBusy,
                format!("{MAX_XDP_TENANTS} uroce processes share this AF_XDP queue already"),
            ));
        }
        let map = MmapOptions::new().offset(geom.umem_len() as u64).len(geom.ctrl_len()).map_raw(memfd.as_raw_fd())?;
        let share = Share { map, geom, slot };
        // SAFETY: the header lies at the start of the mapping; read-only fields.
        let c = unsafe { &*share.control() };
        if c.magic != MAGIC || (c.chunk, c.headroom, c.tx_frames) != (geom.chunk, geom.headroom, geom.tx_frames) {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "shared UMEM of another layout"));
        }
        Ok(share)
    }
}

/// Create a shared queue: its memfd (UMEM and control area), and the anchor socket bound to
/// (`ifindex`, `queue_id`) in `cfg.mode` with its fill ring stocked with the receive pool.
/// Returns (memfd, anchor).
pub fn create_shared_queue(
    ifindex: u32,
    queue_id: u32,
    cfg: &XskConfig,
    geom: Geometry,
) -> Result<(OwnedFd, OwnedFd), XskError> {
    let os = |step| move |e| XskError::Os { step, source: e };
    // SAFETY: memfd_create with a constant name; the result is checked.
    let raw = unsafe { libc::memfd_create(c"uroce-umem".as_ptr(), libc::MFD_CLOEXEC) };
    if raw < 0 {
        return Err(os(XskStep::UmemMap)(io::Error::last_os_error()));
    }
    // SAFETY: a fresh descriptor nothing else owns.
    let memfd = unsafe { OwnedFd::from_raw_fd(raw) };
    // SAFETY: ftruncate(2) on our memfd.
    if unsafe { libc::ftruncate(memfd.as_raw_fd(), geom.len() as libc::off_t) } != 0 {
        return Err(os(XskStep::UmemMap)(io::Error::last_os_error()));
    }
    let ctrl = MmapOptions::new()
        .offset(geom.umem_len() as u64)
        .len(geom.ctrl_len())
        .map_raw(memfd.as_raw_fd())
        .map_err(os(XskStep::UmemMap))?;
    let c = ctrl.as_mut_ptr().cast::<Control>();
    // SAFETY: `c` is the (zero-filled) header of our fresh mapping; the mutex is initialised
    // once, before any other process can see the memfd.
    unsafe {
        (*c).chunk = geom.chunk;
        (*c).headroom = geom.headroom;
        (*c).tx_frames = geom.tx_frames;
        let mut attr: libc::pthread_mutexattr_t = std::mem::zeroed();
        libc::pthread_mutexattr_init(&mut attr);
        libc::pthread_mutexattr_setpshared(&mut attr, libc::PTHREAD_PROCESS_SHARED);
        libc::pthread_mutexattr_setrobust(&mut attr, libc::PTHREAD_MUTEX_ROBUST);
        let r = libc::pthread_mutex_init(&raw mut (*c).lock, &attr);
        libc::pthread_mutexattr_destroy(&mut attr);
        if r != 0 {
            return Err(os(XskStep::UmemMap)(io::Error::from_raw_os_error(r)));
        }
        (*c).magic = MAGIC;
    }
    let umem = Umem::shared(memfd.as_fd(), geom.frames(), geom.chunk, geom.headroom).map_err(os(XskStep::UmemMap))?;
    // The anchor: the UMEM's fill and completion rings, tiny RX/TX rings nothing uses.
    let acfg = XskConfig {
        fill_size: SHARED_RX_FRAMES,
        comp_size: (MAX_XDP_TENANTS * geom.tx_frames).next_power_of_two(),
        rx_size: 64,
        tx_size: 64,
        ..cfg.clone()
    };
    let mut flags = if cfg.need_wakeup { libc::XDP_USE_NEED_WAKEUP } else { 0 };
    if cfg.multi_buffer {
        flags |= libc::XDP_USE_SG;
    }
    let mut parts =
        bind_in_mode(cfg.mode, ifindex, queue_id, |f| open_once(&umem, ifindex, queue_id, &acfg, flags | f))?;
    let pool: Vec<u64> = (0..SHARED_RX_FRAMES).map(|i| umem.chunk_addr(i)).collect();
    let stocked = parts.fill.produce(&pool);
    if stocked != pool.len() {
        return Err(XskError::Config("the shared fill ring holds less than the receive pool"));
    }
    tracing::info!(ifindex, queue_id, frames = geom.frames(), "shared AF_XDP queue created (anchor socket bound)");
    Ok((memfd, parts.fd))
}

impl XskSocket {
    /// A socket on (`ifindex`, `queue_id`) sharing the UMEM of `memfd` with the other
    /// processes of the queue through its `anchor` ([`create_shared_queue`]), as tenant
    /// `slot`: its own RX and TX rings, the anchor's fill and completion rings, the slot's
    /// transmit chunks.
    pub fn join_shared(
        ifindex: u32,
        queue_id: u32,
        cfg: &XskConfig,
        geom: Geometry,
        memfd: BorrowedFd<'_>,
        anchor: BorrowedFd<'_>,
        slot: u32,
    ) -> Result<Self, XskError> {
        let os = |step| move |e| XskError::Os { step, source: e };
        let share = Share::open(memfd, geom, slot).map_err(os(XskStep::UmemMap))?;
        let umem = Umem::shared(memfd, geom.frames(), geom.chunk, geom.headroom).map_err(os(XskStep::UmemMap))?;
        // SAFETY: socket(2) with constant arguments.
        let raw = unsafe { libc::socket(libc::AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        if raw < 0 {
            return Err(os(XskStep::Socket)(io::Error::last_os_error()));
        }
        // SAFETY: a fresh socket fd owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let tx_size = cfg.tx_size;
        setsockopt(&fd, libc::XDP_RX_RING, &SHARED_RX_RING).map_err(os(XskStep::RingSize(RingKind::Rx)))?;
        setsockopt(&fd, libc::XDP_TX_RING, &tx_size).map_err(os(XskStep::RingSize(RingKind::Tx)))?;
        // SAFETY: xdp_mmap_offsets is plain integers; all-zero is valid.
        let mut off: libc::xdp_mmap_offsets = unsafe { std::mem::zeroed() };
        getsockopt(fd.as_fd(), libc::XDP_MMAP_OFFSETS, &mut off).map_err(os(XskStep::MmapOffsets))?;
        let (rl, rlm) =
            map_ring::<XdpDesc>(&fd, libc::XDP_PGOFF_RX_RING as u64, &off.rx, SHARED_RX_RING, RingKind::Rx)?;
        let (tl, tlm) = map_ring::<XdpDesc>(&fd, libc::XDP_PGOFF_TX_RING as u64, &off.tx, tx_size, RingKind::Tx)?;
        let sxdp = libc::sockaddr_xdp {
            sxdp_family: libc::AF_XDP as u16,
            sxdp_flags: libc::XDP_SHARED_UMEM,
            sxdp_ifindex: ifindex,
            sxdp_queue_id: queue_id,
            sxdp_shared_umem_fd: anchor.as_raw_fd() as u32,
        };
        // SAFETY: `sxdp` is a valid sockaddr_xdp and the length is its size.
        let rc = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                &sxdp as *const libc::sockaddr_xdp as *const libc::sockaddr,
                size_of::<libc::sockaddr_xdp>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            return Err(XskError::Bind { zero_copy: None, copy: Some(io::Error::last_os_error()) });
        }
        // The anchor's fill and completion rings (mappable after bind since Linux 6.4).
        let anchor = anchor.try_clone_to_owned().map_err(os(XskStep::Socket))?;
        // SAFETY: as above.
        let mut aoff: libc::xdp_mmap_offsets = unsafe { std::mem::zeroed() };
        getsockopt(anchor.as_fd(), libc::XDP_MMAP_OFFSETS, &mut aoff).map_err(os(XskStep::MmapOffsets))?;
        let comp_size = (MAX_XDP_TENANTS * geom.tx_frames).next_power_of_two();
        let (fl, flm) = map_ring::<u64>(&anchor, libc::XDP_UMEM_PGOFF_FILL_RING, &aoff.fr, SHARED_RX_FRAMES, RingKind::Fill)
            .map_err(|e| match e {
                XskError::Os { source, .. } if source.raw_os_error() == Some(libc::EBUSY) => {
                    XskError::Config("this kernel cannot map a bound socket's fill ring (Linux >= 6.4 can): share the interface over kernel UDP (UROCE_BACKEND=udp) or not at all (UROCE_SHARE=0)")
                }
                e => e,
            })?;
        let (cl, clm) =
            map_ring::<u64>(&anchor, libc::XDP_UMEM_PGOFF_COMPLETION_RING, &aoff.cr, comp_size, RingKind::Completion)?;
        // SAFETY: each layout points into the mapping handed over with it; the RX and TX
        // rings have this socket as their one user-space side, the fill and completion rings
        // are used only under the shared lock after a resync.
        let (fill, comp, rx, tx) = unsafe {
            (
                FillRing(Producer::new(fl, Some(flm))),
                CompletionRing(Consumer::new(cl, Some(clm))),
                RxRing(Consumer::new(rl, Some(rlm))),
                TxRing(Producer::new(tl, Some(tlm))),
            )
        };
        let base = geom.tx_base(slot);
        // The slot's chunks start free and its return stack empty. (A previous holder of the
        // slot is gone: its connection to the broker closed before the block was handed out
        // again, and the kernel completes a closed socket's in-flight frames at its release.)
        {
            let held = share.lock();
            let (len, _) = share.stack(&held, slot);
            // SAFETY: under the lock.
            unsafe { *len = 0 };
        }
        let mut sock = XskSocket {
            fill,
            comp,
            rx,
            tx,
            fd,
            ifindex,
            queue_id,
            zero_copy: false,
            need_wakeup: cfg.need_wakeup,
            multi_buffer: cfg.multi_buffer,
            id: NEXT_SOCKET_ID.fetch_add(1, Ordering::Relaxed),
            tx_free: (base..base + geom.tx_frames).rev().map(|i| umem.chunk_addr(i)).collect(),
            fill_pending: Vec::with_capacity(SHARED_RX_RING as usize),
            comp_scratch: Vec::with_capacity(comp_size as usize),
            rx_descs: Vec::with_capacity(SHARED_RX_RING as usize),
            rx_packets: Vec::with_capacity(SHARED_RX_RING as usize),
            tx_outstanding: 0,
            tx_budget: None,
            counters: XskCounters::default(),
            umem,
            shared: Some(share),
        };
        sock.zero_copy = sock.query_zero_copy()?;
        tracing::info!(ifindex, queue_id, slot, zero_copy = sock.zero_copy, "AF_XDP socket bound to a shared UMEM");
        Ok(sock)
    }

    /// [`XskSocket::refill`] of a shared fill ring: under the lock, from where the others left
    /// it, once `min` chunks are pending ([`SHARED_REFILL_BATCH`] while the socket lives: the
    /// lock is a robust process-shared mutex, and taken for every frame it was the dearest
    /// step of a round; all of them when it closes).
    pub(super) fn refill_shared(&mut self, min: usize) -> usize {
        let Some(share) = &self.shared else { return 0 };
        if self.fill_pending.len() < min.max(1) {
            return 0;
        }
        let _held = share.lock();
        self.fill.0.resync();
        let len = self.fill_pending.len();
        let n = self.fill.produce(&self.fill_pending);
        self.fill_pending.drain(..n.min(len));
        n
    }

    /// [`XskSocket::reclaim`] of a shared completion ring: this slot's chunks to the free
    /// list, the others' to their owners' return stacks; then this slot's returns.
    /// `lazy` (the reclaim after each transmit kick): only once [`SHARED_RECLAIM_BATCH`]
    /// completions or returns have gathered, or this process's free transmit chunks run low.
    pub(super) fn reclaim_shared(&mut self, lazy: bool) -> usize {
        let Some(share) = &self.shared else { return 0 };
        let waiting = |b: u32| self.comp.0.shared_len() >= b || share.returned_peek(share.slot) >= b;
        if lazy && self.tx_free.len() >= SHARED_RECLAIM_BATCH as usize * 2 && !waiting(SHARED_RECLAIM_BATCH) {
            return 0;
        }
        // Nothing completed and nothing returned: no lock.
        if !waiting(1) {
            return 0;
        }
        let held = share.lock();
        self.comp.0.resync();
        self.comp_scratch.clear();
        let n = self.comp.consume(self.comp.0.size(), &mut self.comp_scratch);
        let mut mine = 0;
        for &a in &self.comp_scratch {
            let chunk = self.umem.chunk_of(a);
            match share.geom.owner(chunk) {
                Some(s) if s == share.slot => {
                    self.tx_free.push(chunk);
                    mine += 1;
                }
                Some(s) => {
                    let (len, stack) = share.stack(&held, s);
                    // SAFETY: under the lock; a slot's stack holds at most its tx_frames chunks.
                    unsafe {
                        let len = AtomicU32::from_ptr(len);
                        let l = len.load(Ordering::Relaxed);
                        if l < share.geom.tx_frames {
                            stack.add(l as usize).write(chunk);
                            len.store(l + 1, Ordering::Relaxed);
                        }
                    }
                }
                None => tracing::warn!(addr = a, "completion of a chunk outside every transmit slot"),
            }
        }
        let (len, stack) = share.stack(&held, share.slot);
        // SAFETY: under the lock; `len` entries are valid.
        unsafe {
            let len = AtomicU32::from_ptr(len);
            let l = len.load(Ordering::Relaxed) as usize;
            for i in 0..l {
                self.tx_free.push(stack.add(i).read());
            }
            mine += l;
            len.store(0, Ordering::Relaxed);
        }
        drop(held);
        self.tx_outstanding = self.tx_outstanding.saturating_sub(mine as u32);
        self.counters.tx_completed += mine as u64;
        n
    }
}

impl Drop for XskSocket {
    /// A shared queue's receive chunks this process still holds go back to the fill ring
    /// (they belong to the queue, which outlives the process).
    fn drop(&mut self) {
        if self.shared.is_some() {
            self.refill_shared(0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn geometry_places_slots_after_the_receive_pool() {
        let g = Geometry { chunk: 4096, headroom: 0, tx_frames: 2048 };
        assert_eq!(g.frames(), 8192 + 8 * 2048);
        assert_eq!(g.owner(0), None, "receive pool");
        assert_eq!(g.owner(8191 * 4096 + 100), None);
        assert_eq!(g.owner(8192 * 4096), Some(0));
        assert_eq!(g.owner((8192 + 2048) * 4096 + 7), Some(1));
        assert_eq!(g.owner(u64::from(g.frames() - 1) * 4096), Some(7));
        assert_eq!(g.owner(u64::from(g.frames()) * 4096), None, "past the end");
        assert_eq!(g.tx_base(3), 8192 + 3 * 2048);
    }
}
