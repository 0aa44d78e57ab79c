//! The lab: a private network namespace with one bridge, and the host-side processes in it.
//!
//! Contract: [`Lab::new`] creates namespace `uroce-ix-<pid>-<seq>` with bridge [`BRIDGE`]
//! ([`HOST_V4`]/24, [`HOST_V6`]/64, IPv6 DAD off) and a run directory for logs and initrds.
//! Dropping the last handle (the `Lab` and every guest/capture/host process made from it)
//! kills what is left, deletes the namespace (taps and bridge go with it) and removes the run
//! directory (kept, with its path printed, when the thread is panicking or
//! `UROCE_INTEROP_KEEP=1`). Stale namespaces of dead processes are swept by [`Lab::new`].

use super::guest::{self, Guest, GuestSpec};
use super::{
    check_prerequisites, find_tool, io_err, HarnessError, Missing, Result, BRIDGE, BRIDGE_MAC, HOST_V4, HOST_V6,
};
use std::io::{BufRead, BufReader, Read};
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};
use uroce_netns::Netns;

static LAB_SEQ: AtomicU32 = AtomicU32::new(0);
const NS_PREFIX: &str = "uroce-ix-";

/// A private network namespace with a bridge; see the module docs.
pub struct Lab {
    inner: Arc<LabInner>,
}

pub(crate) struct LabInner {
    pub(crate) name: String,
    pub(crate) ns: String,
    pub(crate) dir: PathBuf,
    netns: Option<Netns>,
    pub(crate) next_guest: AtomicU32,
}

