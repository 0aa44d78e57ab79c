//! The soak: random work requests of every operation and size over a lossy simulated network,
//! every byte and every completion checked. Behind `uroce sim soak` and the soak tests.
//!
//! Q QP pairs connect two nodes; pair `i` sends from node `i % 2`, so both nodes are requester
//! and responder at once. Each pair keeps up to `depth` WRs outstanding, each owning a slot of
//! `max_size` bytes at both ends (a slot is reused only after its WR completed, so the data a
//! completed WR moved can be checked in place). The receiver keeps `depth` receives posted.
//!
//! Checked: every WR completes exactly once, in posting order, with SUCCESS; WRITE data is in
//! the remote slot at completion; READ data (a fresh pattern the remote "application" wrote
//! before the READ was posted) is in the local slot; SEND data, length, immediate and
//! invalidated key arrive in the receive completions in order; FETCH_ADD and COMPARE_SWAP
//! return the value a sequential model predicts and leave the model's value in memory.

use super::setup::*;
use super::{LinkConfig, Network};
use crate::device::MrInfo;
use crate::verbs::*;
use core::time::Duration;
use rand_chacha::ChaCha8Rng;
use rand_core::{Rng, SeedableRng};
use std::collections::VecDeque;

/// Soak parameters.
#[derive(Clone, Debug)]
pub struct SoakConfig {
    /// Work requests in total.
    pub ops: u64,
    /// RNG seed (workload and network).
    pub seed: u64,
    /// Frame loss probability.
    pub loss: f64,
    /// Frame reorder probability.
    pub reorder: f64,
    /// Frame duplication probability.
    pub dup: f64,
    /// Single-bit corruption probability.
    pub corrupt: f64,
    /// Path MTU.
    pub mtu: Mtu,
    /// QP pairs.
    pub qps: usize,
    /// Largest message.
    pub max_size: usize,
    /// Outstanding WRs per QP pair.
    pub depth: usize,
    /// Use IPv6 GIDs.
    pub ipv6: bool,
    /// Local ACK timeout exponent (4.096 µs × 2^timeout).
    pub timeout: u8,
    /// The devices' receive and transmit fast paths on (the default) or off: either way the
    /// run is the same, frame for frame (`tests/fast_paths.rs`).
    pub fast_paths: bool,
}

impl Default for SoakConfig {
    fn default() -> Self {
        SoakConfig {
            ops: 10_000,
            seed: 1,
            loss: 0.0,
            reorder: 0.0,
            dup: 0.0,
            corrupt: 0.0,
            mtu: Mtu::Mtu1024,
            qps: 2,
            max_size: 64 * 1024,
            depth: 16,
            ipv6: false,
            timeout: 10,
            fast_paths: true,
        }
    }
}

/// The largest message a soak accepts (`max_size`): each QP pair keeps three regions of
/// `depth` slots of this size, so 64 MiB already means 3 GiB per pair at the default depth.
pub const MAX_MESSAGE: usize = 64 << 20;

/// The most memory a soak's regions may take, all QP pairs together.
pub const MAX_REGION_BYTES: u64 = 4 << 30;

/// A soak configuration that cannot run (checked by [`SoakConfig::check`] before anything is
/// allocated).
#[derive(Clone, Debug, PartialEq)]
pub enum SoakConfigError {
    /// `qps` or `depth` is 0.
    Empty {
        /// Which field.
        field: &'static str,
    },
    /// `max_size` is above [`MAX_MESSAGE`].
    MessageTooLarge {
        /// The size asked for.
        max_size: usize,
    },
    /// The regions of all QP pairs would take more than [`MAX_REGION_BYTES`].
    TooMuchMemory {
        /// Bytes the regions would take.
        bytes: u64,
        /// QP pairs.
        qps: usize,
        /// Slot size (the largest message, at least 8 bytes for the atomics).
        slot: usize,
        /// Slots per region.
        depth: usize,
    },
    /// A probability outside `[0, 1)`.
    Probability {
        /// Which one.
        field: &'static str,
        /// Its value.
        value: f64,
    },
}

