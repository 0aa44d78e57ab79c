//! The responder: incoming requests → memory writes, receive completions, and responses.
//!
//! The checks run in rxe's order (`rxe_resp.c`), each a plain function of the packet and the
//! QP, and each failure maps to one NAK (IBTA §9.7.5.2, Table 44):
//!
//! 1. `check_psn` — PSN == expected: go on. Ahead: out of sequence, one NAK PSN sequence error
//!    per gap then silence until the expected PSN arrives (C9-110, rxe `sent_psn_nak`). Behind:
//!    a duplicate (§9.7.5.1.3): SEND/WRITE are re-acknowledged without executing (C9-105),
//!    a READ is executed again from the MR, an atomic is answered from the replay cache.
//! 2. `check_op_seq` — FIRST/MIDDLE/LAST order within a message (C9-87) → invalid request.
//! 3. `check_op_valid` — the QP allows the remote operation (qp_access_flags; READ/atomic need
//!    max_dest_rd_atomic > 0) → invalid request.
//! 4. `check_resources` — a receive WQE for a SEND or WRITE with immediate → RNR NAK.
//! 5. `check_length` — FIRST/MIDDLE carry exactly the PMTU, LAST 1..=PMTU, ONLY ≤ PMTU (C9-92);
//!    DMA length ≤ 2^31 (C9-94) → invalid request.
//! 6. `check_rkey` — R_Key, PD, access right, bounds (a zero-length transfer needs no valid
//!    R_Key, C9-88); atomics 8-byte aligned → remote access error / invalid request.
//! 7. execute, then acknowledge when AckReq is set (READ and atomics always get responses).
//!
//! Remote access, invalid request and remote operational errors move the QP to ERR after the
//! NAK (§9.7.5.2.{3,4,5}); an RNR NAK does not. MSN counts completed requests: the end of a
//! SEND/WRITE, a READ when accepted (C9-148), an atomic when executed.

use super::requester::scatter;
use super::{icrc_ok, BadIcrc, Ctx, Icrc, Qp};
use crate::verbs::*;
use std::collections::VecDeque;
use uroce_wire::opcode::{Operation, Position};
use uroce_wire::{AethRepr, AtomicAckEthRepr, Msn, NakCode, ParsedFrame, Psn, RethRepr, RnrTimer, Syndrome};

/// The bytes at the start of a UD receive buffer that hold the GRH (IBTA §11.4.1.2).
pub use crate::grh::GRH_LEN;

/// A message being received across several packets.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) enum InMsg {
    /// Not inside a multi-packet message.
    #[default]
    None,
    /// A SEND: it lands in the receive WQE at the front of the RQ (popped when the message
    /// ends); `off` bytes received so far.
    Send { off: u64 },
    /// An RDMA WRITE: where the next byte goes and how many are still due.
    Write { rkey: u32, va: u64, resid: u32, total: u32 },
}

/// A READ or atomic kept so a duplicate can be answered (rxe `resp_res`).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) enum Resource {
    #[default]
    Free,
    Read {
        first_psn: Psn,
        last_psn: Psn,
        va: u64,
        rkey: u32,
        len: u32,
        msn: Msn,
        /// Times executed again for a duplicate, and when last ([`crate::Guards`]).
        replays: u32,
        replayed_at: crate::time::Instant,
    },
    Atomic {
        psn: Psn,
        orig: u64,
    },
}

/// Something the responder has to send.
#[derive(Clone, Copy, Debug)]
pub(crate) enum RespOut {
    /// ACK or NAK.
    Ack { psn: Psn, syndrome: Syndrome, msn: Msn },
    /// READ responses still to send for one READ request (`msn`: the MSN after the READ was
    /// accepted, carried in the responses' AETHs).
    Read { psn: Psn, va: u64, rkey: u32, off: u32, len: u32, msn: Msn },
    /// The response to an atomic.
    AtomicAck { psn: Psn, orig: u64, msn: Msn },
}

/// Responder state.
#[derive(Debug, Default)]
pub(crate) struct Responder {
    /// Expected PSN of the next request.
    pub epsn: Psn,
    /// Message sequence number.
    pub msn: Msn,
    /// A PSN sequence NAK was sent for the current gap.
    pub nak_latched: bool,
    /// Multi-packet message in progress.
    pub msg: InMsg,
    /// READ/atomic replay cache, a ring of `max_dest_rd_atomic` entries.
    pub resources: Vec<Resource>,
    pub next_res: usize,
    /// Responses waiting to be sent, in PSN order.
    pub out: VecDeque<RespOut>,
    /// UC: the message in progress lost a packet or failed a check; its remaining packets
    /// are dropped until a FIRST or ONLY (rxe `resp.drop_msg`).
    pub drop_msg: bool,
    /// The receive WQE the SEND in progress is placed into (taken from the RQ or SRQ at its
    /// first packet; a UC message abandoned for a new one leaves it here, to be used again).
    pub held: Option<super::srq::HeldWqe>,
}

/// A failed check: the NAK to send (and whether the QP then goes to ERR).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RespError {
    /// RNR NAK: no receive WQE.
    Rnr,
    /// NAK invalid request; QP to ERR.
    InvalidRequest,
    /// NAK remote access error; QP to ERR.
    RemoteAccess,
    /// NAK remote operational error; QP to ERR.
    RemoteOp,
    /// The frame's pending ICRC is wrong: dropped, nothing else.
    BadIcrc,
}

