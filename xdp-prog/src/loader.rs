//! Loading, attaching and driving the XDP program over raw `bpf(2)`.
//!
//! Ownership model: [`XskMap`] owns the map fd, [`XdpProgram`] owns the program fd (and its
//! map), [`Attachment`] owns the bpf link fd. Closing the link fd detaches the program, so
//! dropping an `Attachment` — or the process dying — removes the program from the
//! interface; nothing is left behind on the interface. The kernel keeps the program and
//! map alive for as long as the link exists, so an `Attachment` may outlive its
//! `XdpProgram` value (the XSKMAP then cannot be updated any more, though).

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};

use crate::asm::Insn;
use crate::error::{Error, Step};
use crate::program::{assemble, ProgramConfig, XdpAction};
use crate::sys::{self, *};

const LICENSE: &[u8] = b"GPL\0";
/// Size of the verifier log buffer used when a load fails (the kernel caps at 16 MiB).
const VERIFIER_LOG_SIZE: usize = 1 << 20;

impl Error {
    /// True when the kernel refused for lack of privileges (`EPERM`): creating the XSKMAP and
    /// loading the program need `CAP_BPF` and `CAP_NET_ADMIN` (or root), and so does attaching it
    /// to an interface. A caller turns this into "run as root, or without AF_XDP" rather than
    /// `MapCreate failed: Operation not permitted`.
    pub fn is_permission_denied(&self) -> bool {
        match self {
            Error::Attach { native, generic, .. } => [native, generic].iter().any(|e| **e == Some(libc::EPERM)),
            Error::Syscall { errno, .. } | Error::Verifier { errno, .. } => *errno == libc::EPERM,
            Error::NoSuchInterface { .. } | Error::InvalidArgument(_) => false,
        }
    }
}

/// An `XSKMAP`: slot `q` holds the AF_XDP socket for RX queue `q` (one shard), or slot
/// `q * shards + s` the socket of shard `s` on RX queue `q` ([`ProgramConfig::slot`]).
#[derive(Debug)]
pub struct XskMap {
    fd: OwnedFd,
    max_entries: u32,
}

impl XskMap {
    /// Create an XSKMAP with `max_entries` slots (one per RX queue and shard).
    pub fn create(name: &str, max_entries: u32) -> Result<Self, Error> {
        if max_entries == 0 {
            return Err(Error::InvalidArgument("XSKMAP needs at least one entry"));
        }
        let mut attr = MapCreateAttr {
            map_type: BPF_MAP_TYPE_XSKMAP,
            key_size: 4,
            value_size: 4,
            max_entries,
            map_name: sys::obj_name(name),
            ..Default::default()
        };
        // SAFETY: MapCreateAttr is the BPF_MAP_CREATE layout and holds no pointers.
        let fd = unsafe { bpf_fd(BPF_MAP_CREATE, &mut attr) }
            .map_err(|errno| Error::Syscall { step: Step::MapCreate, errno })?;
        Ok(XskMap { fd, max_entries })
    }

    /// An XSKMAP another process created (its fd received over a Unix socket), of
    /// `max_entries` slots.
    pub fn from_fd(fd: OwnedFd, max_entries: u32) -> Self {
        XskMap { fd, max_entries }
    }

    /// Number of slots.
    pub fn max_entries(&self) -> u32 {
        self.max_entries
    }

    /// Put the AF_XDP socket `xsk_fd` into `slot`. The socket should already be bound to the
    /// RX queue whose slot this is: it only receives frames from that queue, and frames
    /// redirected to it from another queue are dropped by the kernel.
    pub fn insert(&self, slot: u32, xsk_fd: BorrowedFd<'_>) -> Result<(), Error> {
        if slot >= self.max_entries {
            return Err(Error::InvalidArgument("slot >= XSKMAP max_entries"));
        }
        map_update(self.fd.as_fd(), &slot, &(xsk_fd.as_raw_fd() as u32))
    }

