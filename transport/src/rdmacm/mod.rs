//! RDMA-CM: connections named by IP address and port, over the IB CM ([`crate::cm`]) — what
//! Linux's `drivers/infiniband/core/cma.c` does for RoCE, plus what librdmacm does in the
//! application (moving the QP through INIT, RTR and RTS as the connection comes up, to ERR as
//! it goes down). Sans-IO as the rest of the engine: the device, time and the neighbour lookup
//! come in as arguments; events go out with `librdmacm`'s names and numbers.
//!
//! What it puts on the wire is what rxe's kernel puts there for the same inputs (the
//! `rdma_cm.pcap` REQ re-made byte for byte in `tests/rdmacm.rs`): service ID
//! `port space << 16 | port` (IBTA Annex A11), the private-data header with both addresses,
//! the path's flow label `(sport * 31 + dport) & 0xfffff` (`cma_get_roce_udp_flow_label`),
//! hop limit 64, packet lifetime 16 (`CMA_IBOE_PACKET_LIFETIME`) and so local ACK timeout 17
//! (`cm_ack_timeout` with rxe's CA ACK delay 15), response timeouts 20 and 15 CM retries
//! (`CMA_CM_RESPONSE_TIMEOUT`, `CMA_MAX_CM_RETRIES`).

mod conn;
mod ud;

pub use conn::{cm_ack_timeout, MAX_RD_ATOMIC};

use crate::cm::gsi::Gsi;
use crate::cm::{Cm, CmConfig, CmId, MadAddr};
use crate::device::Device;
use crate::time::Instant;
use crate::verbs::{Mtu, VerbsError};
use std::collections::{HashMap, HashSet, VecDeque};
use std::net::{IpAddr, SocketAddr};
use uroce_wire::cm::ip::PortSpace;
use uroce_wire::cm::PathRepr;
use uroce_wire::EthernetAddress;

/// `enum rdma_cm_event_type`, numbered as librdmacm numbers it.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
#[repr(i32)]
#[allow(missing_docs)]
pub enum EventKind {
    AddrResolved = 0,
    AddrError = 1,
    RouteResolved = 2,
    RouteError = 3,
    ConnectRequest = 4,
    ConnectResponse = 5,
    ConnectError = 6,
    Unreachable = 7,
    Rejected = 8,
    Established = 9,
    Disconnected = 10,
    DeviceRemoval = 11,
    MulticastJoin = 12,
    MulticastError = 13,
    AddrChange = 14,
    TimewaitExit = 15,
}

/// An RDMA-CM ID (`struct rdma_cm_id`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub struct IdHandle(pub u32);

/// `struct rdma_conn_param`, as the application gives it.
#[derive(Clone, Copy, Debug)]
pub struct ConnParam<'a> {
    /// Private data (REQ: at most 56 bytes after RDMA-CM's header; REP: 196; REJ: 148).
    pub private_data: &'a [u8],
    /// READ/atomic requests we accept at once.
    pub responder_resources: u8,
    /// READ/atomic requests we issue at once.
    pub initiator_depth: u8,
    /// Transport retries (3 bits).
    pub retry_count: u8,
    /// RNR retries (3 bits; 7 = forever).
    pub rnr_retry_count: u8,
    /// The QP uses an SRQ.
    pub srq: bool,
    /// The QP, for an ID without one of its own (`rdma_create_qp` not called: the program
    /// moves its QP itself, with [`RdmaCm::init_qp_attr`]).
    pub qp_num: u32,
}

/// What an event tells of the peer's connection parameters (`struct rdma_conn_param` in
/// `struct rdma_cm_event`), from our side's point of view: `responder_resources` is what the
/// peer will issue at us (its initiator depth), as Linux's `cm_format_req_event` swaps them.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct PeerParam {
    /// What we may accept at once (the peer's initiator depth).
    pub responder_resources: u8,
    /// What we may issue at once (the peer's responder resources).
    pub initiator_depth: u8,
    /// The peer's end-to-end flow control.
    pub flow_control: u8,
    /// Transport retries asked for.
    pub retry_count: u8,
    /// RNR retries asked for.
    pub rnr_retry_count: u8,
    /// The peer's QP uses an SRQ.
    pub srq: bool,
    /// The peer's QP.
    pub qp_num: u32,
}

