//! Memory regions, completion queues and RC queue pairs over the engine, which runs on a
//! progress thread inside the program's own process (`uroce_io::runtime::Runtime`), started
//! the first time a context needs it (`ibv_alloc_pd`): opening a device to query it
//! (`ibv_devinfo`) touches no interface.
//!
//! The backend is AF_XDP when the process may attach XDP programs (root) and kernel UDP
//! otherwise; `UROCE_BACKEND=xdp|udp` chooses (`UROCE_UDP_PORT`: the UDP backend's port, 4791
//! by default). Either backend shares the interface with every other uroce process on it, each
//! owning a block of QP numbers (`uroce_io::share`; `UROCE_SHARE=0`: this process alone). `UROCE_PCAP=FILE` captures every frame; `UROCE_QUIRKS=retry_cnt_7_infinite`
//! retries forever at `retry_cnt` 7, as rxe does. Congestion control (`UROCE_ECN`,
//! `UROCE_DCQCN`, ...) and injected faults (`UROCE_INJECT`): [`crate::congestion`].
//!
//! Each call translates libibverbs' structs to the engine's verbs types (same names, same
//! numeric values) and back; the engine checks every rule. Handles are looked up in registries
//! first, as in [`crate::device`].

use crate::abi::*;
use crate::device::{context, Context, PDS};
use crate::{set_errno, Registry};
use core::ffi::{c_int, c_void};
use core::ptr::null_mut;
use std::net::IpAddr;
use std::sync::atomic::AtomicU32;
use std::sync::Arc;
use uroce_io::runtime::{connect, BackendKind, Port, PortConfig, Runtime, WatchedCq};
use uroce_transport::verbs::*;
use uroce_transport::MrInfo;

/// A PD: the program's `ibv_pd`, then the engine's handle.
#[repr(C)]
pub struct Pd {
    /// What the program sees.
    pub ibv: IbvPd,
    /// The engine's PD.
    pub engine: PdHandle,
}

/// An MR.
#[repr(C)]
pub struct Mr {
    /// What the program sees.
    pub ibv: IbvMr,
}

/// A CQ: `struct ibv_cq`, and after it the rest of `struct ibv_cq_ex` (for a CQ from
/// `ibv_create_cq_ex`: [`crate::cq_ex`]).
#[repr(C)]
pub struct Cq {
    /// What the program sees.
    pub ibv: IbvCq,
    /// `struct ibv_cq_ex`'s members after those of `struct ibv_cq`; the program reads
    /// `status` and `wr_id` through its pointer while we write them (hence the cell).
    pub ex: core::cell::UnsafeCell<CqExTail>,
    /// The `IBV_WC_EX_WITH_*` fields the program asked for, with [`crate::cq_ex::EXTENDED`]
    /// set for an extended CQ (0: made by `ibv_create_cq`).
    pub wc_flags: u64,
    /// The completion `ibv_start_poll`/`ibv_next_poll` made current.
    pub current: std::sync::Mutex<WcC>,
    /// The engine's CQ.
    pub engine: CqHandle,
    /// Its completions, moved into a lock-free queue by whichever thread drives the port.
    pub watch: Arc<WatchedCq>,
    /// Completion events `ibv_get_cq_event` handed out for it ([`crate::events`]).
    pub events_read: AtomicU32,
}

/// A QP: `struct ibv_qp`, and after it the rest of `struct ibv_qp_ex` (together the
/// `struct ibv_qp_ex` of [`crate::qp_ex`], for a QP created with `send_ops_flags`).
#[repr(C)]
pub struct Qp {
    /// What the program sees.
    pub ibv: IbvQp,
    /// `struct ibv_qp_ex`'s members after `qp_base`; the program writes `wr_id` and
    /// `wr_flags` through its pointer (hence the cell).
    pub ex: core::cell::UnsafeCell<QpExTail>,
    /// The `IBV_QP_EX_WITH_*` operations the program asked for (0: not an extended QP).
    pub send_ops: u64,
    /// The WRs between `ibv_wr_start` and `ibv_wr_complete`.
    pub batch: std::sync::Mutex<crate::qp_ex::Batch>,
    /// Where inline data is staged for the engine (which gathers it at post time): an MR of
    /// `max_inline_data` bytes.
    inline: Option<MrInfo>,
    inline_len: usize,
}

impl Drop for Cq {
    fn drop(&mut self) {
        // SAFETY: initialised in ibv_create_cq; nothing uses them once the CQ is unregistered.
        unsafe {
            libc::pthread_mutex_destroy(&mut self.ibv.mutex);
            libc::pthread_cond_destroy(&mut self.ibv.cond);
        }
    }
}

impl Qp {
    /// The most inline data one WR may carry.
    pub(crate) fn inline_capacity(&self) -> usize {
        if self.inline.is_some() {
            self.inline_len
        } else {
            0
        }
    }
}

impl Drop for Qp {
    fn drop(&mut self) {
        // SAFETY: initialised in ibv_create_qp; nothing uses them once the QP is unregistered.
        unsafe {
            libc::pthread_mutex_destroy(&mut self.ibv.mutex);
            libc::pthread_cond_destroy(&mut self.ibv.cond);
        }
    }
}

/// Live MRs, CQs and QPs, by address.
pub static MRS: Registry<Mr> = Registry::new();
/// Live CQs.
pub static CQS: Registry<Cq> = Registry::new();
/// Live QPs.
pub static QPS: Registry<Qp> = Registry::new();

