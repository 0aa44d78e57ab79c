//! Reliable-connection queue pairs: the state, the queues, and the three roles of Linux rxe
//! (requester, completer, responder) as plain methods that return what they did instead of
//! scheduling each other through shared flags.
//!
//! * [`requester`]: turns send WQEs into request packets (segmentation by path MTU, PSNs,
//!   AckReq cadence, send window, max_rd_atomic, fences, pacing).
//! * [`completer`]: matches ACKs, NAKs, READ responses and atomic ACKs to send WQEs,
//!   completes them in order, and reports progress and losses (NAK, implicit NAK, RNR,
//!   timeout) to the send state.
//! * `send_state`: the send side's PSNs, cursor, retry budgets and loss recovery (Go-Back-N),
//!   with one owner: the requester and the completer read it and report events to it; its
//!   fields are private to it.
//! * [`responder`]: checks and executes incoming requests (PSN, opcode sequence, access,
//!   resources, length, R_Key), writes memory, and produces ACKs, NAKs and READ responses.
//! * `pacing`, `table`, [`state`]: the pacer, the device's QPs by number, the state table.
//!
//! A QP's timers (local ACK timeout, RNR wait, pacing departure) are its own
//! [`crate::timer::TimerTable`]; the device only keeps the queue that says when to look.

pub mod completer;
pub(crate) mod congestion;
pub(crate) mod pacing;
pub mod requester;
pub mod responder;
pub(crate) mod send_state;
pub(crate) mod srq;
pub mod state;
pub(crate) mod table;

use crate::config::DeviceConfig;
use crate::counters::Counters;
use crate::cq::Cq;
use crate::mr::MrTable;
use crate::path::{FrameTemplate, Idents};
use crate::time::Instant;
use crate::timer::{Timer, TimerQueue, TimerTable};
use crate::verbs::*;
use std::collections::VecDeque;
use uroce_wire::{Msn, Psn, Qpn};

/// Scatter/gather entries a WQE slot holds.
pub const MAX_SGE: usize = 16;
/// Largest message (IBTA: 2^31 bytes; C9-94 for RETH DMA length).
pub const MAX_MSG_SIZE: u64 = 1 << 31;

/// Whether a received frame's ICRC has been checked yet.
///
/// Every frame's ICRC is checked before anything acts on it (rxe `rxe_icrc_check` in
/// `rxe_rcv`, before any QP sees the packet). An RDMA WRITE packet with a payload has it
/// checked as late as that allows: after the pure lookups (device routing, the QP, its PSN,
/// the R_Key and bounds), just before its first byte is placed, so that the destination's
/// cache lines are requested while the CRC runs ([`uroce_wire::ParsedFrame::check_icrc_prefetching`]).
/// Every path that would act on such a frame in another way (a drop counted as something
/// else, a NAK, a duplicate's ACK) checks it first, so a corrupt frame is always an ICRC error
/// and nothing else.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Icrc {
    /// Checked (or not to be checked: `DeviceConfig::check_icrc` off).
    Checked,
    /// Still to be checked before the frame has any effect.
    Pending,
}

/// A frame whose pending ICRC turned out wrong: dropped, counted as an ICRC error.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct BadIcrc;

/// Check a frame's ICRC (always passes in fuzzing builds, where a fuzzer could not get past it).
#[inline]
pub(crate) fn icrc_ok(p: &uroce_wire::ParsedFrame<'_>) -> bool {
    cfg!(fuzzing) || p.check_icrc().is_ok()
}

/// Everything a QP needs from the device while it runs.
pub(crate) struct Ctx<'a> {
    pub now: Instant,
    pub cfg: &'a DeviceConfig,
    pub mrs: &'a mut MrTable,
    pub cqs: &'a mut [Option<Cq>],
    pub counters: &'a mut Counters,
    pub events: &'a mut VecDeque<AsyncEvent>,
    /// IPv4 identification counters (see `FrameTemplate::emit_copy`).
    pub idents: &'a mut Idents,
    /// The device's timer queue (a QP's deadlines are its own [`TimerTable`]).
    pub timers: &'a mut TimerQueue,
    /// The device's shared receive queues.
    pub srqs: &'a mut [Option<srq::Srq>],
}

