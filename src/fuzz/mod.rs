//! `uroce fuzz`: a legitimate perftest connection to the target with hostile frames mixed in.
//! A [`FuzzTap`] between uroce's engine and the wire lets every frame of the flow through and,
//! after a seeded share of the requests of one QP, sends a [`mutate`]d copy of the request
//! just sent — addresses, QPN, PSN and keys are the live connection's, and the expected PSN
//! is the one the peer waits for, so mutations land in its window. Where both ends send (a
//! latency test, pingpong), uroce's ACKs to the peer's requester draw too, for the response
//! kinds (forged NAKs, RNR NAKs, ACKs of what was never sent, unsolicited READ and atomic
//! responses, duplicate-ACK floods). What the peer answers (NAKs by kind) is counted. The same
//! seed against the same flow makes the same frames.

pub mod mutate;

pub use mutate::{Kind, Rng};

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use uroce_io::capture::CaptureFile;
use uroce_io::tap::Tap;
use uroce_transport::Instant;
use uroce_wire::{Operation, Psn, Syndrome, Transport};

/// What to inject.
#[derive(Clone, Debug)]
pub struct FuzzConfig {
    /// Seed of every choice.
    pub seed: u64,
    /// On average one hostile frame after every `every` requests of the fuzzed QP.
    pub every: u32,
    /// The kinds drawn from (uniformly).
    pub kinds: Vec<Kind>,
    /// At most this many hostile frames (then the flow runs on clean).
    pub max: Option<u64>,
    /// The share of hostile frames aimed at exactly the PSN the peer expects (an invalid one
    /// ends the connection, as IBTA says); the others go just ahead of it (out of sequence)
    /// or just behind it (duplicates), where the peer must survive them and the flow goes on.
    pub in_window: f64,
    /// Send only the hostile frames with these ordinals (the others are drawn the same way
    /// and not sent): a minimised finding's replay.
    pub only: Option<std::collections::BTreeSet<u64>>,
}

/// One hostile frame sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Injected {
    /// Ordinal among the hostile frames drawn (0-based): what `--only` names.
    pub n: u64,
    /// When (the port's clock, ns).
    pub t_ns: u64,
    /// Its kind.
    pub kind: Kind,
    /// The PSN the mutation was aimed at (the peer's expected PSN, or near it).
    pub expected: Psn,
    /// Frame length.
    pub len: usize,
}

/// What the tap did and saw.
#[derive(Clone, Debug, Default)]
pub struct FuzzLog {
    /// Every hostile frame sent.
    pub injected: Vec<Injected>,
    /// Hostile frames drawn (sent or, outside [`FuzzConfig::only`], not).
    pub drawn: u64,
    /// Requests of the fuzzed QP that went through.
    pub requests: u64,
    /// uroce's ACKs to the fuzzed QP (its requester) that went through.
    pub acks: u64,
    /// The fuzzed QP (its destination QPN at the peer): the first one a request went to.
    pub target_qp: Option<u32>,
    /// Frames from the peer.
    pub peer_frames: u64,
    /// The peer's NAKs by kind.
    pub peer_naks: BTreeMap<String, u64>,
}

impl FuzzLog {
    /// Hostile frames per kind.
    pub fn by_kind(&self) -> BTreeMap<&'static str, u64> {
        let mut m = BTreeMap::new();
        for i in &self.injected {
            *m.entry(i.kind.name()).or_default() += 1;
        }
        m
    }

    /// One `uroce-fuzz:` summary line.
    pub fn summary(&self, seed: u64) -> String {
        let kinds: Vec<String> = self.by_kind().iter().map(|(k, v)| format!("{k}={v}")).collect();
        let naks: Vec<String> = self.peer_naks.iter().map(|(k, v)| format!("{k}={v}")).collect();
        format!(
            "uroce-fuzz: seed={seed} target_qp={} requests={} acks={} injected={} [{}] peer_frames={} peer_naks=[{}]",
            self.target_qp.map_or("-".to_string(), |q| format!("{q:#08x}")),
            self.requests,
            self.acks,
            self.injected.len(),
            kinds.join(" "),
            self.peer_frames,
            naks.join(" ")
        )
    }
}

