//! Guests: one QEMU (TCG by default) per guest on a tap of the lab bridge, console collected.
//!
//! Contract: [`boot`] writes `<run dir>/<name>.initrd` = cached initramfs + zero padding to a
//! 4-byte boundary + an uncompressed newc overlay (`/init`, `/roce/env`, `/roce/cmd.sh`, extra
//! files), adds tap `tap<n>` to the bridge and spawns qemu directly in the namespace. A reader
//! thread appends every console line (CR stripped) to memory and `<name>.log`; a watchdog
//! SIGKILLs the qemu PID when [`GuestSpec::timeout`] expires. [`Guest`]'s Drop kills and reaps
//! qemu and deletes the tap. Waits block on a condition variable with a deadline, never sleep.

use super::lab::{cmdline, LabInner};
use super::{io_err, Cpio, Flavour, GuestImage, HarnessError, Result, BRIDGE, GUEST_INIT, MARK_EXIT, MARK_READY};
use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::net::{IpAddr, Ipv6Addr};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// A file to put into the guest.
#[derive(Clone, Debug)]
pub struct GuestFile {
    /// Destination path in the guest (absolute or relative to `/`).
    pub dst: String,
    /// Contents.
    pub data: Vec<u8>,
    /// Permission bits, e.g. `0o755`.
    pub mode: u32,
}

/// What to boot. Build with [`GuestSpec::new`] and the builder methods.
#[derive(Clone, Debug)]
pub struct GuestSpec {
    /// Image flavour.
    pub flavour: Flavour,
    /// Guest name (hostname, log file); default `g<n>`.
    pub name: Option<String>,
    /// Addresses for eth0, e.g. `10.77.0.11/24`, `fd00:77::11/64` (rxe adds a GID for each).
    pub addrs: Vec<String>,
    /// Shell script run by `/bin/sh` in `/root` once rxe0 is ready.
    pub cmd: Option<String>,
    /// Keep running after `cmd` (shell on the console, see [`Guest::console_run`]) until killed.
    pub hold: bool,
    /// QEMU NIC device model.
    pub nic_device: String,
    /// Extra `-device` properties, e.g. `iommu_platform=on`, `disable-legacy=on`.
    pub nic_opts: Vec<String>,
    /// MAC address; default `52:54:00:77:<3rd>:<4th octet of the first IPv4>`.
    pub mac: Option<String>,
    /// Extra files.
    pub files: Vec<GuestFile>,
    /// Memory in MiB (512).
    pub mem_mb: u32,
    /// vCPUs (1).
    pub smp: u32,
    /// eth0 MTU (default 1500: rxe's active MTU is then 1024).
    pub mtu: Option<u32>,
    /// Create rxe0 on eth0 (true).
    pub rxe: bool,
    /// Extra kernel command-line arguments.
    pub kernel_args: Vec<String>,
    /// Extra `KEY=value` lines for `/roce/env` (visible to `cmd` after `. /roce/env`).
    pub env: Vec<(String, String)>,
    /// Wall-clock limit for the whole guest life; qemu is SIGKILLed after it (default 300 s).
    pub timeout: Duration,
}

