//! DCQCN's reaction point under arbitrary knobs (any value the NIC's ranges accept, from
//! either profile, at any line rate) and arbitrary event sequences — CNPs, packets of any
//! size, the clock jumping by anything from nanoseconds to seconds, timeouts on time and
//! spurious. After every event:
//! * nothing panics, and every figure is a finite number;
//! * the current rate stays between the floor and the ceiling (`min_rate` ..= `max_rate`),
//!   the target rate at or under the ceiling, α in 0 ..= 1;
//! * handling the timeouts due at a time settles (no timer stays due: a port would spin), and
//!   the pacer's rate is the state's.
#![no_main]

use libfuzzer_sys::fuzz_target;
use uroce_transport::cc::dcqcn::{Dcqcn, Params};
use uroce_transport::Instant;

fn u32_at(d: &[u8], i: usize) -> u32 {
    u32::from_le_bytes([0, 1, 2, 3].map(|k| d.get(i + k).copied().unwrap_or(0)))
}

fuzz_target!(|data: &[u8]| {
    let Some((&head, rest)) = data.split_first() else { return };
    // line rate 1 Mb/s .. ~4.3 Tb/s
    let line = 1_000_000u64.saturating_mul(1 + u64::from(u32_at(rest, 0)) % 4_300_000);
    let mut p = if head & 1 == 0 { Params::connectx(line) } else { Params::paper(line) };
    let mut chunks = rest.get(4..).unwrap_or(&[]).chunks(6);
    // up to 8 knob assignments; the ones out of range are refused, as the NIC refuses them
    for _ in 0..(head >> 1) % 9 {
        let Some(c) = chunks.next() else { break };
        let knob = Params::KNOBS[c[0] as usize % Params::KNOBS.len()];
        let v = match c.get(1).copied().unwrap_or(0) % 4 {
            0 => u32_at(c, 2) % 2,
            1 => u32_at(c, 2) % 1025,
            2 => u32_at(c, 2) % 100_001,
            _ => u32_at(c, 2),
        };
        let _ = p.set(knob, &v.to_string());
    }
    let mut rp = Dcqcn::new(p);
    let (lo, hi) = (p.min_rate(), p.max_rate());
    let mut now = 0u64;
    let mut obs = |_: Instant, _, _| {};
    for c in chunks.take(256) {
        let t = Instant::from_nanos(now);
        match c[0] % 5 {
            0 => rp.on_cnp(t, &mut obs),
            1 => rp.on_sent(t, 64 + u32_at(c, 1) as usize % 9000, &mut obs),
            2 => now = now.saturating_add(u64::from(u32_at(c, 1)) << (c.get(5).copied().unwrap_or(0) % 24)),
            3 => {
                // the timeout when it is due, or a spurious call
                if let Some(d) = rp.next_timeout() {
                    now = now.max(d.as_nanos());
                }
                rp.on_timeout(Instant::from_nanos(now), &mut obs);
            }
            _ => rp.on_timeout(t, &mut obs),
        }
        let t = Instant::from_nanos(now);
        let s = rp.state(t);
        assert!(s.rc.is_finite() && s.rt.is_finite() && s.alpha.is_finite(), "{s:?}");
        assert!(s.rc >= lo * (1.0 - 1e-9) && s.rc <= hi * (1.0 + 1e-9), "rate {} outside {lo}..={hi} ({p:?})", s.rc);
        assert!(s.rt <= hi * (1.0 + 1e-9), "target {} above {hi}", s.rt);
        assert!((0.0..=1.0).contains(&s.alpha), "alpha {}", s.alpha);
        assert_eq!(rp.rate(), s.limited.then_some(s.rc));
        // handling what is due at `now` settles: no timer stays due forever (a spinning port)
        let mut rounds = 0;
        while rp.next_timeout().is_some_and(|d| d.as_nanos() <= now) {
            rp.on_timeout(Instant::from_nanos(now), &mut obs);
            rounds += 1;
            assert!(rounds < 64, "a timer still due at {now} after {rounds} rounds");
        }
    }
});
