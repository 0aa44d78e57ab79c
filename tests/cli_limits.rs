//! Absurd sizes, depths, counts and durations are refused with a one-line message before
//! anything is allocated or created (issue 12, point 3): no allocator abort (exit 134, SIGABRT),
//! no namespace left behind. `uroce demo -s 99999999999` used to abort with `memory allocation
//! of 199999999998 bytes failed` and leave its two namespaces; `uroce sim soak --max-size
//! 99999999999` aborted the same way; `uroce demo -s 0` ran and printed a 0.00 row.
//!
//! Runs as any user (the namespace check needs `ip`; without it that part is skipped).

mod common;

use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_uroce");

fn netns_list() -> Option<Vec<String>> {
    let o = Command::new("ip").args(["netns", "list"]).output().ok()?;
    o.status.success().then(|| {
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter_map(|l| l.split_whitespace().next().map(String::from))
            .collect()
    })
}

/// Runs `uroce args`, which must fail with `code` and `message` on stderr (and nothing on stdout),
/// without dying of a signal and without leaving a namespace of its own (`u?demo<pid>`).
fn refused(args: &[&str], code: i32, message: &str) -> Output {
    let child = Command::new(BIN).args(args).stdin(std::process::Stdio::null()).output().unwrap();
    let err = String::from_utf8_lossy(&child.stderr);
    assert_eq!(child.status.signal(), None, "{args:?} died of a signal: {err}");
    assert_ne!(child.status.code(), Some(134), "{args:?} aborted: {err}");
    assert_eq!(child.status.code(), Some(code), "{args:?}: {err}");
    assert!(err.contains(message), "{args:?}: expected {message:?} in:\n{err}");
    assert!(child.stdout.is_empty(), "{args:?} printed: {}", String::from_utf8_lossy(&child.stdout));
    child
}

#[test]
fn demo_refuses_absurd_sizes_before_creating_namespaces() {
    let before = netns_list();
    let size = "the message size must be between 1 and 2147483647 bytes (perftest's -s range)";
    refused(&["demo", "-s", "99999999999"], 2, size);
    refused(&["demo", "-s", "0"], 2, size);
    refused(&["demo", "-s", "2147483648"], 2, size);
    refused(&["demo", "--test", "write_lat", "--size=-1"], 2, "is not a size");
    refused(&["demo", "-n", "0"], 2, "the number of iterations must be between 5 and 4294967296");
    refused(&["demo", "-n", "99999999999"], 2, "the number of iterations must be between 5");
    refused(&["demo", "--link-mtu", "100"], 2, "the link MTU must be between 1280 and 9000 bytes");
    refused(&["demo", "--link-mtu", "4294967297"], 2, "the link MTU must be between 1280 and 9000 bytes");
    // Accepted by clap, but more memory than any machine has: a latency test keeps a sample per
    // iteration (4294967296 x 32 bytes per side).
    refused(
        &["demo", "--test", "write_lat", "-n", "4294967296", "--backend", "udp"],
        2,
        "the buffers of the two sides (both run in this process) would take",
    );
    if let (Some(before), Some(after)) = (before, netns_list()) {
        let new: Vec<_> = after.iter().filter(|n| !before.contains(n) && n.contains("demo")).collect();
        assert!(new.is_empty(), "namespaces left behind: {new:?}");
    }
}

#[test]
fn sim_soak_refuses_absurd_sizes() {
    refused(
        &["sim", "soak", "--max-size", "99999999999"],
        2,
        "the largest message must be between 0 and 67108864 bytes",
    );
    refused(
        &["sim", "soak", "--qps", "64", "--max-size", "67108864"],
        2,
        "the soak's regions would take 192.0 GiB (64 QP pairs x 3 regions x 16 slots x 67108864 bytes); at most 4 GiB",
    );
    refused(&["sim", "soak", "--qps", "0"], 2, "the number of QP pairs must be between 1 and 1024");
    refused(&["sim", "soak", "--qps", "99999999999"], 2, "the number of QP pairs must be between 1 and 1024");
    refused(&["sim", "soak", "--ops", "0"], 2, "the number of work requests must be between 1 and 1000000000");
    // The largest accepted message still runs (a few ops: 3 regions of 16 x 64 MiB are 3 GiB).
    let ok =
        Command::new(BIN).args(["sim", "soak", "--ops", "20", "--qps", "1", "--max-size", "1048576"]).output().unwrap();
    assert!(ok.status.success(), "{}", String::from_utf8_lossy(&ok.stderr));
}

#[test]
fn pingpong_refuses_absurd_sizes_without_touching_the_network() {
    // rc_pingpong's exit status for a refused option is 1; nothing is opened (no -d given).
    for (args, msg) in [
        (&["-s", "99999999999"][..], "-s 99999999999: the message size must be between 1 and 2147483648 bytes"),
        (&["-s", "0"], "-s 0: the message size must be between 1 and 2147483648 bytes"),
        (&["-s", "0x100000000"], "-s 4294967296: the message size must be between 1"),
        (&["-r", "0"], "-r 0: the receive depth must be between 1 and 16384 (rxe's max_qp_wr)"),
        (&["-r", "99999999999"], "-r 99999999999: the receive depth must be between 1 and 16384"),
        (&["-n", "0"], "-n 0: the number of exchanges must be between 1 and 4294967295"),
        (&["-n", "99999999999"], "-n 99999999999: the number of exchanges must be between 1 and 4294967295"),
        (&["-m", "99999999999"], "-m must be 256, 512, 1024, 2048 or 4096"),
        (&["-p", "0"], "-p 0: the TCP port must be between 1 and 65535"),
        (&["-p", "99999999999"], "the TCP port must be between 1 and 65535"),
        (&["--stall-timeout", "99999999999"], "the stall timeout must be between 1 and 86400 seconds"),
        (&["--connect-timeout", "18446744073709551615"], "the connect timeout must be between 0 and 86400 seconds"),
    ] {
        let mut a = vec!["pingpong", "--backend", "udp"];
        a.extend_from_slice(args);
        refused(&a, 1, msg);
    }
}

#[test]
fn tcp_pingpong_refuses_absurd_sizes() {
    let c = ["tool", "tcp-pingpong", "--client", "127.0.0.1:9"];
    let with = |extra: &[&'static str]| -> Vec<&'static str> { c.iter().chain(extra).copied().collect() };
    refused(&with(&["--size", "99999999999"]), 2, "the message size must be between 1 and 16777216 bytes");
    refused(&with(&["--size", "0"]), 2, "the message size must be between 1 and 16777216 bytes");
    refused(&with(&["--iters", "99999999999"]), 2, "the number of round trips must be between 1 and 100000000");
    refused(&with(&["--connect-secs", "inf"]), 2, "is not a finite number of seconds");
}
