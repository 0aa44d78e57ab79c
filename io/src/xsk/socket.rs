//! One AF_XDP socket bound to one (interface, queue), with its own UMEM.
//!
//! Setup order (kernel ABI, `Documentation/networking/af_xdp.rst`): `socket(AF_XDP)` →
//! `XDP_UMEM_REG` → ring sizes → `XDP_MMAP_OFFSETS` → mmap the four rings → `bind` →
//! stock the fill ring. The caller then registers [`XskSocket::as_fd`] in the XSKMAP slot
//! of the queue (see `uroce_xdp_prog::XdpSteering::register`).
//!
//! Frame ownership: chunks `0..rx_frames` circulate fill ring → RX ring → [`RxBatch`] →
//! fill ring; the remaining chunks circulate TX free list → [`TxFrame`] → TX ring →
//! completion ring → TX free list. RX and TX therefore never starve each other.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use memmap2::{MmapOptions, MmapRaw};

use super::config::*;
use super::ring::{CompletionRing, Consumer, FillRing, Producer, RingLayout, RxRing, TxRing, XdpDesc, XDP_PKT_CONTD};
use super::umem::Umem;

mod shared;
pub use shared::{create_shared_queue, Geometry, MAX_XDP_TENANTS, SHARED_RX_FRAMES, SHARED_RX_RING};

/// `XDP_MAX_TX_SKB_BUDGET` (Linux ≥ 6.17): per-`sendto` TX budget in copy mode.
const XDP_MAX_TX_SKB_BUDGET: libc::c_int = 9;

/// A TX frame owned by user space: a UMEM chunk to write a packet into. Obtain with
/// [`XskSocket::tx_alloc`], fill through [`XskSocket::tx_buf`], set the length, and hand to
/// [`XskSocket::tx_enqueue`] (or back with [`XskSocket::tx_free`]). Dropping it leaks the
/// chunk until the socket closes.
#[must_use = "a dropped TxFrame leaks its UMEM chunk"]
#[derive(Debug, PartialEq, Eq)]
pub struct TxFrame {
    addr: u64,
    len: u32,
    capacity: u32,
    owner: u64,
}

impl TxFrame {
    /// UMEM address of the first byte.
    pub fn addr(&self) -> u64 {
        self.addr
    }
    /// Packet length set so far (0 until [`set_len`](Self::set_len)).
    pub fn len(&self) -> usize {
        self.len as usize
    }
    /// True while no length is set.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Bytes the frame can hold.
    pub fn capacity(&self) -> usize {
        self.capacity as usize
    }
    /// Set the packet length. Returns false (and leaves it unchanged) unless
    /// `1 <= len <= capacity`.
    pub fn set_len(&mut self, len: usize) -> bool {
        if len == 0 || len > self.capacity as usize {
            return false;
        }
        self.len = len as u32;
        true
    }
}

static NEXT_SOCKET_ID: AtomicU64 = AtomicU64::new(1);

/// An AF_XDP socket with its UMEM and rings. See the module docs for the frame flow.
pub struct XskSocket {
    // Field order = drop order: rings (unmap) → socket fd (close) → UMEM (unmap).
    fill: FillRing,
    comp: CompletionRing,
    rx: RxRing,
    tx: TxRing,
    fd: OwnedFd,
    umem: Umem,
    ifindex: u32,
    queue_id: u32,
    zero_copy: bool,
    need_wakeup: bool,
    multi_buffer: bool,
    id: u64,
    tx_free: Vec<u64>,
    fill_pending: Vec<u64>,
    comp_scratch: Vec<u64>,
    rx_descs: Vec<XdpDesc>,
    rx_packets: Vec<(u32, u32)>,
    tx_outstanding: u32,
    tx_budget: Option<u32>,
    counters: XskCounters,
    /// The lock and return stacks of a UMEM shared with other processes ([`shared`]).
    shared: Option<shared::Share>,
}

impl std::fmt::Debug for XskSocket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("XskSocket")
            .field("fd", &self.fd.as_raw_fd())
            .field("ifindex", &self.ifindex)
            .field("queue_id", &self.queue_id)
            .field("zero_copy", &self.zero_copy)
            .field("umem", &self.umem)
            .finish_non_exhaustive()
    }
}

struct Parts {
    fd: OwnedFd,
    fill: FillRing,
    comp: CompletionRing,
    rx: RxRing,
    tx: TxRing,
}

enum OpenError {
    Bind(io::Error),
    Other(XskError),
}

fn setsockopt<T>(fd: &OwnedFd, name: libc::c_int, val: &T) -> io::Result<()> {
    // SAFETY: `val` is a live `T` and the length passed is its size; the kernel only reads.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_XDP,
            name,
            val as *const T as *const libc::c_void,
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

fn getsockopt<T>(fd: BorrowedFd<'_>, name: libc::c_int, out: &mut T) -> io::Result<usize> {
    let mut len = std::mem::size_of::<T>() as libc::socklen_t;
    // SAFETY: `out` is a live, writable `T` and `len` its size; the kernel writes at most
    // `len` bytes and updates `len`.
    let rc =
        unsafe { libc::getsockopt(fd.as_raw_fd(), libc::SOL_XDP, name, out as *mut T as *mut libc::c_void, &mut len) };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(len as usize)
    }
}

