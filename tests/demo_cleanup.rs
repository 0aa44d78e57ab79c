//! `uroce demo` removes its two network namespaces on every exit path (issue 12, point 3): a
//! signal mid-run (SIGINT as Ctrl-C sends it, SIGTERM, SIGHUP), a panic in the server or the
//! client thread or in the main thread, an error return, and an abort (what an allocation failure
//! does). Each run is synchronised on the demo's stderr line that says the namespaces exist
//! (`uroce demo: namespaces uademo<pid> ... and ubdemo<pid> ...`); the test checks `ip netns
//! list` shows them then, and does not once the process is gone.
//!
//! Needs root and `ip`; skips with a printed reason, or fails under `CI=1`.

mod common;

use std::io::{BufRead, BufReader};
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::Mutex;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_uroce");

/// Each demo busy-polls two cores' worth: one at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn prereq(test: &str) -> bool {
    common::require(uroce::netns::is_root() && common::have("ip"), &format!("{test} needs root and ip(8)"))
}

fn netns_list() -> Vec<String> {
    let o = Command::new("ip").args(["netns", "list"]).output().expect("ip netns list");
    assert!(o.status.success());
    String::from_utf8_lossy(&o.stdout).lines().filter_map(|l| l.split_whitespace().next().map(String::from)).collect()
}

/// A running demo, its stderr lines arriving on `lines`; killed on drop.
struct Demo {
    child: Child,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Demo {
    fn start(extra: &[&str]) -> Demo {
        // Long enough to be mid-run whenever the signal comes.
        let mut child = Command::new(BIN)
            .args(["demo", "-n", "4000000000"])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn uroce demo");
        let err = child.stderr.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for l in BufReader::new(err).lines().map_while(Result::ok) {
                if tx.send(l).is_err() {
                    return;
                }
            }
        });
        Demo { child, lines, seen: Vec::new() }
    }

    /// The demo's namespace names, once its stderr says they exist; with `listed`, also checks
    /// that `ip netns list` shows them (not for a demo that fails on purpose right after the
    /// line: it may have removed them already).
    fn namespaces_up(&mut self, listed: bool) -> [String; 2] {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let l = self.lines.recv_timeout(deadline.saturating_duration_since(Instant::now())).unwrap_or_else(|_| {
                panic!("no `namespaces` line from the demo; stderr so far:\n{}", self.seen.join("\n"))
            });
            self.seen.push(l.clone());
            if l.starts_with("uroce demo: namespaces ") {
                let pid = self.child.id();
                let names = [format!("uademo{pid}"), format!("ubdemo{pid}")];
                for n in &names {
                    assert!(l.contains(n.as_str()), "{l}");
                }
                if listed {
                    let list = netns_list();
                    assert!(names.iter().all(|n| list.contains(n)), "{names:?} not in `ip netns list`: {list:?}");
                }
                return names;
            }
        }
    }

    fn signal(&self, sig: libc::c_int) {
        // SAFETY: kill(2) on our own child's pid; no memory is involved.
        assert_eq!(unsafe { libc::kill(self.child.id() as libc::pid_t, sig) }, 0);
    }

    /// Waits for the exit (60 s at most) and returns the status and the rest of stderr.
    fn wait(mut self) -> (ExitStatus, String) {
        let deadline = Instant::now() + Duration::from_secs(60);
        let status = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break s;
            }
            assert!(Instant::now() < deadline, "the demo did not exit; stderr:\n{}", self.seen.join("\n"));
            // Waiting for a child to exit: no event to wait on without blocking for ever.
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut err = std::mem::take(&mut self.seen);
        while let Ok(l) = self.lines.recv_timeout(Duration::from_secs(5)) {
            err.push(l);
        }
        (status, err.join("\n"))
    }
}

impl Drop for Demo {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn assert_gone(names: &[String; 2], how: &str) {
    let list = netns_list();
    for n in names {
        assert!(!list.contains(n), "{how}: namespace {n} left behind: {list:?}");
        assert!(!std::path::Path::new(&format!("/run/netns/{n}")).exists(), "{how}: /run/netns/{n} left");
    }
}

#[test]
fn a_signal_mid_run_leaves_no_namespace() {
    if !prereq("a_signal_mid_run_leaves_no_namespace") {
        return;
    }
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    for (sig, name) in [(libc::SIGINT, "SIGINT"), (libc::SIGTERM, "SIGTERM"), (libc::SIGHUP, "SIGHUP")] {
        let mut d = Demo::start(&[]);
        let names = d.namespaces_up(true);
        d.signal(sig);
        let (status, err) = d.wait();
        // It dies of the signal, as a program without a handler would (the shell sees 128+sig).
        assert_eq!(status.signal(), Some(sig), "{name}: {status:?}\n{err}");
        assert_gone(&names, name);
    }
}

#[test]
fn a_failure_anywhere_leaves_no_namespace() {
    if !prereq("a_failure_anywhere_leaves_no_namespace") {
        return;
    }
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    for (how, code, signal, message) in [
        ("server-panic", Some(2), None, "server: the server thread panicked"),
        ("client-panic", Some(2), None, "client: the client thread panicked"),
        ("main-panic", Some(101), None, "--debug-fail main-panic"),
        ("error", Some(2), None, "uroce: --debug-fail error"),
        ("abort", None, Some(libc::SIGABRT), ""),
    ] {
        let mut d = Demo::start(&["--debug-fail", how]);
        let names = d.namespaces_up(false);
        let (status, err) = d.wait();
        assert_eq!((status.code(), status.signal()), (code, signal), "{how}: {status:?}\n{err}");
        assert!(err.contains(message), "{how}: expected {message:?} in\n{err}");
        assert_gone(&names, how);
    }
}
