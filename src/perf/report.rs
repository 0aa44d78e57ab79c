//! perftest's console output: the test header (`ctx_print_test_info`), the address lines
//! (`ctx_print_pingpong_data`), and the result tables (`print_report_bw`,
//! `print_full_bw_report`, `print_report_lat`), with the format strings of perftest 25.01
//! (VERSION "6.24", the version uroce advertises), so scripts that parse perftest output parse
//! ours. `--output` prints one bare `%lf` figure instead, as perftest does.

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
    /// Peak bandwidth, bytes/s (0 with `-N` and where perftest forces it).
    pub bw_peak: f64,
    /// Average bandwidth, bytes/s.
    pub bw_avg: f64,
    /// Average message rate, millions of messages per second.
    pub msg_rate: f64,
    /// `--cpu_util` (duration mode): user time / (user + idle) over the measurement, percent.
    pub cpu_util: Option<f64>,
}

impl BwResult {
    /// `print_full_bw_report(my, rem)`: peak, average and message rate are the sums of both
    /// sides' (bidirectional tests); size, iterations and the CPU figure stay this side's.
    pub fn plus(&self, rem: &BwResult) -> BwResult {
        BwResult {
            bw_peak: self.bw_peak + rem.bw_peak,
            bw_avg: self.bw_avg + rem.bw_avg,
            msg_rate: self.msg_rate + rem.msg_rate,
            ..*self
        }
    }
}

/// One latency result, microseconds (perftest's `print_report_lat` columns).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LatResult {
    /// Message size in bytes.
    pub size: usize,
    /// Iterations (`-n`).
    pub iters: u64,
    /// Minimum.
    pub t_min: f64,
    /// Maximum (of the samples kept: perftest drops the two largest).
    pub t_max: f64,
    /// Median ("typical").
    pub t_typical: f64,
    /// Mean.
    pub t_avg: f64,
    /// Standard deviation (perftest's: each deviation truncated to an integer first).
    pub t_stdev: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
    /// The samples in the order measured (for `-U`).
    pub unsorted: Vec<f64>,
    /// The samples kept, sorted (for `-H`).
    pub sorted: Vec<f64>,
}

/// perftest's `LAT_MEASURE_TAIL`: the largest samples dropped before the statistics.
const LAT_MEASURE_TAIL: usize = 2;

impl LatResult {
    /// Summarise samples (microseconds) exactly as perftest's `print_report_lat`: sort, drop
    /// the two largest, median `get_median` (the mean of the middle two for an even count),
    /// min `delta[0]`, max `delta[n]` (the largest kept + 1, i.e. the second largest sample),
    /// percentiles `delta[ceil(n * p)]`, mean of the kept samples, and the standard deviation
    /// of the kept samples with each deviation truncated to an `int` as perftest's
    /// `int temp_var = average - delta` does.
    pub fn from_samples(size: usize, iters: u64, samples: Vec<f64>) -> LatResult {
        let unsorted = samples.clone();
        let mut d = samples;
        d.sort_by(|a, b| a.total_cmp(b));
        if d.len() <= LAT_MEASURE_TAIL {
            return LatResult { size, iters, unsorted, sorted: d, ..Default::default() };
        }
        let n = d.len() - LAT_MEASURE_TAIL;
        let at = |i: usize| d[i.min(d.len() - 1)];
        let median = if (n - 1) % 2 == 1 { (d[n / 2] + d[n / 2 - 1]) / 2.0 } else { d[n / 2] };
        let avg = d[..n].iter().sum::<f64>() / n as f64;
        let var = d[..n].iter().map(|x| ((avg - x) as i32 as f64).powi(2)).sum::<f64>() / n as f64;
        LatResult {
            size,
            iters,
            t_min: d[0],
            t_max: d[n],
            t_typical: median,
            t_avg: avg,
            t_stdev: var.sqrt(),
            p99: at((n as f64 * 0.99).ceil() as usize),
            p999: at((n as f64 * 0.999).ceil() as usize),
            sorted: d[..n].to_vec(),
            unsorted,
        }
    }
}

/// Bytes/s to the report unit: MiB/s (2^20 bytes, as perftest) or Gb/s (10^9 bits).
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
        "MiB/sec"
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

/// C's `%g` (six significant digits, trailing zeros removed, exponent form outside
/// [1e-4, 1e6)), for `-H` / `-U` samples.
pub fn c_g(v: f64) -> String {
    if v == 0.0 || !v.is_finite() {
        return format!("{v}");
    }
    let exp = v.abs().log10().floor() as i32;
    let trim = |s: String| -> String {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s
        }
    };
    if !(-4..6).contains(&exp) {
        let s = format!("{v:.5e}");
        let (m, e) = s.split_once('e').unwrap_or((&s, "0"));
        let e: i32 = e.parse().unwrap_or(0);
        format!("{}e{}{:02}", trim(m.to_string()), if e < 0 { '-' } else { '+' }, e.abs())
    } else {
        let decimals = (5 - exp).max(0) as usize;
        trim(format!("{v:.decimals$}"))
    }
}

