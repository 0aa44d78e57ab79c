//! Many QP pairs between two engines back to back in memory: the 10,000-QP benchmark
//! (`benches/many_qps.rs`) and its tests (`tests/many_qps.rs`).
//!
//! Hardware RNICs lose throughput once their QP-context cache overflows; rxe allocates at most
//! ~32k QPs. Here `n` connected RC pairs share one PD, one CQ and one region per side, and
//! [`ManyQps::run`] spreads RDMA WRITEs round-robin over all of them — consecutive messages on
//! different QPs, so each message finds its QP's state cold once `n` is large — with a fixed
//! number outstanding in all, every one signaled.

use crate::connect::{connect_rc, RcLocal, RcRemote};
use crate::device::{Device, MrInfo};
use crate::sim::setup::{device, ALL_ACCESS};
use crate::time::Instant;
use crate::verbs::*;

/// `n` connected RC QP pairs, A → B.
pub struct ManyQps {
    /// The requesters' device.
    pub a: Device,
    /// The responders' device.
    pub b: Device,
    /// A's QPs (`qa[i]` is connected to `qb[i]`).
    pub qa: Vec<u32>,
    /// B's QPs.
    pub qb: Vec<u32>,
    /// A's CQ (every QP's send completions).
    pub cq_a: CqHandle,
    /// B's CQ.
    pub cq_b: CqHandle,
    /// A's region, filled with `i as u8`.
    pub src: MrInfo,
    /// B's region, zeroed.
    pub dst: MrInfo,
    buf: Vec<u8>,
    /// Messages posted so far.
    pub posted: u64,
    /// Messages completed so far.
    pub done: u64,
    /// Initial PSNs of each pair (A's send PSN, B's send PSN).
    pub psns: Vec<(u32, u32)>,
    /// The QP the next message goes on.
    next: usize,
}

impl ManyQps {
    /// Connect `n` QP pairs at path MTU `mtu`, with regions of `size` bytes (at least 64) and
    /// send queues of `sq` WQEs, receive queues of one.
    pub fn new(n: usize, mtu: Mtu, size: usize, sq: u32) -> Result<ManyQps, VerbsError> {
        let (mut a, mut b) = (device(1, 1), device(2, 1));
        let (pa, pb) = (a.alloc_pd(), b.alloc_pd());
        let (cq_a, cq_b) = (a.create_cq(1 << 14)?, b.create_cq(1 << 14)?);
        let cap = QpCap { max_send_wr: sq, max_recv_wr: 1, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 };
        let init = |cq| QpInitAttr { qp_type: QpType::Rc, send_cq: cq, recv_cq: cq, cap, sq_sig_all: false, srq: None };
        let local = RcLocal {
            access: ALL_ACCESS,
            path_mtu: mtu,
            max_dest_rd_atomic: 16,
            max_rd_atomic: 16,
            ..Default::default()
        };
        let (ga, gb) = (a.config().gids[1], b.config().gids[1]);
        let (ma, mb) = (a.config().mac, b.config().mac);
        let (mut qa, mut qb, mut psns) = (Vec::with_capacity(n), Vec::with_capacity(n), Vec::with_capacity(n));
        for _ in 0..n {
            let (x, y) = (a.create_qp(pa, &init(cq_a))?, b.create_qp(pb, &init(cq_b))?);
            let (px, py) = (a.random_psn(), b.random_psn());
            connect_rc(&mut a, x, &RcLocal { sq_psn: px, ..local }, &RcRemote { qpn: y, psn: py, gid: gb, mac: mb })?;
            connect_rc(&mut b, y, &RcLocal { sq_psn: py, ..local }, &RcRemote { qpn: x, psn: px, gid: ga, mac: ma })?;
            qa.push(x);
            qb.push(y);
            psns.push((px, py));
        }
        let size = size.max(64);
        let src = a.reg_mr(pa, (0..size).map(|i| i as u8).collect(), ALL_ACCESS)?;
        let dst = b.reg_mr(pb, vec![0u8; size].into_boxed_slice(), ALL_ACCESS)?;
        Ok(ManyQps { a, b, qa, qb, cq_a, cq_b, src, dst, buf: vec![0u8; 9216 + 64], posted: 0, done: 0, psns, next: 0 })
    }

    /// Run `msgs` RDMA WRITEs of `size` bytes, QP after QP round-robin, at most `window`
    /// outstanding in all. Panics on a failed completion.
    #[inline]
    pub fn run(&mut self, size: usize, msgs: u64, window: u64) {
        let now = Instant::ZERO;
        let target = self.posted + msgs;
        let mut wc = [WorkCompletion::default(); 64];
        let s = [Sge { addr: self.src.addr, length: size as u32, lkey: self.src.lkey }];
        while self.done < target {
            while self.posted < target && self.posted - self.done < window {
                let wr = SendWr {
                    wr_id: self.posted,
                    opcode: WrOpcode::RdmaWrite,
                    sg_list: &s,
                    send_flags: SendFlags::SIGNALED,
                    remote_addr: self.dst.addr,
                    rkey: self.dst.rkey,
                    ..Default::default()
                };
                self.a.post_send(self.qa[self.next], &wr).expect("post_send");
                self.next = (self.next + 1) % self.qa.len();
                self.posted += 1;
            }
            let buf = uroce_wire::copy::ip_aligned(&mut self.buf);
            while let Some(n) = self.a.poll_transmit(now, buf) {
                let _ = self.b.handle_frame(now, &buf[..n]);
            }
            while let Some(n) = self.b.poll_transmit(now, buf) {
                let _ = self.a.handle_frame(now, &buf[..n]);
            }
            loop {
                let n = self.a.poll_cq(self.cq_a, &mut wc).expect("poll_cq");
                for w in &wc[..n] {
                    assert_eq!(w.status, WcStatus::Success, "{w:?}");
                }
                self.done += n as u64;
                if n < wc.len() {
                    break;
                }
            }
        }
    }
}
