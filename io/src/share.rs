//! Several uroce processes on one interface (two MPI ranks on one host): each process owns a
//! *block* of QP numbers (the top eight bits of the QPN, 1..=255) and the kernel's steering
//! program gives each frame to the process owning its destination QP
//! (`uroce_xdp_prog::reuseport` for the kernel-UDP backend).
//!
//! The steering objects (a BPF map and program) must be shared by every process, must live
//! exactly as long as some process uses them, and must leave nothing behind when the last one
//! dies, however it dies. Pinning them in bpffs would outlive a crash, so instead a small
//! **broker** process holds them: the first process to [`join`] creates the objects, starts
//! the broker (double-forked, in its own session, named `uroce-broker`, with nothing but the
//! objects' fds open) and joins like every later process. Joining is a connection to the
//! broker's abstract Unix socket (`@uroce/<name>`: abstract names live in the network
//! namespace, as interfaces do); the broker answers with a free block and the objects' fds
//! (`SCM_RIGHTS`). A process holds its connection for as long as it uses the block; the kernel
//! closes it when the process dies, the broker then frees the block, and when no connection is
//! left it exits, which releases the objects.
//!
//! The broker runs in a child forked from an arbitrary (multi-threaded) program, so it calls
//! only async-signal-safe system calls and never allocates.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

/// Most fds the objects may have.
pub const MAX_FDS: usize = 32;
/// Blocks handed out: 1..=255 (block 0 stays with processes that do not share).
pub const MAX_TENANTS: usize = 255;
const MAGIC: u32 = 0x7572_6f63; // "uroc"
const MAX_CONN: usize = MAX_TENANTS + 1;

/// One process's share: its QPN block and the shared objects' fds. Dropping it gives the
/// block back.
#[derive(Debug)]
pub struct Tenancy {
    /// The QPN block this process owns (1..=255).
    pub block: u8,
    /// The shared objects' fds, in the order the creator listed them.
    pub fds: Vec<OwnedFd>,
    /// The broker's process id (for diagnostics: `ps`, `/proc`).
    pub broker: u32,
    _conn: OwnedFd,
}

/// Join the processes sharing `name`, creating its objects with `create` (and the broker) if
/// this is the first. Of processes racing to be first, exactly one creates (it holds the name
/// while it does); the others join it.
pub fn join(name: &str, mut create: impl FnMut() -> io::Result<Vec<OwnedFd>>) -> io::Result<Tenancy> {
    let addr = abstract_addr(name)?;
    let mut last = io::Error::other("no attempt");
    for attempt in 0..100u32 {
        if attempt > 0 {
            // Another process is starting or stopping the broker right now.
            std::thread::sleep(Duration::from_millis(5 + u64::from(attempt.min(20))));
        }
        match connect(&addr) {
            Ok(conn) => match handshake(conn) {
                Ok(t) => return Ok(t),
                Err(e) if is_transient(&e) => last = e,
                Err(e) => return Err(e),
            },
            Err(e) if matches!(e.raw_os_error(), Some(libc::ECONNREFUSED) | Some(libc::ENOENT)) => {
                // Claim the name first: one process creates the objects (an XDP program
                // attaches to an interface once), the others wait in the listener's backlog
                // for the broker to answer them.
                let listener = match listen(&addr) {
                    Ok(l) => l,
                    Err(e) if e.raw_os_error() == Some(libc::EADDRINUSE) => {
                        last = e;
                        continue;
                    }
                    Err(e) => return Err(e),
                };
                let fds = create()?;
                if fds.len() > MAX_FDS {
                    return Err(io::Error::new(io::ErrorKind::InvalidInput, "too many shared fds"));
                }
                let (mine, theirs) = socketpair()?;
                spawn_broker(&listener, &theirs, &fds)?;
                drop((listener, theirs, fds));
                match handshake(mine) {
                    Ok(t) => return Ok(t),
                    Err(e) if is_transient(&e) => last = e,
                    Err(e) => return Err(e),
                }
            }
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::new(last.kind(), format!("joining the uroce processes sharing {name}: {last}")))
}

fn is_transient(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ECONNRESET) | Some(libc::EPIPE) | Some(libc::ECONNREFUSED))
        || e.kind() == io::ErrorKind::UnexpectedEof
}