impl Responder {
    /// Acknowledge `psn` if the request asked for it (AckReq), coalescing.
    #[inline]
    fn ack_if_requested(&mut self, ack_req: bool, psn: Psn, deferred: &mut u64) {
        if ack_req {
            let msn = self.msn;
            self.push_ack(psn, msn, deferred);
        }
    }

    /// A WRITE packet of `n` bytes that does not end its message was placed at `va`: the next
    /// PSN, and where the next packet's bytes go.
    #[inline]
    fn write_continues(&mut self, rkey: u32, va: u64, resid: u32, total: u32, n: u32) {
        self.epsn = self.epsn.add(1);
        self.msg = InMsg::Write { rkey, va: va + n as u64, resid: resid - n, total };
    }

    /// The last packet of a WRITE was placed: the next PSN, no message in progress, and the
    /// message counted (C9-148: the MSN counts each message the responder completes).
    #[inline]
    fn write_ends(&mut self) {
        self.epsn = self.epsn.add(1);
        self.msg = InMsg::None;
        self.msn = self.msn.add(1);
    }

    fn push_ack(&mut self, psn: Psn, msn: Msn, deferred: &mut u64) {
        // Coalesce: ACKs are cumulative, so of two ACKs waiting at the tail only the one with
        // the later PSN needs to go out.
        if let Some(RespOut::Ack { syndrome: Syndrome::Ack(_), psn: waiting, .. }) = self.out.back() {
            *deferred += 1;
            if waiting.diff(psn) >= 0 {
                return;
            }
            self.out.pop_back();
        }
        self.out.push_back(RespOut::Ack { psn, syndrome: Syndrome::ACK_UNLIMITED, msn });
    }

    fn add_resource(&mut self, r: Resource, cap: usize) -> usize {
        if self.resources.len() != cap {
            self.resources = vec![Resource::Free; cap];
            self.next_res = 0;
        }
        // "It is the requester's job to not send too many": the oldest entry is recycled.
        let i = self.next_res;
        self.resources[i] = r;
        self.next_res = (i + 1) % cap;
        i
    }
}

/// Operation class for the sequence check.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Class {
    Send,
    Write,
    Other,
}

fn class(op: Operation) -> Class {
    match op {
        Operation::Send | Operation::SendWithImm | Operation::SendWithInv => Class::Send,
        Operation::Write | Operation::WriteWithImm => Class::Write,
        _ => Class::Other,
    }
}

// The responder's rules, each stated once and used by the general path (`handle_request` →
// `execute_request` → `exec_*`) and by the receive fast path (`place_write`) alike.

/// The states in which a QP receives requests (IBTA §10.3.1: RTR, RTS, SQD).
#[inline]
fn receives(state: QpState) -> bool {
    matches!(state, QpState::Rtr | QpState::Rts | QpState::Sqd)
}

/// 2. check_op_seq (C9-87): a message continues with the same class, never restarts.
#[inline]
fn sequence_ok(msg: &InMsg, cls: Class, pos: Position) -> bool {
    match (!matches!(msg, InMsg::None), pos.is_start()) {
        (false, true) => true,
        (true, false) => matches!((msg, cls), (InMsg::Send { .. }, Class::Send) | (InMsg::Write { .. }, Class::Write)),
        _ => false,
    }
}

/// A RETH's DMA length is at most the largest message (rxe `check_length`: `mtu`-independent
/// limit of 2^31 bytes, as `ibv_query_device`'s `max_msg_sz`).
#[inline]
fn dma_len_ok(reth: &RethRepr) -> bool {
    reth.dma_len as u64 <= super::MAX_MSG_SIZE
}

/// 3. check_op_valid: what the QP allows (rxe: ERR_UNSUPPORTED_OPCODE → invalid request).
#[inline]
fn op_allowed(attr: &QpAttr, op: Operation) -> bool {
    let qa = attr.qp_access_flags;
    match op {
        Operation::Write | Operation::WriteWithImm => qa.contains(AccessFlags::REMOTE_WRITE),
        Operation::ReadRequest => qa.contains(AccessFlags::REMOTE_READ) && attr.max_dest_rd_atomic > 0,
        Operation::CompareSwap | Operation::FetchAdd => {
            qa.contains(AccessFlags::REMOTE_ATOMIC) && attr.max_dest_rd_atomic > 0
        }
        Operation::Send | Operation::SendWithImm | Operation::SendWithInv => true,
        _ => false,
    }
}

/// 5. check_length (C9-92): FIRST/MIDDLE carry exactly the PMTU, LAST 1..=PMTU, ONLY ≤ PMTU.
#[inline]
fn payload_len_ok(pos: Position, n: usize, mtu: usize) -> bool {
    match pos {
        Position::First | Position::Middle => n == mtu,
        Position::Last => n != 0 && n <= mtu,
        Position::Only => n <= mtu,
    }
}

/// A WRITE packet's payload against what its RETH announced (`resid` bytes still due): more
/// data, or a message that ends short of it, is a length error (C9-92, rxe `check_length`).
#[inline]
fn write_fits(n: usize, resid: u32, end: bool) -> bool {
    n as u64 <= resid as u64 && (!end || n as u32 == resid)
}