impl Ctx<'_> {
    /// Deliver a completion (never lost: an overflowing CQ keeps it and raises an event).
    pub fn complete(&mut self, cq: CqHandle, wc: WorkCompletion) {
        if let Some(Some(q)) = self.cqs.get_mut(cq.0 as usize) {
            if !q.push(wc) {
                self.counters.cq_overflow += 1;
                self.events.push_back(AsyncEvent::CqError(cq));
            }
        }
    }
}

/// Asynchronous events (`enum ibv_event_type`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum AsyncEvent {
    /// IBV_EVENT_QP_FATAL: the QP went to the error state because of a transport error.
    QpFatal(u32),
    /// IBV_EVENT_SQ_DRAINED: the send queue of a QP in SQD has no outstanding WQEs.
    SqDrained(u32),
    /// IBV_EVENT_CQ_ERR: a CQ overflowed.
    CqError(CqHandle),
    /// IBV_EVENT_SRQ_LIMIT_REACHED: an SRQ fell below its armed limit.
    SrqLimitReached(SrqHandle),
}

/// A posted send work request, in a preallocated slot.
#[derive(Clone, Debug)]
pub(crate) struct SendWqe {
    pub wr_id: u64,
    pub opcode: WrOpcode,
    pub flags: SendFlags,
    pub signaled: bool,
    /// SGEs in the queue's pool ([`SendQueue::sges`]; kept out of the slot so that a WQE of a
    /// QP with one SGE is two cache lines, not six).
    pub num_sge: usize,
    /// Inline payload (copied at post time), when `INLINE`.
    pub inline: Vec<u8>,
    pub is_inline: bool,
    pub remote_addr: u64,
    pub rkey: u32,
    pub compare_add: u64,
    pub swap: u64,
    pub imm_data: u32,
    pub invalidate_rkey: u32,
    /// Total bytes.
    pub length: u32,
    /// PSNs assigned (first packet sent at least once).
    pub psn_assigned: bool,
    pub first_psn: Psn,
    pub last_psn: Psn,
    /// The responder's MSN before this message (messages sent before it since RESET).
    pub msn: Msn,
    /// READ: bytes of response received.
    pub read_rcvd: u32,
    /// READ: byte offset the last READ request (first or retried) started at; its responses
    /// restart with FIRST/ONLY there.
    pub read_req_off: u32,
    /// A local error found before the first packet (bad SGE): the WQE completes with it, in
    /// order, and the QP goes to the error state.
    pub local_err: Option<WcStatus>,
}

impl SendWqe {
    fn empty(max_inline: usize) -> SendWqe {
        SendWqe {
            wr_id: 0,
            opcode: WrOpcode::Send,
            flags: SendFlags::NONE,
            signaled: false,
            num_sge: 0,
            inline: Vec::with_capacity(max_inline),
            is_inline: false,
            remote_addr: 0,
            rkey: 0,
            compare_add: 0,
            swap: 0,
            imm_data: 0,
            invalidate_rkey: 0,
            length: 0,
            psn_assigned: false,
            first_psn: Psn::new(0),
            last_psn: Psn::new(0),
            msn: Msn::new(0),
            read_rcvd: 0,
            read_req_off: 0,
            local_err: None,
        }
    }
    /// Packets (SEND/WRITE) or PSNs (READ: response packets) this WQE uses at `mtu`.
    pub fn npkts(&self, mtu: usize) -> u32 {
        match self.opcode {
            WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd => 1,
            _ => crate::formulas::read_psns(self.length, mtu as u32),
        }
    }
}

/// A posted receive work request (its scatter list lives in [`RecvQueue`]'s slot).
#[derive(Clone, Copy, Debug)]
pub(crate) struct RecvWqe {
    pub wr_id: u64,
    pub length: u64,
    slot: u32,
    num_sge: u32,
}

