//! `uroce tool tcp-pingpong`: the kernel TCP latency baseline for `uroce perf write_lat`.
//!
//! A client sends `size` bytes over a TCP_NODELAY connection, the server echoes them, the
//! client waits for all of them: one round trip. Like perftest's ping-pong latency tests
//! (`ib_write_lat` reports RTT/2), the result is the one-way latency, half of each measured
//! round trip, summarised as min / typical (median) / avg / p99 / p99.9 / max / stdev.
//! `--busy-poll` makes both sides spin on non-blocking sockets instead of sleeping.

use crate::cli::limits;
use anyhow::{bail, Context, Result};
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::process::ExitCode;
use std::time::{Duration, Instant};

pub(super) const LONG_ABOUT: &str = "\
TCP ping-pong (TCP_NODELAY) latency, the kernel baseline for `uroce perf write_lat`.

  server: uroce tool tcp-pingpong --server --bind ADDR:PORT [--busy-poll]
  client: uroce tool tcp-pingpong --client ADDR:PORT [--size N] [--iters N] [--busy-poll]

The server accepts one connection, echoes every byte it receives until the client closes,
prints its summary and exits. The client connects (retrying for --connect-secs while the
server is not up yet), runs --warmup untimed round trips, then --iters timed ones: each
sends --size bytes and waits for all of them to come back. As perftest's latency tests do,
the reported latency is one-way: half the round-trip time. By default both sides sleep in
the kernel between messages (a wake-up per message; across CPUs of a VM that costs tens of
microseconds); with --busy-poll (give it to both sides) they spin on non-blocking sockets,
as perftest spins on its completion queue.

Output (stdout, one line):
  server: tcp-pingpong server listening addr=ADDR:PORT        (when ready to accept)
          tcp-pingpong server bytes=N secs=F                  (when the client is done)
  client: tcp-pingpong client size=N iters=N min_us=F typical_us=F avg_us=F p99_us=F
              p999_us=F max_us=F stdev_us=F busy_poll=0|1
(the client line is one line; wrapped here). typical = median, as perftest's t_typical.
Exit status 0 on success, 2 on errors.";

/// Arguments of `uroce tool tcp-pingpong`.
#[derive(clap::Args, Debug)]
#[command(group(clap::ArgGroup::new("role").required(true).args(["server", "client"])))]
pub struct TcpPingpongArgs {
    /// Run the echo server (with --bind).
    #[arg(long, requires = "bind")]
    pub server: bool,
    /// Server: address to listen on.
    #[arg(long)]
    pub bind: Option<String>,
    /// Run the client against the server at ADDR:PORT.
    #[arg(long, value_name = "ADDR:PORT")]
    pub client: Option<String>,
    /// Client: message size in bytes.
    #[arg(long, default_value_t = 8, value_parser = limits::TCP_PINGPONG_SIZE.parser())]
    pub size: u64,
    /// Client: timed round trips.
    #[arg(long, default_value_t = 10_000, value_parser = limits::TCP_PINGPONG_ITERS.parser())]
    pub iters: u64,
    /// Client: untimed round trips first.
    #[arg(long, default_value_t = 100, value_parser = limits::TCP_PINGPONG_WARMUP.parser())]
    pub warmup: u64,
    /// Client: keep retrying the connection this long (seconds).
    #[arg(long, default_value_t = 10.0, value_parser = connect_secs)]
    pub connect_secs: f64,
    /// Spin on non-blocking reads instead of sleeping in the kernel (as perftest polls its
    /// CQ): takes a core per side, removes the wake-up latency. Give it to both sides.
    #[arg(long)]
    pub busy_poll: bool,
}

/// Run `uroce tool tcp-pingpong`.
pub fn run(a: &TcpPingpongArgs) -> Result<ExitCode> {
    match (&a.bind, &a.client) {
        (Some(addr), None) if a.server => server(addr, a.busy_poll),
        (None, Some(addr)) => client(a, addr),
        _ => bail!("use either --server --bind ADDR:PORT or --client ADDR:PORT"),
    }
}

