//! perftest's console output: the test header (`ctx_print_test_info`), the address lines
//! (`ctx_print_pingpong_data`), and the result tables (`print_report_bw`, `print_report_lat`),
//! with perftest 6.x's format strings so scripts that parse perftest output parse ours.

use super::{Run, Test};
use anyhow::Result;
use std::io::Write;
use uroce_rxe_compat::perftest::PerftestDest;

/// perftest's `RESULT_LINE`.
pub const RESULT_LINE: &str = "---------------------------------------------------------------------------------------";

/// One bandwidth result (bytes per second; the unit is chosen when printing).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct BwResult {
    /// Message size in bytes.
    pub size: usize,
    /// Messages completed (all QPs).
    pub iters: u64,
    /// Peak bandwidth, bytes/s.
    pub bw_peak: f64,
    /// Average bandwidth, bytes/s.
    pub bw_avg: f64,
    /// Average message rate, millions of messages per second.
    pub msg_rate: f64,
}

/// One latency result, microseconds (perftest's `print_report_lat` columns).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LatResult {
    /// Message size in bytes.
    pub size: usize,
    /// Samples.
    pub iters: u64,
    /// Minimum.
    pub t_min: f64,
    /// Maximum.
    pub t_max: f64,
    /// Median ("typical").
    pub t_typical: f64,
    /// Mean.
    pub t_avg: f64,
    /// Standard deviation.
    pub t_stdev: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
}

impl LatResult {
    /// Summarise samples (microseconds) the way perftest does: sort, drop nothing, median of
    /// the sorted samples, percentiles by index `n * p`.
    pub fn from_samples(size: usize, mut s: Vec<f64>) -> LatResult {
        if s.is_empty() {
            return LatResult { size, ..Default::default() };
        }
        s.sort_by(|a, b| a.total_cmp(b));
        let n = s.len();
        let avg = s.iter().sum::<f64>() / n as f64;
        let var = s.iter().map(|x| (x - avg) * (x - avg)).sum::<f64>() / n as f64;
        let pct = |p: f64| s[((n as f64 * p) as usize).min(n - 1)];
        LatResult {
            size,
            iters: n as u64,
            t_min: s[0],
            t_max: s[n - 1],
            t_typical: s[n / 2],
            t_avg: avg,
            t_stdev: var.sqrt(),
            p99: pct(0.99),
            p999: pct(0.999),
        }
    }
}

/// Bytes/s to the report unit: MB/s (2^20 bytes, as perftest) or Gb/s (10^9 bits).
pub fn scale(bytes_per_sec: f64, gbits: bool) -> f64 {
    if gbits {
        bytes_per_sec * 8.0 / 1e9
    } else {
        bytes_per_sec / (1u64 << 20) as f64
    }
}

/// The inverse of [`scale`].
pub fn unscale(v: f64, gbits: bool) -> f64 {
    if gbits {
        v * 1e9 / 8.0
    } else {
        v * (1u64 << 20) as f64
    }
}

/// The unit's name.
pub fn unit(gbits: bool) -> &'static str {
    if gbits {
        "Gb/sec"
    } else {
        "MB/sec"
    }
}

/// C's `%#0Nx`: zero-padded to `width` including the `0x`, and plain zeros for 0.
fn c_hex(v: u64, width: usize) -> String {
    if v == 0 {
        format!("{:0width$}", 0)
    } else {
        format!("{v:#0width$x}")
    }
}

fn gid_line(gid: &[u8; 16]) -> String {
    let parts: Vec<String> = gid.iter().map(|b| format!("{b:02}")).collect();
    format!(" GID: {}", parts.join(":"))
}

/// `ctx_print_pingpong_data` for one side.
pub fn address_line(side: &str, d: &PerftestDest, with_rkey: bool) -> String {
    let mut s = format!(
        " {side} address: LID {} QPN {} PSN {}",
        c_hex(d.lid as u64, 4),
        c_hex(d.qpn as u64, 6),
        c_hex(d.psn as u64, 6)
    );
    if with_rkey {
        s += &format!(" RKey {} VAddr {}", c_hex(d.rkey as u64, 8), c_hex(d.vaddr, 16));
    }
    s + "\n" + &gid_line(&d.gid)
}

/// The test header and both sides' addresses.
pub fn header(run: &mut Run) -> Result<()> {
    let t = run.cfg.test;
    let dev = run.cfg.ifname.clone().unwrap_or_else(|| "uroce".into());
    let backend = run.port.describe();
    let gid_index = run.port.gid_index();
    let mtu = run.mtu.bytes();
    let out = &mut run.out;
    writeln!(out, "{RESULT_LINE}")?;
    writeln!(out, "                    {}", t.title())?;
    writeln!(out, " Dual-port       : OFF\t\tDevice         : {dev}")?;
    writeln!(out, " Number of qps   : {}\t\tTransport type : IB", run.cfg.qps)?;
    writeln!(out, " Connection type : RC\t\tUsing SRQ      : OFF")?;
    writeln!(out, " PCIe relax order: OFF")?;
    writeln!(out, " ibv_wr* API     : OFF")?;
    if t.is_bw() {
        writeln!(out, " TX depth        : {}", run.cfg.tx_depth)?;
        if t == Test::SendBw && run.cfg.host.is_none() {
            writeln!(out, " RX depth        : {}", run.cfg.rx_depth)?;
        }
        writeln!(out, " CQ Moderation   : {}", run.cfg.cq_mod)?;
    } else {
        writeln!(out, " TX depth        : 1")?;
    }
    writeln!(out, " Mtu             : {mtu}[B]")?;
    writeln!(out, " Link type       : Ethernet")?;
    writeln!(out, " GID index       : {gid_index}")?;
    if t.needs_reads() {
        writeln!(out, " Outstand reads  : {}", run.conns[0].peer.out_reads)?;
    }
    writeln!(out, " Max inline data : 0[B]")?;
    writeln!(out, " rdma_cm QPs\t : OFF")?;
    writeln!(out, " Data ex. method : Ethernet")?;
    writeln!(out, " Backend         : {backend}")?;
    writeln!(out, "{RESULT_LINE}")?;
    let with_rkey = t != Test::SendBw && t != Test::SendLat;
    for c in &run.conns {
        writeln!(out, "{}", address_line("local", &c.me, with_rkey))?;
    }
    for c in &run.conns {
        writeln!(out, "{}", address_line("remote", &c.peer, with_rkey))?;
    }
    writeln!(out, "{RESULT_LINE}")?;
    Ok(())
}

