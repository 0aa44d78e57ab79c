//! A seeded fault injector at the I/O boundary, for tests and `uroce perf --inject SPEC`.
//!
//! # Contract
//!
//! * [`FaultConfig`] holds the probabilities (each 0..=1) of dropping, duplicating,
//!   reordering, corrupting and CE-marking a frame, a constant delay, the extra delay of a
//!   reordered frame, and the seed. It parses from and prints to one spec string:
//!   `drop=0.01,dup=0.01,reorder=0.02,delay=50us,reorder_delay=100us,corrupt=0.001,ce=0.05,seed=7`
//!   (keys in any order, each at most once, all optional; durations take `ns`, `us`, `ms` or
//!   `s`; `Display` prints the keys that differ from the defaults, in that order, and parses
//!   back to an equal config). Errors are a typed [`FaultSpecError`] that names the bad key.
//! * [`FaultInjector::process`] takes one frame and, in this order of decisions:
//!   drops it (`drop`); otherwise decides corruption (flips one uniformly chosen bit of the
//!   frame) and CE marking (ECN := 11 on ECN-capable IPv4/IPv6 frames, IPv4 header checksum
//!   fixed — [`uroce_transport::sim::mark_ce`]; the ICRC masks ECN, so the frame stays valid);
//!   then duplicates it (`dup`: a second, identical copy right after the first) and finally
//!   delivers it now, or holds it for `delay` (all frames) plus `reorder_delay` (frames chosen
//!   by `reorder`, so later frames pass them). Unmodified frames that are not held are
//!   delivered from the caller's buffer (no copy).
//! * Held frames are copied into an internal queue bounded at [`FaultInjector::QUEUE_LIMIT`]
//!   frames (beyond it a frame is dropped and counted in `overflow`); [`FaultInjector::poll`]
//!   releases every held frame whose time has come, in release-time order (ties in arrival
//!   order); [`FaultInjector::next_release`] says when the next one is due.
//! * Deterministic: the same config (seed) and the same sequence of calls give the same
//!   decisions and the same output. The generator is SplitMix64 (Vigna), whose quality is ample
//!   for fault decisions and which needs no dependency.
//! * Never panics, whatever the frame (empty frames can be dropped, duplicated or delayed but
//!   not corrupted or marked).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fmt;
use std::str::FromStr;
use std::time::{Duration, Instant};

/// What to do to frames.
#[derive(Clone, Debug, PartialEq)]
pub struct FaultConfig {
    /// Probability a frame is lost.
    pub drop: f64,
    /// Probability a frame is delivered twice.
    pub dup: f64,
    /// Probability a frame is held back by an extra `reorder_delay`.
    pub reorder: f64,
    /// Constant delay of every frame.
    pub delay: Duration,
    /// Extra delay of a reordered frame.
    pub reorder_delay: Duration,
    /// Probability one bit of a frame is flipped.
    pub corrupt: f64,
    /// Probability an ECN-capable frame is marked CE.
    pub ce_mark: f64,
    /// Seed of every decision.
    pub seed: u64,
}

impl Default for FaultConfig {
    fn default() -> Self {
        FaultConfig {
            drop: 0.0,
            dup: 0.0,
            reorder: 0.0,
            delay: Duration::ZERO,
            reorder_delay: FaultConfig::DEFAULT_REORDER_DELAY,
            corrupt: 0.0,
            ce_mark: 0.0,
            seed: 0,
        }
    }
}

impl FaultConfig {
    /// `reorder_delay` when the spec does not give one.
    pub const DEFAULT_REORDER_DELAY: Duration = Duration::from_micros(100);
}

/// Why a fault spec does not parse.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FaultSpecError {
    /// A `key=value` item with an unknown key.
    UnknownKey(String),
    /// An item without `=value`.
    MissingValue(String),
    /// The same key twice.
    DuplicateKey(String),
    /// A probability that is not a number in 0..=1.
    BadProbability {
        /// The key.
        key: String,
        /// The value as given.
        value: String,
    },
    /// A duration that is not `<number><ns|us|ms|s>`.
    BadDuration {
        /// The key.
        key: String,
        /// The value as given.
        value: String,
    },
    /// A seed that is not an unsigned 64-bit integer.
    BadSeed(String),
}