/// Start device `dev`'s engine and progress threads in this process.
pub fn start_runtime(dev: &'static crate::device::Device) -> Result<Runtime, c_int> {
    let iface = &dev.iface;
    let backend = match std::env::var("UROCE_BACKEND").as_deref() {
        Ok("udp") => udp(),
        Ok("xdp") => xdp(),
        // SAFETY: geteuid has no preconditions.
        _ if unsafe { libc::geteuid() } == 0 => xdp(),
        _ => udp(),
    };
    let local_ip = iface.ipv4.first().map(|a| IpAddr::V4(*a)).or_else(|| iface.addresses().first().copied());
    let Some(local_ip) = local_ip else { return Err(libc::ENODEV) };
    let (cc, inject) =
        crate::congestion::from_env(&|v| std::env::var(v).ok(), crate::congestion::link_speed_mbps(&iface.name))
            .map_err(|e| {
                eprintln!("uroce: {e}");
                libc::EINVAL
            })?;
    let cfg = PortConfig {
        ifname: Some(iface.name.clone()),
        local_ip,
        backend,
        seed: None,
        pcap: std::env::var_os("UROCE_PCAP").map(Into::into),
        inject,
        tweak: Some(env_quirks),
        cc,
    };
    dev.shared.store(
        matches!(&cfg.backend, BackendKind::Xdp(o) if o.shared)
            || matches!(&cfg.backend, BackendKind::Udp { shared: true, .. }),
        std::sync::atomic::Ordering::Relaxed,
    );
    let port = Port::open(cfg).map_err(|e| {
        eprintln!("uroce: cannot open {}: {e:#}", iface.name);
        libc::EIO
    })?;
    let rt = Runtime::start(port).map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))?;
    if let Some(v) = std::env::var_os("UROCE_POLL_LINGER_US") {
        let us =
            v.to_str().and_then(|s| s.trim().parse::<u64>().ok()).filter(|&us| us <= 1_000_000).ok_or_else(|| {
                eprintln!(
                    "uroce: UROCE_POLL_LINGER_US: `{}` is not a number of microseconds (0..=1000000)",
                    v.to_string_lossy()
                );
                libc::EINVAL
            })?;
        rt.set_linger(std::time::Duration::from_micros(us));
    }
    // Each event goes to the context whose QP or CQ it names.
    rt.set_event_handler(Box::new(move |e| {
        let sinks = dev.sinks.lock().unwrap_or_else(|p| p.into_inner());
        for q in sinks.iter().filter_map(std::sync::Weak::upgrade) {
            if q.raise_if_mine(e) {
                break;
            }
        }
    }));
    Ok(rt)
}

/// `UROCE_QUIRKS=retry_cnt_7_infinite`: rxe's reading of `retry_cnt = 7` as "retry forever"
/// (`uroce_transport::Quirks`), for peers in guests that stall longer than the spec's retries
/// last.
fn env_quirks(dc: &mut uroce_transport::DeviceConfig) {
    let q = std::env::var("UROCE_QUIRKS").unwrap_or_default();
    dc.quirks.retry_cnt_7_infinite |= q.split(',').any(|s| s.trim() == "retry_cnt_7_infinite");
}

/// Whether this process shares its interface with other uroce processes (`UROCE_SHARE=0`:
/// it takes the interface alone, as before several processes could share it).
fn sharing() -> bool {
    std::env::var("UROCE_SHARE").as_deref() != Ok("0")
}

/// Whether the runtime of `dev` (started) shares its interface.
pub(crate) fn runtime_shared(dev: &crate::device::Device) -> bool {
    dev.shared.load(std::sync::atomic::Ordering::Relaxed)
}

/// AF_XDP, sharing the interface with the other uroce processes on it (each owns a block of
/// QP numbers: `uroce_io::xdp::XdpBackend::open_shared`) unless `UROCE_SHARE=0`.
fn xdp() -> BackendKind {
    BackendKind::Xdp(uroce_io::xdp::XdpOptions { shared: sharing(), ..Default::default() })
}

/// Kernel UDP on 4791 (`UROCE_UDP_PORT` for another), shared with the other uroce processes
/// on the address when this one may load BPF programs (root; `UROCE_SHARE=0` turns it off).
fn udp() -> BackendKind {
    let port = std::env::var("UROCE_UDP_PORT").ok().and_then(|p| p.parse().ok()).unwrap_or(4791);
    // SAFETY: geteuid has no preconditions.
    let shared = sharing() && unsafe { libc::geteuid() } == 0;
    BackendKind::Udp { port, gso: false, gro: false, shared }
}

/// The context's runtime: its device's, started by the first context that needs it.
fn runtime(c: &Context) -> Result<&Runtime, c_int> {
    let shared = c.runtime.get_or_init(|| {
        let mut slot = c.dev.engine.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(rt) = slot.upgrade() {
            return Ok(rt);
        }
        let rt = Arc::new(start_runtime(c.dev)?);
        *slot = Arc::downgrade(&rt);
        Ok(rt)
    });
    shared.as_deref().map_err(|e| *e)
}

/// The context and runtime behind `ctx`.
pub(crate) fn rt_of<'a>(ctx: *mut IbvContext) -> Result<(&'a Context, &'a Runtime), c_int> {
    let c = context(ctx).ok_or(libc::EINVAL)?;
    Ok((c, runtime(c)?))
}

pub(crate) fn fail<T>(e: c_int) -> *mut T {
    set_errno(e);
    null_mut()
}

/// `ibv_alloc_pd(3)`.
#[no_mangle]
pub unsafe extern "C" fn ibv_alloc_pd(ctx: *mut IbvContext) -> *mut IbvPd {
    let (_, rt) = match rt_of(ctx) {
        Ok(x) => x,
        Err(e) => return fail(e),
    };
    let engine = rt.with(|d| d.alloc_pd());
    let pd = Box::into_raw(Box::new(Pd { ibv: IbvPd { context: ctx, handle: engine.0 }, engine }));
    PDS.insert(pd.cast(), pd);
    pd.cast()
}

/// `ibv_dealloc_pd(3)`: `EBUSY` while MRs or QPs use it.
#[no_mangle]
pub unsafe extern "C" fn ibv_dealloc_pd(pd: *mut IbvPd) -> c_int {
    let Some(p) = PDS.get(pd.cast()) else { return libc::EINVAL };
    let Ok((_, rt)) = rt_of(p.ibv.context) else { return libc::EINVAL };
    // Address handles live here, not in the engine.
    if !crate::ah::AHS.keys_where(|a| a.ibv.pd == pd).is_empty() {
        return libc::EBUSY;
    }
    match rt.with(|d| d.dealloc_pd(p.engine)) {
        Ok(()) => {
            drop(PDS.take(pd.cast()));
            0
        }
        Err(e) => e.errno(),
    }
}

