//! The AF_XDP backend: the XDP program from `uroce-xdp-prog` steers UDP/4791 frames of every
//! receive queue to one AF_XDP socket per queue ([`crate::xsk`]); the engine builds
//! transmit frames directly in UMEM and reads received frames where the kernel put them.
//!
//! Frames that fit one UMEM chunk (path MTU 1024 and 2048, or 4096 on a link whose MTU keeps
//! frames under 3840 bytes) are never copied here: the only payload copy is UMEM ↔ memory
//! region, done by the engine. Larger frames (a 4096-byte path MTU on a jumbo link) travel as
//! multi-buffer AF_XDP packets (`XDP_USE_SG`); they are staged through one contiguous scratch
//! buffer on each side — a second copy, for those frames only.
//!
//! Zero-copy (`XDP_ZEROCOPY`, verified on virtio_net with Linux 6.17 against rxe: see
//! `tests/interop_zerocopy.rs`): the UMEM chunks on the fill ring are the queue's receive
//! buffers, so the socket stocks the fill ring at bind and refills it after every receive
//! batch, and frames the program passes (ARP, TCP) are still delivered to the kernel stack by
//! the driver. Multi-buffer in zero-copy mode needs driver support that virtio_net lacks
//! (EOPNOTSUPP): on a link with an MTU above [`MAX_SINGLE_CHUNK_MTU`], `BindMode::Auto` falls
//! back to copy mode and `BindMode::ZeroCopy` fails with that explanation.

use super::xsk::{BindMode, XskConfig, XskError, XskSocket};
use super::{Backend, MAX_FRAME};
use std::io;
use std::os::fd::AsFd;
use std::sync::Arc;
use std::time::Duration;
use uroce_xdp_prog::{AttachMode, ProgramConfig, XdpSteering};

/// The largest link MTU whose frames (MTU + Ethernet header + a VLAN tag) fit one 4 KiB UMEM
/// chunk after the kernel's `XDP_PACKET_HEADROOM` (256): above it the sockets need
/// multi-buffer (`XDP_USE_SG`).
pub const MAX_SINGLE_CHUNK_MTU: usize = 4096 - 256 - 18;

/// The kernel refused AF_XDP for lack of privileges: the XDP program and its XSKMAP need
/// `CAP_BPF` and `CAP_NET_ADMIN`, an AF_XDP socket `CAP_NET_RAW` (root has them all). Carried
/// inside the `io::Error` (kind `PermissionDenied`) that [`XdpBackend::open`] returns, so a
/// command line can find it and suggest the kernel-UDP backend.
#[derive(Debug)]
pub struct NotPermitted {
    /// The interface.
    pub ifname: String,
    /// What was refused, e.g. `attach the XDP program: MapCreate failed: Operation not permitted`.
    pub refused: String,
}

impl std::fmt::Display for NotPermitted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: AF_XDP needs root, or the capabilities CAP_NET_ADMIN, CAP_BPF and CAP_NET_RAW ({})",
            self.ifname, self.refused
        )
    }
}

impl std::error::Error for NotPermitted {}

impl NotPermitted {
    /// The [`NotPermitted`] inside `e`, if that is why `e` happened.
    pub fn find<'a>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a NotPermitted> {
        e.downcast_ref::<NotPermitted>().or_else(|| {
            e.downcast_ref::<io::Error>().and_then(|io| io.get_ref()).and_then(|i| i.downcast_ref::<NotPermitted>())
        })
    }
}

/// How to set up the AF_XDP backend.
#[derive(Clone, Debug)]
pub struct XdpOptions {
    /// Native (driver) or generic (skb) XDP, or native with a fallback to generic.
    pub attach: AttachMode,
    /// Zero-copy, copy, or zero-copy with a fallback to copy (the mode obtained is logged).
    pub bind: BindMode,
    /// Receive queues to serve (default: every queue the interface has).
    pub queues: Option<Vec<u32>>,
    /// UMEM frames per socket.
    pub frames: u32,
    /// Take every frame (`uroce switch`), not only RoCEv2 and PFC.
    pub all_frames: bool,
    /// Share the interface with other uroce processes (two MPI ranks on one host): this
    /// process gets a block of QP numbers and its own socket on every queue, all sharing each
    /// queue's UMEM, and the program steers each frame by its destination QP's block
    /// ([`XdpBackend::open_shared`]).
    pub shared: bool,
}