struct Addr {
    sa: libc::sockaddr_un,
    len: libc::socklen_t,
}

fn abstract_addr(name: &str) -> io::Result<Addr> {
    // SAFETY: sockaddr_un is plain old data.
    let mut sa: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    sa.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let full = format!("uroce/{name}");
    if full.len() + 1 > sa.sun_path.len() {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "share name too long"));
    }
    // sun_path[0] = 0: the abstract namespace.
    for (d, s) in sa.sun_path[1..].iter_mut().zip(full.bytes()) {
        *d = s as libc::c_char;
    }
    let len = (std::mem::offset_of!(libc::sockaddr_un, sun_path) + 1 + full.len()) as libc::socklen_t;
    Ok(Addr { sa, len })
}

fn seqpacket() -> io::Result<OwnedFd> {
    // SAFETY: plain socket(2); the result is checked.
    let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn connect(addr: &Addr) -> io::Result<OwnedFd> {
    let s = seqpacket()?;
    // SAFETY: `addr.sa` is a sockaddr_un of `addr.len` meaningful bytes.
    let rc = unsafe { libc::connect(s.as_raw_fd(), (&addr.sa as *const libc::sockaddr_un).cast(), addr.len) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(s)
}

fn listen(addr: &Addr) -> io::Result<OwnedFd> {
    let s = seqpacket()?;
    // SAFETY: as in `connect`.
    let rc = unsafe { libc::bind(s.as_raw_fd(), (&addr.sa as *const libc::sockaddr_un).cast(), addr.len) };
    // SAFETY: listen(2) on our own socket.
    if rc != 0 || unsafe { libc::listen(s.as_raw_fd(), 64) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(s)
}

fn socketpair() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: `fds` has room for the two descriptors.
    if unsafe { libc::socketpair(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC, 0, fds.as_mut_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: two fresh descriptors nothing else owns.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Ask for a block; receive it and the fds.
fn handshake(conn: OwnedFd) -> io::Result<Tenancy> {
    let c = conn.as_raw_fd();
    let tv = libc::timeval { tv_sec: 10, tv_usec: 0 };
    // SAFETY: the option value is a live timeval.
    unsafe {
        libc::setsockopt(
            c,
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            (&tv as *const libc::timeval).cast(),
            size_of::<libc::timeval>() as libc::socklen_t,
        )
    };
    let hello = MAGIC.to_ne_bytes();
    // SAFETY: `hello` is 4 live bytes.
    if unsafe { libc::send(c, hello.as_ptr().cast(), hello.len(), libc::MSG_NOSIGNAL) } != hello.len() as isize {
        return Err(io::Error::last_os_error());
    }
    let mut reply = [0u32; 4];
    let mut ctrl = [0u64; 24];
    let mut iov = libc::iovec { iov_base: reply.as_mut_ptr().cast(), iov_len: 16 };
    // SAFETY: msghdr is plain old data; the pointers set below outlive the call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = ctrl.as_mut_ptr().cast();
    msg.msg_controllen = size_of_val(&ctrl);
    // SAFETY: `msg` describes the live `reply` and `ctrl` buffers.
    let n = unsafe { libc::recvmsg(c, &mut msg, libc::MSG_CMSG_CLOEXEC) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut fds = Vec::new();
    // SAFETY: CMSG_FIRSTHDR/NXTHDR walk the control data the kernel wrote into `ctrl`.
    unsafe {
        let mut cm = libc::CMSG_FIRSTHDR(&msg);
        while !cm.is_null() {
            if (*cm).cmsg_level == libc::SOL_SOCKET && (*cm).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(cm).cast::<libc::c_int>();
                let count = ((*cm).cmsg_len as usize - libc::CMSG_LEN(0) as usize) / size_of::<libc::c_int>();
                for i in 0..count {
                    fds.push(OwnedFd::from_raw_fd(data.add(i).read_unaligned()));
                }
            }
            cm = libc::CMSG_NXTHDR(&msg, cm);
        }
    }
    if n == 0 {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    if n != 16 || reply[0] != MAGIC {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "unexpected answer from uroce-broker"));
    }
    if reply[1] == 0 || reply[1] > MAX_TENANTS as u32 {
        return Err(io::Error::new(
            io::ErrorKind::ResourceBusy,
            format!("{MAX_TENANTS} uroce processes share this interface already"),
        ));
    }
    if fds.len() != reply[2] as usize {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "uroce-broker sent the wrong number of fds"));
    }
    Ok(Tenancy { block: reply[1] as u8, fds, broker: reply[3], _conn: conn })
}

/// Start the broker: fork, fork again (so that it is nobody's child to reap), and run
/// [`broker_main`] in the grandchild.
fn spawn_broker(listener: &OwnedFd, first: &OwnedFd, fds: &[OwnedFd]) -> io::Result<()> {
    let mut keep = [-1 as RawFd; 3 + MAX_FDS];
    // SAFETY: open(2) of a constant path.
    let devnull = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    if devnull < 0 {
        return Err(io::Error::last_os_error());
    }
    keep[0] = devnull;
    keep[1] = listener.as_raw_fd();
    keep[2] = first.as_raw_fd();
    for (k, f) in keep[3..].iter_mut().zip(fds) {
        *k = f.as_raw_fd();
    }
    let n = 3 + fds.len();
    // SAFETY: fork(2). The child only calls async-signal-safe functions (broker_main).
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        // SAFETY: in the child: fork again; the middle process exits at once.
        unsafe {
            if libc::fork() != 0 {
                libc::_exit(0);
            }
            broker_main(&keep[..n]);
        }
    }
    // SAFETY: closing our own descriptor.
    unsafe { libc::close(devnull) };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    loop {
        // SAFETY: reap the middle process (ECHILD if SIGCHLD is ignored: already reaped).
        let r = unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) };
        if r >= 0 || io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return Ok(());
        }
    }
}

