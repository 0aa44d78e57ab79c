//! 802.1Qbb priority flow control at a port: a PFC frame that reaches the AF_XDP socket (the
//! XDP program steers EtherType 0x8808 there) pauses the priorities it names for its quanta
//! (512 bit times each at the link's speed; 0 resumes at once). While a priority is paused,
//! the frames the engine builds for it are held, in order, and sent when it resumes; other
//! priorities (a CNP in priority 6 beside RoCE data in 3) keep going. The engine never sees
//! PFC frames: pausing is the link's business, below the transport.

use std::collections::VecDeque;
use uroce_transport::Instant;
use uroce_wire::pfc::{self, PfcRepr};

/// At most this many frames are held; then the port stops asking the engine for more (its
/// QPs wait, as behind a full transmit ring).
pub const MAX_HELD: usize = 512;

/// A port's pause state.
#[derive(Debug)]
pub struct Pause {
    /// Each priority may send again at this time.
    until: [Instant; 8],
    /// Frames built while their priority was paused.
    held: VecDeque<Vec<u8>>,
    /// The link's speed, for the quanta.
    rate_bps: u64,
    /// PFC frames received (pausing or resuming).
    pub frames: u64,
    /// Frames that had to wait.
    pub held_total: u64,
    /// MAC control frames that were not PFC (802.3x PAUSE, malformed), ignored.
    pub ignored: u64,
}

impl Pause {
    /// No priority paused, on a link of `rate_bps`.
    pub fn new(rate_bps: u64) -> Pause {
        Pause { until: [Instant::ZERO; 8], held: VecDeque::new(), rate_bps, frames: 0, held_total: 0, ignored: 0 }
    }

    /// A MAC control frame arrived at `now`.
    pub fn on_frame(&mut self, now: Instant, f: &[u8]) {
        let Ok(p) = PfcRepr::parse(f) else {
            self.ignored += 1;
            return;
        };
        self.frames += 1;
        for (prio, q) in p.quanta.iter().enumerate() {
            if let Some(q) = *q {
                self.until[prio] = now + core::time::Duration::from_nanos(pfc::pause_ns(q, self.rate_bps));
            }
        }
    }

    /// Whether priority `prio` is paused at `now`.
    pub fn paused(&self, now: Instant, prio: u8) -> bool {
        now < self.until[(prio & 7) as usize]
    }

    /// Whether `frame` must wait at `now`.
    pub fn holds(&self, now: Instant, frame: &[u8]) -> bool {
        self.paused(now, pfc::priority(frame))
    }

    /// Hold `frame` for later.
    pub fn hold(&mut self, frame: &[u8]) {
        self.held.push_back(frame.to_vec());
        self.held_total += 1;
    }

    /// Whether more frames may be held.
    pub fn has_room(&self) -> bool {
        self.held.len() < MAX_HELD
    }

    /// Frames waiting.
    pub fn held(&self) -> usize {
        self.held.len()
    }

    /// The oldest held frame that may go at `now` (frames of one priority keep their order).
    pub fn next_sendable(&self, now: Instant) -> Option<usize> {
        let mut blocked = 0u8;
        for (i, f) in self.held.iter().enumerate() {
            let p = pfc::priority(f);
            if blocked & (1 << p) == 0 && !self.paused(now, p) {
                return Some(i);
            }
            blocked |= 1 << p;
        }
        None
    }

    /// Take held frame `i`.
    pub fn take(&mut self, i: usize) -> Option<Vec<u8>> {
        self.held.remove(i)
    }

    /// Put a frame back at the front (the backend had no room for it).
    pub fn put_back(&mut self, i: usize, f: Vec<u8>) {
        self.held.insert(i.min(self.held.len()), f);
    }

    /// When a held frame's priority resumes, if frames are held.
    pub fn next_resume(&self, now: Instant) -> Option<Instant> {
        self.held.iter().map(|f| self.until[(pfc::priority(f) & 7) as usize]).filter(|&t| t > now).min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use uroce_wire::EthernetAddress;

    fn frame(prio: u8) -> Vec<u8> {
        let mut f = vec![0u8; 60];
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        f[15] = prio << 5;
        f
    }

    #[test]
    fn pauses_by_priority_for_its_quanta_and_resumes() {
        let mut p = Pause::new(10_000_000_000);
        let mut pfc = [0u8; 60];
        PfcRepr::one(3, 1000).emit(EthernetAddress([2, 0, 0, 0, 0, 1]), &mut pfc).unwrap();
        let t0 = Instant::from_nanos(1_000);
        p.on_frame(t0, &pfc);
        // 1000 quanta · 512 bits at 10 Gbit/s: 51.2 µs.
        assert!(p.paused(Instant::from_nanos(52_199), 3));
        assert!(!p.paused(Instant::from_nanos(52_200), 3));
        assert!(!p.paused(t0, 6), "other priorities run");
        assert!(p.holds(t0, &frame(3)) && !p.holds(t0, &frame(6)));
        p.hold(&frame(3));
        p.hold(&frame(6));
        assert_eq!(p.next_sendable(t0), Some(1), "the CNP's priority passes the held data");
        assert_eq!(p.next_resume(t0), Some(Instant::from_nanos(52_200)));
        PfcRepr::one(3, 0).emit(EthernetAddress([2, 0, 0, 0, 0, 1]), &mut pfc).unwrap();
        p.on_frame(Instant::from_nanos(2_000), &pfc);
        assert_eq!(p.next_sendable(Instant::from_nanos(2_000)), Some(0), "resumed");
        p.on_frame(t0, &[0u8; 20]);
        assert_eq!((p.frames, p.ignored, p.held_total), (2, 1, 2));
    }
}
