//! Helpers shared by the root package's integration tests.
#![allow(dead_code)]

pub mod packet;

/// True when running under CI (`CI` set to anything but empty/0/false): the one rule,
/// `uroce_rxe_compat::harness::in_ci`.
pub fn in_ci() -> bool {
    uroce_rxe_compat::harness::in_ci()
}

/// A test prerequisite is missing: fail in CI, skip loudly elsewhere
/// (`uroce_rxe_compat::harness::skip_or_fail`). Returns false to skip.
pub fn require(ok: bool, what: &str) -> bool {
    ok || uroce_rxe_compat::harness::skip_or_fail(&format!("prerequisite missing: {what}"))
}

/// `dir` (uroce's libibverbs.so.1, from `ix::verbs_dir`), or None (a skip, or a failure under
/// CI) when it or one of `tools` is missing.
pub fn verbs_setup(test: &str, dir: Option<std::path::PathBuf>, tools: &[&str]) -> Option<std::path::PathBuf> {
    if !require(dir.is_some(), &format!("{test}: uroce's libibverbs.so.1 (run scripts/build-verbs)")) {
        return None;
    }
    tools.iter().all(|t| require(have(t), &format!("{test}: `{t}`"))).then_some(dir?)
}

/// Is `prog` on PATH?
pub fn have(prog: &str) -> bool {
    std::process::Command::new("sh")
        .args(["-c", &format!("command -v {prog}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// A spawned process whose stdout and stderr are being read into memory as it runs (a child
/// that prints more than a pipe holds — `uroce perf -q 1000` prints four lines per QP — would
/// otherwise block on its write and never exit).
pub struct Watched {
    child: std::process::Child,
    out: std::thread::JoinHandle<Vec<u8>>,
    err: std::thread::JoinHandle<Vec<u8>>,
}

/// Start reading `c`'s output.
pub fn watch(mut c: std::process::Child) -> Watched {
    use std::io::Read;
    fn drain(p: Option<impl Read + Send + 'static>) -> std::thread::JoinHandle<Vec<u8>> {
        std::thread::spawn(move || {
            let mut v = Vec::new();
            if let Some(mut p) = p {
                let _ = p.read_to_end(&mut v);
            }
            v
        })
    }
    let (out, err) = (drain(c.stdout.take()), drain(c.stderr.take()));
    Watched { child: c, out, err }
}

impl Watched {
    /// Still running?
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Kill the process (it is then reaped by [`Watched::finish`]).
    pub fn kill(&mut self) {
        let _ = self.child.kill();
    }

    /// Wait with a deadline; kill it and fail, showing what it printed, on expiry.
    pub fn finish(mut self, what: &str, timeout: std::time::Duration) -> std::process::Output {
        let deadline = std::time::Instant::now() + timeout;
        let mut timed_out = false;
        let status = loop {
            if let Some(st) = self.child.try_wait().expect("wait") {
                break st;
            }
            if std::time::Instant::now() > deadline {
                let _ = self.child.kill();
                timed_out = true;
                break self.child.wait().expect("wait");
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        let o = std::process::Output {
            status,
            stdout: self.out.join().unwrap_or_default(),
            stderr: self.err.join().unwrap_or_default(),
        };
        if timed_out {
            panic!(
                "{what}: timed out\nstdout:\n{}\nstderr:\n{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            );
        }
        o
    }
}

/// [`watch`] then [`Watched::finish`].
pub fn finish(c: std::process::Child, what: &str, timeout: std::time::Duration) -> std::process::Output {
    watch(c).finish(what, timeout)
}

/// The QP choices of the runtime tests (`runtime_threaded`, `runtime_shards`): READ and WRITE
/// allowed, path MTU 1024, send PSN 100, 16 READs/atomics each way, RNR timer code 1.
pub fn runtime_rc_local(sgid_index: u8) -> uroce_transport::connect::RcLocal {
    use uroce_transport::{AccessFlags, Mtu};
    uroce_transport::connect::RcLocal {
        access: AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ,
        sgid_index,
        path_mtu: Mtu::Mtu1024,
        sq_psn: 100,
        max_dest_rd_atomic: 16,
        max_rd_atomic: 16,
        min_rnr_timer: 1,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        hop_limit: 64,
        ..Default::default()
    }
}

/// The value of `name` on the line of `text` that starts with `prefix` (`uroce-counters
/// engine:`, `uroce-switch:`, ...): 0 when the line lacks it (only non-zero counters are
/// printed); a missing line fails the test.
pub fn counter(text: &str, prefix: &str, name: &str) -> u64 {
    let line = text.lines().find(|l| l.starts_with(prefix)).unwrap_or_else(|| panic!("no `{prefix}` line in\n{text}"));
    line.split_whitespace().find_map(|kv| kv.strip_prefix(&format!("{name}="))).map_or(0, |v| v.parse().unwrap())
}