fn gid_line(gid: &[u8; 16]) -> String {
    let parts: Vec<String> = gid.iter().map(|b| format!("{b:02}")).collect();
    format!(" GID: {}", parts.join(":"))
}

/// `ctx_print_pingpong_data` for one side: READ adds `OUT`, WRITE/READ add `RKey`/`VAddr`.
pub fn address_line(side: &str, d: &PerftestDest, with_rkey: bool, with_out: bool) -> String {
    let mut s = format!(
        " {side} address: LID {} QPN {} PSN {}",
        c_hex(d.lid as u64, 4),
        c_hex(d.qpn as u64, 6),
        c_hex(d.psn as u64, 6)
    );
    if with_out {
        s += &format!(" OUT {}", c_hex(d.out_reads as u64, 4));
    }
    if with_rkey {
        s += &format!(" RKey {} VAddr {}", c_hex(d.rkey as u64, 8), c_hex(d.vaddr, 16));
    }
    s + "\n" + &gid_line(&d.gid)
}

impl Run {
    /// Full verbosity (no `--output`): headers, tables and rules are printed.
    pub(crate) fn verbose(&self) -> bool {
        self.cfg.output.is_none()
    }
}

/// The test header (`ctx_print_test_info`) and both sides' addresses.
pub fn header(run: &mut Run) -> Result<()> {
    if !run.verbose() {
        return Ok(());
    }
    let cfg = &run.cfg;
    let t = cfg.test;
    let dev = cfg.ifname.clone().unwrap_or_else(|| "uroce".into());
    let backend = run.port.describe();
    let gid_index = run.port.gid_index();
    let mtu = run.mtu.bytes();
    let client = cfg.host.is_some();
    let duplex = cfg.bidirectional;
    let post_list = cfg.post_list.unwrap_or(1);
    let mut title = t.verb().to_string() + " ";
    if t == Test::AtomicBw {
        title += &format!("{:?} ", cfg.atomic);
    }
    if t.is_bw() {
        if duplex {
            title += "Bidirectional ";
        }
        if post_list > 1 {
            title += "Post List ";
        }
        title += "BW ";
    } else {
        title += "Latency ";
    }
    let out = &mut run.out;
    writeln!(out, "{RESULT_LINE}")?;
    writeln!(out, "                    {title}Test")?;
    if cfg.events {
        writeln!(out, " Test with events. Using {dev}_comp0")?;
    }
    writeln!(out, " Dual-port       : OFF\t\tDevice         : {dev}")?;
    writeln!(out, " Number of qps   : {}\t\tTransport type : IB", cfg.qps)?;
    writeln!(out, " Connection type : RC\t\tUsing SRQ      : OFF")?;
    writeln!(out, " PCIe relax order: OFF\t\tLock-free      : OFF")?;
    writeln!(out, " ibv_wr* API     : OFF\t\tUsing DDP      : OFF")?;
    if client || duplex {
        writeln!(out, " TX depth        : {}", cfg.tx_depth)?;
    }
    if post_list > 1 {
        writeln!(out, " Post List       : {post_list}")?;
    }
    if matches!(t, Test::SendBw | Test::SendLat) && (!client || duplex) {
        writeln!(out, " RX depth        : {}", cfg.rx_depth)?;
    }
    if t.is_bw() {
        writeln!(out, " CQ Moderation   : {}", cfg.cq_mod)?;
    }
    writeln!(out, " Mtu             : {mtu}[B]")?;
    writeln!(out, " Link type       : Ethernet")?;
    writeln!(out, " GID index       : {gid_index}")?;
    if t.needs_reads() {
        writeln!(out, " Outstand reads  : {}", run.conns[0].me.out_reads)?;
    } else {
        writeln!(out, " Max inline data : {}[B]", cfg.inline())?;
    }
    writeln!(out, " rdma_cm QPs\t : OFF")?;
    writeln!(out, " Data ex. method : Ethernet")?;
    writeln!(out, " Backend         : {backend}")?;
    if let Some(h) = &run.huge_pages {
        writeln!(out, " Huge pages      : {h}")?;
    }
    writeln!(out, "{RESULT_LINE}")?;
    let with_rkey = t != Test::SendBw && t != Test::SendLat && t != Test::AtomicBw;
    let with_out = matches!(t, Test::ReadBw | Test::ReadLat);
    for c in &run.conns {
        writeln!(out, "{}", address_line("local", &c.me, with_rkey, with_out))?;
    }
    for c in &run.conns {
        writeln!(out, "{}", address_line("remote", &c.peer, with_rkey, with_out))?;
    }
    writeln!(out, "{RESULT_LINE}")?;
    Ok(())
}

