//! A shared-buffer switch: per-port, per-priority egress queues, WRED/ECN marking at egress,
//! PFC with XOFF/XON thresholds and headroom, and a PFC watchdog.
//!
//! The model knows nothing of time passing or links: the fabric (or `uroce switch`, for real
//! frames) hands it frames with [`Switch::ingress`], asks for the next frame a port may send
//! with [`Switch::dequeue`], and carries out the [`Action`]s it returns (PAUSE frames to send,
//! ports to wake).
//!
//! * **Buffer**: one shared pool; a frame that does not fit is dropped (without PFC), or held
//!   in its ingress port's headroom (with PFC) while XOFF takes effect upstream.
//! * **PFC** (IEEE 802.1Qbb), per ingress port and priority: once the bytes held that came in
//!   on it pass `xoff`, it sends PAUSE upstream (refreshed while they stay above `xon`); once
//!   they fall to `xon`, a zero-time PAUSE resumes it. Frames beyond `xoff + headroom` are
//!   dropped (headroom too small for the link's round trip).
//! * **WRED/ECN** at egress on the queue's length in bytes at departure: `p = 0` up to
//!   `kmin`, rising linearly to `pmax` at `kmax`, 1 above (SIGCOMM 2015 §3.1, the CP);
//!   ECN-capable frames are marked CE, others pass (marking never drops).
//! * **Watchdog**: a queue that stays paused with frames waiting longer than `detect` is
//!   declared stuck: its backlog is dropped and it ignores PAUSE for `restore` (what switch
//!   vendors ship against PFC storms and deadlocks).

use crate::pfc;
use core::time::Duration;
use std::collections::VecDeque;
use uroce_transport::Instant;

/// WRED/ECN marking thresholds (bytes of the egress queue).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Red {
    /// Below this, no marks.
    pub kmin: u64,
    /// At this, marks with probability `pmax`; above, every ECN-capable frame.
    pub kmax: u64,
    /// The marking probability at `kmax`.
    pub pmax: f64,
}

impl Red {
    /// The marking probability at queue length `q` bytes.
    pub fn probability(&self, q: u64) -> f64 {
        if q <= self.kmin {
            0.0
        } else if q > self.kmax {
            1.0
        } else {
            self.pmax * (q - self.kmin) as f64 / (self.kmax - self.kmin).max(1) as f64
        }
    }
}

/// PFC thresholds, per ingress port and priority (bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PfcConfig {
    /// Priorities PFC protects (bit p: priority p is lossless).
    pub priorities: u8,
    /// Send XOFF when the bytes held from one ingress port and priority reach this.
    pub xoff: u64,
    /// Send XON when they fall to this.
    pub xon: u64,
    /// What may still arrive after XOFF (the link's round trip of data) before frames drop.
    pub headroom: u64,
}

/// The PFC watchdog.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Watchdog {
    /// A queue paused with frames waiting this long is stuck.
    pub detect: Duration,
    /// It then ignores PAUSE for this long.
    pub restore: Duration,
}

/// A switch's configuration.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SwitchConfig {
    /// The shared buffer, bytes.
    pub buffer: u64,
    /// ECN marking (`None`: never marks).
    pub red: Option<Red>,
    /// PFC (`None`: lossy, tail drop).
    pub pfc: Option<PfcConfig>,
    /// The PFC watchdog (`None`: none).
    pub watchdog: Option<Watchdog>,
}

impl Default for SwitchConfig {
    /// 12 MiB shared (a ToR's); ECN marking from 100 KB to 400 KB of queue with Pmax 0.2 (HPCC's
    /// 25 Gbit/s thresholds, protocol.md §4, so that marking acts well before PFC); PFC on
    /// priority 3 with XOFF at 512 KiB held per ingress port, XON at 384 KiB and 256 KiB of
    /// headroom (at 100 Gbit/s, 20 µs of data in flight after XOFF); no watchdog.
    fn default() -> Self {
        SwitchConfig {
            buffer: 12 << 20,
            red: Some(Red { kmin: 100_000, kmax: 400_000, pmax: 0.2 }),
            pfc: Some(PfcConfig { priorities: 1 << 3, xoff: 512 << 10, xon: 384 << 10, headroom: 256 << 10 }),
            watchdog: None,
        }
    }
}

