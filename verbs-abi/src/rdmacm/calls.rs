//! The librdmacm calls (`rdma_cma.h`; their man pages are the contract). Each returns 0, or
//! -1 with `errno` set, as librdmacm does; a NULL, foreign or destroyed handle is `EINVAL`.
//! They are exported as `uroce_rdma_*`; `librdmacm.so.1`'s `rdma_*` jump here.

use super::abi::*;
use super::channel::Channel;
use super::{event_name, from_sockaddr, host, lock, to_storage, Id, CHANNELS, EVENTS, IDS};
use crate::abi::{IbvContext, IbvPd, QpAttrC, QpInitAttrC};
use crate::device::{devices, Device};
use crate::set_errno;
use core::ffi::{c_char, c_int, c_void};
use core::ptr::null_mut;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::atomic::Ordering;
use uroce_transport::rdmacm::{ConnParam, EventKind, IdHandle, RdmaCmError, Route};
use uroce_transport::verbs::{Gid, QpState};
use uroce_wire::cm::ip::PortSpace;

pub(super) fn err(e: c_int) -> c_int {
    set_errno(e);
    -1
}

fn cm_err(e: RdmaCmError) -> c_int {
    tracing::debug!(%e, "rdma_cm call failed");
    err(e.errno())
}

fn port_space(ps: c_int) -> Option<PortSpace> {
    Some(match ps {
        RDMA_PS_TCP => PortSpace::Tcp,
        RDMA_PS_UDP => PortSpace::Udp,
        RDMA_PS_IB => PortSpace::Ib,
        RDMA_PS_IPOIB => PortSpace::Ipoib,
        _ => return None,
    })
}

pub(super) fn id_of<'a>(id: *mut RdmaCmIdC) -> Result<&'a Id, c_int> {
    IDS.get(id.cast()).ok_or(libc::EINVAL)
}

/// The device and engine handle of a bound or resolved ID.
fn bound(id: &Id) -> Result<(&'static Device, IdHandle), c_int> {
    (*lock(&id.at)).ok_or(libc::EINVAL)
}

/// The device whose interface holds `ip` (the unspecified address: the first device with an
/// address, as a wildcard listener here serves one device).
fn device_of(ip: IpAddr) -> Option<&'static Device> {
    let devs = devices();
    if ip.is_unspecified() {
        return devs.into_iter().find(|d| !d.iface.addresses().is_empty() && d.iface.name != "lo");
    }
    devs.into_iter().find(|d| d.iface.addresses().contains(&ip))
}

/// Run `f` on the ID's device's RDMA-CM with the engine at hand (the port's lock, then the
/// host's), then let the progress threads deliver what it queued.
fn with_cm<R>(
    dev: &'static Device,
    f: impl FnOnce(&mut super::CmHost, &mut uroce_io::runtime::Port) -> R,
) -> Result<R, c_int> {
    let (h, ctx) = host(dev)?;
    let (_, rt) = crate::datapath::rt_of((&ctx.vctx.context as *const IbvContext).cast_mut())?;
    Ok(rt.with_port(|port| {
        let mut g = lock(&h);
        f(&mut g, port)
    }))
}

/// The ID's engine handle on `dev`, made when it is first bound there.
fn attach(id: &Id, dev: &'static Device, ps: PortSpace) -> Result<IdHandle, c_int> {
    let mut at = lock(&id.at);
    match *at {
        Some((d, h)) if core::ptr::eq(d, dev) => Ok(h),
        Some(_) => Err(libc::EINVAL),
        None => {
            let me = id as *const Id as usize;
            let h = with_cm(dev, |g, _| {
                let h = g.cm.create_id(ps).map_err(|e| e.errno())?;
                g.ids.insert(h, me);
                Ok::<_, c_int>(h)
            })??;
            *at = Some((dev, h));
            Ok(h)
        }
    }
}

/// Write the addresses the engine knows into an ID's `route.addr` (those it knows: a `None`
/// leaves the field as it is).
///
/// # Safety
/// `id` is a registered ID that the program does not use concurrently with this call.
unsafe fn set_addrs(id: *mut RdmaCmIdC, src: Option<SocketAddr>, dst: Option<SocketAddr>) {
    // SAFETY: the caller's guarantee.
    let a = unsafe { &mut (*id).route.addr };
    if let Some(s) = src {
        a.src = to_storage(s);
    }
    if let Some(d) = dst {
        a.dst = to_storage(d);
    }
}

/// `rdma_create_event_channel(3)`.
#[no_mangle]
pub extern "C" fn uroce_rdma_create_event_channel() -> *mut RdmaEventChannelC {
    match Channel::register() {
        Ok(c) => c,
        Err(e) => {
            set_errno(e);
            null_mut()
        }
    }
}

/// `rdma_destroy_event_channel(3)`.
#[no_mangle]
pub unsafe extern "C" fn uroce_rdma_destroy_event_channel(ch: *mut RdmaEventChannelC) {
    drop(CHANNELS.take(ch.cast()));
}

/// The program's channel (checked), or for NULL a new one the ID owns: (channel, synchronous).
fn channel_or_own(ch: *mut RdmaEventChannelC) -> Result<(*mut RdmaEventChannelC, bool), c_int> {
    match ch.is_null() {
        true => Channel::register().map(|c| (c, true)),
        false if CHANNELS.get(ch.cast()).is_some() => Ok((ch, false)),
        false => Err(libc::EINVAL),
    }
}