impl GuestSpec {
    /// Defaults: 1 vCPU, 512 MiB, virtio-net-pci, rxe0, no address, no command, 300 s.
    pub fn new(flavour: Flavour) -> GuestSpec {
        GuestSpec {
            flavour,
            name: None,
            addrs: Vec::new(),
            cmd: None,
            hold: false,
            nic_device: "virtio-net-pci".into(),
            nic_opts: Vec::new(),
            mac: None,
            files: Vec::new(),
            mem_mb: 512,
            smp: 1,
            mtu: None,
            rxe: true,
            kernel_args: Vec::new(),
            env: Vec::new(),
            timeout: Duration::from_secs(300),
        }
    }
    /// Sets the name.
    pub fn name(mut self, name: &str) -> Self {
        self.name = Some(name.into());
        self
    }
    /// Adds an eth0 address with prefix (`10.77.0.11/24`, `fd00:77::11/64`).
    pub fn addr(mut self, cidr: &str) -> Self {
        self.addrs.push(cidr.into());
        self
    }
    /// Sets the command (a shell script).
    pub fn cmd(mut self, script: &str) -> Self {
        self.cmd = Some(script.into());
        self
    }
    /// Keeps the guest up after the command.
    pub fn hold(mut self) -> Self {
        self.hold = true;
        self
    }
    /// Adds NIC properties (comma-separated list accepted).
    pub fn nic_opts(mut self, opts: &str) -> Self {
        self.nic_opts.extend(opts.split(',').filter(|s| !s.is_empty()).map(String::from));
        self
    }
    /// Zero-copy-capable virtio-net (`iommu_platform=on,disable-legacy=on`; trixie kernel).
    pub fn zero_copy_nic(self) -> Self {
        self.nic_opts("iommu_platform=on,disable-legacy=on")
    }
    /// Sets the MAC address.
    pub fn mac(mut self, mac: &str) -> Self {
        self.mac = Some(mac.into());
        self
    }
    /// Adds a file with the given contents.
    pub fn file_bytes(mut self, dst: &str, data: impl Into<Vec<u8>>, mode: u32) -> Self {
        self.files.push(GuestFile { dst: dst.into(), data: data.into(), mode });
        self
    }
    /// Adds a copy of host file `src` (mode taken from it). Statically linked binaries, or
    /// binaries linked against glibc <= 2.36 only (the host's), run in both flavours.
    pub fn file(mut self, src: impl AsRef<Path>, dst: &str) -> Result<Self> {
        use std::os::unix::fs::PermissionsExt;
        let src = src.as_ref();
        let data = std::fs::read(src).map_err(io_err(format!("reading {}", src.display())))?;
        let mode = std::fs::metadata(src).map(|m| m.permissions().mode() & 0o7777).unwrap_or(0o644);
        self.files.push(GuestFile { dst: dst.into(), data, mode });
        Ok(self)
    }
    /// Sets eth0's MTU.
    pub fn mtu(mut self, mtu: u32) -> Self {
        self.mtu = Some(mtu);
        self
    }
    /// Does not create rxe0.
    pub fn no_rxe(mut self) -> Self {
        self.rxe = false;
        self
    }
    /// Sets the wall-clock limit.
    pub fn timeout(mut self, t: Duration) -> Self {
        self.timeout = t;
        self
    }
    /// Sets memory (MiB).
    pub fn mem_mb(mut self, mb: u32) -> Self {
        self.mem_mb = mb;
        self
    }
    /// Sets the vCPU count.
    pub fn smp(mut self, n: u32) -> Self {
        self.smp = n;
        self
    }
    /// Adds a kernel argument.
    pub fn kernel_arg(mut self, arg: &str) -> Self {
        self.kernel_args.push(arg.into());
        self
    }
    /// Adds an environment variable for `/roce/env`.
    pub fn env(mut self, k: &str, v: &str) -> Self {
        self.env.push((k.into(), v.into()));
        self
    }
}

/// One entry of the guest's rxe GID table, as printed by `/init`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gid {
    /// GID index (perftest `-x`).
    pub index: u32,
    /// The GID.
    pub gid: Ipv6Addr,
    /// `gid_attrs/types/<n>` (e.g. `RoCE_v2`).
    pub kind: String,
}

#[derive(Default)]
struct Console {
    lines: Vec<(Duration, String)>,
    partial: String,
    eof: bool,
    reaped: bool,
    timed_out: bool,
    status: Option<ExitStatus>,
}

struct GuestInner {
    name: String,
    tap: String,
    pid: u32,
    started: Instant,
    log_path: PathBuf,
    con: Mutex<Console>,
    cond: Condvar,
    child: Mutex<Option<Child>>,
    stdin: Mutex<Option<ChildStdin>>,
    threads: Mutex<Vec<std::thread::JoinHandle<()>>>,
}

