//! Named network namespaces (`/run/netns/NAME`, as `ip netns add` makes them) for everything
//! in uroce that needs a private network: `uroce demo`, the integration tests, the datapath
//! benchmark and the interop harness's lab. One helper instead of a copy in each.
//!
//! * [`Netns`]: a namespace this process created, removed when dropped (`ip netns del`), and
//!   also when the process dies of a fatal signal (SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGABRT):
//!   a handler removes every namespace still registered — what `ip netns del` does, `umount2`
//!   and `unlink` of `/run/netns/NAME`, both async-signal-safe — and then dies of the signal as
//!   it would have. The namespace itself (with its veth ends) goes when its last user is gone.
//! * [`enter`], [`spawn_in`], [`run_in`]: code runs inside a namespace on a thread that called
//!   `setns(CLONE_NEWNET)` (network namespaces are per thread, so one process can hold both
//!   ends of a link). Sockets opened on that thread belong to the namespace; `/sys/class/net`
//!   does not follow (sysfs shows the namespace it was mounted in).
//! * [`ip`], [`exec`], [`is_root`], [`have`]: running iproute2 and tools, and the checks a
//!   caller makes before (needs root and `ip`).

use std::ffi::{c_char, CStr, CString};
use std::fmt;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicPtr, Ordering};
use std::thread::JoinHandle;

/// What went wrong.
#[derive(Debug)]
pub enum Error {
    /// A system call or a file failed.
    Io {
        /// What was being done.
        what: String,
        /// The underlying error.
        source: io::Error,
    },
    /// A command (`ip`, `nft`, ...) exited unsuccessfully.
    Command {
        /// The command line.
        cmd: String,
        /// Its exit code (`None`: killed by a signal).
        status: Option<i32>,
        /// Its standard error.
        stderr: String,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io { what, source } => write!(f, "{what}: {source}"),
            Error::Command { cmd, stderr, .. } => write!(f, "{cmd} failed: {}", stderr.trim()),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } => Some(source),
            Error::Command { .. } => None,
        }
    }
}

/// Results of this crate.
pub type Result<T> = std::result::Result<T, Error>;

fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> Error {
    let what = what.into();
    move |source| Error::Io { what, source }
}

/// Namespaces this process created and has not removed yet, as NUL-terminated
/// `/run/netns/NAME` paths: what the fatal-signal handler removes. A slot is taken by
/// swapping its pointer out, so the handler and [`untrack`] never both own one.
static LIVE: [AtomicPtr<c_char>; 64] = [const { AtomicPtr::new(std::ptr::null_mut()) }; 64];

/// The signals after which a namespace would otherwise be left behind.
const FATAL: [libc::c_int; 5] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT, libc::SIGABRT];

/// Where `ip netns` keeps namespace `ns`.
pub fn path(ns: &str) -> String {
    format!("/run/netns/{ns}")
}

fn netns_path(ns: &str) -> Option<CString> {
    CString::new(path(ns)).ok()
}

/// Removes every registered namespace file; async-signal-safe (atomics and two syscalls).
fn remove_live() {
    for slot in &LIVE {
        let p = slot.swap(std::ptr::null_mut(), Ordering::AcqRel);
        if !p.is_null() {
            // SAFETY: `p` came from `CString::into_raw` in `track` and is still a valid
            // NUL-terminated string (only its swapper may free it, and that is us); umount2 and
            // unlink only read it. The string is leaked: freeing is not async-signal-safe, and
            // the process is about to die.
            unsafe {
                libc::umount2(p, libc::MNT_DETACH);
                libc::unlink(p);
            }
        }
    }
}

/// Installs the fatal-signal handlers once per process.
fn install_signal_cleanup() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        for sig in FATAL {
            // SAFETY: the action only calls async-signal-safe code: `remove_live` (atomic swaps,
            // umount2, unlink) and signal-hook's `emulate_default_handler` (documented
            // async-signal-safe), which restores the default action and re-raises, so the
            // process still ends the way the signal would have ended it.
            let r = unsafe {
                signal_hook::low_level::register(sig, move || {
                    remove_live();
                    let _ = signal_hook::low_level::emulate_default_handler(sig);
                })
            };
            if let Err(e) = r {
                tracing::warn!(signal = sig, error = %e, "cannot install the namespace clean-up handler");
            }
        }
    });
}

