//! The device: one RoCEv2 port's verbs objects and the engine's sans-IO entry points.
//!
//! # Calling convention (after quinn-proto's `Connection`)
//!
//! * **Commands** (verbs): `alloc_pd`, `reg_mr`, `create_cq`, `create_qp`, `modify_qp`,
//!   `post_send`, `post_recv`, `poll_cq`, ... — return at once.
//! * **Input**: [`Device::handle_frame`] with one received Ethernet frame and the current
//!   time; [`Device::handle_timeout`] when the time [`Device::poll_timeout`] named has come.
//!   Spurious calls are harmless.
//! * **Output**: call [`Device::poll_transmit`] until it returns `None` after every input or
//!   command, then re-read [`Device::poll_timeout`].
//!
//! Each call does bounded work: one frame in, one frame out, the timers that expired. The
//! device never reads a clock or the OS RNG; its randomness (QPNs, memory keys) comes from
//! `DeviceConfig::seed`.

//!
//! # Where things are
//!
//! | file | what |
//! |---|---|
//! | `device/mod.rs` | the [`Device`], its configuration knobs, and `Device::with_qp`: the one way to run a QP with the device's shared state |
//! | `device/objects.rs` | verbs objects: PDs, MRs, CQs, QPs, address handles (create, destroy, query) |
//! | `device/srq.rs` | shared receive queues (create, modify, query, post, destroy) |
//! | `device/modify.rs` | `ibv_modify_qp`: attribute validation and the transition |
//! | `device/rx.rs` | receive routing: parse, ICRC, address / P_Key / QP checks, the WRITE fast path |
//! | `device/schedule.rs` | transmit scheduling (the ready queue) and timers |
//! | `crate::config`, `crate::path`, `crate::timer` | the configuration, a QP's frame template and rxe's formulas, the timer table and queue |

mod modify;
mod objects;
mod rx;
mod schedule;
mod srq;

pub use crate::config::{DeviceConfig, Guards, Ipv4Ident, QpnShard, Quirks, READ_REPLAYS_FREE};
pub use crate::formulas::{calc_flow_label, rc_udp_sport as udp_sport};
pub use objects::MrInfo;
pub use rx::RxDrop;
pub use srq::MAX_SRQ_WR;

use crate::counters::Counters;
use crate::cq::Cq;
use crate::mr::MrTable;
use crate::path::Idents;
use crate::qp::{AsyncEvent, Ctx, Qp};
use crate::time::Instant;
use crate::timer::TimerQueue;
use rand_chacha::ChaCha8Rng;
use rand_core::{Rng, SeedableRng};
use std::collections::VecDeque;
use std::net::IpAddr;

/// One RoCEv2 port: verbs objects and the protocol engine.
pub struct Device {
    cfg: DeviceConfig,
    rng: ChaCha8Rng,
    pds: Vec<bool>,
    mrs: MrTable,
    cqs: Vec<Option<Cq>>,
    srqs: Vec<Option<crate::qp::srq::Srq>>,
    qps: crate::qp::table::QpTable,
    /// QPs with something to send, in turn ([`Device::poll_transmit`]).
    ready: VecDeque<u32>,
    /// When to look at which QP's timers (the deadlines themselves are the QPs').
    timers: TimerQueue,
    counters: Counters,
    events: VecDeque<AsyncEvent>,
    idents: Idents,
    /// The GID table's addresses (what a received frame's destination must be one of).
    local_ips: Vec<IpAddr>,
    /// The QP the last call was about (its state is in the cache: no prefetch).
    last_qp: u32,
}

impl Device {
    /// A device with no objects.
    pub fn new(cfg: DeviceConfig) -> Device {
        let rng = ChaCha8Rng::seed_from_u64(cfg.seed);
        let local_ips = cfg.gids.iter().map(|g| g.to_ip()).collect();
        Device {
            local_ips,
            cfg,
            rng,
            pds: Vec::new(),
            mrs: MrTable::default(),
            cqs: Vec::new(),
            srqs: Vec::new(),
            qps: Default::default(),
            ready: VecDeque::new(),
            timers: TimerQueue::default(),
            counters: Counters::default(),
            idents: Idents::default(),
            events: VecDeque::new(),
            last_qp: u32::MAX,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &DeviceConfig {
        &self.cfg
    }

    /// Counters since creation.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// The next asynchronous event, if any (`ibv_get_async_event`).
    pub fn poll_event(&mut self) -> Option<AsyncEvent> {
        self.events.pop_front()
    }

    /// A random 24-bit PSN from the device's seeded RNG (perftest uses `lrand48() & 0xffffff`).
    pub fn random_psn(&mut self) -> u32 {
        (self.rng.next_u64() & 0xff_ffff) as u32
    }

    /// Switch the receive fast path on or off ([`DeviceConfig::rx_fast_path`]), e.g. to hold
    /// it to the general path in a test.
    pub fn set_rx_fast_path(&mut self, on: bool) {
        self.cfg.rx_fast_path = on;
    }

    /// Switch the transmit fast path on or off ([`DeviceConfig::tx_fast_path`]).
    pub fn set_tx_fast_path(&mut self, on: bool) {
        self.cfg.tx_fast_path = on;
    }

    /// Limit how fast QP `qpn` sends requests, in bits per second of Ethernet frame (`None`:
    /// no limit): each request packet leaves `bits / rate` after the previous one (what
    /// `ibv_qp_attr.rate_limit` does on NICs with packet pacing; congestion control sets the
    /// same pacer). Of the responses, READ responses are paced (they are the data of a READ);
    /// ACKs are not.
    pub fn set_rate_limit(&mut self, qpn: u32, bits_per_sec: Option<u64>) -> Result<(), crate::VerbsError> {
        if bits_per_sec == Some(0) {
            return Err(crate::VerbsError::InvalidArgument("rate limit 0"));
        }
        let qp = self.qps.get_mut(qpn).ok_or(crate::VerbsError::NoSuchObject("QP"))?;
        qp.pacer.set_limit(bits_per_sec);
        Ok(())
    }

    /// Run `f` on QP `qpn` with the device's shared state, then queue the QP for transmission
    /// if it has something to send: the one place that lends a QP the device (`None`: no
    /// such QP).
    #[inline]
    fn with_qp<R>(&mut self, qpn: u32, now: Instant, f: impl FnOnce(&mut Qp, &mut Ctx<'_>) -> R) -> Option<R> {
        self.lend_qp(qpn, now, |qp, ctx, ready| {
            let r = f(qp, ctx);
            schedule::mark_ready(ready, qp);
            r
        })
    }

    /// [`Device::with_qp`] without the queuing: `f` gets the ready queue and decides
    /// (`poll_transmit` keeps a QP that could not send off the queue until something changes).
    #[inline]
    fn lend_qp<R>(
        &mut self,
        qpn: u32,
        now: Instant,
        f: impl FnOnce(&mut Qp, &mut Ctx<'_>, &mut VecDeque<u32>) -> R,
    ) -> Option<R> {
        let Device { cfg, qps, mrs, cqs, counters, events, idents, timers, ready, last_qp, srqs, .. } = self;
        let qp = qps.get_mut(qpn)?;
        // A QP other than the last one's state, all its cache lines at once (with many QPs it
        // is rarely cached).
        if *last_qp != qpn {
            uroce_wire::copy::prefetch_value(qp);
            *last_qp = qpn;
        }
        let mut ctx = Ctx { now, cfg, mrs, cqs, counters, events, idents, timers, srqs };
        Some(f(qp, &mut ctx, ready))
    }
}