impl core::fmt::Display for SoakConfigError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            SoakConfigError::Empty { field } => write!(f, "the soak needs at least one {field}"),
            SoakConfigError::MessageTooLarge { max_size } => write!(
                f,
                "the largest message ({max_size} bytes) must be at most {MAX_MESSAGE} bytes (64 MiB): \
                 each QP pair keeps 3 regions of 16 slots of that size in memory"
            ),
            SoakConfigError::TooMuchMemory { bytes, qps, slot, depth } => write!(
                f,
                "the soak's regions would take {:.1} GiB ({qps} QP pairs x 3 regions x {depth} slots x {slot} \
                 bytes); at most {} GiB: use fewer QP pairs or a smaller largest message",
                *bytes as f64 / (1u64 << 30) as f64,
                MAX_REGION_BYTES >> 30
            ),
            SoakConfigError::Probability { field, value } => write!(f, "{field} must be in [0, 1), not {value}"),
        }
    }
}

impl std::error::Error for SoakConfigError {}

impl SoakConfig {
    /// Bytes of memory the soak's regions take: per QP pair a local, a remote and a receive
    /// region of `depth` slots of `max(max_size, 8)` bytes (the 16-byte atomic region aside).
    pub fn region_bytes(&self) -> u64 {
        (self.qps as u64)
            .saturating_mul(3)
            .saturating_mul(self.depth as u64)
            .saturating_mul(self.max_size.max(8) as u64)
    }

    /// Refuses a configuration that cannot run, before anything is allocated: no QP pair or
    /// no depth, a message above [`MAX_MESSAGE`], regions above [`MAX_REGION_BYTES`] (which also
    /// keeps each region inside its 4 GiB I/O-virtual-address window), a probability outside
    /// `[0, 1)`.
    pub fn check(&self) -> Result<(), SoakConfigError> {
        if self.qps == 0 {
            return Err(SoakConfigError::Empty { field: "QP pair" });
        }
        if self.depth == 0 {
            return Err(SoakConfigError::Empty { field: "outstanding WR per QP pair" });
        }
        if self.max_size > MAX_MESSAGE {
            return Err(SoakConfigError::MessageTooLarge { max_size: self.max_size });
        }
        let bytes = self.region_bytes();
        if bytes > MAX_REGION_BYTES {
            return Err(SoakConfigError::TooMuchMemory {
                bytes,
                qps: self.qps,
                slot: self.max_size.max(8),
                depth: self.depth,
            });
        }
        for (field, value) in
            [("loss", self.loss), ("reorder", self.reorder), ("dup", self.dup), ("corrupt", self.corrupt)]
        {
            if !(0.0..1.0).contains(&value) {
                return Err(SoakConfigError::Probability { field, value });
            }
        }
        Ok(())
    }
}

/// What a soak saw.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SoakReport {
    /// WRs posted.
    pub ops: u64,
    /// WRs completed successfully with correct data.
    pub ok: u64,
    /// WRs that failed (error status, out of order, duplicated, missing).
    pub failed: u64,
    /// WRs whose data, length, immediate or atomic result was wrong.
    pub data_mismatch: u64,
    /// Packets retransmitted (both nodes).
    pub retransmits: u64,
    /// NAKs sent (sequence, RNR and error NAKs, both nodes).
    pub naks: u64,
    /// Simulated time.
    pub sim_time: Duration,
    /// First few failure descriptions.
    pub errors: Vec<String>,
    /// Both devices' counters at the end.
    pub counters: [crate::Counters; 2],
    /// What the simulated wire did.
    pub wire: super::WireStats,
}