/// mmap one ring of `size` entries of `T` at page offset `pgoff`.
fn map_ring<T>(
    fd: &OwnedFd,
    pgoff: u64,
    off: &libc::xdp_ring_offset,
    size: u32,
    kind: RingKind,
) -> Result<(RingLayout<T>, MmapRaw), XskError> {
    let len = off.desc as usize + size as usize * std::mem::size_of::<T>();
    let map = MmapOptions::new()
        .offset(pgoff)
        .len(len)
        .populate()
        .map_raw(fd.as_raw_fd())
        .map_err(os(XskStep::RingMap(kind)))?;
    // SAFETY: the kernel's XDP_MMAP_OFFSETS place the producer/consumer/flags words and
    // `size` entries of `T` (xdp_desc or u64) inside the `len`-byte mapping just created,
    // suitably aligned (page-aligned base, offsets from the kernel's struct layout); the
    // mapping is moved into the ring wrapper, which keeps it alive.
    let layout = unsafe {
        RingLayout::from_offsets(
            map.as_mut_ptr(),
            off.producer as usize,
            off.consumer as usize,
            off.flags as usize,
            off.desc as usize,
            size,
        )
    };
    Ok((layout, map))
}

fn open_once(umem: &Umem, ifindex: u32, queue_id: u32, cfg: &XskConfig, flags: u16) -> Result<Parts, OpenError> {
    let other = |step| move |e| OpenError::Other(XskError::Os { step, source: e });
    // SAFETY: socket(2) with constant arguments.
    let raw = unsafe { libc::socket(libc::AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
    if raw < 0 {
        return Err(other(XskStep::Socket)(io::Error::last_os_error()));
    }
    // SAFETY: `raw` is a fresh socket fd owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };

    setsockopt(&fd, libc::XDP_UMEM_REG, &umem.reg()).map_err(other(XskStep::UmemReg))?;
    for (name, size, kind) in [
        (libc::XDP_UMEM_FILL_RING, cfg.fill_size, RingKind::Fill),
        (libc::XDP_UMEM_COMPLETION_RING, cfg.comp_size, RingKind::Completion),
        (libc::XDP_RX_RING, cfg.rx_size, RingKind::Rx),
        (libc::XDP_TX_RING, cfg.tx_size, RingKind::Tx),
    ] {
        setsockopt(&fd, name, &size).map_err(other(XskStep::RingSize(kind)))?;
    }

    // SAFETY: xdp_mmap_offsets is plain integers; all-zero is valid.
    let mut off: libc::xdp_mmap_offsets = unsafe { std::mem::zeroed() };
    let got = getsockopt(fd.as_fd(), libc::XDP_MMAP_OFFSETS, &mut off).map_err(other(XskStep::MmapOffsets))?;
    if got != std::mem::size_of::<libc::xdp_mmap_offsets>() {
        // Pre-5.4 kernels return the v1 layout without the flags word.
        return Err(OpenError::Other(XskError::Os {
            step: XskStep::MmapOffsets,
            source: io::Error::new(
                io::ErrorKind::Unsupported,
                "kernel returned the v1 XDP_MMAP_OFFSETS layout (no need_wakeup flags)",
            ),
        }));
    }
    let (fl, flm) = map_ring::<u64>(&fd, libc::XDP_UMEM_PGOFF_FILL_RING, &off.fr, cfg.fill_size, RingKind::Fill)
        .map_err(OpenError::Other)?;
    let (cl, clm) =
        map_ring::<u64>(&fd, libc::XDP_UMEM_PGOFF_COMPLETION_RING, &off.cr, cfg.comp_size, RingKind::Completion)
            .map_err(OpenError::Other)?;
    let (rl, rlm) = map_ring::<XdpDesc>(&fd, libc::XDP_PGOFF_RX_RING as u64, &off.rx, cfg.rx_size, RingKind::Rx)
        .map_err(OpenError::Other)?;
    let (tl, tlm) = map_ring::<XdpDesc>(&fd, libc::XDP_PGOFF_TX_RING as u64, &off.tx, cfg.tx_size, RingKind::Tx)
        .map_err(OpenError::Other)?;
    // SAFETY: each layout points into the mapping handed over with it; each ring gets
    // exactly one user-space side (the kernel is the other).
    let (fill, comp, rx, tx) = unsafe {
        (
            FillRing(Producer::new(fl, Some(flm))),
            CompletionRing(Consumer::new(cl, Some(clm))),
            RxRing(Consumer::new(rl, Some(rlm))),
            TxRing(Producer::new(tl, Some(tlm))),
        )
    };

    let sxdp = libc::sockaddr_xdp {
        sxdp_family: libc::AF_XDP as u16,
        sxdp_flags: flags,
        sxdp_ifindex: ifindex,
        sxdp_queue_id: queue_id,
        sxdp_shared_umem_fd: 0,
    };
    // A queue whose previous socket was closed moments ago stays busy until the kernel's
    // deferred release runs (~25 ms measured on veth): retry EBUSY for a bounded time.
    let started = std::time::Instant::now();
    loop {
        // SAFETY: `sxdp` is a valid sockaddr_xdp and the length is its size.
        let rc = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                &sxdp as *const libc::sockaddr_xdp as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_xdp>() as libc::socklen_t,
            )
        };
        if rc == 0 {
            break;
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EBUSY) && started.elapsed() < cfg.busy_retry {
            std::thread::sleep(Duration::from_millis(5));
            continue;
        }
        return Err(OpenError::Bind(e));
    }
    Ok(Parts { fd, fill, comp, rx, tx })
}