/// The bandwidth table's column titles (`RESULT_FMT`/`RESULT_FMT_G`, `RESULT_EXT(_CPU_UTIL)`).
pub fn bw_table_header(run: &mut Run) -> Result<()> {
    if !run.verbose() {
        return Ok(());
    }
    write_bw_columns(run)
}

fn write_bw_columns(run: &mut Run) -> Result<()> {
    let g = unit(run.cfg.report_gbits);
    let cpu = if run.cpu_util_enabled() { "    CPU_Util[%]" } else { "" };
    writeln!(run.out, " #bytes     #iterations    BW peak[{g}]    BW average[{g}]   MsgRate[Mpps]{cpu}")?;
    run.out.flush()?;
    Ok(())
}

/// One bandwidth line (`print_full_bw_report`), or the bare figure of `--output`.
pub fn bw_line(run: &mut Run, r: &BwResult) -> Result<()> {
    let gbits = run.cfg.report_gbits;
    match run.cfg.output {
        Some(super::OutputKind::Bandwidth) => writeln!(run.out, "{:.6}", scale(r.bw_avg, gbits))?,
        Some(super::OutputKind::MessageRate) => writeln!(run.out, "{:.6}", r.msg_rate)?,
        Some(super::OutputKind::Latency) => {}
        None => {
            let cpu =
                r.cpu_util.filter(|_| run.cpu_util_enabled()).map_or(String::new(), |c| format!("\t    {c:<3.2}"));
            writeln!(run.out, "{}{cpu}", format_bw_line(r, gbits))?
        }
    }
    run.out.flush()?;
    Ok(())
}

/// `--report-both` after a bidirectional result: this side's and the peer's lines apart.
pub fn report_both(run: &mut Run, mine: &BwResult, theirs: &BwResult) -> Result<()> {
    for (what, r) in [("Local", mine), ("Remote", theirs)] {
        writeln!(run.out, "{RESULT_LINE}")?;
        writeln!(run.out, "\n {what} results: ")?;
        writeln!(run.out, "{RESULT_LINE}")?;
        write_bw_columns(run)?;
        bw_line(run, r)?;
    }
    Ok(())
}

/// `REPORT_FMT` (25.01): `" %-7lu    %-10lu       %-7.2lf            %-7.2lf\t\t     %-7.6lf"`,
/// or `REPORT_FMT_EXT` (six decimals) when a Gb/s average is below 0.1, as perftest does.
pub fn format_bw_line(r: &BwResult, gbits: bool) -> String {
    let (peak, avg) = (scale(r.bw_peak, gbits), scale(r.bw_avg, gbits));
    if gbits && avg < 0.1 {
        return format!(
            " {:<7}    {}           {peak:<7.6}            {avg:<7.6}            {:<7.6}",
            r.size, r.iters, r.msg_rate
        );
    }
    let peak = format!("{peak:.2}");
    let avg = format!("{avg:.2}");
    let rate = format!("{:.6}", r.msg_rate);
    format!(" {:<7}    {:<10}       {peak:<7}            {avg:<7}\t\t     {rate:<7}", r.size, r.iters)
}

/// The latency table's column titles.
pub fn lat_table_header(run: &mut Run) -> Result<()> {
    if !run.verbose() {
        return Ok(());
    }
    writeln!(run.out, "{LAT_COLUMNS}")?;
    run.out.flush()?;
    Ok(())
}

const LAT_COLUMNS: &str = " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] ";

/// One latency result as `print_report_lat`: the `-U` samples in order, the `-H` samples
/// sorted (each list headed `#, usec`, then the table's titles again), then the line — or,
/// with `--output=latency`, the mean alone.
pub fn lat_line(run: &mut Run, r: &LatResult) -> Result<()> {
    let lists = [(run.cfg.unsorted, &r.unsorted), (run.cfg.histogram, &r.sorted)];
    for (on, samples) in lists {
        if on {
            writeln!(run.out, "#, usec")?;
            for (i, v) in samples.iter().enumerate() {
                writeln!(run.out, "{}, {}", i + 1, c_g(*v))?;
            }
        }
    }
    if (run.cfg.unsorted || run.cfg.histogram) && run.verbose() {
        writeln!(run.out, "{RESULT_LINE}")?;
        writeln!(run.out, "{LAT_COLUMNS}")?;
    }
    if run.cfg.output == Some(super::OutputKind::Latency) {
        writeln!(run.out, "{:.6}", r.t_avg)?;
    } else {
        writeln!(run.out, "{}", format_lat_line(r))?;
    }
    run.out.flush()?;
    Ok(())
}

