//! QEMU interop harness: real Linux rxe (soft-RoCE) peers in small guests, on a private bridge.
//!
//! The host kernel has no RDMA, so uroce's interop tests talk to the kernel's `rdma_rxe` running
//! in QEMU guests. This module boots those guests and wires them up; it never builds them:
//! `rxe-compat/interop/build-guests.sh` builds two flavours from Debian packages into a cache
//! outside the source tree ([`cache_dir`], default `/var/cache/uroce-interop`):
//!
//! * [`Flavour::Bookworm`]: kernel 6.1, rdma-core 44, perftest 4.5;
//! * [`Flavour::Trixie`]: trixie-backports kernel 6.17 (rxe + zero-copy-capable virtio_net),
//!   rdma-core 56.1, perftest 25.01.
//!
//! Contract:
//! * A [`Lab`] is a network namespace `uroce-ix-<pid>-<seq>` holding one bridge ([`BRIDGE`],
//!   addresses [`HOST_V4`]/24 and [`HOST_V6`]/64) with one tap per guest. Nothing is routed
//!   anywhere else: guests can reach only each other and processes in that namespace
//!   ([`Lab::command`], [`Lab::exec_host`], [`Lab::in_netns`]). Everything the lab started
//!   (qemu, tcpdump, taps, bridge, namespace, run directory) is removed when the lab and
//!   every [`Guest`]/[`Capture`]/[`HostProc`] made from it are dropped, including on panic;
//!   namespaces left by a killed test process are swept by the next [`Lab::new`].
//! * A [`Guest`] boots from the cached image plus a per-guest cpio overlay (the current
//!   `interop/guest-init.sh` as `/init`, the IP configuration, the command, extra files). Its
//!   console is collected line by line; `/init` prints the markers `ROCE-READY`,
//!   `ROCE-GID idx=N gid=G type=T`, `ROCE-CMD-EXIT rc=N` that [`Guest::wait_ready`],
//!   [`Guest::gids`] and [`Guest::exit_code`] parse. A guest is SIGKILLed by PID when its
//!   wall-clock timeout ([`GuestSpec::timeout`]) expires, when dropped, and (PR_SET_PDEATHSIG)
//!   when the thread that booted it exits.
//! * Prerequisites (root, tools, /dev/net/tun, built images) are checked up front and reported as
//!   [`HarnessError::Missing`] listing exactly what is absent; [`require_or_skip`] turns that into a
//!   loud failure under CI (`CI` set) and a printed skip otherwise.

mod cpio;
mod guest;
mod lab;
mod pair;

pub use cpio::Cpio;
pub use guest::{Gid, Guest, GuestFile, GuestSpec};
pub use lab::{Capture, CaptureStats, HostProc, Lab};
pub use pair::{pair_run, perftest_pair, perftest_pair_with, PairRun, PERFTEST_WAITING};

use std::collections::BTreeMap;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// Image layout version written by `build-guests.sh` (`LAYOUT=`) into `BUILD-OK`; a cached
/// build of another layout counts as missing.
pub const IMAGE_LAYOUT: u32 = 6;
/// Bridge inside every lab namespace.
pub const BRIDGE: &str = "br0";
/// MAC address of [`BRIDGE`] (fixed, so captures are reproducible).
pub const BRIDGE_MAC: &str = "02:00:00:77:00:01";
/// Host-side IPv4 address on [`BRIDGE`] (prefix /24; guests use 10.77.0.2..254).
pub const HOST_V4: &str = "10.77.0.1";
/// Host-side IPv6 address on [`BRIDGE`] (prefix /64; guests use e.g. fd00:77::11).
pub const HOST_V6: &str = "fd00:77::1";
/// The guest's `/init`, overlaid at every boot (so editing it needs no image rebuild).
pub const GUEST_INIT: &str = include_str!("../interop/guest-init.sh");
/// Console marker printed by `/init` once rxe0 is ACTIVE and its GIDs are populated.
pub const MARK_READY: &str = "ROCE-READY";
/// Console marker prefix printed by `/init` after the command: `ROCE-CMD-EXIT rc=<n>`.
pub const MARK_EXIT: &str = "ROCE-CMD-EXIT rc=";