/// Open with `open(flags)` in `mode`: zero-copy, copy, or zero-copy falling back to copy when
/// the driver refuses it (logged).
fn bind_in_mode(
    mode: BindMode,
    ifindex: u32,
    queue_id: u32,
    open: impl Fn(u16) -> Result<Parts, OpenError>,
) -> Result<Parts, XskError> {
    match mode {
        BindMode::ZeroCopy => open(libc::XDP_ZEROCOPY).map_err(|e| match e {
            OpenError::Bind(e) => XskError::Bind { zero_copy: Some(e), copy: None },
            OpenError::Other(e) => e,
        }),
        BindMode::Copy => open(libc::XDP_COPY).map_err(|e| match e {
            OpenError::Bind(e) => XskError::Bind { zero_copy: None, copy: Some(e) },
            OpenError::Other(e) => e,
        }),
        BindMode::Auto => match open(libc::XDP_ZEROCOPY) {
            Ok(p) => Ok(p),
            Err(OpenError::Other(e)) => Err(e),
            Err(OpenError::Bind(zc)) => {
                tracing::info!(ifindex, queue_id, error = %zc, "AF_XDP zero-copy bind refused by the driver; using copy mode");
                open(libc::XDP_COPY).map_err(|e| match e {
                    OpenError::Bind(copy) => XskError::Bind { zero_copy: Some(zc), copy: Some(copy) },
                    OpenError::Other(e) => e,
                })
            }
        },
    }
}

/// Take complete packets (up to `max_packets`) from the RX ring: descriptors go to `descs`,
/// `[start, end)` ranges into `descs` to `packets`. A trailing packet whose last descriptor
/// (the one without `XDP_PKT_CONTD`) is not on the ring yet is left there. Packets with a
/// descriptor outside the UMEM are dropped (their in-range chunks go to `recycle`).
/// Returns (descriptors consumed, packets dropped as invalid).
pub(crate) fn collect_packets(
    rx: &mut RxRing,
    umem: &Umem,
    max_packets: usize,
    descs: &mut Vec<XdpDesc>,
    packets: &mut Vec<(u32, u32)>,
    recycle: &mut Vec<u64>,
) -> (u32, u32) {
    descs.clear();
    packets.clear();
    let size = rx.0.size();
    let (start, n) = rx.peek(size);
    let mut taken = 0u32;
    let mut invalid = 0u32;
    let mut first = 0usize;
    let mut valid = true;
    let mut i = 0u32;
    while i < n && packets.len() < max_packets {
        let d = rx.desc(start.wrapping_add(i));
        i += 1;
        valid &= umem.contains(d.addr, d.len);
        descs.push(d);
        if d.options & XDP_PKT_CONTD != 0 {
            continue;
        }
        taken = i;
        if valid {
            packets.push((first as u32, descs.len() as u32));
        } else {
            invalid += 1;
            for d in descs.drain(first..) {
                if d.addr < umem.len() as u64 {
                    recycle.push(umem.chunk_of(d.addr));
                }
            }
            valid = true;
        }
        first = descs.len();
    }
    descs.truncate(first);
    rx.cancel(n - taken);
    rx.release(taken);
    (taken, invalid)
}

/// Is `errno` one of the "try again later" answers of a TX kick?
fn kick_would_block(errno: i32) -> bool {
    matches!(errno, libc::EAGAIN | libc::EBUSY | libc::ENOBUFS | libc::EINTR)
}