impl GuestInner {
    fn con(&self) -> MutexGuard<'_, Console> {
        self.con.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// SIGKILL by PID unless already reaped (the PID of an unreaped child cannot be reused).
    fn kill_locked(&self, con: &Console) {
        if !con.reaped && !con.eof {
            // SAFETY: kill(2) on our own child's PID, which stays valid until we reap it; the
            // `reaped` flag is checked under the same lock the reaper takes first.
            unsafe { libc::kill(self.pid as libc::pid_t, libc::SIGKILL) };
        }
    }

    fn tail(&self, n: usize) -> String {
        let con = self.con();
        let start = con.lines.len().saturating_sub(n);
        let mut s: Vec<&str> = con.lines[start..].iter().map(|l| l.1.as_str()).collect();
        if !con.partial.is_empty() {
            s.push(&con.partial);
        }
        s.join("\n")
    }
}

/// A running (or finished) guest; killed and cleaned up when dropped.
pub struct Guest {
    inner: Arc<GuestInner>,
    lab: Arc<LabInner>,
    flavour: Flavour,
    addrs: Vec<String>,
    console_seq: std::sync::atomic::AtomicU32,
}

fn valid_name(s: &str) -> bool {
    !s.is_empty() && s.len() <= 32 && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

fn default_mac(addrs: &[String], n: u32) -> String {
    let v4 = addrs.iter().find_map(|a| a.split('/').next()?.parse::<std::net::Ipv4Addr>().ok());
    match v4 {
        Some(ip) => format!("52:54:00:77:{:02x}:{:02x}", ip.octets()[2], ip.octets()[3]),
        None => format!("52:54:00:77:ff:{:02x}", n & 0xff),
    }
}

/// The overlay archive for `spec` (exposed for tests of the format).
pub(crate) fn overlay(spec: &GuestSpec, name: &str) -> Result<Vec<u8>> {
    let mut env = String::new();
    let mut kv = |k: &str, v: &str| env.push_str(&format!("{k}={}\n", shell_quote(v)));
    kv("ROCE_NAME", name);
    kv("ROCE_ADDRS", &spec.addrs.join(" "));
    kv("ROCE_MTU", &spec.mtu.map(|m| m.to_string()).unwrap_or_default());
    kv("ROCE_RXE", if spec.rxe { "1" } else { "0" });
    kv("ROCE_HOLD", if spec.hold { "1" } else { "0" });
    for (k, v) in &spec.env {
        if !k.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_') || k.is_empty() {
            return Err(HarnessError::BadSpec(format!("env name {k:?}")));
        }
        kv(k, v);
    }
    let mut c = Cpio::new();
    c.file("init", 0o755, GUEST_INIT.as_bytes());
    c.file("roce/env", 0o644, env.as_bytes());
    if let Some(cmd) = &spec.cmd {
        c.file("roce/cmd.sh", 0o755, cmd.as_bytes());
    }
    for f in &spec.files {
        let dst = f.dst.trim_start_matches('/');
        if dst.is_empty() || dst.split('/').any(|p| p == ".." || p.is_empty()) {
            return Err(HarnessError::BadSpec(format!("guest file path {:?}", f.dst)));
        }
        c.file(dst, f.mode, &f.data);
    }
    Ok(c.finish())
}