impl Qp {
    /// Post a receive WR (`ibv_post_recv`).
    pub(crate) fn post_recv(&mut self, ctx: &mut Ctx<'_>, wr: &RecvWr<'_>) -> Result<(), VerbsError> {
        if self.state == QpState::Reset {
            return Err(VerbsError::InvalidState(self.state));
        }
        if self.srq.is_some() {
            return Err(VerbsError::InvalidArgument("the QP receives from an SRQ"));
        }
        if wr.sg_list.len() > (self.cap.max_recv_sge as usize).min(super::MAX_SGE) {
            return Err(VerbsError::InvalidArgument("num_sge exceeds max_recv_sge"));
        }
        if self.rq.len() >= self.cap.max_recv_wr as usize {
            return Err(VerbsError::QueueFull);
        }
        self.rq.push(wr.wr_id, wr.sg_list);
        if self.state == QpState::Err {
            self.flush(ctx);
        }
        Ok(())
    }

    /// A request (SEND, WRITE, READ, atomic) arrived for this QP. With `icrc` pending, the
    /// ICRC is checked before the frame has any effect ([`Icrc`]); `Err` when it is wrong.
    pub(crate) fn handle_request(&mut self, ctx: &mut Ctx<'_>, p: &ParsedFrame<'_>, icrc: Icrc) -> Result<(), BadIcrc> {
        if self.qp_type != QpType::Rc {
            // Only RC WRITEs defer their ICRC (`device::rx`): it has been checked.
            if icrc == Icrc::Pending && !icrc_ok(p) {
                return Err(BadIcrc);
            }
            match self.qp_type {
                QpType::Uc => self.handle_uc_request(ctx, p),
                _ => self.handle_datagram(ctx, p),
            }
            return Ok(());
        }
        let receiving = receives(self.state);
        // Only the next packet in sequence goes on to execution with its ICRC unchecked.
        let mut icrc = icrc;
        if icrc == Icrc::Pending && !(receiving && p.roce.bth.psn == self.resp.epsn) {
            if !icrc_ok(p) {
                return Err(BadIcrc);
            }
            icrc = Icrc::Checked;
        }
        if !receiving {
            ctx.counters.dropped_qp_state += 1;
            return Ok(());
        }
        let psn = p.roce.bth.psn;
        // 1. check_psn
        let d = psn.diff(self.resp.epsn);
        if d > 0 {
            ctx.counters.out_of_seq_request += 1;
            if !self.resp.nak_latched {
                self.resp.nak_latched = true;
                ctx.counters.send_seq_err += 1;
                let (epsn, msn) = (self.resp.epsn, self.resp.msn);
                self.resp.out.push_back(RespOut::Ack {
                    psn: epsn,
                    syndrome: Syndrome::Nak(NakCode::PsnSequenceError),
                    msn,
                });
            }
            return Ok(());
        }
        if d < 0 {
            ctx.counters.duplicate_request += 1;
            self.handle_duplicate(ctx, p);
            return Ok(());
        }
        let r = self.execute_request(ctx, p, &mut icrc);
        match r {
            Err(RespError::BadIcrc) => return Err(BadIcrc),
            // Refused before the check (the lookups are pure): check it before NAKing.
            Err(_) if icrc == Icrc::Pending && !icrc_ok(p) => return Err(BadIcrc),
            _ => {}
        }
        self.resp.nak_latched = false;
        match r {
            Ok(()) => {}
            Err(RespError::Rnr) => {
                ctx.counters.send_rnr_err += 1;
                // No latch (rxe `check_psn`): the next packet of the same flight gets one
                // PSN-sequence-error NAK, later ones are dropped until the requester comes back.
                let t = RnrTimer::new(self.attr.min_rnr_timer);
                let msn = self.resp.msn;
                self.resp.out.push_back(RespOut::Ack { psn, syndrome: Syndrome::RnrNak(t), msn });
            }
            Err(e) => {
                ctx.counters.send_err += 1;
                let code = match e {
                    RespError::InvalidRequest => NakCode::InvalidRequest,
                    RespError::RemoteAccess => NakCode::RemoteAccessError,
                    _ => NakCode::RemoteOperationalError,
                };
                let msn = self.resp.msn;
                // Pending responses before it are still sent; the NAK is the last thing this
                // QP sends before it enters the error state.
                self.resp.out.push_back(RespOut::Ack { psn, syndrome: Syndrome::Nak(code), msn });
                self.enter_error(ctx, true);
            }
        }
        Ok(())
    }