impl SoakReport {
    /// The summary line `uroce sim soak` prints.
    pub fn summary(&self) -> String {
        format!(
            "ops: {} ok: {} failed: {} data_mismatch: {} retransmits: {} naks: {} sim_time_ms: {:.3}",
            self.ops,
            self.ok,
            self.failed,
            self.data_mismatch,
            self.retransmits,
            self.naks,
            self.sim_time.as_secs_f64() * 1e3
        )
    }
    /// Did everything succeed?
    pub fn passed(&self) -> bool {
        self.failed == 0 && self.data_mismatch == 0 && self.ok == self.ops
    }
    fn fail(&mut self, mismatch: bool, msg: String) {
        if mismatch {
            self.data_mismatch += 1;
        } else {
            self.failed += 1;
        }
        if self.errors.len() < 10 {
            self.errors.push(msg);
        }
    }
}

#[derive(Clone, Debug)]
enum Expect {
    Write { slot: usize, len: usize, tag: u64 },
    Read { slot: usize, len: usize, tag: u64 },
    Send,
    Atomic { slot: usize, orig: u64 },
}

#[derive(Clone, Debug)]
struct Recv {
    len: usize,
    tag: u64,
    imm: Option<u32>,
    inv: Option<u32>,
    write_imm: bool,
}

struct Pair {
    req: QpEnd,
    resp: QpEnd,
    local: MrInfo,
    remote: MrInfo,
    recv_mr: MrInfo,
    atom: MrInfo,
    posted: u64,
    completed: u64,
    outstanding: VecDeque<(u64, Expect)>,
    sends: VecDeque<Recv>,
    recv_posted: u64,
    recv_done: u64,
    fadd_model: u64,
    cas_model: u64,
}