/// Which guest image to boot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Flavour {
    /// Debian 12: kernel 6.1 (`linux-image-amd64`), rdma-core 44, perftest 4.5.
    Bookworm,
    /// Debian 13 + trixie-backports kernel 6.17: rdma-core 56.1, perftest 25.01; virtio_net
    /// supports AF_XDP zero-copy with `iommu_platform=on,disable-legacy=on`.
    Trixie,
}

impl Flavour {
    /// Both flavours.
    pub const ALL: [Flavour; 2] = [Flavour::Bookworm, Flavour::Trixie];

    /// The name used by `build-guests.sh` and in the cache layout.
    pub fn as_str(self) -> &'static str {
        match self {
            Flavour::Bookworm => "bookworm",
            Flavour::Trixie => "trixie",
        }
    }
}

impl fmt::Display for Flavour {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One missing prerequisite.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Missing {
    /// The harness must run as root (namespaces, taps).
    NotRoot,
    /// A host tool is not on `PATH`.
    Tool {
        /// Executable name.
        tool: &'static str,
        /// Debian package that provides it.
        package: &'static str,
    },
    /// `/dev/net/tun` is absent (no tap devices).
    TunDevice,
    /// The guest image of a flavour is not built (or from another layout).
    GuestImage {
        /// The flavour.
        flavour: Flavour,
        /// Where it was looked for.
        dir: PathBuf,
    },
}

impl fmt::Display for Missing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Missing::NotRoot => f.write_str("not running as root"),
            Missing::Tool { tool, package } => {
                write!(f, "`{tool}` not on PATH (apt-get install {package})")
            }
            Missing::TunDevice => f.write_str("/dev/net/tun missing (tap devices unavailable)"),
            Missing::GuestImage { flavour, dir } => write!(
                f,
                "{flavour} guest image not built in {} (run `rxe-compat/interop/build-guests.sh {flavour}`, \
                 or set UROCE_INTEROP_BUILD=1 to let tests build it)",
                dir.display()
            ),
        }
    }
}

/// Everything that can go wrong in the harness.
#[derive(Debug)]
pub enum HarnessError {
    /// Prerequisites are missing (all of them are listed).
    Missing(Vec<Missing>),
    /// An I/O operation failed.
    Io {
        /// What was being done.
        context: String,
        /// The underlying error.
        source: io::Error,
    },
    /// A host command (`ip`, `tcpdump`, ...) failed.
    Command {
        /// The command line.
        cmd: String,
        /// Its exit code (None: killed by a signal).
        status: Option<i32>,
        /// Its standard error.
        stderr: String,
    },
    /// Something did not happen in time.
    Timeout {
        /// What was waited for.
        what: String,
        /// How long.
        after: Duration,
        /// Last console lines / output, for the test log.
        tail: String,
    },
    /// The guest's qemu exited before the awaited event.
    GuestExited {
        /// Guest name.
        guest: String,
        /// What was waited for.
        what: String,
        /// Last console lines.
        tail: String,
    },
    /// A [`GuestSpec`] or argument is invalid.
    BadSpec(String),
}

impl fmt::Display for HarnessError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HarnessError::Missing(m) => {
                f.write_str("interop harness prerequisites missing:")?;
                for x in m {
                    write!(f, "\n  - {x}")?;
                }
                Ok(())
            }
            HarnessError::Io { context, source } => write!(f, "{context}: {source}"),
            HarnessError::Command { cmd, status, stderr } => {
                write!(f, "`{cmd}` failed (exit {status:?}): {}", stderr.trim())
            }
            HarnessError::Timeout { what, after, tail } => {
                write!(f, "timed out after {after:?} waiting for {what}; last output:\n{tail}")
            }
            HarnessError::GuestExited { guest, what, tail } => {
                write!(f, "guest {guest} exited while waiting for {what}; last output:\n{tail}")
            }
            HarnessError::BadSpec(s) => write!(f, "bad guest spec: {s}"),
        }
    }
}

impl std::error::Error for HarnessError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            HarnessError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// Result alias of the harness.
pub type Result<T> = std::result::Result<T, HarnessError>;

impl From<uroce_netns::Error> for HarnessError {
    fn from(e: uroce_netns::Error) -> Self {
        match e {
            uroce_netns::Error::Io { what, source } => HarnessError::Io { context: what, source },
            uroce_netns::Error::Command { cmd, status, stderr } => HarnessError::Command { cmd, status, stderr },
        }
    }
}