/// The receive queue: WQEs in posting order, their scatter lists in preallocated slots of
/// `max_recv_sge` entries (a post copies only the SGEs it has, nothing is allocated).
#[derive(Debug)]
pub(crate) struct RecvQueue {
    wqes: VecDeque<RecvWqe>,
    sges: Vec<Sge>,
    per: usize,
    depth: u32,
    next_slot: u32,
}

impl RecvQueue {
    pub(crate) fn new(depth: u32, max_sge: u32) -> RecvQueue {
        let per = (max_sge as usize).clamp(1, MAX_SGE);
        let n = depth.max(1);
        RecvQueue {
            wqes: VecDeque::with_capacity(n as usize),
            sges: vec![Sge::default(); n as usize * per],
            per,
            depth: n,
            next_slot: 0,
        }
    }
    pub fn len(&self) -> usize {
        self.wqes.len()
    }
    /// Queue a WQE; the caller checked the depth and `sges.len() <= max_recv_sge`.
    pub fn push(&mut self, wr_id: u64, sges: &[Sge]) {
        let slot = self.next_slot;
        self.next_slot = (slot + 1) % self.depth;
        let n = sges.len().min(self.per);
        let at = slot as usize * self.per;
        self.sges[at..at + n].copy_from_slice(&sges[..n]);
        let length = sges[..n].iter().map(|s| s.length as u64).sum();
        self.wqes.push_back(RecvWqe { wr_id, length, slot, num_sge: n as u32 });
    }
    pub fn front(&self) -> Option<RecvWqe> {
        self.wqes.front().copied()
    }
    /// The scatter list of a queued WQE.
    pub fn sges(&self, w: &RecvWqe) -> &[Sge] {
        let at = w.slot as usize * self.per;
        &self.sges[at..at + w.num_sge as usize]
    }
    pub fn pop_front(&mut self) -> Option<RecvWqe> {
        self.wqes.pop_front()
    }
    pub fn clear(&mut self) {
        self.wqes.clear();
    }
}

/// The send queue: a ring of preallocated slots; `head` is the oldest uncompleted WQE and
/// `tail` the next free slot (free-running counters). The ring has a power-of-two number of
/// slots (an index is a mask, not a division, on the per-packet path); `depth` WQEs fit.
#[derive(Debug)]
pub(crate) struct SendQueue {
    slots: Vec<SendWqe>,
    /// Every slot's gather list: `per` entries per slot (`max_send_sge`).
    sges: Vec<Sge>,
    /// A UD QP's: every slot's destination (kept out of the slot as the gather lists are;
    /// empty for other QPs).
    uds: Vec<Option<UdDest>>,
    per: usize,
    mask: u64,
    depth: usize,
    pub head: u64,
    pub tail: u64,
}

impl SendQueue {
    fn new(depth: usize, max_inline: usize, max_sge: u32, ud: bool) -> SendQueue {
        let n = depth.max(1).next_power_of_two();
        let per = (max_sge as usize).clamp(1, MAX_SGE);
        SendQueue {
            slots: (0..n).map(|_| SendWqe::empty(max_inline)).collect(),
            sges: vec![Sge::default(); n * per],
            uds: if ud { vec![None; n] } else { Vec::new() },
            per,
            mask: n as u64 - 1,
            depth,
            head: 0,
            tail: 0,
        }
    }
    /// The gather list of WQE `i`.
    #[inline]
    pub fn sges(&self, i: u64) -> &[Sge] {
        let at = (i & self.mask) as usize * self.per;
        &self.sges[at..at + self.get(i).num_sge.min(self.per)]
    }
    /// Set the gather list of WQE `i` (the caller checked `list.len() <= max_send_sge`).
    fn set_sges(&mut self, i: u64, list: &[Sge]) {
        let n = list.len().min(self.per);
        let at = (i & self.mask) as usize * self.per;
        self.sges[at..at + n].copy_from_slice(&list[..n]);
        self.get_mut(i).num_sge = n;
    }
    /// The destination of UD WQE `i` (`None` on other QPs).
    #[inline]
    pub fn ud(&self, i: u64) -> Option<UdDest> {
        self.uds.get((i & self.mask) as usize).copied().flatten()
    }
    /// Set the destination of WQE `i` (a UD QP's).
    fn set_ud(&mut self, i: u64, ud: Option<UdDest>) {
        if let Some(u) = self.uds.get_mut((i & self.mask) as usize) {
            *u = ud;
        }
    }
    pub fn len(&self) -> usize {
        (self.tail - self.head) as usize
    }
    pub fn is_full(&self) -> bool {
        self.len() >= self.depth
    }
    #[inline]
    pub fn get(&self, i: u64) -> &SendWqe {
        &self.slots[(i & self.mask) as usize]
    }
    #[inline]
    pub fn get_mut(&mut self, i: u64) -> &mut SendWqe {
        &mut self.slots[(i & self.mask) as usize]
    }
}