fn reg(pd: *mut IbvPd, addr: *mut c_void, len: usize, iova: Option<u64>, access: c_int) -> *mut IbvMr {
    let Some(p) = PDS.get(pd.cast()) else { return fail(libc::EINVAL) };
    let Ok((_, rt)) = rt_of(p.ibv.context) else { return fail(libc::EINVAL) };
    // SAFETY: the verbs contract: the program's buffer stays valid while it is registered.
    let Some(mem) = (unsafe { uroce_mem::RawMemory::new(addr.cast(), len) }) else { return fail(libc::EINVAL) };
    let access = AccessFlags(access as u32);
    let r = rt.with(|d| match iova {
        Some(iova) => d.reg_mr_app_iova(p.engine, Box::new(mem), iova, access),
        None => d.reg_mr_app(p.engine, Box::new(mem), access),
    });
    match r {
        Ok(info) => {
            let ibv = IbvMr {
                context: p.ibv.context,
                pd,
                addr,
                length: len,
                handle: info.lkey,
                lkey: info.lkey,
                rkey: info.rkey,
            };
            let mr = Box::into_raw(Box::new(Mr { ibv }));
            MRS.insert(mr.cast(), mr);
            mr.cast()
        }
        Err(e) => fail(e.errno()),
    }
}

/// `ibv_reg_mr(3)`: the program's own memory, used in place.
#[no_mangle]
pub unsafe extern "C" fn ibv_reg_mr(pd: *mut IbvPd, addr: *mut c_void, len: usize, access: c_int) -> *mut IbvMr {
    reg(pd, addr, len, None, access)
}

/// `ibv_reg_mr_iova(3)`.
#[no_mangle]
pub unsafe extern "C" fn ibv_reg_mr_iova(
    pd: *mut IbvPd,
    addr: *mut c_void,
    len: usize,
    iova: u64,
    access: c_int,
) -> *mut IbvMr {
    reg(pd, addr, len, Some(iova), access)
}

/// `ibv_reg_mr_iova2(3)` (what the `ibv_reg_mr` macro calls when the access flags are not a
/// compile-time constant).
#[no_mangle]
pub unsafe extern "C" fn ibv_reg_mr_iova2(
    pd: *mut IbvPd,
    addr: *mut c_void,
    len: usize,
    iova: u64,
    access: u32,
) -> *mut IbvMr {
    reg(pd, addr, len, (iova != addr as u64).then_some(iova), access as c_int)
}

/// `ibv_rereg_mr(3)`: a new PD (`IBV_REREG_MR_CHANGE_PD`), access rights
/// (`IBV_REREG_MR_CHANGE_ACCESS`) and/or memory (`IBV_REREG_MR_CHANGE_TRANSLATION`: the
/// program's `addr`, `length`, used in place) for `mr`, which keeps its keys. 0, or
/// `IBV_REREG_MR_ERR_INPUT` (-1; bad flags, handles or range) / `IBV_REREG_MR_ERR_CMD` (-4; the
/// engine refused, e.g. remote write without local write) with `errno` set, as rdma-core
/// returns them; on an error nothing changed.
#[no_mangle]
pub unsafe extern "C" fn ibv_rereg_mr(
    mr: *mut IbvMr,
    flags: c_int,
    pd: *mut IbvPd,
    addr: *mut c_void,
    length: usize,
    access: c_int,
) -> c_int {
    const CHANGE_TRANSLATION: c_int = 1;
    const CHANGE_PD: c_int = 2;
    const CHANGE_ACCESS: c_int = 4;
    const ERR_INPUT: c_int = -1;
    const ERR_CMD: c_int = -4;
    let input = |e| {
        set_errno(e);
        ERR_INPUT
    };
    let Some(m) = MRS.get(mr.cast()) else { return input(libc::EINVAL) };
    let Ok((_, rt)) = rt_of(m.ibv.context) else { return input(libc::EINVAL) };
    if flags & !(CHANGE_TRANSLATION | CHANGE_PD | CHANGE_ACCESS) != 0 {
        return input(libc::EINVAL);
    }
    let new_pd = match flags & CHANGE_PD != 0 {
        false => None,
        true => match PDS.get(pd.cast()) {
            Some(p) if p.ibv.context == m.ibv.context => Some(p.engine),
            _ => return input(libc::EINVAL),
        },
    };
    let memory = match flags & CHANGE_TRANSLATION != 0 {
        false => None,
        // SAFETY: the verbs contract: the program's buffer stays valid while it is registered.
        true => match (length > 0).then(|| unsafe { uroce_mem::RawMemory::new(addr.cast(), length) }).flatten() {
            Some(mem) => Some((uroce_transport::MrMemory::App(Box::new(mem)), None)),
            None => return input(libc::EINVAL),
        },
    };
    let new_access = (flags & CHANGE_ACCESS != 0).then_some(AccessFlags(access as u32));
    match rt.with(|d| d.rereg_mr(m.ibv.lkey, new_pd, new_access, memory)) {
        Ok(_old) => {
            // SAFETY: `mr` is registered (looked up above): the program's struct ibv_mr.
            unsafe {
                if flags & CHANGE_PD != 0 {
                    (*mr).pd = pd;
                }
                if flags & CHANGE_TRANSLATION != 0 {
                    ((*mr).addr, (*mr).length) = (addr, length);
                }
            }
            0
        }
        Err(e) => {
            set_errno(e.errno());
            ERR_CMD
        }
    }
}

/// `ibv_dereg_mr(3)`.
#[no_mangle]
pub unsafe extern "C" fn ibv_dereg_mr(mr: *mut IbvMr) -> c_int {
    let Some(m) = MRS.get(mr.cast()) else { return libc::EINVAL };
    let Ok((_, rt)) = rt_of(m.ibv.context) else { return libc::EINVAL };
    match rt.with(|d| d.dereg_mr(m.ibv.lkey)) {
        Ok(_) => {
            drop(MRS.take(mr.cast()));
            0
        }
        Err(e) => e.errno(),
    }
}

/// `ibv_create_cq(3)`, attached to a completion channel if `channel` is not NULL.
#[no_mangle]
pub unsafe extern "C" fn ibv_create_cq(
    ctx: *mut IbvContext,
    cqe: c_int,
    cq_context: *mut c_void,
    channel: *mut IbvCompChannel,
    comp_vector: c_int,
) -> *mut IbvCq {
    create_cq(ctx, cqe, cq_context, channel, comp_vector, 0)
}

