//! The state machine against steps worked out by hand, and its invariants under random input.

use super::*;
use proptest::prelude::*;

const G40: u64 = 40_000_000_000;

fn us(v: u64) -> Instant {
    Instant::from_nanos(v * 1000)
}

/// Run `f` and collect the events it reports.
fn events(f: impl FnOnce(&mut dyn FnMut(Instant, RpEvent, RpState))) -> Vec<(u64, RpEvent, f64, f64)> {
    let mut v = Vec::new();
    f(&mut |t: Instant, e, s: RpState| v.push((t.as_nanos() / 1000, e, s.rc, s.rt)));
    v
}

#[test]
fn paper_profile_by_hand() {
    let p = Params::paper(G40);
    let mut d = Dcqcn::new(p);
    assert_eq!(d.rate(), None, "unlimited before any CNP");
    let ev = events(|o| d.on_cnp(us(0), &mut |t, e, s| o(t, e, s)));
    // α = 1: RC = 40·(1 − 1/2) = 20, RT = 40.
    assert_eq!(ev, vec![(0, RpEvent::Cnp, 40e9, 40e9), (0, RpEvent::Decrease, 20e9, 40e9)]);
    assert_eq!(d.state(us(0)).alpha, 1.0);
    assert_eq!(d.next_timeout(), Some(us(55)));
    // Five timer events of fast recovery (T = 55 µs, F = 5): halfway to 40 each time.
    let mut rc = Vec::new();
    for t in 1..=5 {
        d.on_timeout(us(55 * t), &mut |_, e, s| {
            assert_eq!(e, RpEvent::RateTimer);
            rc.push(s.rc);
        });
    }
    assert_eq!(rc, vec![30e9, 35e9, 37.5e9, 38.75e9, 39.375e9]);
    // The sixth is additive: RT + 40 Mb/s, capped at the 40 Gb/s line rate.
    d.on_timeout(us(330), &mut |_, _, _| {});
    assert_eq!(d.state(us(330)).rt, 40e9);
    assert_eq!(d.state(us(330)).rc, (39.375e9 + 40e9) / 2.0);
    // A CNP at 400 µs: α decayed over 7 whole periods of 55 µs; the cut uses it, then
    // α ← (1 − g)α + g; RT = RC (clamp_tgt_rate).
    let a = (255.0f64 / 256.0).powi(7);
    let before = d.state(us(400)).rc;
    assert_eq!(d.state(us(400)).alpha, a);
    d.on_cnp(us(400), &mut |_, _, _| {});
    let s = d.state(us(400));
    assert_eq!(s.rt, before);
    assert_eq!(s.rc, before * (1.0 - a / 2.0));
    assert_eq!(s.alpha, a * 255.0 / 256.0 + 1.0 / 256.0);
    assert_eq!(d.next_timeout(), Some(us(455)), "the timer restarts at the decrease");
}

#[test]
fn connectx_folds_cnps_inside_the_monitor_period() {
    let p = Params::connectx(G40);
    let mut d = Dcqcn::new(p);
    let g = 5.0 / 1024.0;
    d.on_cnp(us(0), &mut |_, _, _| {});
    let a0 = 1023.0 / 1024.0;
    let rc1 = 40e9 * (1.0 - a0 / 2.0);
    assert_eq!(d.state(us(0)).rc, rc1);
    // 1 µs later: inside the 4 µs monitor period, so only α moves (one decay period, then
    // the raise); the decrease comes at 4 µs with α as it is then (three more periods).
    let ev = events(|o| d.on_cnp(us(1), &mut |t, e, s| o(t, e, s)));
    assert_eq!(ev, vec![(1, RpEvent::Cnp, rc1, 40e9)]);
    assert_eq!(d.next_timeout(), Some(us(4)));
    let a1 = (1.0 - g) * ((1.0 - g) * a0) + g;
    assert_eq!(d.state(us(1)).alpha, a1);
    let ev = events(|o| d.on_timeout(us(4), &mut |t, e, s| o(t, e, s)));
    let a4 = a1 * (1.0f64 - g).powi(3);
    // No increase since the first decrease: RT stays at line rate.
    assert_eq!(ev, vec![(4, RpEvent::Decrease, rc1 * (1.0 - a4 / 2.0), 40e9)]);
    assert_eq!(d.next_timeout(), Some(us(304)), "T = 300 µs from the decrease");
}

#[test]
fn connectx_byte_counter_and_stages() {
    let p = Params::connectx(G40);
    let mut d = Dcqcn::new(p);
    d.on_cnp(us(0), &mut |_, _, _| {});
    let rc1 = d.state(us(0)).rc;
    // B = 32,767 bytes: the eighth 4 KiB packet expires it once. F = 1: fast recovery.
    let mut ev = Vec::new();
    for i in 0..8 {
        d.on_sent(us(i), 4096, &mut |t, e, s| ev.push((t, e, s.rc)));
    }
    assert_eq!(ev, vec![(us(7), RpEvent::ByteCounter, (rc1 + 40e9) / 2.0)]);
    // The next timer event (T = 300 µs): T 1, BC 1: still fast recovery.
    let rc2 = (rc1 + 40e9) / 2.0;
    d.on_timeout(us(300), &mut |_, _, _| {});
    assert_eq!(d.state(us(300)).rc, (rc2 + 40e9) / 2.0);
    assert_eq!(d.state(us(300)).rt, 40e9);
}