/// A queue pair: RC, UC or UD ([`QpType`]).
#[derive(Debug)]
pub struct Qp {
    pub(crate) qpn: Qpn,
    pub(crate) qp_type: QpType,
    /// The port's MTU: the largest datagram of a UD QP (which has no path MTU).
    pub(crate) port_mtu: Mtu,
    /// UD: the last datagram sent went to one of this device's own GIDs.
    pub(crate) ud_loopback: bool,
    pub(crate) pd: PdHandle,
    pub(crate) send_cq: CqHandle,
    pub(crate) recv_cq: CqHandle,
    pub(crate) cap: QpCap,
    pub(crate) sq_sig_all: bool,
    pub(crate) state: QpState,
    pub(crate) attr: QpAttr,
    pub(crate) sq: SendQueue,
    pub(crate) rq: RecvQueue,
    /// The shared receive queue this QP receives from instead of `rq`.
    pub(crate) srq: Option<SrqHandle>,
    /// The send side's sequence state (PSNs, cursor, retries): its one owner.
    pub(crate) send: send_state::SendState,
    pub(crate) resp: responder::Responder,
    /// Headers of every frame this QP sends (built when the path is set).
    pub(crate) template: Option<FrameTemplate>,
    /// When the next request packet may leave (a rate limit; congestion control).
    pub(crate) pacer: pacing::Pacer,
    /// This QP's deadlines: local ACK timeout, RNR wait, pacing departure, congestion control.
    pub(crate) timers: TimerTable,
    pub(crate) in_ready: bool,
    /// The notification point: a CNP due, the last one's time.
    pub(crate) np: crate::cc::Np,
    /// The reaction point's algorithm (from the first CNP on; [`crate::cc`]).
    pub(crate) cc: Option<Box<dyn crate::cc::CongestionControl>>,
}

impl Qp {
    pub(crate) fn new(qpn: Qpn, pd: PdHandle, init: &QpInitAttr, port_mtu: Mtu) -> Qp {
        Qp {
            qpn,
            qp_type: init.qp_type,
            port_mtu,
            ud_loopback: false,
            pd,
            send_cq: init.send_cq,
            recv_cq: init.recv_cq,
            cap: init.cap,
            sq_sig_all: init.sq_sig_all,
            state: QpState::Reset,
            attr: QpAttr::default(),
            sq: SendQueue::new(
                init.cap.max_send_wr as usize,
                init.cap.max_inline_data as usize,
                init.cap.max_send_sge,
                init.qp_type == QpType::Ud,
            ),
            rq: RecvQueue::new(init.cap.max_recv_wr, init.cap.max_recv_sge),
            srq: init.srq,
            send: send_state::SendState::default(),
            resp: responder::Responder::default(),
            template: None,
            pacer: pacing::Pacer::default(),
            timers: TimerTable::default(),
            in_ready: false,
            np: Default::default(),
            cc: None,
        }
    }