/// Create a CQ (`wc_flags`: an extended CQ's, else 0). NULL and `errno` on failure.
pub(crate) fn create_cq(
    ctx: *mut IbvContext,
    cqe: c_int,
    cq_context: *mut c_void,
    channel: *mut IbvCompChannel,
    comp_vector: c_int,
    wc_flags: u64,
) -> *mut IbvCq {
    let (_, rt) = match rt_of(ctx) {
        Ok(x) => x,
        Err(e) => return fail(e),
    };
    let notify = match crate::events::notifier(ctx, channel) {
        Ok(n) => n,
        Err(e) => return fail(e),
    };
    // rxe_cq_chk_attr: 1 ..= max_cqe entries; and one completion vector (num_comp_vectors 1).
    let (_, max_cqe) = crate::device::cq_limits();
    if !(1..=max_cqe).contains(&cqe) || comp_vector != 0 {
        return fail(libc::EINVAL);
    }
    let Ok(n) = usize::try_from(cqe) else { return fail(libc::EINVAL) };
    let engine = match rt.with(|d| d.create_cq(n)) {
        Ok(h) => h,
        Err(e) => return fail(e.errno()),
    };
    let (notify, slot) = notify.unzip();
    let watch = rt.watch_cq_notify(engine, n.max(1), notify);
    // SAFETY: integers, pointers and pthread objects (initialised below): all-zero is valid.
    let mut ibv: IbvCq = unsafe { core::mem::zeroed() };
    ibv.context = ctx;
    ibv.cq_context = cq_context;
    ibv.handle = engine.0;
    ibv.cqe = cqe;
    ibv.channel = channel;
    let cq = Box::into_raw(Box::new(Cq {
        ibv,
        ex: core::cell::UnsafeCell::new(crate::cq_ex::ops()),
        wc_flags,
        current: Default::default(),
        engine,
        watch,
        events_read: AtomicU32::new(0),
    }));
    if let Some(s) = slot {
        s.store(cq as usize, std::sync::atomic::Ordering::Release);
        crate::events::attach(channel);
    }
    // SAFETY: fresh allocation; initialised once.
    unsafe {
        libc::pthread_mutex_init(&mut (*cq).ibv.mutex, core::ptr::null());
        libc::pthread_cond_init(&mut (*cq).ibv.cond, core::ptr::null());
    }
    CQS.insert(cq.cast(), cq);
    if let Some(c) = context(ctx) {
        c.events.set_cq(engine.0, Some(cq.cast()));
    }
    cq.cast()
}

/// `ibv_destroy_cq(3)`: `EBUSY` while a QP uses it; with a channel, it first waits until
/// every event `ibv_get_cq_event` returned for it is acknowledged, as rdma-core's does.
#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_cq(cq: *mut IbvCq) -> c_int {
    let Some(c) = CQS.get(cq.cast()) else { return libc::EINVAL };
    let Ok((_, rt)) = rt_of(c.ibv.context) else { return libc::EINVAL };
    match rt.with(|d| d.destroy_cq(c.engine)) {
        Ok(()) => {
            rt.unwatch_cq(c.engine);
            if let Some(x) = context(c.ibv.context) {
                x.events.set_cq(c.engine.0, None);
            }
            if !c.ibv.channel.is_null() {
                crate::events::wait_acked(cq, c);
                crate::events::detach(c.ibv.channel);
            }
            drop(CQS.take(cq.cast()));
            0
        }
        Err(e) => e.errno(),
    }
}

/// libibverbs' `struct ibv_wc` of an engine completion.
pub(crate) fn wc_of(w: &WorkCompletion) -> WcC {
    WcC {
        wr_id: w.wr_id,
        status: w.status as c_int,
        opcode: w.opcode as c_int,
        vendor_err: w.vendor_err,
        byte_len: w.byte_len,
        // `imm_data` is `__be32`, `invalidated_rkey` (in the same place) host order.
        imm_data: if w.wc_flags.contains(WcFlags::WITH_IMM) { w.imm_data.to_be() } else { w.imm_data },
        qp_num: w.qp_num,
        src_qp: w.src_qp,
        wc_flags: w.wc_flags.0,
        pkey_index: w.pkey_index,
        ..WcC::default()
    }
}

/// `ops.poll_cq`: completions from the progress thread's lock-free queue.
pub unsafe extern "C" fn poll_cq(cq: *mut c_void, n: c_int, wc: *mut c_void) -> c_int {
    let Some(c) = CQS.get(cq) else { return -libc::EINVAL };
    let Ok((_, rt)) = rt_of(c.ibv.context) else { return -libc::EINVAL };
    let Ok(n) = usize::try_from(n) else { return -libc::EINVAL };
    if wc.is_null() && n > 0 {
        return -libc::EINVAL;
    }
    // One completion at a time (the latency tools' `ibv_poll_cq(cq, 1, &wc)`): no 16-entry
    // buffer to initialise on every poll.
    let (mut one, mut many);
    let buf: &mut [WorkCompletion] = if n <= 1 {
        one = [WorkCompletion::default(); 1];
        &mut one
    } else {
        many = [WorkCompletion::default(); 16];
        &mut many
    };
    let mut done = 0usize;
    while done < n {
        let want = (n - done).min(buf.len());
        let got = rt.poll_watched(&c.watch, &mut buf[..want]);
        for (i, w) in buf[..got].iter().enumerate() {
            let out = wc_of(w);
            // SAFETY: `wc` holds `n` struct ibv_wc (the caller's array).
            unsafe { wc.cast::<WcC>().add(done + i).write(out) };
        }
        done += got;
        if got < want {
            break;
        }
    }
    done as c_int
}

/// `enum ibv_qp_type`.
fn qp_type(t: c_int) -> Option<QpType> {
    match t {
        2 => Some(QpType::Rc),
        3 => Some(QpType::Uc),
        4 => Some(QpType::Ud),
        _ => None,
    }
}

/// `ibv_create_qp(3)`: RC, UC or UD. The caps granted are written back to `init_attr`.
#[no_mangle]
pub unsafe extern "C" fn ibv_create_qp(pd: *mut IbvPd, init: *mut QpInitAttrC) -> *mut IbvQp {
    if init.is_null() {
        return fail(libc::EINVAL);
    }
    // SAFETY: the caller's struct ibv_qp_init_attr.
    let ia = unsafe { &mut *init };
    create_qp(pd, ia, 0)
}