impl XskSocket {
    /// Create a socket bound to queue `queue_id` of interface `ifindex` (in the calling
    /// thread's network namespace), with a fresh UMEM and a stocked fill ring.
    pub fn new(ifindex: u32, queue_id: u32, cfg: &XskConfig) -> Result<Self, XskError> {
        cfg.validate()?;
        let umem = Umem::new(cfg.frame_count, cfg.chunk_size, cfg.headroom).map_err(|e| match e.kind() {
            io::ErrorKind::InvalidInput => XskError::Config("invalid UMEM geometry"),
            _ => XskError::Os { step: XskStep::UmemMap, source: e },
        })?;
        let mut base = 0u16;
        if cfg.need_wakeup {
            base |= libc::XDP_USE_NEED_WAKEUP;
        }
        if cfg.multi_buffer {
            base |= libc::XDP_USE_SG;
        }
        let parts =
            bind_in_mode(cfg.mode, ifindex, queue_id, |flags| open_once(&umem, ifindex, queue_id, cfg, base | flags))?;

        let mut sock = XskSocket {
            fill: parts.fill,
            comp: parts.comp,
            rx: parts.rx,
            tx: parts.tx,
            fd: parts.fd,
            ifindex,
            queue_id,
            zero_copy: false,
            need_wakeup: cfg.need_wakeup,
            multi_buffer: cfg.multi_buffer,
            id: NEXT_SOCKET_ID.fetch_add(1, Ordering::Relaxed),
            tx_free: (cfg.rx_frames..cfg.frame_count).rev().map(|i| umem.chunk_addr(i)).collect(),
            fill_pending: (0..cfg.rx_frames).map(|i| umem.chunk_addr(i)).collect(),
            comp_scratch: Vec::with_capacity(cfg.comp_size as usize),
            rx_descs: Vec::with_capacity(cfg.rx_size as usize),
            rx_packets: Vec::with_capacity(cfg.rx_size as usize),
            tx_outstanding: 0,
            tx_budget: None,
            counters: XskCounters::default(),
            umem,
            shared: None,
        };
        sock.zero_copy = sock.query_zero_copy()?;
        if let Some(budget) = cfg.tx_budget {
            // Accepted range: 32 (the default) ..= TX ring entries (EACCES otherwise);
            // kernels before 6.17 answer ENOPROTOOPT.
            let budget = budget.min(cfg.tx_size);
            match setsockopt(&sock.fd, XDP_MAX_TX_SKB_BUDGET, &budget) {
                Ok(()) => {
                    sock.tx_budget = Some(budget);
                    tracing::debug!(budget, "XDP_MAX_TX_SKB_BUDGET set");
                }
                Err(e) => tracing::debug!(
                    error = %e,
                    "XDP_MAX_TX_SKB_BUDGET not accepted (kernel < 6.17 or out of range); ignored"
                ),
            }
        }
        sock.refill();
        tracing::info!(
            ifindex,
            queue_id,
            zero_copy = sock.zero_copy,
            need_wakeup = cfg.need_wakeup,
            multi_buffer = cfg.multi_buffer,
            frames = cfg.frame_count,
            "AF_XDP socket bound"
        );
        Ok(sock)
    }

    /// [`new`](Self::new) by interface name.
    pub fn bind_ifname(ifname: &str, queue_id: u32, cfg: &XskConfig) -> Result<Self, XskError> {
        let ifindex =
            uroce_xdp_prog::ifindex(ifname).map_err(|e| XskError::Os { step: XskStep::Interface, source: e.into() })?;
        Self::new(ifindex, queue_id, cfg)
    }

    /// One independent socket (own UMEM, own rings) per queue in `queues`.
    pub fn open_queues(
        ifindex: u32,
        queues: impl IntoIterator<Item = u32>,
        cfg: &XskConfig,
    ) -> Result<Vec<Self>, XskError> {
        queues.into_iter().map(|q| Self::new(ifindex, q, cfg)).collect()
    }

