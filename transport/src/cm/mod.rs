//! The InfiniBand communication manager (IBTA Vol. 1 ch. 12), sans-IO: the protocol by which
//! two hosts agree on a connection's QPs and PSNs over MADs to QP1, and release it. It is the
//! same machine on both sides; what a side does is the application's calls (`connect`,
//! `accept`, `send_rtu`, `disconnect`, ...) and the messages that arrive.
//!
//! Like the engine it never touches the clock or a socket: MADs and time come in
//! ([`Cm::handle_mad`], [`Cm::handle_timeout`]); MADs, events and the next deadline go out
//! ([`Cm::poll_transmit`], [`Cm::poll_event`], [`Cm::poll_timeout`]). Whoever drives it carries
//! the MADs on the GSI QP (UD QP 1, Q_Key 0x80010000).
//!
//! Its behaviour follows Linux's CM (`drivers/infiniband/core/cm.c`), the peer it must be
//! indistinguishable from: the TID of an exchange is the REQ's (REP and RTU echo it, a DREP
//! echoes its DREQ), duplicates are answered as `cm_dup_req_handler`/`cm_dup_rep_handler` do,
//! timeouts are `cm_convert_to_ms` of the IBA times, a DREQ for an unknown connection still
//! gets a DREP (`cm_issue_drep`). Where Linux trusts a field, this CM checks it as well: a
//! message must come from the connection's peer, and a DREQ must name the connection's QP.
//!
//! Resources are bounded ([`CmConfig`]): communication IDs, listeners, the REQs a listener holds
//! unanswered, and the transmit queue. A REQ beyond them is refused with REJ "no resources".

mod api;
pub mod gsi;
mod recv;
pub mod state;
mod timers;

pub use state::CmState;

use crate::time::Instant;
use std::collections::{BTreeSet, HashMap, VecDeque};
use std::net::IpAddr;
use std::time::Duration;
use uroce_wire::cm::{AttrId, CmMessage, CommIds, RejReason};
use uroce_wire::mad::{Mad, MAD_LEN};

/// Where a MAD goes to or came from: the peer's GID (its IP address on RoCEv2) and QP (1 for
/// the GSI), the P_Key index it travels under, and which of our GIDs it leaves from (the one
/// it was sent to, for an answer).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct MadAddr {
    /// The peer's GID as an IP address.
    pub gid: IpAddr,
    /// The peer's QP (the GSI: 1).
    pub qpn: u32,
    /// P_Key index.
    pub pkey_index: u16,
    /// Our source GID's index.
    pub sgid_index: u8,
}

impl MadAddr {
    /// The GSI of the host at `gid`, from our GID 0.
    pub const fn gsi(gid: IpAddr) -> MadAddr {
        MadAddr { gid, qpn: 1, pkey_index: 0, sgid_index: 0 }
    }
}

/// A MAD to send.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct OutMad {
    /// Where.
    pub to: MadAddr,
    /// The 256 bytes.
    pub mad: Box<[u8; MAD_LEN]>,
}

/// A communication ID: the local communication ID the CM put in its messages.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub struct CmId(pub u32);

/// A received message, kept whole: [`Received::message`] gives its parsed form.
#[derive(Clone, PartialEq, Eq)]
pub struct Received(Box<[u8; MAD_LEN]>);

impl Received {
    fn new(b: &[u8; MAD_LEN]) -> Received {
        Received(Box::new(*b))
    }

    /// The message (it parsed when it arrived, so it parses now).
    pub fn message(&self) -> CmMessage<'_> {
        Mad::parse(&self.0[..], 0)
            .and_then(|m| CmMessage::parse(&m, 0))
            .expect("a received message was parsed before it was kept")
    }

    /// Its private data field.
    pub fn private_data(&self) -> &[u8] {
        match self.message() {
            CmMessage::Req(m) => m.private_data,
            CmMessage::Mra(m) => m.private_data,
            CmMessage::Rej(m) => m.private_data,
            CmMessage::Rep(m) => m.private_data,
            CmMessage::Rtu(m) | CmMessage::Drep(m) => m.private_data,
            CmMessage::Dreq(m) => m.private_data,
            CmMessage::SidrReq(m) => m.private_data,
            CmMessage::SidrRep(m) => m.private_data,
        }
    }

    /// The raw MAD.
    pub fn bytes(&self) -> &[u8; MAD_LEN] {
        &self.0
    }
}

