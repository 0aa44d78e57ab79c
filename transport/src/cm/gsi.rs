//! The GSI agent: QP1 as a UD QP of the device (Q_Key 0x80010000, IBTA §13.4.6.1) carrying the
//! CM's MADs, through the same verbs any UD application uses — receive buffers with their
//! 40-byte GRH area ([`crate::grh`]) on one side, address handles and UD sends on the other.
//! Like the rest of the engine it is driven: [`Gsi::progress`] moves what has arrived to the
//! [`Cm`] and what the CM has to send onto the wire, and never blocks.
//!
//! The peer's MAC for an address handle comes from the caller (`resolve`: the runtime asks the
//! kernel's neighbour table, as `ibv_create_ah` does through the kernel for rxe).

use super::{Cm, MadAddr, OutMad};
use crate::connect::ud_ready;
use crate::device::{Device, MrInfo};
use crate::grh::{self, GRH_LEN};
use crate::time::Instant;
use crate::verbs::*;
use std::net::IpAddr;
use uroce_wire::mad::{GSI_QKEY, GSI_QPN, MAD_LEN};
use uroce_wire::EthernetAddress;

/// Buffers.
#[derive(Clone, Copy, Debug)]
pub struct GsiConfig {
    /// Receive buffers posted on QP1 (each a GRH area and one MAD).
    pub recv_slots: usize,
    /// MADs in flight on the send queue.
    pub send_slots: usize,
}

impl Default for GsiConfig {
    fn default() -> GsiConfig {
        GsiConfig { recv_slots: 128, send_slots: 64 }
    }
}

/// The agent's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GsiCounters {
    /// MADs handed to the CM.
    pub rx_mads: u64,
    /// Receives that completed in error or without a readable GRH.
    pub rx_errors: u64,
    /// MADs posted.
    pub tx_mads: u64,
    /// Sends that completed in error, or could not be posted.
    pub tx_errors: u64,
    /// MADs dropped because the peer's MAC could not be resolved (the CM resends requests).
    pub tx_no_route: u64,
}

const RECV_SLOT: usize = GRH_LEN + MAD_LEN;
/// Work request IDs: receives count from 0, sends from here.
const SEND_WR: u64 = 1 << 32;

/// QP1 and its buffers.
#[derive(Debug)]
pub struct Gsi {
    cq: CqHandle,
    pd: PdHandle,
    mr: MrInfo,
    recv_slots: usize,
    free_send: Vec<usize>,
    /// A MAD taken from the CM that found no free send slot yet.
    waiting: Option<OutMad>,
    counters: GsiCounters,
}

impl Gsi {
    /// Create QP1 on `dev` (it must have none), bring it to RTS and post its receive buffers.
    pub fn open(dev: &mut Device, cfg: GsiConfig) -> Result<Gsi, VerbsError> {
        let pd = dev.alloc_pd();
        let cq = dev.create_cq(cfg.recv_slots + cfg.send_slots)?;
        let len = cfg.recv_slots * RECV_SLOT + cfg.send_slots * MAD_LEN;
        let mr = dev.reg_mr(pd, vec![0u8; len].into_boxed_slice(), AccessFlags::LOCAL_WRITE)?;
        let cap = QpCap {
            max_send_wr: cfg.send_slots as u32,
            max_recv_wr: cfg.recv_slots as u32,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        };
        let init = QpInitAttr { qp_type: QpType::Ud, send_cq: cq, recv_cq: cq, cap, sq_sig_all: true, srq: None };
        dev.create_qp_with_qpn(pd, &init, GSI_QPN.value())?;
        ud_ready(dev, GSI_QPN.value(), GSI_QKEY, 0)?;
        let g = Gsi {
            cq,
            pd,
            mr,
            recv_slots: cfg.recv_slots,
            free_send: (0..cfg.send_slots).rev().collect(),
            waiting: None,
            counters: GsiCounters::default(),
        };
        for i in 0..cfg.recv_slots {
            g.post_recv(dev, i)?;
        }
        Ok(g)
    }

    /// The counters.
    pub fn counters(&self) -> &GsiCounters {
        &self.counters
    }

    fn post_recv(&self, dev: &mut Device, slot: usize) -> Result<(), VerbsError> {
        let sge = Sge { addr: self.mr.addr + (slot * RECV_SLOT) as u64, length: RECV_SLOT as u32, lkey: self.mr.lkey };
        dev.post_recv(GSI_QPN.value(), &RecvWr { wr_id: slot as u64, sg_list: &[sge] })
    }

    fn send_offset(&self, slot: usize) -> usize {
        self.recv_slots * RECV_SLOT + slot * MAD_LEN
    }