    /// Empty `slot`. Removing an already empty slot is not an error.
    pub fn remove(&self, slot: u32) -> Result<(), Error> {
        if slot >= self.max_entries {
            return Err(Error::InvalidArgument("slot >= XSKMAP max_entries"));
        }
        let key = slot;
        let mut attr =
            MapElemAttr { map_fd: self.fd.as_raw_fd() as u32, key: &key as *const u32 as u64, ..Default::default() };
        // SAFETY: MapElemAttr is the BPF_MAP_DELETE_ELEM layout; `key` is a live 4-byte
        // local for the whole call.
        match unsafe { bpf(BPF_MAP_DELETE_ELEM, &mut attr) } {
            Ok(_) => Ok(()),
            Err(libc::ENOENT) => Ok(()),
            Err(errno) => Err(Error::Syscall { step: Step::MapDelete, errno }),
        }
    }
}

impl AsFd for XskMap {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// How to attach.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttachMode {
    /// Native (driver) mode first; fall back to generic if the driver refuses.
    Auto,
    /// Native (driver) XDP only (`XDP_FLAGS_DRV_MODE`).
    Native,
    /// Generic (skb) XDP only (`XDP_FLAGS_SKB_MODE`). On veth this is as fast as native.
    Generic,
}

/// The mode an attachment ended up in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttachedMode {
    /// Driver mode.
    Native,
    /// Generic (skb) mode.
    Generic,
}

/// The program attached to an interface through a bpf link. Dropping it detaches.
#[derive(Debug)]
pub struct Attachment {
    link: OwnedFd,
    ifindex: u32,
    mode: AttachedMode,
}

impl Attachment {
    /// Interface index the program is attached to.
    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }
    /// Native or generic.
    pub fn mode(&self) -> AttachedMode {
        self.mode
    }
    /// The link fd (closing it detaches).
    pub fn link_fd(&self) -> BorrowedFd<'_> {
        self.link.as_fd()
    }
}

impl Drop for Attachment {
    fn drop(&mut self) {
        tracing::debug!(ifindex = self.ifindex, mode = ?self.mode, "detaching XDP program (closing bpf link)");
    }
}

/// Result of one `BPF_PROG_TEST_RUN`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TestRun {
    /// The program's return value.
    pub retval: u32,
    /// Average run time in nanoseconds, as reported by the kernel.
    pub duration_ns: u32,
}

impl TestRun {
    /// The return value as an XDP verdict.
    pub fn action(&self) -> Option<XdpAction> {
        XdpAction::from_u32(self.retval)
    }
}

/// A loaded (verified) XDP program and its XSKMAP.
#[derive(Debug)]
pub struct XdpProgram {
    prog: OwnedFd,
    map: XskMap,
    /// With [`ProgramConfig::by_block`]: the CM listeners the program steers REQs by.
    services: Option<crate::ServiceMap>,
    config: ProgramConfig,
}

impl XdpProgram {
    /// Create an XSKMAP with `queues * config.shards` slots (one per RX queue and shard),
    /// assemble the program for `config` and load it through the verifier. `config.shards`
    /// must be in 1..=[`crate::MAX_SHARDS`].
    pub fn load(config: &ProgramConfig, queues: u32) -> Result<Self, Error> {
        if !config.shards_valid() {
            return Err(Error::InvalidArgument("ProgramConfig::shards must be in 1..=64 (1 with by_block)"));
        }
        let entries = queues
            .checked_mul(config.slots_per_queue())
            .ok_or(Error::InvalidArgument("queues * slots per queue overflows u32"))?;
        let map = XskMap::create("uroce_xsks", entries)?;
        let services = if config.by_block { Some(crate::ServiceMap::create()?) } else { None };
        let prog = assemble(config, map.fd.as_raw_fd(), services.as_ref().map_or(0, |m| m.as_fd().as_raw_fd()));
        let fd = load_insns(&prog.insns, "uroce_xdp", config.frags)?;
        tracing::debug!(
            insns = prog.insns.len(),
            queues,
            shards = config.shards,
            port = config.udp_port,
            fallback = ?config.fallback,
            frags = config.frags,
            "XDP program loaded"
        );
        Ok(XdpProgram { prog: fd, map, services, config: *config })
    }

    /// The XSKMAP the program redirects into.
    pub fn xsk_map(&self) -> &XskMap {
        &self.map
    }

