//! A deterministic simulated network for the engine: several [`Device`]s joined by a switch
//! whose links delay, reorder (jitter), drop, duplicate, corrupt (one flipped bit, which the
//! ICRC then catches) and ECN-mark frames, under a simulated clock and a seeded RNG.
//!
//! After quinn-proto's test `Pair` and smoltcp's `netsim`: [`Network::step`] drains every
//! device's output onto the wire, then advances the clock to the next arrival or timer and
//! delivers it. [`Network::run_until`] bounds the number of steps, so a livelock shows up as
//! a test failure instead of a hang. Frames can be tapped (e.g. into a pcap).

pub mod b2b;
pub mod many;
pub mod setup;
pub mod soak;

use crate::device::Device;
use crate::time::Instant;
use core::time::Duration;
use rand_chacha::ChaCha8Rng;
use rand_core::{Rng, SeedableRng};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use uroce_wire::EthernetAddress;

/// What the wire does to frames.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LinkConfig {
    /// One-way delay.
    pub delay: Duration,
    /// Extra random delay, uniform in `[0, jitter)`: reorders frames.
    pub jitter: Duration,
    /// Probability a frame is held back by an extra `reorder_delay` (so later frames pass it).
    pub reorder: f64,
    /// Extra delay of a reordered frame.
    pub reorder_delay: Duration,
    /// Probability a frame is lost.
    pub loss: f64,
    /// Probability a frame is delivered twice.
    pub dup: f64,
    /// Probability one bit of a frame is flipped.
    pub corrupt: f64,
    /// Probability an ECN-capable frame is marked CE.
    pub ce_mark: f64,
    /// Link rate in bits per second (0 = unlimited): frames queue behind each other.
    pub rate_bps: u64,
}

impl Default for LinkConfig {
    fn default() -> Self {
        LinkConfig {
            delay: Duration::from_micros(5),
            jitter: Duration::ZERO,
            reorder: 0.0,
            reorder_delay: Duration::from_micros(20),
            loss: 0.0,
            dup: 0.0,
            corrupt: 0.0,
            ce_mark: 0.0,
            rate_bps: 0,
        }
    }
}

/// Counts of what the wire did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WireStats {
    /// Frames put on the wire by devices.
    pub sent: u64,
    /// Frames delivered (duplicates included).
    pub delivered: u64,
    /// Frames lost.
    pub lost: u64,
    /// Extra copies delivered.
    pub duplicated: u64,
    /// Frames with a flipped bit.
    pub corrupted: u64,
    /// Frames marked CE.
    pub ce_marked: u64,
    /// Frames held back (reordered).
    pub reordered: u64,
    /// Frames to an unknown MAC.
    pub unroutable: u64,
}

/// A node of the network.
pub struct Node {
    /// The engine.
    pub dev: Device,
    /// Receive errors the engine reported (by kind), for tests.
    pub rx_drops: u64,
    link_free: Instant,
}

/// Sees every frame put on the wire.
pub type Tap = Box<dyn FnMut(Instant, &[u8])>;

/// A frame on the wire: (arrival, sequence number, destination node, bytes).
type InFlight = Reverse<(Instant, u64, usize, Vec<u8>)>;

/// The simulated network.
pub struct Network {
    now: Instant,
    nodes: Vec<Node>,
    wire: BinaryHeap<InFlight>,
    seq: u64,
    rng: ChaCha8Rng,
    /// The link model (shared by every link); may be changed at any time.
    pub link: LinkConfig,
    /// Nodes whose links are down (frames to and from them are lost).
    pub down: Vec<bool>,
    stats: WireStats,
    buf: Vec<u8>,
    tap: Option<Tap>,
}

impl Network {
    /// An empty network.
    pub fn new(seed: u64, link: LinkConfig) -> Network {
        Network {
            now: Instant::ZERO,
            nodes: Vec::new(),
            wire: BinaryHeap::new(),
            seq: 0,
            rng: ChaCha8Rng::seed_from_u64(seed ^ 0x5eed_0f51),
            link,
            down: Vec::new(),
            stats: WireStats::default(),
            buf: vec![0; 9216],
            tap: None,
        }
    }

    /// Add a device; returns its index.
    pub fn add(&mut self, dev: Device) -> usize {
        self.nodes.push(Node { dev, rx_drops: 0, link_free: Instant::ZERO });
        self.down.push(false);
        self.nodes.len() - 1
    }

    /// Node `i`'s device.
    pub fn dev(&mut self, i: usize) -> &mut Device {
        &mut self.nodes[i].dev
    }

