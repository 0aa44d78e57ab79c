//! The requester: send WQEs → request packets.
//!
//! Segmentation by path MTU (IBTA §9.7.2; C9-92: FIRST/MIDDLE carry exactly the PMTU), one PSN
//! per packet and per READ response packet (§9.7.1; rxe `update_wqe_psn`), AckReq on the last
//! packet of every message and after every `ack_req_interval` packets without one (rxe
//! `init_req_packet`: `ack_req = END || noack_pkts++ > RXE_MAX_PKT_PER_ACK`), a send window of
//! `send_window` PSNs beyond the oldest unacknowledged one (rxe `RXE_MAX_UNACKED_PSNS`), at
//! most `max_rd_atomic` READs/atomics outstanding (§9.5, C9-134), fences (§10.8.3.3).

use super::send_state::Advance;
use super::{Ctx, Qp, MAX_MSG_SIZE, MAX_SGE};
use crate::mr::MrTable;
use crate::time::local_ack_timeout;
use crate::timer::Timer;
use crate::verbs::*;
use uroce_wire::opcode::{Operation, Position};
use uroce_wire::{AtomicEthRepr, DethRepr, ExtHeaders, Opcode, PayloadWriter, Psn, RethRepr};

/// Where to find a WQE's payload bytes.
pub(crate) struct Source<'a> {
    pub sges: &'a [Sge],
    pub inline: Option<&'a [u8]>,
}

/// Copy `dst.len()` bytes starting `off` bytes into the WQE's gather list. Fails when an SGE no
/// longer names a region of `pd` covering it (deregistered after posting).
pub(crate) fn gather(mrs: &MrTable, pd: PdHandle, src: &Source<'_>, mut off: u64, dst: &mut [u8]) -> Result<(), ()> {
    if let Some(data) = src.inline {
        let off = off as usize;
        dst.copy_from_slice(data.get(off..off + dst.len()).ok_or(())?);
        return Ok(());
    }
    let mut done = 0usize;
    for sge in src.sges {
        if done == dst.len() {
            break;
        }
        let l = sge.length as u64;
        if off >= l {
            off -= l;
            continue;
        }
        let n = ((l - off) as usize).min(dst.len() - done);
        let src = mrs.slice(sge.lkey, pd, sge.addr + off, n, AccessFlags::NONE).map_err(|_| ())?;
        dst[done..done + n].copy_from_slice(src);
        done += n;
        off = 0;
    }
    if done == dst.len() {
        Ok(())
    } else {
        Err(())
    }
}

/// Append `len` bytes starting `off` bytes into the WQE's gather list to a frame's payload (copy
/// and ICRC in one pass), prefetching up to `ahead` bytes that follow in the same SGE (what the
/// next packet reads). `false` when an SGE no longer names a region of `pd` covering it.
pub(crate) fn gather_to(
    mrs: &MrTable,
    pd: PdHandle,
    src: &Source<'_>,
    mut off: u64,
    len: usize,
    ahead: usize,
    w: &mut PayloadWriter<'_>,
) -> bool {
    if let Some(data) = src.inline {
        let off = off as usize;
        return data.get(off..off + len).is_some_and(|d| w.copy(d));
    }
    let mut done = 0usize;
    for sge in src.sges {
        if done == len {
            break;
        }
        let l = sge.length as u64;
        if off >= l {
            off -= l;
            continue;
        }
        let n = ((l - off) as usize).min(len - done);
        // The last piece comes with the rest of its SGE up to `ahead` bytes, fetched into the
        // cache while this packet is built (the next packet's source, on a new page where the
        // hardware prefetcher starts cold).
        let more = if done + n == len { ((l - off) as usize - n).min(ahead) } else { 0 };
        let Ok(piece) = mrs
            .slice(sge.lkey, pd, sge.addr + off, n + more, AccessFlags::NONE)
            .or_else(|_| mrs.slice(sge.lkey, pd, sge.addr + off, n, AccessFlags::NONE))
        else {
            return false;
        };
        let (piece, next) = piece.split_at(n);
        if !w.copy_prefetching(piece, next) {
            return false;
        }
        done += n;
        off = 0;
    }
    done == len
}

