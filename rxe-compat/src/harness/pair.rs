//! Two-guest perftest runs driven over the guests' consoles.
//!
//! Contract: both guests must have been booted with [`GuestSpec::hold`](super::GuestSpec::hold)
//! and be past `ROCE-READY`. [`perftest_pair`] starts `<test> <args>` in the background on the
//! server's console, waits for perftest's "Waiting for client to connect" banner (so the
//! client never races the server's listen), runs `<test> <args> <server addr>` on the client's
//! console, then waits for the server's exit code. Several runs may follow each other on the
//! same pair of guests (each opens a fresh TCP 18515 exchange), e.g. while one
//! [`Capture`](super::Capture) records them.

use super::{Guest, HarnessError, Result};
use std::time::{Duration, Instant};

/// perftest's server banner (printed once it listens on TCP 18515).
pub const PERFTEST_WAITING: &str = "Waiting for client to connect";

/// Outcome of one [`perftest_pair`] run.
#[derive(Clone, Debug)]
pub struct PairRun {
    /// The server's perftest command line (the client's is the same plus the server address,
    /// unless [`perftest_pair_with`] was used).
    pub cmd: String,
    /// Server exit code.
    pub server_rc: i32,
    /// Client exit code.
    pub client_rc: i32,
    /// Server console lines of this run.
    pub server_out: String,
    /// Client console lines of this run.
    pub client_out: String,
    /// Wall time of the run.
    pub elapsed: Duration,
}

impl PairRun {
    /// True when both sides exited 0.
    pub fn ok(&self) -> bool {
        self.server_rc == 0 && self.client_rc == 0
    }

    /// The client's result row (`#bytes #iterations ...` values) as numbers, if printed.
    pub fn client_results(&self) -> Option<Vec<f64>> {
        let mut lines = self.client_out.lines();
        lines.find(|l| l.trim_start().starts_with("#bytes"))?;
        let row = lines.next()?;
        let v: Vec<f64> = row.split_whitespace().map_while(|x| x.parse().ok()).collect();
        (v.len() >= 2).then_some(v)
    }
}

/// Runs `cmd` (e.g. `ib_write_bw -d rxe0 -x 1 -F -n 20 -s 3000`) between `server` and `client`;
/// `server_addr` is the address the client connects to (TCP 18515). Errors only when a side
/// does not finish within `timeout`; exit codes are reported in [`PairRun`].
pub fn perftest_pair(
    server: &Guest,
    client: &Guest,
    server_addr: &str,
    cmd: &str,
    timeout: Duration,
) -> Result<PairRun> {
    perftest_pair_with(server, client, server_addr, cmd, cmd, timeout)
}

/// Like [`perftest_pair`] with different command lines on the two sides (e.g. a server-only
/// `-r 1` receive queue depth); `client_cmd` gets `server_addr` appended.
pub fn perftest_pair_with(
    server: &Guest,
    client: &Guest,
    server_addr: &str,
    server_cmd: &str,
    client_cmd: &str,
    timeout: Duration,
) -> Result<PairRun> {
    pair_run(server, client, server_cmd, &format!("{client_cmd} {server_addr}"), PERFTEST_WAITING, timeout)
}

/// Generic client/server run: starts `server_cmd` in the background on the server's console,
/// waits for `ready` in its output, runs `client_cmd` (complete, with the server address) on
/// the client's console and waits for the server command's exit code.
pub fn pair_run(
    server: &Guest,
    client: &Guest,
    server_cmd: &str,
    client_cmd: &str,
    ready: &str,
    timeout: Duration,
) -> Result<PairRun> {
    if server_cmd.contains('\n') || client_cmd.contains('\n') {
        return Err(HarnessError::BadSpec("pair commands must be one line".into()));
    }
    let t0 = Instant::now();
    let smark = server.mark();
    // the marker is split in the command so that the console's echo of it does not match
    server.send_console(&format!("({server_cmd}; echo \"PAIR-\"\"SERVER-RC=$?\") &"))?;
    server.wait_for_from(smark, ready, timeout)?;
    let (client_rc, client_out) = client.console_run(client_cmd, timeout)?;
    let left = timeout.saturating_sub(t0.elapsed()).max(Duration::from_secs(5));
    let line = server.wait_for_from(smark, "PAIR-SERVER-RC=", left)?;
    let server_rc = line
        .split("PAIR-SERVER-RC=")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| HarnessError::BadSpec(format!("unparsable server marker {line:?}")))?;
    let out = server.output();
    let server_out = out.lines().skip(smark).collect::<Vec<_>>().join("\n");
    Ok(PairRun { cmd: server_cmd.to_string(), server_rc, client_rc, server_out, client_out, elapsed: t0.elapsed() })
}