    /// Interface index.
    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }
    /// Queue id.
    pub fn queue_id(&self) -> u32 {
        self.queue_id
    }
    /// True if the bind ended up zero-copy (from `XDP_OPTIONS` at bind time).
    pub fn is_zero_copy(&self) -> bool {
        self.zero_copy
    }
    /// True if bound with `XDP_USE_SG`.
    pub fn is_multi_buffer(&self) -> bool {
        self.multi_buffer
    }
    /// The `XDP_MAX_TX_SKB_BUDGET` in effect, if the kernel accepted one.
    pub fn tx_budget(&self) -> Option<u32> {
        self.tx_budget
    }
    /// The UMEM.
    pub fn umem(&self) -> &Umem {
        &self.umem
    }
    /// User-space counters.
    pub fn counters(&self) -> XskCounters {
        self.counters
    }

    /// `getsockopt(XDP_OPTIONS)`: is zero-copy active?
    pub fn query_zero_copy(&self) -> Result<bool, XskError> {
        let mut o = libc::xdp_options { flags: 0 };
        getsockopt(self.fd.as_fd(), libc::XDP_OPTIONS, &mut o).map_err(os(XskStep::Options))?;
        Ok(o.flags & libc::XDP_OPTIONS_ZEROCOPY != 0)
    }

    /// `getsockopt(XDP_STATISTICS)`.
    pub fn statistics(&self) -> Result<XskStatistics, XskError> {
        // SAFETY: xdp_statistics is plain integers; all-zero is valid.
        let mut s: libc::xdp_statistics = unsafe { std::mem::zeroed() };
        getsockopt(self.fd.as_fd(), libc::XDP_STATISTICS, &mut s).map_err(os(XskStep::Statistics))?;
        Ok(XskStatistics {
            rx_dropped: s.rx_dropped,
            rx_invalid_descs: s.rx_invalid_descs,
            tx_invalid_descs: s.tx_invalid_descs,
            rx_ring_full: s.rx_ring_full,
            rx_fill_ring_empty_descs: s.rx_fill_ring_empty_descs,
            tx_ring_empty_descs: s.tx_ring_empty_descs,
        })
    }

    // ----- RX -----

    /// Put RX chunks returned by user space back on the fill ring. Called by
    /// [`recv`](Self::recv) before it looks at the RX ring, and when an [`RxBatch`] drops.
    /// Wakes the driver if it asked for it. Returns how many addresses were added.
    pub fn refill(&mut self) -> usize {
        let len = self.fill_pending.len();
        if len == 0 {
            return 0;
        }
        let n = if self.shared.is_some() {
            self.refill_shared(shared::SHARED_REFILL_BATCH)
        } else {
            let free = self.fill.0.free(len as u32) as usize;
            let m = free.min(len);
            let n = self.fill.produce(&self.fill_pending[len - m..]);
            self.fill_pending.truncate(len - n);
            n
        };
        if n > 0 && self.need_wakeup && self.fill.needs_wakeup() {
            self.wake_rx();
        }
        n
    }

    /// `recvfrom(MSG_DONTWAIT)`: lets a driver that set need_wakeup on the fill ring pick
    /// up new entries.
    fn wake_rx(&self) {
        // SAFETY: recvfrom with a null buffer of length 0 and null address is the
        // documented AF_XDP RX wakeup; no memory is written.
        unsafe {
            libc::recvfrom(
                self.fd.as_raw_fd(),
                std::ptr::null_mut(),
                0,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            );
        }
    }

    /// Take up to `max_packets` received packets. The fill ring is topped up first. A
    /// multi-buffer packet whose last descriptor has not arrived yet is left on the ring.
    /// The frames go back to the fill ring when the returned batch drops.
    pub fn recv(&mut self, max_packets: usize) -> RxBatch<'_> {
        self.refill();
        let (taken, invalid) = collect_packets(
            &mut self.rx,
            &self.umem,
            max_packets,
            &mut self.rx_descs,
            &mut self.rx_packets,
            &mut self.fill_pending,
        );
        if invalid > 0 {
            self.counters.rx_invalid += u64::from(invalid);
            tracing::warn!(queue = self.queue_id, invalid, "RX descriptor outside the UMEM; packet dropped");
        }
        self.counters.rx_packets += self.rx_packets.len() as u64;
        self.counters.rx_descs += u64::from(taken);
        RxBatch { sock: self }
    }

    /// Block until the RX ring has something or `timeout` passes (`None` = forever).
    /// Returns true if readable. Also wakes the driver when it needs it.
    pub fn wait_rx(&self, timeout: Option<Duration>) -> Result<bool, XskError> {
        Ok(self.poll(true, false, timeout)?.0)
    }

    /// `poll(2)` for RX (POLLIN) and/or TX (POLLOUT) readiness. Returns (readable,
    /// writable). EINTR counts as "nothing ready".
    pub fn poll(&self, rx: bool, tx: bool, timeout: Option<Duration>) -> Result<(bool, bool), XskError> {
        let mut events = 0;
        if rx {
            events |= libc::POLLIN;
        }
        if tx {
            events |= libc::POLLOUT;
        }
        let mut pfd = libc::pollfd { fd: self.fd.as_raw_fd(), events, revents: 0 };
        let ms = timeout.map_or(-1, |d| d.as_millis().min(i32::MAX as u128) as i32);
        // SAFETY: one valid pollfd, count 1.
        let rc = unsafe { libc::poll(&mut pfd, 1, ms) };
        if rc < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINTR) {
                return Ok((false, false));
            }
            return Err(XskError::Os { step: XskStep::Poll, source: e });
        }
        Ok((pfd.revents & libc::POLLIN != 0, pfd.revents & libc::POLLOUT != 0))
    }

    // ----- TX -----

    /// Take a free TX frame (reclaiming completions first if none is free). `None` when
    /// every TX frame is in flight: flush, let the kernel complete some, retry.
    pub fn tx_alloc(&mut self) -> Option<TxFrame> {
        if self.tx_free.is_empty() {
            self.reclaim();
        }
        let chunk = self.tx_free.pop()?;
        Some(TxFrame {
            addr: chunk + u64::from(self.umem.headroom()),
            len: 0,
            capacity: self.umem.tx_capacity(),
            owner: self.id,
        })
    }

    /// The writable bytes of `frame` (its whole capacity).
    ///
    /// # Panics
    /// If `frame` came from another socket.
    pub fn tx_buf(&mut self, frame: &TxFrame) -> &mut [u8] {
        assert_eq!(frame.owner, self.id, "TxFrame used with another XskSocket");
        // SAFETY: the frame's chunk is on no ring (it came from the TX free list and has not
        // been enqueued: `tx_enqueue` consumes the TxFrame); TxFrame is not Clone, so this
        // is its only handle, and `&mut self` rules out a second live view of it.
        unsafe { self.umem.slice_mut(frame.addr, frame.capacity) }
    }

    /// Return an unused frame to the free list.
    ///
    /// # Panics
    /// If `frame` came from another socket.
    pub fn tx_free(&mut self, frame: TxFrame) {
        assert_eq!(frame.owner, self.id, "TxFrame used with another XskSocket");
        self.tx_free.push(self.umem.chunk_of(frame.addr));
    }

    fn desc_of(frame: &TxFrame, more: bool) -> XdpDesc {
        XdpDesc { addr: frame.addr, len: frame.len, options: if more { XDP_PKT_CONTD } else { 0 } }
    }

    /// Queue a one-descriptor packet. Not visible to the kernel before
    /// [`tx_flush`](Self::tx_flush). Gives the frame back if the TX ring is full or the
    /// frame has no length.
    pub fn tx_enqueue(&mut self, frame: TxFrame) -> Result<(), TxFrame> {
        assert_eq!(frame.owner, self.id, "TxFrame used with another XskSocket");
        if frame.len == 0 || !self.tx.push_all(&[Self::desc_of(&frame, false)]) {
            return Err(frame);
        }
        self.tx_outstanding += 1;
        self.counters.tx_packets += 1;
        self.counters.tx_descs += 1;
        Ok(())
    }

    /// Queue one packet made of several frames (multi-buffer: all but the last carry
    /// `XDP_PKT_CONTD`). On success `frames` is emptied; on failure (ring full, an empty
    /// frame, or more than one frame without `multi_buffer`) it is left untouched.
    pub fn tx_enqueue_chain(&mut self, frames: &mut Vec<TxFrame>) -> bool {
        if frames.is_empty()
            || (frames.len() > 1 && !self.multi_buffer)
            || frames.iter().any(|f| f.len == 0 || f.owner != self.id)
        {
            return false;
        }
        let last = frames.len() - 1;
        let descs: Vec<XdpDesc> = frames.iter().enumerate().map(|(i, f)| Self::desc_of(f, i < last)).collect();
        if !self.tx.push_all(&descs) {
            return false;
        }
        self.tx_outstanding += descs.len() as u32;
        self.counters.tx_packets += 1;
        self.counters.tx_descs += descs.len() as u64;
        frames.clear();
        true
    }

    /// Copy `packet` into one frame (or, with `multi_buffer`, as many as needed) and queue
    /// it. Returns Ok(false) if there are not enough free frames or ring slots right now
    /// (reclaim/flush and retry).
    pub fn send(&mut self, packet: &[u8]) -> Result<bool, XskError> {
        let cap = self.umem.tx_capacity() as usize;
        if packet.is_empty() {
            return Err(XskError::Config("empty packet"));
        }
        let n = packet.len().div_ceil(cap);
        if n > 1 && !self.multi_buffer {
            return Err(XskError::Config("packet larger than a TX frame and multi_buffer is off"));
        }
        if self.tx_free.len() < n {
            self.reclaim();
            if self.tx_free.len() < n {
                return Ok(false);
            }
        }
        let mut frames = Vec::with_capacity(n);
        for chunk in packet.chunks(cap) {
            let Some(mut f) = self.tx_alloc() else {
                for f in frames {
                    self.tx_free(f);
                }
                return Ok(false);
            };
            self.tx_buf(&f)[..chunk.len()].copy_from_slice(chunk);
            f.set_len(chunk.len());
            frames.push(f);
        }
        if n == 1 {
            if let Some(f) = frames.pop() {
                return match self.tx_enqueue(f) {
                    Ok(()) => Ok(true),
                    Err(f) => {
                        self.tx_free(f);
                        Ok(false)
                    }
                };
            }
        }
        if self.tx_enqueue_chain(&mut frames) {
            Ok(true)
        } else {
            for f in frames {
                self.tx_free(f);
            }
            Ok(false)
        }
    }

    /// Publish queued descriptors and kick the kernel if it needs it (always in copy
    /// mode). Returns how many descriptors were published. A kick answered with
    /// EAGAIN/EBUSY/ENOBUFS is not an error: the kernel has more to do; call `tx_flush`
    /// (or [`kick_tx`](Self::kick_tx)) again while [`tx_pending`](Self::tx_pending) > 0.
    pub fn tx_flush(&mut self) -> Result<u32, XskError> {
        let n = self.tx.publish();
        if self.tx.pending() > 0 && (!self.need_wakeup || self.tx.needs_wakeup()) {
            self.kick_tx()?;
        }
        Ok(n)
    }

    /// `sendto(MSG_DONTWAIT)` kick. Ok(true) if the kernel took everything it could,
    /// Ok(false) for EAGAIN/EBUSY/ENOBUFS/EINTR (try again), Err for real errors (e.g.
    /// ENETDOWN, ENXIO).
    pub fn kick_tx(&mut self) -> Result<bool, XskError> {
        self.counters.tx_kicks += 1;
        // SAFETY: sendto with a null buffer of length 0 and no address is the documented
        // AF_XDP TX kick; the kernel reads nothing from user memory.
        let rc =
            unsafe { libc::sendto(self.fd.as_raw_fd(), std::ptr::null(), 0, libc::MSG_DONTWAIT, std::ptr::null(), 0) };
        if rc >= 0 {
            return Ok(true);
        }
        let e = io::Error::last_os_error();
        if kick_would_block(e.raw_os_error().unwrap_or(0)) {
            self.counters.tx_kicks_again += 1;
            return Ok(false);
        }
        Err(XskError::Os { step: XskStep::Kick, source: e })
    }

    /// Move completed TX frames back to the free list. Returns how many.
    pub fn reclaim(&mut self) -> usize {
        if self.shared.is_some() {
            return self.reclaim_shared(false);
        }
        self.comp_scratch.clear();
        let n = self.comp.consume(self.comp.0.size(), &mut self.comp_scratch);
        for &a in &self.comp_scratch {
            self.tx_free.push(self.umem.chunk_of(a));
        }
        self.tx_outstanding = self.tx_outstanding.saturating_sub(n as u32);
        self.counters.tx_completed += n as u64;
        n
    }

    /// [`XskSocket::reclaim`] after a transmit kick: on a shared UMEM, only once completions
    /// have gathered or free frames run low (each reclaim there takes the processes' lock).
    pub fn reclaim_after_kick(&mut self) -> usize {
        if self.shared.is_some() {
            return self.reclaim_shared(true);
        }
        self.reclaim()
    }

    /// Published TX descriptors the kernel has not taken yet.
    pub fn tx_pending(&self) -> u32 {
        self.tx.pending()
    }

    /// TX descriptors queued and not yet completed.
    pub fn tx_outstanding(&self) -> u32 {
        self.tx_outstanding
    }

    /// Free TX frames right now (without reclaiming).
    pub fn tx_free_frames(&self) -> usize {
        self.tx_free.len()
    }

    /// RX chunks user space has given back that are not on the fill ring yet: the ring had
    /// no room for them as far as the kernel's published consumer index said. The next
    /// [`refill`](Self::refill) (every [`recv`](Self::recv) starts with one) retries.
    pub fn fill_pending(&self) -> usize {
        self.fill_pending.len()
    }

    /// Kick and reclaim until every queued TX descriptor is completed or `timeout` passes.
    /// Returns true if all completed.
    pub fn tx_drain(&mut self, timeout: Duration) -> Result<bool, XskError> {
        let deadline = std::time::Instant::now() + timeout;
        self.tx.publish();
        loop {
            self.reclaim();
            if self.tx_outstanding == 0 {
                return Ok(true);
            }
            if std::time::Instant::now() >= deadline {
                return Ok(false);
            }
            if self.tx.pending() > 0 {
                if self.kick_tx()? {
                    continue;
                }
            } else {
                std::thread::yield_now();
            }
        }
    }
}