impl Default for XdpOptions {
    fn default() -> Self {
        XdpOptions {
            attach: AttachMode::Auto,
            bind: BindMode::Auto,
            queues: None,
            frames: 4096,
            all_frames: false,
            shared: false,
        }
    }
}

/// AF_XDP sockets on every queue of one interface, plus the XDP program steering to them.
pub struct XdpBackend {
    // Field order is drop order: unregister-by-close the sockets, then detach the program.
    sockets: Vec<XskSocket>,
    /// Shared by the backends of every shard of a sharded runtime (detached when the last goes).
    /// None when the interface is shared with other processes: then `share` holds the XSKMAP
    /// and this process's QPN block, and the broker the program's link.
    steering: Option<Arc<XdpSteering>>,
    share: Option<Shared>,
    ifname: String,
    scratch: Vec<u8>,
    tx_chunk: usize,
    /// Only this queue, when a per-queue progress thread drives the backend.
    focus: Option<usize>,
    /// Frames received per queue.
    rx_frames: Vec<u64>,
}

impl XdpBackend {
    /// Attach the XDP program to `ifname` and bind an AF_XDP socket to each queue.
    pub fn open(ifname: &str, opts: &XdpOptions) -> io::Result<XdpBackend> {
        if opts.shared {
            return Self::open_shared(ifname, opts);
        }
        let steering = Arc::new(Self::install_config(ifname, opts.attach, 1, opts.all_frames)?);
        let queues: Vec<u32> = match &opts.queues {
            Some(q) => q.clone(),
            None => (0..rx_queues(ifname)).collect(),
        };
        let slots: Vec<(u32, Vec<u32>)> = queues.iter().map(|&q| (q, vec![q])).collect();
        Self::open_slots(ifname, opts, steering, &slots)
    }

    /// Install the XDP program on `ifname` for `shards` engine shards (1: the unsharded
    /// program), to be shared by the shards' backends ([`XdpBackend::open_shard`]).
    pub fn install(ifname: &str, attach: AttachMode, shards: u32) -> io::Result<XdpSteering> {
        Self::install_config(ifname, attach, shards, false)
    }

    fn install_config(ifname: &str, attach: AttachMode, shards: u32, all_frames: bool) -> io::Result<XdpSteering> {
        let err = |what: &str, e: &dyn std::fmt::Display| io::Error::other(format!("{ifname}: {what}: {e}"));
        let link_mtu = uroce_xdp_prog::mtu(ifname).map_err(|e| err("MTU", &e))? as usize;
        let cfg = ProgramConfig { frags: link_mtu > MAX_SINGLE_CHUNK_MTU, shards, all_frames, ..Default::default() };
        XdpSteering::install(ifname, &cfg, attach).map_err(|e| match e.is_permission_denied() {
            true => io::Error::new(
                io::ErrorKind::PermissionDenied,
                NotPermitted { ifname: ifname.to_string(), refused: format!("attach the XDP program: {e}") },
            ),
            false => err("attach the XDP program", &e),
        })
    }