/// Create the QP `req` asks for in `pd`, with the extended QP's operations `send_ops`
/// (`send_ops_flags`; 0 for `ibv_create_qp`), and write the caps granted back to `req`. NULL
/// and `errno` on failure.
pub(crate) fn create_qp(pd: *mut IbvPd, req: &mut QpInitAttrC, send_ops: u64) -> *mut IbvQp {
    let Some(p) = PDS.get(pd.cast()) else { return fail(libc::EINVAL) };
    let Ok((_, rt)) = rt_of(p.ibv.context) else { return fail(libc::EINVAL) };
    let (Some(scq), Some(rcq)) = (CQS.get(req.send_cq.cast()), CQS.get(req.recv_cq.cast())) else {
        return fail(libc::EINVAL);
    };
    let srq = match req.srq.is_null() {
        true => None,
        false => match crate::srq::engine_of(req.srq) {
            Some(h) => Some(h),
            None => return fail(libc::EINVAL),
        },
    };
    let Some(ty) = qp_type(req.qp_type) else { return fail(libc::EOPNOTSUPP) };
    let c = req.cap;
    let cap = QpCap {
        max_send_wr: c.max_send_wr,
        max_recv_wr: c.max_recv_wr,
        max_send_sge: c.max_send_sge.max(1),
        max_recv_sge: c.max_recv_sge.max(1),
        max_inline_data: c.max_inline_data,
    };
    let attr =
        QpInitAttr { qp_type: ty, send_cq: scq.engine, recv_cq: rcq.engine, cap, sq_sig_all: req.sq_sig_all != 0, srq };
    let inline_len = cap.max_inline_data as usize;
    let r = rt.with(|d| {
        let qpn = d.create_qp(p.engine, &attr)?;
        let staging = if inline_len > 0 {
            match d.reg_mr(p.engine, vec![0u8; inline_len].into_boxed_slice(), AccessFlags::LOCAL_WRITE) {
                Ok(m) => Some(m),
                Err(e) => {
                    let _ = d.destroy_qp(qpn);
                    return Err(e);
                }
            }
        } else {
            None
        };
        Ok((qpn, staging))
    });
    let (qpn, inline) = match r {
        Ok(x) => x,
        Err(e) => return fail(e.errno()),
    };
    req.cap = QpCapC { max_send_sge: cap.max_send_sge, max_recv_sge: cap.max_recv_sge, ..c };
    // SAFETY: integers, pointers and pthread objects (initialised below): all-zero is valid.
    let mut ibv: IbvQp = unsafe { core::mem::zeroed() };
    ibv.context = p.ibv.context;
    ibv.qp_context = req.qp_context;
    ibv.pd = pd;
    ibv.send_cq = req.send_cq;
    ibv.recv_cq = req.recv_cq;
    ibv.srq = req.srq;
    ibv.handle = qpn;
    ibv.qp_num = qpn;
    ibv.state = QpState::Reset as c_int;
    ibv.qp_type = req.qp_type;
    let qp = Box::into_raw(Box::new(Qp {
        ibv,
        ex: core::cell::UnsafeCell::new(crate::qp_ex::ops()),
        send_ops,
        batch: Default::default(),
        inline,
        inline_len,
    }));
    // SAFETY: fresh allocation; initialised once.
    unsafe {
        libc::pthread_mutex_init(&mut (*qp).ibv.mutex, core::ptr::null());
        libc::pthread_cond_init(&mut (*qp).ibv.cond, core::ptr::null());
    }
    QPS.insert(qp.cast(), qp);
    if let Some(c) = context(p.ibv.context) {
        c.events.set_qp(qpn, Some(qp.cast()));
    }
    qp.cast()
}

/// `ibv_destroy_qp(3)`.
#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_qp(qp: *mut IbvQp) -> c_int {
    let Some(q) = QPS.get(qp.cast()) else { return libc::EINVAL };
    let Ok((_, rt)) = rt_of(q.ibv.context) else { return libc::EINVAL };
    let r = rt.with(|d| {
        d.destroy_qp(q.ibv.qp_num)?;
        if let Some(m) = q.inline {
            d.dereg_mr(m.lkey)?;
        }
        Ok::<(), VerbsError>(())
    });
    match r {
        Ok(()) => {
            if let Some(c) = context(q.ibv.context) {
                c.events.set_qp(q.ibv.qp_num, None);
            }
            drop(QPS.take(qp.cast()));
            0
        }
        Err(e) => e.errno(),
    }
}

/// The MAC of the neighbour with GID `dgid`, from the kernel's neighbour table (ARP/ND), as
/// the kernel resolves it for rxe; a GID of this device is its own MAC (the engine loops such
/// frames back). `EHOSTUNREACH` when the neighbour does not answer.
pub(crate) fn resolve_dmac(
    c: &Context,
    dgid: uroce_transport::verbs::Gid,
    verb: &str,
) -> Result<uroce_wire::EthernetAddress, c_int> {
    let ip = dgid.to_ip();
    if c.dev.iface.addresses().contains(&ip) {
        return Ok(c.dev.iface.mac);
    }
    connect::peer_mac(Some(&c.dev.iface.name), ip).map_err(|e| {
        eprintln!("uroce: {verb}: {e:#}");
        libc::EHOSTUNREACH
    })
}

fn state(v: c_int) -> Option<QpState> {
    QpState::ALL.get(usize::try_from(v).ok()?).copied()
}

