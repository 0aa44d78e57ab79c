//! Helpers shared by the root package's integration tests.
#![allow(dead_code)]

/// True when running under CI (`CI` set to anything but empty/0/false).
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "0" && v != "false")
}

/// A test prerequisite is missing: fail in CI, skip loudly elsewhere. Returns false to skip.
pub fn require(ok: bool, what: &str) -> bool {
    if ok {
        return true;
    }
    if in_ci() {
        panic!("prerequisite missing in CI: {what}");
    }
    eprintln!("SKIP: prerequisite missing: {what} (this test fails instead of skipping when CI=1)");
    false
}

/// Is `prog` on PATH?
pub fn have(prog: &str) -> bool {
    std::process::Command::new("sh")
        .args(["-c", &format!("command -v {prog}")])
        .output()
        .is_ok_and(|o| o.status.success())
}