impl std::fmt::Debug for Received {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", uroce_wire::cm::CmSummary(&self.message()))
    }
}

/// What the application hears (Linux `enum ib_cm_event_type`).
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum CmEvent {
    /// A REQ for one of our listeners: `accept`, `reject` or `send_mra` it.
    ReqReceived {
        /// The new ID, in `ReqRcvd`.
        id: CmId,
        /// The service ID listened on.
        listen: u64,
        /// Where it came from.
        peer: MadAddr,
        /// The REQ.
        req: Received,
    },
    /// Our REQ got no answer (or the MRA's extra time ran out): the ID is `Idle`.
    ReqError {
        /// The ID.
        id: CmId,
    },
    /// A REP for our REQ: bring the QP to RTR/RTS, then `send_rtu` (or `reject`).
    RepReceived {
        /// The ID, in `RepRcvd`.
        id: CmId,
        /// The REP.
        rep: Received,
    },
    /// Our REP got no RTU: the ID is `Idle`.
    RepError {
        /// The ID.
        id: CmId,
    },
    /// The RTU for our REP: established.
    RtuReceived {
        /// The ID.
        id: CmId,
    },
    /// The peer needs longer.
    MraReceived {
        /// The ID.
        id: CmId,
        /// The extra time it asked for (IBA time).
        service_timeout: u8,
    },
    /// The peer refused: the ID is `Idle`.
    RejReceived {
        /// The ID.
        id: CmId,
        /// Why.
        reason: RejReason,
        /// The REJ.
        rej: Received,
    },
    /// The peer disconnects: `send_drep`.
    DreqReceived {
        /// The ID, in `DreqRcvd`.
        id: CmId,
        /// The DREQ.
        dreq: Received,
    },
    /// Our DREQ got no DREP: the ID is in `Timewait` anyway.
    DreqError {
        /// The ID.
        id: CmId,
    },
    /// The DREP for our DREQ: the ID is in `Timewait`.
    DrepReceived {
        /// The ID.
        id: CmId,
    },
    /// Time wait is over: the ID is `Idle` and its QP may be reused.
    TimewaitExit {
        /// The ID.
        id: CmId,
    },
    /// A SIDR_REQ for one of our listeners: `sidr_reply` to it.
    SidrReqReceived {
        /// The new ID, in `SidrReqRcvd`.
        id: CmId,
        /// The service ID listened on.
        listen: u64,
        /// Where it came from.
        peer: MadAddr,
        /// The SIDR_REQ.
        req: Received,
    },
    /// The answer to our SIDR_REQ (`None`: none came).
    SidrRepReceived {
        /// The ID, now `Idle`.
        id: CmId,
        /// The SIDR_REP.
        rep: Option<Received>,
    },
}

/// Why a call failed (each maps to the errno librdmacm would return).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum CmError {
    /// No such ID (ENOENT... librdmacm: EINVAL).
    UnknownId,
    /// The call does not fit the ID's state (EINVAL).
    InvalidState(CmState),
    /// Every communication ID is in use (ENOMEM).
    IdsExhausted,
    /// Every listener slot is in use (ENOMEM).
    ListenersExhausted,
    /// Someone listens on this service ID already (EADDRINUSE).
    ServiceIdInUse,
    /// A message field does not fit (private data too long, ...) (EINVAL).
    Message(uroce_wire::Error),
}

impl std::fmt::Display for CmError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CmError::UnknownId => f.write_str("no such communication ID"),
            CmError::InvalidState(s) => write!(f, "not allowed in state {s:?}"),
            CmError::IdsExhausted => f.write_str("every communication ID is in use"),
            CmError::ListenersExhausted => f.write_str("every listener slot is in use"),
            CmError::ServiceIdInUse => f.write_str("the service ID is listened on already"),
            CmError::Message(e) => write!(f, "message: {e}"),
        }
    }
}

impl std::error::Error for CmError {}

impl CmError {
    /// The errno a C caller gets.
    pub const fn errno(self) -> i32 {
        match self {
            CmError::UnknownId | CmError::InvalidState(_) | CmError::Message(_) => 22, // EINVAL
            CmError::IdsExhausted | CmError::ListenersExhausted => 12,                 // ENOMEM
            CmError::ServiceIdInUse => 98,                                             // EADDRINUSE
        }
    }
}