/// The broker: `keep` = [/dev/null, listener, first connection, objects' fds...].
///
/// # Safety
/// Runs in a freshly forked child: only async-signal-safe calls, no allocation, never returns.
unsafe fn broker_main(keep: &[RawFd]) -> ! {
    // SAFETY (whole function): plain system calls on descriptors this process owns; the
    // arrays are on the stack and indexed within their lengths.
    unsafe {
        libc::setsid();
        libc::chdir(c"/".as_ptr());
        libc::prctl(libc::PR_SET_NAME, c"uroce-broker".as_ptr() as libc::c_ulong, 0, 0, 0);
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
        libc::signal(libc::SIGINT, libc::SIG_DFL);
        libc::signal(libc::SIGTERM, libc::SIG_DFL);
        libc::signal(libc::SIGHUP, libc::SIG_DFL);
        // Move what we keep above every other descriptor, close the rest, stdio to /dev/null.
        let mut top = 2;
        for &k in keep {
            top = top.max(k);
        }
        let base = top + 1;
        for (i, &k) in keep.iter().enumerate() {
            libc::dup2(k, base + i as RawFd);
        }
        let n = keep.len() as RawFd;
        libc::syscall(libc::SYS_close_range, 3u32, (base - 1) as u32, 0u32);
        libc::syscall(libc::SYS_close_range, (base + n) as u32, u32::MAX, 0u32);
        for std in 0..3 {
            libc::dup2(base, std);
        }
        let listener = base + 1;
        let mut obj = [-1 as RawFd; MAX_FDS];
        let nobj = keep.len() - 3;
        let mut i = 0;
        while i < nobj && i < MAX_FDS {
            obj[i] = base + 3 + i as RawFd;
            i += 1;
        }
        // conns[i] = (fd, block); block 0 = not yet answered.
        let mut conns = [(-1 as RawFd, 0u32); MAX_CONN];
        let mut used = [false; MAX_TENANTS + 1];
        conns[0] = (base + 2, 0);
        let mut pfds = [libc::pollfd { fd: -1, events: 0, revents: 0 }; MAX_CONN + 1];
        loop {
            let mut live = 0;
            pfds[0] = libc::pollfd { fd: listener, events: libc::POLLIN, revents: 0 };
            let mut j = 0;
            while j < MAX_CONN {
                pfds[j + 1] = libc::pollfd { fd: conns[j].0, events: libc::POLLIN, revents: 0 };
                if conns[j].0 >= 0 {
                    live += 1;
                }
                j += 1;
            }
            if live == 0 {
                // The last process left: release the objects (an XDP link detaches as its
                // last fd closes), then stop taking connections, so that a process finding
                // nobody listening can create them again at once.
                for &o in &obj[..nobj.min(MAX_FDS)] {
                    libc::close(o);
                }
                libc::close(listener);
                libc::_exit(0);
            }
            if libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, -1) < 0 {
                continue;
            }
            if pfds[0].revents & libc::POLLIN != 0 {
                let c = libc::accept4(listener, core::ptr::null_mut(), core::ptr::null_mut(), libc::SOCK_CLOEXEC);
                if c >= 0 {
                    let mut placed = false;
                    let mut j = 0;
                    while j < MAX_CONN {
                        if conns[j].0 < 0 {
                            conns[j] = (c, 0);
                            placed = true;
                            break;
                        }
                        j += 1;
                    }
                    if !placed {
                        libc::close(c);
                    }
                }
            }
            // Departures first, then requests: a block freed by a process that left before
            // another asked is that one's to take.
            for pass in 0..2 {
                let mut j = 0;
                while j < MAX_CONN {
                    let (fd, block) = conns[j];
                    if fd >= 0 && pfds[j + 1].fd == fd && pfds[j + 1].revents != 0 {
                        let mut buf = [0u8; 8];
                        let flags = libc::MSG_DONTWAIT | if pass == 0 { libc::MSG_PEEK } else { 0 };
                        let r = libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), flags);
                        let again = r < 0 && *libc::__errno_location() == libc::EAGAIN;
                        if r == 0 || (r < 0 && !again) {
                            if block != 0 {
                                used[block as usize] = false;
                            }
                            libc::close(fd);
                            conns[j] = (-1, 0);
                        } else if pass == 1
                            && r == 4
                            && block == 0
                            && u32::from_ne_bytes([buf[0], buf[1], buf[2], buf[3]]) == MAGIC
                        {
                            let mut b = 1;
                            while b <= MAX_TENANTS && used[b] {
                                b += 1;
                            }
                            let got = if b <= MAX_TENANTS { b as u32 } else { 0 };
                            if got != 0 {
                                used[b] = true;
                                conns[j].1 = got;
                            }
                            answer(fd, got, if got != 0 { &obj[..nobj.min(MAX_FDS)] } else { &[] });
                        }
                    }
                    j += 1;
                }
            }
        }
    }
}