    /// The QP number.
    pub fn qpn(&self) -> u32 {
        self.qpn.value()
    }

    /// The transport.
    pub fn qp_type(&self) -> QpType {
        self.qp_type
    }

    /// The state.
    pub fn state(&self) -> QpState {
        self.state
    }

    /// The queue sizes it was created with (`ibv_query_qp`'s `cap`).
    pub fn cap(&self) -> QpCap {
        self.cap
    }

    /// Whether every send WR completes (`sq_sig_all`).
    pub fn sq_sig_all(&self) -> bool {
        self.sq_sig_all
    }

    /// The rate the QP is paced at in bits per second, if any: the lower of its rate limit
    /// (`Device::set_rate_limit`) and congestion control's rate.
    pub fn rate_limit(&self) -> Option<u64> {
        self.pacer.rate()
    }

    /// Congestion control's rate in bits per second (`None`: unlimited, or no algorithm).
    pub fn cc_rate(&self) -> Option<u64> {
        self.cc.as_ref().and_then(|c| c.rate())
    }

    /// Current attributes (`ibv_query_qp`).
    pub fn attr(&self) -> QpAttr {
        let mut a = self.attr;
        a.qp_state = self.state;
        a.cur_qp_state = self.state;
        a.sq_psn = self.send.next_psn().value();
        a.rq_psn = self.resp.epsn.value();
        a
    }

    /// A one-line summary of the protocol state, for diagnostics.
    pub fn debug_summary(&self) -> String {
        let r = &self.send;
        let (cur, cur_off) = r.cursor();
        let head = (self.sq.head < self.sq.tail).then(|| {
            let w = self.sq.get(self.sq.head);
            format!("{:?} len {} psn {}..{} rcvd {}", w.opcode, w.length, w.first_psn, w.last_psn, w.read_rcvd)
        });
        format!(
            "qp {:#x} {:?} sq {}..{} cur {}+{} una {} high {} retry_left {} retrying {:?} rto {:?} rnr {:?} head [{}] | epsn {} msn {} latched {} msg {:?} out {}",
            self.qpn.value(),
            self.state,
            self.sq.head,
            self.sq.tail,
            cur,
            cur_off,
            r.una(),
            r.next_psn(),
            r.retry_left(),
            r.retrying_from(),
            self.timers.get(Timer::Retransmit),
            self.timers.get(Timer::Rnr),
            head.unwrap_or_default(),
            self.resp.epsn,
            self.resp.msn.value(),
            self.resp.nak_latched,
            self.resp.msg,
            self.resp.out.len()
        )
    }

    /// Path MTU in bytes (a UD QP's: the port's).
    pub(crate) fn mtu(&self) -> usize {
        match self.qp_type {
            QpType::Ud => self.port_mtu.bytes(),
            _ => self.attr.path_mtu.bytes(),
        }
    }

    /// Whether the frame this QP just produced goes to one of the device's own GIDs (and is
    /// delivered to the device instead of sent).
    pub(crate) fn sent_loopback(&self) -> bool {
        match self.qp_type {
            QpType::Ud => self.ud_loopback,
            _ => self.template.as_ref().is_some_and(|t| t.loopback),
        }
    }

    /// Start (or move) one of this QP's timers.
    #[inline]
    pub(crate) fn arm(&mut self, ctx: &mut Ctx<'_>, t: Timer, at: Instant) {
        self.timers.set(ctx.timers, self.qpn.value(), t, at);
    }

    /// One of this QP's timers fired.
    pub(crate) fn on_timer(&mut self, ctx: &mut Ctx<'_>, t: Timer) {
        match t {
            Timer::Retransmit => self.on_retransmit_timeout(ctx),
            Timer::Rnr => self.on_rnr_timeout(ctx),
            // The departure time has come: the device queues the QP to send.
            Timer::Departure => {}
            Timer::Cc => self.on_cc_timeout(ctx),
        }
    }

