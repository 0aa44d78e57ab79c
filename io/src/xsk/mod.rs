//! AF_XDP sockets: UMEM, the four rings, bind with zero-copy → copy fallback, RX batches
//! and in-place TX frames.
//!
//! # Contract
//!
//! * [`XskSocket::new`] binds one socket to one (interface, queue) with its own [`Umem`]
//!   (no sharing between sockets; [`XskSocket::open_queues`] makes one per queue). Register
//!   it in the XDP program's XSKMAP afterwards (`uroce_xdp_prog::XdpSteering::register`,
//!   *after* bind — the kernel refuses unbound sockets).
//! * RX: [`XskSocket::recv`] tops the fill ring up, then returns an [`RxBatch`] of complete
//!   packets ([`RxPacket`]: one or, with `XDP_USE_SG`, several `(addr, len)` segments, all
//!   `&[u8]` views into the UMEM). Dropping the batch returns the frames to the fill ring.
//!   Sleep with [`XskSocket::wait_rx`] (`poll(POLLIN)`).
//! * TX: [`XskSocket::tx_alloc`] → write into [`XskSocket::tx_buf`] → [`TxFrame::set_len`]
//!   → [`XskSocket::tx_enqueue`] (or [`XskSocket::tx_enqueue_chain`] for a multi-buffer
//!   packet, or the copying [`XskSocket::send`]) → [`XskSocket::tx_flush`] publishes and
//!   kicks. Completed frames come back through [`XskSocket::reclaim`] (also done
//!   implicitly by `tx_alloc` when the free list is empty). In copy mode a kick transmits
//!   at most the TX budget per `sendto` and answers EAGAIN when more is queued: that is
//!   normal; keep calling `tx_flush`/`kick_tx` while [`XskSocket::tx_pending`] > 0.
//! * RX frames (the first `rx_frames` chunks) and TX frames (the rest) are separate pools,
//!   so a TX burst can never starve the fill ring.
//! * Checksums: RX frames are delivered as they came off the wire; on TX the caller writes
//!   final IP/UDP checksums (UDP checksum 0 is fine over IPv4; RoCEv2 senders use 0).
//!
//! # Why raw libc rings rather than the `xdp` crate
//!
//! The socket, UMEM and rings are ~1.5k lines (with docs) over `libc` + `memmap2` instead of a
//! dependency (findings in docs/afxdp.md, measured on this machine):
//! * the kernel ABI is small and stable (four struct layouts, a handful of sockopts), and
//!   `libc` already defines all of it;
//! * the ring operations are inherently `unsafe` in every crate (`xdp` 0.8 exposes them as
//!   `unsafe fn`), so a dependency would not shrink the unsafe surface — here it is confined
//!   to [`ring`], [`umem`] and the syscall wrappers, each with a `SAFETY:` argument;
//! * we need things the crates do not all offer: `XDP_MAX_TX_SKB_BUDGET`, `XDP_USE_SG`
//!   multi-buffer RX/TX, `XDP_STATISTICS`/`XDP_OPTIONS`, and EAGAIN-as-progress kick
//!   semantics (the `xdp` crate turns EAGAIN into an error and loses the queued count);
//! * `xsk-rs`/`afxdp` need clang, libelf and a vendored libbpf at build time;
//! * performance is identical: over veth the kernel copy path is the bottleneck.
//!
//! The index logic of the rings ([`ring::Producer`], [`ring::Consumer`]) is plain code over
//! raw pointers and is unit-tested over heap memory (wraparound of the `u32` indices,
//! batching, cancel, a two-thread transfer), as s2n-quic does for its rings.

pub mod config;
pub mod ring;
pub mod socket;
pub mod umem;

pub use config::{BindMode, RingKind, XskConfig, XskCounters, XskError, XskStatistics, XskStep};
pub use ring::{XdpDesc, XDP_PKT_CONTD};
pub use socket::{
    create_shared_queue, Geometry, RxBatch, RxPacket, TxFrame, XskSocket, MAX_XDP_TENANTS, SHARED_RX_FRAMES,
    SHARED_RX_RING,
};
pub use umem::{Umem, XDP_PACKET_HEADROOM};
