//! Devices, contexts and protection domains: what `ibv_devices`, `ibv_devinfo` and the first
//! calls of every verbs program see.
//!
//! A device is an interface: every UP, non-loopback interface with an address, in interface
//! index order, or the ones `UROCE_IFACES=eth0,eth1` names (in that order). Its name is
//! `uroce_<interface>`. Its GID table is the one the engine's port gets
//! (`uroce_io::runtime::connect::gid_table`: rxe's order, index 0 the link-local GID, then the
//! IPv4-mapped addresses, then the other IPv6 ones), all RoCEv2; its node GUID the MAC's EUI-64; its one port ACTIVE, Ethernet, with the path MTU rxe
//! would give the interface's MTU.
//!
//! Every handle a program passes in is looked up in a registry before it is used: a NULL,
//! foreign or already destroyed pointer gets `EINVAL`, never a dereference.

use crate::abi::*;
use crate::{set_errno, Registry};
use core::ffi::{c_char, c_int, c_void, CStr};
use core::ptr::null_mut;
use std::sync::Mutex;
use uroce_io::netif::{self, Interface};
use uroce_transport::verbs::{Gid as EngineGid, Mtu};

/// GID table slots a port reports (`gid_tbl_len`); the ones past the device's addresses are
/// empty, answered as rdma-core answers empty slots.
pub const GID_TABLE_LEN: usize = 16;

/// A device: the `ibv_device` programs hold (first, so the pointers are the same), then what
/// uroce knows about its interface.
#[repr(C)]
pub struct Device {
    /// What the program sees.
    pub ibv: IbvDevice,
    /// `struct verbs_device`'s provider ops pointer right after the `ibv_device` (read by
    /// `mlx5dv_is_supported`): NULL.
    pub provider_ops: usize,
    /// The interface.
    pub iface: Interface,
    /// GID table (at most [`GID_TABLE_LEN`]).
    pub gids: Vec<EngineGid>,
    /// The node GUID's bytes (the MAC's EUI-64).
    pub guid: [u8; 8],
    /// The engine of this device in this process, shared by every context open on it (as
    /// contexts share one HCA): started by the first context that needs it, stopped when the
    /// last one holding it closes ([`crate::datapath`]).
    pub engine: std::sync::Mutex<std::sync::Weak<uroce_io::runtime::Runtime>>,
    /// The async event queues of the contexts open on it, each taking the events of its own
    /// QPs and CQs.
    pub sinks: std::sync::Mutex<Vec<std::sync::Weak<crate::events::AsyncEvents>>>,
    /// Whether its runtime shares the interface with other uroce processes (then QP1, and so
    /// RDMA-CM, is nobody's).
    pub shared: std::sync::atomic::AtomicBool,
}

impl Device {
    fn new(iface: Interface) -> Device {
        // the table the engine's port will have when the device is used (one rule for both)
        let mut gids = uroce_io::runtime::connect::gid_table(iface.mac, &iface.addresses());
        gids.truncate(GID_TABLE_LEN);
        let guid = uroce_transport::formulas::node_guid(iface.mac.0);
        let name = format!("uroce_{}", iface.name);
        let mut ibv = IbvDevice {
            ops: [0; 2],
            node_type: NODE_CA,
            transport_type: TRANSPORT_IB,
            name: [0; SYSFS_NAME_MAX],
            dev_name: [0; SYSFS_NAME_MAX],
            dev_path: [0; SYSFS_PATH_MAX],
            ibdev_path: [0; SYSFS_PATH_MAX],
        };
        copy_c(&mut ibv.name, &name);
        copy_c(&mut ibv.dev_name, &name);
        copy_c(&mut ibv.dev_path, &format!("/sys/class/net/{}", iface.name));
        copy_c(&mut ibv.ibdev_path, &format!("/sys/class/net/{}", iface.name));
        Device {
            ibv,
            provider_ops: 0,
            iface,
            gids,
            guid,
            engine: Default::default(),
            sinks: Default::default(),
            shared: Default::default(),
        }
    }