pub(crate) fn boot(lab: &Arc<LabInner>, spec: GuestSpec) -> Result<Guest> {
    let image = GuestImage::locate(spec.flavour).map_err(|m| HarnessError::Missing(vec![m]))?;
    let n = lab.next_guest.fetch_add(1, Ordering::Relaxed);
    let name = spec.name.clone().unwrap_or_else(|| format!("g{n}"));
    if !valid_name(&name) {
        return Err(HarnessError::BadSpec(format!("guest name {name:?}")));
    }
    for a in &spec.addrs {
        let (ip, pfx) =
            a.split_once('/').ok_or_else(|| HarnessError::BadSpec(format!("address {a:?} needs /prefix")))?;
        if ip.parse::<IpAddr>().is_err() || pfx.parse::<u8>().is_err() {
            return Err(HarnessError::BadSpec(format!("address {a:?}")));
        }
    }
    // initrd = base image, zero-padded to 4 bytes (initramfs.c skips NULs and wants the next
    // uncompressed archive 4-aligned), then the overlay
    let mut initrd =
        std::fs::read(&image.initramfs).map_err(io_err(format!("reading {}", image.initramfs.display())))?;
    initrd.resize(initrd.len().div_ceil(4) * 4, 0);
    initrd.extend_from_slice(&overlay(&spec, &name)?);
    let initrd_path = lab.dir.join(format!("{name}.initrd"));
    std::fs::write(&initrd_path, &initrd).map_err(io_err(format!("writing {}", initrd_path.display())))?;

    let tap = format!("tap{n}");
    let ipn = |args: &[&str]| -> Result<()> {
        let mut c = Command::new("ip");
        c.arg("-n").arg(&lab.ns).args(args);
        super::lab::run(&mut c).map(|_| ())
    };
    ipn(&["tuntap", "add", "dev", &tap, "mode", "tap"])?;
    let del_tap = || {
        let _ = Command::new("ip").args(["-n", &lab.ns, "link", "del", &tap]).stderr(Stdio::null()).status();
    };
    if let Err(e) = ipn(&["link", "set", &tap, "master", BRIDGE, "up"]) {
        del_tap();
        return Err(e);
    }

    let mac = spec.mac.clone().unwrap_or_else(|| default_mac(&spec.addrs, n));
    let accel = std::env::var("UROCE_INTEROP_ACCEL").unwrap_or_else(|_| "tcg".into());
    let cpu = if accel == "kvm" { "host" } else { "max" };
    let mut device = format!("{},netdev=n0,mac={mac}", spec.nic_device);
    for o in &spec.nic_opts {
        device.push(',');
        device.push_str(o);
    }
    let append = std::iter::once("console=ttyS0 panic=-1 quiet loglevel=3")
        .chain(spec.kernel_args.iter().map(String::as_str))
        .collect::<Vec<_>>()
        .join(" ");
    let log_path = lab.dir.join(format!("{name}.log"));
    let qerr = lab.dir.join(format!("{name}.qemu-stderr"));
    let spawned = (|| -> Result<Child> {
        let mut c = lab.ns_command("qemu-system-x86_64")?;
        c.args(["-accel", &accel, "-cpu", cpu, "-m", &spec.mem_mb.to_string(), "-smp", &spec.smp.to_string()]);
        c.args(["-display", "none", "-no-reboot", "-nodefaults", "-serial", "stdio"]);
        c.arg("-kernel").arg(&image.vmlinuz).arg("-initrd").arg(&initrd_path);
        c.args(["-append", &append]);
        c.args(["-netdev", &format!("tap,id=n0,ifname={tap},script=no,downscript=no"), "-device", &device]);
        let err = File::create(&qerr).map_err(io_err(format!("creating {}", qerr.display())))?;
        tracing::info!(guest = %name, flavour = %spec.flavour, cmd = %cmdline(&c), "booting");
        c.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(err)
            .spawn()
            .map_err(io_err("spawning qemu-system-x86_64"))
    })();
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => {
            del_tap();
            return Err(e);
        }
    };
    let stdout = child.stdout.take();
    let stdin = child.stdin.take();
    let inner = Arc::new(GuestInner {
        name: name.clone(),
        tap,
        pid: child.id(),
        started: Instant::now(),
        log_path: log_path.clone(),
        con: Mutex::new(Console::default()),
        cond: Condvar::new(),
        child: Mutex::new(Some(child)),
        stdin: Mutex::new(stdin),
        threads: Mutex::new(Vec::new()),
    });
    let guest = Guest {
        inner: inner.clone(),
        lab: lab.clone(),
        flavour: spec.flavour,
        addrs: spec.addrs.clone(),
        console_seq: Default::default(),
    };

    // console reader
    let verbose = std::env::var_os("UROCE_INTEROP_VERBOSE").is_some_and(|v| v == "1");
    let r = inner.clone();
    let mut log = File::create(&log_path).map_err(io_err(format!("creating {}", log_path.display())))?;
    let reader = std::thread::spawn(move || {
        let Some(out) = stdout else { return };
        let mut out = BufReader::new(out);
        let mut buf = Vec::new();
        loop {
            buf.clear();
            let n = out.read_until(b'\n', &mut buf).unwrap_or(0);
            let complete = buf.last() == Some(&b'\n');
            let text = String::from_utf8_lossy(&buf).replace('\r', "");
            let mut con = r.con();
            if n == 0 {
                con.eof = true;
                drop(con);
                r.cond.notify_all();
                return;
            }
            let _ = log.write_all(text.as_bytes());
            if verbose {
                eprint!("[{}] {text}", r.name);
            }
            con.partial.push_str(text.trim_end_matches('\n'));
            if complete {
                let line = std::mem::take(&mut con.partial);
                con.lines.push((r.started.elapsed(), line));
            }
            drop(con);
            r.cond.notify_all();
        }
    });
    // watchdog: SIGKILL by PID when the wall-clock limit expires
    let w = inner.clone();
    let limit = spec.timeout;
    let watchdog = std::thread::spawn(move || {
        let deadline = w.started + limit;
        let mut con = w.con();
        while !con.eof && !con.reaped {
            let now = Instant::now();
            if now >= deadline {
                tracing::warn!(guest = %w.name, pid = w.pid, "wall-clock limit {limit:?} reached; killing qemu");
                con.timed_out = true;
                w.kill_locked(&con);
                return;
            }
            con = w.cond.wait_timeout(con, deadline - now).map(|(g, _)| g).unwrap_or_else(|p| p.into_inner().0);
        }
    });
    inner.threads.lock().unwrap_or_else(|p| p.into_inner()).extend([reader, watchdog]);
    Ok(guest)
}