    /// The CM listeners' map ([`ProgramConfig::by_block`] only): REQs for a service listed
    /// there go to its listener's block.
    pub fn services(&self) -> Option<&crate::ServiceMap> {
        self.services.as_ref()
    }

    /// The configuration it was built from.
    pub fn config(&self) -> &ProgramConfig {
        &self.config
    }

    /// Number of RX queues the XSKMAP has slots for (its size divided by the shard count).
    pub fn queues(&self) -> u32 {
        self.map.max_entries() / self.config.slots_per_queue()
    }

    /// The XSKMAP slot for shard `shard`'s socket on RX queue `queue`: `queue * shards +
    /// shard` ([`ProgramConfig::slot`]), checked against the shard count and the map size.
    pub fn slot(&self, queue: u32, shard: u32) -> Result<u32, Error> {
        if shard >= self.config.slots_per_queue() {
            return Err(Error::InvalidArgument("shard >= the slots per queue"));
        }
        if queue >= self.queues() {
            return Err(Error::InvalidArgument("queue >= the XSKMAP's queue count"));
        }
        Ok(self.config.slot(queue, shard))
    }

    /// The program fd.
    pub fn prog_fd(&self) -> BorrowedFd<'_> {
        self.prog.as_fd()
    }

    /// Attach to `ifindex` through `BPF_LINK_CREATE`. With [`AttachMode::Auto`], native
    /// mode is tried first and generic mode on any failure (logged).
    pub fn attach(&self, ifindex: u32, mode: AttachMode) -> Result<Attachment, Error> {
        let try_mode = |flags: u32| -> Result<OwnedFd, i32> {
            let mut attr = LinkCreateAttr {
                prog_fd: self.prog.as_raw_fd() as u32,
                target_ifindex: ifindex,
                attach_type: BPF_XDP,
                flags,
            };
            // SAFETY: LinkCreateAttr is the BPF_LINK_CREATE layout and holds no pointers;
            // success returns a new link fd.
            unsafe { bpf_fd(BPF_LINK_CREATE, &mut attr) }
        };
        let mut native_err = None;
        if matches!(mode, AttachMode::Auto | AttachMode::Native) {
            match try_mode(XDP_FLAGS_DRV_MODE) {
                Ok(link) => {
                    tracing::info!(ifindex, "XDP program attached in native (driver) mode");
                    return Ok(Attachment { link, ifindex, mode: AttachedMode::Native });
                }
                Err(errno) => {
                    native_err = Some(errno);
                    if mode == AttachMode::Auto {
                        tracing::warn!(
                            ifindex,
                            error = %std::io::Error::from_raw_os_error(errno),
                            "native XDP attach failed; falling back to generic (skb) mode"
                        );
                    }
                }
            }
        }
        if mode == AttachMode::Native {
            return Err(Error::Attach { ifindex, native: native_err, generic: None });
        }
        match try_mode(XDP_FLAGS_SKB_MODE) {
            Ok(link) => {
                tracing::info!(ifindex, "XDP program attached in generic (skb) mode");
                Ok(Attachment { link, ifindex, mode: AttachedMode::Generic })
            }
            Err(errno) => Err(Error::Attach { ifindex, native: native_err, generic: Some(errno) }),
        }
    }

    /// Run the program once on `frame` with `BPF_PROG_TEST_RUN` (rx_queue_index 0, no
    /// interface). The kernel refuses frames shorter than an Ethernet header (14 bytes)
    /// with `EINVAL`.
    pub fn test_run(&self, frame: &[u8]) -> Result<TestRun, Error> {
        test_run_fd(self.prog.as_fd(), frame, 1)
    }

    /// Run the program once on `frame` as if received on RX queue `queue` of interface
    /// `ifindex` (in the calling thread's network namespace). The kernel requires `queue`
    /// to be below the interface's real RX queue count (`EINVAL` otherwise).
    pub fn test_run_on_queue(&self, frame: &[u8], ifindex: u32, queue: u32) -> Result<TestRun, Error> {
        let size = u32::try_from(frame.len()).map_err(|_| Error::InvalidArgument("frame too big"))?;
        let ctx = XdpMd {
            data: 0,
            data_end: size,
            data_meta: 0,
            ingress_ifindex: ifindex,
            rx_queue_index: queue,
            egress_ifindex: 0,
        };
        test_run_raw(self.prog.as_fd(), frame, 1, Some(&ctx))
    }
}