    /// The device's name.
    pub fn name(&self) -> String {
        // SAFETY: `copy_c` always leaves a NUL inside the array.
        unsafe { CStr::from_ptr(self.ibv.name.as_ptr()) }.to_string_lossy().into_owned()
    }

    /// The port's path MTU (rxe's rule for the interface's MTU).
    pub fn active_mtu(&self) -> Mtu {
        Mtu::for_link_mtu(self.iface.mtu as usize)
    }
}

/// Copy `s` into a C string array, truncated so a NUL always fits.
fn copy_c(dst: &mut [c_char], s: &str) {
    let n = s.len().min(dst.len() - 1);
    for (d, b) in dst.iter_mut().zip(s.bytes().take(n)) {
        *d = b as c_char;
    }
    dst[n] = 0;
}

/// Every device found so far. A device lives as long as the process (programs keep
/// `ibv_device` pointers after `ibv_free_device_list` while a context is open), so each is
/// leaked once; a later list reuses it while its interface is unchanged.
static DEVICES: Mutex<Vec<&'static Device>> = Mutex::new(Vec::new());

/// The interfaces that are devices now.
fn discover() -> Vec<Interface> {
    let names: Vec<String> = match std::env::var("UROCE_IFACES") {
        Ok(v) if !v.trim().is_empty() => v.split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect(),
        _ => netif::up_interfaces().unwrap_or_default(),
    };
    names.iter().filter_map(|n| Interface::by_name(n).ok()).collect()
}

/// The current devices, found afresh.
pub fn devices() -> Vec<&'static Device> {
    let found = discover();
    let mut known = DEVICES.lock().unwrap_or_else(|p| p.into_inner());
    found
        .into_iter()
        .map(|iface| match known.iter().find(|d| d.iface == iface) {
            Some(d) => *d,
            None => {
                let d: &'static Device = Box::leak(Box::new(Device::new(iface)));
                known.push(d);
                d
            }
        })
        .collect()
}

/// The device behind `p`, if `p` is one of ours.
pub fn device(p: *const IbvDevice) -> Option<&'static Device> {
    let known = DEVICES.lock().unwrap_or_else(|p| p.into_inner());
    known.iter().copied().find(|d| core::ptr::eq(&d.ibv, p))
}

/// An open device: the `verbs_context` (its `ibv_context` is what programs hold), then ours.
#[repr(C)]
pub struct Context {
    /// What the program sees.
    pub vctx: VerbsContext,
    /// The device.
    pub dev: &'static Device,
    /// The device's engine and its progress threads, shared with the device's other contexts;
    /// taken on first use ([`crate::datapath`]).
    pub runtime: std::sync::OnceLock<Result<std::sync::Arc<uroce_io::runtime::Runtime>, c_int>>,
    /// Its asynchronous events (`async_fd`), fed by the runtime ([`crate::events`]).
    pub events: std::sync::Arc<crate::events::AsyncEvents>,
}

/// Open contexts, by the address of their `ibv_context`.
pub static CONTEXTS: Registry<Context> = Registry::new();
/// Live protection domains, by address.
pub static PDS: Registry<crate::datapath::Pd> = Registry::new();

/// The context behind `ctx`, if it is an open one of ours.
pub fn context<'a>(ctx: *mut IbvContext) -> Option<&'a Context> {
    CONTEXTS.get(ctx.cast())
}

/// `ibv_get_device_list(3)`: a NULL-terminated array, freed with `ibv_free_device_list`.
#[no_mangle]
pub unsafe extern "C" fn ibv_get_device_list(num_devices: *mut c_int) -> *mut *mut IbvDevice {
    let devs = devices();
    // calloc: ibv_free_device_list frees it with free()
    // SAFETY: a plain allocation of n + 1 pointers.
    let list = unsafe { libc::calloc(devs.len() + 1, core::mem::size_of::<*mut IbvDevice>()) }.cast::<*mut IbvDevice>();
    if list.is_null() {
        set_errno(libc::ENOMEM);
        return null_mut();
    }
    for (i, d) in devs.iter().enumerate() {
        // SAFETY: `list` has room for devs.len() + 1 pointers; the last stays NULL.
        unsafe { *list.add(i) = (&d.ibv as *const IbvDevice).cast_mut() };
    }
    if !num_devices.is_null() {
        // SAFETY: the caller passes a valid int pointer or NULL.
        unsafe { *num_devices = devs.len() as c_int };
    }
    list
}