    /// Take the devices out (e.g. to drive two connected devices back to back).
    pub fn into_devices(self) -> Vec<Device> {
        self.nodes.into_iter().map(|n| n.dev).collect()
    }

    /// Node `i`.
    pub fn node(&self, i: usize) -> &Node {
        &self.nodes[i]
    }

    /// The simulated time.
    pub fn now(&self) -> Instant {
        self.now
    }

    /// What the wire did so far.
    pub fn stats(&self) -> WireStats {
        self.stats
    }

    /// See every frame put on the wire (before loss or corruption).
    pub fn set_tap(&mut self, tap: impl FnMut(Instant, &[u8]) + 'static) {
        self.tap = Some(Box::new(tap));
    }

    fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && (self.rng.next_u64() as f64 / u64::MAX as f64) < p
    }

    fn route(&self, frame: &[u8]) -> Option<usize> {
        let dst = EthernetAddress(frame.get(..6)?.try_into().ok()?);
        self.nodes.iter().position(|n| n.dev.config().mac == dst)
    }

    /// Put everything every node wants to send on the wire.
    fn drain_outputs(&mut self) {
        for i in 0..self.nodes.len() {
            loop {
                let now = self.now;
                let Some(len) = self.nodes[i].dev.poll_transmit(now, &mut self.buf) else { break };
                self.stats.sent += 1;
                let frame = self.buf[..len].to_vec();
                if let Some(tap) = self.tap.as_mut() {
                    tap(now, &frame);
                }
                // Serialisation on a rate-limited link.
                let mut depart = now;
                let bits = (len as u64 + 24) * 8; // preamble, FCS, inter-frame gap
                if let Some(ns) = (bits * 1_000_000_000).checked_div(self.link.rate_bps) {
                    let n = &mut self.nodes[i];
                    depart = depart.max(n.link_free);
                    n.link_free = depart + Duration::from_nanos(ns);
                    depart = n.link_free;
                }
                self.transmit(i, depart, frame);
            }
        }
    }

    fn transmit(&mut self, from: usize, depart: Instant, mut frame: Vec<u8>) {
        let Some(to) = self.route(&frame) else {
            self.stats.unroutable += 1;
            return;
        };
        if self.down[from] || self.down[to] || self.chance(self.link.loss) {
            self.stats.lost += 1;
            return;
        }
        if self.chance(self.link.corrupt) {
            let bit = (self.rng.next_u64() % (frame.len() as u64 * 8)) as usize;
            frame[bit / 8] ^= 1 << (bit % 8);
            self.stats.corrupted += 1;
        }
        if self.chance(self.link.ce_mark) && mark_ce(&mut frame) {
            self.stats.ce_marked += 1;
        }
        let copies = if self.chance(self.link.dup) {
            self.stats.duplicated += 1;
            2
        } else {
            1
        };
        for c in 0..copies {
            let mut extra = if self.link.jitter.is_zero() {
                Duration::ZERO
            } else {
                Duration::from_nanos(self.rng.next_u64() % self.link.jitter.as_nanos() as u64)
            };
            if self.chance(self.link.reorder) {
                self.stats.reordered += 1;
                extra += self.link.reorder_delay;
            }
            let at = depart + self.link.delay + extra;
            self.seq += 1;
            let f = if c + 1 == copies { core::mem::take(&mut frame) } else { frame.clone() };
            self.wire.push(Reverse((at, self.seq, to, f)));
        }
    }

    /// One step: drain outputs, move the clock to the next event, deliver it. Returns false
    /// when nothing is left to happen (no frame in flight, no timer armed).
    pub fn step(&mut self) -> bool {
        self.drain_outputs();
        let next_frame = self.wire.peek().map(|Reverse(f)| f.0);
        let next_timer = self.nodes.iter_mut().filter_map(|n| n.dev.poll_timeout()).min();
        let next = match (next_frame, next_timer) {
            (Some(a), Some(b)) => a.min(b),
            (Some(a), None) => a,
            (None, Some(b)) => b,
            (None, None) => return false,
        };
        self.now = self.now.max(next);
        while let Some(Reverse(f)) = self.wire.peek() {
            if f.0 > self.now {
                break;
            }
            let Reverse((_, _, to, frame)) = self.wire.pop().expect("peeked");
            self.stats.delivered += 1;
            let now = self.now;
            if self.nodes[to].dev.handle_frame(now, &frame).is_err() {
                self.nodes[to].rx_drops += 1;
            }
        }
        let now = self.now;
        for n in &mut self.nodes {
            if n.dev.poll_timeout().is_some_and(|t| t <= now) {
                n.dev.handle_timeout(now);
            }
        }
        true
    }

    /// Let `d` pass: every event due by then happens, and the clock stands at `now + d` (a
    /// timer the network does not know of — an application's, the CM's — may be due then).
    pub fn advance(&mut self, d: core::time::Duration) {
        let until = self.now + d;
        loop {
            self.drain_outputs();
            let next_frame = self.wire.peek().map(|Reverse(f)| f.0);
            let next_timer = self.nodes.iter_mut().filter_map(|n| n.dev.poll_timeout()).min();
            if [next_frame, next_timer].into_iter().flatten().min().is_none_or(|t| t > until) || !self.step() {
                break;
            }
        }
        self.now = self.now.max(until);
    }

    /// Step until `done` holds (checked after every step) or the network goes idle or
    /// `max_steps` pass. Returns whether `done` held.
    pub fn run_until(&mut self, max_steps: u64, mut done: impl FnMut(&mut Network) -> bool) -> bool {
        for _ in 0..max_steps {
            if done(self) {
                return true;
            }
            if !self.step() {
                return done(self);
            }
        }
        done(self)
    }

    /// Step until nothing is left to happen, or `max_steps`. Returns true if it went idle.
    pub fn run_idle(&mut self, max_steps: u64) -> bool {
        for _ in 0..max_steps {
            if !self.step() {
                return true;
            }
        }
        false
    }
}

