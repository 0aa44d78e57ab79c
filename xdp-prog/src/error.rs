//! The loader's typed error.

use std::fmt;

/// Which `bpf(2)` / interface operation failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// `BPF_MAP_CREATE` of the XSKMAP.
    MapCreate,
    /// `BPF_MAP_UPDATE_ELEM` (register a socket).
    MapUpdate,
    /// `BPF_MAP_DELETE_ELEM` (unregister a socket).
    MapDelete,
    /// `BPF_MAP_LOOKUP_ELEM`.
    MapLookup,
    /// `BPF_PROG_LOAD` failed before the verifier ran (no log), e.g. `EPERM`.
    ProgLoad,
    /// `BPF_LINK_CREATE`.
    LinkCreate,
    /// `BPF_PROG_TEST_RUN`.
    TestRun,
    /// `if_nametoindex`.
    IfNameToIndex,
    /// `SIOCETHTOOL` / `ETHTOOL_GCHANNELS`.
    EthtoolChannels,
    /// `SIOCGIFMTU`.
    InterfaceMtu,
    /// The helper socket for interface ioctls.
    IoctlSocket,
    /// `SO_ATTACH_REUSEPORT_EBPF` on a UDP socket.
    ReuseportAttach,
}

/// Errors from loading, attaching and driving the XDP program.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// A syscall failed with `errno` at `step`.
    Syscall {
        /// The operation.
        step: Step,
        /// `errno` (e.g. `libc::EPERM`).
        errno: i32,
    },
    /// The verifier rejected the program; `log` is its full log (level 1).
    Verifier {
        /// `errno` of the failing `BPF_PROG_LOAD` (usually `EACCES` or `EINVAL`).
        errno: i32,
        /// The verifier log.
        log: String,
    },
    /// No interface with this name in the calling thread's network namespace.
    NoSuchInterface {
        /// The name asked for.
        name: String,
    },
    /// Attaching failed in every mode tried. `None` = mode not tried.
    Attach {
        /// Interface index.
        ifindex: u32,
        /// errno of the native (driver) attempt.
        native: Option<i32>,
        /// errno of the generic (skb) attempt.
        generic: Option<i32>,
    },
    /// A caller-supplied value is out of range.
    InvalidArgument(&'static str),
}

impl Error {
    /// The errno behind this error, if any (for `Attach`, the last one tried).
    pub fn errno(&self) -> Option<i32> {
        match self {
            Error::Syscall { errno, .. } | Error::Verifier { errno, .. } => Some(*errno),
            Error::Attach { native, generic, .. } => generic.or(*native),
            Error::NoSuchInterface { .. } => Some(libc::ENODEV),
            Error::InvalidArgument(_) => Some(libc::EINVAL),
        }
    }
}

fn strerror(errno: i32) -> String {
    std::io::Error::from_raw_os_error(errno).to_string()
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Syscall { step, errno } => write!(f, "{step:?} failed: {}", strerror(*errno)),
            Error::Verifier { errno, log } => {
                write!(f, "BPF_PROG_LOAD rejected by the verifier ({}):\n{log}", strerror(*errno))
            }
            Error::NoSuchInterface { name } => write!(f, "no interface named {name:?}"),
            Error::Attach { ifindex, native, generic } => {
                write!(f, "attaching XDP to ifindex {ifindex} failed:")?;
                if let Some(e) = native {
                    write!(f, " native: {};", strerror(*e))?;
                }
                if let Some(e) = generic {
                    write!(f, " generic: {};", strerror(*e))?;
                }
                Ok(())
            }
            Error::InvalidArgument(what) => write!(f, "invalid argument: {what}"),
        }
    }
}

impl std::error::Error for Error {}

impl From<Error> for std::io::Error {
    fn from(e: Error) -> Self {
        let kind = e.errno().map(std::io::Error::from_raw_os_error);
        match kind {
            Some(io) => std::io::Error::new(io.kind(), e),
            None => std::io::Error::other(e),
        }
    }
}