    /// A UC request (IBTA §9.8; rxe `check_psn`, `check_op_seq`, `check_op_valid` for UC):
    /// the same checks and execution as RC, but nothing is ever acknowledged or NAKed, and a
    /// failure drops the rest of its message instead of failing the QP. A packet that is not
    /// the expected one (a PSN gap: a packet was lost) drops its message; any FIRST or ONLY
    /// packet starts a new message at its own PSN, abandoning an unfinished one (whose
    /// receive WQE is used again from its start); one behind it is a duplicate, dropped. A
    /// SEND too long for the receive WQE
    /// completes it with LOC_LEN_ERR (class D; rxe `RESPST_ERR_LENGTH`).
    fn handle_uc_request(&mut self, ctx: &mut Ctx<'_>, p: &ParsedFrame<'_>) {
        if !receives(self.state) {
            ctx.counters.dropped_qp_state += 1;
            return;
        }
        let Some(info) = p.roce.bth.opcode.info() else { return };
        let psn = p.roce.bth.psn;
        if psn.diff(self.resp.epsn) < 0 {
            // Behind the expected PSN: a duplicate (a UC requester never goes back). Dropped,
            // or a duplicated SEND ONLY would complete a second receive (rxe's `check_psn`
            // takes any FIRST or ONLY whatever its PSN, and would).
            ctx.counters.duplicate_request += 1;
            return;
        }
        if self.resp.drop_msg || psn != self.resp.epsn {
            if !info.position.is_start() {
                if psn != self.resp.epsn {
                    ctx.counters.out_of_seq_request += 1;
                }
                ctx.counters.dropped_uc_msg += 1;
                self.resp.drop_msg = true;
                return;
            }
            self.resp.drop_msg = false;
            self.resp.msg = InMsg::None;
            self.resp.epsn = psn;
        }
        let mut icrc = Icrc::Checked;
        if self.execute_request(ctx, p, &mut icrc).is_err() {
            ctx.counters.dropped_uc_msg += 1;
            self.resp.drop_msg = true;
            self.resp.msg = InMsg::None;
        }
    }

    /// A UD datagram (IBTA §9.8.4; rxe `check_keys`, `send_data_in`): SEND ONLY with or
    /// without immediate, from any QP (no PSN check: datagrams are independent), with the
    /// QP's Q_Key. Its receive WQE gets the 40-byte GRH area first — the IPv6 header, or 20
    /// zero bytes and the IPv4 header (rxe `rxe_resp.c` `copy_data` of `roce4grh`) — then
    /// the payload; the completion counts both and names the source QP. No receive WQE, or
    /// one too small: the datagram is dropped (never an RNR NAK).
    fn handle_datagram(&mut self, ctx: &mut Ctx<'_>, p: &ParsedFrame<'_>) {
        if !receives(self.state) {
            ctx.counters.dropped_qp_state += 1;
            return;
        }
        let Some(deth) = p.roce.ext.deth else { return };
        if deth.qkey != self.attr.qkey {
            ctx.counters.dropped_bad_qkey += 1;
            return;
        }
        let payload = p.payload();
        let Some(capacity) = self.next_recv_len(ctx) else {
            ctx.counters.dropped_ud_no_wqe += 1;
            return;
        };
        let total = (GRH_LEN + payload.len()) as u64;
        if total > capacity {
            // Too large for the receive buffer: dropped, the WQE kept (rxe 6.10+
            // `rxe_resp_check_length`: `payload + 40 > recv_buffer_len`).
            ctx.counters.dropped_ud_too_long += 1;
            return;
        }
        let Some(wqe) = self.take_recv_wqe(ctx) else { return };
        let grh = crate::grh::fill(p);
        let sges = wqe.sges();
        let status = match scatter(ctx.mrs, self.pd, sges, 0, &grh)
            .and_then(|()| scatter(ctx.mrs, self.pd, sges, GRH_LEN as u64, payload))
        {
            Ok(()) => WcStatus::Success,
            Err(st) => st,
        };
        let (imm, mut flags) = match p.roce.ext.immdt {
            Some(i) => (i, WcFlags::WITH_IMM),
            None => (0, WcFlags::NONE),
        };
        flags |= WcFlags::GRH;
        if status == WcStatus::Success {
            ctx.counters.rdma_recvs += 1;
        }
        let byte_len = if status == WcStatus::Success { total as u32 } else { 0 };
        let wc = WorkCompletion {
            wr_id: wqe.wr_id,
            status,
            opcode: WcOpcode::Recv,
            byte_len,
            imm_data: imm,
            qp_num: self.qpn.value(),
            src_qp: deth.src_qp.value(),
            wc_flags: flags,
            solicited: p.roce.bth.solicited,
            ..Default::default()
        };
        ctx.complete(self.recv_cq, wc);
    }

    /// Checks 2..6 and execution, for a request at the expected PSN. A pending `icrc` is checked
    /// (and set to checked) before anything changes; errors returned while it is still pending
    /// come from pure checks.
    fn execute_request(&mut self, ctx: &mut Ctx<'_>, p: &ParsedFrame<'_>, icrc: &mut Icrc) -> Result<(), RespError> {
        let info = p.roce.bth.opcode.info().ok_or(RespError::InvalidRequest)?;
        let op = info.operation;
        let pos = info.position;
        let cls = class(op);
        let psn = p.roce.bth.psn;
        let mtu = self.mtu();
        let payload = p.payload();

        if !sequence_ok(&self.resp.msg, cls, pos) || !op_allowed(&self.attr, op) {
            return Err(RespError::InvalidRequest);
        }
        // 5. check_length (C9-92 / C9-94), before consuming resources.
        if info.has_payload && !payload_len_ok(pos, payload.len(), mtu) {
            return Err(RespError::InvalidRequest);
        }
        if p.roce.ext.reth.is_some_and(|r| !dma_len_ok(&r)) {
            return Err(RespError::InvalidRequest);
        }

        if cls != Class::Write && *icrc == Icrc::Pending {
            // Only WRITE placement checks a pending ICRC itself.
            if !icrc_ok(p) {
                return Err(RespError::BadIcrc);
            }
            *icrc = Icrc::Checked;
        }
        match cls {
            Class::Send => self.exec_send(ctx, p, pos),
            Class::Write => self.exec_write(ctx, p, op, pos, icrc),
            Class::Other => match op {
                Operation::ReadRequest => self.exec_read(ctx, p.roce.ext.reth.unwrap_or_default(), psn, mtu),
                _ => self.exec_atomic(ctx, p, op, psn),
            },
        }
    }