/// An event (`struct rdma_cm_event`).
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Event {
    /// The ID it is about (for `ConnectRequest`, the new ID).
    pub id: IdHandle,
    /// For `ConnectRequest`: the listening ID.
    pub listen_id: Option<IdHandle>,
    /// Which event.
    pub kind: EventKind,
    /// 0, a REJ's reason (`Rejected`), or a negative errno (`-ETIMEDOUT`: `Unreachable`).
    pub status: i32,
    /// The peer's private data (`ConnectRequest`: after RDMA-CM's 36-byte header).
    pub private_data: Vec<u8>,
    /// The peer's parameters (`ConnectRequest`, `Established` on the active side).
    pub param: PeerParam,
    /// For a UD ID's `Established` (a SIDR_REP): how to reach the peer's QP
    /// (`struct rdma_ud_param`).
    pub ud: Option<UdParam>,
}

/// The peer's UD QP as a SIDR_REP names it, with the address vector of the path
/// (`struct rdma_ud_param`; Linux `cma_sidr_rep_handler`, `ib_init_ah_attr_from_path`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct UdParam {
    /// The address vector (the path's GIDs, flow label and hop limit; the next hop's MAC).
    pub ah: crate::verbs::AddressVector,
    /// The peer's QP.
    pub qp_num: u32,
    /// Its Q_Key.
    pub qkey: u32,
}

/// How to reach a destination: what `rdma_resolve_addr` and `rdma_resolve_route` learn from the
/// kernel's routing and neighbour tables (the runtime looks them up).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Route {
    /// The source address.
    pub src: IpAddr,
    /// The destination address.
    pub dst: IpAddr,
    /// Our GID index of `src`.
    pub sgid_index: u8,
    /// The next hop's MAC.
    pub dmac: EthernetAddress,
    /// The path MTU (the port's active MTU).
    pub mtu: Mtu,
}

/// Why a call failed; [`RdmaCmError::errno`] gives librdmacm's errno.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum RdmaCmError {
    /// No such ID.
    UnknownId,
    /// Not in a state for this call (EINVAL).
    InvalidState(&'static str),
    /// The port is bound already (EADDRINUSE).
    AddrInUse,
    /// No free port left (EADDRNOTAVAIL).
    NoPorts,
    /// An argument is wrong (private data too long, ...) (EINVAL).
    Invalid(&'static str),
    /// The CM refused the call.
    Cm(crate::cm::CmError),
    /// A QP transition failed.
    Verbs(VerbsError),
    /// [`RdmaCmConfig::max_ids`] IDs are alive (ENOMEM).
    NoIds,
}

impl RdmaCmError {
    /// The errno a C caller gets.
    pub fn errno(&self) -> i32 {
        match self {
            RdmaCmError::UnknownId | RdmaCmError::InvalidState(_) | RdmaCmError::Invalid(_) => 22,
            RdmaCmError::AddrInUse => 98,
            RdmaCmError::NoPorts => 99,
            RdmaCmError::Cm(e) => e.errno(),
            RdmaCmError::Verbs(_) => 22,
            RdmaCmError::NoIds => 12,
        }
    }
}

impl std::fmt::Display for RdmaCmError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RdmaCmError::UnknownId => f.write_str("no such RDMA-CM ID"),
            RdmaCmError::InvalidState(w) => write!(f, "not allowed now: {w}"),
            RdmaCmError::AddrInUse => f.write_str("address in use"),
            RdmaCmError::NoPorts => f.write_str("no free port"),
            RdmaCmError::Invalid(w) => write!(f, "invalid argument: {w}"),
            RdmaCmError::Cm(e) => write!(f, "CM: {e}"),
            RdmaCmError::Verbs(e) => write!(f, "QP: {e}"),
            RdmaCmError::NoIds => f.write_str("too many RDMA-CM IDs"),
        }
    }
}

impl std::error::Error for RdmaCmError {}

/// An ID's state (the kernel's `enum rdma_cm_state`, the ones this layer has).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum IdState {
    /// Created.
    Idle,
    /// `rdma_bind_addr` done.
    AddrBound,
    /// `rdma_resolve_addr` done.
    AddrResolved,
    /// `rdma_resolve_route` done.
    RouteResolved,
    /// Listening.
    Listen,
    /// Connecting (REQ sent, or received and not yet answered or confirmed).
    Connect,
    /// Connected.
    Established,
    /// Disconnecting or disconnected.
    Disconnect,
}