/// Copy `src` into the scatter list starting `off` bytes in. Needs LOCAL_WRITE on each region.
pub(crate) fn scatter(mrs: &mut MrTable, pd: PdHandle, sges: &[Sge], mut off: u64, src: &[u8]) -> Result<(), WcStatus> {
    let mut done = 0usize;
    for sge in sges {
        if done == src.len() {
            break;
        }
        let l = sge.length as u64;
        if off >= l {
            off -= l;
            continue;
        }
        let n = ((l - off) as usize).min(src.len() - done);
        let dst = mrs
            .slice_mut(sge.lkey, pd, sge.addr + off, n, AccessFlags::LOCAL_WRITE)
            .map_err(|_| WcStatus::LocProtErr)?;
        uroce_wire::copy::bulk_copy(dst, &src[done..done + n]);
        done += n;
        off = 0;
    }
    if done == src.len() {
        Ok(())
    } else {
        Err(WcStatus::LocLenErr)
    }
}

/// Check every SGE of a WQE against the MR table (`need` = LOCAL_WRITE for READ/atomic
/// destinations, nothing for gather sources).
pub(crate) fn check_sges(mrs: &MrTable, pd: PdHandle, sges: &[Sge], need: AccessFlags) -> Result<(), WcStatus> {
    for s in sges {
        mrs.check(s.lkey, pd, s.addr, s.length as u64, need).map_err(|_| WcStatus::LocProtErr)?;
    }
    Ok(())
}

impl Qp {
    /// Free send queue slots.
    pub(crate) fn send_queue_room(&self) -> usize {
        self.sq.depth.saturating_sub(self.sq.len())
    }

    /// Whether this QP accepts `wr` now (all of `ibv_post_send`'s checks but the queue's room):
    /// `Ok(inline)`.
    pub(crate) fn check_send(&self, wr: &SendWr<'_>) -> Result<bool, VerbsError> {
        match self.state {
            QpState::Rts | QpState::Sqd | QpState::Err => {}
            s => return Err(VerbsError::InvalidState(s)),
        }
        if wr.sg_list.len() > (self.cap.max_send_sge as usize).min(MAX_SGE) {
            return Err(VerbsError::InvalidArgument("num_sge exceeds max_send_sge"));
        }
        let inline = wr.send_flags.contains(SendFlags::INLINE)
            && matches!(
                wr.opcode,
                WrOpcode::Send
                    | WrOpcode::SendWithImm
                    | WrOpcode::SendWithInv
                    | WrOpcode::RdmaWrite
                    | WrOpcode::RdmaWriteWithImm
            );
        let length: u64 = wr.sg_list.iter().map(|s| s.length as u64).sum();
        if length > MAX_MSG_SIZE {
            return Err(VerbsError::InvalidArgument("message larger than 2^31 bytes"));
        }
        if inline && length > self.cap.max_inline_data as u64 {
            return Err(VerbsError::InvalidArgument("inline data exceeds max_inline_data"));
        }
        // The operations of each transport (IBTA Table 39; rxe `rxe_wr_opcode_info`): EINVAL.
        let ok = match self.qp_type {
            QpType::Rc => true,
            QpType::Uc => matches!(
                wr.opcode,
                WrOpcode::Send | WrOpcode::SendWithImm | WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm
            ),
            QpType::Ud => matches!(wr.opcode, WrOpcode::Send | WrOpcode::SendWithImm),
        };
        if !ok {
            return Err(VerbsError::InvalidArgument("opcode not supported by the QP's transport"));
        }
        if self.qp_type == QpType::Ud {
            let Some(ud) = wr.ud else { return Err(VerbsError::InvalidArgument("UD send without an address handle")) };
            if ud.ah.pd != self.pd {
                return Err(VerbsError::InvalidArgument("address handle of another PD"));
            }
            if ud.remote_qpn > 0xff_ffff {
                return Err(VerbsError::InvalidArgument("remote_qpn"));
            }
        }
        if wr.opcode.is_atomic() {
            // libibverbs / rxe: one 8-byte SGE, 8-byte aligned remote address.
            if length != 8 || wr.sg_list.len() != 1 {
                return Err(VerbsError::InvalidArgument("atomic needs one 8-byte SGE"));
            }
            if wr.remote_addr & 7 != 0 {
                return Err(VerbsError::InvalidArgument("atomic remote address not 8-byte aligned"));
            }
        }
        Ok(inline)
    }