impl Guest {
    /// Guest name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }
    /// Flavour.
    pub fn flavour(&self) -> Flavour {
        self.flavour
    }
    /// qemu's PID.
    pub fn pid(&self) -> u32 {
        self.inner.pid
    }
    /// Its tap device in the lab namespace.
    pub fn tap(&self) -> &str {
        &self.inner.tap
    }
    /// Console log file.
    pub fn log_path(&self) -> &Path {
        &self.inner.log_path
    }
    /// The eth0 addresses it was given (with prefixes).
    pub fn addrs(&self) -> &[String] {
        &self.addrs
    }
    /// Its first address of the given family, without prefix.
    pub fn ip(&self, v6: bool) -> Option<IpAddr> {
        self.addrs.iter().filter_map(|a| a.split('/').next()?.parse::<IpAddr>().ok()).find(|a| a.is_ipv6() == v6)
    }
    /// The lab namespace it lives in.
    pub fn netns(&self) -> &str {
        &self.lab.ns
    }

    /// Number of complete console lines so far (a mark for [`Guest::wait_for_from`]).
    pub fn mark(&self) -> usize {
        self.inner.con().lines.len()
    }

    /// Waits for a console line containing `marker` (anywhere in the output so far or later);
    /// returns that line.
    pub fn wait_for(&self, marker: &str, timeout: Duration) -> Result<String> {
        self.wait_for_from(0, marker, timeout)
    }

    /// Like [`Guest::wait_for`], looking only at lines from index `mark` on.
    pub fn wait_for_from(&self, mark: usize, marker: &str, timeout: Duration) -> Result<String> {
        let deadline = Instant::now() + timeout;
        let mut scanned = mark;
        let mut con = self.inner.con();
        loop {
            if let Some(l) = con.lines.iter().skip(scanned).find(|l| l.1.contains(marker)) {
                return Ok(l.1.clone());
            }
            scanned = scanned.max(con.lines.len());
            if con.partial.contains(marker) {
                return Ok(con.partial.clone());
            }
            let what = format!("{marker:?} on {}'s console", self.inner.name);
            if con.eof {
                let why = if con.timed_out { " (killed by the wall-clock limit)" } else { "" };
                drop(con);
                return Err(HarnessError::GuestExited {
                    guest: format!("{}{why}", self.inner.name),
                    what,
                    tail: self.inner.tail(30),
                });
            }
            let now = Instant::now();
            if now >= deadline {
                drop(con);
                return Err(HarnessError::Timeout { what, after: timeout, tail: self.inner.tail(30) });
            }
            con =
                self.inner.cond.wait_timeout(con, deadline - now).map(|(g, _)| g).unwrap_or_else(|p| p.into_inner().0);
        }
    }

