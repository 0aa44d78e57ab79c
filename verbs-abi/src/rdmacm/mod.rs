//! A drop-in `librdmacm.so.1` over uroce: RDMA-CM IDs, event channels and the connection
//! manager on QP1, in the program's own process. The protocol is the engine's
//! ([`uroce_transport::rdmacm`]: IB CM over the GSI QP, as the kernel's rdma_cm speaks it); this
//! module is the C ABI around it and its place on the device's progress thread.
//!
//! The calls live in this library (`libibverbs.so.1`, under the private version
//! `UROCE_PRIVATE_1` as `uroce_rdma_*`), so that RDMA-CM IDs, QPs and contexts are one set of
//! objects; `librdmacm.so.1` is a shim `scripts/build-verbs` generates whose `rdma_*@RDMACM_1.x`
//! symbols jump to them.
//!
//! Per device: one [`CmHost`] (the RDMA-CM, the GSI agent, the IDs it knows) driven by a round
//! hook on the device's runtime. Locks are taken in one order — the port's, then the host's,
//! then a channel's — and no verbs call is made under the host's.

pub mod abi;
pub mod calls;
mod channel;
pub mod ep;

use crate::device::{Context, Device};
use crate::Registry;
use abi::*;
use channel::Channel;
use core::ffi::c_int;
use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use uroce_transport::cm::gsi::{Gsi, GsiConfig};
use uroce_transport::cm::CmConfig;
use uroce_transport::rdmacm::{Event, EventKind, IdHandle, RdmaCm, RdmaCmConfig};