/// `rdma_create_id(3)`. Without a channel the ID is synchronous: it gets a channel of its own,
/// and the calls that lead to an event return when it has come (librdmacm `ucma_complete`).
#[no_mangle]
pub unsafe extern "C" fn uroce_rdma_create_id(
    ch: *mut RdmaEventChannelC,
    out: *mut *mut RdmaCmIdC,
    context: *mut c_void,
    ps: c_int,
) -> c_int {
    if out.is_null() || port_space(ps).is_none() {
        return err(libc::EINVAL);
    }
    let (ch, sync) = match channel_or_own(ch) {
        Ok(c) => c,
        Err(e) => return err(e),
    };
    // SAFETY: all-zero is a valid rdma_cm_id (NULL pointers, zero integers).
    let mut c: RdmaCmIdC = unsafe { core::mem::zeroed() };
    c.channel = ch;
    c.context = context;
    c.ps = ps;
    c.port_num = 1;
    c.qp_type = if ps == RDMA_PS_UDP || ps == RDMA_PS_IPOIB { IBV_QPT_UD } else { IBV_QPT_RC };
    let id = Box::into_raw(Box::new(Id::new(c, None, sync)));
    IDS.insert(id.cast(), id);
    // SAFETY: the caller's out-pointer, checked non-NULL.
    unsafe { *out = id.cast() };
    0
}

/// `rdma_destroy_id(3)`: the peer is told (REJ, DREQ or DREP) as the CM requires. The ID
/// leaves its device's table first, under the host's lock, so that the progress thread (which
/// finds IDs only through that table) is done with it before it is freed.
#[no_mangle]
pub unsafe extern "C" fn uroce_rdma_destroy_id(id: *mut RdmaCmIdC) -> c_int {
    let Ok(i) = id_of(id) else { return err(libc::EINVAL) };
    let at = *lock(&i.at);
    if let Some((dev, h)) = at {
        let _ = with_cm(dev, |g, port| {
            g.ids.remove(&h);
            let listened = g.cm.listening(h).then(|| g.cm.service_id(h).ok()).flatten();
            let _ = g.cm.destroy_id(port.now(), h);
            if let Some(sid) = listened {
                port.unlisten_service(sid);
            }
        });
    }
    // SAFETY: a registered ID.
    unsafe { ack_kept(id) };
    let Some(i) = IDS.take(id.cast()) else { return err(libc::EINVAL) };
    if i.sync.load(Ordering::Relaxed) {
        drop(CHANNELS.take(i.c.channel.cast()));
    }
    0
}

/// Acknowledge the event a synchronous call kept in `id->event`.
///
/// # Safety
/// `id` is a registered ID.
pub(super) unsafe fn ack_kept(id: *mut RdmaCmIdC) {
    // SAFETY: the caller's guarantee.
    let e = unsafe { core::mem::replace(&mut (*id).event, null_mut()) };
    if !e.is_null() {
        // SAFETY: an event this library handed out.
        unsafe { uroce_rdma_ack_cm_event(e) };
    }
}

/// librdmacm `ucma_complete`: after a call `r` that succeeded, a synchronous ID waits for the
/// event the call leads to, keeps it in `id->event`, and fails as the event did (`REJECTED`:
/// `ECONNREFUSED`; otherwise the status as an errno).
///
/// # Safety
/// `id` is NULL or an ID the program holds.
pub(super) unsafe fn complete(id: *mut RdmaCmIdC, r: c_int) -> c_int {
    let Ok(i) = id_of(id) else { return r };
    if r != 0 || !i.sync.load(Ordering::Relaxed) {
        return r;
    }
    // SAFETY: a registered ID.
    unsafe { ack_kept(id) };
    let mut ev = null_mut();
    // SAFETY: the ID's own channel; `ev` receives the event.
    if unsafe { uroce_rdma_get_cm_event(i.c.channel, &mut ev) } != 0 {
        return -1;
    }
    // SAFETY: the ID and the event just handed out.
    let (kind, status) = unsafe {
        (*id).event = ev;
        ((*ev).event, (*ev).status)
    };
    match status {
        0 => 0,
        _ if kind == EventKind::Rejected as c_int => err(libc::ECONNREFUSED),
        s => err(s.abs()),
    }
}

/// `rdma_bind_addr(3)`.
#[no_mangle]
pub unsafe extern "C" fn uroce_rdma_bind_addr(id: *mut RdmaCmIdC, addr: *mut libc::sockaddr) -> c_int {
    let Ok(i) = id_of(id) else { return err(libc::EINVAL) };
    // SAFETY: the caller's sockaddr.
    let Some(a) = (unsafe { from_sockaddr(addr) }) else { return err(libc::EAFNOSUPPORT) };
    let Some(ps) = port_space(i.c.ps) else { return err(libc::EINVAL) };
    let Some(dev) = device_of(a.ip()) else { return err(libc::EADDRNOTAVAIL) };
    let h = match attach(i, dev, ps) {
        Ok(h) => h,
        Err(e) => return err(e),
    };
    match with_cm(dev, |g, _| g.cm.bind_addr(h, a).map(|()| (g.ctx, g.pd, g.cm.addrs(h)))) {
        Ok(Ok((ctx, pd, addrs))) => {
            let idc = id.cast::<RdmaCmIdC>();
            // SAFETY: a registered ID; the program does not use it concurrently with this call.
            unsafe {
                if !a.ip().is_unspecified() {
                    (*idc).verbs = ctx;
                    (*idc).pd = pd;
                }
                if let Some((src, _)) = addrs {
                    set_addrs(idc, src, None);
                }
            }
            0
        }
        Ok(Err(e)) => cm_err(e),
        Err(e) => err(e),
    }
}

