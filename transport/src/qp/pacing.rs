//! Pacing: when a QP's next request packet may leave.
//!
//! A rate limit (`Device::set_rate_limit`, what `ibv_modify_qp`'s `rate_limit` does on NICs
//! with packet pacing, and what congestion control sets) spaces request packets so that each
//! leaves `bits / rate` after the previous one's departure: a token bucket with no burst. A
//! QP whose departure time lies ahead sends nothing; its [`crate::timer::Timer::Departure`]
//! timer wakes it then. The spacing is kept exact to the nanosecond over any number of packets
//! (the remainder of each division carries into the next).

use crate::time::Instant;

/// A QP's pacer.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Pacer {
    /// The application's limit (`Device::set_rate_limit`), bits per second; 0 = none.
    limit: u64,
    /// Congestion control's rate, bits per second; 0 = none.
    cc: u64,
    /// The rate enforced: the lower of the two; 0 = no limit.
    rate: u64,
    /// The earliest departure of the next packet.
    next: Instant,
    /// Remainder (in bit·ns units, below `rate`) of the spacing divisions so far.
    carry: u64,
    /// When the last packet's spacing started, and its bits: a new rate respaces it.
    last_start: Instant,
    last_bits: u64,
}

impl Pacer {
    /// Set the application's limit (bits per second, `None`: unlimited). The packet already
    /// scheduled keeps its departure time.
    pub fn set_limit(&mut self, bits_per_sec: Option<u64>) {
        self.limit = bits_per_sec.unwrap_or(0);
        self.update();
    }

    /// Set congestion control's rate (bits per second, `None`: unlimited).
    pub fn set_cc_rate(&mut self, bits_per_sec: Option<u64>) {
        self.cc = bits_per_sec.unwrap_or(0);
        self.update();
    }

    /// A new rate also respaces the packet already sent: the next leaves `bits / new rate`
    /// after the last one's start, as a token bucket refilled at the new rate would let it
    /// (so a QP cut to a crawl and then raised by congestion control does not sit out the
    /// crawl's gap).
    fn update(&mut self) {
        let r = match (self.limit, self.cc) {
            (0, c) => c,
            (l, 0) => l,
            (l, c) => l.min(c),
        };
        if r != self.rate {
            self.rate = r;
            self.carry = 0;
            self.next = match r {
                0 => self.last_start,
                r => self.last_start + core::time::Duration::from_nanos(spacing(self.last_bits, r).0),
            };
        }
    }

    /// The rate limit, if any.
    pub fn rate(&self) -> Option<u64> {
        (self.rate != 0).then_some(self.rate)
    }

    /// `Err(departure)` while the next packet must wait.
    #[inline]
    pub fn check(&self, now: Instant) -> Result<(), Instant> {
        if self.rate == 0 || now >= self.next {
            Ok(())
        } else {
            Err(self.next)
        }
    }

    /// A packet of `bytes` left at `now`: the next may leave `bytes·8 / rate` after this
    /// one's departure time (or after `now`, if the QP was idle past it: no burst credit).
    #[inline]
    pub fn on_sent(&mut self, now: Instant, bytes: usize) {
        if self.rate == 0 {
            return;
        }
        let start = self.next.max(now);
        let bits = bytes as u64 * 8;
        let num = bits as u128 * 1_000_000_000 + self.carry as u128;
        let ns = num / self.rate as u128;
        self.carry = (num % self.rate as u128) as u64;
        self.next = start + core::time::Duration::from_nanos(ns.min(u64::MAX as u128) as u64);
        (self.last_start, self.last_bits) = (start, bits);
    }
}

/// Nanoseconds `bits` take at `rate` bits/s, and the remainder.
fn spacing(bits: u64, rate: u64) -> (u64, u64) {
    let num = bits as u128 * 1_000_000_000;
    ((num / rate as u128).min(u64::MAX as u128) as u64, (num % rate as u128) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spacing_is_exact_over_many_packets() {
        // 1 Gbit/s, 1000-byte packets: 8 µs each; 3 Gbit/s: 8/3 µs, carried exactly.
        let mut p = Pacer::default();
        assert_eq!(p.check(Instant::ZERO), Ok(()));
        p.set_limit(Some(3_000_000_000));
        let mut now = Instant::ZERO;
        for _ in 0..3000 {
            assert_eq!(p.check(now), Ok(()));
            p.on_sent(now, 1000);
            now = p.check(now).unwrap_err();
        }
        assert_eq!(now.as_nanos(), 8_000_000, "3000 × 8000 bits at 3 Gbit/s");
    }

    #[test]
    fn an_idle_qp_gets_no_burst() {
        let mut p = Pacer::default();
        p.set_limit(Some(1_000_000_000));
        p.on_sent(Instant::ZERO, 125);
        assert_eq!(p.check(Instant::ZERO), Err(Instant::from_nanos(1000)));
        p.on_sent(Instant::from_nanos(50_000), 125);
        assert_eq!(p.check(Instant::from_nanos(50_000)), Err(Instant::from_nanos(51_000)));
        p.set_limit(None);
        assert_eq!(p.check(Instant::from_nanos(50_000)), Ok(()));
    }

    #[test]
    fn a_new_rate_respaces_the_packet_in_flight() {
        let mut p = Pacer::default();
        p.set_cc_rate(Some(1_000_000));
        p.on_sent(Instant::from_nanos(1000), 125);
        assert_eq!(p.check(Instant::from_nanos(1000)), Err(Instant::from_nanos(1_001_000)), "1000 bits at 1 Mbit/s");
        p.set_cc_rate(Some(1_000_000_000));
        assert_eq!(p.check(Instant::from_nanos(1000)), Err(Instant::from_nanos(2000)), "at 1 Gbit/s: 1 µs");
        p.set_cc_rate(None);
        assert_eq!(p.check(Instant::from_nanos(1000)), Ok(()));
    }

    #[test]
    fn the_lower_of_limit_and_congestion_control() {
        let mut p = Pacer::default();
        p.set_cc_rate(Some(2_000_000_000));
        assert_eq!(p.rate(), Some(2_000_000_000));
        p.set_limit(Some(1_000_000_000));
        assert_eq!(p.rate(), Some(1_000_000_000));
        p.set_cc_rate(Some(500_000_000));
        assert_eq!(p.rate(), Some(500_000_000));
        p.set_cc_rate(None);
        assert_eq!(p.rate(), Some(1_000_000_000));
        p.set_limit(None);
        assert_eq!(p.rate(), None);
    }
}
