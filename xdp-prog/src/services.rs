//! Which process listens on which CM service: the map the steering programs (the reuseport
//! program for kernel UDP, the XDP program with [`crate::ProgramConfig::by_block`]) look a REQ's
//! or SIDR REQ's service ID up in (`uroce_wire::cm::steer`), shared by the processes on an
//! interface.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use crate::error::{Error, Step};
use crate::loader::{map_delete, map_lookup, map_update, map_update_flags};
use crate::sys::{self, *};

/// Services listened on at once, over all the processes of a port.
pub const MAX_SERVICES: u32 = 4096;

/// A value of the map: the listener's block (what the programs read, the first 4 bytes) and
/// its process, to tell a live listener from one that died.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct ListenerEntry {
    block: u32,
    pid: u32,
}

/// Whether process `pid` exists (`kill(pid, 0)`: `EPERM` means it does).
fn pid_alive(pid: u32) -> bool {
    // SAFETY: signal 0 only checks for existence and permission.
    let rc = unsafe { libc::kill(pid as libc::pid_t, 0) };
    rc == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// A `BPF_MAP_TYPE_HASH`: service ID (8 bytes, big-endian as on the wire) → listener.
#[derive(Debug)]
pub struct ServiceMap {
    fd: OwnedFd,
}

impl ServiceMap {
    /// Create the map.
    pub fn create() -> Result<Self, Error> {
        let mut attr = MapCreateAttr {
            map_type: BPF_MAP_TYPE_HASH,
            key_size: 8,
            value_size: size_of::<ListenerEntry>() as u32,
            max_entries: MAX_SERVICES,
            map_name: sys::obj_name("uroce_cm_svcs"),
            ..Default::default()
        };
        // SAFETY: MapCreateAttr is the BPF_MAP_CREATE layout and holds no pointers.
        let fd = unsafe { bpf_fd(BPF_MAP_CREATE, &mut attr) }
            .map_err(|errno| Error::Syscall { step: Step::MapCreate, errno })?;
        Ok(ServiceMap { fd })
    }

    /// The map behind an fd another process created.
    pub fn from_fd(fd: OwnedFd) -> Self {
        ServiceMap { fd }
    }

    /// REQs and SIDR REQs for `service_id` go to `block` from now on. `EADDRINUSE` (as
    /// [`Error::Syscall`]) if a live process listens on it already (this one included); a
    /// process that died listening leaves its entry, which is taken over (the kernel's bind
    /// would have freed the port with the process).
    pub fn listen(&self, service_id: u64, block: u32) -> Result<(), Error> {
        let key = service_id.to_be_bytes();
        // SAFETY: getpid has no preconditions.
        let me = ListenerEntry { block, pid: unsafe { libc::getpid() } as u32 };
        match map_update_flags(self.fd.as_fd(), &key, &me, BPF_NOEXIST) {
            Err(Error::Syscall { step, errno: libc::EEXIST }) => {
                let held: Option<ListenerEntry> = map_lookup(self.fd.as_fd(), &key)?;
                match held {
                    Some(h) if h.pid == me.pid || pid_alive(h.pid) => {
                        Err(Error::Syscall { step, errno: libc::EADDRINUSE })
                    }
                    _ => map_update(self.fd.as_fd(), &key, &me),
                }
            }
            r => r,
        }
    }

    /// Nobody's REQs for `service_id` any more.
    pub fn unlisten(&self, service_id: u64) -> Result<(), Error> {
        map_delete(self.fd.as_fd(), &service_id.to_be_bytes())
    }
}

impl AsFd for ServiceMap {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}
