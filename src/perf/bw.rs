//! Bandwidth tests: write_bw, read_bw, send_bw, atomic_bw.

use super::report::{self, BwResult};
use super::{drain_cqs, AtomicType, Run, Test};
use anyhow::{anyhow, Result};
use std::time::{Duration, Instant};
use uroce_rxe_compat::perftest::BwReport;
use uroce_transport::*;

pub(crate) fn run(run: &mut Run) -> Result<Option<BwResult>> {
    let client = run.cfg.host.is_some();
    if run.cfg.test == Test::SendBw {
        return if client { send_client(run) } else { send_server(run) };
    }
    if client {
        client_side(run)
    } else {
        passive_server(run)
    }
}

fn sizes(run: &Run) -> Vec<usize> {
    if run.cfg.all_sizes && run.cfg.test != Test::AtomicBw {
        (1..=23).map(|k| 1usize << k).collect()
    } else if run.cfg.test == Test::AtomicBw {
        vec![8]
    } else {
        vec![run.cfg.size]
    }
}

/// Post one WR of the test on connection `i`.
fn post(run: &mut Run, i: usize, size: usize, wr_id: u64, signaled: bool) -> Result<()> {
    let c = &run.conns[i];
    let local = Sge { addr: c.mr.addr + run.buf_size as u64, length: size as u32, lkey: c.mr.lkey };
    let flags = if signaled { SendFlags::SIGNALED } else { SendFlags::NONE };
    let mut wr = SendWr {
        wr_id,
        sg_list: &[],
        send_flags: flags,
        remote_addr: c.peer.vaddr,
        rkey: c.peer.rkey,
        ..Default::default()
    };
    let sg = [local];
    wr.sg_list = &sg;
    wr.opcode = match run.cfg.test {
        Test::WriteBw => WrOpcode::RdmaWrite,
        Test::ReadBw => WrOpcode::RdmaRead,
        Test::SendBw => WrOpcode::Send,
        _ => match run.cfg.atomic {
            AtomicType::FETCH_AND_ADD => {
                wr.compare_add = 1;
                WrOpcode::AtomicFetchAndAdd
            }
            AtomicType::CMP_AND_SWAP => {
                wr.compare_add = 0;
                wr.swap = 1;
                WrOpcode::AtomicCmpAndSwp
            }
        },
    };
    let qpn = c.qpn;
    run.port.device().post_send(qpn, &wr)?;
    Ok(())
}

/// Post and complete `iters` WRs of `size` bytes on every QP (or run for the duration),
/// keeping `depth` outstanding and signaling every `cq_mod`-th.
fn measure(run: &mut Run, size: usize) -> Result<BwResult> {
    let n = run.conns.len();
    let mut depth = run.cfg.tx_depth.max(1) as u64;
    if run.cfg.test.needs_reads() {
        // At most max_rd_atomic READs/atomics can be outstanding (the engine would hold the rest).
        depth = depth.min(run.conns.iter().map(|c| c.peer.out_reads.max(1) as u64).min().unwrap_or(1));
    }
    let cq_mod = (run.cfg.cq_mod.max(1) as u64).min(depth);
    let iters = if run.cfg.duration.is_some() { u64::MAX } else { run.cfg.iters };
    let (mut posted, mut done) = (vec![0u64; n], vec![0u64; n]);
    let start = Instant::now();
    let stop_posting = run.cfg.duration.map(|d| start + d);
    let mut last_print = start;
    let mut last_done = 0u64;
    let mut peak = 0f64;
    let mut window = (start, 0u64);
    loop {
        let posting = stop_posting.is_none_or(|t| Instant::now() < t);
        for i in 0..n {
            while posting && posted[i] < iters && posted[i] - done[i] < depth {
                let id = posted[i];
                let last = id + 1 == iters;
                post(run, i, size, id, last || (id + 1) % cq_mod == 0)?;
                posted[i] += 1;
            }
            if !posting && posted[i] > done[i] && (posted[i] % cq_mod) != 0 && posted[i] - done[i] < depth {
                // Duration mode: the WRs after the last signaled one need a signaled follower.
                // With the send queue full, wait: a signaled WR (every cq_mod-th, cq_mod <= depth)
                // is among the outstanding ones and its completion makes room.
                post(run, i, size, posted[i], true)?;
                posted[i] += 1;
            }
        }
        run.port.poll()?;
        drain_cqs(run, |i, w| done[i] = done[i].max(w.wr_id + 1))?;
        let total: u64 = done.iter().sum();
        let now = Instant::now();
        if total - window.1 >= cq_mod * n as u64 * 4 {
            let dt = now.duration_since(window.0).as_secs_f64();
            if dt > 0.0 {
                peak = peak.max((total - window.1) as f64 * size as f64 / dt);
            }
            window = (now, total);
        }
        if run.cfg.progress && now.duration_since(last_print) >= Duration::from_secs(1) {
            let bw = (total - last_done) as f64 * size as f64 / now.duration_since(last_print).as_secs_f64();
            eprint!(
                "\r {size} B: {total} messages, {:.2} {}   ",
                report::scale(bw, run.cfg.report_gbits),
                report::unit(run.cfg.report_gbits)
            );
            last_print = now;
            last_done = total;
        }
        let finished = (0..n).all(|i| done[i] == posted[i] && (!posting || posted[i] >= iters));
        if finished {
            break;
        }
    }
    if run.cfg.progress && last_print != start {
        // Erase the progress line, so that it never stays between the table's rows.
        eprint!("\r\x1b[2K");
    }
    let elapsed = start.elapsed().as_secs_f64();
    let total: u64 = done.iter().sum();
    let avg = total as f64 * size as f64 / elapsed;
    Ok(BwResult { size, iters: total, bw_peak: peak.max(avg), bw_avg: avg, msg_rate: total as f64 / elapsed / 1e6 })
}