/// The source address the kernel's routing table picks for `dst` (a connected UDP socket
/// sends nothing).
fn kernel_source(dst: SocketAddr) -> Option<IpAddr> {
    let any: SocketAddr = if dst.is_ipv4() { "0.0.0.0:0".parse().ok()? } else { "[::]:0".parse().ok()? };
    let s = UdpSocket::bind(any).ok()?;
    s.connect(SocketAddr::new(dst.ip(), dst.port().max(1))).ok()?;
    s.local_addr().ok().map(|a| a.ip())
}

/// `rdma_resolve_addr(3)`: the route from the kernel's tables (source address, the neighbour's
/// MAC), then `RDMA_CM_EVENT_ADDR_RESOLVED`.
#[no_mangle]
pub unsafe extern "C" fn uroce_rdma_resolve_addr(
    id: *mut RdmaCmIdC,
    src: *mut libc::sockaddr,
    dst: *mut libc::sockaddr,
    _timeout_ms: c_int,
) -> c_int {
    let Ok(i) = id_of(id) else { return err(libc::EINVAL) };
    // SAFETY: the caller's sockaddrs.
    let (src, dst) = unsafe { (from_sockaddr(src), from_sockaddr(dst)) };
    let Some(dst) = dst else { return err(libc::EINVAL) };
    let Some(ps) = port_space(i.c.ps) else { return err(libc::EINVAL) };
    let bound_src = match *lock(&i.at) {
        Some((d, h)) => with_cm(d, |g, _| g.cm.addrs(h)).ok().flatten().and_then(|a| a.0),
        None => None,
    };
    let src_ip = match src.or(bound_src).map(|s| s.ip()).filter(|ip| !ip.is_unspecified()) {
        Some(ip) => ip,
        None => match kernel_source(dst) {
            Some(ip) => ip,
            None => return err(libc::ENETUNREACH),
        },
    };
    let Some(dev) = device_of(src_ip) else { return err(libc::EADDRNOTAVAIL) };
    let h = match attach(i, dev, ps) {
        Ok(h) => h,
        Err(e) => return err(e),
    };
    let dmac = match uroce_io::runtime::connect::peer_mac(Some(&dev.iface.name), dst.ip()) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("uroce: rdma_resolve_addr: {e:#}");
            return err(libc::EHOSTUNREACH);
        }
    };
    let Some(sgid_index) = dev.gids.iter().position(|g| *g == Gid::from_ip(src_ip)) else {
        return err(libc::EADDRNOTAVAIL);
    };
    let r = with_cm(dev, |g, port| {
        let route = Route {
            src: src_ip,
            dst: dst.ip(),
            sgid_index: sgid_index as u8,
            dmac,
            mtu: port.device().config().active_mtu,
        };
        g.cm.resolve_addr(h, dst, route).map(|()| (g.ctx, g.pd, g.cm.addrs(h)))
    });
    match r {
        Ok(Ok((ctx, pd, addrs))) => {
            // SAFETY: a registered ID, not used concurrently by the program during this call.
            unsafe {
                (*id).verbs = ctx;
                if (*id).pd.is_null() {
                    (*id).pd = pd;
                }
                if let Some((s, d)) = addrs {
                    set_addrs(id, s, d);
                }
                (*id).route.addr.ibaddr.sgid = Gid::from_ip(src_ip).0;
                (*id).route.addr.ibaddr.dgid = Gid::from_ip(dst.ip()).0;
                (*id).route.addr.ibaddr.pkey = 0xffffu16.to_be();
                complete(id, 0)
            }
        }
        Ok(Err(e)) => cm_err(e),
        Err(e) => err(e),
    }
}

/// Run one RDMA-CM call on a bound ID's device.
fn on_cm(
    id: *mut RdmaCmIdC,
    f: impl FnOnce(&mut super::CmHost, &mut uroce_io::runtime::Port, IdHandle) -> Result<(), RdmaCmError>,
) -> c_int {
    let Ok(i) = id_of(id) else { return err(libc::EINVAL) };
    let Ok((dev, h)) = bound(i) else { return err(libc::EINVAL) };
    match with_cm(dev, |g, port| f(g, port, h)) {
        Ok(Ok(())) => 0,
        Ok(Err(e)) => cm_err(e),
        Err(e) => err(e),
    }
}

/// `rdma_resolve_route(3)`: `RDMA_CM_EVENT_ROUTE_RESOLVED`.
#[no_mangle]
pub unsafe extern "C" fn uroce_rdma_resolve_route(id: *mut RdmaCmIdC, _timeout_ms: c_int) -> c_int {
    // SAFETY: the caller's ID.
    unsafe { complete(id, on_cm(id, |g, _, h| g.cm.resolve_route(h))) }
}

