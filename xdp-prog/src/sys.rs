//! Raw `bpf(2)` commands used by the loader: attr layouts (`union bpf_attr` members from
//! `include/uapi/linux/bpf.h`) and the syscall wrapper.
//!
//! Every attr struct is `#[repr(C)]` with explicit padding fields, so no byte passed to the
//! kernel is uninitialised (the kernel rejects non-zero bytes past the fields it knows).
//! The size argument is the struct's size; the kernel zero-extends shorter attrs.

use std::ffi::c_long;
use std::os::fd::{FromRawFd, OwnedFd};

pub(crate) const BPF_MAP_CREATE: u32 = 0;
pub(crate) const BPF_MAP_LOOKUP_ELEM: u32 = 1;
pub(crate) const BPF_MAP_UPDATE_ELEM: u32 = 2;
pub(crate) const BPF_MAP_DELETE_ELEM: u32 = 3;
pub(crate) const BPF_PROG_LOAD: u32 = 5;
pub(crate) const BPF_PROG_TEST_RUN: u32 = 10;
pub(crate) const BPF_LINK_CREATE: u32 = 28;

pub(crate) const BPF_MAP_TYPE_HASH: u32 = 1;
pub(crate) const BPF_MAP_TYPE_XSKMAP: u32 = 17;
pub(crate) const BPF_MAP_TYPE_REUSEPORT_SOCKARRAY: u32 = 20;
pub(crate) const BPF_PROG_TYPE_SK_REUSEPORT: u32 = 21;
pub(crate) const BPF_SK_REUSEPORT_SELECT: u32 = 39;
pub(crate) const BPF_PROG_TYPE_XDP: u32 = 6;
pub(crate) const BPF_XDP: u32 = 37;
pub(crate) const BPF_F_XDP_HAS_FRAGS: u32 = 1 << 5;
pub(crate) const XDP_FLAGS_SKB_MODE: u32 = 1 << 1;
pub(crate) const XDP_FLAGS_DRV_MODE: u32 = 1 << 2;
pub(crate) const BPF_ANY: u64 = 0;
pub(crate) const BPF_NOEXIST: u64 = 1;

/// `BPF_MAP_CREATE` attr (up to `map_name`).
#[repr(C)]
#[derive(Default)]
pub(crate) struct MapCreateAttr {
    pub map_type: u32,
    pub key_size: u32,
    pub value_size: u32,
    pub max_entries: u32,
    pub map_flags: u32,
    pub inner_map_fd: u32,
    pub numa_node: u32,
    pub map_name: [u8; 16],
}
const _: () = assert!(std::mem::size_of::<MapCreateAttr>() == 44);

/// `BPF_MAP_*_ELEM` attr.
#[repr(C)]
#[derive(Default)]
pub(crate) struct MapElemAttr {
    pub map_fd: u32,
    pub _pad: u32,
    pub key: u64,
    pub value: u64,
    pub flags: u64,
}
const _: () = assert!(std::mem::size_of::<MapElemAttr>() == 32);

/// `BPF_PROG_LOAD` attr (up to `expected_attach_type`).
#[repr(C)]
#[derive(Default)]
pub(crate) struct ProgLoadAttr {
    pub prog_type: u32,
    pub insn_cnt: u32,
    pub insns: u64,
    pub license: u64,
    pub log_level: u32,
    pub log_size: u32,
    pub log_buf: u64,
    pub kern_version: u32,
    pub prog_flags: u32,
    pub prog_name: [u8; 16],
    pub prog_ifindex: u32,
    pub expected_attach_type: u32,
}
const _: () = assert!(std::mem::size_of::<ProgLoadAttr>() == 72);
const _: () = assert!(std::mem::offset_of!(ProgLoadAttr, prog_flags) == 44);
const _: () = assert!(std::mem::offset_of!(ProgLoadAttr, expected_attach_type) == 68);

/// `BPF_LINK_CREATE` attr (common part).
#[repr(C)]
#[derive(Default)]
pub(crate) struct LinkCreateAttr {
    pub prog_fd: u32,
    pub target_ifindex: u32,
    pub attach_type: u32,
    pub flags: u32,
}
const _: () = assert!(std::mem::size_of::<LinkCreateAttr>() == 16);

/// `BPF_PROG_TEST_RUN` attr.
#[repr(C)]
#[derive(Default)]
pub(crate) struct TestRunAttr {
    pub prog_fd: u32,
    pub retval: u32,
    pub data_size_in: u32,
    pub data_size_out: u32,
    pub data_in: u64,
    pub data_out: u64,
    pub repeat: u32,
    pub duration: u32,
    pub ctx_size_in: u32,
    pub ctx_size_out: u32,
    pub ctx_in: u64,
    pub ctx_out: u64,
    pub flags: u32,
    pub cpu: u32,
    pub batch_size: u32,
    pub _pad: u32,
}
const _: () = assert!(std::mem::size_of::<TestRunAttr>() == 80);

/// Copy `name` into a NUL-terminated 16-byte object name (truncated to 15 bytes).
pub(crate) fn obj_name(name: &str) -> [u8; 16] {
    let mut out = [0u8; 16];
    for (o, b) in out.iter_mut().zip(name.bytes().take(15)) {
        *o = if b.is_ascii_alphanumeric() || b == b'_' || b == b'.' { b } else { b'_' };
    }
    out
}

/// Call `bpf(cmd, attr, size_of::<T>())`. Returns the non-negative result or the errno.
///
/// # Safety
/// `attr` must be the attr layout the kernel expects for `cmd`, and every pointer stored in
/// it must be valid for the access the command performs for the duration of the call.
pub(crate) unsafe fn bpf<T>(cmd: u32, attr: &mut T) -> Result<i64, i32> {
    // SAFETY: the caller guarantees `attr` matches `cmd` and its pointers are valid; the
    // size passed is the exact size of `*attr`, so the kernel reads/writes only within it.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd as c_long,
            attr as *mut T as *mut libc::c_void,
            std::mem::size_of::<T>() as c_long,
        )
    };
    if ret < 0 {
        Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
    } else {
        Ok(ret)
    }
}

/// Like [`bpf`] for commands that return a new file descriptor.
///
/// # Safety
/// As for [`bpf`]; additionally `cmd` must be a command whose success result is a new fd.
pub(crate) unsafe fn bpf_fd<T>(cmd: u32, attr: &mut T) -> Result<OwnedFd, i32> {
    // SAFETY: forwarded contract (see above).
    let fd = unsafe { bpf(cmd, attr) }?;
    // SAFETY: the command returned a fresh fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}