fn to_report(r: &BwResult, gbits: bool) -> BwReport {
    BwReport {
        size: r.size as u64,
        iters: r.iters,
        bw_peak: report::scale(r.bw_peak, gbits),
        bw_avg: report::scale(r.bw_avg, gbits),
        msg_rate_avg: r.msg_rate,
        per_port: None,
    }
}

fn client_side(run: &mut Run) -> Result<Option<BwResult>> {
    run.session()?.start().map_err(|e| anyhow!(e))?;
    report::bw_table_header(run)?;
    let mut last = None;
    for size in sizes(run) {
        let r = measure(run, size)?;
        report::bw_line(run, &r)?;
        last = Some(r);
    }
    report::rule(run)?;
    let r = last.expect("at least one size");
    let gbits = run.cfg.report_gbits;
    run.finish(Some(to_report(&r, gbits)))?;
    Ok(Some(r))
}

/// write/read/atomic bw server: the client drives; we only answer. perftest's server prints
/// the client's report as its own.
fn passive_server(run: &mut Run) -> Result<Option<BwResult>> {
    run.session()?.start().map_err(|e| anyhow!(e))?;
    report::bw_table_header(run)?;
    let fin = run.finish(Some(BwReport::default()))?;
    let r = fin.peer_report.map(|p| BwResult {
        size: p.size as usize,
        iters: p.iters,
        bw_peak: report::unscale(p.bw_peak, run.cfg.report_gbits),
        bw_avg: report::unscale(p.bw_avg, run.cfg.report_gbits),
        msg_rate: p.msg_rate_avg,
    });
    if let Some(r) = &r {
        report::bw_line(run, r)?;
    }
    report::rule(run)?;
    Ok(r)
}

fn send_client(run: &mut Run) -> Result<Option<BwResult>> {
    run.session()?.start().map_err(|e| anyhow!(e))?;
    report::bw_table_header(run)?;
    let r = measure(run, run.cfg.size)?;
    report::bw_line(run, &r)?;
    report::rule(run)?;
    run.finish(None)?;
    Ok(Some(r))
}

fn post_recv(run: &mut Run, i: usize, wr_id: u64) -> Result<()> {
    let c = &run.conns[i];
    let sg = [Sge { addr: c.mr.addr, length: run.buf_size as u32, lkey: c.mr.lkey }];
    let qpn = c.qpn;
    run.port.device().post_recv(qpn, &RecvWr { wr_id, sg_list: &sg })?;
    Ok(())
}

/// send_bw server: keep receives posted, count what arrives, measure like the client.
fn send_server(run: &mut Run) -> Result<Option<BwResult>> {
    let n = run.conns.len();
    let depth = run.cfg.rx_depth.max(1) as u64;
    for i in 0..n {
        for k in 0..depth.min(run.cfg.iters) {
            post_recv(run, i, k)?;
        }
    }
    run.session()?.start().map_err(|e| anyhow!(e))?;
    report::bw_table_header(run)?;
    let iters = if run.cfg.duration.is_some() { u64::MAX } else { run.cfg.iters };
    let mut got = vec![0u64; n];
    let mut posted = vec![depth.min(run.cfg.iters); n];
    let mut first: Option<Instant> = None;
    let mut last = Instant::now();
    // Until every QP received its messages (iterations), or the client closes (duration).
    let session = run.session.take().ok_or_else(|| anyhow!("session closed"))?;
    let closer = std::thread::spawn(move || session.finish(None));
    loop {
        run.port.poll()?;
        let mut new = vec![0u64; n];
        drain_cqs(run, |i, _| new[i] += 1)?;
        for i in 0..n {
            if new[i] > 0 {
                first.get_or_insert_with(Instant::now);
                last = Instant::now();
            }
            got[i] += new[i];
            while posted[i] < iters && posted[i] - got[i] < depth {
                post_recv(run, i, posted[i])?;
                posted[i] += 1;
            }
        }
        if got.iter().all(|&g| g >= iters) || (run.cfg.duration.is_some() && closer.is_finished()) {
            break;
        }
        if closer.is_finished() && iters != u64::MAX {
            // The client closed before we saw everything.
            break;
        }
    }
    while !closer.is_finished() {
        run.port.drive(Duration::from_millis(5), |_| false)?;
    }
    closer.join().map_err(|_| anyhow!("perftest exchange thread panicked"))?.map_err(|e| anyhow!(e))?;
    let total: u64 = got.iter().sum();
    let elapsed = first.map_or(1e-9, |f| last.duration_since(f).as_secs_f64().max(1e-9));
    let size = run.cfg.size;
    let avg = total as f64 * size as f64 / elapsed;
    let r = BwResult { size, iters: total, bw_peak: avg, bw_avg: avg, msg_rate: total as f64 / elapsed / 1e6 };
    report::bw_line(run, &r)?;
    report::rule(run)?;
    Ok(Some(r))
}