/// Linux's parameters for the connections it makes.
#[derive(Clone, Copy, Debug)]
pub struct RdmaCmConfig {
    /// The CM beneath (its CA GUID: the node GUID).
    pub cm: CmConfig,
    /// Ephemeral ports for unbound active IDs (Linux `ip_local_port_range`: 32768–60999).
    pub ports: (u16, u16),
    /// Seed of ports and PSNs.
    pub seed: u64,
    /// The CA's ACK delay (rxe `RXE_LOCAL_CA_ACK_DELAY`: 15), the REP's target ACK delay.
    pub ca_ack_delay: u8,
    /// The REQ's response timeouts (`CMA_CM_RESPONSE_TIMEOUT`: 20).
    pub cm_response_timeout: u8,
    /// REQ retries (`CMA_MAX_CM_RETRIES`: 15).
    pub max_cm_retries: u8,
    /// The device's most outstanding READs/atomics each way (`max_qp_rd_atom`,
    /// `max_qp_init_rd_atom`: 128 as rxe's), what [`MAX_RD_ATOMIC`] stands for.
    pub max_rd_atomic: u8,
    /// IDs alive at once: the program's and the ones connect requests make (a request that
    /// finds none left is refused).
    pub max_ids: usize,
}

impl Default for RdmaCmConfig {
    fn default() -> RdmaCmConfig {
        RdmaCmConfig {
            cm: CmConfig::default(),
            ports: (32768, 60999),
            seed: 1,
            ca_ack_delay: 15,
            cm_response_timeout: 20,
            max_cm_retries: 15,
            max_rd_atomic: 128,
            max_ids: 65536,
        }
    }
}

/// What a connecting ID knows of its connection.
#[derive(Clone, Copy, Debug)]
struct Link {
    cm: CmId,
    /// The peer's GSI.
    peer: MadAddr,
    /// The path (as the active side put it in the REQ: local = the active side).
    path: PathRepr,
    /// Our QP, and the PSN we announced in our REQ or REP: the first we receive.
    qpn: u32,
    psn: u32,
    /// The peer's QP and the PSN it announced (from the REQ, or the REP): the first we send.
    peer_qpn: u32,
    peer_psn: u32,
    mtu: Mtu,
    /// The MAC of the peer (or the next hop).
    dmac: EthernetAddress,
    /// Our GID index on this path.
    sgid_index: u8,
    responder_resources: u8,
    initiator_depth: u8,
    retry_count: u8,
    rnr_retry_count: u8,
    /// A DISCONNECTED event has been given.
    disconnected: bool,
    /// This layer moves the QP (it came through `rdma_create_qp`); otherwise the program does,
    /// with [`RdmaCm::init_qp_attr`].
    managed: bool,
    /// The program's ACK timeout for the QP (`RDMA_OPTION_ID_ACK_TIMEOUT`), over the path's.
    ack_timeout: Option<u8>,
}

/// The hop limit of the paths RDMA-CM resolves (the kernel takes the route's: 64 unless
/// configured otherwise).
const HOP_LIMIT: u8 = 64;

/// Whether IDs of port space `ps` are UD IDs, resolved with SIDR (librdmacm
/// `ucma_is_ud_qp`: the UDP and IPoIB port spaces).
fn is_ud(ps: PortSpace) -> bool {
    matches!(ps, PortSpace::Udp | PortSpace::Ipoib)
}

#[derive(Clone, Debug)]
struct Id {
    ps: PortSpace,
    state: IdState,
    src: Option<SocketAddr>,
    dst: Option<SocketAddr>,
    route: Option<Route>,
    qpn: Option<u32>,
    link: Option<Link>,
    /// A passive ID's REQ, until accepted or rejected.
    req: Option<crate::cm::Received>,
    /// A UD ID's SIDR exchange: ours (active, until the SIDR_REP) or the peer's (passive, until
    /// accepted or rejected).
    sidr: Option<CmId>,
    /// `rdma_set_option(RDMA_OPTION_ID_ACK_TIMEOUT)`, for the connection's QP.
    ack_timeout: Option<u8>,
}

/// The RDMA-CM of one device.
#[derive(Debug)]
pub struct RdmaCm {
    cfg: RdmaCmConfig,
    cm: Cm,
    ids: HashMap<u32, Id>,
    by_cm: HashMap<CmId, u32>,
    /// Bound (port space, port) → ID.
    bound: HashMap<(PortSpace, u16), u32>,
    /// Listening service IDs → ID.
    listeners: HashMap<u64, u32>,
    next_id: u32,
    rng: u64,
    events: VecDeque<Event>,
    used_psns: HashSet<u32>,
}

