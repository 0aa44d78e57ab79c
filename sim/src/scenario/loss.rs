//! `loss`: one flow across a dumbbell whose middle link loses frames at random (both ways),
//! Go-Back-N's goodput against the simple model `goodput ≈ 1 / (1 + p·W)` of the loss-free
//! rate (W: the packets in flight, the bandwidth-delay product capped by the 128-PSN send
//! window; protocol.md §5, a derived bound). Where a lost NAK or a lost tail leaves nothing to
//! trigger a resend, only the local ACK timeout recovers: the `timeouts` column, and the cliff
//! in goodput it causes (4.096 µs · 2^timeout each; perftest's default 14 is 67 ms). The
//! second table runs one lossy path with several timeouts, so the cliff is the timeout's:
//! short ones fire and recover, perftest's outlasts the run. Plots: goodput against `p·W`
//! beside the model (`loss.svg`), and the cliff runs' goodput over time (`loss_cliff.svg`).

use super::*;
use crate::fabric::{FlowSpec, LinkSpec};
use crate::plot::{line_chart, Series};
use crate::switch::SwitchConfig;
use crate::topology::dumbbell;
use uroce_transport::Instant;

const KEYS: [&str; 12] = [
    "rates_gbps",
    "rtts_us",
    "losses",
    "until_us",
    "seed",
    "msg_kb",
    "window",
    "timeout",
    "mtu",
    "cliff_loss",
    "cliff_rtt_us",
    "cliff_timeouts",
];

/// One flow's run over a lossy dumbbell.
struct Run {
    /// Goodput after the warm-up, Gbit/s.
    good: f64,
    retransmits: u64,
    timeouts: u64,
    /// The longest run of 10 µs samples with no message completed, after the warm-up.
    longest_stall_us: u64,
    /// (µs, Gbit/s) per 10 µs sample.
    series: Vec<(f64, f64)>,
}

struct Common {
    until: u64,
    seed: u64,
    msg: usize,
    window: u32,
    mtu: uroce_transport::Mtu,
}

fn one(c: &Common, rate: f64, rtt: f64, p: f64, timeout: u8) -> Run {
    let bps = (rate * 1e9) as u64;
    // Six link traversals in a round trip (host, switch, switch, host and back).
    let delay = Duration::from_nanos((rtt * 1000.0 / 6.0) as u64);
    let edge = LinkSpec::new(bps, delay);
    let mid = LinkSpec { loss: p, ..edge };
    let host = crate::fabric::HostConfig { timeout, mtu: c.mtu, ..hosts(None, bps) };
    let mut topo = dumbbell(c.seed, 1, host, SwitchConfig::default(), edge, mid);
    let f = &mut topo.fabric;
    f.add_flow(FlowSpec { src: 0, dst: 1, bytes: None, start: Duration::ZERO, msg: c.msg, window: c.window })
        .expect("a flow");
    f.sample_every(Duration::from_micros(10), &[]);
    // Warm up for a tenth, measure the rest.
    let warm = Instant::from_nanos(c.until * 100);
    f.run_until(warm);
    let b0 = f.flows()[0].bytes_done();
    f.run_until(Instant::from_nanos(c.until * 1000));
    let secs = (c.until as f64 * 0.9) / 1e6;
    let good = (f.flows()[0].bytes_done() - b0) as f64 * 8.0 / secs / 1e9;
    let counters = f.host_totals();
    // A lost NAK or tail waits for the local ACK timeout: no message completes meanwhile.
    let (mut run, mut longest) = (0u64, 0u64);
    for x in f.samples().iter().filter(|x| x.t >= warm) {
        run = if x.flows[0].1 == 0.0 { run + 10 } else { 0 };
        longest = longest.max(run);
    }
    let series = f.samples().iter().map(|x| (x.t.as_nanos() as f64 / 1e3, x.flows[0].1)).collect();
    Run {
        good,
        retransmits: counters.retransmitted_pkts,
        timeouts: counters.local_ack_timeout_err,
        longest_stall_us: longest,
        series,
    }
}

