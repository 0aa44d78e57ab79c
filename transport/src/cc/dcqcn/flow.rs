//! One saturated flow's reaction point, driven by CNPs at given times: what `uroce sim dcqcn`
//! prints, for people tuning DCQCN and for checking the model against the paper by hand.
//!
//! The flow sends `mtu`-byte packets back to back at its current rate (line rate while
//! unlimited): each packet leaves `mtu·8 / RC` after the previous one, and counts `mtu` bytes
//! toward the byte counter. Every RP event becomes a [`Row`] with the state right after it;
//! `alpha_timer` rows mark the end of each α period (K) while the limiter runs. Events at the
//! same instant come in the order: CNP, timers, α period, packet.

use super::{Dcqcn, Params, RpEvent, RpState};
use crate::time::Instant;
use core::fmt::Write as _;
use core::time::Duration;

/// One event and the state after it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Row {
    /// When, in ns.
    pub t: Instant,
    /// What.
    pub event: RpEvent,
    /// The state right after it.
    pub state: RpState,
}

impl Row {
    /// The CSV header.
    pub const HEADER: &'static str = "t_us,event,rc_gbps,rt_gbps,alpha";

    /// The CSV line (no newline): µs with ns precision, Gbit/s with 1 bit/s precision.
    pub fn csv(&self) -> String {
        let mut s = String::new();
        let ns = self.t.as_nanos();
        let _ = write!(
            s,
            "{}.{:03},{},{:.9},{:.9},{:.6}",
            ns / 1000,
            ns % 1000,
            self.event.name(),
            self.state.rc / 1e9,
            self.state.rt / 1e9,
            self.state.alpha
        );
        s
    }
}

/// Run the flow from 0 to `until`, with CNPs at `cnps` (any order), calling `row` for each
/// event. Returns the packets sent.
pub fn run(p: Params, mtu: usize, cnps: &[Instant], until: Instant, mut row: impl FnMut(Row)) -> u64 {
    let mut d = Dcqcn::new(p);
    let mut cnps = cnps.to_vec();
    cnps.sort();
    let mut cnps = cnps.into_iter().filter(|&c| c <= until).peekable();
    let bits = (mtu.max(1) as f64) * 8.0;
    let mut next_pkt = Instant::ZERO;
    let mut packets = 0u64;
    let mut obs = |t: Instant, event: RpEvent, state: RpState| row(Row { t, event, state });
    // The α period whose end was last reported (so each is reported once).
    let mut alpha_shown: Option<Instant> = None;
    loop {
        let cnp = cnps.peek().copied();
        let timer = d.next_timeout();
        let alpha = d.next_alpha_period(alpha_shown.unwrap_or(Instant::ZERO)).filter(|&a| Some(a) != alpha_shown);
        let t = [cnp, timer, alpha, Some(next_pkt)].into_iter().flatten().min().expect("a packet is always due");
        if t > until {
            return packets;
        }
        if cnp == Some(t) {
            cnps.next();
            d.on_cnp(t, &mut obs);
            alpha_shown = Some(t);
        } else if timer == Some(t) {
            d.on_timeout(t, &mut obs);
        } else if alpha == Some(t) {
            alpha_shown = Some(t);
            obs(t, RpEvent::AlphaTimer, d.state(t));
        } else {
            d.on_sent(t, mtu, &mut obs);
            packets += 1;
            let rate = d.rate().unwrap_or(p.line_rate as f64).max(1.0);
            next_pkt = t + Duration::from_nanos((bits * 1e9 / rate).round().max(1.0) as u64);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn us(v: u64) -> Instant {
        Instant::from_nanos(v * 1000)
    }

    #[test]
    fn paper_flow_rows_by_hand() {
        let mut rows = Vec::new();
        let p = Params::paper(40_000_000_000);
        // B = 10 MB never expires in 200 µs at ≤ 40 Gbit/s; T = K = 55 µs.
        let n = run(p, 1000, &[us(10)], us(200), |r| rows.push(r.csv()));
        let want = [
            "10.000,cnp,40.000000000,40.000000000,1.000000",
            "10.000,decrease,20.000000000,40.000000000,1.000000",
            "65.000,rate_timer,30.000000000,40.000000000,0.996094",
            "65.000,alpha_timer,30.000000000,40.000000000,0.996094",
            "120.000,rate_timer,35.000000000,40.000000000,0.992203",
            "120.000,alpha_timer,35.000000000,40.000000000,0.992203",
            "175.000,rate_timer,37.500000000,40.000000000,0.988327",
            "175.000,alpha_timer,37.500000000,40.000000000,0.988327",
        ];
        assert_eq!(rows, want);
        // 10 µs at 40 Gbit/s (200 ns a packet), then 190 µs at 20, 30, 35, 37.5.
        let want_pkts = 50 + (55_000 / 400 + 1) + (55_000 / 267 + 1) + 55_000 / 229 + 25_000 / 213;
        assert!((n as i64 - want_pkts as i64).abs() <= 3, "{n} packets, about {want_pkts}");
    }

    #[test]
    fn connectx_byte_counter_rows() {
        let mut rows = Vec::new();
        // B = 32,767 bytes: at 4096 bytes a packet, every eighth packet is a byte-counter event.
        run(Params::connectx(100_000_000_000), 4096, &[Instant::ZERO], us(20), |r| rows.push(r));
        let bc: Vec<&Row> = rows.iter().filter(|r| r.event == RpEvent::ByteCounter).collect();
        // 50.05 Gbit/s after the first cut (α = 1023/1024): 655 ns a packet, so the eighth
        // leaves at 4.585 µs and moves RC halfway to RT; the rate climbs and the events come
        // faster.
        assert_eq!(bc[0].csv(), "4.585,byte_counter,75.024414062,100.000000000,0.979654");
        assert_eq!(bc.len(), 6);
        assert_eq!(rows.iter().filter(|r| r.event == RpEvent::AlphaTimer).count(), 20, "K = 1 µs");
        for w in bc.windows(2) {
            assert!(w[1].state.rc > w[0].state.rc, "each increases the rate");
        }
    }
}