/// `ibv_free_device_list(3)`.
#[no_mangle]
pub unsafe extern "C" fn ibv_free_device_list(list: *mut *mut IbvDevice) {
    // SAFETY: `list` came from ibv_get_device_list's calloc (or is NULL: free ignores it).
    unsafe { libc::free(list.cast()) }
}

/// `ibv_get_device_name(3)`.
#[no_mangle]
pub unsafe extern "C" fn ibv_get_device_name(dev: *mut IbvDevice) -> *const c_char {
    match device(dev) {
        Some(d) => d.ibv.name.as_ptr(),
        None => {
            set_errno(libc::EINVAL);
            core::ptr::null()
        }
    }
}

/// `ibv_get_device_guid(3)`: the node GUID in network byte order.
#[no_mangle]
pub unsafe extern "C" fn ibv_get_device_guid(dev: *mut IbvDevice) -> u64 {
    device(dev).map_or(0, |d| u64::from_ne_bytes(d.guid))
}

/// `ibv_get_device_index(3)`: the interface's index.
#[no_mangle]
pub unsafe extern "C" fn ibv_get_device_index(dev: *mut IbvDevice) -> c_int {
    device(dev).map_or(-1, |d| d.iface.index as c_int)
}

/// `ibv_open_device(3)`.
#[no_mangle]
pub unsafe extern "C" fn ibv_open_device(dev: *mut IbvDevice) -> *mut IbvContext {
    let Some(d) = device(dev) else {
        set_errno(libc::EINVAL);
        return null_mut();
    };
    let Ok(events) = crate::events::AsyncEvents::new() else { return null_mut() };
    {
        let mut sinks = d.sinks.lock().unwrap_or_else(|p| p.into_inner());
        sinks.retain(|w| w.strong_count() > 0);
        sinks.push(std::sync::Arc::downgrade(&events));
    }
    // SAFETY: every field is an integer, a nullable pointer, an Option of a function pointer
    // or a pthread mutex (initialised below): all-zero is valid for each.
    let mut vctx: VerbsContext = unsafe { core::mem::zeroed() };
    vctx.query_port = Some(query_port_op);
    vctx.query_device_ex = Some(query_device_ex_op);
    vctx.create_qp_ex = Some(crate::qp_ex::create_qp_ex_op);
    vctx.create_cq_ex = Some(crate::cq_ex::create_cq_ex_op);
    vctx.sz = core::mem::size_of::<VerbsContext>();
    let c = &mut vctx.context;
    c.device = dev;
    c.cmd_fd = -1;
    c.async_fd = events.fd();
    c.num_comp_vectors = 1;
    c.abi_compat = usize::MAX as *mut c_void;
    c.ops.poll_cq = Some(crate::datapath::poll_cq);
    c.ops.req_notify_cq = Some(crate::events::req_notify_cq);
    c.ops.post_srq_recv = Some(crate::srq::post_srq_recv);
    c.ops.post_send = Some(crate::datapath::post_send);
    c.ops.post_recv = Some(crate::datapath::post_recv);
    let ctx = Box::into_raw(Box::new(Context { vctx, dev: d, runtime: std::sync::OnceLock::new(), events }));
    // SAFETY: `ctx` is a fresh allocation; the mutex is initialised in place, once.
    unsafe { libc::pthread_mutex_init(&mut (*ctx).vctx.context.mutex, core::ptr::null()) };
    // SAFETY: as above.
    let ibv = unsafe { &mut (*ctx).vctx.context as *mut IbvContext };
    CONTEXTS.insert(ibv.cast(), ctx);
    ibv
}