/// Run it.
pub fn run(s: &Settings) -> Result<Report, SettingError> {
    s.only(&KEYS)?;
    let rates = s.nums("rates_gbps", &[100.0, 400.0], 1.0, 1000.0)?;
    let rtts = s.nums("rtts_us", &[8.0, 24.0], 1.0, 10_000.0)?;
    let losses = s.nums("losses", &[0.0, 0.0001, 0.001, 0.01], 0.0, 0.5)?;
    let until = s.int("until_us", 5000, 100, 100_000_000)?;
    let seed = s.int("seed", 1, 0, u64::MAX)?;
    let msg = s.int("msg_kb", 64, 1, 1024)? as usize * 1024;
    let window = s.int("window", 32, 1, 1024)? as u32;
    let timeout = s.int("timeout", 14, 1, 31)? as u8;
    let mtu_bytes = s.int("mtu", 4096, 256, 4096)?;
    let cliff_loss = s.num("cliff_loss", 0.01, 0.0, 0.5)?;
    let cliff_rtt = s.num("cliff_rtt_us", 24.0, 1.0, 10_000.0)?;
    let cliff_timeouts = s.nums("cliff_timeouts", &[8.0, 10.0, 12.0, 14.0], 1.0, 31.0)?;
    let mtu = uroce_transport::Mtu::from_bytes(mtu_bytes as usize).ok_or_else(|| SettingError::BadValue {
        key: "mtu".into(),
        value: mtu_bytes.to_string(),
        want: "256, 512, 1024, 2048 or 4096",
    })?;
    let c = Common { until, seed, msg, window, mtu };
    let mut t = Table::new(
        &format!("loss: Go-Back-N, one flow, random loss on the bottleneck both ways, {until} µs, local ACK timeout 2^{timeout} · 4.096 µs"),
        &["rate_gbps", "rtt_us", "loss", "w_pkts", "goodput_gbps", "lossless_gbps", "model_gbps", "measured/model", "retransmits", "timeouts", "longest_stall_us"],
    );
    let mut model_lines = Vec::new();
    let pkt_bits = (mtu.bytes() as f64 + 66.0) * 8.0;
    for &rate in &rates {
        for &rtt in &rtts {
            let mut lossless = None;
            let mut points = Vec::new();
            for &p in &losses {
                let o = one(&c, rate, rtt, p, timeout);
                let w = (rate * 1e9 * rtt * 1e-6 / pkt_bits).clamp(1.0, 128.0);
                let base = *lossless.get_or_insert(o.good);
                let model = base / (1.0 + p * w);
                if base > 0.0 {
                    points.push((p * w, o.good / base));
                }
                t.row(vec![
                    f1(rate),
                    f1(rtt),
                    format!("{p}"),
                    format!("{w:.0}"),
                    f1(o.good),
                    f1(base),
                    f1(model),
                    if model > 0.0 { f3(o.good / model) } else { "-".into() },
                    o.retransmits.to_string(),
                    o.timeouts.to_string(),
                    o.longest_stall_us.to_string(),
                ]);
            }
            model_lines.push(Series { name: format!("{rate} Gbit/s, RTT {rtt} µs"), points });
        }
    }
    let mut r = Report::default();
    r.table("loss", t);
    // The model itself, over the range measured.
    let x1 = model_lines.iter().flat_map(|s| s.points.iter().map(|p| p.0)).fold(0.0f64, f64::max);
    let model: Vec<(f64, f64)> = (0..=50).map(|i| x1 * i as f64 / 50.0).map(|x| (x, 1.0 / (1.0 + x))).collect();
    model_lines.push(Series { name: "model 1/(1 + p·W)".into(), points: model });
    r.plots.push((
        "loss.svg".into(),
        line_chart("Go-Back-N goodput against random loss", "p · W", "goodput / lossless goodput", &model_lines),
    ));

    // The cliff: where a lost NAK or tail leaves only the local ACK timeout, the timeout's
    // length sets the goodput.
    let rate = rates[0];
    let mut cliff = Table::new(
        &format!("loss cliff: {rate} Gbit/s, RTT {cliff_rtt} µs, loss {cliff_loss}, {until} µs: only the local ACK timeout recovers a lost NAK or tail"),
        &["timeout", "timeout_us", "goodput_gbps", "retransmits", "timeouts", "longest_stall_us"],
    );
    let mut series = Vec::new();
    let mut csv = String::from("t_us");
    for &e in &cliff_timeouts {
        let _ = write!(csv, ",goodput_timeout{e}_gbps");
    }
    csv.push('\n');
    for &e in &cliff_timeouts {
        let o = one(&c, rate, cliff_rtt, cliff_loss, e as u8);
        let us = 4.096 * f64::powi(2.0, e as i32);
        cliff.row(vec![
            format!("{e}"),
            f1(us),
            f1(o.good),
            o.retransmits.to_string(),
            o.timeouts.to_string(),
            o.longest_stall_us.to_string(),
        ]);
        series.push(Series { name: format!("timeout {e} ({us:.0} µs)"), points: smooth(&o.series, 10) });
    }
    for (i, (t_us, _)) in series.first().map_or(&[][..], |s| &s.points[..]).iter().enumerate() {
        let _ = write!(csv, "{t_us:.1}");
        for s in &series {
            let _ = write!(csv, ",{:.3}", s.points.get(i).map_or(0.0, |p| p.1));
        }
        csv.push('\n');
    }
    r.table("loss_cliff", cliff);
    r.csv.push(("loss_cliff_series.csv".into(), csv));
    r.plots.push((
        "loss_cliff.svg".into(),
        line_chart(
            &format!("Go-Back-N at {cliff_loss} loss: stalls last one local ACK timeout"),
            "time (µs)",
            "goodput (Gbit/s, 100 µs mean)",
            &series,
        ),
    ));
    Ok(r)
}

/// Means over `n` consecutive samples.
fn smooth(points: &[(f64, f64)], n: usize) -> Vec<(f64, f64)> {
    points.chunks(n).map(|c| (c[c.len() - 1].0, c.iter().map(|p| p.1).sum::<f64>() / c.len() as f64)).collect()
}
