//! `loss`: one flow across a dumbbell whose middle link loses frames at random (both ways),
//! Go-Back-N's goodput against the simple model `goodput ≈ 1 / (1 + p·W)` of the loss-free
//! rate (W: the packets in flight, the bandwidth-delay product capped by the 128-PSN send
//! window; protocol.md §5, a derived bound). Where a lost NAK or a lost tail leaves nothing to
//! trigger a resend, only the local ACK timeout recovers: the `timeouts` column, and the cliff
//! in goodput it causes (4.096 µs · 2^timeout each; perftest's default 14 is 67 ms).

use super::*;
use crate::fabric::{FlowSpec, LinkSpec};
use crate::switch::SwitchConfig;
use crate::topology::dumbbell;
use uroce_transport::Instant;

const KEYS: [&str; 9] = ["rates_gbps", "rtts_us", "losses", "until_us", "seed", "msg_kb", "window", "timeout", "mtu"];

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
    let mtu = uroce_transport::Mtu::from_bytes(mtu_bytes as usize).ok_or_else(|| SettingError::BadValue {
        key: "mtu".into(),
        value: mtu_bytes.to_string(),
        want: "256, 512, 1024, 2048 or 4096",
    })?;
    let mut t = Table::new(
        &format!("loss: Go-Back-N, one flow, random loss on the bottleneck both ways, {until} µs, local ACK timeout 2^{timeout} · 4.096 µs"),
        &["rate_gbps", "rtt_us", "loss", "w_pkts", "goodput_gbps", "lossless_gbps", "model_gbps", "measured/model", "retransmits", "timeouts", "longest_stall_us"],
    );
    for &rate in &rates {
        for &rtt in &rtts {
            let mut lossless = None;
            for &p in &losses {
                let bps = (rate * 1e9) as u64;
                // Six link traversals in a round trip (host, switch, switch, host and back).
                let delay = Duration::from_nanos((rtt * 1000.0 / 6.0) as u64);
                let edge = LinkSpec::new(bps, delay);
                let mid = LinkSpec { loss: p, ..edge };
                let host = crate::fabric::HostConfig { timeout, mtu, ..hosts(None, bps) };
                let mut topo = dumbbell(seed, 1, host, SwitchConfig::default(), edge, mid);
                let f = &mut topo.fabric;
                f.add_flow(FlowSpec { src: 0, dst: 1, bytes: None, start: Duration::ZERO, msg, window })
                    .expect("a flow");
                f.sample_every(Duration::from_micros(10), &[]);
                // Warm up for a tenth, measure the rest.
                let warm = Instant::from_nanos(until * 100);
                f.run_until(warm);
                let b0 = f.flows()[0].bytes_done();
                f.run_until(Instant::from_nanos(until * 1000));
                let secs = (until as f64 * 0.9) / 1e6;
                let good = (f.flows()[0].bytes_done() - b0) as f64 * 8.0 / secs / 1e9;
                let c = f.host_totals();
                // The longest run of 10 µs samples with no message completed (after the warm-up):
                // a lost NAK or tail waits for the local ACK timeout.
                let mut run = 0u64;
                let mut longest = 0u64;
                for x in f.samples().iter().filter(|x| x.t >= warm) {
                    run = if x.flows[0].1 == 0.0 { run + 10 } else { 0 };
                    longest = longest.max(run);
                }
                let pkt_bits = (mtu.bytes() as f64 + 66.0) * 8.0;
                let w = (rate * 1e9 * rtt * 1e-6 / pkt_bits).clamp(1.0, 128.0);
                let base = *lossless.get_or_insert(good);
                let model = base / (1.0 + p * w);
                t.row(vec![
                    f1(rate),
                    f1(rtt),
                    format!("{p}"),
                    format!("{w:.0}"),
                    f1(good),
                    f1(base),
                    f1(model),
                    if model > 0.0 { f3(good / model) } else { "-".into() },
                    c.retransmitted_pkts.to_string(),
                    c.local_ack_timeout_err.to_string(),
                    longest.to_string(),
                ]);
            }
        }
    }
    let mut r = Report::default();
    r.table("loss", t);
    Ok(r)
}