/// `rdma_listen(3)`.
#[no_mangle]
pub unsafe extern "C" fn uroce_rdma_listen(id: *mut RdmaCmIdC, _backlog: c_int) -> c_int {
    let Ok(i) = id_of(id) else { return err(libc::EINVAL) };
    let Ok((dev, h)) = bound(i) else { return err(libc::EINVAL) };
    let r = with_cm(dev, |g, port| {
        let sid = g.cm.service_id(h).map_err(|e| e.errno())?;
        // Another process on the interface may listen on it (the kernel's port space is the
        // host's: EADDRINUSE, as a second bind would give).
        port.listen_service(sid).map_err(|e| match e.kind() {
            std::io::ErrorKind::AddrInUse => libc::EADDRINUSE,
            _ => e.raw_os_error().unwrap_or(libc::EIO),
        })?;
        g.cm.listen(h).map_err(|e| {
            port.unlisten_service(sid);
            e.errno()
        })
    });
    match r {
        Ok(Ok(())) => 0,
        Ok(Err(e)) | Err(e) => err(e),
    }
}

/// `rdma_create_qp(3)` (librdmacm `rdma_create_qp_ex`): a QP in `pd` (NULL: the ID's), with a
/// CQ on a completion channel of its own (`id->send_cq`, `id->recv_cq` and their channels) for
/// each queue the program gives none for; a connected QP goes to INIT, a UD QP to RTS.
#[no_mangle]
pub unsafe extern "C" fn uroce_rdma_create_qp(id: *mut RdmaCmIdC, pd: *mut IbvPd, init: *mut QpInitAttrC) -> c_int {
    let Ok(i) = id_of(id) else { return err(libc::EINVAL) };
    // SAFETY: a registered ID and the caller's init attributes.
    let (a, pd) = unsafe {
        let pd = if pd.is_null() { (*id).pd } else { pd };
        if init.is_null() || i.c.verbs.is_null() || !(*id).qp.is_null() || pd.is_null() {
            return err(libc::EINVAL);
        }
        (&mut *init, pd)
    };
    // SAFETY: a registered ID, not used concurrently by the program during this call.
    let fresh = unsafe {
        let send = if a.send_cq.is_null() && (*id).send_cq.is_null() { a.cap.max_send_wr } else { 0 };
        let recv = if a.recv_cq.is_null() && (*id).recv_cq.is_null() { a.cap.max_recv_wr } else { 0 };
        if create_cqs(id, send, recv).is_err() {
            return -1;
        }
        if a.send_cq.is_null() {
            a.send_cq = (*id).send_cq.cast();
        }
        if a.recv_cq.is_null() {
            a.recv_cq = (*id).recv_cq.cast();
        }
        send != 0 || recv != 0
    };
    // SAFETY: the caller's init attributes and a PD of ours.
    let qp = unsafe { crate::datapath::ibv_create_qp(pd, init) };
    let r = if qp.is_null() {
        -1
    } else {
        // SAFETY: a QP ibv_create_qp just returned.
        let qpn = unsafe { (*qp).qp_num };
        on_cm(id, |g, port, h| g.cm.set_qp(port.device(), h, qpn))
    };
    if r != 0 {
        let e = crate::errno();
        // SAFETY: the QP just created (if any) and the ID's CQs made for it.
        unsafe {
            if !qp.is_null() {
                crate::datapath::ibv_destroy_qp(qp);
            }
            if fresh {
                destroy_cqs(id);
            }
        }
        return err(e);
    }
    // SAFETY: a registered ID.
    unsafe {
        (*id).qp = qp;
        (*id).pd = pd;
    }
    0
}

/// librdmacm `ucma_create_cqs`: a completion channel and a CQ of `send` and of `recv` entries
/// (0: none), the ID as the CQ's context.
///
/// # Safety
/// `id` is a registered ID with a context.
unsafe fn create_cqs(id: *mut RdmaCmIdC, send: u32, recv: u32) -> Result<(), ()> {
    // SAFETY: the caller's guarantee; each object is checked before it is stored.
    unsafe {
        let ctx = (*id).verbs;
        for (size, chan, cq) in [
            (recv, &raw mut (*id).recv_cq_channel, &raw mut (*id).recv_cq),
            (send, &raw mut (*id).send_cq_channel, &raw mut (*id).send_cq),
        ] {
            if size == 0 {
                continue;
            }
            let ch = crate::events::ibv_create_comp_channel(ctx);
            if ch.is_null() {
                destroy_cqs(id);
                return Err(());
            }
            *chan = ch.cast();
            let c = crate::datapath::ibv_create_cq(ctx, size as c_int, id.cast(), ch, 0);
            if c.is_null() {
                destroy_cqs(id);
                return Err(());
            }
            *cq = c.cast();
        }
    }
    Ok(())
}

/// librdmacm `ucma_destroy_cqs`: the ID's CQs and completion channels.
///
/// # Safety
/// `id` is a registered ID.
unsafe fn destroy_cqs(id: *mut RdmaCmIdC) {
    // SAFETY: the caller's guarantee; the objects are the ID's (ours).
    unsafe {
        let (s, r) =
            (core::mem::replace(&mut (*id).send_cq, null_mut()), core::mem::replace(&mut (*id).recv_cq, null_mut()));
        for cq in if s == r { [r, null_mut()] } else { [r, s] } {
            if !cq.is_null() {
                crate::datapath::ibv_destroy_cq(cq.cast());
            }
        }
        let (s, r) = (
            core::mem::replace(&mut (*id).send_cq_channel, null_mut()),
            core::mem::replace(&mut (*id).recv_cq_channel, null_mut()),
        );
        for ch in if s == r { [r, null_mut()] } else { [r, s] } {
            if !ch.is_null() {
                crate::events::ibv_destroy_comp_channel(ch.cast());
            }
        }
    }
}

