//! Latency tests: write_lat, read_lat, send_lat, as perftest runs them.
//!
//! * write_lat (`run_iter_lat_write`): ping-pong through memory. Each side polls the last byte of
//!   a message in its advertised region (the first half of its buffer) for the peer's counter,
//!   then writes its own counter (`++scnt`) as the last byte of a message sent from the second
//!   half. The *server* writes first (`!(scnt < 1 && machine == SERVER)` in perftest 4.5 to
//!   25.x). Latency = half the time between consecutive posts.
//! * send_lat (`run_iter_lat_send`): the same ping-pong with SEND/RECV completions; here the
//!   *client* sends first (`!(scnt < 1 && machine == CLIENT)`).
//! * read_lat (`run_iter_lat`): the client issues one READ at a time; latency = time between
//!   consecutive posts (a whole round trip). The server only answers.

use super::report::{self, LatResult};
use super::{drain_cqs, progress, Run, Test};
use anyhow::{bail, Result};
use std::time::{Duration, Instant};
use uroce_transport::*;

/// A side that sees no progress for this long gives up (the peer is gone).
const STALL: Duration = Duration::from_secs(10);

pub(crate) fn run(run: &mut Run) -> Result<Option<report::BwResult>> {
    let sizes: Vec<usize> =
        if run.cfg.all_sizes { (1..=23).map(|k| 1usize << k).collect() } else { vec![run.cfg.size] };
    if run.cfg.qps != 1 {
        bail!("latency tests use one QP (-q 1)");
    }
    let client = run.cfg.host.is_some();
    let test = run.cfg.test;
    if test == Test::ReadLat && !client {
        // perftest's read_lat server prints the header and waits for the client to finish.
        run.oob(|s| s.start())?;
        report::rule(run)?;
        run.finish(None)?;
        return Ok(None);
    }
    for (k, size) in sizes.into_iter().enumerate() {
        if test == Test::SendLat {
            // Each size: both sides post their receives, then sync (perftest: "so the client
            // won't send packets before the server has posted his receive wqes").
            for w in 0..(run.cfg.rx_depth.max(1) as u64).min(run.cfg.iters) {
                post_recv(run, w)?;
            }
        }
        // write_lat and read_lat sync once; send_lat once per size.
        if k == 0 {
            run.oob(|s| s.start())?;
            report::lat_table_header(run)?;
        } else if test == Test::SendLat {
            run.oob(|s| s.barrier())?;
        }
        let samples = match test {
            Test::WriteLat => ping_pong(run, size, client, false)?,
            Test::SendLat => ping_pong(run, size, client, true)?,
            _ => read_lat(run, size)?,
        };
        let r = LatResult::from_samples(size, run.cfg.iters, samples);
        report::lat_line(run, &r)?;
    }
    report::rule(run)?;
    run.finish(None)?;
    Ok(None)
}

fn post(run: &mut Run, op: WrOpcode, size: usize) -> Result<()> {
    let c = &run.conns[0];
    let sg = [Sge { addr: c.send_addr, length: size as u32, lkey: c.lkey }];
    let mut flags = SendFlags::SIGNALED;
    if op != WrOpcode::RdmaRead && size as u32 <= run.cfg.inline() {
        flags |= SendFlags::INLINE;
    }
    let wr = SendWr {
        wr_id: 0,
        sg_list: &sg,
        opcode: op,
        send_flags: flags,
        remote_addr: c.peer.vaddr,
        rkey: c.peer.rkey,
        ..Default::default()
    };
    let qpn = c.qpn;
    run.port.device().post_send(qpn, &wr)?;
    Ok(())
}

fn post_recv(run: &mut Run, wr_id: u64) -> Result<()> {
    let c = &run.conns[0];
    let sg = [Sge { addr: c.recv_addr, length: run.buf_size as u32, lkey: c.lkey }];
    let qpn = c.qpn;
    run.port.device().post_recv(qpn, &RecvWr { wr_id, sg_list: &sg })?;
    Ok(())
}