/// `struct xdp_md`, the context passed in by `BPF_PROG_TEST_RUN`'s `ctx_in`.
#[repr(C)]
struct XdpMd {
    data: u32,
    data_end: u32,
    data_meta: u32,
    ingress_ifindex: u32,
    rx_queue_index: u32,
    egress_ifindex: u32,
}

/// Run the program `prog` `repeat` times on `frame`.
pub fn test_run_fd(prog: BorrowedFd<'_>, frame: &[u8], repeat: u32) -> Result<TestRun, Error> {
    test_run_raw(prog, frame, repeat, None)
}

fn test_run_raw(prog: BorrowedFd<'_>, frame: &[u8], repeat: u32, ctx: Option<&XdpMd>) -> Result<TestRun, Error> {
    let size = u32::try_from(frame.len()).map_err(|_| Error::InvalidArgument("frame too big"))?;
    let mut attr = TestRunAttr {
        prog_fd: prog.as_raw_fd() as u32,
        data_size_in: size,
        data_in: frame.as_ptr() as u64,
        repeat,
        ..Default::default()
    };
    if let Some(ctx) = ctx {
        attr.ctx_size_in = std::mem::size_of::<XdpMd>() as u32;
        attr.ctx_in = ctx as *const XdpMd as u64;
    }
    // SAFETY: TestRunAttr is the BPF_PROG_TEST_RUN layout; `data_in` points at `frame`,
    // valid for `data_size_in` bytes during the call, and `ctx_in` (if set) at a live
    // `XdpMd` of `ctx_size_in` bytes, both only read; data_out/ctx_out are null, so the
    // kernel writes only into `attr`.
    unsafe { bpf(BPF_PROG_TEST_RUN, &mut attr) }.map_err(|errno| Error::Syscall { step: Step::TestRun, errno })?;
    Ok(TestRun { retval: attr.retval, duration_ns: attr.duration })
}

/// `BPF_MAP_UPDATE_ELEM` (`BPF_ANY`) of `key` → `value` in `map`, whose key and value sizes
/// are those of `K` and `V`.
pub(crate) fn map_update<K: Copy, V: Copy>(map: BorrowedFd<'_>, key: &K, value: &V) -> Result<(), Error> {
    map_update_flags(map, key, value, BPF_ANY)
}

/// [`map_update`] with `flags` (`BPF_ANY`, `BPF_NOEXIST`: `EEXIST` if the key is there).
pub(crate) fn map_update_flags<K: Copy, V: Copy>(
    map: BorrowedFd<'_>,
    key: &K,
    value: &V,
    flags: u64,
) -> Result<(), Error> {
    let mut attr = MapElemAttr {
        map_fd: map.as_raw_fd() as u32,
        key: key as *const K as u64,
        value: value as *const V as u64,
        flags,
        ..Default::default()
    };
    // SAFETY: MapElemAttr is the BPF_MAP_UPDATE_ELEM layout; `key` and `value` are live for
    // the whole call and, as the callers' maps are made, of the map's key and value sizes
    // (the kernel reads exactly key_size and value_size bytes).
    unsafe { bpf(BPF_MAP_UPDATE_ELEM, &mut attr) }.map_err(|errno| Error::Syscall { step: Step::MapUpdate, errno })?;
    Ok(())
}

/// `BPF_MAP_LOOKUP_ELEM` of `key` in `map`, whose key and value sizes are those of `K` and `V`:
/// `None` if absent.
pub(crate) fn map_lookup<K: Copy, V: Copy + Default>(map: BorrowedFd<'_>, key: &K) -> Result<Option<V>, Error> {
    let mut value = V::default();
    let mut attr = MapElemAttr {
        map_fd: map.as_raw_fd() as u32,
        key: key as *const K as u64,
        value: &mut value as *mut V as u64,
        ..Default::default()
    };
    // SAFETY: MapElemAttr is the BPF_MAP_LOOKUP_ELEM layout; `key` and `value` are live for the
    // whole call and of the map's key and value sizes (the kernel writes value_size bytes).
    match unsafe { bpf(BPF_MAP_LOOKUP_ELEM, &mut attr) } {
        Ok(_) => Ok(Some(value)),
        Err(libc::ENOENT) => Ok(None),
        Err(errno) => Err(Error::Syscall { step: Step::MapLookup, errno }),
    }
}