/// `rdma_destroy_qp(3)`: the QP, then the CQs `rdma_create_qp` made for it.
#[no_mangle]
pub unsafe extern "C" fn uroce_rdma_destroy_qp(id: *mut RdmaCmIdC) {
    if id_of(id).is_err() {
        return;
    }
    // SAFETY: a registered ID.
    let qp = unsafe { core::mem::replace(&mut (*id).qp, null_mut()) };
    if !qp.is_null() {
        // SAFETY: the ID's QP.
        unsafe { crate::datapath::ibv_destroy_qp(qp) };
    }
    // SAFETY: a registered ID.
    unsafe { destroy_cqs(id) };
}

/// The engine's view of a `struct rdma_conn_param` (NULL: librdmacm's defaults for
/// `rdma_connect`, the device's most READs/atomics each way and retries 7 and 7).
///
/// # Safety
/// `p` is NULL or the caller's struct, its private data `private_data_len` bytes.
unsafe fn conn_param<'a>(p: *const RdmaConnParamC) -> ConnParam<'a> {
    if p.is_null() {
        return ConnParam {
            private_data: &[],
            responder_resources: uroce_transport::rdmacm::MAX_RD_ATOMIC,
            initiator_depth: uroce_transport::rdmacm::MAX_RD_ATOMIC,
            retry_count: 7,
            rnr_retry_count: 7,
            srq: false,
            qp_num: 0,
        };
    }
    // SAFETY: the caller's struct.
    let c = unsafe { &*p };
    let private_data = if c.private_data.is_null() || c.private_data_len == 0 {
        &[][..]
    } else {
        // SAFETY: the caller's private data of the length it gives.
        unsafe { core::slice::from_raw_parts(c.private_data.cast::<u8>(), c.private_data_len as usize) }
    };
    ConnParam {
        private_data,
        responder_resources: c.responder_resources,
        initiator_depth: c.initiator_depth,
        retry_count: c.retry_count,
        rnr_retry_count: c.rnr_retry_count,
        srq: c.srq != 0,
        qp_num: c.qp_num,
    }
}

/// `rdma_connect(3)`.
#[no_mangle]
pub unsafe extern "C" fn uroce_rdma_connect(id: *mut RdmaCmIdC, param: *mut RdmaConnParamC) -> c_int {
    // SAFETY: the caller's struct or NULL.
    let p = unsafe { conn_param(param) };
    let r = on_cm(id, |g, port, h| g.cm.connect(port.now(), port.device(), h, &p));
    // SAFETY: the caller's ID.
    unsafe { complete(id, r) }
}

/// `rdma_accept(3)` (a NULL `conn_param`: what the request asked for).
#[no_mangle]
pub unsafe extern "C" fn uroce_rdma_accept(id: *mut RdmaCmIdC, param: *mut RdmaConnParamC) -> c_int {
    // SAFETY: the caller's struct or NULL.
    let p = (!param.is_null()).then(|| unsafe { conn_param(param) });
    let r = on_cm(id, |g, port, h| g.cm.accept(port.now(), port.device(), h, p.as_ref()));
    let Ok(i) = id_of(id) else { return r };
    if r == 0 && i.c.qp_type == IBV_QPT_UD {
        // No event follows a UD accept: a synchronous ID lets go of the request.
        // SAFETY: a registered ID.
        unsafe { ack_kept(id) };
        return 0;
    }
    // SAFETY: the caller's ID.
    unsafe { complete(id, r) }
}

/// `rdma_reject(3)`.
#[no_mangle]
pub unsafe extern "C" fn uroce_rdma_reject(id: *mut RdmaCmIdC, private: *const c_void, len: u8) -> c_int {
    let data = if private.is_null() || len == 0 {
        &[][..]
    } else {
        // SAFETY: the caller's private data of the length it gives.
        unsafe { core::slice::from_raw_parts(private.cast::<u8>(), len as usize) }
    };
    on_cm(id, |g, _, h| g.cm.reject(h, data))
}

/// `rdma_disconnect(3)`.
#[no_mangle]
pub unsafe extern "C" fn uroce_rdma_disconnect(id: *mut RdmaCmIdC) -> c_int {
    let r = on_cm(id, |g, port, h| g.cm.disconnect(port.now(), port.device(), h));
    // SAFETY: the caller's ID.
    unsafe { complete(id, r) }
}