/// `ibv_close_device(3)`.
#[no_mangle]
pub unsafe extern "C" fn ibv_close_device(ctx: *mut IbvContext) -> c_int {
    if context(ctx).is_none() {
        return libc::EINVAL;
    }
    // What the program left behind goes with the context, as the kernel's uverbs file
    // cleans up on close; the engine may be shared with other contexts, so nothing of this
    // one may outlive it (an MR over memory the program frees next, above all).
    crate::datapath::release_all(ctx);
    match CONTEXTS.take(ctx.cast()) {
        Some(c) => {
            drop(c);
            0
        }
        None => libc::EINVAL,
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: the mutex is the context's own, made in ibv_open_device; nothing uses it once
        // the context is unregistered. (The runtime stops with the OnceLock; `async_fd` closes
        // with the last holder of `events`.)
        unsafe { libc::pthread_mutex_destroy(&mut self.vctx.context.mutex) };
    }
}

/// `ibv_query_device(3)`: limits true to the engine (rxe's where the engine has none).
#[no_mangle]
pub unsafe extern "C" fn ibv_query_device(ctx: *mut IbvContext, attr: *mut DeviceAttr) -> c_int {
    let Some(c) = context(ctx) else { return libc::EINVAL };
    if attr.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: `attr` points at a caller's struct ibv_device_attr.
    unsafe { attr.write(device_attr(c.dev)) };
    0
}

/// `max_cq` and `max_cqe` (rxe's), which `ibv_create_cq` enforces.
pub const fn cq_limits() -> (c_int, c_int) {
    (0x4000, (1 << 18) - 1)
}

/// What `ibv_query_device` reports for `d`.
pub fn device_attr(d: &Device) -> DeviceAttr {
    // SAFETY: plain integers and arrays: all-zero is valid.
    let mut a: DeviceAttr = unsafe { core::mem::zeroed() };
    let fw = format!("uroce {}", env!("CARGO_PKG_VERSION"));
    copy_c(&mut a.fw_ver, &fw);
    a.node_guid = u64::from_ne_bytes(d.guid);
    a.sys_image_guid = a.node_guid;
    a.max_mr_size = u64::MAX;
    a.page_size_cap = 0xffff_f000;
    // rxe's vendor id (RXE_VENDOR_ID) is one perftest does not special-case; the part id says uroce
    a.vendor_id = 0xff_ffff;
    a.vendor_part_id = 0x7572;
    a.max_qp = 0x10000;
    a.max_qp_wr = 0x4000;
    a.device_cap_flags = (1 << 11) | (1 << 12); // SYS_IMAGE_GUID, RC_RNR_NAK_GEN
    a.max_sge = 32;
    a.max_sge_rd = 32;
    (a.max_cq, a.max_cqe) = cq_limits();
    a.max_mr = 0x4000;
    a.max_pd = 0x7ff0;
    a.max_qp_rd_atom = 128;
    a.max_res_rd_atom = 0x3f8000;
    a.max_qp_init_rd_atom = 128;
    a.atomic_cap = 1; // IBV_ATOMIC_HCA
    a.max_ah = 0x7ff0;
    a.max_pkeys = 1;
    (a.max_srq, a.max_srq_wr) = (0x3ff, uroce_transport::device::MAX_SRQ_WR as c_int);
    a.max_srq_sge = uroce_transport::qp::MAX_SGE as c_int;
    a.local_ca_ack_delay = 15;
    a.phys_port_cnt = 1;
    a
}