impl RdmaCm {
    /// An RDMA-CM with no IDs.
    pub fn new(cfg: RdmaCmConfig) -> RdmaCm {
        RdmaCm {
            cm: Cm::new(cfg.cm),
            cfg,
            ids: HashMap::new(),
            by_cm: HashMap::new(),
            bound: HashMap::new(),
            listeners: HashMap::new(),
            next_id: 0,
            rng: cfg.seed | 1,
            events: VecDeque::new(),
            used_psns: HashSet::new(),
        }
    }

    /// The CM beneath (its counters, its state of a connection).
    pub fn cm(&self) -> &Cm {
        &self.cm
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// When [`RdmaCm::handle_timeout`] should next run.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.cm.poll_timeout()
    }

    /// Fire due CM deadlines.
    pub fn handle_timeout(&mut self, now: Instant, dev: &mut Device) {
        self.cm.handle_timeout(now);
        self.translate(dev);
    }

    /// An ID's state.
    pub fn state(&self, id: IdHandle) -> Option<IdState> {
        self.ids.get(&id.0).map(|i| i.state)
    }

    /// An ID's addresses (`rdma_get_local_addr`, `rdma_get_peer_addr`).
    pub fn addrs(&self, id: IdHandle) -> Option<(Option<SocketAddr>, Option<SocketAddr>)> {
        self.ids.get(&id.0).map(|i| (i.src, i.dst))
    }

    /// xorshift64*: ports and PSNs (seeded, never the OS RNG).
    fn random(&mut self) -> u32 {
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        (self.rng.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 32) as u32
    }

    /// `rdma_create_id` (at most [`RdmaCmConfig::max_ids`] alive).
    pub fn create_id(&mut self, ps: PortSpace) -> Result<IdHandle, RdmaCmError> {
        if self.ids.len() >= self.cfg.max_ids {
            return Err(RdmaCmError::NoIds);
        }
        self.next_id = self.next_id.wrapping_add(1).max(1);
        while self.ids.contains_key(&self.next_id) {
            self.next_id = self.next_id.wrapping_add(1).max(1);
        }
        let id = Id {
            ps,
            state: IdState::Idle,
            src: None,
            dst: None,
            route: None,
            qpn: None,
            link: None,
            req: None,
            sidr: None,
            ack_timeout: None,
        };
        self.ids.insert(self.next_id, id);
        Ok(IdHandle(self.next_id))
    }

    fn id_mut(&mut self, id: IdHandle) -> Result<&mut Id, RdmaCmError> {
        self.ids.get_mut(&id.0).ok_or(RdmaCmError::UnknownId)
    }

    /// `rdma_bind_addr`: port 0 takes a free ephemeral one.
    pub fn bind_addr(&mut self, id: IdHandle, addr: SocketAddr) -> Result<(), RdmaCmError> {
        let ps = self.id_mut(id)?.ps;
        if self.ids[&id.0].state != IdState::Idle {
            return Err(RdmaCmError::InvalidState("rdma_bind_addr on a bound ID"));
        }
        let port = if addr.port() == 0 { self.free_port(ps)? } else { addr.port() };
        if self.bound.contains_key(&(ps, port)) {
            return Err(RdmaCmError::AddrInUse);
        }
        self.bound.insert((ps, port), id.0);
        let i = self.id_mut(id)?;
        i.src = Some(SocketAddr::new(addr.ip(), port));
        i.state = IdState::AddrBound;
        Ok(())
    }

    fn free_port(&mut self, ps: PortSpace) -> Result<u16, RdmaCmError> {
        let (lo, hi) = self.cfg.ports;
        let n = u32::from(hi.saturating_sub(lo)) + 1;
        let start = self.random() % n;
        (0..n)
            .map(|k| lo + ((start + k) % n) as u16)
            .find(|p| !self.bound.contains_key(&(ps, *p)))
            .ok_or(RdmaCmError::NoPorts)
    }

    /// `rdma_resolve_addr`, with the route the caller looked up: binds an unbound ID to
    /// `route.src` and an ephemeral port; `AddrResolved` follows.
    pub fn resolve_addr(&mut self, id: IdHandle, dst: SocketAddr, route: Route) -> Result<(), RdmaCmError> {
        let state = self.id_mut(id)?.state;
        match state {
            IdState::Idle => self.bind_addr(id, SocketAddr::new(route.src, 0))?,
            IdState::AddrBound => {}
            _ => return Err(RdmaCmError::InvalidState("rdma_resolve_addr")),
        }
        let i = self.id_mut(id)?;
        if let Some(s) = i.src.as_mut() {
            if s.ip().is_unspecified() {
                s.set_ip(route.src);
            }
        }
        i.dst = Some(dst);
        i.route = Some(route);
        i.state = IdState::AddrResolved;
        self.event(id, None, EventKind::AddrResolved, 0);
        Ok(())
    }