/// Registers namespace `ns` for removal on a fatal signal (before it is created).
fn track(ns: &str) {
    install_signal_cleanup();
    let Some(path) = netns_path(ns) else { return };
    let raw = path.into_raw();
    for slot in &LIVE {
        if slot.compare_exchange(std::ptr::null_mut(), raw, Ordering::AcqRel, Ordering::Acquire).is_ok() {
            return;
        }
    }
    // SAFETY: `raw` came from `into_raw` just above and was stored nowhere.
    drop(unsafe { CString::from_raw(raw) });
    tracing::warn!(ns, "more than 64 live namespaces: this one is removed on drop only, not on a signal");
}

/// Forgets namespace `ns` (after it was removed).
fn untrack(ns: &str) {
    let Some(want) = netns_path(ns) else { return };
    for slot in &LIVE {
        let p = slot.load(Ordering::Acquire);
        if p.is_null() {
            continue;
        }
        // SAFETY: a non-null slot holds a string from `track`; it is freed only by whoever swaps
        // it out of the slot, and a signal handler that does so never frees it.
        let same = unsafe { CStr::from_ptr(p) } == want.as_c_str();
        if same && slot.compare_exchange(p, std::ptr::null_mut(), Ordering::AcqRel, Ordering::Acquire).is_ok() {
            // SAFETY: we swapped `p` out, so we own it; it came from `CString::into_raw`.
            drop(unsafe { CString::from_raw(p) });
            return;
        }
    }
}

/// Names of the namespaces this process has registered and not yet removed (for tests).
pub fn live_namespaces() -> Vec<String> {
    LIVE.iter()
        .filter_map(|slot| {
            let p = slot.load(Ordering::Acquire);
            // SAFETY: as in `untrack`: a non-null slot holds a live string from `track`.
            (!p.is_null())
                .then(|| unsafe { CStr::from_ptr(p) }.to_string_lossy().trim_start_matches("/run/netns/").to_string())
        })
        .collect()
}

/// `c` as a command line, for messages.
pub fn cmdline(c: &Command) -> String {
    std::iter::once(c.get_program()).chain(c.get_args()).map(|a| a.to_string_lossy()).collect::<Vec<_>>().join(" ")
}

/// Run `c` to completion; an unsuccessful exit is an [`Error::Command`] with its stderr.
pub fn run(c: &mut Command) -> Result<Output> {
    let out = c.stdin(Stdio::null()).output().map_err(io_err(format!("run {}", cmdline(c))))?;
    if !out.status.success() {
        return Err(Error::Command {
            cmd: cmdline(c),
            status: out.status.code(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        });
    }
    Ok(out)
}

/// Run `ip` (iproute2) with `args`.
pub fn ip(args: &[&str]) -> Result<()> {
    run(Command::new("ip").args(args)).map(|_| ())
}

/// Run `ip -n ns` with `args` (the command in namespace `ns`).
pub fn ip_in(ns: &str, args: &[&str]) -> Result<()> {
    run(Command::new("ip").args(["-n", ns]).args(args)).map(|_| ())
}

/// A `Command` that runs `program` inside namespace `ns` (`ip netns exec ns program`).
pub fn command_in(ns: &str, program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns]).arg(program);
    c
}

/// Run `cmd` inside namespace `ns` (`ip netns exec`) and return its output, whatever its exit
/// status (only failing to start it is an error).
pub fn exec(ns: &str, cmd: &[&str]) -> Result<Output> {
    let (prog, args) = cmd.split_first().map_or(("true", &[][..]), |(p, a)| (*p, a));
    command_in(ns, prog).args(args).output().map_err(io_err(format!("run {cmd:?} in {ns}")))
}

/// Is this process root?
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Is `prog` on PATH?
pub fn have(prog: &str) -> bool {
    Command::new("sh").args(["-c", &format!("command -v {prog}")]).output().is_ok_and(|o| o.status.success())
}