    /// The backend of shard `shard` of `shards` (see [`crate::runtime::ShardedRuntime`]): one
    /// AF_XDP socket on every `shards`-th receive queue of `opts.queues` (default every queue,
    /// so queue `q` with `q % shards == shard`), starting at position `shard`, each registered
    /// at the program's slot `(q, shard)` — and at `(q, t)` for every other shard `t`: a frame
    /// for shard `t`'s QP that arrives on this shard's queue is this shard's to relay (see
    /// the runtime's module documentation), since no other shard's socket can take a frame
    /// from queue `q`. `steering` must
    /// have been installed for `shards` shards. An interface with fewer queues than shards is
    /// refused: a socket cannot share a queue with another shard's (the kernel allows one
    /// UMEM pool per queue; sharing it would share its fill and completion rings).
    pub fn open_shard(
        ifname: &str,
        opts: &XdpOptions,
        steering: Arc<XdpSteering>,
        shard: u32,
        shards: u32,
    ) -> io::Result<XdpBackend> {
        let queues: Vec<u32> = match &opts.queues {
            Some(q) => q.clone(),
            None => (0..rx_queues(ifname)).collect(),
        };
        if (queues.len() as u32) < shards {
            return Err(io::Error::other(format!(
                "{ifname}: {shards} shards need at least {shards} receive queues, it has {}",
                queues.len()
            )));
        }
        let mut slots = Vec::new();
        for (i, &q) in queues.iter().enumerate() {
            if i as u32 % shards == shard {
                // Its own slot first (the one the log names), then the other shards'.
                let order = std::iter::once(shard).chain((0..shards).filter(|&t| t != shard));
                let of_queue = order
                    .map(|t| steering.slot(q, t))
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| io::Error::other(format!("{ifname}: slot: {e}")))?;
                slots.push((q, of_queue));
            }
        }
        Self::open_slots(ifname, opts, steering, &slots)
    }

    /// Bind a socket to each `(queue, slots)` and register it at each of `slots`.
    fn open_slots(
        ifname: &str,
        opts: &XdpOptions,
        steering: Arc<XdpSteering>,
        slots: &[(u32, Vec<u32>)],
    ) -> io::Result<XdpBackend> {
        let err = |what: &str, e: &dyn std::fmt::Display| io::Error::other(format!("{ifname}: {what}: {e}"));
        let not_permitted = |what: &str, e: &dyn std::fmt::Display| {
            let refused = format!("{what}: {e}");
            io::Error::new(io::ErrorKind::PermissionDenied, NotPermitted { ifname: ifname.to_string(), refused })
        };
        let link_mtu = uroce_xdp_prog::mtu(ifname).map_err(|e| err("MTU", &e))? as usize;
        let multi_buffer = link_mtu > MAX_SINGLE_CHUNK_MTU;
        let cfg = XskConfig { frame_count: opts.frames, mode: opts.bind, multi_buffer, ..XskConfig::default() };
        let ifindex = uroce_xdp_prog::ifindex(ifname).map_err(|e| err("ifindex", &e))?;
        let mut sockets = Vec::new();
        for (q, of_queue) in slots {
            let (q, slot) = (*q, of_queue[0]);
            let s = XskSocket::new(ifindex, q, &cfg).map_err(|e| {
                let what = format!("AF_XDP socket on queue {q}");
                if matches!(&e, XskError::Os { source, .. } if source.raw_os_error() == Some(libc::EPERM)) {
                    return not_permitted(&what, &e);
                }
                match zero_copy_sg_hint(&e, multi_buffer, link_mtu) {
                    Some(hint) => err(&what, &format!("{e} ({hint})")),
                    None => err(&what, &e),
                }
            })?;
            for &slot in of_queue {
                steering.register(slot, s.as_fd()).map_err(|e| err("register the socket in the XSKMAP", &e))?;
            }
            tracing::info!(
                ifname,
                queue = q,
                slot,
                zero_copy = s.is_zero_copy(),
                xdp_mode = ?steering.attachment().mode(),
                "AF_XDP socket bound"
            );
            sockets.push(s);
        }
        let tx_chunk = sockets.first().map_or(0, |s| s.umem().tx_capacity() as usize);
        let rx_frames = vec![0; sockets.len()];
        Ok(XdpBackend {
            sockets,
            steering: Some(steering),
            share: None,
            ifname: ifname.to_string(),
            scratch: vec![0; MAX_FRAME],
            tx_chunk,
            focus: None,
            rx_frames,
        })
    }

    /// The sockets (one per queue).
    pub fn sockets(&self) -> &[XskSocket] {
        &self.sockets
    }

    /// [`XdpBackend::open`] with [`XdpOptions::shared`]: join the uroce processes on `ifname`
    /// ([`crate::share`], name `xdp/<ifname>`). The first creates what they share — the XDP
    /// program steering by QPN block ([`ProgramConfig::by_block`]) attached through a link,
    /// its XSKMAP, and for every queue a shared UMEM with its anchor socket
    /// ([`crate::xsk::create_shared_queue`]) — and every process then binds a socket of its
    /// own to each queue's UMEM and registers it at slot `queue * 256 + block`. The broker
    /// holds the link, map and anchors; they go with the last process.
    pub fn open_shared(ifname: &str, opts: &XdpOptions) -> io::Result<XdpBackend> {
        use crate::xsk::{create_shared_queue, Geometry, MAX_XDP_TENANTS};
        use std::os::fd::AsFd;
        let err = |what: &str, e: &dyn std::fmt::Display| io::Error::other(format!("{ifname}: {what}: {e}"));
        let link_mtu = uroce_xdp_prog::mtu(ifname).map_err(|e| err("MTU", &e))? as usize;
        let multi_buffer = link_mtu > MAX_SINGLE_CHUNK_MTU;
        let cfg = XskConfig { frame_count: opts.frames, mode: opts.bind, multi_buffer, ..XskConfig::default() };
        let geom =
            Geometry { chunk: cfg.chunk_size, headroom: cfg.headroom, tx_frames: cfg.frame_count - cfg.rx_frames };
        let ifindex = uroce_xdp_prog::ifindex(ifname).map_err(|e| err("ifindex", &e))?;
        let queues = rx_queues(ifname);
        let tenancy = crate::share::join(&format!("xdp/{ifname}"), || {
            let pcfg = ProgramConfig { frags: multi_buffer, by_block: true, ..Default::default() };
            let st = XdpSteering::install(ifname, &pcfg, opts.attach).map_err(|e| err("attach the XDP program", &e))?;
            if st.program().queues() < queues {
                return Err(err("XSKMAP", &"fewer slots than queues"));
            }
            let services = st.program().services().ok_or_else(|| err("XDP program", &"no listeners' map"))?;
            let mut fds = vec![
                st.program().xsk_map().as_fd().try_clone_to_owned()?,
                st.attachment().link_fd().try_clone_to_owned()?,
                services.as_fd().try_clone_to_owned()?,
            ];
            for q in 0..queues {
                let (memfd, anchor) = create_shared_queue(ifindex, q, &cfg, geom)
                    .map_err(|e| err(&format!("shared UMEM of queue {q}"), &e))?;
                fds.extend([memfd, anchor]);
            }
            tracing::info!(ifname, queues, mode = ?st.attachment().mode(), "XDP program for several processes attached");
            Ok(fds)
        })?;
        let block = u32::from(tenancy.block);
        if block > MAX_XDP_TENANTS || tenancy.fds.len() != SHARED_FDS + 2 * queues as usize {
            return Err(err(
                "sharing",
                &format!("at most {MAX_XDP_TENANTS} processes share an interface's AF_XDP queues"),
            ));
        }
        let map = uroce_xdp_prog::XskMap::from_fd(tenancy.fds[0].try_clone()?, queues * uroce_xdp_prog::BLOCK_SLOTS);
        let services = uroce_xdp_prog::ServiceMap::from_fd(tenancy.fds[2].try_clone()?);
        let mut sockets = Vec::new();
        for q in 0..queues {
            let at = SHARED_FDS + 2 * q as usize;
            let (memfd, anchor) = (&tenancy.fds[at], &tenancy.fds[at + 1]);
            let s = XskSocket::join_shared(ifindex, q, &cfg, geom, memfd.as_fd(), anchor.as_fd(), block - 1)
                .map_err(|e| err(&format!("AF_XDP socket on queue {q}"), &e))?;
            map.insert(q * uroce_xdp_prog::BLOCK_SLOTS + block, s.as_fd())
                .map_err(|e| err("register the socket in the XSKMAP", &e))?;
            sockets.push(s);
        }
        tracing::info!(
            ifname,
            queues,
            block,
            "AF_XDP sockets bound, sharing the interface: this process owns QPNs {block:#04x}xxxx"
        );
        let tx_chunk = sockets.first().map_or(0, |s| s.umem().tx_capacity() as usize);
        let rx_frames = vec![0; sockets.len()];
        Ok(XdpBackend {
            sockets,
            steering: None,
            share: Some(Shared { _map: map, services, tenancy }),
            ifname: ifname.to_string(),
            scratch: vec![0; MAX_FRAME],
            tx_chunk,
            focus: None,
            rx_frames,
        })
    }
}