/// `verbs_context.query_device_ex` (the inline `ibv_query_device_ex`): `ibv_query_device`'s
/// attributes, every extended capability zero (none of them exist in uroce) but
/// `phys_port_cnt_ex`, written up to the caller's `size`.
unsafe extern "C" fn query_device_ex_op(
    ctx: *mut IbvContext,
    input: *const c_void,
    attr: *mut u8,
    size: usize,
) -> c_int {
    let Some(c) = context(ctx) else { return libc::EINVAL };
    if attr.is_null() || size < core::mem::size_of::<DeviceAttr>() {
        return libc::EINVAL;
    }
    // SAFETY: `input` is NULL or the caller's struct ibv_query_device_ex_input (its first
    // member a u32 comp_mask); `attr` holds `size` bytes (the caller's sizeof).
    unsafe {
        if !input.is_null() && input.cast::<u32>().read_unaligned() != 0 {
            return libc::EINVAL;
        }
        core::ptr::write_bytes(attr, 0, size);
        attr.cast::<DeviceAttr>().write_unaligned(device_attr(c.dev));
        if size >= PHYS_PORT_CNT_EX_OFFSET + 4 {
            attr.add(PHYS_PORT_CNT_EX_OFFSET).cast::<u32>().write_unaligned(1);
        }
    }
    0
}

/// What `ibv_query_port` reports for `d`'s one port.
pub fn port_attr(d: &Device) -> PortAttr {
    let mtu = d.active_mtu() as c_int;
    PortAttr {
        state: 4, // IBV_PORT_ACTIVE
        max_mtu: Mtu::Mtu4096 as c_int,
        active_mtu: mtu,
        gid_tbl_len: GID_TABLE_LEN as c_int,
        port_cap_flags: 1 << 16, // IBV_PORT_CM_SUP, as rxe
        max_msg_sz: 0x80_0000,
        pkey_tbl_len: 1,
        max_vl_num: 1,
        active_width: 2,  // 4X
        active_speed: 32, // EDR: 4X EDR = 100 Gbit/s
        phys_state: 5,    // LinkUp
        link_layer: 2,    // IBV_LINK_LAYER_ETHERNET
        ..PortAttr::default()
    }
}

fn fill_port(ctx: *mut IbvContext, port: u8, attr: *mut PortAttr, len: usize) -> c_int {
    let Some(c) = context(ctx) else { return libc::EINVAL };
    if port != 1 || attr.is_null() {
        return libc::EINVAL;
    }
    let a = port_attr(c.dev);
    let n = len.min(core::mem::size_of::<PortAttr>());
    // SAFETY: the caller's struct holds `len` bytes; we copy at most that many from ours.
    unsafe { core::ptr::copy_nonoverlapping((&a as *const PortAttr).cast::<u8>(), attr.cast::<u8>(), n) };
    0
}

/// `verbs_context::query_port`: what the inline `ibv_query_port` calls.
unsafe extern "C" fn query_port_op(ctx: *mut IbvContext, port: u8, attr: *mut PortAttr, len: usize) -> c_int {
    fill_port(ctx, port, attr, len)
}

/// The exported `ibv_query_port` (the compat layout: programs built without the extended
/// context reach it).
#[no_mangle]
pub unsafe extern "C" fn ibv_query_port(ctx: *mut IbvContext, port: u8, attr: *mut PortAttr) -> c_int {
    fill_port(ctx, port, attr, COMPAT_PORT_ATTR_LEN)
}

/// The GID at `index`, or None for an empty slot; Err for a bad context, port or index.
fn gid_at(ctx: *mut IbvContext, port: u32, index: u32) -> Result<(&'static Device, Option<EngineGid>), c_int> {
    let c = context(ctx).ok_or(libc::EINVAL)?;
    if port != 1 || index as usize >= GID_TABLE_LEN {
        return Err(libc::EINVAL);
    }
    Ok((c.dev, c.dev.gids.get(index as usize).copied()))
}

/// `ibv_query_gid(3)`: an empty slot is 0 with a zero GID (what perftest's GID search needs).
#[no_mangle]
pub unsafe extern "C" fn ibv_query_gid(ctx: *mut IbvContext, port: u8, index: c_int, gid: *mut Gid) -> c_int {
    if gid.is_null() || index < 0 {
        return -1;
    }
    match gid_at(ctx, port.into(), index as u32) {
        Ok((_, g)) => {
            // SAFETY: `gid` points at a caller's union ibv_gid.
            unsafe { gid.write(g.map_or([0; 16], |g| g.0)) };
            0
        }
        Err(e) => {
            set_errno(e);
            -1
        }
    }
}