    fn ack_if_requested(&mut self, ctx: &mut Ctx<'_>, p: &ParsedFrame<'_>) {
        // UC is never acknowledged, whatever AckReq says.
        if self.qp_type != QpType::Rc {
            return;
        }
        self.resp.ack_if_requested(p.roce.bth.ack_req, p.roce.bth.psn, &mut ctx.counters.ack_deferred);
    }

    fn exec_send(&mut self, ctx: &mut Ctx<'_>, p: &ParsedFrame<'_>, pos: Position) -> Result<(), RespError> {
        let off = match self.resp.msg {
            InMsg::Send { off } => off,
            _ => 0,
        };
        // 4. check_resources: a SEND starts in a receive WQE, taken for the message (from the
        // QP's RQ or its SRQ) and held until the message ends.
        if self.resp.held.is_none() {
            match self.take_recv_wqe(ctx) {
                Some(h) => self.resp.held = Some(h),
                None => return Err(RespError::Rnr),
            }
        }
        let Some(wqe) = &self.resp.held else { return Err(RespError::Rnr) };
        let (wr_id, capacity) = (wqe.wr_id, wqe.length);
        let payload = p.payload();
        if off + payload.len() as u64 > capacity {
            // The message does not fit the receive buffer: local length error here, invalid
            // request for the requester (IBTA §9.7.5.2.4; rxe ERR_LENGTH).
            self.resp.held = None;
            self.complete_recv(ctx, wr_id, WcOpcode::Recv, WcStatus::LocLenErr, 0, 0, WcFlags::NONE, false);
            self.resp.msg = InMsg::None;
            return Err(RespError::InvalidRequest);
        }
        if let Err(st) = scatter(ctx.mrs, self.pd, wqe.sges(), off, payload) {
            self.resp.held = None;
            self.complete_recv(ctx, wr_id, WcOpcode::Recv, st, 0, 0, WcFlags::NONE, false);
            self.resp.msg = InMsg::None;
            return Err(RespError::RemoteOp);
        }
        let off = off + payload.len() as u64;
        self.resp.epsn = self.resp.epsn.add(1);
        if pos.is_end() {
            self.resp.held = None;
            self.resp.msg = InMsg::None;
            self.resp.msn = self.resp.msn.add(1);
            ctx.counters.rdma_recvs += 1;
            let e = &p.roce.ext;
            let (imm, flags) = match (e.immdt, e.ieth) {
                (Some(i), _) => (i, WcFlags::WITH_IMM),
                (None, Some(k)) => (k, WcFlags::WITH_INV),
                _ => (0, WcFlags::NONE),
            };
            self.complete_recv(
                ctx,
                wr_id,
                WcOpcode::Recv,
                WcStatus::Success,
                off as u32,
                imm,
                flags,
                p.roce.bth.solicited,
            );
        } else {
            self.resp.msg = InMsg::Send { off };
        }
        self.ack_if_requested(ctx, p);
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn complete_recv(
        &mut self,
        ctx: &mut Ctx<'_>,
        wr_id: u64,
        opcode: WcOpcode,
        status: WcStatus,
        byte_len: u32,
        imm: u32,
        flags: WcFlags,
        solicited: bool,
    ) {
        let wc = WorkCompletion {
            wr_id,
            status,
            opcode,
            byte_len,
            imm_data: imm,
            qp_num: self.qpn.value(),
            src_qp: self.attr.dest_qp_num,
            wc_flags: flags,
            solicited,
            ..Default::default()
        };
        ctx.complete(self.recv_cq, wc);
    }

    fn exec_write(
        &mut self,
        ctx: &mut Ctx<'_>,
        p: &ParsedFrame<'_>,
        op: Operation,
        pos: Position,
        icrc: &mut Icrc,
    ) -> Result<(), RespError> {
        let payload = p.payload();
        let (rkey, va, resid, total) = match self.resp.msg {
            InMsg::Write { rkey, va, resid, total } => (rkey, va, resid, total),
            _ => {
                let reth = p.roce.ext.reth.ok_or(RespError::InvalidRequest)?;
                // 6. check_rkey; a zero-length WRITE needs no valid R_Key (C9-88). For an ONLY
                // packet the per-packet check below covers exactly the same range.
                if reth.dma_len > 0 && pos != Position::Only {
                    ctx.mrs
                        .check(reth.rkey, self.pd, reth.va, reth.dma_len as u64, AccessFlags::REMOTE_WRITE)
                        .map_err(|_| RespError::RemoteAccess)?;
                }
                (reth.rkey, reth.va, reth.dma_len, reth.dma_len)
            }
        };
        if !write_fits(payload.len(), resid, pos.is_end()) {
            return Err(RespError::InvalidRequest);
        }
        // 4. check_resources: WRITE with immediate consumes a receive WQE at its end (rxe RWR).
        let needs_wqe = op == Operation::WriteWithImm && pos.is_end();
        if needs_wqe && self.next_recv_len(ctx).is_none() {
            return Err(RespError::Rnr);
        }
        let dst = match payload.is_empty() {
            true => None,
            false => Some(
                ctx.mrs
                    .slice_mut(rkey, self.pd, va, payload.len(), AccessFlags::REMOTE_WRITE)
                    .map_err(|_| RespError::RemoteAccess)?,
            ),
        };
        if *icrc == Icrc::Pending {
            // The last moment to check the ICRC: nothing has changed yet. The destination's
            // cache lines are fetched while the CRC runs, not when the copy reaches them
            // (measured: ~10 % less time per 1 MiB WRITE, `benches/engine.rs`).
            let ok = match &dst {
                Some(d) => cfg!(fuzzing) || p.check_icrc_prefetching(d).is_ok(),
                None => icrc_ok(p),
            };
            if !ok {
                return Err(RespError::BadIcrc);
            }
            *icrc = Icrc::Checked;
        }
        if let Some(d) = dst {
            uroce_wire::copy::bulk_copy(d, payload);
        }
        if pos.is_end() {
            self.resp.write_ends();
            if needs_wqe {
                let wqe = self.take_recv_wqe(ctx).expect("checked above");
                let imm = p.roce.ext.immdt.unwrap_or(0);
                self.complete_recv(
                    ctx,
                    wqe.wr_id,
                    WcOpcode::RecvRdmaWithImm,
                    WcStatus::Success,
                    total,
                    imm,
                    WcFlags::WITH_IMM,
                    p.roce.bth.solicited,
                );
            }
        } else {
            self.resp.write_continues(rkey, va, resid, total, payload.len() as u32);
        }
        self.ack_if_requested(ctx, p);
        Ok(())
    }

    /// The responder's share of the receive fast path ([`crate::Device`]'s `handle_frame`): an
    /// RDMA WRITE FIRST, MIDDLE, LAST or ONLY packet `b` without immediate data (opcode, P_Key
    /// and addresses already checked) is placed if, and only if, every check `handle_request`
    /// → `execute_request` → `exec_write` makes passes — receiving state, the expected PSN, the
    /// packet's place in the message sequence (C9-87), REMOTE_WRITE allowed on the QP, the
    /// payload length for its position (C9-92) within what the RETH announced (at most
    /// [`super::MAX_MSG_SIZE`]), the region's R_Key, PD, access and bounds (C9-88, for a FIRST
    /// packet over the whole message) — and its ICRC is right; then with the same effects (copy,
    /// next PSN and address or the message's end, the ACK if asked for, the NAK latch cleared).
    /// Zero-length packets go the general way. `false`: nothing changed.
    pub(crate) fn place_write(
        &mut self,
        mrs: &mut crate::mr::MrTable,
        counters: &mut crate::counters::Counters,
        b: &uroce_wire::BareFrame<'_>,
        check_icrc: bool,
    ) -> bool {
        // check_psn: the expected PSN, in a receiving state.
        if !receives(self.state) || b.bth.psn != self.resp.epsn {
            return false;
        }
        let Some(info) = b.bth.opcode.info() else { return false };
        let (cls, pos, op) = (Class::Write, info.position, info.operation);
        if op != Operation::Write || !sequence_ok(&self.resp.msg, cls, pos) || !op_allowed(&self.attr, op) {
            return false;
        }
        let n = b.payload.len();
        if n == 0 || !payload_len_ok(pos, n, self.mtu()) {
            return false;
        }
        let (rkey, va, resid, total) = match (self.resp.msg, b.reth) {
            (InMsg::Write { rkey, va, resid, total }, None) => (rkey, va, resid, total),
            (InMsg::None, Some(reth)) if dma_len_ok(&reth) => {
                // A FIRST packet's RETH opens the whole message to the region's checks; an ONLY
                // packet's range is the one checked below.
                if pos != Position::Only
                    && mrs.check(reth.rkey, self.pd, reth.va, reth.dma_len as u64, AccessFlags::REMOTE_WRITE).is_err()
                {
                    return false;
                }
                (reth.rkey, reth.va, reth.dma_len, reth.dma_len)
            }
            _ => return false,
        };
        if !write_fits(n, resid, pos.is_end()) {
            return false;
        }
        let Ok(dst) = mrs.slice_mut(rkey, self.pd, va, n, AccessFlags::REMOTE_WRITE) else { return false };
        if check_icrc && !cfg!(fuzzing) && b.check_icrc_prefetching(dst).is_err() {
            return false;
        }
        uroce_wire::copy::bulk_copy(dst, b.payload);
        if pos.is_end() {
            self.resp.write_ends();
        } else {
            self.resp.write_continues(rkey, va, resid, total, n as u32);
        }
        self.resp.ack_if_requested(b.bth.ack_req, b.bth.psn, &mut counters.ack_deferred);
        self.resp.nak_latched = false;
        true
    }

    fn exec_read(&mut self, ctx: &mut Ctx<'_>, reth: RethRepr, psn: Psn, mtu: usize) -> Result<(), RespError> {
        if reth.dma_len > 0 {
            ctx.mrs
                .check(reth.rkey, self.pd, reth.va, reth.dma_len as u64, AccessFlags::REMOTE_READ)
                .map_err(|_| RespError::RemoteAccess)?;
        }
        let npkts = crate::formulas::read_psns(reth.dma_len, mtu as u32);
        let last_psn = psn.add(npkts - 1);
        let cap = crate::formulas::rd_atomic_resources(self.attr.max_dest_rd_atomic).max(1) as usize;
        // C9-148: the MSN counts a READ when it is accepted.
        self.resp.msn = self.resp.msn.add(1);
        let msn = self.resp.msn;
        self.resp.add_resource(
            Resource::Read {
                first_psn: psn,
                last_psn,
                va: reth.va,
                rkey: reth.rkey,
                len: reth.dma_len,
                msn,
                replays: 0,
                replayed_at: ctx.now,
            },
            cap,
        );
        self.resp.epsn = last_psn.add(1);
        self.resp.out.push_back(RespOut::Read { psn, va: reth.va, rkey: reth.rkey, off: 0, len: reth.dma_len, msn });
        Ok(())
    }

    fn exec_atomic(
        &mut self,
        ctx: &mut Ctx<'_>,
        p: &ParsedFrame<'_>,
        op: Operation,
        psn: Psn,
    ) -> Result<(), RespError> {
        let a = p.roce.ext.atomic_eth.ok_or(RespError::InvalidRequest)?;
        // C9-?? / rxe ERR_MISALIGNED_ATOMIC: the address must be 8-byte aligned.
        if a.va & 7 != 0 {
            return Err(RespError::InvalidRequest);
        }
        let off =
            ctx.mrs.check(a.rkey, self.pd, a.va, 8, AccessFlags::REMOTE_ATOMIC).map_err(|_| RespError::RemoteAccess)?;
        let mr = ctx.mrs.get_mut(a.rkey).ok_or(RespError::RemoteAccess)?;
        let cell = &mut mr.as_mut_slice()[off..off + 8];
        // Host (little-endian) order in memory, as rxe operates on `*(u64 *)vaddr` on x86.
        let orig = u64::from_le_bytes(cell.try_into().expect("8 bytes"));
        let new = match op {
            Operation::CompareSwap => {
                if orig == a.compare {
                    a.swap_add
                } else {
                    orig
                }
            }
            _ => orig.wrapping_add(a.swap_add),
        };
        cell.copy_from_slice(&new.to_le_bytes());
        let cap = crate::formulas::rd_atomic_resources(self.attr.max_dest_rd_atomic).max(1) as usize;
        self.resp.add_resource(Resource::Atomic { psn, orig }, cap);
        self.resp.msn = self.resp.msn.add(1);
        self.resp.epsn = psn.add(1);
        let msn = self.resp.msn;
        self.resp.out.push_back(RespOut::AtomicAck { psn, orig, msn });
        Ok(())
    }

    /// A request behind the expected PSN (§9.7.5.1.3).
    fn handle_duplicate(&mut self, ctx: &mut Ctx<'_>, p: &ParsedFrame<'_>) {
        let Some(info) = p.roce.bth.opcode.info() else { return };
        let psn = p.roce.bth.psn;
        match class(info.operation) {
            // C9-105: acknowledge again, do not execute again. The ACK carries the duplicate's
            // own PSN: acknowledging `epsn - 1` (as rxe does) can cover a later READ whose
            // responses are still in flight and make the requester retry it for nothing.
            Class::Send | Class::Write => {
                let msn = self.resp.msn;
                self.resp.push_ack(psn, msn, &mut ctx.counters.ack_deferred);
            }
            Class::Other => match info.operation {
                Operation::ReadRequest => {
                    let Some(reth) = p.roce.ext.reth else { return };
                    let interval = ctx.cfg.guards.read_replay_interval;
                    let found = self.resp.resources.iter_mut().find_map(|r| match r {
                        Resource::Read { first_psn, last_psn, va, rkey, len, msn, replays, replayed_at }
                            if psn.within(*first_psn, *last_psn) =>
                        {
                            // The repeated request must ask for (part of) what the original
                            // asked for.
                            let inside = *rkey == reth.rkey
                                && reth.va >= *va
                                && reth.va.saturating_add(reth.dma_len as u64) <= *va + *len as u64;
                            if !inside {
                                return Some(None);
                            }
                            if !replay_allowed(interval, *replays, *replayed_at, ctx.now) {
                                ctx.counters.dup_read_limited += 1;
                                return Some(None);
                            }
                            (*replays, *replayed_at) = (replays.saturating_add(1), ctx.now);
                            Some(Some((*first_psn, *last_psn, *rkey, *msn)))
                        }
                        _ => None,
                    });
                    if let Some(Some((first, last, rkey, msn))) = found {
                        // Executed again from memory; a stream still queued for the same READ
                        // is replaced.
                        self.resp.out.retain(|o| !matches!(o, RespOut::Read { psn: q, .. } if q.within(first, last)));
                        self.resp.out.push_back(RespOut::Read {
                            psn,
                            va: reth.va,
                            rkey,
                            off: 0,
                            len: reth.dma_len,
                            msn,
                        });
                    }
                }
                Operation::CompareSwap | Operation::FetchAdd => {
                    // Never executed twice: answered from the replay cache, or dropped.
                    let found = self.resp.resources.iter().find_map(|r| match *r {
                        Resource::Atomic { psn: q, orig } if q == psn => Some(orig),
                        _ => None,
                    });
                    if let Some(orig) = found {
                        let msn = self.resp.msn;
                        self.resp.out.push_back(RespOut::AtomicAck { psn, orig, msn });
                    }
                }
                _ => {}
            },
        }
    }

    /// Produce the next response packet, if any.
    /// A CNP goes first; READ responses are paced as requests are (the responder is the
    /// reaction point of a READ: the NP, the requester, sends its CNPs here).
    pub(crate) fn poll_response(&mut self, ctx: &mut Ctx<'_>, buf: &mut [u8]) -> Option<usize> {
        if let Some(len) = self.poll_cnp(ctx, buf) {
            return Some(len);
        }
        if self.resp.out.is_empty() {
            return None;
        }
        loop {
            let read = matches!(self.resp.out.front(), Some(RespOut::Read { .. }));
            if read {
                if let Err(at) = self.pacer.check(ctx.now) {
                    self.arm(ctx, crate::timer::Timer::Departure, at);
                    return None;
                }
            }
            match self.emit_response(ctx, buf)? {
                Ok(len) => {
                    ctx.counters.sent_pkts += 1;
                    if read {
                        self.paced_sent(ctx, len);
                    }
                    return Some(len);
                }
                Err((psn, msn)) => {
                    // The region went away mid-response: NAK remote operational error with the
                    // READ's MSN (requests accepted after it do not count: rxe answers a READ
                    // before it takes the next request), QP to ERR.
                    self.resp.out.clear();
                    let syndrome = Syndrome::Nak(NakCode::RemoteOperationalError);
                    self.resp.out.push_back(RespOut::Ack { psn, syndrome, msn });
                    ctx.counters.send_err += 1;
                    self.enter_error(ctx, true);
                }
            }
        }
    }

    /// Emit the packet at the front of the output queue. `Some(Err((psn, msn)))`: a READ
    /// response could not be read from memory (`msn`: the READ's, which counts it).
    fn emit_response(&mut self, ctx: &mut Ctx<'_>, buf: &mut [u8]) -> Option<Result<usize, (Psn, Msn)>> {
        let tpl = self.template.as_ref()?;
        let mtu = self.attr.path_mtu.bytes() as u32;
        let front = *self.resp.out.front()?;
        let mut ext = uroce_wire::ExtHeaders::default();
        let (opcode, psn, payload_len, src, msn) = match front {
            RespOut::Ack { psn, syndrome, msn } => {
                ext.aeth = Some(AethRepr { syndrome, msn });
                self.resp.out.pop_front();
                (uroce_wire::Opcode::RC_ACKNOWLEDGE, psn, 0, None, msn)
            }
            RespOut::AtomicAck { psn, orig, msn } => {
                ext.aeth = Some(AethRepr { syndrome: Syndrome::ACK_UNLIMITED, msn });
                ext.atomic_ack_eth = Some(AtomicAckEthRepr { orig });
                self.resp.out.pop_front();
                (uroce_wire::Opcode::RC_ATOMIC_ACKNOWLEDGE, psn, 0, None, msn)
            }
            RespOut::Read { psn, va, rkey, off, len, msn } => {
                let n = (len - off).min(mtu);
                let first = off == 0;
                let last = off + n == len;
                let (opcode, has_aeth) = match (first, last) {
                    (true, true) => (uroce_wire::Opcode::RC_RDMA_READ_RESPONSE_ONLY, true),
                    (true, false) => (uroce_wire::Opcode::RC_RDMA_READ_RESPONSE_FIRST, true),
                    (false, true) => (uroce_wire::Opcode::RC_RDMA_READ_RESPONSE_LAST, true),
                    (false, false) => (uroce_wire::Opcode::RC_RDMA_READ_RESPONSE_MIDDLE, false),
                };
                // AETH on FIRST, LAST and ONLY (IBTA §9.3.5).
                if has_aeth {
                    ext.aeth = Some(AethRepr { syndrome: Syndrome::ACK_UNLIMITED, msn });
                }
                if last {
                    self.resp.out.pop_front();
                } else if let Some(RespOut::Read { psn: p, off: o, .. }) = self.resp.out.front_mut() {
                    *p = p.add(1);
                    *o += n;
                }
                (opcode, psn, n as usize, Some((va + off as u64, rkey)), msn)
            }
        };
        let pd = self.pd;
        let mut ok = true;
        let mrs = &*ctx.mrs;
        let len = tpl.emit_copy(buf, ctx.idents, opcode, psn, false, false, &ext, payload_len, |w| {
            if let Some((va, rkey)) = src {
                // Re-read (and re-validate) the region for every response packet: it may have
                // been deregistered since the request was accepted.
                match mrs.slice(rkey, pd, va, payload_len, AccessFlags::REMOTE_READ) {
                    Ok(src) => ok = w.copy(src),
                    Err(_) => ok = payload_len == 0,
                }
            }
            ok
        });
        // A frame not emitted because the region went away is reported as such; any other
        // emit failure (a buffer too small) sends nothing.
        let len = match len {
            Some(len) => len,
            None if !ok => return Some(Err((psn, msn))),
            None => return None,
        };
        Some(Ok(len))
    }
}

/// Whether a READ executed again `replays` times, last at `at`, may be executed again `now`
/// for a duplicate ([`crate::Guards::read_replay_interval`]): always for its first
/// [`crate::READ_REPLAYS_FREE`] repeats (a requester's retries without progress), then once per
/// interval (a requester that retries forever, through an outage, still gets its data).
fn replay_allowed(
    interval: Option<core::time::Duration>,
    replays: u32,
    at: crate::time::Instant,
    now: crate::time::Instant,
) -> bool {
    match interval {
        None => true,
        Some(i) => replays < crate::READ_REPLAYS_FREE || now >= at + i,
    }
}