impl LabInner {
    /// A command that will run in the lab namespace and receive SIGKILL when the spawning
    /// thread exits. Only for children spawned while `self` is alive (the closure uses our fd).
    pub(crate) fn ns_command(&self, program: impl AsRef<std::ffi::OsStr>) -> Result<Command> {
        let fd = self.netns()?.as_raw_fd();
        let mut c = Command::new(program);
        // SAFETY: runs in the child between fork and exec; it only issues the async-signal-safe
        // syscalls setns(2) and prctl(2) (no allocation, no locks). `fd` is open: the caller
        // holds `&self`, which owns the file, across the spawn.
        unsafe {
            c.pre_exec(move || {
                if libc::setns(fd, libc::CLONE_NEWNET) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        Ok(c)
    }

    fn netns(&self) -> Result<&Netns> {
        self.netns.as_ref().ok_or_else(|| HarnessError::BadSpec("lab namespace not open".into()))
    }
}

impl Drop for LabInner {
    fn drop(&mut self) {
        teardown_ns(&self.ns);
        drop(self.netns.take());
        let keep = std::thread::panicking() || std::env::var_os("UROCE_INTEROP_KEEP").is_some_and(|v| v == "1");
        if keep {
            eprintln!("[uroce-interop] lab {} logs kept in {}", self.name, self.dir.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
        tracing::debug!(ns = %self.ns, "lab torn down");
    }
}

/// Kills every process still in namespace `ns` (our orphaned qemu/tcpdump) and deletes it.
fn teardown_ns(ns: &str) {
    uroce_netns::kill_processes_in(ns);
    uroce_netns::delete(ns);
}

/// Removes `uroce-ix-<pid>-*` namespaces whose creating process no longer exists.
fn sweep_stale() {
    let Ok(rd) = std::fs::read_dir("/run/netns") else { return };
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix(NS_PREFIX) else { continue };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else { continue };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            tracing::info!(ns = %name, "removing stale lab namespace");
            teardown_ns(&name);
        }
    }
}

pub(crate) use uroce_netns::cmdline;

/// Runs `c` to completion; non-zero exit is an error carrying its stderr.
pub(crate) fn run(c: &mut Command) -> Result<Output> {
    Ok(uroce_netns::run(c)?)
}

fn run_dir_base() -> PathBuf {
    std::env::var_os("UROCE_INTEROP_RUN_DIR")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("uroce-interop"))
}

impl Lab {
    /// Creates the namespace, bridge and run directory. `name` labels logs only.
    pub fn new(name: &str) -> Result<Lab> {
        check_prerequisites(&[], false)?;
        sweep_stale();
        let seq = LAB_SEQ.fetch_add(1, Ordering::Relaxed);
        let ns = format!("{NS_PREFIX}{}-{seq}", std::process::id());
        let safe: String =
            name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' }).collect();
        let dir = run_dir_base().join(format!("{ns}-{safe}"));
        let netns = Some(Netns::create(&ns)?);
        // from here on, Drop of `inner` tears down whatever exists
        let inner = LabInner { name: name.to_string(), ns, dir, netns, next_guest: AtomicU32::new(1) };
        std::fs::create_dir_all(&inner.dir).map_err(io_err(format!("creating {}", inner.dir.display())))?;
        let lab = Lab { inner: Arc::new(inner) };
        // No IPv6 DAD (addresses usable at once) and no router solicitations in the namespace.
        lab.in_netns(|| -> std::io::Result<()> {
            for (k, v) in [("accept_dad", "0"), ("router_solicitations", "0"), ("accept_ra", "0")] {
                for scope in ["all", "default"] {
                    std::fs::write(format!("/proc/sys/net/ipv6/conf/{scope}/{k}"), v)?;
                }
            }
            Ok(())
        })?
        .map_err(io_err("setting IPv6 sysctls in the lab namespace"))?;
        let i = lab.inner.netns()?;
        i.ip(&["link", "add", BRIDGE, "address", BRIDGE_MAC, "type", "bridge", "stp_state", "0"])?;
        i.ip(&["addr", "add", &format!("{HOST_V4}/24"), "dev", BRIDGE])?;
        i.ip(&["-6", "addr", "add", &format!("{HOST_V6}/64"), "dev", BRIDGE, "nodad"])?;
        i.ip(&["link", "set", BRIDGE, "up"])?;
        tracing::info!(ns = %lab.inner.ns, dir = %lab.inner.dir.display(), "lab up");
        Ok(lab)
    }

    /// The namespace name (`ip netns exec <netns> ...`).
    pub fn netns(&self) -> &str {
        &self.inner.ns
    }

    /// The bridge name inside the namespace.
    pub fn bridge(&self) -> &str {
        BRIDGE
    }

    /// The run directory (console logs, initrds).
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// Boots a guest; see [`GuestSpec`].
    pub fn boot(&self, spec: GuestSpec) -> Result<Guest> {
        guest::boot(&self.inner, spec)
    }

    /// Starts `tcpdump -i br0 -w path FILTER` in the namespace and returns once it listens.
    /// Example filter: `udp port 4791 or tcp port 18515`.
    pub fn capture(&self, path: impl AsRef<Path>, filter: &str) -> Result<Capture> {
        Capture::start(&self.inner, path.as_ref(), filter)
    }

    /// A `Command` running `program` in the namespace (`ip netns exec <ns> program`).
    /// The caller owns the child; prefer [`Lab::spawn_host`] for a kill-on-drop guard.
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        uroce_netns::command_in(&self.inner.ns, program)
    }

    /// Runs `argv` in the namespace to completion (killed after `timeout`), returning its
    /// output whatever the exit status.
    pub fn exec_host(&self, argv: &[&str], timeout: Duration) -> Result<Output> {
        let (prog, args) = argv.split_first().ok_or_else(|| HarnessError::BadSpec("empty argv".into()))?;
        let mut c = self.command(prog);
        c.args(args);
        let mut p = self.spawn_host(c)?;
        p.wait_output(timeout)
    }

    /// Spawns `cmd` (from [`Lab::command`]) with piped stdout/stderr; killed when dropped.
    pub fn spawn_host(&self, mut cmd: Command) -> Result<HostProc> {
        let what = cmdline(&cmd);
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(io_err(format!("spawning `{what}`")))?;
        Ok(HostProc { child: Some(child), what, _lab: self.inner.clone() })
    }

    /// Runs `f` on a fresh thread that has entered the namespace (sockets it creates live
    /// there and may be used from any thread afterwards).
    pub fn in_netns<R: Send>(&self, f: impl FnOnce() -> R + Send) -> Result<R> {
        Ok(self.inner.netns()?.scoped(f)?)
    }
}

/// A host process in the lab namespace, SIGKILLed when dropped.
pub struct HostProc {
    child: Option<Child>,
    what: String,
    _lab: Arc<LabInner>,
}

impl HostProc {
    /// Its PID.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// Waits up to `timeout` for it to exit and returns its output; on timeout it is killed
    /// and [`HarnessError::Timeout`] carries what it printed.
    pub fn wait_output(&mut self, timeout: Duration) -> Result<Output> {
        let mut child =
            self.child.take().ok_or_else(|| HarnessError::BadSpec(format!("`{}` already waited", self.what)))?;
        let readers: Vec<_> = [
            child.stdout.take().map(|r| Box::new(r) as Box<dyn Read + Send>),
            child.stderr.take().map(|r| Box::new(r) as Box<dyn Read + Send>),
        ]
        .into_iter()
        .map(|r| {
            std::thread::spawn(move || {
                let mut v = Vec::new();
                if let Some(mut r) = r {
                    let _ = r.read_to_end(&mut v);
                }
                v
            })
        })
        .collect();
        let status = wait_deadline(&mut child, timeout).map_err(io_err(format!("waiting for `{}`", self.what)))?;
        let mut outs = readers.into_iter().map(|h| h.join().unwrap_or_default());
        let (stdout, stderr) = (outs.next().unwrap_or_default(), outs.next().unwrap_or_default());
        match status {
            Some(status) => Ok(Output { status, stdout, stderr }),
            None => Err(HarnessError::Timeout {
                what: format!("`{}` to exit", self.what),
                after: timeout,
                tail: format!("{}{}", String::from_utf8_lossy(&stdout), String::from_utf8_lossy(&stderr)),
            }),
        }
    }