/// `rdma_migrate_id(3)`: the ID's events from now on (and those queued) go to `channel`; NULL
/// makes it synchronous on a channel of its own. Under the device's lock, so that no event is
/// being delivered meanwhile.
#[no_mangle]
pub unsafe extern "C" fn uroce_rdma_migrate_id(id: *mut RdmaCmIdC, channel: *mut RdmaEventChannelC) -> c_int {
    let Ok(i) = id_of(id) else { return err(libc::EINVAL) };
    let was_sync = i.sync.load(Ordering::Relaxed);
    if was_sync && channel.is_null() {
        return err(libc::EINVAL);
    }
    let (to, sync) = match channel_or_own(channel) {
        Ok(c) => c,
        Err(e) => return err(e),
    };
    let switch = || {
        let old = i.c.channel;
        // SAFETY: a registered ID; the progress thread reads its channel only under the lock held.
        unsafe { (*id).channel = to };
        i.sync.store(sync, Ordering::Relaxed);
        if let (Some(from), Some(dest)) = (CHANNELS.get(old.cast()), CHANNELS.get(to.cast())) {
            for e in from.take_for(id) {
                dest.push(e);
            }
        }
        old
    };
    let old = match bound(i) {
        Ok((dev, _)) => match with_cm(dev, |_, _| switch()) {
            Ok(o) => o,
            Err(e) => return err(e),
        },
        Err(_) => switch(),
    };
    if was_sync {
        // SAFETY: a registered ID.
        unsafe { ack_kept(id) };
        drop(CHANNELS.take(old.cast()));
    }
    0
}

/// `rdma_get_cm_event(3)`: blocks unless the program made the channel's descriptor
/// non-blocking (then `EAGAIN`).
#[no_mangle]
pub unsafe extern "C" fn uroce_rdma_get_cm_event(ch: *mut RdmaEventChannelC, out: *mut *mut RdmaCmEventC) -> c_int {
    let Some(c) = CHANNELS.get(ch.cast()) else { return err(libc::EINVAL) };
    if out.is_null() {
        return err(libc::EINVAL);
    }
    let ev = match c.pop() {
        Ok(e) => e,
        Err(e) => return err(e),
    };
    // The ID's addresses as the event leaves them (a new ID's, a connected one's).
    if let Some(i) = IDS.get(ev.c.id.cast()) {
        if let Ok((dev, h)) = bound(i) {
            if let Ok(Some((s, d))) = with_cm(dev, |g, _| g.cm.addrs(h)) {
                // SAFETY: a registered ID; librdmacm too updates it in rdma_get_cm_event.
                unsafe { set_addrs(ev.c.id, s, d) };
            }
        }
    }
    let p = Box::into_raw(ev);
    EVENTS.insert(p.cast(), p);
    // SAFETY: the caller's out-pointer, checked non-NULL.
    unsafe { *out = p.cast() };
    0
}

/// `rdma_ack_cm_event(3)`.
#[no_mangle]
pub unsafe extern "C" fn uroce_rdma_ack_cm_event(ev: *mut RdmaCmEventC) -> c_int {
    match EVENTS.take(ev.cast()) {
        Some(_) => 0,
        None => err(libc::EINVAL),
    }
}

/// `rdma_event_str(3)`.
#[no_mangle]
pub extern "C" fn uroce_rdma_event_str(kind: c_int) -> *const c_char {
    event_name(kind).as_ptr()
}

fn port_of(st: &libc::sockaddr_storage) -> u16 {
    // SAFETY: the storage holds a sockaddr of the family it says (written by to_storage).
    match unsafe { from_sockaddr((st as *const libc::sockaddr_storage).cast()) } {
        Some(a) => a.port().to_be(),
        None => 0,
    }
}

/// `rdma_get_src_port(3)` (network byte order).
#[no_mangle]
pub unsafe extern "C" fn uroce_rdma_get_src_port(id: *mut RdmaCmIdC) -> u16 {
    id_of(id).map_or(0, |i| port_of(&i.c.route.addr.src))
}

/// `rdma_get_dst_port(3)` (network byte order).
#[no_mangle]
pub unsafe extern "C" fn uroce_rdma_get_dst_port(id: *mut RdmaCmIdC) -> u16 {
    id_of(id).map_or(0, |i| port_of(&i.c.route.addr.dst))
}

/// `rdma_set_option(3)`: `RDMA_OPTION_ID_ACK_TIMEOUT` (a `u8`, as the kernel takes it) sets
/// the connection's QP's ACK timeout; the other ID options (`_TOS`, `_REUSEADDR`, `_AFONLY`)
/// are accepted and not yet applied; IB path records are `ENOSYS`.
#[no_mangle]
pub unsafe extern "C" fn uroce_rdma_set_option(
    id: *mut RdmaCmIdC,
    level: c_int,
    name: c_int,
    val: *mut c_void,
    len: usize,
) -> c_int {
    if id_of(id).is_err() {
        return err(libc::EINVAL);
    }
    match (level, name) {
        (RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT) => {
            if val.is_null() || len != 1 {
                return err(libc::EINVAL);
            }
            // SAFETY: the caller's one byte, checked not NULL.
            let t = unsafe { *val.cast::<u8>() };
            if t > 31 {
                return err(libc::EINVAL);
            }
            on_cm(id, |g, _, h| g.cm.set_ack_timeout(h, t))
        }
        (RDMA_OPTION_ID, 0..=2) => 0,
        _ => err(libc::ENOSYS),
    }
}

/// `RDMA_OPTION_ID` and its `RDMA_OPTION_ID_ACK_TIMEOUT` (rdma_cma.h).
const RDMA_OPTION_ID: c_int = 0;
const RDMA_OPTION_ID_ACK_TIMEOUT: c_int = 3;

/// `rdma_notify(3)`: nothing to do (the CM here needs no notice of COMM_EST to progress).
#[no_mangle]
pub unsafe extern "C" fn uroce_rdma_notify(id: *mut RdmaCmIdC, _event: c_int) -> c_int {
    if id_of(id).is_err() {
        return err(libc::EINVAL);
    }
    0
}