fn resolve(addr: &str) -> Result<SocketAddr> {
    addr.to_socket_addrs()
        .with_context(|| format!("address {addr:?}"))?
        .next()
        .with_context(|| format!("address {addr:?} resolves to nothing"))
}

/// `read` that spins on `WouldBlock` (non-blocking sockets) and retries `Interrupted`.
fn read_some(s: &mut TcpStream, buf: &mut [u8]) -> std::io::Result<usize> {
    loop {
        match s.read(buf) {
            Err(e) if e.kind() == ErrorKind::WouldBlock => std::hint::spin_loop(),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            r => return r,
        }
    }
}

/// `write_all` that spins on `WouldBlock`.
fn write_all(s: &mut TcpStream, mut buf: &[u8]) -> std::io::Result<()> {
    while !buf.is_empty() {
        match s.write(buf) {
            Ok(0) => return Err(ErrorKind::WriteZero.into()),
            Ok(n) => buf = &buf[n..],
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => std::hint::spin_loop(),
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// `read_exact` that spins on `WouldBlock`.
fn read_exact(s: &mut TcpStream, mut buf: &mut [u8]) -> std::io::Result<()> {
    while !buf.is_empty() {
        match read_some(s, buf)? {
            0 => return Err(ErrorKind::UnexpectedEof.into()),
            n => buf = &mut buf[n..],
        }
    }
    Ok(())
}

fn server(addr: &str, busy_poll: bool) -> Result<ExitCode> {
    let listener = TcpListener::bind(resolve(addr)?).with_context(|| format!("listen on {addr}"))?;
    println!("tcp-pingpong server listening addr={}", listener.local_addr()?);
    std::io::stdout().flush()?;
    let (mut conn, _) = listener.accept().context("accept")?;
    conn.set_nodelay(true)?;
    conn.set_nonblocking(busy_poll)?;
    let mut buf = vec![0u8; 64 * 1024];
    let mut total = 0u64;
    let start = Instant::now();
    loop {
        let n = match read_some(&mut conn, &mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == ErrorKind::ConnectionReset => break,
            Err(e) => return Err(e).context("read"),
        };
        write_all(&mut conn, &buf[..n]).context("echo")?;
        total += n as u64;
    }
    println!("tcp-pingpong server bytes={total} secs={:.6}", start.elapsed().as_secs_f64());
    Ok(ExitCode::SUCCESS)
}

fn connect(addr: SocketAddr, within: Duration) -> Result<TcpStream> {
    let deadline = Instant::now() + within;
    loop {
        match TcpStream::connect_timeout(&addr, Duration::from_secs(1)) {
            Ok(s) => return Ok(s),
            Err(e)
                if Instant::now() < deadline
                    && matches!(e.kind(), ErrorKind::ConnectionRefused | ErrorKind::TimedOut) =>
            {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => return Err(e).with_context(|| format!("connect to {addr}")),
        }
    }
}

/// Latency summary in microseconds (one-way = RTT/2).
#[derive(Debug, PartialEq)]
pub struct Summary {
    /// Minimum.
    pub min: f64,
    /// Median (perftest's t_typical).
    pub typical: f64,
    /// Mean.
    pub avg: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
    /// Maximum.
    pub max: f64,
    /// Standard deviation.
    pub stdev: f64,
}

/// Summarise one-way latencies (µs). Percentiles are nearest-rank on the sorted samples,
/// the median is the middle sample (perftest: `delta[iters / 2]`).
pub fn summarize(mut v: Vec<f64>) -> Option<Summary> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let rank = |p: f64| v[((p * n as f64).ceil() as usize).clamp(1, n) - 1];
    let avg = v.iter().sum::<f64>() / n as f64;
    let var = v.iter().map(|x| (x - avg) * (x - avg)).sum::<f64>() / n as f64;
    Some(Summary {
        min: v[0],
        typical: v[n / 2],
        avg,
        p99: rank(0.99),
        p999: rank(0.999),
        max: v[n - 1],
        stdev: var.sqrt(),
    })
}

/// `--connect-secs`: a finite number of seconds, at most a day.
fn connect_secs(v: &str) -> Result<f64, String> {
    let s: f64 = v.parse().map_err(|_| format!("`{v}` is not a number of seconds"))?;
    limits::CONNECT_TIMEOUT.check(s.ceil().max(0.0) as u64).map(|_| s.max(0.0)).map_err(|e| {
        if s.is_finite() {
            e
        } else {
            format!("`{v}` is not a finite number of seconds")
        }
    })
}

fn client(a: &TcpPingpongArgs, addr: &str) -> Result<ExitCode> {
    // The limits (cli::limits) already hold; check again for callers that build the args.
    for (l, v) in [(&limits::TCP_PINGPONG_SIZE, a.size), (&limits::TCP_PINGPONG_ITERS, a.iters)] {
        l.check(v).map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    let (size, iters, warmup) = (a.size as usize, a.iters as usize, a.warmup as usize);
    let mut s = connect(resolve(addr)?, Duration::from_secs_f64(a.connect_secs.max(0.0)))?;
    s.set_nodelay(true)?;
    s.set_nonblocking(a.busy_poll)?;
    let msg: Vec<u8> = (0..size).map(|i| i as u8).collect();
    let mut back = vec![0u8; size];
    let mut one_way_us = Vec::with_capacity(iters);
    for i in 0..warmup + iters {
        let t0 = Instant::now();
        write_all(&mut s, &msg).context("send")?;
        read_exact(&mut s, &mut back).context("receive the echo")?;
        let rtt = t0.elapsed();
        if i >= warmup {
            one_way_us.push(rtt.as_secs_f64() * 1e6 / 2.0);
        }
    }
    if back != msg {
        bail!("the echo differs from what was sent");
    }
    drop(s);
    let Some(r) = summarize(one_way_us) else { bail!("no samples") };
    println!(
        "tcp-pingpong client size={} iters={} min_us={:.3} typical_us={:.3} avg_us={:.3} p99_us={:.3} p999_us={:.3} \
         max_us={:.3} stdev_us={:.3} busy_poll={}",
        a.size,
        a.iters,
        r.min,
        r.typical,
        r.avg,
        r.p99,
        r.p999,
        r.max,
        r.stdev,
        u8::from(a.busy_poll)
    );
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_statistics() {
        let v: Vec<f64> = (1..=1000).rev().map(f64::from).collect();
        let s = summarize(v).unwrap();
        assert_eq!((s.min, s.typical, s.max), (1.0, 501.0, 1000.0));
        assert_eq!((s.p99, s.p999), (990.0, 999.0));
        assert!((s.avg - 500.5).abs() < 1e-9);
        assert!((s.stdev - 288.6749).abs() < 1e-3);
        assert_eq!(summarize(vec![]), None);
        let one = summarize(vec![3.5]).unwrap();
        assert_eq!((one.min, one.typical, one.p99, one.max, one.stdev), (3.5, 3.5, 3.5, 3.5, 0.0));
    }

    #[test]
    fn loopback_round_trips() {
        for busy_poll in [false, true] {
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = listener.local_addr().unwrap();
            drop(listener);
            let srv = std::thread::spawn(move || server(&addr.to_string(), busy_poll).unwrap());
            let a = TcpPingpongArgs {
                server: false,
                bind: None,
                client: Some(addr.to_string()),
                size: 3000,
                iters: 50,
                warmup: 5,
                connect_secs: 10.0,
                busy_poll,
            };
            assert_eq!(client(&a, &addr.to_string()).unwrap(), ExitCode::SUCCESS);
            assert_eq!(srv.join().unwrap(), ExitCode::SUCCESS);
        }
    }
}