    /// Validate and queue a send WR (`ibv_post_send`).
    pub(crate) fn post_send(&mut self, ctx: &mut Ctx<'_>, wr: &SendWr<'_>) -> Result<(), VerbsError> {
        let inline = self.check_send(wr)?;
        if self.sq.is_full() {
            return Err(VerbsError::QueueFull);
        }
        let length: u64 = wr.sg_list.iter().map(|s| s.length as u64).sum();
        // An inline SGE list is read now; a bad one fails the post (the data cannot be copied).
        let mut inline_err = false;
        let idx = self.sq.tail;
        let mrs = &*ctx.mrs;
        let pd = self.pd;
        self.sq.set_sges(idx, wr.sg_list);
        let w = self.sq.get_mut(idx);
        w.wr_id = wr.wr_id;
        w.opcode = wr.opcode;
        w.flags = wr.send_flags;
        w.signaled = self.sq_sig_all || wr.send_flags.contains(SendFlags::SIGNALED);
        w.is_inline = inline;
        w.inline.clear();
        if inline {
            w.inline.resize(length as usize, 0);
            let src = Source { sges: wr.sg_list, inline: None };
            inline_err = gather(mrs, pd, &src, 0, &mut w.inline).is_err();
        }
        w.remote_addr = wr.remote_addr;
        w.rkey = wr.rkey;
        w.compare_add = wr.compare_add;
        w.swap = wr.swap;
        w.imm_data = wr.imm_data;
        w.invalidate_rkey = wr.invalidate_rkey;
        w.length = length as u32;
        w.psn_assigned = false;
        w.read_rcvd = 0;
        w.read_req_off = 0;
        w.local_err = inline_err.then_some(WcStatus::LocProtErr);
        self.sq.set_ud(idx, wr.ud);
        self.sq.tail += 1;
        if self.state == QpState::Err {
            // Posting to a QP in the error state completes the WR at once with a flush error.
            self.flush(ctx);
        }
        Ok(())
    }

    /// The opcode of a request packet of a `wr` message at `pos`. Only the last (or only)
    /// packet carries the immediate / invalidate: FIRST and MIDDLE packets of SEND/WRITE with
    /// immediate are plain SEND/WRITE FIRST/MIDDLE (IBTA §9.4, Table 36). Both transmit paths
    /// ask here.
    #[inline]
    fn request_opcode(ty: QpType, wr: WrOpcode, pos: Position) -> Option<Opcode> {
        let end = pos.is_end();
        let op = match wr {
            WrOpcode::Send => Operation::Send,
            WrOpcode::SendWithImm | WrOpcode::SendWithInv if !end => Operation::Send,
            WrOpcode::SendWithImm => Operation::SendWithImm,
            WrOpcode::SendWithInv => Operation::SendWithInv,
            WrOpcode::RdmaWrite => Operation::Write,
            WrOpcode::RdmaWriteWithImm if !end => Operation::Write,
            WrOpcode::RdmaWriteWithImm => Operation::WriteWithImm,
            WrOpcode::RdmaRead => Operation::ReadRequest,
            WrOpcode::AtomicCmpAndSwp => Operation::CompareSwap,
            WrOpcode::AtomicFetchAndAdd => Operation::FetchAdd,
        };
        let rc = Opcode::rc_request(op, pos)?;
        match ty {
            QpType::Rc => Some(rc),
            // UC's opcodes are RC's SEND and WRITE ones with the UC prefix (IBTA Table 38).
            QpType::Uc if rc.0 <= 0x0b => Some(Opcode(rc.0 | uroce_wire::opcode::Transport::Uc.prefix())),
            QpType::Uc => None,
            QpType::Ud => match op {
                Operation::Send if pos == Position::Only => Some(Opcode::UD_SEND_ONLY),
                Operation::SendWithImm if pos == Position::Only => Some(Opcode::UD_SEND_ONLY_WITH_IMMEDIATE),
                _ => None,
            },
        }
    }

    /// Whether the next request packet carries AckReq: an RC QP's cadence; never on UC and UD,
    /// which are not acknowledged (rxe sends UC/UD packets without it).
    #[inline]
    fn ack_req_due(&self, end: bool, interval: u32) -> bool {
        self.qp_type.is_reliable() && self.send.ack_req_due(end, interval)
    }