/// What a process sharing the interface holds of what the processes share.
struct Shared {
    /// The XSKMAP its sockets are registered in (held while they are).
    _map: uroce_xdp_prog::XskMap,
    /// The CM listeners' map the program steers REQs by.
    services: uroce_xdp_prog::ServiceMap,
    tenancy: crate::share::Tenancy,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared").field("block", &self.tenancy.block).finish_non_exhaustive()
    }
}

impl Backend for XdpBackend {
    fn describe(&self) -> String {
        let zc = self.sockets.iter().all(|s| s.is_zero_copy());
        format!(
            "af_xdp on {} ({} queue{}, {} mode, {} XDP)",
            self.ifname,
            self.sockets.len(),
            if self.sockets.len() == 1 { "" } else { "s" },
            if zc { "zero-copy" } else { "copy" },
            match (&self.steering, &self.share) {
                (Some(st), _) => format!("{:?}", st.attachment().mode()),
                (None, Some(s)) => format!("shared, QPN block {:#04x}", s.tenancy.block),
                (None, None) => "no".to_string(),
            }
        )
    }

    fn recv(&mut self, max: usize, f: &mut dyn FnMut(&[u8])) -> io::Result<usize> {
        let mut n = 0;
        let focus = self.focus;
        for (q, s) in self.sockets.iter_mut().enumerate() {
            if focus.is_some_and(|f| f != q) {
                continue;
            }
            let before = n;
            let batch = s.recv(max.saturating_sub(n));
            for p in batch.iter() {
                match p.data() {
                    Some(frame) => f(frame),
                    None => {
                        // Multi-buffer frame: stage the segments contiguously.
                        let mut len = 0;
                        for seg in p.segments() {
                            let end = (len + seg.len()).min(self.scratch.len());
                            self.scratch[len..end].copy_from_slice(&seg[..end - len]);
                            len = end;
                        }
                        f(&self.scratch[..len]);
                    }
                }
                n += 1;
            }
            self.rx_frames[q] += (n - before) as u64;
        }
        Ok(n)
    }