/// `rdma_establish(3)`: an active ID without a QP of librdmacm's confirms the
/// `CONNECT_RESPONSE` it got (the RTU goes out); its program has moved its QP to RTS.
#[no_mangle]
pub unsafe extern "C" fn uroce_rdma_establish(id: *mut RdmaCmIdC) -> c_int {
    match id_of(id) {
        Ok(i) if i.c.qp.is_null() => on_cm(id, |g, _, h| g.cm.establish(h)),
        _ => err(libc::EINVAL),
    }
}

/// `rdma_init_qp_attr(3)`: the attributes and mask that take a program's own QP to
/// `attr->qp_state` (INIT, RTR or RTS) on this ID's connection.
#[no_mangle]
pub unsafe extern "C" fn uroce_rdma_init_qp_attr(id: *mut RdmaCmIdC, attr: *mut QpAttrC, mask: *mut c_int) -> c_int {
    if attr.is_null() || mask.is_null() {
        return err(libc::EINVAL);
    }
    // SAFETY: the caller's struct.
    let want = unsafe { (*attr).qp_state };
    let Some(state) = usize::try_from(want).ok().and_then(|s| QpState::ALL.get(s).copied()) else {
        return err(libc::EINVAL);
    };
    let Ok(i) = id_of(id) else { return err(libc::EINVAL) };
    let Ok((dev, h)) = bound(i) else { return err(libc::EINVAL) };
    match with_cm(dev, |g, _| g.cm.init_qp_attr(h, state)) {
        Ok(Ok((a, m))) => {
            // SAFETY: the caller's structs.
            unsafe {
                attr.write(crate::datapath::qp_attr_c(&a));
                *mask = m.0 as c_int;
            }
            0
        }
        Ok(Err(e)) => cm_err(e),
        Err(e) => err(e),
    }
}

/// `rpoll(3)` on ordinary descriptors (no rsockets here): `poll(2)`.
#[no_mangle]
pub unsafe extern "C" fn uroce_rpoll(fds: *mut libc::pollfd, nfds: libc::nfds_t, timeout: c_int) -> c_int {
    // SAFETY: the caller's pollfd array of nfds entries.
    unsafe { libc::poll(fds, nfds, timeout) }
}

/// `struct rdma_addrinfo`.
#[repr(C)]
pub struct RdmaAddrinfoC {
    pub(super) ai_flags: c_int,
    ai_family: c_int,
    pub(super) ai_qp_type: c_int,
    pub(super) ai_port_space: c_int,
    ai_src_len: libc::socklen_t,
    ai_dst_len: libc::socklen_t,
    pub(super) ai_src_addr: *mut libc::sockaddr,
    pub(super) ai_dst_addr: *mut libc::sockaddr,
    ai_src_canonname: *mut c_char,
    ai_dst_canonname: *mut c_char,
    ai_route_len: usize,
    ai_route: *mut c_void,
    ai_connect_len: usize,
    ai_connect: *mut c_void,
    ai_next: *mut RdmaAddrinfoC,
}

pub(super) const RAI_PASSIVE: c_int = 1;

/// `rdma_getaddrinfo(3)`: `getaddrinfo(3)` of the node and service, the first address as the
/// destination (the source with `RAI_PASSIVE`), TCP port space and RC unless the hints say.
#[no_mangle]
pub unsafe extern "C" fn uroce_rdma_getaddrinfo(
    node: *const c_char,
    service: *const c_char,
    hints: *const RdmaAddrinfoC,
    res: *mut *mut RdmaAddrinfoC,
) -> c_int {
    if res.is_null() || (node.is_null() && service.is_null()) {
        return err(libc::EINVAL);
    }
    // SAFETY: the caller's hints or NULL.
    let h = unsafe { hints.as_ref() };
    let flags = h.map_or(0, |h| h.ai_flags);
    // SAFETY: all-zero is a valid addrinfo hint.
    let mut ah: libc::addrinfo = unsafe { core::mem::zeroed() };
    ah.ai_family = h.map_or(libc::AF_UNSPEC, |h| h.ai_family);
    ah.ai_flags = if flags & RAI_PASSIVE != 0 { libc::AI_PASSIVE } else { 0 };
    let mut ai: *mut libc::addrinfo = null_mut();
    // SAFETY: NUL-terminated strings or NULL from the caller; `ai` receives the list.
    let r = unsafe { libc::getaddrinfo(node, service, &ah, &mut ai) };
    if r != 0 || ai.is_null() {
        return err(libc::ENODEV);
    }
    // SAFETY: getaddrinfo's first result.
    let (addr, len, family) = unsafe { ((*ai).ai_addr, (*ai).ai_addrlen, (*ai).ai_family) };
    // SAFETY: calloc'd copies, freed by rdma_freeaddrinfo with free().
    let out = unsafe {
        let copy = libc::calloc(1, len as usize).cast::<libc::sockaddr>();
        let o = libc::calloc(1, core::mem::size_of::<RdmaAddrinfoC>()).cast::<RdmaAddrinfoC>();
        if copy.is_null() || o.is_null() {
            libc::freeaddrinfo(ai);
            return err(libc::ENOMEM);
        }
        core::ptr::copy_nonoverlapping(addr.cast::<u8>(), copy.cast::<u8>(), len as usize);
        libc::freeaddrinfo(ai);
        (*o).ai_flags = flags;
        (*o).ai_family = family;
        (*o).ai_qp_type = h.map_or(2, |h| if h.ai_qp_type != 0 { h.ai_qp_type } else { 2 });
        (*o).ai_port_space =
            h.map_or(RDMA_PS_TCP, |h| if h.ai_port_space != 0 { h.ai_port_space } else { RDMA_PS_TCP });
        if flags & RAI_PASSIVE != 0 {
            (*o).ai_src_addr = copy;
            (*o).ai_src_len = len;
        } else {
            (*o).ai_dst_addr = copy;
            (*o).ai_dst_len = len;
        }
        o
    };
    // SAFETY: the caller's out-pointer, checked non-NULL.
    unsafe { *res = out };
    0
}