    /// Where a packet of `n` bytes at byte offset `off` sits in a message of `len` bytes
    /// (segmentation by path MTU, IBTA §9.7.2).
    #[inline]
    fn position(off: u32, n: u32, len: u32) -> Position {
        match (off == 0, off as u64 + n as u64 >= len as u64) {
            (true, true) => Position::Only,
            (true, false) => Position::First,
            (false, true) => Position::Last,
            (false, false) => Position::Middle,
        }
    }

    /// Produce the next request packet into `buf`, if the QP may send one now.
    pub(crate) fn poll_request(&mut self, ctx: &mut Ctx<'_>, buf: &mut [u8]) -> Option<usize> {
        if !matches!(self.state, QpState::Rts | QpState::Sqd) || self.timers.get(Timer::Rnr).is_some() {
            return None;
        }
        if let Err(at) = self.pacer.check(ctx.now) {
            self.arm(ctx, Timer::Departure, at);
            return None;
        }
        let mtu = self.mtu();
        let window = ctx.cfg.send_window;
        let reliable = self.qp_type.is_reliable();
        loop {
            let (cur, _) = self.send.cursor();
            if cur == self.sq.tail {
                return None;
            }
            let w = self.sq.get(cur);
            if w.local_err.is_some() {
                // Complete it once everything before it has completed.
                if cur == self.sq.head {
                    self.complete_local_error(ctx);
                }
                return None;
            }
            if !w.psn_assigned {
                if self.state == QpState::Sqd {
                    return None;
                }
                let max_rd = (self.attr.max_rd_atomic as u32).max(1);
                let inflight = self.send.rd_atomic_inflight();
                if w.flags.contains(SendFlags::FENCE) && inflight > 0 {
                    return None;
                }
                if w.opcode.is_read_or_atomic() && inflight >= max_rd {
                    return None;
                }
                // Unreliable QPs have no window: nothing is ever acknowledged.
                if reliable && !self.send.window_open(window) {
                    return None;
                }
                let need = if w.opcode.is_read_or_atomic() { AccessFlags::LOCAL_WRITE } else { AccessFlags::NONE };
                if !w.is_inline {
                    if let Err(st) = check_sges(ctx.mrs, self.pd, self.sq.sges(cur), need) {
                        self.sq.get_mut(cur).local_err = Some(st);
                        continue;
                    }
                }
                let npkts = w.npkts(mtu);
                let (first, msn) = self.send.begin_wqe(w.opcode.is_read_or_atomic());
                let w = self.sq.get_mut(cur);
                w.psn_assigned = true;
                w.msn = msn;
                w.first_psn = first;
                w.last_psn = first.add(npkts - 1);
            }
            let (cur, cur_off) = self.send.cursor();
            let w = self.sq.get(cur);
            let psn = if w.opcode.is_atomic() { w.first_psn } else { w.first_psn.add(cur_off / mtu as u32) };
            if reliable && !self.send.in_window(psn, window) {
                return None;
            }
            if self.qp_type == QpType::Ud && w.length as usize > mtu {
                // C10-93.1.1: a datagram larger than the path MTU is not sent, and completes
                // as if it had been (rxe `rxe_requester`: "fake a successful UD send"). Its PSN
                // is used.
                ctx.counters.ud_oversize_sends += 1;
                tracing::debug!(qpn = self.qpn.value(), len = w.length, mtu, "UD send larger than the MTU dropped");
                self.send.on_sent(false, psn.add(1), Advance::NextWqe);
                self.complete_sent_head(ctx);
                continue;
            }
            let retransmission = psn.before(self.send.next_psn());
            let built = match self.qp_type {
                QpType::Ud => self.build_datagram(ctx, buf, cur, psn).map(|len| (len, true)),
                _ => self.build_request(ctx, buf, cur, cur_off, psn, mtu),
            };
            let Some((len, send_end)) = built else {
                // The gather list went bad after posting (region deregistered).
                self.sq.get_mut(cur).local_err = Some(WcStatus::LocProtErr);
                continue;
            };
            ctx.counters.sent_pkts += 1;
            if retransmission {
                ctx.counters.retransmitted_pkts += 1;
            } else if send_end {
                ctx.counters.rdma_sends += 1;
            }
            if !reliable {
                // UC and UD: a WQE is complete once its last packet is sent (rxe
                // `update_wqe_state` → `wqe_state_done` for non-RC QPs; no retransmission).
                if self.send.cursor().0 != cur {
                    self.complete_sent_head(ctx);
                }
            } else if self.timers.get(Timer::Retransmit).is_none() {
                if let Some(t) = local_ack_timeout(self.attr.timeout) {
                    self.arm(ctx, Timer::Retransmit, ctx.now + t);
                }
            }
            self.paced_sent(ctx, len);
            return Some(len);
        }
    }