/// What the switch asks its driver to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Send a PFC frame out of `port`: pause (`quanta > 0`) or resume priority `prio`.
    Pause {
        /// The port to send it on.
        port: u16,
        /// The priority.
        prio: u8,
        /// Pause time in quanta (0: resume).
        quanta: u16,
    },
    /// `port` has a frame to send.
    Kick(u16),
}

/// Why a frame was dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Drop {
    /// Lossy priority, buffer full.
    BufferFull,
    /// Lossless priority, past its ingress headroom.
    HeadroomExceeded,
    /// No route for the destination MAC.
    NoRoute,
    /// Dropped from a stuck queue by the watchdog.
    Watchdog,
}

/// Counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SwitchStats {
    /// Frames forwarded.
    pub forwarded: u64,
    /// Frames dropped: lossy buffer full.
    pub drop_buffer: u64,
    /// Frames dropped: headroom exceeded.
    pub drop_headroom: u64,
    /// Frames dropped: no route.
    pub drop_no_route: u64,
    /// Frames dropped by the watchdog.
    pub drop_watchdog: u64,
    /// Frames marked CE.
    pub ecn_marked: u64,
    /// PAUSE frames sent (XOFF and refreshes).
    pub pause_sent: u64,
    /// Resume (zero-time PAUSE) frames sent.
    pub resume_sent: u64,
    /// Times the watchdog declared a queue stuck.
    pub watchdog_fired: u64,
}

/// A frame held in the switch.
#[derive(Debug)]
struct Held {
    frame: Vec<u8>,
    in_port: u16,
}

#[derive(Debug, Default)]
struct PortState {
    queues: [VecDeque<Held>; 8],
    /// Bytes in each egress queue.
    qbytes: [u64; 8],
    /// Bytes held that came in on this port, per priority (PFC's accounting).
    ingress: [u64; 8],
    /// This port has told its upstream to pause, per priority.
    xoff: [bool; 8],
    /// The watchdog lets this egress queue ignore PAUSE until then.
    ignore_pause_until: [Instant; 8],
}

/// A switch.
#[derive(Debug)]
pub struct Switch {
    cfg: SwitchConfig,
    ports: Vec<PortState>,
    used: u64,
    stats: SwitchStats,
}

