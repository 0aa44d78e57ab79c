//! `deadlock`: `k` switches in a ring, a host on each, every host writing to the host two
//! switches on, clockwise, on `qps` QPs. Each ring link carries two flows' worth of demand, its queue fills,
//! PFC pauses the switch before it — whose queue is waiting on the next one: the pauses close
//! a cycle (a cyclic buffer dependency) and the ring freezes, detected as every ring port
//! paused with no goodput for `detect_us`. With the PFC watchdog, a queue paused that long is
//! emptied and ignores PAUSE for a while: the ring recovers, at the cost of the frames dropped
//! (which Go-Back-N resends).

use super::*;
use crate::fabric::{FlowSpec, LinkSpec};
use crate::plot::{line_chart, Series};
use crate::switch::{PfcConfig, SwitchConfig, Watchdog};
use crate::topology::ring;
use uroce_transport::Instant;

const KEYS: [&str; 11] = [
    "k",
    "qps",
    "rate_gbps",
    "until_us",
    "seed",
    "msg_kb",
    "window",
    "sample_us",
    "detect_us",
    "wd_detect_us",
    "wd_restore_us",
];

/// Run it.
pub fn run(s: &Settings) -> Result<Report, SettingError> {
    s.only(&KEYS)?;
    let k = s.int("k", 4, 3, 64)? as usize;
    let qps = s.int("qps", 4, 1, 64)? as usize;
    let rate = s.num("rate_gbps", 100.0, 1.0, 1000.0)?;
    let until = s.int("until_us", 4000, 100, 10_000_000)?;
    let seed = s.int("seed", 1, 0, u64::MAX)?;
    let msg = s.int("msg_kb", 64, 1, 1024)? as usize * 1024;
    let window = s.int("window", 16, 1, 256)? as u32;
    let sample = s.int("sample_us", 10, 1, 100_000)?;
    let detect = s.int("detect_us", 200, 1, 10_000_000)?;
    let wd = Watchdog {
        detect: Duration::from_micros(s.int("wd_detect_us", 200, 1, 10_000_000)?),
        restore: Duration::from_micros(s.int("wd_restore_us", 400, 1, 10_000_000)?),
    };
    let mut t = Table::new(
        &format!("deadlock: {k} switches in a ring, host i writing to host i+2 on {qps} QPs at {rate} Gbit/s, PFC on, {until} µs"),
        &["watchdog", "deadlocked_at_us", "recovered_at_us", "goodput_gbps_last_quarter", "watchdog_fired", "frames_dropped", "retransmits", "timeouts"],
    );
    let mut r = Report::default();
    let mut lines = Vec::new();
    for watchdog in [None, Some(wd)] {
        let bps = (rate * 1e9) as u64;
        let link = LinkSpec::new(bps, Duration::from_micros(1));
        // XON well below XOFF (as many switches ship): an ingress stays paused while the
        // frames it holds for a paused egress are more than that.
        let pfc = PfcConfig { priorities: 1 << 3, xoff: 256 << 10, xon: 64 << 10, headroom: 256 << 10 };
        let sw = SwitchConfig { watchdog, red: None, pfc: Some(pfc), ..SwitchConfig::default() };
        // A 1 ms local ACK timeout: Go-Back-N resends what the watchdog dropped soon enough to see.
        let host = crate::fabric::HostConfig { timeout: 8, ..hosts(None, bps) };
        let topo = ring(seed, k, host, sw, link);
        let mut f = topo.fabric;
        for i in 0..k * qps {
            let src = i % k;
            f.add_flow(FlowSpec { src, dst: (src + 2) % k, bytes: None, start: Duration::ZERO, msg, window })
                .expect("a flow");
        }
        f.sample_every(Duration::from_micros(sample), &topo.watch);
        f.run_until(Instant::from_nanos(until * 1000));
        let hosts = f.host_totals();
        let sm = f.samples();
        // Frozen: `detect` in a row with every ring port paused and no goodput.
        let need = (detect / sample).max(1) as usize;
        let mut run_len = 0;
        let mut frozen_at = None;
        for x in sm {
            let stuck = x.ports.iter().all(|p| p.1) && x.flows.iter().all(|f| f.1 == 0.0);
            run_len = if stuck { run_len + 1 } else { 0 };
            if run_len == need && frozen_at.is_none() {
                frozen_at = Some(x.t.as_nanos() / 1000 - detect);
            }
        }
        let recovered = frozen_at.and_then(|at| {
            sm.iter()
                .find(|x| x.t.as_nanos() / 1000 > at + detect && x.flows.iter().any(|f| f.1 > 0.0))
                .map(|x| x.t.as_nanos() / 1000)
        });
        let last = &sm[sm.len() * 3 / 4..];
        let good =
            last.iter().map(|x| x.flows.iter().map(|f| f.1).sum::<f64>()).sum::<f64>() / last.len().max(1) as f64;
        let st = f.switch_totals();
        let mode = if watchdog.is_some() { "on" } else { "off" };
        t.row(vec![
            mode.into(),
            frozen_at.map_or("-".into(), |v| v.to_string()),
            recovered.map_or("-".into(), |v| v.to_string()),
            f1(good),
            st.watchdog_fired.to_string(),
            st.drop_watchdog.to_string(),
            hosts.retransmitted_pkts.to_string(),
            hosts.local_ack_timeout_err.to_string(),
        ]);
        r.csv.push((format!("deadlock_watchdog_{mode}.csv"), samples_csv(&f)));
        lines.push(Series {
            name: format!("watchdog {mode}: total goodput"),
            points: sm.iter().map(|x| (x.t.as_nanos() as f64 / 1e3, x.flows.iter().map(|f| f.1).sum())).collect(),
        });
    }
    let title = format!("deadlock: a ring of {k} switches under PFC, total goodput (100 µs windows)");
    let smooth: Vec<Series> = lines
        .into_iter()
        .map(|s| {
            let w = (100 / sample).max(1) as usize;
            let pts = s
                .points
                .chunks(w)
                .map(|c| (c[c.len() - 1].0, c.iter().map(|p| p.1).sum::<f64>() / c.len() as f64))
                .collect();
            Series { name: s.name, points: pts }
        })
        .collect();
    r.plots.push(("deadlock.svg".into(), line_chart(&title, "time (µs)", "Gbit/s", &smooth)));
    r.table("deadlock", t);
    Ok(r)
}
