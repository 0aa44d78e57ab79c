//! `uroce switch`: real frames through the simulator's switch model (`uroce_sim::switch`).
//!
//! Each port is an interface with an AF_XDP socket whose XDP program takes every frame (ARP
//! and TCP too: the hosts' out-of-band exchange crosses the switch). A frame's source MAC is
//! learned, its destination looked up (unknown, broadcast and multicast destinations are
//! flooded), its priority read from its DSCP or 802.1Q tag, and it goes into the model: the
//! shared buffer, the per-port, per-priority egress queues, WRED/ECN marking at egress, PFC
//! PAUSE frames toward the senders. Every port's egress is rate-limited (`--rate`), so one
//! port is a bottleneck on which queues build. The loop spins on all ports (it is a test
//! instrument, not a production switch).

use anyhow::{Context, Result};
use std::collections::HashMap;
use std::time::{Duration, Instant};
use uroce_io::xdp::{XdpBackend, XdpOptions};
use uroce_io::Backend;
use uroce_sim::switch::{Action, Switch, SwitchConfig};
use uroce_wire::pfc::{self, PfcRepr};
use uroce_wire::EthernetAddress;

/// What to run.
#[derive(Clone, Debug)]
pub struct SwitchRun {
    /// Interfaces, one per port.
    pub ports: Vec<String>,
    /// Each port's egress rate, bits per second.
    pub rate_bps: u64,
    /// The model's buffer, ECN and PFC.
    pub model: SwitchConfig,
    /// How long to run.
    pub duration: Duration,
    /// Seed of the ECN marking decisions.
    pub seed: u64,
}

/// Per-port counters.
#[derive(Clone, Copy, Debug, Default)]
pub struct PortCounts {
    /// Frames received.
    pub rx: u64,
    /// Frames sent (PFC frames included).
    pub tx: u64,
    /// PFC frames received (and honoured).
    pub pause_rx: u64,
}

/// The outcome: the model's counters and each port's.
#[derive(Clone, Debug)]
pub struct SwitchReport {
    /// The model's counters.
    pub stats: uroce_sim::switch::SwitchStats,
    /// Per port.
    pub ports: Vec<PortCounts>,
    /// Frames the AF_XDP transmit ring had no room for (lost, as on a full link).
    pub tx_full: u64,
}

impl SwitchReport {
    /// One `key=value` line.
    pub fn line(&self) -> String {
        let s = &self.stats;
        let mut out = format!(
            "uroce-switch: forwarded={} ecn_marked={} pause_sent={} resume_sent={} drop_buffer={} drop_headroom={} drop_no_route={} drop_watchdog={} tx_full={}",
            s.forwarded, s.ecn_marked, s.pause_sent, s.resume_sent, s.drop_buffer, s.drop_headroom, s.drop_no_route,
            s.drop_watchdog, self.tx_full
        );
        for (i, p) in self.ports.iter().enumerate() {
            out += &format!(" port{i}_rx={} port{i}_tx={} port{i}_pause_rx={}", p.rx, p.tx, p.pause_rx);
        }
        out
    }
}