/// An RDMA-CM ID: what the program sees, then which device's RDMA-CM holds it.
#[repr(C)]
pub struct Id {
    /// `struct rdma_cm_id`.
    pub c: RdmaCmIdC,
    /// The device and the engine's handle, once bound or resolved.
    pub at: Mutex<Option<(&'static Device, IdHandle)>>,
    /// A synchronous ID (created without a channel): it owns its channel, and the calls that
    /// lead to an event wait for it (librdmacm `ucma_complete`).
    pub sync: AtomicBool,
    /// The QP attributes `rdma_create_ep` keeps on a passive endpoint for the QPs of the
    /// requests `rdma_get_request` hands out.
    pub qp_init: Mutex<Option<crate::abi::QpInitAttrC>>,
}

impl Id {
    /// A new ID on channel `c.channel`.
    pub fn new(c: RdmaCmIdC, at: Option<(&'static Device, IdHandle)>, sync: bool) -> Id {
        Id { c, at: Mutex::new(at), sync: AtomicBool::new(sync), qp_init: Mutex::new(None) }
    }
}

// SAFETY: the raw pointers are handles into this library's registries or the program's own
// objects; every access goes through the registries' checks or the ID's mutexes.
unsafe impl Send for Id {}
// SAFETY: as above.
unsafe impl Sync for Id {}

/// An event handed out by `rdma_get_cm_event`, with the private data its `param` points at.
#[repr(C)]
pub struct EventBox {
    /// `struct rdma_cm_event`.
    pub c: RdmaCmEventC,
    /// The private data.
    pub private: Vec<u8>,
}

// SAFETY: the pointers name registered IDs and the box's own private data.
unsafe impl Send for EventBox {}

/// Live IDs, channels and events, by the address the program holds.
pub static IDS: Registry<Id> = Registry::new();
/// Live event channels.
pub static CHANNELS: Registry<Channel> = Registry::new();
/// Events handed out and not yet acknowledged.
pub static EVENTS: Registry<EventBox> = Registry::new();

/// One device's RDMA-CM.
pub struct CmHost {
    /// The protocol.
    pub cm: RdmaCm,
    /// QP1.
    pub gsi: Gsi,
    /// Engine handle → the program's ID.
    pub ids: HashMap<IdHandle, usize>,
    /// The context IDs on this device carry as `verbs`.
    pub ctx: *mut crate::abi::IbvContext,
    /// The device's PD, every ID's `pd` until `rdma_create_qp` puts its QP's there (librdmacm's
    /// per-device PD).
    pub pd: *mut crate::abi::IbvPd,
    /// The device.
    pub dev: &'static Device,
}

// SAFETY: `ctx` is a context this library opened and never closes.
unsafe impl Send for CmHost {}

type Host = Arc<Mutex<CmHost>>;

static HOSTS: Mutex<Vec<(usize, Host)>> = Mutex::new(Vec::new());

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// How long a lookup in the kernel's neighbour table may wait (on the progress thread, for a
/// REQ's sender; the active side resolves in `rdma_resolve_addr`, in the program's thread).
const NEIGHBOUR_WAIT: Duration = Duration::from_millis(1000);

/// The device's RDMA-CM, started (QP1 created, the hook installed) on first use.
pub(crate) fn host(dev: &'static Device) -> Result<(Host, &'static Context), c_int> {
    let key = dev as *const Device as usize;
    let mut hosts = lock(&HOSTS);
    if let Some((_, h)) = hosts.iter().find(|(k, _)| *k == key) {
        let ctx = lock(h).ctx;
        return Ok((h.clone(), crate::device::context(ctx).ok_or(libc::ENODEV)?));
    }
    // SAFETY: `dev.ibv` is one of this library's devices.
    let ctx = unsafe { crate::device::ibv_open_device((&dev.ibv as *const crate::abi::IbvDevice).cast_mut()) };
    let c = crate::device::context(ctx).ok_or(libc::ENODEV)?;
    let (_, rt) = crate::datapath::rt_of(ctx)?;
    let (steers_qp1, block) = rt.with_port(|p| (p.steers_qp1(), p.device_ref().config().qpn_block));
    if crate::datapath::runtime_shared(dev) && !steers_qp1 {
        eprintln!(
            "uroce: rdma_cm on {}: this process shares the interface with other uroce processes through a \
             backend whose steering gives QP1 to none of them; run it with UROCE_SHARE=0",
            dev.iface.name
        );
        return Err(libc::EOPNOTSUPP);
    }
    let guid = u64::from_be_bytes(dev.guid);
    // Sharing the interface: this process's CM IDs carry its QPN block, which the steering
    // reads to bring it the MADs that name them (`uroce_wire::cm::steer`).
    let cfg = RdmaCmConfig {
        cm: CmConfig {
            ca_guid: guid,
            hi_tid: std::process::id(),
            comm_id_seed: seed() as u32,
            id_block: block,
            ..CmConfig::default()
        },
        seed: seed(),
        ..RdmaCmConfig::default()
    };
    // SAFETY: a context this library just opened.
    let pd = unsafe { crate::datapath::ibv_alloc_pd(ctx) };
    if pd.is_null() {
        return Err(libc::ENOMEM);
    }
    let gsi = rt.with(|d| Gsi::open(d, GsiConfig::default())).map_err(|e| {
        eprintln!("uroce: rdma_cm: cannot create QP1 on {}: {e}", dev.iface.name);
        libc::EADDRINUSE
    })?;
    let h: Host = Arc::new(Mutex::new(CmHost { cm: RdmaCm::new(cfg), gsi, ids: HashMap::new(), ctx, pd, dev }));
    let hook = h.clone();
    rt.add_round_hook(Box::new(move |port| round(&hook, port)));
    hosts.push((key, h.clone()));
    Ok((h, c))
}

/// Seed of ports, PSNs and communication IDs: this process's, as Linux draws them at random.
fn seed() -> u64 {
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    t ^ (u64::from(std::process::id()) << 32)
}

/// One progress round of a device's RDMA-CM: timers, MADs in and out, events to channels.
fn round(h: &Host, port: &mut uroce_io::runtime::Port) -> bool {
    let now = port.now();
    let mut g = lock(h);
    let host = &mut *g;
    if host.cm.idle(now, port.device(), &host.gsi) {
        return false;
    }
    let name: &'static str = &host.dev.iface.name;
    let mut resolve = |ip: IpAddr| uroce_io::netif::resolve_mac(name, ip, NEIGHBOUR_WAIT).ok();
    if host.cm.poll_timeout().is_some_and(|t| t <= now) {
        host.cm.handle_timeout(now, port.device());
    }
    let mut moved = host.cm.progress(now, port.device(), &mut host.gsi, &mut resolve);
    while let Some(e) = host.cm.poll_event() {
        moved = true;
        deliver(host, e);
    }
    moved
}

/// Hand an engine event to the channel of the ID it names; a `ConnectRequest` first gets its
/// new ID, on the listener's channel with the listener's context (librdmacm
/// `ucma_process_conn_req`).
fn deliver(g: &mut CmHost, e: Event) {
    let named = if e.kind == EventKind::ConnectRequest { e.listen_id } else { Some(e.id) };
    let Some(&at) = named.and_then(|h| g.ids.get(&h)) else { return };
    let Some(owner) = IDS.get(at as *const core::ffi::c_void) else { return };
    let (target, listen) = if e.kind == EventKind::ConnectRequest {
        // A synchronous listener's requests get channels of their own (librdmacm
        // `ucma_process_conn_req` migrates them), its event still comes on the listener's.
        let sync = owner.sync.load(Ordering::Relaxed);
        let channel = if sync {
            match Channel::register() {
                Ok(c) => c,
                Err(_) => {
                    tracing::warn!("rdma_cm: no channel for a synchronous listener's request");
                    return;
                }
            }
        } else {
            owner.c.channel
        };
        let c = RdmaCmIdC {
            verbs: g.ctx,
            pd: g.pd,
            channel,
            qp: core::ptr::null_mut(),
            event: core::ptr::null_mut(),
            send_cq_channel: core::ptr::null_mut(),
            send_cq: core::ptr::null_mut(),
            recv_cq_channel: core::ptr::null_mut(),
            recv_cq: core::ptr::null_mut(),
            srq: core::ptr::null_mut(),
            ..owner.c
        };
        let p = Box::into_raw(Box::new(Id::new(c, Some((g.dev, e.id)), sync)));
        IDS.insert(p.cast(), p);
        g.ids.insert(e.id, p as usize);
        (p, at as *mut Id)
    } else {
        (at as *mut Id, core::ptr::null_mut())
    };
    let mut ev = Box::new(EventBox {
        // SAFETY: all-zero is a valid rdma_cm_event (pointers NULL, integers 0).
        c: unsafe { core::mem::zeroed() },
        private: e.private_data.clone(),
    });
    ev.c.id = target.cast();
    ev.c.listen_id = listen.cast();
    ev.c.event = e.kind as c_int;
    ev.c.status = e.status;
    let p = &e.param;
    let private = if ev.private.is_empty() { core::ptr::null() } else { ev.private.as_ptr().cast() };
    if let Some(ud) = e.ud {
        let a = ud.ah;
        ev.c.param.ud = RdmaUdParamC {
            private_data: private,
            private_data_len: ev.private.len().min(255) as u8,
            ah_attr: crate::abi::AhAttrC {
                grh: crate::abi::GlobalRoute {
                    dgid: a.dgid.0,
                    flow_label: a.flow_label,
                    sgid_index: a.sgid_index,
                    hop_limit: a.hop_limit,
                    traffic_class: a.traffic_class,
                },
                sl: a.sl,
                is_global: u8::from(a.dgid.0 != [0; 16]),
                port_num: 1,
                ..Default::default()
            },
            qp_num: ud.qp_num,
            qkey: ud.qkey,
        };
        return push(listen, target, ev);
    }
    ev.c.param.conn = RdmaConnParamC {
        private_data: private,
        private_data_len: ev.private.len().min(255) as u8,
        responder_resources: p.responder_resources,
        initiator_depth: p.initiator_depth,
        flow_control: p.flow_control,
        retry_count: p.retry_count,
        rnr_retry_count: p.rnr_retry_count,
        srq: p.srq as u8,
        qp_num: p.qp_num,
    };
    push(listen, target, ev);
}

/// Queue an event on the channel of its ID (a connect request's: of its listener).
fn push(listen: *mut Id, target: *mut Id, ev: Box<EventBox>) {
    let on = if listen.is_null() { target } else { listen };
    // SAFETY: `on` is a registered, live ID (the owner, or the listener of the child just made).
    let chan = unsafe { (*on).c.channel };
    match CHANNELS.get(chan.cast()) {
        Some(c) => c.push(ev),
        None => tracing::warn!("rdma_cm: an event for an ID without a channel"),
    }
}

/// A socket address from a `struct sockaddr *` (AF_INET or AF_INET6).
///
/// # Safety
/// `sa` is NULL or points at a `sockaddr_in` / `sockaddr_in6` as its family says.
pub(crate) unsafe fn from_sockaddr(sa: *const libc::sockaddr) -> Option<SocketAddr> {
    if sa.is_null() {
        return None;
    }
    // SAFETY: the caller's sockaddr; the family field is common to all.
    match c_int::from(unsafe { (*sa).sa_family }) {
        libc::AF_INET => {
            // SAFETY: AF_INET: a sockaddr_in.
            let s = unsafe { &*sa.cast::<libc::sockaddr_in>() };
            Some(SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::from(u32::from_be(s.sin_addr.s_addr)),
                u16::from_be(s.sin_port),
            )))
        }
        libc::AF_INET6 => {
            // SAFETY: AF_INET6: a sockaddr_in6.
            let s = unsafe { &*sa.cast::<libc::sockaddr_in6>() };
            Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(s.sin6_addr.s6_addr),
                u16::from_be(s.sin6_port),
                s.sin6_flowinfo,
                s.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

/// `a` as a `sockaddr_storage`.
pub(crate) fn to_storage(a: SocketAddr) -> libc::sockaddr_storage {
    // SAFETY: all-zero is a valid sockaddr_storage.
    let mut st: libc::sockaddr_storage = unsafe { core::mem::zeroed() };
    match a {
        SocketAddr::V4(v) => {
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in.
            let s = unsafe { &mut *(&mut st as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            s.sin_family = libc::AF_INET as libc::sa_family_t;
            s.sin_port = v.port().to_be();
            s.sin_addr.s_addr = u32::from(*v.ip()).to_be();
        }
        SocketAddr::V6(v) => {
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in6.
            let s = unsafe { &mut *(&mut st as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
            s.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            s.sin6_port = v.port().to_be();
            s.sin6_addr.s6_addr = v.ip().octets();
            s.sin6_flowinfo = v.flowinfo();
            s.sin6_scope_id = v.scope_id();
        }
    }
    st
}

/// The event's name (`rdma_event_str`).
pub(crate) fn event_name(kind: c_int) -> &'static core::ffi::CStr {
    const NAMES: [&core::ffi::CStr; 16] = [
        c"RDMA_CM_EVENT_ADDR_RESOLVED",
        c"RDMA_CM_EVENT_ADDR_ERROR",
        c"RDMA_CM_EVENT_ROUTE_RESOLVED",
        c"RDMA_CM_EVENT_ROUTE_ERROR",
        c"RDMA_CM_EVENT_CONNECT_REQUEST",
        c"RDMA_CM_EVENT_CONNECT_RESPONSE",
        c"RDMA_CM_EVENT_CONNECT_ERROR",
        c"RDMA_CM_EVENT_UNREACHABLE",
        c"RDMA_CM_EVENT_REJECTED",
        c"RDMA_CM_EVENT_ESTABLISHED",
        c"RDMA_CM_EVENT_DISCONNECTED",
        c"RDMA_CM_EVENT_DEVICE_REMOVAL",
        c"RDMA_CM_EVENT_MULTICAST_JOIN",
        c"RDMA_CM_EVENT_MULTICAST_ERROR",
        c"RDMA_CM_EVENT_ADDR_CHANGE",
        c"RDMA_CM_EVENT_TIMEWAIT_EXIT",
    ];
    usize::try_from(kind).ok().and_then(|k| NAMES.get(k).copied()).unwrap_or(c"UNKNOWN EVENT")
}