impl Switch {
    /// A switch with `ports` ports.
    pub fn new(cfg: SwitchConfig, ports: usize) -> Switch {
        Switch {
            cfg,
            ports: (0..ports).map(|_| PortState::default()).collect(),
            used: 0,
            stats: SwitchStats::default(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &SwitchConfig {
        &self.cfg
    }

    /// Counters.
    pub fn stats(&self) -> SwitchStats {
        self.stats
    }

    /// Bytes queued for `port` (all priorities).
    pub fn queue_bytes(&self, port: u16) -> u64 {
        self.ports.get(port as usize).map_or(0, |p| p.qbytes.iter().sum())
    }

    /// Bytes in the shared buffer.
    pub fn used(&self) -> u64 {
        self.used
    }

    /// Whether `port` has XOFF asserted toward its upstream for any priority.
    pub fn pausing_upstream(&self, port: u16) -> bool {
        self.ports.get(port as usize).is_some_and(|p| p.xoff.iter().any(|&x| x))
    }

    fn lossless(&self, prio: u8) -> Option<PfcConfig> {
        self.cfg.pfc.filter(|c| c.priorities & (1 << (prio & 7)) != 0)
    }

    /// A data frame of priority `prio` arrived on `in_port` for `out_port` (`None`: no
    /// route). Actions go to `act`.
    pub fn ingress(
        &mut self,
        in_port: u16,
        out_port: Option<u16>,
        prio: u8,
        frame: Vec<u8>,
        act: &mut Vec<Action>,
    ) -> Result<(), Drop> {
        let Some(out) = out_port.filter(|&o| (o as usize) < self.ports.len()) else {
            self.stats.drop_no_route += 1;
            return Err(Drop::NoRoute);
        };
        let p = (prio & 7) as usize;
        let len = frame.len() as u64;
        let i = in_port as usize;
        match self.lossless(prio) {
            Some(c) => {
                if self.ports[i].ingress[p] + len > c.xoff + c.headroom {
                    self.stats.drop_headroom += 1;
                    return Err(Drop::HeadroomExceeded);
                }
            }
            None => {
                if self.used + len > self.cfg.buffer {
                    self.stats.drop_buffer += 1;
                    return Err(Drop::BufferFull);
                }
            }
        }
        self.used += len;
        self.ports[i].ingress[p] += len;
        let o = &mut self.ports[out as usize];
        o.qbytes[p] += len;
        o.queues[p].push_back(Held { frame, in_port });
        act.push(Action::Kick(out));
        if let Some(c) = self.lossless(prio) {
            let st = &mut self.ports[i];
            if !st.xoff[p] && st.ingress[p] >= c.xoff {
                st.xoff[p] = true;
                self.stats.pause_sent += 1;
                act.push(Action::Pause { port: in_port, prio, quanta: pfc::MAX_QUANTA });
            }
        }
        Ok(())
    }

    /// While XOFF holds for (`port`, `prio`), the PAUSE frame that renews it (the driver calls
    /// this before the last one expires); `None` once resumed.
    pub fn refresh(&mut self, port: u16, prio: u8) -> Option<Action> {
        let st = self.ports.get(port as usize)?;
        st.xoff[(prio & 7) as usize].then(|| {
            self.stats.pause_sent += 1;
            Action::Pause { port, prio, quanta: pfc::MAX_QUANTA }
        })
    }

    /// Whether egress queue (`port`, `prio`) ignores PAUSE at `now` (the watchdog's doing).
    pub fn ignores_pause(&self, port: u16, prio: u8, now: Instant) -> bool {
        self.ports.get(port as usize).is_some_and(|p| now < p.ignore_pause_until[(prio & 7) as usize])
    }

    /// Priorities with frames waiting at `port`, as a bit mask.
    pub fn backlog(&self, port: u16) -> u8 {
        self.ports
            .get(port as usize)
            .map_or(0, |p| (0..8).filter(|&q| !p.queues[q].is_empty()).fold(0u8, |m, q| m | (1 << q)))
    }

    /// The next frame `port` sends: the highest priority with frames and not in `paused`
    /// (bit p: priority p is paused and not ignoring it). `chance(p)` decides ECN marks.
    pub fn dequeue(
        &mut self,
        port: u16,
        paused: u8,
        chance: &mut impl FnMut(f64) -> bool,
        act: &mut Vec<Action>,
    ) -> Option<Vec<u8>> {
        let st = self.ports.get_mut(port as usize)?;
        let p = (0..8usize).rev().find(|&q| paused & (1 << q) == 0 && !st.queues[q].is_empty())?;
        let q_len = st.qbytes[p];
        let Held { mut frame, in_port } = st.queues[p].pop_front()?;
        let len = frame.len() as u64;
        st.qbytes[p] -= len;
        self.release(in_port, p, len, act);
        if let Some(red) = self.cfg.red {
            if chance(red.probability(q_len)) && uroce_transport::sim::mark_ce(&mut frame) {
                self.stats.ecn_marked += 1;
            }
        }
        self.stats.forwarded += 1;
        Some(frame)
    }

    /// `len` bytes that came in on `in_port` at priority `p` left the buffer.
    fn release(&mut self, in_port: u16, p: usize, len: u64, act: &mut Vec<Action>) {
        self.used -= len;
        let st = &mut self.ports[in_port as usize];
        st.ingress[p] -= len;
        if let Some(c) = self.cfg.pfc.filter(|c| c.priorities & (1 << p) != 0) {
            if st.xoff[p] && st.ingress[p] <= c.xon {
                st.xoff[p] = false;
                self.stats.resume_sent += 1;
                act.push(Action::Pause { port: in_port, prio: p as u8, quanta: 0 });
            }
        }
    }

    /// The watchdog found egress queue (`port`, `prio`) paused with frames for `detect`: drop
    /// its backlog and let it ignore PAUSE until `until`. Returns the frames dropped.
    pub fn watchdog_fire(&mut self, port: u16, prio: u8, until: Instant, act: &mut Vec<Action>) -> u64 {
        let p = (prio & 7) as usize;
        let Some(st) = self.ports.get_mut(port as usize) else { return 0 };
        st.ignore_pause_until[p] = until;
        let q = core::mem::take(&mut st.queues[p]);
        st.qbytes[p] = 0;
        let n = q.len() as u64;
        for h in q {
            self.release(h.in_port, p, h.frame.len() as u64, act);
        }
        self.stats.watchdog_fired += 1;
        self.stats.drop_watchdog += n;
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(n: usize) -> Vec<u8> {
        vec![0u8; n]
    }

    #[test]
    fn red_probability() {
        let r = Red { kmin: 100, kmax: 300, pmax: 0.5 };
        assert_eq!(r.probability(100), 0.0);
        assert_eq!(r.probability(200), 0.25);
        assert_eq!(r.probability(300), 0.5);
        assert_eq!(r.probability(301), 1.0);
    }

    #[test]
    fn pfc_xoff_xon_and_headroom() {
        let cfg = SwitchConfig {
            buffer: 1 << 20,
            red: None,
            pfc: Some(PfcConfig { priorities: 1 << 3, xoff: 3000, xon: 1000, headroom: 2000 }),
            watchdog: None,
        };
        let mut s = Switch::new(cfg, 2);
        let mut act = Vec::new();
        s.ingress(0, Some(1), 3, frame(1000), &mut act).unwrap();
        s.ingress(0, Some(1), 3, frame(1000), &mut act).unwrap();
        assert!(!act.iter().any(|a| matches!(a, Action::Pause { .. })));
        s.ingress(0, Some(1), 3, frame(1000), &mut act).unwrap();
        assert_eq!(act.last(), Some(&Action::Pause { port: 0, prio: 3, quanta: 0xffff }), "XOFF at 3000");
        s.ingress(0, Some(1), 3, frame(1000), &mut act).unwrap();
        s.ingress(0, Some(1), 3, frame(1000), &mut act).unwrap();
        assert_eq!(s.ingress(0, Some(1), 3, frame(1000), &mut act), Err(Drop::HeadroomExceeded));
        assert_eq!(s.refresh(0, 3), Some(Action::Pause { port: 0, prio: 3, quanta: 0xffff }));
        act.clear();
        let mut never = |_| false;
        for _ in 0..3 {
            s.dequeue(1, 0, &mut never, &mut act).unwrap();
        }
        assert!(act.is_empty(), "2000 bytes held: above XON");
        s.dequeue(1, 0, &mut never, &mut act).unwrap();
        assert_eq!(act, vec![Action::Pause { port: 0, prio: 3, quanta: 0 }], "XON at 1000");
        assert_eq!(s.refresh(0, 3), None);
        // A lossy priority drops when the shared buffer is full.
        let mut s = Switch::new(SwitchConfig { buffer: 1500, pfc: None, ..cfg }, 2);
        s.ingress(0, Some(1), 0, frame(1000), &mut act).unwrap();
        assert_eq!(s.ingress(0, Some(1), 0, frame(1000), &mut act), Err(Drop::BufferFull));
        assert_eq!(s.ingress(0, None, 0, frame(10), &mut act), Err(Drop::NoRoute));
    }

    #[test]
    fn strict_priority_pause_mask_and_watchdog() {
        let mut s = Switch::new(SwitchConfig { red: None, ..SwitchConfig::default() }, 3);
        let mut act = Vec::new();
        s.ingress(0, Some(2), 3, frame(100), &mut act).unwrap();
        s.ingress(1, Some(2), 6, frame(60), &mut act).unwrap();
        let mut never = |_| false;
        assert_eq!(s.backlog(2), (1 << 3) | (1 << 6));
        assert_eq!(s.dequeue(2, 0, &mut never, &mut act).unwrap().len(), 60, "priority 6 first");
        assert_eq!(s.dequeue(2, 1 << 3, &mut never, &mut act), None, "3 is paused");
        let n = s.watchdog_fire(2, 3, Instant::from_nanos(5000), &mut act);
        assert_eq!((n, s.used(), s.queue_bytes(2)), (1, 0, 0));
        assert!(s.ignores_pause(2, 3, Instant::from_nanos(4999)));
        assert!(!s.ignores_pause(2, 3, Instant::from_nanos(5000)));
        assert_eq!(s.stats().drop_watchdog, 1);
    }

    #[test]
    fn marks_at_egress_by_queue_length() {
        let cfg =
            SwitchConfig { red: Some(Red { kmin: 0, kmax: 100, pmax: 1.0 }), pfc: None, ..SwitchConfig::default() };
        let mut s = Switch::new(cfg, 2);
        let mut act = Vec::new();
        let mut f = vec![0u8; 80];
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        f[14] = 0x45;
        f[15] = 0x02; // ECT(0)
        f[16..18].copy_from_slice(&66u16.to_be_bytes());
        s.ingress(0, Some(1), 0, f.clone(), &mut act).unwrap();
        let mut always = |p: f64| p > 0.0;
        let out = s.dequeue(1, 0, &mut always, &mut act).unwrap();
        assert_eq!(out[15] & 3, 3, "CE");
        assert_eq!(s.stats().ecn_marked, 1);
    }
}
