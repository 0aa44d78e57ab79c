//! A QP's part in congestion control ([`crate::cc`]): as notification point it answers
//! CE-marked data with CNPs; as reaction point it hands CNPs, sent bytes and its timer to its
//! algorithm and paces at the rate that names.

use super::{Ctx, Qp};
use crate::timer::Timer;
use uroce_wire::opcode::{OpcodeInfo, Operation};
use uroce_wire::{Ecn, ParsedFrame};

/// Whether a CNP reached a reaction point.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CnpOutcome {
    /// The QP's algorithm took it.
    Handled,
    /// The device runs no reaction point.
    Ignored,
}

impl Qp {
    /// A frame `p` this QP accepted: if it is CE-marked data (a request at the responder, a
    /// READ response at the requester: the NP is whoever receives the data, IBTA A17.9.2,
    /// SIGCOMM 2015 §3.1), count it and queue a CNP if the NP's pacing allows.
    pub(crate) fn on_received(&mut self, ctx: &mut Ctx<'_>, p: &ParsedFrame<'_>, info: &OpcodeInfo) {
        if p.ip.ecn() != Ecn::Ce
            || !self.qp_type.is_connected()
            || !(info.is_request() || info.operation == Operation::ReadResponse)
        {
            return;
        }
        ctx.counters.np_ecn_marked_roce_packets += 1;
        if let Some(np) = &ctx.cfg.cc.np {
            self.np.on_ce(ctx.now, np);
        }
    }

    /// A CNP from the peer for this QP.
    pub(crate) fn on_cnp(&mut self, ctx: &mut Ctx<'_>) -> CnpOutcome {
        let Some(alg) = &ctx.cfg.cc.rp else { return CnpOutcome::Ignored };
        // Instantiated at the first CNP: a QP that never meets congestion costs nothing.
        self.cc.get_or_insert_with(|| alg.instantiate()).on_cnp(ctx.now);
        self.cc_sync(ctx);
        CnpOutcome::Handled
    }

    /// A packet of `bytes` left under this QP's pacing.
    #[inline]
    pub(crate) fn paced_sent(&mut self, ctx: &mut Ctx<'_>, bytes: usize) {
        self.pacer.on_sent(ctx.now, bytes);
        if let Some(cc) = &mut self.cc {
            let before = cc.rate();
            cc.on_sent(ctx.now, bytes);
            if cc.rate() != before {
                self.cc_sync(ctx);
            }
        }
    }

    /// The algorithm's timer fired.
    pub(crate) fn on_cc_timeout(&mut self, ctx: &mut Ctx<'_>) {
        if let Some(cc) = &mut self.cc {
            cc.on_timeout(ctx.now);
            self.cc_sync(ctx);
        }
    }

    /// Take the algorithm's rate into the pacer and its next deadline into the timer table.
    fn cc_sync(&mut self, ctx: &mut Ctx<'_>) {
        let Some(cc) = &self.cc else { return };
        let (rate, next) = (cc.rate(), cc.next_timeout());
        self.pacer.set_cc_rate(rate);
        match next {
            Some(at) => self.arm(ctx, Timer::Cc, at),
            None => self.timers.stop(Timer::Cc),
        }
    }

    /// Emit the pending CNP, if any.
    pub(crate) fn poll_cnp(&mut self, ctx: &mut Ctx<'_>, buf: &mut [u8]) -> Option<usize> {
        if !self.np.pending {
            return None;
        }
        self.np.pending = false;
        let (tpl, np) = (self.template.as_ref()?, ctx.cfg.cc.np.as_ref()?);
        let qpns = (self.qpn.value(), self.attr.dest_qp_num);
        let len = tpl.emit_cnp(ctx.cfg, ctx.idents, np, &self.attr.ah_attr, qpns, buf)?;
        ctx.counters.np_cnp_sent += 1;
        ctx.counters.sent_pkts += 1;
        Some(len)
    }
}