fn pattern(tag: u64, i: usize) -> u8 {
    let x = tag.wrapping_add(i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    (x >> 57) as u8 ^ (i as u8)
}

fn fill(buf: &mut [u8], tag: u64) {
    for (i, b) in buf.iter_mut().enumerate() {
        *b = pattern(tag, i);
    }
}

fn check(buf: &[u8], tag: u64) -> bool {
    buf.iter().enumerate().all(|(i, &b)| b == pattern(tag, i))
}

/// Run a soak.
pub fn run(cfg: &SoakConfig) -> SoakReport {
    run_with_tap(cfg, None)
}

/// Run a soak, showing every frame put on the wire to `tap` (e.g. a pcap writer).
pub fn run_with_tap(cfg: &SoakConfig, tap: Option<super::Tap>) -> SoakReport {
    let link = LinkConfig {
        loss: cfg.loss,
        reorder: cfg.reorder,
        dup: cfg.dup,
        corrupt: cfg.corrupt,
        ..LinkConfig::default()
    };
    let mut net = Network::new(cfg.seed, link);
    if let Some(t) = tap {
        net.set_tap(t);
    }
    for i in 0..2u8 {
        let mut d = device(i + 1, cfg.seed);
        // rxe semantics for retry_cnt 7 (retry forever), so a 20 % loss run completes.
        let mut c = d.config().clone();
        c.quirks.retry_cnt_7_infinite = true;
        c.rx_fast_path = cfg.fast_paths;
        c.tx_fast_path = cfg.fast_paths;
        d = crate::device::Device::new(c);
        net.add(d);
    }
    let o = QpOptions {
        mtu: cfg.mtu,
        timeout: cfg.timeout,
        ipv6: cfg.ipv6,
        cap: QpCap {
            max_send_wr: cfg.depth as u32 * 2,
            max_recv_wr: cfg.depth as u32 * 2,
            max_send_sge: 4,
            max_recv_sge: 4,
            max_inline_data: 64,
        },
        ..QpOptions::default()
    };
    let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed ^ 0x50a4);
    let slot = cfg.max_size.max(8);
    let mut pairs = Vec::new();
    for i in 0..cfg.qps {
        let (a, b) = (i % 2, 1 - i % 2);
        let (req, resp) = connect(&mut net, a, b, &o).expect("connect");
        // Regions at fixed I/O virtual addresses (`ibv_reg_mr_iova`), not at wherever the
        // allocator put them: the same seed puts the same bytes on the wire, run after run.
        let base = 0x10_0000_0000u64 * (i as u64 + 1);
        let mut reg_at = |node: usize, pd, len: usize, k: u64| {
            let mem = vec![0u8; len].into_boxed_slice();
            net.dev(node).reg_mr_iova(pd, mem, base + k * 0x1_0000_0000, ALL_ACCESS).expect("reg_mr_iova")
        };
        let local = reg_at(a, req.pd, slot * cfg.depth, 0);
        let remote = reg_at(b, resp.pd, slot * cfg.depth, 1);
        let recv_mr = reg_at(b, resp.pd, slot * cfg.depth, 2);
        let atom = reg_at(b, resp.pd, 16, 3);
        pairs.push(Pair {
            req,
            resp,
            local,
            remote,
            recv_mr,
            atom,
            posted: 0,
            completed: 0,
            outstanding: VecDeque::new(),
            sends: VecDeque::new(),
            recv_posted: 0,
            recv_done: 0,
            fadd_model: 0,
            cas_model: 0,
        });
    }
    let mut rep = SoakReport::default();
    let quota = |i: usize| cfg.ops / cfg.qps as u64 + u64::from((i as u64) < cfg.ops % cfg.qps as u64);
    let mtu = cfg.mtu.bytes();
    let mut stalled_steps = 0u64;
    loop {
        let mut progress = false;
        for (pi, p) in pairs.iter_mut().enumerate() {
            // Keep `depth` receives posted.
            while p.recv_posted - p.recv_done < cfg.depth as u64 {
                let s = (p.recv_posted % cfg.depth as u64) as usize;
                let sg = [Sge { addr: p.recv_mr.addr + (s * slot) as u64, length: slot as u32, lkey: p.recv_mr.lkey }];
                net.dev(p.resp.node)
                    .post_recv(p.resp.qpn, &RecvWr { wr_id: p.recv_posted, sg_list: &sg })
                    .expect("post_recv");
                p.recv_posted += 1;
            }
            while p.outstanding.len() < cfg.depth && p.posted < quota(pi) {
                post_one(&mut net, p, &mut rng, cfg, slot, mtu);
                rep.ops += 1;
                progress = true;
            }
        }
        let more = net.step();
        for p in pairs.iter_mut() {
            for wc in drain_cq(&mut net, p.req.node, p.req.cq) {
                progress = true;
                check_send_wc(&mut net, p, &wc, slot, &mut rep);
            }
            for wc in drain_cq(&mut net, p.resp.node, p.resp.cq) {
                progress = true;
                check_recv_wc(&mut net, p, &wc, slot, &mut rep);
            }
        }
        let done = pairs.iter().enumerate().all(|(i, p)| p.completed == quota(i) && p.sends.is_empty());
        if done {
            break;
        }
        stalled_steps = if progress { 0 } else { stalled_steps + 1 };
        if !more || stalled_steps > 200_000 {
            let missing: u64 = pairs.iter().enumerate().map(|(i, p)| quota(i) - p.completed).sum();
            rep.fail(false, format!("stalled with {missing} WRs not completed (network idle: {})", !more));
            for p in &pairs {
                for e in [p.req, p.resp] {
                    let s = net.dev(e.node).qp(e.qpn).map(|q| q.debug_summary()).unwrap_or_default();
                    rep.errors.push(s);
                }
            }
            rep.failed += missing.saturating_sub(1);
            break;
        }
    }
    rep.wire = net.stats();
    for i in 0..2 {
        let c = net.dev(i).counters();
        rep.counters[i] = *c;
        rep.retransmits += c.retransmitted_pkts;
        rep.naks += c.send_seq_err + c.send_rnr_err + c.send_err;
    }
    rep.sim_time = Duration::from_nanos(net.now().as_nanos());
    rep
}