/// `BPF_MAP_DELETE_ELEM` of `key` (of the map's key size) from `map`; an absent key is not an
/// error.
pub(crate) fn map_delete<K: Copy>(map: BorrowedFd<'_>, key: &K) -> Result<(), Error> {
    let mut attr = MapElemAttr { map_fd: map.as_raw_fd() as u32, key: key as *const K as u64, ..Default::default() };
    // SAFETY: MapElemAttr is the BPF_MAP_DELETE_ELEM layout; `key` is live for the whole call
    // and of the map's key size.
    match unsafe { bpf(BPF_MAP_DELETE_ELEM, &mut attr) } {
        Ok(_) | Err(libc::ENOENT) => Ok(()),
        Err(errno) => Err(Error::Syscall { step: Step::MapDelete, errno }),
    }
}

/// Load raw instructions as an XDP program (expected_attach_type `BPF_XDP`). On failure
/// the load is repeated with a level-1 verifier log, returned in [`Error::Verifier`].
pub fn load_insns(insns: &[Insn], name: &str, frags: bool) -> Result<OwnedFd, Error> {
    let flags = if frags { BPF_F_XDP_HAS_FRAGS } else { 0 };
    load_prog(insns, name, BPF_PROG_TYPE_XDP, BPF_XDP, flags)
}

/// Load raw instructions as a program of `prog_type` expecting `attach_type`, with the
/// verifier log on a second attempt as in [`load_insns`].
pub(crate) fn load_prog(
    insns: &[Insn],
    name: &str,
    prog_type: u32,
    attach_type: u32,
    prog_flags: u32,
) -> Result<OwnedFd, Error> {
    let insn_cnt = u32::try_from(insns.len()).map_err(|_| Error::InvalidArgument("program too long"))?;
    let attempt = |log: Option<&mut Vec<u8>>| -> Result<OwnedFd, i32> {
        let mut attr = ProgLoadAttr {
            prog_type,
            insn_cnt,
            insns: insns.as_ptr() as u64,
            license: LICENSE.as_ptr() as u64,
            prog_flags,
            prog_name: sys::obj_name(name),
            expected_attach_type: attach_type,
            ..Default::default()
        };
        if let Some(buf) = log {
            attr.log_level = 1;
            attr.log_size = buf.len() as u32;
            attr.log_buf = buf.as_mut_ptr() as u64;
        }
        // SAFETY: ProgLoadAttr is the BPF_PROG_LOAD layout; `insns` (insn_cnt 8-byte
        // `struct bpf_insn`s, `Insn` is repr(C) with that layout), the NUL-terminated
        // license and the log buffer (log_size bytes) all outlive the call.
        unsafe { bpf_fd(BPF_PROG_LOAD, &mut attr) }
    };
    match attempt(None) {
        Ok(fd) => Ok(fd),
        Err(first) => {
            let mut buf = vec![0u8; VERIFIER_LOG_SIZE];
            match attempt(Some(&mut buf)) {
                Ok(fd) => {
                    tracing::warn!(errno = first, "BPF_PROG_LOAD failed once, then succeeded with the verifier log on");
                    Ok(fd)
                }
                Err(errno) => {
                    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
                    let log = String::from_utf8_lossy(&buf[..end]).into_owned();
                    if log.is_empty() {
                        Err(Error::Syscall { step: Step::ProgLoad, errno })
                    } else {
                        Err(Error::Verifier { errno, log })
                    }
                }
            }
        }
    }
}

/// Interface index of `name` in the calling thread's network namespace.
pub fn ifindex(name: &str) -> Result<u32, Error> {
    let cname = std::ffi::CString::new(name).map_err(|_| Error::NoSuchInterface { name: name.to_string() })?;
    // SAFETY: `cname` is a valid NUL-terminated string for the duration of the call.
    let idx = unsafe { libc::if_nametoindex(cname.as_ptr()) };
    if idx == 0 {
        let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
        if errno == libc::ENODEV || errno == 0 {
            return Err(Error::NoSuchInterface { name: name.to_string() });
        }
        return Err(Error::Syscall { step: Step::IfNameToIndex, errno });
    }
    Ok(idx)
}