/// `ibv_modify_qp(3)`. At RTR with a path, the peer's MAC comes from the kernel's neighbour
/// table (ARP/ND), as the kernel resolves it for rxe.
#[no_mangle]
pub unsafe extern "C" fn ibv_modify_qp(qp: *mut IbvQp, attr: *mut QpAttrC, mask: c_int) -> c_int {
    let Some(q) = QPS.get(qp.cast()) else { return libc::EINVAL };
    let Ok((c, rt)) = rt_of(q.ibv.context) else { return libc::EINVAL };
    if attr.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: the caller's struct ibv_qp_attr.
    let a = unsafe { &*attr };
    let mask = QpAttrMask(mask as u32);
    let pick = |bit: QpAttrMask, v: c_int| -> Result<QpState, c_int> {
        if mask.contains(bit) {
            state(v).ok_or(libc::EINVAL)
        } else {
            Ok(QpState::Reset)
        }
    };
    let (to, cur) = match (pick(QpAttrMask::STATE, a.qp_state), pick(QpAttrMask::CUR_STATE, a.cur_qp_state)) {
        (Ok(t), Ok(c)) => (t, c),
        _ => return libc::EINVAL,
    };
    let g = &a.ah_attr.grh;
    let mut av = AddressVector {
        dgid: Gid(g.dgid),
        sgid_index: g.sgid_index,
        hop_limit: g.hop_limit,
        traffic_class: g.traffic_class,
        flow_label: g.flow_label,
        sl: a.ah_attr.sl,
        dmac: Default::default(),
    };
    if mask.contains(QpAttrMask::AV) {
        match resolve_dmac(c, av.dgid, "ibv_modify_qp") {
            Ok(m) => av.dmac = m,
            Err(e) => return e,
        }
    }
    let ea = QpAttr {
        qp_state: to,
        cur_qp_state: cur,
        path_mtu: Mtu::from_enum(a.path_mtu as u8).unwrap_or_default(),
        qp_access_flags: AccessFlags(a.qp_access_flags),
        pkey_index: a.pkey_index,
        port_num: a.port_num,
        qkey: a.qkey,
        ah_attr: av,
        dest_qp_num: a.dest_qp_num,
        rq_psn: a.rq_psn,
        sq_psn: a.sq_psn,
        timeout: a.timeout,
        retry_cnt: a.retry_cnt,
        rnr_retry: a.rnr_retry,
        min_rnr_timer: a.min_rnr_timer,
        max_rd_atomic: a.max_rd_atomic,
        max_dest_rd_atomic: a.max_dest_rd_atomic,
        en_sqd_async_notify: a.en_sqd_async_notify != 0,
    };
    if mask.contains(QpAttrMask::PATH_MTU) && Mtu::from_enum(a.path_mtu as u8).is_none() {
        return libc::EINVAL;
    }
    let qpn = q.ibv.qp_num;
    let r = rt.with(|d| {
        d.modify_qp(qpn, &ea, mask)?;
        if to == QpState::Reset && mask.contains(QpAttrMask::STATE) {
            // The engine dropped the QP's unpolled completions; those already moved too.
            for cq in [q.ibv.send_cq, q.ibv.recv_cq] {
                if let Some(c) = CQS.get(cq.cast()) {
                    c.watch.discard_qp(qpn);
                }
            }
        }
        d.query_qp(qpn)
    });
    match r {
        Ok(now) => {
            // SAFETY: `qp` is registered (looked up above); only its state word changes.
            unsafe { (*qp).state = now.qp_state as c_int };
            0
        }
        Err(e) => e.errno(),
    }
}

/// The C view of the engine's QP attributes (`ibv_query_qp`, `rdma_init_qp_attr`); `cap` is
/// left zero. The address vector is always global on port 1 (RoCE).
pub(crate) fn qp_attr_c(a: &QpAttr) -> QpAttrC {
    let av = a.ah_attr;
    QpAttrC {
        qp_state: a.qp_state as c_int,
        cur_qp_state: a.qp_state as c_int,
        path_mtu: a.path_mtu as c_int,
        path_mig_state: 0, // IBV_MIG_MIGRATED: no alternate path
        qkey: a.qkey,
        rq_psn: a.rq_psn,
        sq_psn: a.sq_psn,
        dest_qp_num: a.dest_qp_num,
        qp_access_flags: a.qp_access_flags.0,
        ah_attr: AhAttrC {
            grh: GlobalRoute {
                dgid: av.dgid.0,
                flow_label: av.flow_label,
                sgid_index: av.sgid_index,
                hop_limit: av.hop_limit,
                traffic_class: av.traffic_class,
            },
            sl: av.sl,
            is_global: 1,
            port_num: 1,
            ..AhAttrC::default()
        },
        pkey_index: a.pkey_index,
        max_rd_atomic: a.max_rd_atomic,
        max_dest_rd_atomic: a.max_dest_rd_atomic,
        min_rnr_timer: a.min_rnr_timer,
        port_num: 1,
        timeout: a.timeout,
        retry_cnt: a.retry_cnt,
        rnr_retry: a.rnr_retry,
        ..QpAttrC::default()
    }
}

/// `ibv_query_qp(3)`.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_qp(
    qp: *mut IbvQp,
    attr: *mut QpAttrC,
    _mask: c_int,
    init: *mut QpInitAttrC,
) -> c_int {
    let Some(q) = QPS.get(qp.cast()) else { return libc::EINVAL };
    let Ok((_, rt)) = rt_of(q.ibv.context) else { return libc::EINVAL };
    if attr.is_null() || init.is_null() {
        return libc::EINVAL;
    }
    let qpn = q.ibv.qp_num;
    let Some((a, cap, sig)) = rt.with(|d| {
        let a = d.query_qp(qpn).ok()?;
        let qp = d.qp(qpn)?;
        Some((a, qp.cap(), qp.sq_sig_all()))
    }) else {
        return libc::EINVAL;
    };
    let capc = QpCapC {
        max_send_wr: cap.max_send_wr,
        max_recv_wr: cap.max_recv_wr,
        max_send_sge: cap.max_send_sge,
        max_recv_sge: cap.max_recv_sge,
        max_inline_data: cap.max_inline_data,
    };
    let out = QpAttrC { cap: capc, ..qp_attr_c(&a) };
    // SAFETY: the caller's structs.
    unsafe {
        attr.write(out);
        let i = &mut *init;
        i.qp_context = q.ibv.qp_context;
        i.send_cq = q.ibv.send_cq;
        i.recv_cq = q.ibv.recv_cq;
        i.srq = q.ibv.srq;
        i.cap = capc;
        i.qp_type = q.ibv.qp_type;
        i.sq_sig_all = sig as c_int;
    }
    0
}

/// `ibv_query_qp_data_in_order(3)`: the engine places every packet's payload in PSN order, a
/// message's bytes before any later message's, so data is in order for every operation: 1,
/// or with `IBV_QUERY_QP_DATA_IN_ORDER_RETURN_CAPS` the capabilities `WHOLE_MSG |
/// ALIGNED_128_BYTES`. `EINVAL` for a QP that is not ours.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_qp_data_in_order(qp: *mut IbvQp, _op: c_int, flags: u32) -> c_int {
    if QPS.get(qp.cast()).is_none() {
        return -libc::EINVAL;
    }
    const RETURN_CAPS: u32 = 1;
    if flags & RETURN_CAPS != 0 {
        (1 << 1) | 1
    } else {
        1
    }
}