fn post_one(net: &mut Network, p: &mut Pair, rng: &mut ChaCha8Rng, cfg: &SoakConfig, slot: usize, mtu: usize) {
    let id = p.posted;
    let s = (id % cfg.depth as u64) as usize;
    let tag = rng.next_u64();
    let r = rng.next_u32() % 100;
    // Sizes: 0, tiny, around the MTU, up to the maximum.
    let size = match rng.next_u32() % 10 {
        0 => 0,
        1..=3 => 1 + (rng.next_u32() as usize % 64),
        4..=6 => mtu - 3 + (rng.next_u32() as usize % (2 * mtu)),
        _ => rng.next_u64() as usize % (cfg.max_size + 1),
    }
    .min(cfg.max_size);
    let local = p.local.addr + (s * slot) as u64;
    let remote = p.remote.addr + (s * slot) as u64;
    let mut wr = SendWr {
        wr_id: id,
        send_flags: SendFlags::SIGNALED,
        rkey: p.remote.rkey,
        remote_addr: remote,
        ..Default::default()
    };
    let mut sg = [Sge { addr: local, length: size as u32, lkey: p.local.lkey }];
    let expect;
    if r < 30 {
        // SEND family.
        let mr = net.dev(p.req.node).mr_mut(p.local.lkey).expect("mr");
        fill(&mut mr.as_mut_slice()[s * slot..s * slot + size], tag);
        let mut rec = Recv { len: size, tag, imm: None, inv: None, write_imm: false };
        wr.opcode = match r % 3 {
            0 => WrOpcode::Send,
            1 => {
                wr.imm_data = rng.next_u32();
                rec.imm = Some(wr.imm_data);
                WrOpcode::SendWithImm
            }
            _ => {
                wr.invalidate_rkey = rng.next_u32();
                rec.inv = Some(wr.invalidate_rkey);
                WrOpcode::SendWithInv
            }
        };
        if size <= 64 && rng.next_u32().is_multiple_of(2) {
            wr.send_flags |= SendFlags::INLINE;
        }
        p.sends.push_back(rec);
        expect = Expect::Send;
    } else if r < 60 {
        let mr = net.dev(p.req.node).mr_mut(p.local.lkey).expect("mr");
        fill(&mut mr.as_mut_slice()[s * slot..s * slot + size], tag);
        wr.opcode = if r < 50 { WrOpcode::RdmaWrite } else { WrOpcode::RdmaWriteWithImm };
        if wr.opcode == WrOpcode::RdmaWriteWithImm {
            wr.imm_data = rng.next_u32();
            p.sends.push_back(Recv { len: size, tag, imm: Some(wr.imm_data), inv: None, write_imm: true });
        }
        expect = Expect::Write { slot: s, len: size, tag };
    } else if r < 85 {
        // The remote application writes fresh data before the READ is posted.
        let mr = net.dev(p.resp.node).mr_mut(p.remote.lkey).expect("mr");
        fill(&mut mr.as_mut_slice()[s * slot..s * slot + size], tag);
        wr.opcode = WrOpcode::RdmaRead;
        expect = Expect::Read { slot: s, len: size, tag };
    } else {
        sg[0].length = 8;
        wr.rkey = p.atom.rkey;
        if r < 93 {
            wr.opcode = WrOpcode::AtomicFetchAndAdd;
            wr.remote_addr = p.atom.addr;
            wr.compare_add = rng.next_u64() >> (rng.next_u32() % 64);
            expect = Expect::Atomic { slot: s, orig: p.fadd_model };
            p.fadd_model = p.fadd_model.wrapping_add(wr.compare_add);
        } else {
            wr.opcode = WrOpcode::AtomicCmpAndSwp;
            wr.remote_addr = p.atom.addr + 8;
            // Half the time the compare matches.
            wr.compare_add = if rng.next_u32().is_multiple_of(2) { p.cas_model } else { p.cas_model ^ 1 };
            wr.swap = rng.next_u64();
            expect = Expect::Atomic { slot: s, orig: p.cas_model };
            if wr.compare_add == p.cas_model {
                p.cas_model = wr.swap;
            }
        }
    }
    wr.sg_list = &sg;
    net.dev(p.req.node).post_send(p.req.qpn, &wr).expect("post_send");
    p.outstanding.push_back((id, expect));
    p.posted += 1;
}

