//! `--backend xdp` without the privileges AF_XDP needs (issue 12, point 7): instead of
//! `MapCreate failed: Operation not permitted`, the error says that AF_XDP needs root or
//! CAP_NET_ADMIN + CAP_BPF (+ CAP_NET_RAW for the socket), and suggests `--backend udp`.
//!
//! Runs the binary as an unprivileged user: as root under `setpriv --reuid=65534 --regid=65534
//! --clear-groups` (a copy in a directory nobody can read), otherwise as the current user.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_uroce");

/// Runs `uroce args` without privileges (`None`: the prerequisite is missing, skipped).
fn unprivileged(args: &[&str]) -> Option<Output> {
    if !uroce::netns::is_root() {
        return Some(Command::new(BIN).args(args).output().unwrap());
    }
    if !common::require(common::have("setpriv"), "setpriv (util-linux) to run uroce as nobody") {
        return None;
    }
    let dir = std::env::temp_dir().join(format!("uroce-xdp-nobody-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let bin = dir.join("uroce");
    if !bin.exists() {
        std::fs::copy(BIN, &bin).unwrap();
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(&bin)
        .args(args)
        .current_dir(&dir)
        .output()
        .unwrap();
    Some(out)
}

fn assert_explained(out: &Output, code: i32, prefix: &str, what: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "{what}: {err}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 2, "{what}: the error and the hint:\n{err}");
    assert!(
        lines[0].starts_with(&format!(
            "{prefix}lo: AF_XDP needs root, or the capabilities CAP_NET_ADMIN, CAP_BPF and CAP_NET_RAW ("
        )),
        "{what}: {err}"
    );
    assert!(lines[0].contains("Operation not permitted"), "{what}: the refused step stays visible: {err}");
    assert_eq!(
        lines[1],
        format!(
            "{prefix}without those privileges use --backend udp: a kernel UDP socket on port 4791, same wire format"
        ),
        "{what}"
    );
}

#[test]
fn af_xdp_without_privileges_says_what_it_needs_and_suggests_udp() {
    let Some(perf) = unprivileged(&["perf", "write_bw", "-d", "lo", "--backend", "xdp"]) else { return };
    assert_explained(&perf, 2, "uroce: ", "uroce perf");
    let Some(pp) = unprivileged(&["pingpong", "-d", "lo", "--backend", "xdp"]) else { return };
    // rc_pingpong's exit status 1, and its messages carry no `uroce:` prefix.
    assert_explained(&pp, 1, "", "uroce pingpong");
}