/// Zeller's delta debugging (ddmin): a 1-minimal subset of `items` for which `reproduces`
/// holds (it must hold for `items`). Each call of `reproduces` is one replay.
pub fn ddmin(mut items: Vec<u64>, mut reproduces: impl FnMut(&[u64]) -> bool) -> Vec<u64> {
    let mut n = 2usize;
    while items.len() >= 2 {
        let size = items.len().div_ceil(n);
        let chunks: Vec<Vec<u64>> = items.chunks(size).map(<[u64]>::to_vec).collect();
        let mut next = None;
        for c in &chunks {
            if reproduces(c) {
                next = Some((c.clone(), 2));
                break;
            }
        }
        if next.is_none() && chunks.len() > 2 {
            for i in 0..chunks.len() {
                let rest: Vec<u64> =
                    chunks.iter().enumerate().filter(|(j, _)| *j != i).flat_map(|(_, c)| c.clone()).collect();
                if reproduces(&rest) {
                    next = Some((rest, (n - 1).max(2)));
                    break;
                }
            }
        }
        match next {
            Some((sub, k)) => {
                items = sub;
                n = k;
            }
            None if n >= items.len() => break,
            None => n = (2 * n).min(items.len()),
        }
    }
    items
}

/// The tap; see the module docs.
pub struct FuzzTap {
    cfg: FuzzConfig,
    rng: Rng,
    log: Arc<Mutex<FuzzLog>>,
    pcap: Option<CaptureFile>,
    target: Option<u32>,
    /// The highest request PSN passed: only first transmissions draw, so that a replay whose
    /// flow retransmits differently still draws the same frames for the same PSNs.
    highest: Option<Psn>,
    /// The same for uroce's ACKs to the target's requester.
    highest_ack: Option<Psn>,
    drawn: u64,
}

impl FuzzTap {
    /// A tap with `cfg`; every hostile frame also goes to `pcap` when given. The log it fills.
    pub fn new(cfg: FuzzConfig, pcap: Option<&Path>) -> anyhow::Result<(FuzzTap, Arc<Mutex<FuzzLog>>)> {
        anyhow::ensure!(cfg.every > 0 && !cfg.kinds.is_empty(), "fuzz: --every must be > 0 and some kind chosen");
        let log = Arc::new(Mutex::new(FuzzLog::default()));
        let pcap = pcap.map(CaptureFile::create).transpose()?;
        let tap = FuzzTap {
            rng: Rng::new(cfg.seed),
            cfg,
            log: log.clone(),
            pcap,
            target: None,
            highest: None,
            highest_ack: None,
            drawn: 0,
        };
        Ok((tap, log))
    }
}

impl FuzzTap {
    /// Draw whether to inject after this frame, and of which kind (from `kinds`); `None`: not.
    fn draw(&mut self, kinds: &[Kind]) -> Option<Kind> {
        if kinds.is_empty()
            || self.cfg.max.is_some_and(|m| self.drawn >= m)
            || self.rng.below(u64::from(self.cfg.every)) != 0
        {
            return None;
        }
        Some(self.rng.pick(kinds))
    }

    /// Number the hostile frame drawn; send it (`copies` times) unless `--only` leaves it out.
    fn inject(&mut self, now: Instant, f: &[u8], copies: u32, kind: Kind, expected: Psn, wire: &mut dyn FnMut(&[u8])) {
        let n = self.drawn;
        self.drawn += 1;
        let Ok(mut log) = self.log.lock() else { return };
        log.drawn = self.drawn;
        if self.cfg.only.as_ref().is_some_and(|o| !o.contains(&n)) {
            return;
        }
        for _ in 0..copies {
            wire(f);
        }
        if let Some(pc) = self.pcap.as_mut() {
            let _ = pc.write(std::time::Duration::from_nanos(now.as_nanos()), f);
        }
        log.injected.push(Injected { n, t_ns: now.as_nanos(), kind, expected, len: f.len() });
    }
}