/// Reap completions: sends are counted in `ccnt`, receives in `recvd`; each receive is
/// replaced while fewer than `iters` were posted for this size (perftest's send_lat re-posts
/// while `rcnt + size_per_qp <= iters`, so a size consumes all of its receives).
fn reap(run: &mut Run, ccnt: &mut u64, recvd: &mut u64) -> Result<()> {
    let mut got = 0u64;
    drain_cqs(run, |_, w| {
        if w.opcode == WcOpcode::Recv {
            got += 1;
        } else {
            *ccnt += 1;
        }
    })?;
    let prepost = (run.cfg.rx_depth.max(1) as u64).min(run.cfg.iters);
    for _ in 0..got {
        *recvd += 1;
        if *recvd + prepost <= run.cfg.iters {
            post_recv(run, *recvd + prepost)?;
        }
    }
    Ok(())
}

/// One ping-pong measurement; returns half round trips in microseconds.
///
/// Each round as perftest's `run_iter_lat_write` / `run_iter_lat_send`: wait for the peer's
/// message number `rcnt` (except the side that goes first, in its first round), post ours, then
/// wait for *its* completion before the next round. The send queue is one deep (`-t 1`), so
/// posting before the previous send completed would fail; and the peer's next message can
/// arrive before our ACK does (rxe defers ACKs), so its completion is counted, not lost.
fn ping_pong(run: &mut Run, size: usize, client: bool, send: bool) -> Result<Vec<f64>> {
    let iters = run.cfg.iters.max(2);
    let size = size.max(1);
    let (lkey, poll_at, post_at) = {
        let c = &run.conns[0];
        (c.lkey, c.recv_addr + size as u64 - 1, c.send_addr + size as u64 - 1)
    };
    // No byte is cleared between sizes (perftest neither): the region starts zeroed, and a
    // size's last byte lies beyond everything smaller sizes wrote, while the peer may already
    // have written this size's first message there.
    // Who goes first, as perftest: the server in write_lat (run_iter_lat_write), the client
    // in send_lat (run_iter_lat_send). Both sides waiting first would deadlock.
    let first = if send { client } else { !client };
    let (mut scnt, mut rcnt, mut ccnt, mut recvd) = (0u64, 0u64, 0u64, 0u64);
    let mut posted_at = Vec::with_capacity(iters as usize);
    while scnt < iters || rcnt < iters || ccnt < iters {
        if rcnt < iters && !(scnt < 1 && first) {
            rcnt += 1;
            // Wait for the peer's message number rcnt.
            let start = Instant::now();
            loop {
                let arrived = if send {
                    reap(run, &mut ccnt, &mut recvd)?;
                    recvd >= rcnt
                } else {
                    run.byte(lkey, poll_at) == rcnt as u8
                };
                if arrived {
                    break;
                }
                if !progress(run)? && start.elapsed() > STALL {
                    bail!("no message {rcnt} from the peer for {STALL:?}");
                }
            }
        }
        if scnt < iters {
            scnt += 1;
            run.set_byte(lkey, post_at, scnt as u8);
            posted_at.push(Instant::now());
            post(run, if send { WrOpcode::Send } else { WrOpcode::RdmaWrite }, size)?;
        }
        // Wait for our send's completion (perftest: `ibv_poll_cq` until one arrives).
        let start = Instant::now();
        loop {
            reap(run, &mut ccnt, &mut recvd)?;
            if ccnt >= scnt {
                break;
            }
            if !progress(run)? && start.elapsed() > STALL {
                bail!("send {scnt} not completed after {STALL:?}");
            }
        }
    }
    Ok(posted_at.windows(2).map(|w| w[1].duration_since(w[0]).as_secs_f64() * 1e6 / 2.0).collect())
}

/// read_lat: one READ at a time; full round trips in microseconds.
fn read_lat(run: &mut Run, size: usize) -> Result<Vec<f64>> {
    let iters = run.cfg.iters.max(2);
    let mut posted_at = Vec::with_capacity(iters as usize);
    for _ in 0..iters {
        posted_at.push(Instant::now());
        post(run, WrOpcode::RdmaRead, size)?;
        let start = Instant::now();
        let mut done = false;
        while !done {
            progress(run)?;
            drain_cqs(run, |_, _| done = true)?;
            if !done && start.elapsed() > STALL {
                bail!("READ not completed after {STALL:?}");
            }
        }
    }
    Ok(posted_at.windows(2).map(|w| w[1].duration_since(w[0]).as_secs_f64() * 1e6).collect())
}