    /// Whether [`Gsi::progress`] would find nothing to do: no completion on QP1's CQ, no MAD
    /// from `cm` waiting (a check cheap enough for every round of a busy runtime).
    pub fn idle(&self, dev: &Device, cm: &Cm) -> bool {
        self.waiting.is_none() && !cm.has_transmit() && dev.cq(self.cq).is_none_or(|c| c.is_empty())
    }

    /// Move MADs both ways: received ones to `cm`, the CM's onto QP1. `true` when anything moved.
    pub fn progress(
        &mut self,
        now: Instant,
        dev: &mut Device,
        cm: &mut Cm,
        resolve: &mut dyn FnMut(IpAddr) -> Option<EthernetAddress>,
    ) -> bool {
        let mut moved = false;
        let mut wcs = [WorkCompletion::default(); 32];
        loop {
            let n = dev.poll_cq(self.cq, &mut wcs).unwrap_or(0);
            for wc in &wcs[..n] {
                moved = true;
                if wc.wr_id >= SEND_WR {
                    self.free_send.push((wc.wr_id - SEND_WR) as usize);
                    if wc.status != WcStatus::Success {
                        self.counters.tx_errors += 1;
                    }
                } else {
                    self.received(now, dev, cm, wc);
                }
            }
            if n < wcs.len() {
                break;
            }
        }
        loop {
            if self.free_send.is_empty() {
                break;
            }
            let Some(m) = self.waiting.take().or_else(|| cm.poll_transmit()) else { break };
            moved = true;
            self.send(dev, m, resolve);
        }
        moved
    }

    fn received(&mut self, now: Instant, dev: &mut Device, cm: &mut Cm, wc: &WorkCompletion) {
        let slot = wc.wr_id as usize;
        let ok = wc.status == WcStatus::Success && wc.wc_flags.contains(WcFlags::GRH);
        let from = ok
            .then(|| dev.mr(self.mr.lkey))
            .flatten()
            .and_then(|mr| mr.as_slice().get(slot * RECV_SLOT..(slot + 1) * RECV_SLOT))
            .and_then(|b| {
                let area: &[u8; GRH_LEN] = b[..GRH_LEN].try_into().ok()?;
                let g = grh::parse(area).ok()?;
                let len = (wc.byte_len as usize).checked_sub(GRH_LEN)?.min(MAD_LEN);
                Some((g, b[GRH_LEN..GRH_LEN + len].to_vec()))
            });
        match from {
            Some((g, mad)) => {
                let sgid_index = dev.config().gids.iter().position(|x| x.to_ip() == g.dst).unwrap_or(0) as u8;
                let addr = MadAddr { gid: g.src, qpn: wc.src_qp, pkey_index: wc.pkey_index, sgid_index };
                self.counters.rx_mads += 1;
                let _ = cm.handle_mad(now, addr, &mad);
            }
            None => self.counters.rx_errors += 1,
        }
        if self.post_recv(dev, slot).is_err() {
            self.counters.rx_errors += 1;
        }
    }

    fn send(&mut self, dev: &mut Device, m: OutMad, resolve: &mut dyn FnMut(IpAddr) -> Option<EthernetAddress>) {
        let Some(dmac) = resolve(m.to.gid) else {
            self.counters.tx_no_route += 1;
            return;
        };
        let av = AddressVector {
            dgid: Gid::from_ip(m.to.gid),
            sgid_index: m.to.sgid_index,
            hop_limit: 64,
            traffic_class: 0,
            flow_label: 0,
            sl: 0,
            dmac,
        };
        let Ok(ah) = dev.create_ah(self.pd, &av) else {
            self.counters.tx_errors += 1;
            return;
        };
        let Some(slot) = self.free_send.pop() else {
            self.waiting = Some(m);
            return;
        };
        let off = self.send_offset(slot);
        let Some(mr) = dev.mr_mut(self.mr.lkey) else { return };
        mr.as_mut_slice()[off..off + MAD_LEN].copy_from_slice(&m.mad[..]);
        let sge = [Sge { addr: self.mr.addr + off as u64, length: MAD_LEN as u32, lkey: self.mr.lkey }];
        let wr = SendWr {
            wr_id: SEND_WR + slot as u64,
            opcode: WrOpcode::Send,
            sg_list: &sge,
            send_flags: SendFlags::SIGNALED,
            ud: Some(UdDest { ah, remote_qpn: m.to.qpn, remote_qkey: GSI_QKEY }),
            ..Default::default()
        };
        match dev.post_send(GSI_QPN.value(), &wr) {
            Ok(()) => self.counters.tx_mads += 1,
            Err(_) => {
                self.free_send.push(slot);
                self.counters.tx_errors += 1;
            }
        }
    }
}