pub(crate) fn io_err(context: impl Into<String>) -> impl FnOnce(io::Error) -> HarnessError {
    let context = context.into();
    move |source| HarnessError::Io { context, source }
}

/// The image cache: `$UROCE_INTEROP_CACHE`, default `/var/cache/uroce-interop`.
pub fn cache_dir() -> PathBuf {
    std::env::var_os("UROCE_INTEROP_CACHE")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/cache/uroce-interop"))
}

/// `uroce-verbs-ops` built by `build-guests.sh tools` (SEND with immediate / invalidate), if any.
pub fn verbs_tool() -> Option<PathBuf> {
    Some(cache_dir().join("tools/uroce-verbs-ops")).filter(|p| p.is_file())
}

/// Path of the builder script in this crate's source tree.
pub fn build_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("interop/build-guests.sh")
}

/// A built guest image (`<cache>/<flavour>/current`).
#[derive(Clone, Debug)]
pub struct GuestImage {
    /// The flavour.
    pub flavour: Flavour,
    /// The build directory (resolved `current` link).
    pub dir: PathBuf,
    /// The kernel.
    pub vmlinuz: PathBuf,
    /// The gzip'd newc initramfs.
    pub initramfs: PathBuf,
    /// `info` written by the builder: kernel_version, rdma_core, perftest, ... .
    pub info: BTreeMap<String, String>,
}

impl GuestImage {
    /// Finds the complete current build of `flavour`, or reports it missing.
    pub fn locate(flavour: Flavour) -> std::result::Result<GuestImage, Missing> {
        let cur = cache_dir().join(flavour.as_str()).join("current");
        let missing = || Missing::GuestImage { flavour, dir: cur.clone() };
        let ok = std::fs::read_to_string(cur.join("BUILD-OK")).map_err(|_| missing())?;
        if !ok.lines().any(|l| l == format!("layout={IMAGE_LAYOUT}")) {
            return Err(missing());
        }
        let dir = std::fs::canonicalize(&cur).map_err(|_| missing())?;
        let (vmlinuz, initramfs) = (dir.join("vmlinuz"), dir.join("initramfs.cpio.gz"));
        if !vmlinuz.is_file() || !initramfs.is_file() {
            return Err(missing());
        }
        let info = std::fs::read_to_string(dir.join("info"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Ok(GuestImage { flavour, dir, vmlinuz, initramfs, info })
    }

    /// One `info` value, or `"?"`.
    pub fn info(&self, key: &str) -> &str {
        self.info.get(key).map(String::as_str).unwrap_or("?")
    }

    /// One line describing the image: kernel, rdma-core and perftest versions.
    pub fn describe(&self) -> String {
        format!(
            "{}: kernel {} ({}), rdma-core {}, perftest {}",
            self.flavour,
            self.info("kernel_version"),
            self.info("kernel_deb_version"),
            self.info("rdma_core"),
            self.info("perftest")
        )
    }
}

pub(crate) fn find_tool(tool: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/sbin:/usr/bin:/sbin:/bin".into());
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin"].map(PathBuf::from))
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
}

/// Checks everything a [`Lab`] with guests of `flavours` needs; `capture` adds tcpdump.
pub fn check_prerequisites(flavours: &[Flavour], capture: bool) -> Result<()> {
    let mut missing = Vec::new();
    // SAFETY: geteuid(2) has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        missing.push(Missing::NotRoot);
    }
    let mut tools = vec![("ip", "iproute2"), ("qemu-system-x86_64", "qemu-system-x86")];
    if capture {
        tools.push(("tcpdump", "tcpdump"));
    }
    for (tool, package) in tools {
        if find_tool(tool).is_none() {
            missing.push(Missing::Tool { tool, package });
        }
    }
    if !Path::new("/dev/net/tun").exists() {
        missing.push(Missing::TunDevice);
    }
    for &f in flavours {
        if let Err(m) = GuestImage::locate(f) {
            missing.push(m);
        }
    }
    if missing.is_empty() {
        Ok(())
    } else {
        Err(HarnessError::Missing(missing))
    }
}

/// Runs `build-guests.sh` for `flavours` (network: Debian mirrors only; ~30-70 s per flavour).
pub fn build_images(flavours: &[Flavour]) -> Result<()> {
    let script = build_script();
    let mut cmd = Command::new("bash");
    cmd.arg(&script).args(flavours.iter().map(|f| f.as_str()));
    let out = cmd.output().map_err(io_err(format!("running {}", script.display())))?;
    if !out.status.success() {
        return Err(HarnessError::Command {
            cmd: format!("{} {flavours:?}", script.display()),
            status: out.status.code(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        });
    }
    Ok(())
}

fn env_flag(name: &str) -> bool {
    std::env::var(name).map(|v| !v.is_empty() && v != "0" && v != "false").unwrap_or(false)
}

/// True when running under CI (`CI` set to anything but empty/`0`/`false`).
pub fn in_ci() -> bool {
    env_flag("CI")
}

/// Runs `test`; if it panics with a message for which `retry_if` holds (a TCG guest's own
/// failure, not the code under test: an unreachable guest, a peer kernel's oops), says so as
/// `[<what>] <why>: once more on fresh guests` and runs it once more. Any other panic goes on.
pub fn once_more_if(what: &str, why: &str, retry_if: impl Fn(&str) -> bool, test: impl Fn()) {
    let Err(e) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(&test)) else { return };
    let msg = e
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default();
    if !retry_if(&msg) {
        std::panic::resume_unwind(e);
    }
    eprintln!("[{what}] {why}: once more on fresh guests");
    test();
}

/// The one rule for a test whose prerequisite is missing (`why`, which names the test and
/// what it lacks): under CI ([`in_ci`]) it panics, so the test fails; otherwise it writes
/// `SKIP <why>` straight to stderr (libtest captures `eprintln!` of passing tests, and a skip
/// must be seen) and returns false (the caller returns early). The interop harness, this
/// crate's tests and the root package's tests all go through it.
pub fn skip_or_fail(why: &str) -> bool {
    if in_ci() {
        panic!("{why} (CI set: a missing prerequisite fails the test)");
    }
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "SKIP {why} (with CI=1 this fails)");
    false
}