fn check_send_wc(net: &mut Network, p: &mut Pair, wc: &WorkCompletion, slot: usize, rep: &mut SoakReport) {
    let Some((id, expect)) = p.outstanding.pop_front() else {
        return rep.fail(false, format!("qp {:#x}: completion with nothing outstanding: {wc:?}", p.req.qpn));
    };
    p.completed += 1;
    if wc.wr_id != id {
        return rep.fail(false, format!("qp {:#x}: expected wr_id {id}, got {wc:?}", p.req.qpn));
    }
    if wc.status != WcStatus::Success {
        return rep.fail(false, format!("qp {:#x}: wr {id} failed: {:?}", p.req.qpn, wc.status));
    }
    let ok = match expect {
        Expect::Send => true,
        Expect::Write { slot: s, len, tag } => {
            let m = net.dev(p.resp.node).mr(p.remote.lkey).expect("mr").as_slice();
            check(&m[s * slot..s * slot + len], tag)
        }
        Expect::Read { slot: s, len, tag } => {
            let m = net.dev(p.req.node).mr(p.local.lkey).expect("mr").as_slice();
            check(&m[s * slot..s * slot + len], tag) && wc.byte_len as usize == len
        }
        Expect::Atomic { slot: s, orig } => {
            let m = net.dev(p.req.node).mr(p.local.lkey).expect("mr").as_slice();
            u64::from_le_bytes(m[s * slot..s * slot + 8].try_into().expect("8")) == orig
        }
    };
    if ok {
        rep.ok += 1;
    } else {
        rep.fail(true, format!("qp {:#x}: wr {id} data mismatch ({wc:?})", p.req.qpn));
    }
}

fn check_recv_wc(net: &mut Network, p: &mut Pair, wc: &WorkCompletion, slot: usize, rep: &mut SoakReport) {
    let Some(e) = p.sends.pop_front() else {
        return rep.fail(false, format!("qp {:#x}: unexpected receive completion {wc:?}", p.resp.qpn));
    };
    if wc.wr_id != p.recv_done || wc.status != WcStatus::Success {
        p.recv_done += 1;
        return rep.fail(false, format!("qp {:#x}: receive {}: {wc:?}", p.resp.qpn, p.recv_done - 1));
    }
    let s = (p.recv_done % (p.recv_mr.length / slot) as u64) as usize;
    p.recv_done += 1;
    let ok = if e.write_imm {
        wc.opcode == WcOpcode::RecvRdmaWithImm && wc.byte_len as usize == e.len && Some(wc.imm_data) == e.imm
    } else {
        let m = net.dev(p.resp.node).mr(p.recv_mr.lkey).expect("mr").as_slice();
        let flags_ok = match (e.imm, e.inv) {
            (Some(i), _) => wc.wc_flags.contains(WcFlags::WITH_IMM) && wc.imm_data == i,
            (None, Some(k)) => wc.wc_flags.contains(WcFlags::WITH_INV) && wc.imm_data == k,
            _ => wc.wc_flags.is_empty(),
        };
        wc.opcode == WcOpcode::Recv
            && wc.byte_len as usize == e.len
            && flags_ok
            && check(&m[s * slot..s * slot + e.len], e.tag)
    };
    if !ok {
        rep.fail(true, format!("qp {:#x}: receive data mismatch: expected {e:?}, got {wc:?}", p.resp.qpn));
    }
}