impl fmt::Display for FaultSpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FaultSpecError::UnknownKey(k) => {
                write!(f, "unknown fault `{k}` (known: drop, dup, reorder, delay, reorder_delay, corrupt, ce, seed)")
            }
            FaultSpecError::MissingValue(k) => write!(f, "fault `{k}` needs a value (`{k}=...`)"),
            FaultSpecError::DuplicateKey(k) => write!(f, "fault `{k}` given twice"),
            FaultSpecError::BadProbability { key, value } => {
                write!(f, "`{key}={value}`: expected a probability between 0 and 1")
            }
            FaultSpecError::BadDuration { key, value } => {
                write!(f, "`{key}={value}`: expected a duration like 50us (units ns, us, ms, s)")
            }
            FaultSpecError::BadSeed(v) => write!(f, "`seed={v}`: expected an unsigned 64-bit integer"),
        }
    }
}

impl std::error::Error for FaultSpecError {}

fn parse_prob(key: &str, v: &str) -> Result<f64, FaultSpecError> {
    match v.parse::<f64>() {
        Ok(p) if (0.0..=1.0).contains(&p) => Ok(p),
        _ => Err(FaultSpecError::BadProbability { key: key.to_string(), value: v.to_string() }),
    }
}

fn parse_duration(key: &str, v: &str) -> Result<Duration, FaultSpecError> {
    let bad = || FaultSpecError::BadDuration { key: key.to_string(), value: v.to_string() };
    let split = v.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
    let (num, unit) = v.split_at(split);
    let n: u64 = num.parse().map_err(|_| bad())?;
    let scale: u64 = match unit {
        "ns" => 1,
        "us" => 1_000,
        "ms" => 1_000_000,
        "s" => 1_000_000_000,
        _ => return Err(bad()),
    };
    n.checked_mul(scale).map(Duration::from_nanos).ok_or_else(bad)
}

/// A duration in the largest unit that represents it exactly.
struct Dur(Duration);

impl fmt::Display for Dur {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ns = self.0.as_nanos();
        for (scale, unit) in [(1_000_000_000u128, "s"), (1_000_000, "ms"), (1_000, "us")] {
            if ns != 0 && ns.is_multiple_of(scale) {
                return write!(f, "{}{unit}", ns / scale);
            }
        }
        write!(f, "{ns}ns")
    }
}

impl FromStr for FaultConfig {
    type Err = FaultSpecError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut c = FaultConfig::default();
        let mut seen: Vec<&str> = Vec::new();
        for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let (key, value) = match item.split_once('=') {
                Some((k, v)) => (k.trim(), v.trim()),
                None => {
                    return Err(match item {
                        "drop" | "dup" | "reorder" | "delay" | "reorder_delay" | "corrupt" | "ce" | "seed" => {
                            FaultSpecError::MissingValue(item.to_string())
                        }
                        _ => FaultSpecError::UnknownKey(item.to_string()),
                    })
                }
            };
            match key {
                "drop" => c.drop = parse_prob(key, value)?,
                "dup" => c.dup = parse_prob(key, value)?,
                "reorder" => c.reorder = parse_prob(key, value)?,
                "corrupt" => c.corrupt = parse_prob(key, value)?,
                "ce" => c.ce_mark = parse_prob(key, value)?,
                "delay" => c.delay = parse_duration(key, value)?,
                "reorder_delay" => c.reorder_delay = parse_duration(key, value)?,
                "seed" => c.seed = value.parse().map_err(|_| FaultSpecError::BadSeed(value.to_string()))?,
                _ => return Err(FaultSpecError::UnknownKey(key.to_string())),
            }
            if seen.contains(&key) {
                return Err(FaultSpecError::DuplicateKey(key.to_string()));
            }
            seen.push(key);
        }
        Ok(c)
    }
}