    /// Kills it (SIGKILL) and reaps it.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for HostProc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Waits for `child` until `timeout` (polling `try_wait` with a deadline); on timeout kills it
/// and returns `None`.
pub(crate) fn wait_deadline(child: &mut Child, timeout: Duration) -> std::io::Result<Option<ExitStatus>> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(st) = child.try_wait()? {
            return Ok(Some(st));
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Packet counts tcpdump reported when it stopped.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CaptureStats {
    /// "N packets captured".
    pub captured: u64,
    /// "N packets dropped by kernel".
    pub dropped_by_kernel: u64,
}

/// A running tcpdump on the lab bridge; stopped (SIGINT, file flushed) by [`Capture::stop`] or
/// on drop.
pub struct Capture {
    child: Option<Child>,
    path: PathBuf,
    stderr: Arc<Mutex<Vec<String>>>,
    reader: Option<std::thread::JoinHandle<()>>,
    _lab: Arc<LabInner>,
}

impl Capture {
    fn start(lab: &Arc<LabInner>, path: &Path, filter: &str) -> Result<Capture> {
        if find_tool("tcpdump").is_none() {
            return Err(HarnessError::Missing(vec![Missing::Tool { tool: "tcpdump", package: "tcpdump" }]));
        }
        let mut c = lab.ns_command("tcpdump")?;
        // --immediate-mode: no TPACKET_V3 block timeout (packets in an unretired block would be
        // lost at SIGINT); -U: write each packet at once; -Z root: keep a root-owned path
        c.args(["-i", BRIDGE, "-n", "--immediate-mode", "-U", "-Z", "root", "-w"]).arg(path);
        c.args(filter.split_whitespace());
        let what = cmdline(&c);
        let mut child = c
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(io_err(format!("spawning `{what}`")))?;
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = mpsc::channel();
        let err = child.stderr.take();
        let lines = stderr.clone();
        let reader = std::thread::spawn(move || {
            let Some(err) = err else { return };
            for line in BufReader::new(err).lines().map_while(std::result::Result::ok) {
                if line.contains("listening on") {
                    let _ = tx.send(());
                }
                lines.lock().unwrap_or_else(|p| p.into_inner()).push(line);
            }
        });
        let mut cap =
            Capture { child: Some(child), path: path.to_path_buf(), stderr, reader: Some(reader), _lab: lab.clone() };
        if rx.recv_timeout(Duration::from_secs(20)).is_err() {
            let tail = cap.stderr.lock().unwrap_or_else(|p| p.into_inner()).join("\n");
            cap.halt();
            return Err(HarnessError::Timeout {
                what: format!("`{what}` to listen"),
                after: Duration::from_secs(20),
                tail,
            });
        }
        tracing::debug!(path = %cap.path.display(), "capture started");
        Ok(cap)
    }

    /// The pcap file being written.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn halt(&mut self) {
        if let Some(mut child) = self.child.take() {
            // let the last packets (e.g. a closing TCP FIN) reach the file: wait until it has
            // not grown for 300 ms (at most 5 s)
            let deadline = Instant::now() + Duration::from_secs(5);
            let size = || std::fs::metadata(&self.path).map(|m| m.len()).unwrap_or(0);
            let (mut last, mut since) = (size(), Instant::now());
            while Instant::now() < deadline && since.elapsed() < Duration::from_millis(300) {
                std::thread::sleep(Duration::from_millis(50));
                let now = size();
                if now != last {
                    (last, since) = (now, Instant::now());
                }
            }
            // SAFETY: kill(2) on our own unreaped child: the PID cannot have been reused.
            unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
            if wait_deadline(&mut child, Duration::from_secs(10)).ok().flatten().is_none() {
                tracing::warn!("tcpdump ignored SIGINT; killed");
            }
        }
        if let Some(h) = self.reader.take() {
            let _ = h.join();
        }
    }

    /// Stops tcpdump (all packets seen so far are in the file) and returns its counters.
    pub fn stop(mut self) -> Result<CaptureStats> {
        self.halt();
        let lines = self.stderr.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let num = |suffix: &str| {
            lines
                .iter()
                .find(|l| l.ends_with(suffix))
                .and_then(|l| l.split_whitespace().next())
                .and_then(|n| n.parse().ok())
        };
        let captured = num("packets captured").ok_or_else(|| HarnessError::Command {
            cmd: "tcpdump".into(),
            status: None,
            stderr: lines.join("\n"),
        })?;
        Ok(CaptureStats { captured, dropped_by_kernel: num("packets dropped by kernel").unwrap_or(0) })
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        self.halt();
    }
}