    fn send_with(&mut self, build: &mut dyn FnMut(&mut [u8]) -> Option<usize>) -> io::Result<bool> {
        let qn = self.sockets.len();
        if qn == 0 {
            return Err(io::Error::other("no AF_XDP socket"));
        }
        // One transmit socket (the focused queue's, else the first): spreading the frames of
        // one port over several TX queues reorders a QP's packets wherever the receiving side
        // takes queues in turn (veth hands TX queue q to RX queue q), and every reordering is a
        // PSN sequence NAK and a Go-Back-N retry. A port is driven by one thread at a time, so
        // more TX queues would not send faster.
        let i = self.focus.filter(|&q| q < qn).unwrap_or(0);
        let s = &mut self.sockets[i];
        let Some(mut frame) = s.tx_alloc() else {
            return Err(io::ErrorKind::WouldBlock.into());
        };
        if self.tx_chunk >= MAX_FRAME || !s.is_multi_buffer() {
            let buf = s.tx_buf(&frame);
            let Some(n) = build(buf) else {
                s.tx_free(frame);
                return Ok(false);
            };
            frame.set_len(n);
            if let Err(f) = s.tx_enqueue(frame) {
                s.tx_free(f);
                return Err(io::ErrorKind::WouldBlock.into());
            }
            return Ok(true);
        }
        // Multi-buffer capable: build into scratch, then chain as many frames as needed.
        let Some(n) = build(&mut self.scratch) else {
            s.tx_free(frame);
            return Ok(false);
        };
        let mut chain = Vec::with_capacity(n.div_ceil(self.tx_chunk));
        let mut off = 0;
        loop {
            let take = (n - off).min(self.tx_chunk);
            s.tx_buf(&frame)[..take].copy_from_slice(&self.scratch[off..off + take]);
            frame.set_len(take);
            chain.push(frame);
            off += take;
            if off == n {
                break;
            }
            match s.tx_alloc() {
                Some(f) => frame = f,
                None => {
                    for f in chain {
                        s.tx_free(f);
                    }
                    return Err(io::ErrorKind::WouldBlock.into());
                }
            }
        }
        if !s.tx_enqueue_chain(&mut chain) {
            for f in chain {
                s.tx_free(f);
            }
            return Err(io::ErrorKind::WouldBlock.into());
        }
        Ok(true)
    }

    fn flush(&mut self) -> io::Result<()> {
        let focus = self.focus;
        for (q, s) in self.sockets.iter_mut().enumerate() {
            if focus.is_some_and(|f| f != q) {
                continue;
            }
            s.tx_flush().map_err(xsk_io_error)?;
            s.reclaim_after_kick();
        }
        Ok(())
    }

    fn wait(&mut self, timeout: Duration) -> io::Result<()> {
        match self.sockets.get(self.focus.unwrap_or(0)) {
            Some(s) => s.wait_rx(Some(timeout)).map(|_| ()).map_err(xsk_io_error),
            None => {
                std::thread::sleep(timeout);
                Ok(())
            }
        }
    }