/// Channel (queue) counts of an interface, from `ETHTOOL_GCHANNELS`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Channels {
    /// Maximum RX-only channels.
    pub max_rx: u32,
    /// Maximum TX-only channels.
    pub max_tx: u32,
    /// Maximum other channels.
    pub max_other: u32,
    /// Maximum combined (RX+TX) channels.
    pub max_combined: u32,
    /// Current RX-only channels.
    pub rx: u32,
    /// Current TX-only channels.
    pub tx: u32,
    /// Current other channels.
    pub other: u32,
    /// Current combined channels.
    pub combined: u32,
}

impl Channels {
    /// Active RX queues (at least 1).
    pub fn rx_queues(&self) -> u32 {
        (self.rx + self.combined).max(1)
    }
    /// Upper bound on RX queues the interface can be configured with (at least 1): size the
    /// XSKMAP with this so a channel change does not need a new map.
    pub fn max_rx_queues(&self) -> u32 {
        (self.max_rx + self.max_combined).max(self.rx_queues())
    }
}

#[repr(C)]
struct EthtoolChannels {
    cmd: u32,
    max_rx: u32,
    max_tx: u32,
    max_other: u32,
    max_combined: u32,
    rx: u32,
    tx: u32,
    other: u32,
    combined: u32,
}

const ETHTOOL_GCHANNELS: u32 = 0x3c;

fn ioctl_socket() -> Result<OwnedFd, Error> {
    // SAFETY: plain socket(2) call with constant arguments.
    let fd: RawFd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(Error::Syscall {
            step: Step::IoctlSocket,
            errno: std::io::Error::last_os_error().raw_os_error().unwrap_or(0),
        });
    }
    // SAFETY: `fd` is a fresh socket owned by nobody else.
    Ok(unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) })
}

fn ifreq_for(name: &str) -> Result<libc::ifreq, Error> {
    let bytes = name.as_bytes();
    if bytes.is_empty() || bytes.len() >= libc::IFNAMSIZ || bytes.contains(&0) {
        return Err(Error::NoSuchInterface { name: name.to_string() });
    }
    // SAFETY: ifreq is plain old data (a name array and a union of PODs/pointers); all-zero
    // is a valid value.
    let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in ifr.ifr_name.iter_mut().zip(bytes) {
        *d = *s as libc::c_char;
    }
    Ok(ifr)
}

/// Queue counts of interface `name` (calling thread's network namespace).
pub fn channels(name: &str) -> Result<Channels, Error> {
    let sock = ioctl_socket()?;
    let mut ifr = ifreq_for(name)?;
    let mut ch = EthtoolChannels {
        cmd: ETHTOOL_GCHANNELS,
        max_rx: 0,
        max_tx: 0,
        max_other: 0,
        max_combined: 0,
        rx: 0,
        tx: 0,
        other: 0,
        combined: 0,
    };
    ifr.ifr_ifru.ifru_data = &mut ch as *mut EthtoolChannels as *mut libc::c_char;
    // SAFETY: SIOCETHTOOL with ETHTOOL_GCHANNELS reads/writes a `struct ethtool_channels`
    // through ifr_data; `ch` has that layout and lives across the call.
    let rc = unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCETHTOOL as _, &mut ifr) };
    if rc < 0 {
        let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
        if errno == libc::ENODEV {
            return Err(Error::NoSuchInterface { name: name.to_string() });
        }
        return Err(Error::Syscall { step: Step::EthtoolChannels, errno });
    }
    Ok(Channels {
        max_rx: ch.max_rx,
        max_tx: ch.max_tx,
        max_other: ch.max_other,
        max_combined: ch.max_combined,
        rx: ch.rx,
        tx: ch.tx,
        other: ch.other,
        combined: ch.combined,
    })
}