impl Tap for FuzzTap {
    fn on_tx(&mut self, now: Instant, frame: &[u8], wire: &mut dyn FnMut(&[u8])) {
        let parsed = uroce_wire::parse_frame(frame).ok().and_then(|p| Some((p.roce.bth, p.roce.bth.opcode.info()?)));
        let Some((bth, info)) = parsed.filter(|(_, i)| i.transport == Transport::Rc) else {
            wire(frame);
            return;
        };
        let qp = bth.dest_qp.value();
        if info.operation == Operation::Acknowledge {
            // uroce's responder acknowledging the target's requester (a latency test or
            // pingpong, where both ends send): the response kinds aim there, ahead of the real
            // ACK (so a forged NAK or RNR NAK meets the request still outstanding), a flood's
            // copies after it
            let fresh = self.target == Some(qp) && self.highest_ack.is_none_or(|h| bth.psn.after(h));
            let kinds: Vec<Kind> = self.cfg.kinds.iter().copied().filter(|k| k.on_response()).collect();
            let forged = fresh.then(|| self.draw(&kinds)).flatten().and_then(|kind| {
                mutate::mutate_response(frame, kind, &mut self.rng).map(|(f, copies)| (kind, f, copies))
            });
            if fresh {
                self.highest_ack = Some(bth.psn);
                if let Ok(mut log) = self.log.lock() {
                    log.acks += 1;
                }
            }
            match forged {
                Some((Kind::AckFlood, f, copies)) => {
                    wire(frame);
                    self.inject(now, &f, copies, Kind::AckFlood, bth.psn, wire);
                }
                Some((kind, f, copies)) => {
                    self.inject(now, &f, copies, kind, bth.psn, wire);
                    wire(frame);
                }
                None => wire(frame),
            }
            return;
        }
        wire(frame);
        if !info.is_request() {
            return;
        }
        if *self.target.get_or_insert(qp) != qp {
            return;
        }
        if self.highest.is_some_and(|h| !bth.psn.after(h)) {
            return;
        }
        self.highest = Some(bth.psn);
        if let Ok(mut log) = self.log.lock() {
            log.target_qp = self.target;
            log.requests += 1;
        }
        let kinds: Vec<Kind> = self.cfg.kinds.iter().copied().filter(|k| !k.on_response()).collect();
        let Some(kind) = self.draw(&kinds) else { return };
        // the PSN after this request: a READ takes one per response packet, unknown here, so
        // its next request's PSN is as good a guess as any; the others take one
        let next = bth.psn.add(1);
        let expected = if self.rng.chance(self.cfg.in_window) {
            next
        } else if self.rng.below(2) == 0 {
            next.add(1 + self.rng.below(64) as u32)
        } else {
            next.sub(1 + self.rng.below(64) as u32)
        };
        let Some(f) = mutate::mutate(frame, expected, kind, &mut self.rng) else { return };
        self.inject(now, &f, 1, kind, expected, wire);
    }

    fn on_rx(&mut self, _now: Instant, frame: &[u8], engine: &mut dyn FnMut(&[u8])) {
        engine(frame);
        let Ok(p) = uroce_wire::parse_frame(frame) else { return };
        let Ok(mut log) = self.log.lock() else { return };
        log.peer_frames += 1;
        let op = p.roce.bth.opcode.info().map(|i| i.operation);
        if let (Some(Operation::Acknowledge), Some(a)) = (op, p.roce.ext.aeth) {
            let k = match a.syndrome {
                Syndrome::Ack(_) => return,
                Syndrome::RnrNak(_) => "rnr".to_string(),
                Syndrome::Nak(c) => format!("{c:?}"),
                Syndrome::Reserved(v) => format!("reserved_{v:#x}"),
            };
            *log.peer_naks.entry(k).or_default() += 1;
        }
    }
}

impl Drop for FuzzTap {
    fn drop(&mut self) {
        if let Some(p) = self.pcap.as_mut() {
            let _ = p.flush();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::ddmin;

    #[test]
    fn ddmin_finds_the_frames_that_matter() {
        let all: Vec<u64> = (0..40).collect();
        let mut calls = 0;
        // the finding needs frames 7 and 31 together
        let m = ddmin(all.clone(), |s| {
            calls += 1;
            s.contains(&7) && s.contains(&31)
        });
        assert_eq!(m, vec![7, 31]);
        assert!(calls < 60, "{calls} replays");
        assert_eq!(ddmin(all.clone(), |s| s.contains(&12)), vec![12]);
        // a finding that needs everything stays whole
        assert_eq!(ddmin(vec![1, 2, 3], |s| s.len() == 3), vec![1, 2, 3]);
    }
}