/// At most this many SGEs per WR are read from the program.
const MAX_SGE: usize = 32;

/// The SGEs of a WR, checked for count.
pub(crate) unsafe fn sges(list: *const SgeC, n: c_int) -> Option<([Sge; MAX_SGE], usize)> {
    let n = usize::try_from(n).ok().filter(|&n| n <= MAX_SGE)?;
    if n > 0 && list.is_null() {
        return None;
    }
    let mut out = [Sge::default(); MAX_SGE];
    for (i, o) in out.iter_mut().enumerate().take(n) {
        // SAFETY: the caller's array of `n` SGEs.
        let s = unsafe { list.add(i).read() };
        *o = Sge { addr: s.addr, length: s.length, lkey: s.lkey };
    }
    Some((out, n))
}

fn wr_opcode(v: c_int) -> Option<WrOpcode> {
    Some(match v {
        0 => WrOpcode::RdmaWrite,
        1 => WrOpcode::RdmaWriteWithImm,
        2 => WrOpcode::Send,
        3 => WrOpcode::SendWithImm,
        4 => WrOpcode::RdmaRead,
        5 => WrOpcode::AtomicCmpAndSwp,
        6 => WrOpcode::AtomicFetchAndAdd,
        9 => WrOpcode::SendWithInv,
        _ => return None,
    })
}

/// Post a chain of WRs (`W`: `ibv_send_wr` or `ibv_recv_wr`) under one lock of the engine of
/// `ctx` (`None`: not an object of ours, `EINVAL`): `one` posts a WR and returns the next; the
/// first WR that fails is `*bad_wr`.
pub(crate) fn post_list<W>(
    ctx: Option<*mut IbvContext>,
    wr: *mut c_void,
    bad: *mut *mut c_void,
    mut one: impl FnMut(&mut uroce_transport::Device, *mut W) -> Result<*mut W, c_int>,
) -> c_int {
    let set_bad = |w: *mut c_void| {
        if !bad.is_null() {
            // SAFETY: the caller's `struct ibv_*_wr **`.
            unsafe { *bad = w };
        }
    };
    let Some(Ok((_, rt))) = ctx.map(rt_of) else {
        set_bad(wr);
        return libc::EINVAL;
    };
    let mut w = wr.cast::<W>();
    rt.with(|d| {
        while !w.is_null() {
            match one(d, w) {
                Ok(next) => w = next,
                Err(e) => {
                    set_bad(w.cast());
                    return e;
                }
            }
        }
        0
    })
}

/// [`post_list`] to QP `qp`.
fn post_chain<W>(
    qp: *mut c_void,
    wr: *mut c_void,
    bad: *mut *mut c_void,
    mut one: impl FnMut(&mut uroce_transport::Device, &Qp, *mut W) -> Result<*mut W, c_int>,
) -> c_int {
    match QPS.get(qp) {
        Some(q) => post_list(Some(q.ibv.context), wr, bad, |d, w| one(d, q, w)),
        None => post_list::<W>(None, wr, bad, |_, _| Err(libc::EINVAL)),
    }
}

/// Where a send WR's data comes from: SGEs (read from the program's memory now when the WR
/// is inline), or inline bytes already copied (`ibv_wr_set_inline_data`).
pub(crate) enum Gather<'a> {
    Sges(&'a [Sge]),
    Bytes(&'a [u8]),
}

/// A send WR as both posting interfaces give it (`ibv_post_send`'s struct, the `ibv_wr_*` calls).
pub(crate) struct Post<'a> {
    pub wr_id: u64,
    pub opcode: WrOpcode,
    pub flags: SendFlags,
    /// Immediate data (network order) or the rkey to invalidate.
    pub imm_data: u32,
    pub remote_addr: u64,
    pub rkey: u32,
    pub compare_add: u64,
    pub swap: u64,
    /// UD: the `struct ibv_ah *`, remote QPN and Q_Key.
    pub ud: Option<(*const c_void, u32, u32)>,
    pub data: Gather<'a>,
}

impl Post<'_> {
    /// Inline data: its length and where it is staged (the QP's staging MR) for the engine.
    fn staging(&self, q: &Qp) -> Result<Option<(usize, MrInfo)>, c_int> {
        if !self.flags.contains(SendFlags::INLINE) || self.opcode.is_read_or_atomic() {
            return Ok(None);
        }
        let total = match self.data {
            Gather::Sges(list) => list.iter().map(|s| s.length as usize).sum(),
            Gather::Bytes(b) => b.len(),
        };
        if total == 0 {
            return Ok(None);
        }
        let st = q.inline.filter(|_| total <= q.inline_len).ok_or(libc::EINVAL)?;
        Ok(Some((total, st)))
    }

    /// The engine's WR: `one` holds the staging SGE of inline data.
    fn engine_wr<'s>(&'s self, q: &Qp, one: &'s mut [Sge; 1]) -> Result<SendWr<'s>, c_int> {
        let sg_list: &[Sge] = match (self.staging(q)?, &self.data) {
            (Some((total, st)), _) => {
                one[0] = Sge { addr: st.addr, length: total as u32, lkey: st.lkey };
                &one[..]
            }
            (None, Gather::Sges(list)) => list,
            // Inline and empty: no data at all.
            (None, Gather::Bytes(_)) => &[],
        };
        let ud = match (q.ibv.qp_type, self.ud) {
            (4, Some((ah, remote_qpn, remote_qkey))) => {
                let ah = crate::ah::AHS.get(ah).ok_or(libc::EINVAL)?;
                Some(UdDest { ah: ah.engine, remote_qpn, remote_qkey })
            }
            (4, None) => return Err(libc::EINVAL),
            _ => None,
        };
        Ok(SendWr {
            ud,
            wr_id: self.wr_id,
            opcode: self.opcode,
            sg_list,
            send_flags: self.flags,
            // `imm_data` is `__be32` (its bytes go on the wire as they are); `invalidate_rkey`,
            // which shares its place, is host order.
            imm_data: u32::from_be(self.imm_data),
            invalidate_rkey: self.imm_data,
            remote_addr: self.remote_addr,
            rkey: self.rkey,
            compare_add: self.compare_add,
            swap: self.swap,
        })
    }

    /// Copy inline data into the QP's staging MR, which the engine gathers from when the WR
    /// is posted (the program's bytes need no MR).
    fn stage(&self, d: &mut uroce_transport::Device, q: &Qp) -> Result<(), c_int> {
        let Some((_, st)) = self.staging(q)? else { return Ok(()) };
        let dst = d.mr_mut(st.lkey).ok_or(libc::EINVAL)?.as_mut_slice();
        match self.data {
            Gather::Sges(list) => {
                let mut at = 0;
                for s in list {
                    let len = s.length as usize;
                    // SAFETY: inline data is the program's readable memory of that length.
                    let src = unsafe { core::slice::from_raw_parts(s.addr as *const u8, len) };
                    dst[at..at + len].copy_from_slice(src);
                    at += len;
                }
            }
            Gather::Bytes(b) => dst[..b.len()].copy_from_slice(b),
        }
        Ok(())
    }
}