#[test]
fn recovers_to_line_rate_and_releases_the_limiter() {
    let mut d = Dcqcn::new(Params::connectx(G40));
    d.on_cnp(us(0), &mut |_, _, _| {});
    let mut t = us(0);
    while let Some(at) = d.next_timeout() {
        t = at;
        d.on_timeout(at, &mut |_, _, _| {});
        assert!(t < us(100_000), "released within 100 ms");
    }
    assert_eq!(d.rate(), None);
    assert!(!d.state(t).limited);
    // The next CNP is a first CNP again.
    d.on_cnp(t, &mut |_, _, _| {});
    assert_eq!(d.state(t).rc, 40e9 * (1.0 - 1023.0 / 2048.0));
}

#[test]
fn rate_to_set_on_first_cnp_and_the_trait() {
    let mut p = Params::connectx(G40);
    p.rate_to_set_on_first_cnp = 10_000;
    let mut d: Box<dyn crate::cc::CongestionControl> = super::super::Algorithm::Dcqcn(p).instantiate();
    assert_eq!(d.name(), "dcqcn");
    assert_eq!(d.rate(), None);
    d.on_cnp(us(0));
    assert_eq!(d.rate(), Some(10_000_000_000));
    d.on_sent(us(1), 100_000);
    assert!(d.rate().unwrap() > 10_000_000_000, "three byte-counter increases");
}

#[derive(Clone, Debug)]
enum Op {
    Cnp(u32),
    Send(u32, u16),
    Wait(u32),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0u32..20_000).prop_map(Op::Cnp),
        (0u32..5_000, 64u16..9000).prop_map(|(t, b)| Op::Send(t, b)),
        (0u32..2_000_000).prop_map(Op::Wait),
    ]
}

proptest! {
    /// Any sequence of CNPs, packets and waits (ns steps), either profile and random knobs:
    /// the rate stays within [min, line], α within [0, 1], no two decreases are closer than
    /// the monitor period, and every event comes in time order.
    #[test]
    fn invariants(ops in prop::collection::vec(op(), 1..400), paper in any::<bool>(),
                  monitor in 0u32..20, ai in 1u32..5000, thr in 1u32..8, byte in 0u32..100_000) {
        let mut p = if paper { Params::paper(G40) } else { Params::connectx(G40) };
        p.rate_reduce_monitor_period = monitor;
        p.rpg_ai_rate = ai;
        p.rpg_threshold = thr;
        p.rpg_byte_reset = byte;
        let mut d = Dcqcn::new(p);
        let mut now = Instant::ZERO;
        let mut last = Instant::ZERO;
        let mut last_dec: Option<Instant> = None;
        let mut check = |t: Instant, e: RpEvent, s: RpState| {
            assert!(t >= last, "events in order");
            last = t;
            assert!(s.rc >= p.min_rate() && s.rc <= 40e9, "rc {}", s.rc);
            assert!(s.rt >= p.min_rate() && s.rt <= 40e9, "rt {}", s.rt);
            assert!((0.0..=1.0).contains(&s.alpha), "alpha {}", s.alpha);
            if e == RpEvent::Decrease {
                if let Some(l) = last_dec {
                    assert!(t >= l + p.monitor_period(), "decreases {l:?} and {t:?}");
                }
                last_dec = Some(t);
            }
        };
        for o in ops {
            let dt = match o { Op::Cnp(t) | Op::Send(t, _) | Op::Wait(t) => t };
            let to = now + core::time::Duration::from_nanos(dt as u64);
            while let Some(at) = d.next_timeout().filter(|&a| a <= to) {
                d.on_timeout(at, &mut check);
            }
            now = to;
            match o {
                Op::Cnp(_) => d.on_cnp(now, &mut check),
                Op::Send(_, b) => d.on_sent(now, b as usize, &mut check),
                Op::Wait(_) => {}
            }
            if let Some(r) = d.rate() {
                prop_assert!(r >= p.min_rate() && r <= 40e9);
            }
        }
    }
}

/// A limiter whose increases can change nothing more — at a ceiling below line rate, or with
/// zero increase steps — catches up on a backlog of timer expiries in one step, to the state
/// walking them one by one reaches; a year's backlog is a handful of events, not billions
/// (the `cc_dcqcn` fuzz target found the engine walking them).
#[test]
fn a_long_stall_is_caught_up_at_once_as_if_walked() {
    for knobs in
        [&["rpg_max_rate=10000"][..], &["rpg_ai_rate=0", "rpg_hai_rate=0", "rate_to_set_on_first_cnp=1000"][..]]
    {
        let mut p = Params::paper(G40);
        for k in knobs {
            p.set_assignment(k).unwrap();
        }
        let mut walked = Dcqcn::new(p);
        walked.on_cnp(us(0), &mut |_, _, _| {});
        walked.on_cnp(us(1), &mut |_, _, _| {});
        let mut jumped = walked.clone();
        let end = us(20_000 * 55 + 17);
        while let Some(t) = walked.next_timeout().filter(|&t| t <= end) {
            walked.on_timeout(t, &mut |_, _, _| {});
        }
        jumped.on_timeout(end, &mut |_, _, _| {});
        assert_eq!(jumped.state(end), walked.state(end), "{knobs:?}");
        assert_eq!(jumped.next_timeout(), walked.next_timeout(), "{knobs:?}");
        assert!(jumped.state(end).limited, "{knobs:?}: the limiter stays");
        // a year later, still one step
        let year = Instant::from_nanos(365 * 24 * 3600 * 1_000_000_000);
        let mut walked_events = 0u64;
        jumped.on_timeout(year, &mut |_, _, _| walked_events += 1);
        assert!(jumped.next_timeout().unwrap() > year);
        assert!(walked_events < 2_000, "{knobs:?}: {walked_events} expiries walked");
    }
}