    /// Waits for `ROCE-READY` (rxe0 ACTIVE, GIDs populated) and returns the boot time: from
    /// spawning qemu to that line.
    pub fn wait_ready(&self, timeout: Duration) -> Result<Duration> {
        self.wait_for(MARK_READY, timeout)?;
        self.boot_time().ok_or_else(|| HarnessError::BadSpec("ROCE-READY seen but not recorded".into()))
    }

    /// Time from spawn to the `ROCE-READY` line, once seen.
    pub fn boot_time(&self) -> Option<Duration> {
        self.inner.con().lines.iter().find(|l| l.1.contains(MARK_READY)).map(|l| l.0)
    }

    /// Waits for `ROCE-CMD-EXIT rc=N` and returns N.
    pub fn exit_code(&self, timeout: Duration) -> Result<i32> {
        let line = self.wait_for(MARK_EXIT, timeout)?;
        line.split(MARK_EXIT)
            .nth(1)
            .and_then(|s| s.split_whitespace().next())
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| HarnessError::BadSpec(format!("unparsable exit line {line:?}")))
    }

    /// Waits for qemu to exit (the guest powered off) and reaps it.
    pub fn wait_exit(&self, timeout: Duration) -> Result<ExitStatus> {
        let deadline = Instant::now() + timeout;
        let mut con = self.inner.con();
        while !con.eof {
            let now = Instant::now();
            if now >= deadline {
                drop(con);
                return Err(HarnessError::Timeout {
                    what: format!("{} to power off", self.inner.name),
                    after: timeout,
                    tail: self.inner.tail(30),
                });
            }
            con =
                self.inner.cond.wait_timeout(con, deadline - now).map(|(g, _)| g).unwrap_or_else(|p| p.into_inner().0);
        }
        drop(con);
        self.reap().ok_or_else(|| HarnessError::BadSpec(format!("{} was already reaped", self.inner.name)))
    }

    fn reap(&self) -> Option<ExitStatus> {
        {
            let mut con = self.inner.con();
            if con.reaped {
                return con.status;
            }
            con.reaped = true;
        }
        self.inner.cond.notify_all();
        self.inner.stdin.lock().unwrap_or_else(|p| p.into_inner()).take();
        let status = self.inner.child.lock().unwrap_or_else(|p| p.into_inner()).take().and_then(|mut c| c.wait().ok());
        for h in self.inner.threads.lock().unwrap_or_else(|p| p.into_inner()).drain(..) {
            let _ = h.join();
        }
        self.inner.con().status = status;
        status
    }

    /// Whole console output so far (lines joined by `\n`, plus any unterminated last line).
    pub fn output(&self) -> String {
        let con = self.inner.con();
        let mut s = con.lines.iter().map(|l| l.1.as_str()).collect::<Vec<_>>().join("\n");
        if !con.partial.is_empty() {
            s.push('\n');
            s.push_str(&con.partial);
        }
        s
    }

    /// The last `n` console lines.
    pub fn tail(&self, n: usize) -> String {
        self.inner.tail(n)
    }

    /// The rxe GID table printed by `/init` (empty before `ROCE-READY`).
    pub fn gids(&self) -> Vec<Gid> {
        let con = self.inner.con();
        con.lines
            .iter()
            .filter_map(|(_, l)| {
                let rest = &l[l.find("ROCE-GID ")? + 9..];
                let mut index = None;
                let mut gid = None;
                let mut kind = String::new();
                for f in rest.split_whitespace() {
                    match f.split_once('=') {
                        Some(("idx", v)) => index = v.parse().ok(),
                        Some(("gid", v)) => gid = v.parse().ok(),
                        Some(("type", v)) => kind = v.to_string(),
                        _ => {}
                    }
                }
                Some(Gid { index: index?, gid: gid?, kind })
            })
            .collect()
    }

    /// GID index of `addr` (IPv4 addresses map to `::ffff:a.b.c.d`), for perftest's `-x`.
    pub fn gid_index(&self, addr: IpAddr) -> Option<u32> {
        let want = match addr {
            IpAddr::V4(a) => a.to_ipv6_mapped(),
            IpAddr::V6(a) => a,
        };
        self.gids().into_iter().find(|g| g.gid == want).map(|g| g.index)
    }

    /// GID index of the MAC-derived IPv6 link-local GID (`fe80::/64`; normally 0).
    pub fn link_local_gid_index(&self) -> Option<u32> {
        self.gids().into_iter().find(|g| g.gid.segments()[0] == 0xfe80).map(|g| g.index)
    }

    /// Writes `line` + newline to the serial console (the hold-mode shell reads it).
    pub fn send_console(&self, line: &str) -> Result<()> {
        let mut stdin = self.inner.stdin.lock().unwrap_or_else(|p| p.into_inner());
        let w = stdin.as_mut().ok_or_else(|| HarnessError::BadSpec("console closed".into()))?;
        w.write_all(format!("{line}\n").as_bytes())
            .and_then(|()| w.flush())
            .map_err(io_err("writing the guest console"))
    }

    /// Runs `cmd` in the hold-mode console shell; returns its exit code and the console lines it
    /// produced (including the shell's echo of the command).
    pub fn console_run(&self, cmd: &str, timeout: Duration) -> Result<(i32, String)> {
        let seq = self.console_seq.fetch_add(1, Ordering::Relaxed);
        // split the marker in the command so that the tty echo of it does not match
        let marker = format!("ROCE-CONSOLE-{seq} rc=");
        let mark = self.mark();
        self.send_console(&format!("{cmd}; echo \"ROCE-CON\"\"SOLE-{seq} rc=$?\""))?;
        let line = self.wait_for_from(mark, &marker, timeout)?;
        let rc = line
            .split(&marker)
            .nth(1)
            .and_then(|s| s.split_whitespace().next())
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| HarnessError::BadSpec(format!("unparsable console marker {line:?}")))?;
        let con = self.inner.con();
        let out = con.lines[mark.min(con.lines.len())..]
            .iter()
            .map(|l| l.1.as_str())
            .take_while(|l| !l.contains(&marker))
            .collect::<Vec<_>>()
            .join("\n");
        Ok((rc, out))
    }

    /// Does the guest's network still carry frames to `peer`? `None` when it does (busybox
    /// `ping`, three tries), else what the guest knows of its link: transmit and receive
    /// counters and the kernel's last words on it.
    ///
    /// Why: under TCG the guest's virtio-net transmit queue has been seen to stop for good in
    /// the middle of a burst (bookworm, a stop's CI run: a SEND FIRST was the guest's last
    /// frame for 240 s, and every TCP connect after it failed) while the console still
    /// answered. A test that keeps one guest for many runs asks this after a failed run, to
    /// tell a dead guest link (boot a fresh guest and run again) from a fault of the peer.
    pub fn link_dead(&self, peer: IpAddr) -> Option<String> {
        let ping = if peer.is_ipv6() { "ping6" } else { "ping" };
        if matches!(
            self.console_run(&format!("{ping} -c 3 -W 1 {peer} > /dev/null 2>&1"), Duration::from_secs(20)),
            Ok((0, _))
        ) {
            return None;
        }
        let why = "for d in /sys/class/net/eth0/statistics; do echo \"eth0 tx_\"\"packets=$(cat $d/tx_packets) \
                   rx_packets=$(cat $d/rx_packets) tx_errors=$(cat $d/tx_errors) tx_dropped=$(cat $d/tx_dropped)\"; done; \
                   dmesg | grep -i -e watchdog -e 'timed out' -e virtio -e eth0 | tail -n 5";
        Some(match self.console_run(why, Duration::from_secs(20)) {
            // (the echo of the command is not the answer: `tx_""packets` in it)
            Ok((_, out)) => out.lines().filter(|l| !l.contains("tx_\"\"packets")).collect::<Vec<_>>().join("; "),
            Err(e) => format!("the console did not answer either: {e}"),
        })
    }

    /// Kills qemu (SIGKILL by PID) and reaps it; idempotent. Returns false if it had already
    /// exited by itself.
    pub fn kill(&self) -> bool {
        let was_running = {
            let con = self.inner.con();
            let running = !con.eof && !con.reaped;
            self.inner.kill_locked(&con);
            running
        };
        self.reap();
        was_running
    }

    /// True once the wall-clock limit killed it.
    pub fn timed_out(&self) -> bool {
        self.inner.con().timed_out
    }
}