    /// Build the packet at `psn` of WQE `cur` at byte offset `off` (the cursor) and advance.
    /// Returns the frame length and whether it ended a SEND message.
    fn build_request(
        &mut self,
        ctx: &mut Ctx<'_>,
        buf: &mut [u8],
        cur: u64,
        off: u32,
        psn: Psn,
        mtu: usize,
    ) -> Option<(usize, bool)> {
        if ctx.cfg.tx_fast_path {
            if let Some(len) = self.build_middle(ctx, buf, cur, off, psn, mtu) {
                return Some((len, false));
            }
        }
        if self.sq.get(cur).opcode == WrOpcode::RdmaRead {
            self.sq.get_mut(cur).read_req_off = off;
        }
        let tpl = self.template.as_ref()?;
        let w = self.sq.get(cur);
        let mut ext = ExtHeaders::default();
        let (position, payload_len, next_off, next_psn, done) = match w.opcode {
            WrOpcode::RdmaRead => {
                let remaining = w.length - off.min(w.length);
                ext.reth =
                    Some(RethRepr { va: w.remote_addr.wrapping_add(off as u64), rkey: w.rkey, dma_len: remaining });
                (Position::Only, 0, 0, w.last_psn.add(1), true)
            }
            WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd => {
                let (swap_add, compare) = match w.opcode {
                    WrOpcode::AtomicCmpAndSwp => (w.swap, w.compare_add),
                    _ => (w.compare_add, 0),
                };
                ext.atomic_eth = Some(AtomicEthRepr { va: w.remote_addr, rkey: w.rkey, swap_add, compare });
                (Position::Only, 0, 0, psn.add(1), true)
            }
            _ => {
                let n = (w.length - off).min(mtu as u32);
                let pos = Self::position(off, n, w.length);
                let last = pos.is_end();
                if pos.is_start() && matches!(w.opcode, WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm) {
                    ext.reth = Some(RethRepr { va: w.remote_addr, rkey: w.rkey, dma_len: w.length });
                }
                if pos.is_end() {
                    match w.opcode {
                        WrOpcode::SendWithImm | WrOpcode::RdmaWriteWithImm => ext.immdt = Some(w.imm_data),
                        WrOpcode::SendWithInv => ext.ieth = Some(w.invalidate_rkey),
                        _ => {}
                    }
                }
                (pos, n as usize, off + n, psn.add(1), last)
            }
        };
        let end = position.is_end();
        let opcode = Self::request_opcode(self.qp_type, w.opcode, position)?;
        let ack_req = self.ack_req_due(end, ctx.cfg.ack_req_interval);
        let solicited = end && w.flags.contains(SendFlags::SOLICITED);
        let src = Source { sges: self.sq.sges(cur), inline: w.is_inline.then_some(&w.inline[..]) };
        // What the next packet of this message will read.
        let ahead = if end { 0 } else { (w.length - next_off).min(mtu as u32) as usize };
        let mut gather_ok = true;
        let mrs = &*ctx.mrs;
        let pd = self.pd;
        let len = tpl.emit_copy(buf, ctx.idents, opcode, psn, ack_req, solicited, &ext, payload_len, |w| {
            gather_ok = gather_to(mrs, pd, &src, off as u64, payload_len, ahead, w);
            gather_ok
        })?;
        if !gather_ok {
            return None;
        }
        let send_end = end && matches!(w.opcode, WrOpcode::Send | WrOpcode::SendWithImm | WrOpcode::SendWithInv);
        self.send.on_sent(ack_req, next_psn, if done { Advance::NextWqe } else { Advance::Offset(next_off) });
        Some((len, send_end))
    }

