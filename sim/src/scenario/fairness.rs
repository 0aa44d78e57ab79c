//! `fairness`: flows join one bottleneck (a dumbbell's middle link) at staggered times; after
//! each join, Jain's index of the active flows' goodput in the steady state, and how long the
//! flows took to get there (Jain ≥ 0.9 on goodput averaged over `smooth_us`, held to the next
//! join).

use super::*;
use crate::fabric::{FlowSpec, LinkSpec};
use crate::plot::{line_chart, Series};
use crate::switch::SwitchConfig;
use crate::topology::dumbbell;
use uroce_transport::Instant;

const KEYS: [&str; 9] =
    ["flows", "join_us", "rate_gbps", "profile", "seed", "msg_kb", "window", "sample_us", "smooth_us"];

/// Run it.
pub fn run(s: &Settings) -> Result<Report, SettingError> {
    s.only(&KEYS)?;
    let n = s.int("flows", 4, 1, 256)? as usize;
    let join = s.int("join_us", 2000, 10, 10_000_000)?;
    let rate = s.num("rate_gbps", 100.0, 1.0, 1000.0)?;
    let profile = s.choice("profile", "paper", &["paper", "connectx", "off"])?;
    let seed = s.int("seed", 1, 0, u64::MAX)?;
    let msg = s.int("msg_kb", 64, 1, 1024)? as usize * 1024;
    let window = s.int("window", 2, 1, 256)? as u32;
    let sample = s.int("sample_us", 10, 1, 100_000)?;
    let smooth = s.int("smooth_us", 200, 1, 10_000_000)?.max(sample);
    let bps = (rate * 1e9) as u64;
    let link = LinkSpec::new(bps, Duration::from_micros(1));
    let dcqcn = (profile != "off").then_some(profile);
    let topo = dumbbell(seed, n, hosts(dcqcn, bps), SwitchConfig::default(), link, link);
    let mut f = topo.fabric;
    for i in 0..n {
        let start = Duration::from_micros(join * i as u64);
        f.add_flow(FlowSpec { src: i, dst: n + i, bytes: None, start, msg, window }).expect("a flow");
    }
    let until = join * (n as u64 + 1);
    f.sample_every(Duration::from_micros(sample), &topo.watch[..1]);
    f.run_until(Instant::from_nanos(until * 1000));
    let samples = f.samples();
    // Goodput of each flow averaged over the `smooth` before each sample.
    let k = (smooth / sample).max(1) as usize;
    let smoothed: Vec<Vec<f64>> = (0..samples.len())
        .map(|j| {
            let lo = (j + 1).saturating_sub(k);
            (0..n).map(|i| samples[lo..=j].iter().map(|x| x.flows[i].1).sum::<f64>() / (j + 1 - lo) as f64).collect()
        })
        .collect();
    let t_us = |j: usize| samples[j].t.as_nanos() / 1000;
    let mut t = Table::new(
        &format!("fairness: {n} flows joining a {rate} Gbit/s bottleneck every {join} µs, DCQCN {profile}"),
        &["after_join", "active", "jain", "mean_gbps", "total_gbps", "converge_us"],
    );
    for phase in 0..n {
        let (start, end) = (join * phase as u64, join * (phase as u64 + 1));
        let idx: Vec<usize> = (0..samples.len()).filter(|&j| t_us(j) > start && t_us(j) <= end).collect();
        let active = phase + 1;
        // The steady state: the phase's second half.
        let steady: Vec<usize> = idx.iter().copied().filter(|&j| t_us(j) > start + (end - start) / 2).collect();
        let mean_of =
            |i: usize| steady.iter().map(|&j| samples[j].flows[i].1).sum::<f64>() / steady.len().max(1) as f64;
        let good: Vec<f64> = (0..active).map(mean_of).collect();
        let total: f64 = good.iter().sum();
        // Converged: from the first sample on which smoothed Jain ≥ 0.9 holds to the phase's end.
        let ok: Vec<bool> = idx.iter().map(|&j| jain(&smoothed[j][..active]) >= 0.9).collect();
        let converge = (0..ok.len()).find(|&a| ok[a..].iter().all(|&b| b)).map(|a| t_us(idx[a]) - start);
        t.row(vec![
            phase.to_string(),
            active.to_string(),
            f3(jain(&good)),
            f1(total / active as f64),
            f1(total),
            converge.map_or("-".into(), |c| c.to_string()),
        ]);
    }
    let mut r = Report::default();
    r.csv.push(("fairness_series.csv".into(), samples_csv(&f)));
    let series: Vec<Series> = (0..n)
        .map(|i| Series {
            name: format!("flow {i}"),
            points: (0..samples.len()).map(|j| (t_us(j) as f64, smoothed[j][i])).collect(),
        })
        .collect();
    let title =
        format!("fairness: goodput of {n} flows joining every {join} µs (DCQCN {profile}, {smooth} µs average)");
    r.plots.push(("fairness.svg".into(), line_chart(&title, "time (µs)", "goodput (Gbit/s)", &series)));
    r.table("fairness", t);
    Ok(r)
}