/// `REPORT_FMT_LAT`: `" %-7lu %lu          %-7.2f        %-7.2f      %-7.2f  \t       %-7.2f
/// \t%-7.2f\t\t%-7.2f \t\t%-7.2f"`.
pub fn format_lat_line(r: &LatResult) -> String {
    let f = |v: f64| format!("{v:.2}");
    format!(
        " {:<7} {}          {:<7}        {:<7}      {:<7}  \t       {:<7}     \t{:<7}\t\t{:<7} \t\t{:<7}",
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
    if !run.verbose() {
        return Ok(());
    }
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
            cpu_util: None,
        };
        assert_eq!(
            format_bw_line(&r, false),
            " 65536      5000             1095.32            1095.10\t\t     0.017522"
        );
        // Gb/s: 10^9 bits.
        let r = BwResult { size: 8, iters: 1, bw_peak: 1.25e9, bw_avg: 1.25e8, msg_rate: 1.0, cpu_util: None };
        assert_eq!(
            format_bw_line(&r, true),
            " 8          1                10.00              1.00   \t\t     1.000000"
        );
        // Below 0.1 Gb/s: REPORT_FMT_EXT's six decimals.
        let r = BwResult { size: 2, iters: 1000, bw_peak: 1e6, bw_avg: 1e6, msg_rate: 0.5, cpu_util: None };
        assert_eq!(
            format_bw_line(&r, true),
            " 2          1000           0.008000            0.008000            0.500000"
        );
    }

    #[test]
    fn duplex_sums_figures_not_counts() {
        let a = BwResult { size: 64, iters: 10, bw_peak: 3.0, bw_avg: 2.0, msg_rate: 1.0, cpu_util: Some(5.0) };
        let b = BwResult { size: 64, iters: 12, bw_peak: 4.0, bw_avg: 1.0, msg_rate: 0.5, cpu_util: Some(9.0) };
        let s = a.plus(&b);
        assert_eq!((s.size, s.iters, s.bw_peak, s.bw_avg, s.msg_rate, s.cpu_util), (64, 10, 7.0, 3.0, 1.5, Some(5.0)));
    }

    #[test]
    fn lat_summary_as_print_report_lat() {
        // 1000 samples 1..=1000: the two largest dropped, n = 998.
        let samples: Vec<f64> = (1..=1000).rev().map(|i| i as f64).collect();
        let r = LatResult::from_samples(2, 1001, samples);
        // min delta[0]; max delta[998] = 999; median: n-1 = 997 odd -> (delta[499] + delta[498]) / 2.
        assert_eq!((r.t_min, r.t_max, r.t_typical), (1.0, 999.0, 499.5));
        // percentiles delta[ceil(998 * 0.99) = 989] = 990, delta[ceil(997.002) = 998] = 999
        assert_eq!((r.p99, r.p999), (990.0, 999.0));
        assert!((r.t_avg - 499.5).abs() < 1e-9);
        assert_eq!(r.sorted.len(), 998);
        assert_eq!((r.unsorted[0], r.unsorted.len()), (1000.0, 1000));
        assert!(format_lat_line(&r).starts_with(" 2       1001          1.00           999.00       499.50 "));
        // perftest truncates each deviation to an int: samples within 1 us of the mean give 0.
        let r = LatResult::from_samples(2, 7, vec![2.2, 2.4, 2.6, 2.8, 2.3, 9.0, 9.5]);
        assert_eq!(r.t_stdev, 0.0);
    }

    #[test]
    fn c_g_formats_like_printf() {
        for (v, s) in [
            (1.0, "1"),
            (2.5, "2.5"),
            (0.123456789, "0.123457"),
            (123456.7, "123457"),
            (1234567.0, "1.23457e+06"),
            (0.00001234, "1.234e-05"),
            (12.30, "12.3"),
        ] {
            assert_eq!(c_g(v), s, "{v}");
        }
    }

    #[test]
    fn address_lines_use_c_hex() {
        let d = PerftestDest {
            qpn: 0x11,
            psn: 0x8b8f3f,
            rkey: 0x204,
            vaddr: 0x7f00_1234_5000,
            out_reads: 0x80,
            gid: [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 255, 255, 10, 0, 0, 1],
            ..Default::default()
        };
        assert_eq!(
            address_line("local", &d, true, false),
            " local address: LID 0000 QPN 0x0011 PSN 0x8b8f3f RKey 0x000204 VAddr 0x007f0012345000\n GID: 00:00:00:00:00:00:00:00:00:00:255:255:10:00:00:01"
        );
        assert!(address_line("local", &d, true, true).contains(" PSN 0x8b8f3f OUT 0x80 RKey"));
    }
}