impl AsFd for XskSocket {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// Packets taken by one [`XskSocket::recv`]. Their frames return to the fill ring when the
/// batch drops.
pub struct RxBatch<'a> {
    sock: &'a mut XskSocket,
}

impl RxBatch<'_> {
    /// Number of packets.
    pub fn len(&self) -> usize {
        self.sock.rx_packets.len()
    }
    /// True if nothing was received.
    pub fn is_empty(&self) -> bool {
        self.sock.rx_packets.is_empty()
    }
    /// Packet `i` (None if out of range).
    pub fn get(&self, i: usize) -> Option<RxPacket<'_>> {
        let &(a, b) = self.sock.rx_packets.get(i)?;
        Some(RxPacket { umem: &self.sock.umem, descs: &self.sock.rx_descs[a as usize..b as usize] })
    }
    /// All packets in arrival order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = RxPacket<'_>> + '_ {
        self.sock
            .rx_packets
            .iter()
            .map(|&(a, b)| RxPacket { umem: &self.sock.umem, descs: &self.sock.rx_descs[a as usize..b as usize] })
    }
}

impl Drop for RxBatch<'_> {
    fn drop(&mut self) {
        let s = &mut *self.sock;
        for d in s.rx_descs.drain(..) {
            s.fill_pending.push(s.umem.chunk_of(d.addr));
        }
        s.rx_packets.clear();
        s.refill();
    }
}