/// Why a received MAD had no effect (each also counts in [`CmCounters`]).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum CmDrop {
    /// Not a MAD, or a CM MAD that does not parse.
    Malformed(uroce_wire::Error),
    /// A CM message this CM does not handle (LAP, APR, ClassPortInfo).
    Unsupported,
    /// No connection has this communication ID.
    UnknownId,
    /// The message names a connection but not from its peer, or not its QP.
    Mismatch,
    /// A repeat, answered or ignored as the state says.
    Duplicate,
    /// The message does not fit the connection's state.
    OutOfState(CmState),
    /// A REQ for a QP that is connected already: refused (REJ stale connection).
    Stale,
    /// A REQ for a service nobody listens on: refused (REJ invalid service ID).
    NoListener,
    /// A REQ beyond the bounds: refused (REJ no resources).
    NoResources,
}

macro_rules! per_message {
    ($(#[$m:meta])* $name:ident) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
        pub struct $name {
            /// REQ.
            pub req: u64,
            /// MRA.
            pub mra: u64,
            /// REJ.
            pub rej: u64,
            /// REP.
            pub rep: u64,
            /// RTU.
            pub rtu: u64,
            /// DREQ.
            pub dreq: u64,
            /// DREP.
            pub drep: u64,
            /// SIDR_REQ.
            pub sidr_req: u64,
            /// SIDR_REP.
            pub sidr_rep: u64,
        }

        impl $name {
            fn bump(&mut self, a: AttrId) {
                let c = match a {
                    AttrId::REQ => &mut self.req,
                    AttrId::MRA => &mut self.mra,
                    AttrId::REJ => &mut self.rej,
                    AttrId::REP => &mut self.rep,
                    AttrId::RTU => &mut self.rtu,
                    AttrId::DREQ => &mut self.dreq,
                    AttrId::DREP => &mut self.drep,
                    AttrId::SIDR_REQ => &mut self.sidr_req,
                    _ => &mut self.sidr_rep,
                };
                *c += 1;
            }
        }
    };
}

per_message!(
    /// A count per message type (Linux's `/sys/class/infiniband_cm/<dev>/<port>/cm_*` groups).
    PerMessage
);

/// The CM's counters: Linux's four groups per message, and the drops Linux does not count.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CmCounters {
    /// Messages sent, retries included (`cm_tx_msgs`).
    pub tx_msgs: PerMessage,
    /// Of those, retransmissions (`cm_tx_retries`).
    pub tx_retries: PerMessage,
    /// Messages received (`cm_rx_msgs`).
    pub rx_msgs: PerMessage,
    /// Duplicates received (`cm_rx_duplicates`).
    pub rx_duplicates: PerMessage,
    /// MADs that did not parse, or CM messages this CM does not handle.
    pub rx_malformed: u64,
    /// Messages for no known connection.
    pub rx_unknown_id: u64,
    /// Messages naming a connection from the wrong peer or for the wrong QP.
    pub rx_mismatch: u64,
    /// Messages that do not fit the connection's state.
    pub rx_out_of_state: u64,
    /// REQs refused as stale.
    pub rej_stale: u64,
    /// REQs refused for want of a listener.
    pub rej_no_listener: u64,
    /// REQs refused for want of resources.
    pub rej_no_resources: u64,
    /// MADs dropped because the transmit queue was full (a retransmission recovers).
    pub tx_queue_full: u64,
}

/// Limits and protocol parameters.
#[derive(Clone, Copy, Debug)]
pub struct CmConfig {
    /// Our CA GUID (rxe: the EUI-64 of the port's MAC).
    pub ca_guid: u64,
    /// The high 32 bits of every TID we issue (Linux: the MAD agent's `hi_tid`).
    pub hi_tid: u32,
    /// Seed of the communication IDs (any value; Linux XORs a random operand in).
    pub comm_id_seed: u32,
    /// The top byte of every communication ID (and SIDR request ID) we allocate: the QPN block
    /// of one process among several on an interface (`DeviceConfig::qpn_block`). Every CM
    /// message but a REQ names its receiver's ID (remote communication ID; SIDR REP: the
    /// request ID), so the kernel's steering program reads that byte to find the process a MAD
    /// to QP1 belongs to. `None`: IDs over all 32 bits.
    pub id_block: Option<u8>,
    /// Communication IDs alive at once (connections, REQs being answered, time wait).
    pub max_ids: usize,
    /// Listeners.
    pub max_listeners: usize,
    /// Unanswered REQs one listener holds (a REQ flood stops here).
    pub backlog: usize,
    /// MADs waiting to be sent.
    pub max_tx_queue: usize,
    /// Packet lifetime (IBA time) the timeouts add twice (Linux RoCE: `CMA_IBOE_PACKET_LIFETIME`).
    pub packet_life_time: u8,
}