impl fmt::Display for FaultConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = FaultConfig::default();
        let mut items: Vec<String> = Vec::new();
        for (key, v, dv) in
            [("drop", self.drop, d.drop), ("dup", self.dup, d.dup), ("reorder", self.reorder, d.reorder)]
        {
            if v != dv {
                items.push(format!("{key}={v}"));
            }
        }
        if self.delay != d.delay {
            items.push(format!("delay={}", Dur(self.delay)));
        }
        if self.reorder_delay != d.reorder_delay {
            items.push(format!("reorder_delay={}", Dur(self.reorder_delay)));
        }
        for (key, v, dv) in [("corrupt", self.corrupt, d.corrupt), ("ce", self.ce_mark, d.ce_mark)] {
            if v != dv {
                items.push(format!("{key}={v}"));
            }
        }
        if self.seed != d.seed {
            items.push(format!("seed={}", self.seed));
        }
        if items.is_empty() {
            return f.write_str("none");
        }
        f.write_str(&items.join(","))
    }
}

/// What the injector did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FaultCounters {
    /// Frames offered to [`FaultInjector::process`].
    pub processed: u64,
    /// Frames handed on (duplicates included), now or later.
    pub delivered: u64,
    /// Frames dropped on purpose.
    pub dropped: u64,
    /// Extra copies made.
    pub duplicated: u64,
    /// Frames held back by `reorder_delay`.
    pub reordered: u64,
    /// Frames held for `delay`.
    pub delayed: u64,
    /// Frames with one bit flipped.
    pub corrupted: u64,
    /// Frames marked CE.
    pub ce_marked: u64,
    /// Frames picked for CE marking that were not ECN-capable (left alone).
    pub ce_not_ect: u64,
    /// Frames dropped because the hold queue was full.
    pub overflow: u64,
}

/// SplitMix64: one 64-bit state, a fixed increment and a mixing function.
#[derive(Clone, Debug)]
struct SplitMix64(u64);

impl SplitMix64 {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// True with probability `p` (no draw when `p` is 0, so an all-zero config consumes no
    /// randomness and adding one fault does not shift the others' decisions more than needed).
    fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && self.next_f64() < p
    }

    /// Uniform in 0..n (n > 0), by Lemire's multiply-shift (bias < n / 2^64).
    fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }
}

/// A held frame: (release time, arrival sequence) orders the queue.
type Held = Reverse<(Instant, u64, usize)>;

/// The injector.
#[derive(Debug)]
pub struct FaultInjector {
    cfg: FaultConfig,
    rng: SplitMix64,
    counters: FaultCounters,
    queue: BinaryHeap<Held>,
    /// Frame storage; `free` lists reusable buffers.
    store: Vec<Vec<u8>>,
    free: Vec<usize>,
    seq: u64,
    scratch: Vec<u8>,
}

impl FaultInjector {
    /// Most frames held at once.
    pub const QUEUE_LIMIT: usize = 4096;

