//! `fabric`: a two-tier leaf-spine (ECMP over the spines), permutation traffic (every host
//! writes to one other, no two to the same) or all-to-all, with DCQCN off and on: the
//! distribution of the flows' goodput, Jain's index, PFC pauses and drops, and a plot of each
//! mode's per-flow goodput, slowest first (`fabric.svg`). The default is 8 leaves × 16 hosts
//! (128) under 4 spines.

use super::*;
use crate::fabric::{FlowSpec, LinkSpec};
use crate::plot::{line_chart, Series};
use crate::switch::SwitchConfig;
use crate::topology::{leaf_spine, LeafSpine};
use rand_chacha::ChaCha8Rng;
use rand_core::{Rng, SeedableRng};
use uroce_transport::Instant;

const KEYS: [&str; 11] = [
    "leaves",
    "per_leaf",
    "spines",
    "pattern",
    "rate_gbps",
    "until_us",
    "profile",
    "seed",
    "msg_kb",
    "window",
    "sample_us",
];

/// Run it.
pub fn run(s: &Settings) -> Result<Report, SettingError> {
    s.only(&KEYS)?;
    let shape = LeafSpine {
        leaves: s.int("leaves", 8, 2, 64)? as usize,
        per_leaf: s.int("per_leaf", 16, 1, 64)? as usize,
        spines: s.int("spines", 4, 1, 64)? as usize,
    };
    let pattern = s.choice("pattern", "permutation", &["permutation", "all2all"])?;
    let rate = s.num("rate_gbps", 100.0, 1.0, 1000.0)?;
    let until = s.int("until_us", 2000, 100, 10_000_000)?;
    let profile = s.choice("profile", "paper", &["paper", "connectx"])?;
    let seed = s.int("seed", 1, 0, u64::MAX)?;
    let msg = s.int("msg_kb", 64, 1, 1024)? as usize * 1024;
    let window = s.int("window", 2, 1, 256)? as u32;
    let sample = s.int("sample_us", 20, 1, 100_000)?;
    let n = shape.leaves * shape.per_leaf;
    let pairs: Vec<(usize, usize)> = match pattern {
        "permutation" => {
            // A random derangement that crosses leaves: a shuffled cycle through every host.
            let mut order: Vec<usize> = (0..n).collect();
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            for i in (1..n).rev() {
                order.swap(i, (rng.next_u64() % (i as u64 + 1)) as usize);
            }
            (0..n).map(|i| (order[i], order[(i + 1) % n])).collect()
        }
        _ => (0..n).flat_map(|a| (0..n).filter(move |&b| b != a).map(move |b| (a, b))).collect(),
    };
    let mut t = Table::new(
        &format!(
            "fabric: {} leaves × {} hosts, {} spines, {pattern} ({} flows), {rate} Gbit/s, {until} µs",
            shape.leaves,
            shape.per_leaf,
            shape.spines,
            pairs.len()
        ),
        &[
            "dcqcn",
            "min_gbps",
            "p10_gbps",
            "median_gbps",
            "mean_gbps",
            "max_gbps",
            "jain",
            "pauses",
            "drops",
            "ecn_marked",
            "cnps",
        ],
    );
    let mut r = Report::default();
    let mut lines = Vec::new();
    for dcqcn in [None, Some(profile)] {
        let bps = (rate * 1e9) as u64;
        let link = LinkSpec::new(bps, Duration::from_micros(1));
        let topo = leaf_spine(seed, shape, hosts(dcqcn, bps), SwitchConfig::default(), link, link);
        let mut f = topo.fabric;
        for &(src, dst) in &pairs {
            f.add_flow(FlowSpec { src, dst, bytes: None, start: Duration::ZERO, msg, window }).expect("a flow");
        }
        f.sample_every(Duration::from_micros(sample), &topo.watch);
        let warm = Instant::from_nanos(until * 250);
        f.run_until(warm);
        let b0: Vec<u64> = f.flows().iter().map(|x| x.bytes_done()).collect();
        f.run_until(Instant::from_nanos(until * 1000));
        let secs = until as f64 * 0.75 / 1e6;
        let mut good: Vec<f64> =
            f.flows().iter().zip(&b0).map(|(x, b)| (x.bytes_done() - b) as f64 * 8.0 / secs / 1e9).collect();
        let st = f.switch_totals();
        let hosts = f.host_totals();
        let mean = good.iter().sum::<f64>() / good.len().max(1) as f64;
        let j = jain(&good);
        let mode = dcqcn.unwrap_or("off");
        t.row(vec![
            mode.into(),
            f1(quantile(&mut good, 0.0)),
            f1(quantile(&mut good, 0.1)),
            f1(quantile(&mut good, 0.5)),
            f1(mean),
            f1(quantile(&mut good, 1.0)),
            f3(j),
            st.pause_sent.to_string(),
            (st.drop_buffer + st.drop_headroom).to_string(),
            st.ecn_marked.to_string(),
            hosts.np_cnp_sent.to_string(),
        ]);
        r.csv.push((format!("fabric_{mode}.csv"), samples_csv(&f)));
        good.sort_by(f64::total_cmp);
        let n = good.len().max(1) as f64;
        let points = good.iter().enumerate().map(|(i, g)| (100.0 * (i + 1) as f64 / n, *g)).collect();
        lines.push(Series { name: format!("DCQCN {mode}"), points });
    }
    let title = format!("{pattern}, {} flows: goodput per flow, slowest first", pairs.len());
    r.plots.push(("fabric.svg".into(), line_chart(&title, "flows (%)", "goodput (Gbit/s)", &lines)));
    r.table("fabric", t);
    Ok(r)
}