    /// `rdma_resolve_route`: `RouteResolved` follows (the route came with the address).
    pub fn resolve_route(&mut self, id: IdHandle) -> Result<(), RdmaCmError> {
        let i = self.id_mut(id)?;
        if i.state != IdState::AddrResolved {
            return Err(RdmaCmError::InvalidState("rdma_resolve_route before the address"));
        }
        i.state = IdState::RouteResolved;
        self.event(id, None, EventKind::RouteResolved, 0);
        Ok(())
    }

    /// The service ID a listen on `id` takes (IBTA Annex A11: its port space and bound port):
    /// what the kernel's steering must send to this process when it shares its interface.
    pub fn service_id(&self, id: IdHandle) -> Result<u64, RdmaCmError> {
        let i = self.ids.get(&id.0).ok_or(RdmaCmError::UnknownId)?;
        let src = i.src.ok_or(RdmaCmError::InvalidState("rdma_listen on an unbound ID"))?;
        Ok(uroce_wire::cm::ip::service_id(i.ps, src.port()))
    }

    /// `rdma_set_option(RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT)` (Linux
    /// `rdma_set_ack_timeout`): the QP's local ACK timeout when it goes to RTS, instead of the
    /// one the path gives (`cma_modify_qp_rts`, `rdma_init_qp_attr`).
    pub fn set_ack_timeout(&mut self, id: IdHandle, timeout: u8) -> Result<(), RdmaCmError> {
        let i = self.id_mut(id)?;
        i.ack_timeout = Some(timeout);
        if let Some(l) = i.link.as_mut() {
            l.ack_timeout = Some(timeout);
        }
        Ok(())
    }

    /// Whether `id` listens.
    pub fn listening(&self, id: IdHandle) -> bool {
        self.ids.get(&id.0).is_some_and(|i| i.state == IdState::Listen)
    }

    /// `rdma_listen` (the backlog is the CM's, per listener).
    pub fn listen(&mut self, id: IdHandle) -> Result<(), RdmaCmError> {
        let i = self.id_mut(id)?;
        let (ps, src) = (i.ps, i.src);
        let (IdState::AddrBound, Some(src)) = (i.state, src) else {
            return Err(RdmaCmError::InvalidState("rdma_listen on an unbound ID"));
        };
        let sid = uroce_wire::cm::ip::service_id(ps, src.port());
        self.cm.listen(sid).map_err(RdmaCmError::Cm)?;
        self.listeners.insert(sid, id.0);
        self.id_mut(id)?.state = IdState::Listen;
        Ok(())
    }

    fn event(&mut self, id: IdHandle, listen_id: Option<IdHandle>, kind: EventKind, status: i32) {
        self.events.push_back(Event {
            id,
            listen_id,
            kind,
            status,
            private_data: Vec::new(),
            param: PeerParam::default(),
            ud: None,
        });
    }

    /// Whether [`RdmaCm::progress`] would find nothing to do before `now` (nothing on QP1, no
    /// MAD or event waiting, no deadline due): the check for every round of a busy runtime.
    pub fn idle(&self, now: Instant, dev: &Device, gsi: &Gsi) -> bool {
        self.events.is_empty() && gsi.idle(dev, &self.cm) && self.cm.poll_timeout().is_none_or(|t| t > now)
    }

    /// Move what arrived on QP1 through the CM, and what the CM sends onto QP1.
    pub fn progress(
        &mut self,
        now: Instant,
        dev: &mut Device,
        gsi: &mut Gsi,
        resolve: &mut dyn FnMut(IpAddr) -> Option<EthernetAddress>,
    ) -> bool {
        let mut moved = gsi.progress(now, dev, &mut self.cm, resolve);
        moved |= self.translate_with(dev, resolve);
        // Answers the translation produced (RTU, REJ, DREP) go out in the same call.
        moved |= gsi.progress(now, dev, &mut self.cm, resolve);
        moved
    }

    fn translate(&mut self, dev: &mut Device) {
        self.translate_with(dev, &mut |_| None);
    }
}