    fn raw_fd(&self) -> Option<std::os::fd::RawFd> {
        use std::os::fd::AsRawFd;
        (self.sockets.len() == 1).then(|| self.sockets[0].as_fd().as_raw_fd())
    }

    fn queues(&self) -> usize {
        self.sockets.len()
    }

    fn focus_queue(&mut self, q: Option<usize>) {
        self.focus = q.filter(|&q| q < self.sockets.len());
    }

    fn queue_fd(&self, q: usize) -> Option<std::os::fd::RawFd> {
        use std::os::fd::AsRawFd;
        self.sockets.get(q).map(|s| s.as_fd().as_raw_fd())
    }

    fn queue_rx_frames(&self) -> Vec<u64> {
        self.rx_frames.clone()
    }

    fn qpn_block(&self) -> Option<u8> {
        self.share.as_ref().map(|s| s.tenancy.block)
    }

    fn cm_services(&self) -> Option<(&uroce_xdp_prog::ServiceMap, u8)> {
        self.share.as_ref().map(|s| (&s.services, s.tenancy.block))
    }
}

/// The fds every sharing process gets before its queues' (memfd, anchor) pairs: the XSKMAP,
/// the program's link, the CM listeners' map.
const SHARED_FDS: usize = 3;

/// Receive queues of `ifname` (at least 1).
fn rx_queues(ifname: &str) -> u32 {
    uroce_xdp_prog::channels(ifname).map(|c| c.rx_queues()).unwrap_or(1).max(1)
}

/// Why a zero-copy bind with `XDP_USE_SG` was refused, when that is the likely reason: the
/// kernel answers EOPNOTSUPP when the driver cannot take multi-buffer packets in zero-copy
/// mode (`xdp_zc_max_segs` = 1; e.g. virtio_net in 6.17), and uroce asks for multi-buffer
/// whenever the link MTU lets frames outgrow one UMEM chunk.
fn zero_copy_sg_hint(e: &XskError, multi_buffer: bool, link_mtu: usize) -> Option<String> {
    let XskError::Bind { zero_copy: Some(zc), copy: None } = e else { return None };
    (multi_buffer && zc.raw_os_error() == Some(libc::EOPNOTSUPP)).then(|| {
        format!(
            "link MTU {link_mtu} needs multi-buffer AF_XDP (frames above one 4 KiB chunk), which this \
             driver does not support in zero-copy mode; use a link MTU of at most {MAX_SINGLE_CHUNK_MTU} \
             for zero-copy, or copy mode"
        )
    })
}

/// An socket-layer error as `io::Error`, keeping the OS error's kind (so callers can tell a
/// link that went down, `NetworkDown`, from a real failure) and the step in the message.
fn xsk_io_error(e: XskError) -> io::Error {
    let kind = match &e {
        XskError::Os { source, .. } => match source.raw_os_error() {
            Some(libc::ENETDOWN) | Some(libc::ENXIO) | Some(libc::ENODEV) => io::ErrorKind::NetworkDown,
            _ => source.kind(),
        },
        _ => io::ErrorKind::Other,
    };
    io::Error::new(kind, e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_copy_multi_buffer_refusal_is_explained() {
        let refused = || XskError::Bind { zero_copy: Some(io::Error::from_raw_os_error(libc::EOPNOTSUPP)), copy: None };
        let hint = zero_copy_sg_hint(&refused(), true, 9000).expect("hint");
        assert!(hint.contains("link MTU 9000") && hint.contains(&MAX_SINGLE_CHUNK_MTU.to_string()), "{hint}");
        // Not for single-buffer sockets, other errnos, or a failed copy-mode fallback.
        assert!(zero_copy_sg_hint(&refused(), false, 1500).is_none());
        let einval = XskError::Bind { zero_copy: Some(io::Error::from_raw_os_error(libc::EINVAL)), copy: None };
        assert!(zero_copy_sg_hint(&einval, true, 9000).is_none());
        let both = XskError::Bind {
            zero_copy: Some(io::Error::from_raw_os_error(libc::EOPNOTSUPP)),
            copy: Some(io::Error::from_raw_os_error(libc::EINVAL)),
        };
        assert!(zero_copy_sg_hint(&both, true, 9000).is_none());
        assert_eq!(MAX_SINGLE_CHUNK_MTU, 3822);
    }
}
