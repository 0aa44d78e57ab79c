//! Configuration, errors and statistics of the AF_XDP layer.

use std::io;
use std::time::Duration;

/// Zero-copy or copy mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BindMode {
    /// `XDP_ZEROCOPY`, falling back to `XDP_COPY` (logged) if the driver refuses.
    Auto,
    /// `XDP_ZEROCOPY` only.
    ZeroCopy,
    /// `XDP_COPY` only.
    Copy,
}

/// Socket and UMEM geometry and options.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct XskConfig {
    /// UMEM chunks (frames).
    pub frame_count: u32,
    /// Chunk size: a power of two in 2048..=4096.
    pub chunk_size: u32,
    /// User headroom reserved at the start of each chunk (RX data starts after it plus
    /// `XDP_PACKET_HEADROOM`; TX frames start after it).
    pub headroom: u32,
    /// RX ring entries (power of two).
    pub rx_size: u32,
    /// TX ring entries (power of two).
    pub tx_size: u32,
    /// Fill ring entries (power of two).
    pub fill_size: u32,
    /// Completion ring entries (power of two).
    pub comp_size: u32,
    /// Chunks dedicated to RX (≤ `fill_size`); the rest are TX frames.
    pub rx_frames: u32,
    /// Zero-copy policy.
    pub mode: BindMode,
    /// `XDP_USE_NEED_WAKEUP`: only syscall when the kernel asks for it.
    pub need_wakeup: bool,
    /// `XDP_USE_SG`: packets larger than a chunk arrive / leave as several descriptors.
    /// Needed for frames above `chunk_size - 256` bytes (RoCE path MTU 4096).
    pub multi_buffer: bool,
    /// `XDP_MAX_TX_SKB_BUDGET` (copy-mode descriptors per `sendto`, default 32 in the
    /// kernel); ignored where the kernel lacks it (< 6.17) or refuses the value (outside
    /// 32..=tx_size). Clamped to `tx_size`. See [`XskSocket::tx_budget`](super::XskSocket::tx_budget).
    pub tx_budget: Option<u32>,
    /// How long `bind` keeps retrying `EBUSY` (the queue's previous socket is still being
    /// released by the kernel; ~25 ms on veth). A queue held by a live socket fails after
    /// this long.
    pub busy_retry: Duration,
}

impl Default for XskConfig {
    fn default() -> Self {
        XskConfig {
            frame_count: 4096,
            chunk_size: 4096,
            headroom: 0,
            rx_size: 2048,
            tx_size: 2048,
            fill_size: 2048,
            comp_size: 2048,
            rx_frames: 2048,
            mode: BindMode::Auto,
            need_wakeup: true,
            multi_buffer: false,
            tx_budget: Some(256),
            busy_retry: Duration::from_secs(1),
        }
    }
}

impl XskConfig {
    pub(crate) fn validate(&self) -> Result<(), XskError> {
        for (size, what) in [
            (self.rx_size, "rx_size must be a power of two"),
            (self.tx_size, "tx_size must be a power of two"),
            (self.fill_size, "fill_size must be a power of two"),
            (self.comp_size, "comp_size must be a power of two"),
        ] {
            if !size.is_power_of_two() {
                return Err(XskError::Config(what));
            }
        }
        if self.rx_frames == 0 || self.rx_frames > self.fill_size {
            return Err(XskError::Config("rx_frames must be in 1..=fill_size"));
        }
        if self.rx_frames >= self.frame_count {
            return Err(XskError::Config("frame_count must exceed rx_frames (TX needs frames)"));
        }
        Ok(())
    }
}

/// A ring, for error reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RingKind {
    /// Fill ring.
    Fill,
    /// Completion ring.
    Completion,
    /// RX ring.
    Rx,
    /// TX ring.
    Tx,
}

/// The operation that failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum XskStep {
    /// `socket(AF_XDP)`.
    Socket,
    /// Mapping the UMEM.
    UmemMap,
    /// `XDP_UMEM_REG` (ENOBUFS = RLIMIT_MEMLOCK too small without CAP_IPC_LOCK).
    UmemReg,
    /// Setting a ring size.
    RingSize(RingKind),
    /// `XDP_MMAP_OFFSETS`.
    MmapOffsets,
    /// Mapping a ring.
    RingMap(RingKind),
    /// `XDP_OPTIONS`.
    Options,
    /// `XDP_STATISTICS`.
    Statistics,
    /// TX kick (`sendto`).
    Kick,
    /// `poll`.
    Poll,
    /// Interface lookup.
    Interface,
}

/// AF_XDP errors.
#[derive(Debug)]
pub enum XskError {
    /// Invalid configuration.
    Config(&'static str),
    /// A syscall failed.
    Os {
        /// Which.
        step: XskStep,
        /// The OS error.
        source: io::Error,
    },
    /// `bind` failed. `zero_copy`: the `XDP_ZEROCOPY` attempt's error (if tried),
    /// `copy`: the `XDP_COPY` attempt's error (if tried).
    Bind {
        /// Error of the zero-copy bind.
        zero_copy: Option<io::Error>,
        /// Error of the copy-mode bind.
        copy: Option<io::Error>,
    },
}

impl std::fmt::Display for XskError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            XskError::Config(m) => write!(f, "invalid AF_XDP configuration: {m}"),
            XskError::Os { step, source } => write!(f, "AF_XDP {step:?} failed: {source}"),
            XskError::Bind { zero_copy, copy } => {
                write!(f, "AF_XDP bind failed:")?;
                if let Some(e) = zero_copy {
                    write!(f, " zero-copy: {e};")?;
                }
                if let Some(e) = copy {
                    write!(f, " copy: {e};")?;
                }
                Ok(())
            }
        }
    }
}

impl std::error::Error for XskError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            XskError::Os { source, .. } => Some(source),
            _ => None,
        }
    }
}

pub(crate) fn os(step: XskStep) -> impl FnOnce(io::Error) -> XskError {
    move |source| XskError::Os { step, source }
}

/// `struct xdp_statistics`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct XskStatistics {
    /// Dropped for reasons other than an invalid descriptor.
    pub rx_dropped: u64,
    /// Invalid RX descriptors (should stay 0).
    pub rx_invalid_descs: u64,
    /// Invalid TX descriptors (bad address/length/options).
    pub tx_invalid_descs: u64,
    /// Dropped because the RX ring was full.
    pub rx_ring_full: u64,
    /// Times the fill ring was empty when a frame arrived.
    pub rx_fill_ring_empty_descs: u64,
    /// Times the TX ring was empty when the kernel looked.
    pub tx_ring_empty_descs: u64,
}

/// User-space counters of one socket.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct XskCounters {
    /// Packets handed out by [`XskSocket::recv`](super::XskSocket::recv).
    pub rx_packets: u64,
    /// RX descriptors consumed (≥ packets with multi-buffer).
    pub rx_descs: u64,
    /// Packets dropped because a descriptor pointed outside the UMEM (kernel bug guard).
    pub rx_invalid: u64,
    /// Packets queued on the TX ring.
    pub tx_packets: u64,
    /// Descriptors queued on the TX ring.
    pub tx_descs: u64,
    /// Descriptors returned on the completion ring.
    pub tx_completed: u64,
    /// `sendto` kicks.
    pub tx_kicks: u64,
    /// Kicks answered with EAGAIN/EBUSY/ENOBUFS (more work pending; not an error).
    pub tx_kicks_again: u64,
}