impl Default for CmConfig {
    fn default() -> CmConfig {
        CmConfig {
            ca_guid: 0,
            hi_tid: 1,
            comm_id_seed: 0x5eed_c0de,
            id_block: None,
            max_ids: 4096,
            max_listeners: 256,
            backlog: 256,
            max_tx_queue: 4096,
            packet_life_time: 16,
        }
    }
}

/// Linux's `cm_convert_to_ms`: an IBA time (4.096 µs · 2^t) rounded to a power-of-two number of
/// milliseconds, `1 << max(t - 8, 0)` ms, the unit every CM timeout is computed in.
pub fn cm_time(t: u8) -> Duration {
    Duration::from_millis(1u64 << t.saturating_sub(8).min(31))
}

/// A message under retransmission.
#[derive(Clone, Debug)]
struct Pending {
    mad: Box<[u8; MAD_LEN]>,
    attr: AttrId,
    timeout: Duration,
    retries_left: u8,
}

/// One communication ID.
#[derive(Clone, Debug)]
struct Conn {
    state: CmState,
    ids: CommIds,
    peer: MadAddr,
    remote_ca_guid: u64,
    local_qpn: u32,
    remote_qpn: u32,
    service_id: u64,
    /// The TID of the exchange (Linux: one per ID, echoed by the responses).
    tid: u64,
    /// The request waiting for its answer.
    pending: Option<Pending>,
    /// The last answer we sent (MRA, RTU, DREP), repeated when its request comes again.
    last_answer: Option<Box<[u8; MAD_LEN]>>,
    /// The one deadline (retransmission, the MRA's wait, time wait).
    deadline: Option<Instant>,
    /// How long our requests wait for an answer (REQ: from our parameters; passive: the REQ's
    /// local CM response timeout); MRA extensions add to it.
    response_timeout: Duration,
    /// Retries our requests get (the REQ's max CM retries).
    max_retries: u8,
    /// Time wait's length.
    timewait: Duration,
    /// The listener a passive ID came through (its backlog counts it until answered).
    listen: Option<u64>,
    /// The application destroyed it; only time wait keeps it.
    destroyed: bool,
}

/// The communication manager of one port.
#[derive(Debug)]
pub struct Cm {
    cfg: CmConfig,
    conns: HashMap<u32, Conn>,
    /// service ID → unanswered REQs it holds.
    listeners: HashMap<u64, usize>,
    /// (peer GID, the peer's communication ID) → our ID: finds a repeated REQ.
    by_remote: HashMap<(IpAddr, u32), u32>,
    /// (peer GID, the peer's QPN) → our ID: finds a stale connection.
    by_qp: HashMap<(IpAddr, u32), u32>,
    /// (deadline, id) of every running deadline.
    timers: BTreeSet<(Instant, u32)>,
    tx: VecDeque<OutMad>,
    events: VecDeque<CmEvent>,
    next_id: u32,
    counters: CmCounters,
}

impl Cm {
    /// A CM with no listeners and no connections.
    pub fn new(cfg: CmConfig) -> Cm {
        Cm {
            cfg,
            conns: HashMap::new(),
            listeners: HashMap::new(),
            by_remote: HashMap::new(),
            by_qp: HashMap::new(),
            timers: BTreeSet::new(),
            tx: VecDeque::new(),
            events: VecDeque::new(),
            next_id: 0,
            counters: CmCounters::default(),
        }
    }

    /// The counters.
    pub fn counters(&self) -> &CmCounters {
        &self.counters
    }

    /// An ID's state.
    pub fn state(&self, id: CmId) -> Option<CmState> {
        self.conns.get(&id.0).map(|c| c.state)
    }