/// Send `[MAGIC, block, fds.len(), broker pid]` with `fds` attached.
///
/// # Safety
/// Async-signal-safe; `fd` is a connected socket.
unsafe fn answer(fd: RawFd, block: u32, fds: &[RawFd]) {
    // SAFETY: getpid has no preconditions.
    let mut reply = [MAGIC, block, fds.len() as u32, unsafe { libc::getpid() } as u32];
    let mut ctrl = [0u64; 24];
    // SAFETY: the header and buffers are on the stack; CMSG_* compute within `ctrl`, which
    // is large enough for MAX_FDS descriptors (CMSG_SPACE(128) = 144 bytes).
    unsafe {
        let mut iov = libc::iovec { iov_base: reply.as_mut_ptr().cast(), iov_len: 16 };
        let mut msg: libc::msghdr = core::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        if !fds.is_empty() {
            let bytes = size_of_val(fds) as u32;
            msg.msg_control = ctrl.as_mut_ptr().cast();
            msg.msg_controllen = libc::CMSG_SPACE(bytes) as usize;
            let cm = libc::CMSG_FIRSTHDR(&msg);
            (*cm).cmsg_level = libc::SOL_SOCKET;
            (*cm).cmsg_type = libc::SCM_RIGHTS;
            (*cm).cmsg_len = libc::CMSG_LEN(bytes) as usize;
            let data = libc::CMSG_DATA(cm).cast::<libc::c_int>();
            let mut i = 0;
            while i < fds.len() {
                data.add(i).write_unaligned(fds[i]);
                i += 1;
            }
        }
        libc::sendmsg(fd, &msg, libc::MSG_NOSIGNAL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    /// The shared "objects" for a test: a memfd, so that identity is checkable by inode.
    fn memfd() -> io::Result<Vec<OwnedFd>> {
        // SAFETY: memfd_create with a constant name; the result is checked.
        let fd = unsafe { libc::memfd_create(c"uroce-share-test".as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a fresh descriptor nothing else owns.
        Ok(vec![unsafe { OwnedFd::from_raw_fd(fd) }])
    }

    fn inode(fd: impl AsFd) -> u64 {
        // SAFETY: fstat into a zeroed stat on a live descriptor.
        unsafe {
            let mut st: libc::stat = std::mem::zeroed();
            assert_eq!(libc::fstat(fd.as_fd().as_raw_fd(), &mut st), 0);
            st.st_ino
        }
    }

    fn broker_pid(t: &Tenancy) -> libc::pid_t {
        t.broker as libc::pid_t
    }

    /// Wait (up to 10 s) for process `pid` to exit: a pidfd turns readable when it does.
    fn exits(pid: libc::pid_t) -> bool {
        // SAFETY: pidfd_open(2) and poll(2) on our own descriptor.
        unsafe {
            let fd = libc::syscall(libc::SYS_pidfd_open, pid, 0) as libc::c_int;
            if fd < 0 {
                return io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
            }
            let mut p = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
            let n = libc::poll(&mut p, 1, 10_000);
            libc::close(fd);
            n == 1
        }
    }

    /// The tests one at a time: a broker forked by one test holds copies of every fd of the
    /// process until it closes them, which would delay the other test's departures.
    fn serial() -> std::sync::MutexGuard<'static, ()> {
        static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
        LOCK.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn unique(tag: &str) -> String {
        format!("test/{tag}/{}", std::process::id())
    }

    #[test]
    fn processes_get_distinct_blocks_and_the_same_objects_and_the_broker_leaves_with_the_last() {
        let _one = serial();
        let name = unique("blocks");
        let mut created = 0;
        let a = join(&name, || {
            created += 1;
            memfd()
        })
        .unwrap();
        let b = join(&name, || panic!("the objects exist already")).unwrap();
        assert_eq!(created, 1);
        assert_eq!((a.block, b.block), (1, 2));
        assert_eq!(a.fds.len(), 1);
        assert_eq!(inode(&a.fds[0]), inode(&b.fds[0]), "both hold the one shared object");
        let broker = broker_pid(&a);
        assert_eq!(broker, broker_pid(&b));
        assert_ne!(broker, std::process::id() as libc::pid_t);

        // A leaves: its block is free for the next process, the broker stays for B.
        drop(a);
        let c = join(&name, || panic!("the broker still runs")).unwrap();
        assert_eq!(c.block, 1);
        drop((b, c));
        assert!(exits(broker), "the broker exits with its last process");
        assert_eq!(
            connect(&abstract_addr(&name).unwrap()).unwrap_err().raw_os_error(),
            Some(libc::ECONNREFUSED),
            "nothing listens on the name any more"
        );
        // The next process starts over with fresh objects.
        let mut again = false;
        let d = join(&name, || {
            again = true;
            memfd()
        })
        .unwrap();
        assert!(again);
        assert_eq!(d.block, 1);
    }

    /// A process that dies without cleaning up (SIGKILL) gives its block back.
    #[test]
    fn a_killed_process_gives_its_block_back() {
        if let Ok(name) = std::env::var("UROCE_SHARE_TEST_CHILD") {
            let t = join(&name, || panic!("the parent created the objects")).unwrap();
            println!("block={}", t.block);
            // SAFETY: kill(2) on ourselves: die holding the tenancy.
            unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
            unreachable!();
        }
        let _one = serial();
        let name = unique("killed");
        let a = join(&name, memfd).unwrap();
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "share::tests::a_killed_process_gives_its_block_back", "--nocapture"])
            .env("UROCE_SHARE_TEST_CHILD", &name)
            .output()
            .unwrap();
        assert!(!out.status.success(), "the child was killed");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(stdout.contains("block=2"), "child output: {stdout}");
        let b = join(&name, || panic!("the broker still runs")).unwrap();
        assert_eq!(b.block, 2, "the killed child's block is free again");
        let broker = broker_pid(&a);
        drop((a, b));
        assert!(exits(broker));
    }
}