    /// Does the QP have anything to transmit right now (or once a timer fires)?
    #[inline]
    pub(crate) fn has_output(&self) -> bool {
        !self.resp.out.is_empty()
            || self.np.pending
            || (self.send.cursor().0 != self.sq.tail && self.state == QpState::Rts)
    }

    /// Move to the error state: flush every outstanding WQE with WR_FLUSH_ERR (IBTA 10.7.3.1:
    /// errored and flushed WRs always complete, signaled or not), stop timers.
    pub(crate) fn enter_error(&mut self, ctx: &mut Ctx<'_>, fatal: bool) {
        if self.state == QpState::Err {
            return;
        }
        self.state = QpState::Err;
        if fatal {
            ctx.events.push_back(AsyncEvent::QpFatal(self.qpn.value()));
        }
        self.flush(ctx);
    }

    /// Complete every WQE left in both queues with WR_FLUSH_ERR.
    pub(crate) fn flush(&mut self, ctx: &mut Ctx<'_>) {
        while self.sq.head != self.sq.tail {
            let w = self.sq.get(self.sq.head);
            let wc = WorkCompletion {
                wr_id: w.wr_id,
                status: WcStatus::WrFlushErr,
                opcode: w.opcode.wc_opcode(),
                qp_num: self.qpn.value(),
                ..Default::default()
            };
            ctx.complete(self.send_cq, wc);
            self.sq.head += 1;
        }
        self.send.on_flush(self.sq.tail);
        self.timers.stop_all();
        self.resp.msg = responder::InMsg::None;
        // A WQE taken for a message belongs to the QP, from its RQ or its SRQ; the SRQ's
        // others stay for its other QPs.
        if let Some(h) = self.resp.held.take() {
            ctx.complete(self.recv_cq, self.flushed_recv(h.wr_id));
        }
        while let Some(w) = self.rq.pop_front() {
            ctx.complete(self.recv_cq, self.flushed_recv(w.wr_id));
        }
    }

    /// Take the next receive WQE (from the SRQ, if the QP has one), or `None`.
    pub(crate) fn take_recv_wqe(&mut self, ctx: &mut Ctx<'_>) -> Option<srq::HeldWqe> {
        match self.srq {
            None => {
                let w = self.rq.front()?;
                let h = srq::HeldWqe::of(&self.rq, &w);
                self.rq.pop_front();
                Some(h)
            }
            Some(s) => {
                let q = ctx.srqs.get_mut(s.0 as usize)?.as_mut()?;
                let (h, fired) = q.take()?;
                if fired {
                    ctx.events.push_back(AsyncEvent::SrqLimitReached(s));
                }
                Some(h)
            }
        }
    }

    /// The length of the receive WQE [`Qp::take_recv_wqe`] would take, if there is one.
    pub(crate) fn next_recv_len(&self, ctx: &Ctx<'_>) -> Option<u64> {
        match self.srq {
            None => self.rq.front().map(|w| w.length),
            Some(s) => ctx.srqs.get(s.0 as usize)?.as_ref()?.queue.front().map(|w| w.length),
        }
    }

    fn flushed_recv(&self, wr_id: u64) -> WorkCompletion {
        WorkCompletion {
            wr_id,
            status: WcStatus::WrFlushErr,
            opcode: WcOpcode::Recv,
            qp_num: self.qpn.value(),
            ..Default::default()
        }
    }

    /// Reset: back to a fresh QP (queues emptied without completions, as `ibv_modify_qp` to
    /// RESET does).
    pub(crate) fn reset(&mut self) {
        self.sq.head = self.sq.tail;
        self.rq.clear();
        // (a WQE held for a message goes with the responder state below)
        self.send = send_state::SendState::new(self.sq.tail);
        self.timers.stop_all();
        self.pacer = pacing::Pacer::default();
        self.np = Default::default();
        self.cc = None;
        self.resp = responder::Responder::default();
        self.template = None;
        self.attr = QpAttr::default();
        self.state = QpState::Reset;
    }
}