/// Move the calling thread into the namespace `fd` refers to.
pub fn enter_fd(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: setns on a valid namespace descriptor only changes the calling thread's namespace.
    if unsafe { libc::setns(fd.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Move the calling thread into namespace `ns`.
pub fn enter(ns: &str) -> Result<()> {
    let p = path(ns);
    let f = File::open(&p).map_err(io_err(format!("open {p}")))?;
    enter_fd(f.as_fd()).map_err(io_err(format!("setns {p}")))
}

/// Run `f` on a new thread inside namespace `ns`.
pub fn spawn_in<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> JoinHandle<Result<T>> {
    let ns = ns.to_string();
    std::thread::Builder::new()
        .name(format!("in-{ns}"))
        .spawn(move || {
            enter(&ns)?;
            Ok(f())
        })
        .expect("spawn thread")
}

/// Join `h`, re-raising a panic of its thread.
pub fn join<T>(h: JoinHandle<T>) -> T {
    h.join().unwrap_or_else(|e| std::panic::resume_unwind(e))
}

/// Run `f` inside namespace `ns` on a thread of its own and wait for its result.
pub fn run_in<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> Result<T> {
    join(spawn_in(ns, f))
}

/// SIGKILL every process in namespace `ns` (orphaned helpers such as qemu or tcpdump).
pub fn kill_processes_in(ns: &str) {
    if let Ok(out) = Command::new("ip").args(["netns", "pids", ns]).stderr(Stdio::null()).output() {
        for pid in String::from_utf8_lossy(&out.stdout).split_whitespace() {
            if let Ok(pid) = pid.parse::<libc::pid_t>() {
                // SAFETY: kill(2) with a PID read from the namespace; no memory is involved.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
    }
}

/// Delete namespace `ns` now (`ip netns del`; nothing if it is not there), e.g. a peer that
/// vanishes mid-transfer, or one left over by a killed run.
pub fn delete(ns: &str) {
    let _ = Command::new("ip").args(["netns", "del", ns]).stderr(Stdio::null()).output();
    untrack(ns);
}

/// A network namespace this process created; deleted on drop and on a fatal signal.
#[derive(Debug)]
pub struct Netns {
    name: String,
    file: File,
}

impl Netns {
    /// Create namespace `name` (deleting a leftover of that name first) with `lo` up.
    pub fn create(name: &str) -> Result<Netns> {
        if !is_root() {
            return Err(Error::Io {
                what: format!("create network namespace {name}"),
                source: io::Error::new(io::ErrorKind::PermissionDenied, "network namespaces need root"),
            });
        }
        let _ = Command::new("ip").args(["netns", "del", name]).stderr(Stdio::null()).output();
        track(name);
        if let Err(e) = ip(&["netns", "add", name]) {
            untrack(name);
            return Err(e);
        }
        // From here on, drop removes it.
        let p = path(name);
        let file = match File::open(&p) {
            Ok(f) => f,
            Err(e) => {
                delete(name);
                return Err(Error::Io { what: format!("open {p}"), source: e });
            }
        };
        let ns = Netns { name: name.to_string(), file };
        ns.ip(&["link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// Its name (for `ip -n`, `ip netns exec`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Run `ip -n NAME` with `args`.
    pub fn ip(&self, args: &[&str]) -> Result<()> {
        ip_in(&self.name, args)
    }

    /// Run `f` on a fresh scoped thread that has entered the namespace (sockets it creates
    /// live there and may be used from any thread afterwards).
    pub fn scoped<R: Send>(&self, f: impl FnOnce() -> R + Send) -> Result<R> {
        let fd = self.file.as_fd();
        let what = format!("setns {}", path(&self.name));
        std::thread::scope(|s| {
            let h = s.spawn(move || {
                enter_fd(fd).map_err(io_err(what))?;
                Ok(f())
            });
            h.join().unwrap_or_else(|e| std::panic::resume_unwind(e))
        })
    }
}

impl AsRawFd for Netns {
    fn as_raw_fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }
}

impl AsFd for Netns {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        delete(&self.name);
    }
}
