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
use super::{drain_cqs, Run, Test};
use anyhow::{anyhow, bail, Result};
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
    if test == Test::SendLat {
        // Receives are posted before the start barrier, as perftest's server and client do.
        for k in 0..run.cfg.rx_depth.max(1) as u64 {
            post_recv(run, k)?;
        }
    }
    run.session()?.start().map_err(|e| anyhow!(e))?;
    if test == Test::ReadLat && !client {
        // perftest's read_lat server prints the header and waits for the client to finish.
        report::rule(run)?;
        run.finish(None)?;
        return Ok(None);
    }
    report::lat_table_header(run)?;
    for size in sizes {
        let samples = match test {
            Test::WriteLat => ping_pong(run, size, client, false)?,
            Test::SendLat => ping_pong(run, size, client, true)?,
            _ => read_lat(run, size)?,
        };
        let mut r = LatResult::from_samples(size, samples);
        r.iters = run.cfg.iters;
        report::lat_line(run, &r)?;
    }
    report::rule(run)?;
    run.finish(None)?;
    Ok(None)
}

fn post(run: &mut Run, op: WrOpcode, size: usize) -> Result<()> {
    let c = &run.conns[0];
    let sg = [Sge { addr: c.mr.addr + run.buf_size as u64, length: size as u32, lkey: c.mr.lkey }];
    let wr = SendWr {
        wr_id: 0,
        sg_list: &sg,
        opcode: op,
        send_flags: SendFlags::SIGNALED,
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
    let sg = [Sge { addr: c.mr.addr, length: run.buf_size as u32, lkey: c.mr.lkey }];
    let qpn = c.qpn;
    run.port.device().post_recv(qpn, &RecvWr { wr_id, sg_list: &sg })?;
    Ok(())
}

/// Byte `off` of our buffer.
fn byte(run: &Run, off: usize) -> u8 {
    run.port.device_ref().mr(run.conns[0].mr.lkey).map_or(0, |m| m.as_slice()[off])
}

fn set_byte(run: &mut Run, off: usize, v: u8) {
    let lkey = run.conns[0].mr.lkey;
    if let Some(m) = run.port.device().mr_mut(lkey) {
        m.as_mut_slice()[off] = v;
    }
}

/// Reap completions: sends are counted in `ccnt`, receives in `recvd` (each receive is
/// replaced by a new one, as perftest's send_lat re-posts one per message).
fn reap(run: &mut Run, ccnt: &mut u64, recvd: &mut u64) -> Result<()> {
    let mut got = 0u64;
    drain_cqs(run, |_, w| {
        if w.opcode == WcOpcode::Recv {
            got += 1;
        } else {
            *ccnt += 1;
        }
    })?;
    for _ in 0..got {
        *recvd += 1;
        post_recv(run, *recvd + run.cfg.rx_depth as u64)?;
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
    let poll_off = size - 1;
    let post_off = run.buf_size + size - 1;
    if !send {
        set_byte(run, poll_off, 0);
    }
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
                    byte(run, poll_off) == rcnt as u8
                };
                if arrived {
                    break;
                }
                if !run.port.poll()? && start.elapsed() > STALL {
                    bail!("no message {rcnt} from the peer for {STALL:?}");
                }
            }
        }
        if scnt < iters {
            scnt += 1;
            set_byte(run, post_off, scnt as u8);
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
            if !run.port.poll()? && start.elapsed() > STALL {
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
            run.port.poll()?;
            drain_cqs(run, |_, _| done = true)?;
            if !done && start.elapsed() > STALL {
                bail!("READ not completed after {STALL:?}");
            }
        }
    }
    Ok(posted_at.windows(2).map(|w| w[1].duration_since(w[0]).as_secs_f64() * 1e6).collect())
}