    /// An injector with `cfg`.
    pub fn new(cfg: FaultConfig) -> FaultInjector {
        FaultInjector {
            rng: SplitMix64(cfg.seed),
            cfg,
            counters: FaultCounters::default(),
            queue: BinaryHeap::new(),
            store: Vec::new(),
            free: Vec::new(),
            seq: 0,
            scratch: Vec::new(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &FaultConfig {
        &self.cfg
    }

    /// Counters since creation.
    pub fn counters(&self) -> &FaultCounters {
        &self.counters
    }

    /// Frames currently held.
    pub fn held(&self) -> usize {
        self.queue.len()
    }

    /// Offer one frame received at `now`; `deliver` gets what passes now (held frames come
    /// out of [`FaultInjector::poll`]).
    pub fn process(&mut self, now: Instant, frame: &[u8], deliver: &mut dyn FnMut(&[u8])) {
        self.counters.processed += 1;
        if self.rng.chance(self.cfg.drop) {
            self.counters.dropped += 1;
            return;
        }
        let corrupt = self.rng.chance(self.cfg.corrupt) && !frame.is_empty();
        let ce = self.rng.chance(self.cfg.ce_mark);
        let dup = self.rng.chance(self.cfg.dup);
        let reorder = self.rng.chance(self.cfg.reorder);
        let mut modified = false;
        if corrupt || ce {
            self.scratch.clear();
            self.scratch.extend_from_slice(frame);
            if corrupt {
                let bit = self.rng.below(frame.len() as u64 * 8) as usize;
                self.scratch[bit / 8] ^= 1 << (bit % 8);
                self.counters.corrupted += 1;
                modified = true;
            }
            if ce {
                if uroce_transport::sim::mark_ce(&mut self.scratch) {
                    self.counters.ce_marked += 1;
                    modified = true;
                } else {
                    self.counters.ce_not_ect += 1;
                }
            }
        }
        let mut hold = Duration::ZERO;
        if !self.cfg.delay.is_zero() {
            hold += self.cfg.delay;
            self.counters.delayed += 1;
        }
        if reorder {
            hold += self.cfg.reorder_delay;
            self.counters.reordered += 1;
        }
        let copies = if dup { 2 } else { 1 };
        if dup {
            self.counters.duplicated += 1;
        }
        for _ in 0..copies {
            let bytes: &[u8] = if modified { &self.scratch } else { frame };
            if hold.is_zero() {
                self.counters.delivered += 1;
                deliver(bytes);
            } else if self.queue.len() >= Self::QUEUE_LIMIT {
                self.counters.overflow += 1;
            } else {
                let at = now.checked_add(hold).unwrap_or(now);
                let idx = match self.free.pop() {
                    Some(i) => i,
                    None => {
                        self.store.push(Vec::new());
                        self.store.len() - 1
                    }
                };
                let slot = &mut self.store[idx];
                slot.clear();
                slot.extend_from_slice(if modified { &self.scratch } else { frame });
                self.queue.push(Reverse((at, self.seq, idx)));
                self.seq += 1;
            }
        }
    }

    /// Release every held frame due at `now`, in release order. Returns how many.
    pub fn poll(&mut self, now: Instant, deliver: &mut dyn FnMut(&[u8])) -> usize {
        let mut n = 0;
        while let Some(Reverse((at, _, idx))) = self.queue.peek().copied() {
            if at > now {
                break;
            }
            self.queue.pop();
            if let Some(b) = self.store.get(idx) {
                deliver(b);
            }
            self.free.push(idx);
            self.counters.delivered += 1;
            n += 1;
        }
        n
    }

    /// When the next held frame is due.
    pub fn next_release(&self) -> Option<Instant> {
        self.queue.peek().map(|Reverse((at, _, _))| *at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use uroce_wire::*;

    fn roce_frame(ecn: Ecn, payload: usize, v6: bool) -> Vec<u8> {
        let ip = if v6 {
            IpRepr::V6(Ipv6Repr {
                src_addr: "fd00::1".parse().expect("addr"),
                dst_addr: "fd00::2".parse().expect("addr"),
                dscp: 26,
                ecn,
                flow_label: 0x12345,
                hop_limit: 64,
                next_header: 17,
                payload_len: 0,
            })
        } else {
            IpRepr::V4(Ipv4Repr {
                src_addr: "10.0.0.1".parse().expect("addr"),
                dst_addr: "10.0.0.2".parse().expect("addr"),
                dscp: 26,
                ecn,
                ident: 0,
                dont_frag: true,
                ttl: 64,
                protocol: 17,
                payload_len: 0,
            })
        };
        let repr = FrameRepr {
            eth: EthernetRepr {
                src_addr: EthernetAddress([2, 0, 0, 0, 0, 1]),
                dst_addr: EthernetAddress([2, 0, 0, 0, 0, 2]),
                vlan: None,
                ethertype: EtherType::IPV4,
            },
            ip,
            udp: UdpRepr { src_port: 0xc000, dst_port: ROCE_V2_PORT },
            roce: RoceRepr {
                bth: BthRepr {
                    opcode: Opcode::RC_SEND_ONLY,
                    solicited: false,
                    mig_req: false,
                    pad_count: packet::pad_for(payload),
                    pkey: 0xffff,
                    fecn: false,
                    becn: false,
                    dest_qp: Qpn::new(0x11),
                    ack_req: true,
                    psn: Psn::new(5),
                },
                ext: ExtHeaders::default(),
                payload_len: payload,
            },
        };
        let mut buf = vec![0u8; repr.buffer_len()];
        let n = repr
            .emit(&mut buf, UdpChecksum::Zero, |p| p.iter_mut().enumerate().for_each(|(i, b)| *b = i as u8))
            .expect("emit");
        buf.truncate(n);
        buf
    }

    fn run(cfg: FaultConfig, frames: usize) -> (Vec<Vec<u8>>, FaultCounters) {
        let mut inj = FaultInjector::new(cfg);
        let t0 = Instant::now();
        let mut out = Vec::new();
        for i in 0..frames {
            let now = t0 + Duration::from_micros(i as u64);
            let f = (i as u32).to_be_bytes();
            inj.poll(now, &mut |g| out.push(g.to_vec()));
            inj.process(now, &f, &mut |g| out.push(g.to_vec()));
        }
        inj.poll(t0 + Duration::from_secs(3600), &mut |g| out.push(g.to_vec()));
        (out, *inj.counters())
    }

    fn within(count: u64, n: u64, p: f64) -> bool {
        // 5 standard deviations of a binomial count.
        let mean = n as f64 * p;
        let sd = (n as f64 * p * (1.0 - p)).sqrt();
        (count as f64 - mean).abs() <= 5.0 * sd + 1.0
    }

    #[test]
    fn rates_match_the_probabilities() {
        let cfg: FaultConfig = "drop=0.05,dup=0.03,reorder=0.02,corrupt=0.01,seed=42".parse().expect("spec");
        let n = 100_000u64;
        let (out, c) = run(cfg, n as usize);
        assert_eq!(c.processed, n);
        assert!(within(c.dropped, n, 0.05), "dropped {}", c.dropped);
        let kept = n - c.dropped;
        assert!(within(c.duplicated, kept, 0.03), "duplicated {}", c.duplicated);
        assert!(within(c.reordered, kept, 0.02), "reordered {}", c.reordered);
        assert!(within(c.corrupted, kept, 0.01), "corrupted {}", c.corrupted);
        assert_eq!(c.delivered, kept + c.duplicated);
        assert_eq!(out.len() as u64, c.delivered);
        assert_eq!(c.overflow, 0);
    }

    #[test]
    fn same_seed_same_output_other_seed_other_output() {
        let cfg: FaultConfig = "drop=0.1,dup=0.1,reorder=0.1,corrupt=0.1,delay=3us,seed=7".parse().expect("spec");
        let a = run(cfg.clone(), 10_000);
        let b = run(cfg.clone(), 10_000);
        assert_eq!(a, b);
        let c = run(FaultConfig { seed: 8, ..cfg }, 10_000);
        assert_ne!(a.0, c.0);
    }

    #[test]
    fn corrupt_flips_exactly_one_bit() {
        let frame = roce_frame(Ecn::NotEct, 100, false);
        let mut inj = FaultInjector::new(FaultConfig { corrupt: 1.0, seed: 3, ..Default::default() });
        let now = Instant::now();
        let mut positions = std::collections::HashSet::new();
        for _ in 0..1000 {
            let mut got = Vec::new();
            inj.process(now, &frame, &mut |g| got.push(g.to_vec()));
            assert_eq!(got.len(), 1);
            let diff: u32 = got[0].iter().zip(&frame).map(|(a, b)| (a ^ b).count_ones()).sum();
            assert_eq!(diff, 1);
            assert_eq!(got[0].len(), frame.len());
            let at = got[0].iter().zip(&frame).position(|(a, b)| a != b).expect("a differing byte");
            positions.insert(at);
            // Past the headers (where nothing is masked) the ICRC catches it.
            if at >= 14 + 20 + 8 + 12 {
                assert!(parse_frame_verified(&got[0]).is_err(), "flip in byte {at} went unnoticed");
            }
        }
        // Bits all over the frame, not one fixed place.
        assert!(positions.len() > 50, "{} distinct bytes", positions.len());
        // Empty frames are never corrupted (and do not panic).
        inj.process(now, &[], &mut |g| assert!(g.is_empty()));
    }

    #[test]
    fn ce_mark_sets_ecn_and_keeps_checksums_and_icrc() {
        for v6 in [false, true] {
            let frame = roce_frame(Ecn::Ect0, 64, v6);
            let mut inj = FaultInjector::new(FaultConfig { ce_mark: 1.0, ..Default::default() });
            let mut got = Vec::new();
            inj.process(Instant::now(), &frame, &mut |g| got.push(g.to_vec()));
            let p = parse_frame_verified(&got[0]).expect("still a valid frame with a valid ICRC");
            assert_eq!(p.ip.ecn(), Ecn::Ce, "v6 {v6}");
            assert_eq!(inj.counters().ce_marked, 1);
            // Not ECN-capable: untouched (and delivered without a copy's changes).
            let plain = roce_frame(Ecn::NotEct, 64, v6);
            let mut got = Vec::new();
            inj.process(Instant::now(), &plain, &mut |g| got.push(g.to_vec()));
            assert_eq!(got[0], plain);
            assert_eq!(inj.counters().ce_not_ect, 1);
        }
        // Junk: not a frame at all; no panic, untouched.
        let mut inj = FaultInjector::new(FaultConfig { ce_mark: 1.0, corrupt: 0.0, ..Default::default() });
        inj.process(Instant::now(), &[0x45; 7], &mut |g| assert_eq!(g, &[0x45; 7]));
    }

    #[test]
    fn reorder_lets_later_frames_pass() {
        let cfg = FaultConfig { reorder: 0.3, reorder_delay: Duration::from_micros(50), seed: 1, ..Default::default() };
        let (out, c) = run(cfg, 1000);
        let seq: Vec<u32> = out.iter().map(|f| u32::from_be_bytes([f[0], f[1], f[2], f[3]])).collect();
        assert_eq!(seq.len(), 1000);
        let inversions = seq.windows(2).filter(|w| w[0] > w[1]).count();
        assert!(inversions > 100, "{inversions} inversions, {} reordered", c.reordered);
        let mut sorted = seq.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..1000).collect::<Vec<_>>(), "every frame once");
    }

    #[test]
    fn delay_releases_at_the_right_time_in_order() {
        let d = Duration::from_micros(50);
        let mut inj = FaultInjector::new(FaultConfig { delay: d, ..Default::default() });
        let t0 = Instant::now();
        let mut out: Vec<u8> = Vec::new();
        for i in 0..10u8 {
            inj.process(t0 + Duration::from_micros(u64::from(i)), &[i], &mut |g| out.push(g[0]));
        }
        assert!(out.is_empty());
        assert_eq!(inj.next_release(), Some(t0 + d));
        assert_eq!(inj.poll(t0 + d - Duration::from_nanos(1), &mut |g| out.push(g[0])), 0);
        assert_eq!(inj.poll(t0 + d + Duration::from_micros(4), &mut |g| out.push(g[0])), 5);
        assert_eq!(out, [0, 1, 2, 3, 4]);
        assert_eq!(inj.next_release(), Some(t0 + d + Duration::from_micros(5)));
        inj.poll(t0 + Duration::from_secs(1), &mut |g| out.push(g[0]));
        assert_eq!(out, (0..10).collect::<Vec<u8>>());
        assert_eq!(inj.next_release(), None);
    }

    #[test]
    fn dup_delivers_two_identical_copies() {
        let mut inj = FaultInjector::new(FaultConfig { dup: 1.0, ..Default::default() });
        let mut out = Vec::new();
        inj.process(Instant::now(), b"abc", &mut |g| out.push(g.to_vec()));
        assert_eq!(out, vec![b"abc".to_vec(), b"abc".to_vec()]);
    }

    #[test]
    fn hold_queue_is_bounded() {
        let mut inj = FaultInjector::new(FaultConfig { delay: Duration::from_secs(1), ..Default::default() });
        let now = Instant::now();
        for _ in 0..FaultInjector::QUEUE_LIMIT + 10 {
            inj.process(now, b"x", &mut |_| panic!("nothing passes before the delay"));
        }
        assert_eq!(inj.held(), FaultInjector::QUEUE_LIMIT);
        assert_eq!(inj.counters().overflow, 10);
        let mut n = 0;
        inj.poll(now + Duration::from_secs(1), &mut |_| n += 1);
        assert_eq!(n, FaultInjector::QUEUE_LIMIT);
    }

    #[test]
    fn spec_round_trips() {
        let s = "drop=0.01,dup=0.01,reorder=0.02,delay=50us,corrupt=0.001,ce=0.05,seed=7";
        let c: FaultConfig = s.parse().expect("spec");
        assert_eq!(c.drop, 0.01);
        assert_eq!(c.delay, Duration::from_micros(50));
        assert_eq!(c.reorder_delay, FaultConfig::DEFAULT_REORDER_DELAY);
        assert_eq!(c.ce_mark, 0.05);
        assert_eq!(c.seed, 7);
        assert_eq!(c.to_string(), s);
        let all =
            "drop=0.5,dup=1,reorder=0.25,delay=1500ns,reorder_delay=2s,corrupt=0.125,ce=0.3,seed=18446744073709551615";
        let c: FaultConfig = all.parse().expect("spec");
        assert_eq!(c.to_string(), all);
        assert_eq!(c.to_string().parse::<FaultConfig>().expect("again"), c);
        // Order and spaces do not matter; the output is canonical.
        let c: FaultConfig = " seed=1 , delay=3ms ,drop=0".parse().expect("spec");
        assert_eq!(c.to_string(), "delay=3ms,seed=1");
        assert_eq!(FaultConfig::default().to_string(), "none");
        assert_eq!("".parse::<FaultConfig>().expect("empty"), FaultConfig::default());
    }

    #[test]
    fn spec_errors_name_the_key() {
        let e = |s: &str| s.parse::<FaultConfig>().expect_err(s);
        assert_eq!(e("drop=0.1,lose=0.2"), FaultSpecError::UnknownKey("lose".into()));
        assert_eq!(e("drop"), FaultSpecError::MissingValue("drop".into()));
        assert_eq!(e("drop=2"), FaultSpecError::BadProbability { key: "drop".into(), value: "2".into() });
        assert_eq!(e("ce=-0.1"), FaultSpecError::BadProbability { key: "ce".into(), value: "-0.1".into() });
        assert_eq!(e("dup=NaN"), FaultSpecError::BadProbability { key: "dup".into(), value: "NaN".into() });
        assert_eq!(e("delay=5"), FaultSpecError::BadDuration { key: "delay".into(), value: "5".into() });
        assert_eq!(e("delay=5min"), FaultSpecError::BadDuration { key: "delay".into(), value: "5min".into() });
        assert_eq!(
            e("reorder_delay=us"),
            FaultSpecError::BadDuration { key: "reorder_delay".into(), value: "us".into() }
        );
        assert_eq!(
            e("delay=99999999999999999999s"),
            FaultSpecError::BadDuration { key: "delay".into(), value: "99999999999999999999s".into() }
        );
        assert_eq!(e("seed=-1"), FaultSpecError::BadSeed("-1".into()));
        assert_eq!(e("drop=0.1,drop=0.2"), FaultSpecError::DuplicateKey("drop".into()));
        assert!(e("drop=2").to_string().contains("drop=2"));
        assert!(e("lose=1").to_string().contains("lose"));
    }
}
