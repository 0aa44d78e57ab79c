//! `storm`: two leaves of two hosts under one spine; host 0 writes to host 2 (the victim
//! flow), host 1 to host 3. At `stall_us` host 3 stops draining and its NIC keeps its
//! upstream paused (a PFC storm). Host 3's leaf queue fills, pauses the spine, whose queue
//! toward that leaf (shared by both flows) fills and pauses the first leaf, which pauses both
//! senders: the victim stops though its own path is healthy. With the PFC watchdog, the queue
//! toward the stuck host is emptied and ignores its pauses: the storm stays at that port and
//! the victim runs on.

use super::*;
use crate::fabric::{FlowSpec, LinkSpec};
use crate::plot::{line_chart, Series};
use crate::switch::{SwitchConfig, Watchdog};
use crate::topology::{leaf_spine, LeafSpine};
use uroce_transport::Instant;

const KEYS: [&str; 9] =
    ["rate_gbps", "until_us", "stall_us", "seed", "msg_kb", "window", "sample_us", "wd_detect_us", "wd_restore_us"];

/// Run it.
pub fn run(s: &Settings) -> Result<Report, SettingError> {
    s.only(&KEYS)?;
    let rate = s.num("rate_gbps", 100.0, 1.0, 1000.0)?;
    let until = s.int("until_us", 4000, 100, 10_000_000)?;
    let stall = s.int("stall_us", 1000, 0, until)?;
    let seed = s.int("seed", 1, 0, u64::MAX)?;
    let msg = s.int("msg_kb", 64, 1, 1024)? as usize * 1024;
    let window = s.int("window", 16, 1, 256)? as u32;
    let sample = s.int("sample_us", 10, 1, 100_000)?;
    let wd = Watchdog {
        detect: Duration::from_micros(s.int("wd_detect_us", 200, 1, 10_000_000)?),
        restore: Duration::from_micros(s.int("wd_restore_us", 400, 1, 10_000_000)?),
    };
    let mut t = Table::new(
        &format!("storm: host 3 stops draining at {stall} µs; victim flow host 0 → host 2, {rate} Gbit/s, {until} µs"),
        &[
            "watchdog",
            "victim_before_gbps",
            "victim_after_gbps",
            "pauses_to_senders",
            "watchdog_fired",
            "frames_dropped",
        ],
    );
    let mut r = Report::default();
    let mut lines = Vec::new();
    for watchdog in [None, Some(wd)] {
        let bps = (rate * 1e9) as u64;
        let link = LinkSpec::new(bps, Duration::from_micros(1));
        let sw = SwitchConfig { watchdog, ..SwitchConfig::default() };
        let host = crate::fabric::HostConfig { timeout: 8, ..hosts(None, bps) };
        let topo = leaf_spine(seed, LeafSpine { leaves: 2, per_leaf: 2, spines: 1 }, host, sw, link, link);
        let mut f = topo.fabric;
        for (src, dst) in [(0, 2), (1, 3)] {
            f.add_flow(FlowSpec { src, dst, bytes: None, start: Duration::ZERO, msg, window }).expect("a flow");
        }
        f.stall_host(3, Duration::from_micros(stall));
        f.sample_every(Duration::from_micros(sample), &[topo.host_ports[3]]);
        f.run_until(Instant::from_nanos(until * 1000));
        let sm = f.samples();
        let mean = |a: u64, b: u64| {
            let v: Vec<f64> =
                sm.iter().filter(|x| (a..b).contains(&(x.t.as_nanos() / 1000))).map(|x| x.flows[0].1).collect();
            v.iter().sum::<f64>() / v.len().max(1) as f64
        };
        let before = mean(stall / 2, stall);
        let after = mean(stall + (until - stall) / 2, until + 1);
        let to_senders: u64 = (0..2).map(|h| f.port_stats(f.host_node(h), 0).pause_rx).sum();
        let st = f.switch_totals();
        let mode = if watchdog.is_some() { "on" } else { "off" };
        t.row(vec![
            mode.into(),
            f1(before),
            f1(after),
            to_senders.to_string(),
            st.watchdog_fired.to_string(),
            st.drop_watchdog.to_string(),
        ]);
        r.csv.push((format!("storm_watchdog_{mode}.csv"), samples_csv(&f)));
        let w = (100 / sample).max(1) as usize;
        let pts = sm.chunks(w).map(|c| {
            (c[c.len() - 1].t.as_nanos() as f64 / 1e3, c.iter().map(|x| x.flows[0].1).sum::<f64>() / c.len() as f64)
        });
        lines.push(Series { name: format!("victim, watchdog {mode}"), points: pts.collect() });
    }
    let title = format!("storm: the victim flow's goodput; host 3 stalls at {stall} µs (100 µs windows)");
    r.plots.push(("storm.svg".into(), line_chart(&title, "time (µs)", "Gbit/s", &lines)));
    r.table("storm", t);
    Ok(r)
}