    /// Build the datagram of UD WQE `cur` at `psn` (one packet, SEND ONLY with or without
    /// immediate, a DETH: the Q_Key and this QP's number) to its address handle, and advance.
    fn build_datagram(&mut self, ctx: &mut Ctx<'_>, buf: &mut [u8], cur: u64, psn: Psn) -> Option<usize> {
        let ud = self.sq.ud(cur)?;
        let w = self.sq.get(cur);
        // C10-15: a Q_Key with its high-order bit set means the QP's own (as ConnectX does;
        // rxe sends the WR's Q_Key as it is: programs give the real one).
        let qkey = if ud.remote_qkey & 0x8000_0000 != 0 { self.attr.qkey } else { ud.remote_qkey };
        let mut ext = ExtHeaders { deth: Some(DethRepr { qkey, src_qp: self.qpn }), ..Default::default() };
        if w.opcode == WrOpcode::SendWithImm {
            ext.immdt = Some(w.imm_data);
        }
        let opcode = Self::request_opcode(self.qp_type, w.opcode, Position::Only)?;
        let solicited = w.flags.contains(SendFlags::SOLICITED);
        let src = Source { sges: self.sq.sges(cur), inline: w.is_inline.then_some(&w.inline[..]) };
        let mrs = &*ctx.mrs;
        let pd = self.pd;
        let len = w.length as usize;
        let lqpn = self.qpn.value();
        let (n, looped) = crate::path::emit_datagram(
            ctx.cfg,
            ctx.idents,
            &ud.ah.av,
            (lqpn, ud.remote_qpn),
            (opcode, psn, solicited),
            &ext,
            len,
            buf,
            |dst| gather(mrs, pd, &src, 0, dst).is_ok(),
        )?;
        self.ud_loopback = looped;
        self.send.on_sent(false, psn.add(1), Advance::NextWqe);
        Some(n)
    }

    /// The transmit fast path: the MIDDLE packet of a SEND or RDMA WRITE (with or without
    /// immediate or invalidate: those ride on the last packet) from a one-SGE, non-inline WQE —
    /// the bulk of a large transfer — built without `build_request`'s per-packet decisions
    /// (position, extension headers, the gather-list walk): headers from the template, one
    /// path-MTU payload copied and CRC-ed in one pass from the region, the next packet's source
    /// prefetched. Byte for byte the frame `build_request` builds, with the same state changes;
    /// `None`, with no effect, for anything else, or if the region no longer covers the bytes
    /// (the general path then fails the WR). `tests/fast_paths.rs` holds the two to that.
    fn build_middle(
        &mut self,
        ctx: &mut Ctx<'_>,
        buf: &mut [u8],
        cur: u64,
        off: u32,
        psn: Psn,
        mtu: usize,
    ) -> Option<usize> {
        let w = self.sq.get(cur);
        let n = mtu as u32;
        if w.is_inline || w.num_sge != 1 || w.opcode.is_read_or_atomic() {
            return None;
        }
        if Self::position(off, n, w.length) != Position::Middle {
            return None;
        }
        let opcode = Self::request_opcode(self.qp_type, w.opcode, Position::Middle)?;
        let sge = self.sq.sges(cur)[0];
        let next_off = off + n;
        // What the next packet reads, fetched meanwhile (`gather_to`'s `ahead` and `more`).
        let ahead = (w.length - next_off).min(n) as usize;
        let at = sge.addr.checked_add(off as u64)?;
        let src = ctx.mrs.slice(sge.lkey, self.pd, at, n as usize + ahead, AccessFlags::NONE).ok()?;
        let (piece, next) = src.split_at(n as usize);
        let tpl = self.template.as_ref()?;
        let ack_req = self.ack_req_due(false, ctx.cfg.ack_req_interval);
        let none = ExtHeaders::default();
        let len = tpl.emit_copy(buf, ctx.idents, opcode, psn, ack_req, false, &none, n as usize, |w| {
            w.copy_prefetching(piece, next)
        })?;
        self.send.on_sent(ack_req, psn.add(1), Advance::Offset(next_off));
        ctx.counters.tx_fast_path_pkts += 1;
        Some(len)
    }
}
