//! `incast`: N senders on two leaves write to one receiver on a third, through a spine, at
//! line rate. Without DCQCN the spine's queue toward the receiver's leaf fills, PFC pauses both
//! senders' leaves, their queues fill and they pause the senders: the pauses spread upstream,
//! hop by hop (counted per switch and host). With DCQCN the queue is marked, the
//! receiver sends CNPs, the senders slow to their share, and after convergence the queue stays
//! below Kmax and no pause is sent.

use super::*;
use crate::fabric::{FlowSpec, LinkSpec};
use crate::plot::{line_chart, Series};
use crate::switch::SwitchConfig;
use crate::topology::{leaf_spine, LeafSpine};
use uroce_transport::Instant;

const KEYS: [&str; 9] =
    ["n", "rate_gbps", "until_us", "converge_us", "profile", "seed", "msg_kb", "window", "sample_us"];

/// One run's outcome.
struct Outcome {
    row: Vec<String>,
    csv: String,
    queue: Vec<(f64, f64)>,
    rates: Vec<Series>,
}

/// Run it.
pub fn run(s: &Settings) -> Result<Report, SettingError> {
    s.only(&KEYS)?;
    let ns = s.nums("n", &[8.0, 16.0, 32.0], 2.0, 256.0)?;
    let rate = s.num("rate_gbps", 100.0, 1.0, 1000.0)?;
    let until = s.int("until_us", 6000, 50, 10_000_000)?;
    let converge = s.int("converge_us", until / 2, 0, until)?;
    let profile = s.choice("profile", "paper", &["paper", "connectx"])?;
    let seed = s.int("seed", 1, 0, u64::MAX)?;
    let msg = s.int("msg_kb", 64, 1, 1024)? as usize * 1024;
    let window = s.int("window", 2, 1, 256)? as u32;
    let sample = s.int("sample_us", 10, 1, 100_000)?;
    let mut report = Report::default();
    let kmax = SwitchConfig::default().red.map_or(0, |r| r.kmax);
    let mut t = Table::new(
        &format!("incast: N:1 at {rate} Gbit/s through leaf-spine, {until} µs, steady state after {converge} µs"),
        &[
            "n",
            "dcqcn",
            "goodput_gbps",
            "max_queue_kb",
            "kmax_kb",
            "pauses",
            "pauses_after",
            "paused_ports",
            "drops",
            "retransmits",
        ],
    );
    let mut plots_done = false;
    for &n in &ns {
        let n = n as usize;
        let mut queue_lines = Vec::new();
        for dcqcn in [None, Some(profile)] {
            let o = one(n, dcqcn, rate, until, converge, seed, msg, window, sample, kmax);
            let mode = dcqcn.unwrap_or("off");
            t.row(o.row);
            report.csv.push((format!("incast_n{n}_{mode}.csv"), o.csv));
            queue_lines.push(Series { name: format!("DCQCN {mode}"), points: o.queue });
            if !plots_done && dcqcn.is_some() {
                let title = format!("incast {n}:1, DCQCN ({profile}): each sender's rate");
                report.plots.push(("incast_rates.svg".into(), line_chart(&title, "time (µs)", "Gbit/s", &o.rates)));
            }
        }
        if !plots_done {
            let title = format!("incast {n}:1 at {rate} Gbit/s: the bottleneck queue (Kmax {} KB)", kmax / 1000);
            report.plots.push(("incast_queue.svg".into(), line_chart(&title, "time (µs)", "queue (KB)", &queue_lines)));
            plots_done = true;
        }
    }
    report.table("incast", t);
    Ok(report)
}

#[allow(clippy::too_many_arguments)]
fn one(
    n: usize,
    dcqcn: Option<&str>,
    rate: f64,
    until: u64,
    converge: u64,
    seed: u64,
    msg: usize,
    window: u32,
    sample: u64,
    kmax: u64,
) -> Outcome {
    let bps = (rate * 1e9) as u64;
    let per_leaf = n.div_ceil(2);
    let link = LinkSpec::new(bps, Duration::from_micros(1));
    let shape = LeafSpine { leaves: 3, per_leaf, spines: 1 };
    let topo = leaf_spine(seed, shape, hosts(dcqcn, bps), SwitchConfig::default(), link, link);
    let receiver = 2 * per_leaf;
    // Every sender's traffic meets on the spine's link down to the receiver's leaf: its
    // queue is the bottleneck (the leaf's port to the receiver runs at the same rate).
    let bottleneck = topo.watch[2];
    let mut f = topo.fabric;
    let senders: Vec<usize> = (0..2 * per_leaf).take(n).collect();
    for &src in &senders {
        let spec = FlowSpec { src, dst: receiver, bytes: None, start: Duration::ZERO, msg, window };
        f.add_flow(spec).expect("a flow");
    }
    f.sample_every(Duration::from_micros(sample), &[bottleneck]);
    f.run_until(Instant::from_nanos(until * 1000));
    let hosts = f.host_totals();
    let samples = f.samples();
    let after = samples.iter().position(|x| x.t >= Instant::from_nanos(converge * 1000)).unwrap_or(samples.len());
    let steady = &samples[after..];
    let max_q = steady.iter().map(|x| x.ports[0].0).max().unwrap_or(0);
    let pauses_end = samples.last().map_or(0, |x| x.pauses);
    let pauses_at = samples.get(after.saturating_sub(1)).map_or(0, |x| x.pauses);
    let goodput = if steady.is_empty() {
        0.0
    } else {
        steady.iter().map(|x| x.flows.iter().map(|f| f.1).sum::<f64>()).sum::<f64>() / steady.len() as f64
    };
    // Where the pauses went: PAUSE frames received, by kind of node.
    let mut at: Vec<(String, u64)> = Vec::new();
    for (node, _, count) in f.paused_ports() {
        let name = if f.is_host(node) { "hosts".to_string() } else { topo_name(&topo.names, node) };
        match at.iter_mut().find(|(k, _)| *k == name) {
            Some(e) => e.1 += count,
            None => at.push((name, count)),
        }
    }
    at.sort();
    let paused = if at.is_empty() {
        "-".into()
    } else {
        at.iter().map(|(k, c)| format!("{k}:{c}")).collect::<Vec<_>>().join(" ")
    };
    let sw = f.switch_totals();
    let row = vec![
        n.to_string(),
        dcqcn.unwrap_or("off").into(),
        f1(goodput),
        f1(max_q as f64 / 1e3),
        f1(kmax as f64 / 1e3),
        sw.pause_sent.to_string(),
        (pauses_end - pauses_at).to_string(),
        paused,
        (sw.drop_buffer + sw.drop_headroom).to_string(),
        hosts.retransmitted_pkts.to_string(),
    ];
    let queue = samples.iter().map(|x| (x.t.as_nanos() as f64 / 1e3, x.ports[0].0 as f64 / 1e3)).collect();
    let rates = (0..senders.len())
        .map(|i| Series {
            name: format!("sender {i}"),
            points: samples.iter().map(|x| (x.t.as_nanos() as f64 / 1e3, x.flows[i].0)).collect(),
        })
        .collect();
    Outcome { row, csv: samples_csv(&f), queue, rates }
}

fn topo_name(names: &[(u32, String)], n: u32) -> String {
    names.iter().find(|(id, _)| *id == n).map_or_else(|| format!("node{n}"), |(_, s)| s.clone())
}