/// `rdma_freeaddrinfo(3)`.
#[no_mangle]
pub unsafe extern "C" fn uroce_rdma_freeaddrinfo(res: *mut RdmaAddrinfoC) {
    let mut p = res;
    while !p.is_null() {
        // SAFETY: a list rdma_getaddrinfo allocated with calloc.
        unsafe {
            let next = (*p).ai_next;
            libc::free((*p).ai_src_addr.cast());
            libc::free((*p).ai_dst_addr.cast());
            libc::free(p.cast());
            p = next;
        }
    }
}

/// `rdma_get_devices(3)`: a NULL-terminated array of a context per device.
#[no_mangle]
pub unsafe extern "C" fn uroce_rdma_get_devices(num: *mut c_int) -> *mut *mut IbvContext {
    let ctxs: Vec<*mut IbvContext> =
        devices().into_iter().filter_map(|d| host(d).ok().map(|(h, _)| lock(&h).ctx)).collect();
    // SAFETY: a plain allocation of n + 1 pointers, freed by rdma_free_devices.
    let list =
        unsafe { libc::calloc(ctxs.len() + 1, core::mem::size_of::<*mut IbvContext>()) }.cast::<*mut IbvContext>();
    if list.is_null() {
        set_errno(libc::ENOMEM);
        return null_mut();
    }
    for (k, c) in ctxs.iter().enumerate() {
        // SAFETY: room for ctxs.len() + 1 pointers.
        unsafe { *list.add(k) = *c };
    }
    if !num.is_null() {
        // SAFETY: the caller's int.
        unsafe { *num = ctxs.len() as c_int };
    }
    list
}

/// `rdma_free_devices(3)`.
#[no_mangle]
pub unsafe extern "C" fn uroce_rdma_free_devices(list: *mut *mut IbvContext) {
    // SAFETY: a list rdma_get_devices allocated.
    unsafe { libc::free(list.cast()) };
}

/// `struct ibv_ece` (verbs.h): Enhanced Connection Establishment's vendor ID and options.
#[repr(C)]
pub struct IbvEce {
    /// The vendor's IEEE OUI (0: none).
    pub vendor_id: u32,
    /// Vendor-defined options.
    pub options: u32,
    /// Must be 0.
    pub comp_mask: u32,
}

/// Whether `id` may carry ECE: a live ID without a QP of its own (librdmacm checks `id->qp`:
/// ECE is for programs that drive an external QP).
fn ece_id(id: *mut RdmaCmIdC) -> bool {
    // SAFETY: read only after the registry says the ID is ours.
    id_of(id).is_ok() && unsafe { (*id).qp.is_null() }
}

/// `rdma_set_local_ece(3)`: librdmacm's checks (a vendor ID, no comp_mask, no QP on the ID).
/// uroce's CM sends no ECE in its REQ and REP (rxe's kernel sends none either), so the options
/// are accepted and not carried.
#[no_mangle]
pub unsafe extern "C" fn uroce_rdma_set_local_ece(id: *mut RdmaCmIdC, ece: *mut IbvEce) -> c_int {
    // SAFETY: the caller's ECE, read after the NULL check.
    if !ece_id(id) || ece.is_null() || unsafe { (*ece).vendor_id == 0 || (*ece).comp_mask != 0 } {
        return err(libc::EINVAL);
    }
    0
}

/// `rdma_get_remote_ece(3)`: the peer's ECE; uroce's CM reads none from the wire, so zeros, as
/// librdmacm reports for a peer that sent none.
#[no_mangle]
pub unsafe extern "C" fn uroce_rdma_get_remote_ece(id: *mut RdmaCmIdC, ece: *mut IbvEce) -> c_int {
    if !ece_id(id) || ece.is_null() {
        return err(libc::EINVAL);
    }
    // SAFETY: the caller's ECE, checked not NULL.
    unsafe { ece.write(IbvEce { vendor_id: 0, options: 0, comp_mask: 0 }) };
    0
}

/// What every librdmacm call without an implementation here jumps to (rsockets, multicast,
/// endpoints, SRQs through the CM, ...): -1 with `errno` `ENOSYS`. The arguments are not
/// read (the SysV x86-64 and AArch64 conventions let a callee ignore them); -1 in the full
/// register reads as -1 for an `int`, `ssize_t` or `off_t` result.
#[no_mangle]
pub extern "C" fn uroce_rdma_enosys() -> isize {
    set_errno(libc::ENOSYS);
    -1
}