/// Gate for tests that need the harness: true when everything for `flavours` (plus tcpdump when
/// `capture`) is present. Missing images are built first when `UROCE_INTEROP_BUILD=1`. Otherwise
/// [`skip_or_fail`] with the exact list of what is missing: a panic under CI, `SKIP <test>: ...`
/// on stderr and false (the caller returns early) elsewhere.
pub fn require_or_skip(test: &str, flavours: &[Flavour], capture: bool) -> bool {
    let mut res = check_prerequisites(flavours, capture);
    if let Err(HarnessError::Missing(m)) = &res {
        let only_images = m.iter().all(|x| matches!(x, Missing::GuestImage { .. }));
        if only_images && env_flag("UROCE_INTEROP_BUILD") {
            eprintln!("{test}: building guest images ({flavours:?}) because UROCE_INTEROP_BUILD=1");
            res = build_images(flavours).and_then(|()| check_prerequisites(flavours, capture));
        }
    }
    match res {
        Ok(()) => true,
        Err(e) => skip_or_fail(&format!("{test}: needs the interop harness: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_layout_matches_the_builder() {
        let script = std::fs::read_to_string(build_script()).unwrap();
        let layout: u32 = script
            .lines()
            .find_map(|l| l.strip_prefix("LAYOUT="))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .expect("LAYOUT= line in build-guests.sh");
        assert_eq!(layout, IMAGE_LAYOUT);
    }

    #[test]
    fn guest_init_prints_the_markers_the_harness_parses() {
        for m in [MARK_READY, "ROCE-CMD-EXIT rc=$rc", "ROCE-GID idx=$idx gid=$v type=", "ROCE-HOLD"] {
            assert!(GUEST_INIT.contains(m), "guest-init.sh lacks {m:?}");
        }
        assert!(MARK_EXIT.starts_with("ROCE-CMD-EXIT"));
    }

    #[test]
    fn missing_prerequisites_are_named() {
        let e = HarnessError::Missing(vec![
            Missing::NotRoot,
            Missing::Tool { tool: "qemu-system-x86_64", package: "qemu-system-x86" },
            Missing::GuestImage { flavour: Flavour::Trixie, dir: "/x/trixie/current".into() },
        ]);
        let s = e.to_string();
        assert!(s.contains("not running as root"), "{s}");
        assert!(s.contains("apt-get install qemu-system-x86"), "{s}");
        assert!(s.contains("build-guests.sh trixie"), "{s}");
    }
}