impl Drop for Guest {
    fn drop(&mut self) {
        self.kill();
        let _ = Command::new("ip")
            .args(["-n", &self.lab.ns, "link", "del", &self.inner.tap])
            .stderr(Stdio::null())
            .status();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry<'a>(archive: &'a [u8], name: &str) -> Option<&'a [u8]> {
        // walk the newc archive: header (110 bytes), name (padded), data (padded)
        let mut at = 0;
        while at + 110 <= archive.len() {
            let field =
                |i: usize| usize::from_str_radix(std::str::from_utf8(&archive[at + 6 + 8 * i..][..8]).ok()?, 16).ok();
            let (size, namesize) = (field(6)?, field(11)?);
            let n = &archive[at + 110..at + 110 + namesize - 1];
            let data_at = (at + 110 + namesize).div_ceil(4) * 4;
            if n == name.as_bytes() {
                return Some(&archive[data_at..data_at + size]);
            }
            at = (data_at + size).div_ceil(4) * 4;
        }
        None
    }

    #[test]
    fn overlay_carries_init_env_cmd_and_files() {
        let spec = GuestSpec::new(Flavour::Trixie)
            .addr("10.77.0.11/24")
            .addr("fd00:77::11/64")
            .cmd("echo 'hi'")
            .hold()
            .env("PEER", "it's")
            .file_bytes("/usr/bin/tool", b"\x7fELF".to_vec(), 0o755);
        let a = overlay(&spec, "srv").unwrap();
        assert_eq!(entry(&a, "init").unwrap(), GUEST_INIT.as_bytes());
        let env = String::from_utf8(entry(&a, "roce/env").unwrap().to_vec()).unwrap();
        assert!(env.contains("ROCE_ADDRS='10.77.0.11/24 fd00:77::11/64'\n"), "{env}");
        assert!(env.contains("ROCE_HOLD='1'\n") && env.contains("ROCE_NAME='srv'\n"), "{env}");
        assert!(env.contains("PEER='it'\\''s'\n"), "{env}");
        assert_eq!(entry(&a, "roce/cmd.sh").unwrap(), b"echo 'hi'");
        assert_eq!(entry(&a, "usr/bin/tool").unwrap(), b"\x7fELF");
    }

    #[test]
    fn overlay_rejects_escaping_paths_and_bad_env_names() {
        let bad = GuestSpec::new(Flavour::Bookworm).file_bytes("/../etc/x", b"".to_vec(), 0o644);
        assert!(matches!(overlay(&bad, "g"), Err(HarnessError::BadSpec(_))));
        let bad = GuestSpec::new(Flavour::Bookworm).env("lower", "x");
        assert!(matches!(overlay(&bad, "g"), Err(HarnessError::BadSpec(_))));
    }

    #[test]
    fn default_mac_follows_the_ipv4_address() {
        assert_eq!(default_mac(&["fd00:77::11/64".into(), "10.77.0.12/24".into()], 3), "52:54:00:77:00:0c");
        assert_eq!(default_mac(&["fd00:77::11/64".into()], 3), "52:54:00:77:ff:03");
        assert!(valid_name("srv-1") && !valid_name("a b") && !valid_name(""));
    }
}