    /// Communication IDs alive (time wait included).
    pub fn ids_in_use(&self) -> usize {
        self.conns.len()
    }

    /// Whether a MAD waits to be sent.
    pub fn has_transmit(&self) -> bool {
        !self.tx.is_empty()
    }

    /// The next MAD to send.
    pub fn poll_transmit(&mut self) -> Option<OutMad> {
        self.tx.pop_front()
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<CmEvent> {
        self.events.pop_front()
    }

    /// A fresh communication ID: never 0 (a message's "unknown" remote ID), never one in use.
    fn alloc_id(&mut self) -> Result<u32, CmError> {
        if self.conns.len() >= self.cfg.max_ids {
            return Err(CmError::IdsExhausted);
        }
        loop {
            self.next_id = self.next_id.wrapping_add(1);
            // An odd multiplier is a bijection on u32: IDs look random and do not repeat
            // before 2^32 allocations.
            let id = self.next_id.wrapping_mul(0x9e37_79b1) ^ self.cfg.comm_id_seed;
            // (with a block, the low 24 bits: still a bijection on `next_id` mod 2^24)
            let id = self.cfg.id_block.map_or(id, |b| u32::from(b) << 24 | id & 0x00ff_ffff);
            if id != 0 && !self.conns.contains_key(&id) {
                return Ok(id);
            }
        }
    }

    /// Keep a new ID, and index it by what it knows of its peer.
    fn insert(&mut self, c: Conn) {
        let id = c.ids.local;
        self.conns.insert(id, c);
        self.index(id);
    }

    /// Index an ID by its peer's communication ID and QPN, once known.
    fn index(&mut self, id: u32) {
        let Some(c) = self.conns.get(&id) else { return };
        if c.ids.remote != 0 {
            self.by_remote.insert((c.peer.gid, c.ids.remote), id);
        }
        if c.remote_qpn != 0 {
            self.by_qp.insert((c.peer.gid, c.remote_qpn), id);
        }
    }

    /// The TID of an ID's exchanges.
    fn tid_of(&self, id: u32) -> u64 {
        ((self.cfg.hi_tid as u64) << 32) | id as u64
    }

    /// Queue a MAD; counts it.
    fn send(&mut self, to: MadAddr, mad: Box<[u8; MAD_LEN]>, attr: AttrId, retry: bool) {
        if self.tx.len() >= self.cfg.max_tx_queue {
            self.counters.tx_queue_full += 1;
            return;
        }
        self.counters.tx_msgs.bump(attr);
        if retry {
            self.counters.tx_retries.bump(attr);
        }
        self.tx.push_back(OutMad { to, mad });
    }

    /// Build a message's MAD.
    fn build(msg: &CmMessage<'_>, tid: u64) -> Result<Box<[u8; MAD_LEN]>, CmError> {
        let mut b = Box::new([0u8; MAD_LEN]);
        msg.emit(tid, 0, &mut b[..]).map_err(CmError::Message)?;
        Ok(b)
    }

    /// Move `id` to `to`, as the table allows.
    fn enter(&mut self, id: u32, to: CmState) {
        if let Some(c) = self.conns.get_mut(&id) {
            debug_assert!(state::allowed(c.state, to), "CM transition {:?} -> {to:?}", c.state);
            tracing::debug!(id = format_args!("{id:#010x}"), from = ?c.state, ?to, "cm state");
            if c.state == CmState::ReqRcvd || c.state == CmState::MraReqSent {
                // Answered: no longer in its listener's backlog.
                if let Some(n) = c.listen.and_then(|l| self.listeners.get_mut(&l)) {
                    *n = n.saturating_sub(1);
                }
                c.listen = None;
            }
            c.state = to;
        }
    }

    /// Send a request and keep it for retransmission until its answer comes or its retries run
    /// out (then [`timers`] reports the error the state calls for).
    fn send_request(&mut self, now: Instant, id: u32, mad: Box<[u8; MAD_LEN]>, attr: AttrId) {
        let Some(c) = self.conns.get_mut(&id) else { return };
        let timeout = c.response_timeout;
        c.pending = Some(Pending { mad: mad.clone(), attr, timeout, retries_left: c.max_retries });
        let to = c.peer;
        self.send(to, mad, attr, false);
        self.arm(id, Some(now + timeout));
    }
}

pub use api::{AcceptParams, ConnectParams};