/// The bandwidth table's column titles.
pub fn bw_table_header(run: &mut Run) -> Result<()> {
    let g = if run.cfg.report_gbits { "Gb/sec" } else { "MB/sec" };
    writeln!(run.out, " #bytes     #iterations    BW peak[{g}]    BW average[{g}]   MsgRate[Mpps]")?;
    run.out.flush()?;
    Ok(())
}

/// One bandwidth line (`REPORT_FMT`).
pub fn bw_line(run: &mut Run, r: &BwResult) -> Result<()> {
    writeln!(run.out, "{}", format_bw_line(r, run.cfg.report_gbits))?;
    run.out.flush()?;
    Ok(())
}

/// `" %-7lu    %-10lu       %-7.2lf            %-7.2lf\t\t   %-7.6lf"`.
pub fn format_bw_line(r: &BwResult, gbits: bool) -> String {
    let peak = format!("{:.2}", scale(r.bw_peak, gbits));
    let avg = format!("{:.2}", scale(r.bw_avg, gbits));
    let rate = format!("{:.6}", r.msg_rate);
    format!(" {:<7}    {:<10}       {peak:<7}            {avg:<7}\t\t   {rate:<7}", r.size, r.iters)
}

/// The latency table's column titles.
pub fn lat_table_header(run: &mut Run) -> Result<()> {
    writeln!(
        run.out,
        " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] "
    )?;
    run.out.flush()?;
    Ok(())
}

/// One latency line (`REPORT_FMT_LAT`).
pub fn lat_line(run: &mut Run, r: &LatResult) -> Result<()> {
    writeln!(run.out, "{}", format_lat_line(r))?;
    run.out.flush()?;
    Ok(())
}

/// `" %-7lu %-10lu %-7.2f        %-7.2f      %-7.2f  \t   %-7.2f     \t%-7.2f\t\t%-7.2f \t\t%-7.2f"`.
pub fn format_lat_line(r: &LatResult) -> String {
    let f = |v: f64| format!("{v:.2}");
    format!(
        " {:<7} {:<10} {:<7}        {:<7}      {:<7}  \t   {:<7}     \t{:<7}\t\t{:<7} \t\t{:<7}",
        r.size,
        r.iters,
        f(r.t_min),
        f(r.t_max),
        f(r.t_typical),
        f(r.t_avg),
        f(r.t_stdev),
        f(r.p99),
        f(r.p999)
    )
}

/// The closing rule.
pub fn rule(run: &mut Run) -> Result<()> {
    writeln!(run.out, "{RESULT_LINE}")?;
    run.out.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bw_line_matches_perftest_columns() {
        let r = BwResult {
            size: 65536,
            iters: 5000,
            bw_peak: 1095.32 * 1048576.0,
            bw_avg: 1095.10 * 1048576.0,
            msg_rate: 0.017522,
        };
        assert_eq!(format_bw_line(&r, false), " 65536      5000             1095.32            1095.10\t\t   0.017522");
        // Gb/s: 10^9 bits.
        let r = BwResult { size: 8, iters: 1, bw_peak: 1.25e9, bw_avg: 1.25e8, msg_rate: 1.0 };
        assert_eq!(format_bw_line(&r, true), " 8          1                10.00              1.00   \t\t   1.000000");
    }

    #[test]
    fn lat_summary_and_line() {
        let samples: Vec<f64> = (1..=1000).map(|i| i as f64).collect();
        let r = LatResult::from_samples(2, samples);
        assert_eq!((r.t_min, r.t_max, r.t_typical, r.p99, r.p999), (1.0, 1000.0, 501.0, 991.0, 1000.0));
        assert!((r.t_avg - 500.5).abs() < 1e-9);
        assert!(format_lat_line(&r).starts_with(" 2       1000       1.00           1000.00      501.00 "));
    }

    #[test]
    fn address_lines_use_c_hex() {
        let d = PerftestDest {
            qpn: 0x11,
            psn: 0x8b8f3f,
            rkey: 0x204,
            vaddr: 0x7f00_1234_5000,
            gid: [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 255, 255, 10, 0, 0, 1],
            ..Default::default()
        };
        assert_eq!(
            address_line("local", &d, true),
            " local address: LID 0000 QPN 0x0011 PSN 0x8b8f3f RKey 0x000204 VAddr 0x007f0012345000\n GID: 00:00:00:00:00:00:00:00:00:00:255:255:10:00:00:01"
        );
    }
}
