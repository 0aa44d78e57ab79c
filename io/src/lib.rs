//! uroce-io: the I/O half of uroce — backends that move whole Ethernet frames between the
//! sans-IO engine (`uroce-transport`) and a network interface, and the runtime that drives the
//! engine over them. The `uroce` tool, the tests and the coming C ABI all use it (the engine /
//! I/O split of quinn-proto / quinn-udp).
//!
//! * [`xsk`]: AF_XDP sockets (UMEM, rings) — the fast path; [`xdp`] wraps them (with the XDP
//!   program from `uroce-xdp-prog`) as a [`Backend`].
//! * [`udp`]: a kernel UDP socket on port 4791 — the fallback when XDP is not available (no
//!   root, no driver support). The kernel builds the Ethernet/IP/UDP headers; the backend
//!   rebuilds them on receive so the engine sees the same frames either way.
//! * [`netif`]: what the runtime needs to know about an interface (MAC, MTU, addresses) and
//!   the peer MAC from the kernel's neighbour table (the kernel does ARP/ND).
//! * [`inject`]: a seeded fault injector at the I/O boundary (drop, duplicate, reorder, delay,
//!   corrupt, CE-mark) for tests and `uroce perf --inject`.
//! * [`tap`]: a program between a port's engine and its backend in both directions
//!   (`uroce probe`'s targeted faults).
//! * [`runtime`]: [`runtime::Port`] (engine + backend + clock + capture + injector) and
//!   [`runtime::Runtime`] (progress threads); [`runtime::connect`] connects a QP to a peer.
//! * [`capture`]: pcap files of what a port moves; [`random`]: where key material comes from.

pub mod capture;
pub mod inject;
pub mod netif;
pub mod random;
pub mod runtime;
pub mod share;
pub mod tap;
pub mod udp;
pub mod xdp;
pub mod xsk;

use std::io;
use std::time::Duration;

/// Largest frame a backend handles: a 4096-byte path MTU plus every header RoCEv2 can carry.
pub const MAX_FRAME: usize = 4096 + 160;

/// A way to send and receive Ethernet frames carrying RoCEv2.
///
/// The engine writes transmit frames straight into backend buffers (`send_with`), and reads
/// received frames where the backend has them (`recv`): for AF_XDP that is UMEM, so the only
/// payload copy is UMEM ↔ memory region.
pub trait Backend: Send {
    /// What the backend is and how it runs (e.g. `af_xdp queue 0 copy mode, native XDP`).
    fn describe(&self) -> String;

    /// Receive up to `max` frames, calling `f` with each complete Ethernet frame. Returns the
    /// number delivered (0 when nothing was waiting; never blocks).
    fn recv(&mut self, max: usize, f: &mut dyn FnMut(&[u8])) -> io::Result<usize>;

    /// Offer a transmit buffer of at least [`MAX_FRAME`] bytes to `build`, which writes one
    /// frame and returns its length, or `None` when it has nothing to send. `Ok(true)`: a frame
    /// was queued; `Ok(false)`: `build` had nothing; `Err(WouldBlock)`: no transmit buffer is
    /// free right now (call [`Backend::flush`] and try later; `build` was not called).
    fn send_with(&mut self, build: &mut dyn FnMut(&mut [u8]) -> Option<usize>) -> io::Result<bool>;

    /// Push queued frames to the device and reclaim finished transmit buffers.
    fn flush(&mut self) -> io::Result<()>;

    /// Block until a frame may be readable, or `timeout` passes.
    fn wait(&mut self, timeout: Duration) -> io::Result<()>;

    /// True when the backend itself verified the ICRC of every frame it delivers (then the
    /// engine need not verify it again).
    fn verifies_icrc(&self) -> bool {
        false
    }

    /// True when the frames it delivers carry the Ethernet header that arrived (a kernel UDP
    /// socket's carry a placeholder: the engine then cannot check source MACs).
    fn delivers_link_headers(&self) -> bool {
        true
    }

    /// A file descriptor that becomes readable when frames arrive, for a runtime that waits
    /// on it together with other events (`None`: use [`Backend::wait`]).
    fn raw_fd(&self) -> Option<std::os::fd::RawFd> {
        None
    }

    /// Receive queues this backend serves (an AF_XDP socket each); a runtime may give every
    /// queue its own progress thread ([`Backend::focus_queue`]).
    fn queues(&self) -> usize {
        1
    }

    /// From now on, `recv`, `send_with`, `flush` and `wait` use only queue `q` (`None`: all
    /// queues, the default). Backends with one queue ignore it.
    fn focus_queue(&mut self, _q: Option<usize>) {}

    /// The descriptor of queue `q` alone (see [`Backend::raw_fd`]).
    fn queue_fd(&self, q: usize) -> Option<std::os::fd::RawFd> {
        if q == 0 {
            self.raw_fd()
        } else {
            None
        }
    }

    /// Frames received so far on each queue (empty: not counted per queue).
    fn queue_rx_frames(&self) -> Vec<u64> {
        Vec::new()
    }

    /// The UDP source port every frame must carry, when the backend cannot choose it per QP
    /// (a kernel UDP socket sends from its bound port; the ICRC covers the port, so the engine
    /// must build frames with exactly this one).
    fn fixed_udp_src_port(&self) -> Option<u16> {
        None
    }

    /// The block of QP numbers this process owns when it shares the interface with other
    /// uroce processes ([`crate::share`]); the engine then hands out only QPNs of that block.
    fn qpn_block(&self) -> Option<u8> {
        None
    }

    /// Whether a frame this backend sends to the interface's own address comes back in (to
    /// another process sharing it, through the kernel's steering): kernel UDP loops it through
    /// the stack; a frame an AF_XDP socket sends leaves by the NIC and does not come back.
    fn reaches_own_address(&self) -> bool {
        false
    }

    /// The CM listeners' map the kernel's steering reads (`uroce_xdp_prog::ServiceMap`, REQs by
    /// service ID; every other MAD to QP1 by the receiver's ID, `uroce_wire::cm::steer`) and
    /// this process's block in it, when it shares the interface.
    fn cm_services(&self) -> Option<(&uroce_xdp_prog::ServiceMap, u8)> {
        None
    }

    /// Whether MADs to QP1 reach this process: it has the interface alone, or the steering
    /// brings it the ones its CM messages name ([`Backend::cm_services`]).
    fn steers_qp1(&self) -> bool {
        self.qpn_block().is_none() || self.cm_services().is_some()
    }

    /// REQs and SIDR REQs for `service_id` come to this process from now on (when it shares the
    /// interface; nothing to do otherwise). `AddrInUse` if another process listens on it.
    fn listen_service(&mut self, service_id: u64) -> io::Result<()> {
        let Some((services, block)) = self.cm_services() else { return Ok(()) };
        services.listen(service_id, u32::from(block))?;
        tracing::debug!(service_id = format_args!("{service_id:#018x}"), block, "REQs for the service steered here");
        Ok(())
    }

    /// No more REQs for `service_id` to this process.
    fn unlisten_service(&mut self, service_id: u64) {
        if let Some((services, _)) = self.cm_services() {
            if let Err(e) = services.unlisten(service_id) {
                tracing::warn!(%e, service_id, "could not stop steering a service's REQs here");
            }
        }
    }
}
