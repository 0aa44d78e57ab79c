//! Helpers shared by the root package's integration tests.
#![allow(dead_code)]

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

/// Is `prog` on PATH?
pub fn have(prog: &str) -> bool {
    std::process::Command::new("sh")
        .args(["-c", &format!("command -v {prog}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Wait for `c` with a deadline (its output stays in its pipes until it exits); kill it and
/// fail, showing what it printed, on expiry.
pub fn finish(mut c: std::process::Child, what: &str, timeout: std::time::Duration) -> std::process::Output {
    let deadline = std::time::Instant::now() + timeout;
    while c.try_wait().expect("wait").is_none() {
        if std::time::Instant::now() > deadline {
            let _ = c.kill();
            let o = c.wait_with_output().expect("output");
            panic!(
                "{what}: timed out\nstdout:\n{}\nstderr:\n{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    c.wait_with_output().expect("output")
}