/// Post one WR to `q`.
pub(crate) fn post_one(d: &mut uroce_transport::Device, q: &Qp, p: &Post) -> Result<(), c_int> {
    let mut one = [Sge::default()];
    let wr = p.engine_wr(q, &mut one)?;
    p.stage(d, q)?;
    d.post_send(q.ibv.qp_num, &wr).map_err(|e| e.errno())
}

/// Post `posts` to `q` all or none ([`uroce_transport::Device::post_send_all`]).
pub(crate) fn post_all(d: &mut uroce_transport::Device, q: &Qp, posts: &[Post]) -> Result<(), c_int> {
    let mut ones = vec![[Sge::default()]; posts.len()];
    let wrs = posts.iter().zip(ones.iter_mut()).map(|(p, one)| p.engine_wr(q, one)).collect::<Result<Vec<_>, _>>()?;
    let mut staged = Ok(());
    let r = d.post_send_all(q.ibv.qp_num, &wrs, |d, i| {
        if staged.is_ok() {
            staged = posts[i].stage(d, q);
        }
    });
    staged?;
    r.map_err(|(_, e)| e.errno())
}

/// `ops.post_send`.
pub unsafe extern "C" fn post_send(qp: *mut c_void, wr: *mut c_void, bad: *mut *mut c_void) -> c_int {
    post_chain(qp, wr, bad, |d, q, w: *mut SendWrC| {
        // SAFETY: the caller's chain of struct ibv_send_wr.
        let c = unsafe { &*w };
        // SAFETY: its SGE array.
        let (list, n) = unsafe { sges(c.sg_list, c.num_sge) }.ok_or(libc::EINVAL)?;
        let opcode = wr_opcode(c.opcode).ok_or(libc::EINVAL)?;
        let atomic = opcode.is_atomic();
        let p = Post {
            wr_id: c.wr_id,
            opcode,
            flags: SendFlags(c.send_flags),
            imm_data: c.imm_data,
            remote_addr: c.remote_addr,
            rkey: if atomic { c.atomic_rkey } else { c.rkey_or_compare_add as u32 },
            compare_add: if atomic { c.rkey_or_compare_add } else { 0 },
            swap: c.swap,
            // wr.ud: { struct ibv_ah *ah; uint32_t remote_qpn; uint32_t remote_qkey; }
            ud: Some((
                c.remote_addr as *const c_void,
                c.rkey_or_compare_add as u32,
                (c.rkey_or_compare_add >> 32) as u32,
            )),
            data: Gather::Sges(&list[..n]),
        };
        post_one(d, q, &p)?;
        Ok(c.next)
    })
}

/// `ops.post_recv`.
pub unsafe extern "C" fn post_recv(qp: *mut c_void, wr: *mut c_void, bad: *mut *mut c_void) -> c_int {
    post_chain(qp, wr, bad, |d, q, w: *mut RecvWrC| {
        // SAFETY: the caller's chain of struct ibv_recv_wr.
        let c = unsafe { &*w };
        // SAFETY: its SGE array.
        let (list, n) = unsafe { sges(c.sg_list, c.num_sge) }.ok_or(libc::EINVAL)?;
        d.post_recv(q.ibv.qp_num, &RecvWr { wr_id: c.wr_id, sg_list: &list[..n] }).map_err(|e| e.errno())?;
        Ok(c.next)
    })
}

/// Destroy every QP, MR, CQ and PD of `ctx` (and its completion channels) that the program did
/// not, in the order the verbs need (`ibv_close_device`).
pub(crate) fn release_all(ctx: *mut IbvContext) {
    // SAFETY (each call): the handles come from the registries, filtered by their context.
    unsafe {
        for q in QPS.keys_where(|q| q.ibv.context == ctx) {
            ibv_destroy_qp(q.cast());
        }
        for a in crate::ah::AHS.keys_where(|a| a.ibv.context == ctx) {
            crate::ah::ibv_destroy_ah(a.cast());
        }
        for s in crate::srq::SRQS.keys_where(|s| s.ibv.context == ctx) {
            crate::srq::ibv_destroy_srq(s.cast());
        }
        for m in MRS.keys_where(|m| m.ibv.context == ctx) {
            ibv_dereg_mr(m.cast());
        }
        for c in CQS.keys_where(|c| c.ibv.context == ctx) {
            // events handed out and never acknowledged: acknowledge them, or this would wait
            let cq = c.cast::<IbvCq>();
            if let Some(x) = CQS.get(c) {
                let n = x.events_read.load(std::sync::atomic::Ordering::Acquire);
                crate::events::ibv_ack_cq_events(cq, n.wrapping_sub((*cq).comp_events_completed));
            }
            ibv_destroy_cq(cq);
        }
        for p in PDS.keys_where(|p| p.ibv.context == ctx) {
            ibv_dealloc_pd(p.cast());
        }
        for ch in crate::events::CHANNELS.keys_where(|ch| ch.ibv.context == ctx) {
            crate::events::ibv_destroy_comp_channel(ch.cast());
        }
    }
}

/// Whether the engine behind `ctx` still holds the MR with `lkey` (for tests of
/// `ibv_close_device`'s clean-up).
#[doc(hidden)]
pub fn engine_has_mr(ctx: *mut IbvContext, lkey: u32) -> bool {
    rt_of(ctx).is_ok_and(|(_, rt)| rt.with(|d| d.mr(lkey).is_some()))
}
