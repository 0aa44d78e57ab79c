//! Bandwidth tests: write_bw, read_bw, send_bw, atomic_bw — one-way and bidirectional (`-b`),
//! one size or all (`-a`), as perftest's `main`s run them.
//!
//! The out-of-band steps after the start barrier (H = a key handshake as a barrier, R = the
//! report exchange, C = the close; perftest 4.5 and 25.01 alike):
//!
//! | test | one-way | `-b` | `-a` one-way | `-a -b` |
//! |---|---|---|---|---|
//! | write/read/atomic | client: traffic, H, R, C; server: H, R, C | H, traffic, R, C | client: sizes' traffic, H, R (last size), C | per size: H, traffic, H, R; then C |
//! | send | traffic, C | traffic, R, C | per size: H (the first is the start), traffic, H; C | per size: H, traffic, R, H; C |
//!
//! `-b` is not negotiated (perftest takes it from each side's command line), so both sides must
//! be given it; in duplex both sides post to the other's advertised region, and each prints the
//! sum of both sides' figures.

use super::report::{self, BwResult};
use super::{drain_cqs, progress, AtomicType, Run, Test};
use anyhow::{bail, Result};
use std::time::{Duration, Instant};
use uroce_rxe_compat::perftest::BwReport;
use uroce_transport::*;

/// A receiver that sees no message for this long gives up (perftest's `check_alive`: 120 s).
const STALL: Duration = Duration::from_secs(120);