/// MTU of interface `name` (calling thread's network namespace).
pub fn mtu(name: &str) -> Result<u32, Error> {
    let sock = ioctl_socket()?;
    let mut ifr = ifreq_for(name)?;
    // SAFETY: SIOCGIFMTU writes an int into the ifreq union, which `ifr` holds.
    let rc = unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFMTU as _, &mut ifr) };
    if rc < 0 {
        let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
        if errno == libc::ENODEV {
            return Err(Error::NoSuchInterface { name: name.to_string() });
        }
        return Err(Error::Syscall { step: Step::InterfaceMtu, errno });
    }
    // SAFETY: after a successful SIOCGIFMTU the union's active member is ifru_mtu.
    Ok(unsafe { ifr.ifr_ifru.ifru_mtu } as u32)
}

/// Largest MTU at which a program without `BPF_F_XDP_HAS_FRAGS` is known to attach in
/// native mode on veth here (3507 worked, 3520 failed with `ERANGE`; see docs/afxdp.md).
/// Above this, load with `frags: true`.
pub const MAX_MTU_WITHOUT_FRAGS: u32 = 3500;

/// Program + attachment in one owner: what the runtime keeps for an interface. Dropping it
/// detaches the program.
#[derive(Debug)]
pub struct XdpSteering {
    // Field order = drop order: detach first, then close program and map.
    attachment: Attachment,
    program: XdpProgram,
}

impl XdpSteering {
    /// Load the production program for interface `ifname` (XSKMAP sized from the
    /// interface's maximum RX queue count, 1 if the driver does not report channels, times
    /// `config.shards`) and attach it. `frags` is forced on when the MTU exceeds [`MAX_MTU_WITHOUT_FRAGS`].
    pub fn install(ifname: &str, config: &ProgramConfig, mode: AttachMode) -> Result<Self, Error> {
        let ifindex = ifindex(ifname)?;
        let queues = match channels(ifname) {
            Ok(ch) => ch.max_rx_queues(),
            Err(e) => {
                tracing::debug!(%e, ifname, "ETHTOOL_GCHANNELS unavailable; assuming 1 queue");
                1
            }
        };
        let mut config = *config;
        if !config.frags && mtu(ifname)? > MAX_MTU_WITHOUT_FRAGS {
            tracing::info!(ifname, "MTU above {MAX_MTU_WITHOUT_FRAGS}: loading with BPF_F_XDP_HAS_FRAGS");
            config.frags = true;
        }
        let program = XdpProgram::load(&config, queues)?;
        let attachment = program.attach(ifindex, mode)?;
        Ok(XdpSteering { attachment, program })
    }

    /// Register an AF_XDP socket in XSKMAP `slot`. With one shard the slot is the RX queue
    /// the socket is bound to; with several, use [`XdpSteering::slot`]`(queue, shard)`.
    pub fn register(&self, slot: u32, xsk_fd: BorrowedFd<'_>) -> Result<(), Error> {
        self.program.xsk_map().insert(slot, xsk_fd)
    }

    /// Unregister the socket in `slot` (its traffic then goes to the fallback action).
    pub fn unregister(&self, slot: u32) -> Result<(), Error> {
        self.program.xsk_map().remove(slot)
    }

    /// The slot of shard `shard`'s socket on RX queue `queue` (see [`XdpProgram::slot`]).
    pub fn slot(&self, queue: u32, shard: u32) -> Result<u32, Error> {
        self.program.slot(queue, shard)
    }

    /// The loaded program.
    pub fn program(&self) -> &XdpProgram {
        &self.program
    }

    /// The attachment.
    pub fn attachment(&self) -> &Attachment {
        &self.attachment
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eperm_is_a_permission_error_and_nothing_else_is() {
        let sys = |errno| Error::Syscall { step: Step::MapCreate, errno };
        assert!(sys(libc::EPERM).is_permission_denied());
        assert!(!sys(libc::EINVAL).is_permission_denied());
        assert!(!sys(libc::EACCES).is_permission_denied(), "EACCES is the verifier's refusal, not privileges");
        let attach = |native, generic| Error::Attach { ifindex: 1, native, generic };
        assert!(attach(Some(libc::EOPNOTSUPP), Some(libc::EPERM)).is_permission_denied());
        assert!(!attach(Some(libc::EOPNOTSUPP), None).is_permission_denied());
        assert!(!Error::NoSuchInterface { name: "x".into() }.is_permission_denied());
    }
}
