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