pub(crate) fn run(run: &mut Run) -> Result<Option<BwResult>> {
    let client = run.cfg.host.is_some();
    if run.cfg.test == Test::SendBw {
        return send_flow(run);
    }
    if run.cfg.bidirectional {
        duplex(run)
    } else if client {
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
    let local = Sge { addr: c.send_addr, length: size as u32, lkey: c.lkey };
    let mut flags = if signaled { SendFlags::SIGNALED } else { SendFlags::NONE };
    let inline_ok = matches!(run.cfg.test, Test::WriteBw | Test::SendBw);
    if inline_ok && size as u32 <= run.cfg.inline() {
        flags |= SendFlags::INLINE;
    }
    let sg = [local];
    let mut wr = SendWr {
        wr_id,
        sg_list: &sg,
        send_flags: flags,
        remote_addr: c.peer.vaddr,
        rkey: c.peer.rkey,
        ..Default::default()
    };
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

fn post_recv(run: &mut Run, i: usize, wr_id: u64) -> Result<()> {
    let c = &run.conns[i];
    let sg = [Sge { addr: c.recv_addr, length: run.buf_size as u32, lkey: c.lkey }];
    let qpn = c.qpn;
    run.port.device().post_recv(qpn, &RecvWr { wr_id, sg_list: &sg })?;
    Ok(())
}

/// What one side's measurement of one size does: send (post the test's WRs), receive (keep
/// receives posted, count what arrives), or both (send_bw `-b`).
#[derive(Clone, Copy)]
struct Roles {
    send: bool,
    recv: bool,
    /// The send_bw duplex server sends nothing before its first receive (`before_first_rx`).
    wait_first_rx: bool,
}

/// Post and complete `iters` WRs of `size` bytes on every QP (or run for the duration),
/// keeping at most `tx_depth` outstanding, posting `-l` WRs at a time and signaling every
/// `cq_mod`-th (perftest's `run_iter_bw`); receive side: `run_iter_bw_server` / `run_iter_bi`.
/// The result is the send side's figures, or the receive side's for a receiver only.
fn measure(run: &mut Run, size: usize, roles: Roles) -> Result<BwResult> {
    let n = run.conns.len();
    let mut depth = run.cfg.tx_depth.max(1) as u64;
    if run.cfg.test.needs_reads() {
        // At most max_rd_atomic READs/atomics can be outstanding (the engine would hold the rest).
        depth = depth.min(run.conns.iter().map(|c| c.peer.out_reads.max(1) as u64).min().unwrap_or(1));
    }
    let list = run.cfg.post_list.unwrap_or(1).max(1) as u64;
    let cq_mod = (run.cfg.cq_mod.max(1) as u64).min(depth);
    let iters = if run.cfg.duration.is_some() { u64::MAX } else { run.cfg.iters };
    let (mut posted, mut done) = (vec![0u64; n], vec![0u64; n]);
    let (mut rposted, mut got, mut rx) = (vec![0u64; n], vec![0u64; n], vec![0u64; n]);
    // The receives of the first `rx_depth` messages were posted by the caller, before the
    // barrier that lets the peer send.
    let rx_depth = (run.cfg.rx_depth.max(1) as u64).min(iters);
    if roles.recv {
        rposted.fill(rx_depth);
    }
    run.cpu_start();
    let start = Instant::now();
    let stop_posting = run.cfg.duration.map(|d| start + d);
    let (mut first_rx, mut last_rx) = (None::<Instant>, start);
    let mut last_print = start;
    let mut last_done = 0u64;
    let mut peak = 0f64;
    let mut window = (start, 0u64);
    loop {
        let posting = stop_posting.is_none_or(|t| Instant::now() < t);
        let may_send = roles.send && (!roles.wait_first_rx || first_rx.is_some());
        for i in 0..n {
            while may_send && posting && posted[i] < iters && posted[i] - done[i] + list <= depth {
                // A list of `list` WRs (one at a time without -l): WR k is signaled every
                // cq_mod-th and at the end.
                for _ in 0..list {
                    let id = posted[i];
                    let last = id + 1 == iters;
                    post(run, i, size, id, last || (id + 1) % cq_mod == 0)?;
                    posted[i] += 1;
                }
            }
            if may_send && !posting && posted[i] > done[i] && (posted[i] % cq_mod) != 0 && posted[i] - done[i] < depth {
                // Duration mode: the WRs after the last signaled one need a signaled follower.
                // With the send queue full, wait: a signaled WR (every cq_mod-th, cq_mod <= depth)
                // is among the outstanding ones and its completion makes room.
                post(run, i, size, posted[i], true)?;
                posted[i] += 1;
            }
        }
        progress(run)?;
        rx.fill(0);
        drain_cqs(run, |i, w| {
            if w.opcode == WcOpcode::Recv {
                rx[i] += 1;
            } else {
                done[i] = done[i].max(w.wr_id + 1);
            }
        })?;
        let now = Instant::now();
        for i in 0..n {
            if rx[i] > 0 {
                first_rx.get_or_insert(now);
                last_rx = now;
                got[i] += rx[i];
            }
            // Re-post while fewer than `iters` were ever posted: every receive of a size is
            // consumed by that size (perftest posts exactly `iters` per QP).
            while roles.recv && rposted[i] < iters && rposted[i] - got[i] < rx_depth {
                post_recv(run, i, rposted[i])?;
                rposted[i] += 1;
            }
        }
        if roles.recv && !roles.send && first_rx.is_some_and(|_| now.duration_since(last_rx) > STALL) {
            bail!(
                "Did not get Message for {} Seconds, exiting (received {})",
                STALL.as_secs(),
                got.iter().sum::<u64>()
            );
        }
        let total: u64 = if roles.send { done.iter().sum() } else { got.iter().sum() };
        // Peak: the best rate over windows of at least 4 completion batches and 1 ms (shorter
        // windows measure the timer, not the link).
        let dt = now.duration_since(window.0).as_secs_f64();
        if total - window.1 >= cq_mod * n as u64 * 4 && dt >= 1e-3 {
            peak = peak.max((total - window.1) as f64 * size as f64 / dt);
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
        let sent = !roles.send || (0..n).all(|i| done[i] == posted[i] && (!posting || posted[i] >= iters));
        // In duration mode a duplex side stops when its own sending time is over (it goes on
        // receiving while it closes: see `send_flow`); a one-way receiver never runs here.
        let received = !roles.recv || run.cfg.duration.is_some() || got.iter().all(|&g| g >= iters);
        if sent && received {
            break;
        }
    }
    if run.cfg.progress && last_print != start {
        // Erase the progress line, so that it never stays between the table's rows.
        eprint!("\r\x1b[2K");
    }
    let cpu_util = run.cpu_end();
    let (total, elapsed) = if roles.send {
        (done.iter().sum::<u64>(), start.elapsed().as_secs_f64())
    } else {
        (got.iter().sum(), first_rx.map_or(1e-9, |f| last_rx.duration_since(f).as_secs_f64().max(1e-9)))
    };
    let avg = total as f64 * size as f64 / elapsed;
    let bw_peak = if run.cfg.no_peak || !roles.send { 0.0 } else { peak.max(avg) };
    Ok(BwResult { size, iters: total, bw_peak, bw_avg: avg, msg_rate: total as f64 / elapsed / 1e6, cpu_util })
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

fn from_report(p: &BwReport, gbits: bool) -> BwResult {
    BwResult {
        size: p.size as usize,
        iters: p.iters,
        bw_peak: report::unscale(p.bw_peak, gbits),
        bw_avg: report::unscale(p.bw_avg, gbits),
        msg_rate: p.msg_rate_avg,
        cpu_util: None,
    }
}

const SENDER: Roles = Roles { send: true, recv: false, wait_first_rx: false };

fn client_side(run: &mut Run) -> Result<Option<BwResult>> {
    run.oob(|s| s.start())?;
    report::bw_table_header(run)?;
    let mut last = None;
    for size in sizes(run) {
        let r = measure(run, size, SENDER)?;
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
    run.oob(|s| s.start())?;
    report::bw_table_header(run)?;
    let fin = run.finish(Some(BwReport::default()))?;
    let r = fin.peer_report.map(|p| from_report(&p, run.cfg.report_gbits));
    if let Some(r) = &r {
        report::bw_line(run, r)?;
    }
    report::rule(run)?;
    Ok(r)
}

/// write/read/atomic bw with `-b`: both sides post to the other; per size H, traffic, (H with
/// `-a`), R, and the summed line; then C.
fn duplex(run: &mut Run) -> Result<Option<BwResult>> {
    run.oob(|s| s.start())?;
    report::bw_table_header(run)?;
    let all = run.cfg.all_sizes;
    let mut last = None;
    for size in sizes(run) {
        run.oob(|s| s.barrier())?;
        let mine = measure(run, size, SENDER)?;
        if all {
            run.oob(|s| s.barrier())?;
        }
        last = Some(exchange_and_print(run, &mine, !all)?);
    }
    report::rule(run)?;
    run.close()?;
    Ok(last)
}

/// R, then the summed line (and `--report-both`'s blocks, single-size runs only).
fn exchange_and_print(run: &mut Run, mine: &BwResult, report_both: bool) -> Result<BwResult> {
    let gbits = run.cfg.report_gbits;
    let rep = to_report(mine, gbits);
    let theirs = from_report(&run.oob(move |s| s.exchange_report(&rep))?, gbits);
    let sum = mine.plus(&theirs);
    report::bw_line(run, &sum)?;
    if report_both && run.cfg.report_both {
        report::report_both(run, mine, &theirs)?;
    }
    Ok(sum)
}

/// send_bw, every variant: receives posted before each size's barrier by the receiving side(s),
/// the sender's figures one-way (the server prints its own, peak 0.00 as perftest forces
/// noPeak there), the sum with `-b`.
fn send_flow(run: &mut Run) -> Result<Option<BwResult>> {
    let client = run.cfg.host.is_some();
    let duplex = run.cfg.bidirectional;
    let roles = Roles { send: client || duplex, recv: !client || duplex, wait_first_rx: duplex && !client };
    let all = run.cfg.all_sizes;
    let mut last = None;
    for (k, size) in sizes(run).into_iter().enumerate() {
        if roles.recv {
            // Receives first, so the peer's messages never meet an empty queue.
            for i in 0..run.conns.len() {
                let want = (run.cfg.rx_depth.max(1) as u64).min(run.cfg.iters);
                for w in 0..want {
                    post_recv(run, i, w)?;
                }
            }
        }
        if k == 0 {
            run.oob(|s| s.start())?;
            report::bw_table_header(run)?;
        } else {
            run.oob(|s| s.barrier())?;
        }
        let r = if !roles.send && run.cfg.duration.is_some() {
            // One-way duration: the receiver counts until the sender closes the session.
            duration_receiver(run, size)?
        } else {
            measure(run, size, roles)?
        };
        if duplex && run.cfg.duration.is_some() {
            // Our sending time is over; the peer's may not be: keep receiving until it closes.
            duration_receiver(run, size)?;
        }
        let r = if duplex && run.cfg.duration.is_none() {
            exchange_and_print(run, &r, !all)?
        } else {
            report::bw_line(run, &r)?;
            r
        };
        last = Some(r);
        if all {
            run.oob(|s| s.barrier())?;
        }
    }
    report::rule(run)?;
    if run.session.is_some() {
        run.close()?;
    }
    Ok(last)
}

/// One-way send_bw server in duration mode: receive (re-posting) until the client has sent
/// for its duration and closed the session.
fn duration_receiver(run: &mut Run, size: usize) -> Result<BwResult> {
    let session = run.session.take().ok_or_else(|| anyhow::anyhow!("session closed"))?;
    let closer = std::thread::spawn(move || session.close());
    let n = run.conns.len();
    let depth = run.cfg.rx_depth.max(1) as u64;
    let (mut got, mut posted) = (vec![0u64; n], vec![depth; n]);
    let (mut first, mut last) = (None::<Instant>, Instant::now());
    while !closer.is_finished() {
        progress(run)?;
        let mut new = vec![0u64; n];
        drain_cqs(run, |i, _| new[i] += 1)?;
        for i in 0..n {
            if new[i] > 0 {
                first.get_or_insert_with(Instant::now);
                last = Instant::now();
            }
            got[i] += new[i];
            while posted[i] - got[i] < depth {
                post_recv(run, i, posted[i])?;
                posted[i] += 1;
            }
        }
    }
    closer.join().map_err(|_| anyhow::anyhow!("perftest exchange thread panicked"))?.map_err(|e| anyhow::anyhow!(e))?;
    let total: u64 = got.iter().sum();
    let elapsed = first.map_or(1e-9, |f| last.duration_since(f).as_secs_f64().max(1e-9));
    let avg = total as f64 * size as f64 / elapsed;
    Ok(BwResult {
        size,
        iters: total,
        bw_peak: 0.0,
        bw_avg: avg,
        msg_rate: total as f64 / elapsed / 1e6,
        cpu_util: None,
    })
}