/// Run the switch.
pub fn run(cfg: &SwitchRun) -> Result<SwitchReport> {
    let n = cfg.ports.len();
    let opts = XdpOptions { all_frames: true, ..XdpOptions::default() };
    let mut ports: Vec<XdpBackend> = Vec::with_capacity(n);
    let mut macs = Vec::with_capacity(n);
    for p in &cfg.ports {
        ports.push(XdpBackend::open(p, &opts).with_context(|| format!("AF_XDP on {p}"))?);
        macs.push(uroce_io::netif::Interface::by_name(p).with_context(|| format!("interface {p}"))?.mac);
    }
    let mut sw = Switch::new(cfg.model, n);
    let mut fdb: HashMap<[u8; 6], u16> = HashMap::new();
    let start = Instant::now();
    let mut free = vec![start; n];
    let mut paused = vec![[start; 8]; n];
    let mut refresh: Vec<(Instant, u16, u8)> = Vec::new();
    let mut act = Vec::new();
    let mut counts = vec![PortCounts::default(); n];
    let mut tx_full = 0u64;
    let mut rng = cfg.seed | 1;
    let mut rx: Vec<Vec<u8>> = Vec::new();
    while start.elapsed() < cfg.duration {
        let now = Instant::now();
        for i in 0..n {
            rx.clear();
            ports[i].recv(64, &mut |f: &[u8]| rx.push(f.to_vec()))?;
            counts[i].rx += rx.len() as u64;
            for f in rx.drain(..) {
                if pfc::is_mac_control(&f) {
                    if let Ok(p) = PfcRepr::parse(&f) {
                        counts[i].pause_rx += 1;
                        for (prio, q) in p.quanta.iter().enumerate() {
                            if let Some(q) = q {
                                paused[i][prio] = now + Duration::from_nanos(pfc::pause_ns(*q, cfg.rate_bps));
                            }
                        }
                    }
                    continue;
                }
                let (Some(dst), Some(src)) = (f.get(0..6), f.get(6..12)) else { continue };
                if src[0] & 1 == 0 {
                    fdb.insert(src.try_into().expect("6 bytes"), i as u16);
                }
                let prio = pfc::priority(&f);
                match fdb.get(dst).copied().filter(|_| dst[0] & 1 == 0) {
                    Some(o) if o as usize == i => {}
                    Some(o) => {
                        let _ = sw.ingress(i as u16, Some(o), prio, f, &mut act);
                    }
                    None => {
                        for o in (0..n).filter(|&o| o != i) {
                            let _ = sw.ingress(i as u16, Some(o as u16), prio, f.clone(), &mut act);
                        }
                    }
                }
            }
        }
        // Egress: each port as fast as its rate allows; PAUSE frames first, never held.
        for a in act.drain(..).chain(due(&mut refresh, now).into_iter().filter_map(|(p, prio)| sw.refresh(p, prio))) {
            if let Action::Pause { port, prio, quanta } = a {
                let mut f = [0u8; pfc::LEN];
                PfcRepr::one(prio, quanta).emit(EthernetAddress(macs[port as usize].0), &mut f).expect("60 bytes");
                if send(&mut ports[port as usize], &f) {
                    counts[port as usize].tx += 1;
                } else {
                    tx_full += 1;
                }
                if quanta > 0 {
                    let half = pfc::pause_ns(quanta, cfg.rate_bps) / 2;
                    refresh.push((now + Duration::from_nanos(half.max(1)), port, prio));
                }
            }
        }
        for i in 0..n {
            let mut mask = 0u8;
            for (p, &u) in paused[i].iter().enumerate() {
                if u > now {
                    mask |= 1 << p;
                }
            }
            while free[i] <= now {
                let mut chance = |p: f64| {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    let u = (rng >> 11) as f64 / (1u64 << 53) as f64;
                    p > 0.0 && u < p
                };
                let Some(f) = sw.dequeue(i as u16, mask, &mut chance, &mut act) else { break };
                if send(&mut ports[i], &f) {
                    counts[i].tx += 1;
                } else {
                    tx_full += 1;
                }
                let ser = ((f.len() as u64 + 24) * 8_000_000_000).div_ceil(cfg.rate_bps.max(1));
                free[i] = free[i].max(now) + Duration::from_nanos(ser);
            }
            ports[i].flush()?;
        }
    }
    Ok(SwitchReport { stats: sw.stats(), ports: counts, tx_full })
}

/// Copy `f` into the port's next transmit buffer; `false` when the ring is full.
fn send(port: &mut XdpBackend, f: &[u8]) -> bool {
    port.send_with(&mut |buf: &mut [u8]| {
        let b = buf.get_mut(..f.len())?;
        b.copy_from_slice(f);
        Some(f.len())
    })
    .unwrap_or(false)
}

/// Take the refreshes due at `now`.
fn due(refresh: &mut Vec<(Instant, u16, u8)>, now: Instant) -> Vec<(u16, u8)> {
    let (due, later): (Vec<_>, Vec<_>) = refresh.drain(..).partition(|r| r.0 <= now);
    *refresh = later;
    due.into_iter().map(|(_, p, prio)| (p, prio)).collect()
}