/// `ibv_query_gid_ex(3)` (`_ibv_query_gid_ex`): `ENODATA` for an empty slot.
#[no_mangle]
pub unsafe extern "C" fn _ibv_query_gid_ex(
    ctx: *mut IbvContext,
    port: u32,
    index: u32,
    entry: *mut GidEntry,
    flags: u32,
    entry_size: usize,
) -> c_int {
    if entry.is_null() || flags != 0 || entry_size < core::mem::size_of::<GidEntry>() {
        return libc::EINVAL;
    }
    match gid_at(ctx, port, index) {
        Ok((d, Some(g))) => {
            let e = GidEntry {
                gid: g.0,
                gid_index: index,
                port_num: port,
                gid_type: GID_TYPE_ROCE_V2,
                ndev_ifindex: d.iface.index,
            };
            // SAFETY: `entry` points at a caller's struct of at least entry_size bytes.
            unsafe { entry.write(e) };
            0
        }
        Ok((_, None)) => libc::ENODATA,
        Err(e) => e,
    }
}

/// `_ibv_query_gid_table` (what the inline `ibv_query_gid_table` calls): every GID in use, in
/// index order, `entry_size` bytes apart; their number, or a negative error number (as
/// rdma-core: `-EINVAL` for flags, a short entry size or fewer entries than GIDs).
#[no_mangle]
pub unsafe extern "C" fn _ibv_query_gid_table(
    ctx: *mut IbvContext,
    entries: *mut GidEntry,
    max_entries: usize,
    flags: u32,
    entry_size: usize,
) -> isize {
    let einval = -(libc::EINVAL as isize);
    let Some(c) = context(ctx) else { return einval };
    let gids = &c.dev.gids;
    if flags != 0 || entry_size < core::mem::size_of::<GidEntry>() || gids.len() > max_entries || entries.is_null() {
        return einval;
    }
    for (i, g) in gids.iter().enumerate() {
        let e = GidEntry {
            gid: g.0,
            gid_index: i as u32,
            port_num: 1,
            gid_type: GID_TYPE_ROCE_V2,
            ndev_ifindex: c.dev.iface.index,
        };
        // SAFETY: `entries` holds `max_entries` (≥ gids.len()) entries of `entry_size` bytes.
        unsafe { entries.cast::<u8>().add(i * entry_size).cast::<GidEntry>().write_unaligned(e) };
    }
    gids.len() as isize
}

/// rdma-core's private `ibv_query_gid_type` (`ibv_devinfo` prints it): RoCEv2 for every slot.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_gid_type(ctx: *mut IbvContext, port: u8, index: u32, ty: *mut c_int) -> c_int {
    if ty.is_null() {
        return libc::EINVAL;
    }
    match gid_at(ctx, port.into(), index) {
        Ok(_) => {
            // SAFETY: `ty` points at a caller's enum ibv_gid_type_sysfs.
            unsafe { ty.write(GID_TYPE_SYSFS_ROCE_V2) };
            0
        }
        Err(e) => e,
    }
}

/// `ibv_query_pkey(3)`: one P_Key, the default 0xffff.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_pkey(ctx: *mut IbvContext, port: u8, index: c_int, pkey: *mut u16) -> c_int {
    if context(ctx).is_none() || port != 1 || pkey.is_null() || index != 0 {
        return libc::EINVAL;
    }
    // SAFETY: `pkey` points at a caller's __be16.
    unsafe { pkey.write(0xffffu16.to_be()) };
    0
}

/// `ibv_get_pkey_index(3)`.
#[no_mangle]
pub unsafe extern "C" fn ibv_get_pkey_index(ctx: *mut IbvContext, port: u8, pkey: u16) -> c_int {
    if context(ctx).is_some() && port == 1 && u16::from_be(pkey) == 0xffff {
        0
    } else {
        -1
    }
}