/// One received packet: one segment, or several with multi-buffer (`XDP_PKT_CONTD`).
#[derive(Clone, Copy)]
pub struct RxPacket<'a> {
    umem: &'a Umem,
    descs: &'a [XdpDesc],
}

impl<'a> RxPacket<'a> {
    /// The descriptors ((addr, len) segments) of the packet.
    pub fn descs(&self) -> &'a [XdpDesc] {
        self.descs
    }
    /// The segments' bytes, in order.
    pub fn segments(&self) -> impl Iterator<Item = &'a [u8]> + 'a {
        let umem = self.umem;
        self.descs.iter().map(move |d| {
            // SAFETY: `recv` checked every descriptor with `Umem::contains`; the chunk is
            // owned by user space until the RxBatch (which this packet borrows) drops, and
            // nothing writes it meanwhile (TX frames are different chunks, and the batch
            // holds the socket's `&mut`).
            unsafe { umem.slice(d.addr, d.len) }
        })
    }
    /// Number of segments.
    pub fn segment_count(&self) -> usize {
        self.descs.len()
    }
    /// The first segment (holds all headers: a chunk is far larger than any header stack).
    pub fn first(&self) -> &'a [u8] {
        self.segments().next().unwrap_or(&[])
    }
    /// The whole packet if it is a single segment.
    pub fn data(&self) -> Option<&'a [u8]> {
        (self.descs.len() == 1).then(|| self.first())
    }
    /// Total length in bytes.
    pub fn len(&self) -> usize {
        self.descs.iter().map(|d| d.len as usize).sum()
    }
    /// True for a zero-length packet (never produced by the kernel).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Append the packet's bytes to `out`.
    pub fn copy_into(&self, out: &mut Vec<u8>) {
        for s in self.segments() {
            out.extend_from_slice(s);
        }
    }
    /// The packet's bytes, reassembled.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.len());
        self.copy_into(&mut v);
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_validation() {
        assert!(XskConfig::default().validate().is_ok());
        let bad = XskConfig { rx_size: 1000, ..XskConfig::default() };
        assert!(matches!(bad.validate(), Err(XskError::Config(_))));
        let bad = XskConfig { rx_frames: 4096, ..XskConfig::default() };
        assert!(matches!(bad.validate(), Err(XskError::Config(_))));
        let bad = XskConfig { frame_count: 2048, ..XskConfig::default() };
        assert!(matches!(bad.validate(), Err(XskError::Config(_))));
    }

    #[test]
    fn tx_frame_length_rules() {
        let mut f = TxFrame { addr: 0, len: 0, capacity: 100, owner: 1 };
        assert!(f.is_empty());
        assert!(!f.set_len(0));
        assert!(!f.set_len(101));
        assert!(f.set_len(100));
        assert_eq!(f.len(), 100);
    }

    fn desc(addr: u64, len: u32, more: bool) -> XdpDesc {
        XdpDesc { addr, len, options: if more { XDP_PKT_CONTD } else { 0 } }
    }

    #[test]
    fn rx_grouping_of_multi_buffer_packets() {
        let umem = Umem::new(16, 4096, 0).unwrap();
        let mem = crate::xsk::ring::tests::TestRing::<XdpDesc>::new(16, u32::MAX - 2);
        let (mut p, c) = mem.pair();
        let mut rx = RxRing(c);
        let mut push = |ds: &[XdpDesc]| {
            let s = p.reserve_exact(ds.len() as u32).unwrap();
            for (i, d) in ds.iter().enumerate() {
                p.write(s.wrapping_add(i as u32), *d);
            }
            p.submit(ds.len() as u32);
        };
        // A 1-segment packet, a 3-segment packet, and the first 2 segments of a third.
        push(&[
            desc(256, 60, false),
            desc(4096 + 256, 3840, true),
            desc(2 * 4096 + 256, 3840, true),
            desc(3 * 4096 + 256, 100, false),
            desc(4 * 4096 + 256, 3840, true),
            desc(5 * 4096 + 256, 3840, true),
        ]);
        let (mut descs, mut pkts, mut recycle) = (Vec::new(), Vec::new(), Vec::new());
        let (taken, bad) = collect_packets(&mut rx, &umem, 64, &mut descs, &mut pkts, &mut recycle);
        assert_eq!((taken, bad), (4, 0));
        assert_eq!(pkts, vec![(0, 1), (1, 4)]);
        assert_eq!(descs.len(), 4);
        // The partial packet is still on the ring; completing it delivers all 3 segments.
        push(&[desc(6 * 4096 + 256, 10, false)]);
        let (taken, _) = collect_packets(&mut rx, &umem, 64, &mut descs, &mut pkts, &mut recycle);
        assert_eq!(taken, 3);
        assert_eq!(pkts, vec![(0, 3)]);
        assert_eq!(descs[0].addr, 4 * 4096 + 256);
        assert_eq!(descs[2].len, 10);

        // max_packets limits the batch; the rest waits.
        push(&[desc(256, 1, false), desc(4096 + 256, 2, false), desc(8192 + 256, 3, false)]);
        let (taken, _) = collect_packets(&mut rx, &umem, 2, &mut descs, &mut pkts, &mut recycle);
        assert_eq!((taken, pkts.len()), (2, 2));
        let (taken, _) = collect_packets(&mut rx, &umem, 2, &mut descs, &mut pkts, &mut recycle);
        assert_eq!((taken, descs[0].len), (1, 3));

        // A packet with a descriptor crossing its chunk is dropped and its chunks recycled;
        // the following good packet is still delivered.
        push(&[desc(256, 3841, true), desc(4096 + 256, 5, false), desc(8192 + 256, 7, false)]);
        let (taken, bad) = collect_packets(&mut rx, &umem, 64, &mut descs, &mut pkts, &mut recycle);
        assert_eq!((taken, bad), (3, 1));
        assert_eq!(recycle, vec![0, 4096]);
        assert_eq!(pkts, vec![(0, 1)]);
        assert_eq!(descs[0].len, 7);
        let (taken, _) = collect_packets(&mut rx, &umem, 64, &mut descs, &mut pkts, &mut recycle);
        assert_eq!(taken, 0);
    }

    #[test]
    fn kick_errnos() {
        for e in [libc::EAGAIN, libc::EBUSY, libc::ENOBUFS] {
            assert!(kick_would_block(e));
        }
        assert!(!kick_would_block(libc::ENETDOWN));
        assert!(!kick_would_block(libc::ENXIO));
    }
}