/// A CNP as ConnectX sends one (`uroce_wire::cnp`: DSCP 48, ECT(0), TTL 64, DF, source port
/// 0) from `src` to QP `dest_qp` at `dst`, IPv4: what a peer's notification point would send,
/// for tests and benchmarks that hand one to a device.
pub fn cnp_frame(
    (src_mac, src): (EthernetAddress, std::net::Ipv4Addr),
    (dst_mac, dst): (EthernetAddress, std::net::Ipv4Addr),
    dest_qp: u32,
) -> Vec<u8> {
    use uroce_wire::*;
    let ip = IpRepr::V4(Ipv4Repr {
        src_addr: src,
        dst_addr: dst,
        dscp: cnp::CNP_DSCP,
        ecn: Ecn::Ect0,
        ident: 0,
        dont_frag: true,
        ttl: 64,
        protocol: ipv4::PROTOCOL_UDP,
        payload_len: 0,
    });
    let frame = FrameRepr {
        eth: EthernetRepr { src_addr: src_mac, dst_addr: dst_mac, vlan: None, ethertype: EtherType::IPV4 },
        ip,
        udp: UdpRepr { src_port: 0, dst_port: ROCE_V2_PORT },
        roce: cnp::cnp(Qpn::new(dest_qp)),
    };
    let mut buf = vec![0u8; 128];
    let n = frame.emit(&mut buf, UdpChecksum::Zero, |_| {}).expect("a CNP fits 128 bytes");
    buf.truncate(n);
    buf
}

/// Mark an ECN-capable IPv4/IPv6 frame CE in place (fixing the IPv4 header checksum), as a
/// switch does. Returns false if the frame is not ECN-capable.
pub fn mark_ce(frame: &mut [u8]) -> bool {
    use uroce_wire::{Ecn, EtherType, EthernetFrame, Ipv4Packet, Ipv6Packet};
    let Ok(eth) = EthernetFrame::new_checked(&*frame) else { return false };
    let (l3, t) = (eth.header_len(), eth.ethertype());
    match t {
        EtherType::IPV4 => {
            let Ok(mut p) = Ipv4Packet::new_checked(&mut frame[l3..]) else { return false };
            if p.ecn() == Ecn::NotEct {
                return false;
            }
            p.set_ecn(Ecn::Ce);
            p.fill_checksum();
            true
        }
        EtherType::IPV6 => {
            let Ok(mut p) = Ipv6Packet::new_checked(&mut frame[l3..]) else { return false };
            if Ecn::from_bits(p.traffic_class()) == Ecn::NotEct {
                return false;
            }
            p.set_ecn(Ecn::Ce);
            true
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advance_moves_the_clock_past_an_idle_network() {
        let mut net = Network::new(1, LinkConfig::default());
        net.add(setup::device(1, 1));
        let t0 = net.now();
        net.advance(core::time::Duration::from_millis(5));
        assert_eq!(net.now(), t0 + core::time::Duration::from_millis(5));
        net.advance(core::time::Duration::ZERO);
        assert_eq!(net.now(), t0 + core::time::Duration::from_millis(5), "never backwards");
    }
}
