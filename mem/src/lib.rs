//! # uroce-mem: application memory for memory regions
//!
//! A verbs program registers its own buffer (`ibv_reg_mr(pd, addr, len, access)`) and keeps
//! using it: it fills it before posting a SEND or WRITE, reads it after a completion, and
//! lets the peer READ and WRITE it. The engine (`uroce-transport`) has no `unsafe` code; it
//! reaches such memory through its [`AppMemory`] trait, and this crate is where that trait
//! meets raw memory — kept small so it can be audited in one sitting:
//!
//! * [`SharedMemory`]: a zeroed, page-aligned buffer shared between the application and any
//!   number of regions (reference-counted, so it lives as long as either side holds it). The
//!   application reads and writes it with copying accessors ([`SharedMemory::read`],
//!   [`SharedMemory::write`]), never through a long-lived `&mut [u8]`.
//! * [`RawMemory`]: a caller's `(ptr, len)`, for the C ABI, where the caller promises what
//!   `ibv_reg_mr`'s caller promises: the memory stays valid until the region is deregistered.
//!
//! The verbs contract still applies, as with any NIC: the application does not touch the
//! bytes of a work request that is outstanding (a posted receive buffer, a WRITE's source,
//! a region a peer is writing) until its completion. The engine, for its part, borrows the
//! bytes only inside one of its calls, for one copy, and only inside the registered range
//! (`uroce_transport::mr::MrTable` checks key, PD, access and bounds first).

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::fmt;
use std::ptr::NonNull;
use std::sync::Arc;
pub use uroce_transport::mr::AppMemory;

/// Alignment of a [`SharedMemory`] buffer: a page, as `posix_memalign` buffers of perftest.
pub const ALIGN: usize = 4096;

/// An access outside a buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OutOfRange {
    /// Offset asked for.
    pub offset: usize,
    /// Length asked for.
    pub len: usize,
    /// The buffer's length.
    pub size: usize,
}

impl fmt::Display for OutOfRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} bytes at offset {} are outside a {}-byte buffer", self.len, self.offset, self.size)
    }
}

impl std::error::Error for OutOfRange {}

/// The allocation behind a [`SharedMemory`].
struct Block {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: `Block` owns its allocation outright (no thread-local state); the bytes are plain
// `u8`s. Data-race freedom between the application and the engine is the verbs contract
// documented at the crate root, as for memory a NIC reads and writes.
unsafe impl Send for Block {}
// SAFETY: as for `Send`: shared access only copies bytes in and out through raw pointers.
unsafe impl Sync for Block {}

impl Block {
    fn layout(len: usize) -> Layout {
        Layout::from_size_align(len.max(1), ALIGN).expect("length below isize::MAX")
    }
}

impl Drop for Block {
    fn drop(&mut self) {
        // SAFETY: `ptr` came from `alloc_zeroed` with exactly this layout (`SharedMemory::new`)
        // and is freed once, here, when the last handle goes.
        unsafe { dealloc(self.ptr.as_ptr(), Block::layout(self.len)) }
    }
}

/// A zeroed, page-aligned buffer that the application and memory regions share: clone it (a
/// reference count, not a copy), register a clone (`Device::reg_mr_app(pd,
/// Box::new(mem.clone()), access)`), keep using the original.
#[derive(Clone)]
pub struct SharedMemory {
    block: Arc<Block>,
}

impl SharedMemory {
    /// `len` zeroed bytes, page-aligned. Panics only if `len` exceeds `isize::MAX`, and aborts
    /// (as `Vec` does) if the allocation fails.
    pub fn new(len: usize) -> SharedMemory {
        let layout = Block::layout(len);
        // SAFETY: the layout's size is at least 1 (`Block::layout`).
        let p = unsafe { alloc_zeroed(layout) };
        let ptr = NonNull::new(p).unwrap_or_else(|| std::alloc::handle_alloc_error(layout));
        SharedMemory { block: Arc::new(Block { ptr, len }) }
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.block.len
    }

    /// Whether the buffer is empty.
    pub fn is_empty(&self) -> bool {
        self.block.len == 0
    }

    /// The address of the first byte (a region registered without an IOVA has this address).
    pub fn addr(&self) -> u64 {
        self.block.ptr.as_ptr() as u64
    }

    /// The first byte, for a caller that registers part of the buffer as [`RawMemory`].
    pub fn as_ptr(&self) -> *mut u8 {
        self.block.ptr.as_ptr()
    }

    fn range(&self, offset: usize, len: usize) -> Result<(), OutOfRange> {
        match offset.checked_add(len) {
            Some(end) if end <= self.block.len => Ok(()),
            _ => Err(OutOfRange { offset, len, size: self.block.len }),
        }
    }

    /// Copy `dst.len()` bytes from `offset` out of the buffer.
    pub fn read(&self, offset: usize, dst: &mut [u8]) -> Result<(), OutOfRange> {
        self.range(offset, dst.len())?;
        // SAFETY: the range lies inside the allocation (checked above); `dst` is the caller's
        // own slice, so the two do not overlap.
        unsafe { std::ptr::copy_nonoverlapping(self.block.ptr.as_ptr().add(offset), dst.as_mut_ptr(), dst.len()) }
        Ok(())
    }

    /// Copy `src` into the buffer at `offset`.
    pub fn write(&self, offset: usize, src: &[u8]) -> Result<(), OutOfRange> {
        self.range(offset, src.len())?;
        // SAFETY: the range lies inside the allocation (checked above); `src` is the caller's
        // slice and cannot be this buffer's bytes (those are never handed out as slices to the
        // application).
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), self.block.ptr.as_ptr().add(offset), src.len()) }
        Ok(())
    }

    /// A copy of the whole buffer.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = vec![0u8; self.block.len];
        self.read(0, &mut v).expect("the whole buffer is in range");
        v
    }
}

impl fmt::Debug for SharedMemory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SharedMemory({} bytes at {:#x})", self.len(), self.addr())
    }
}

impl AppMemory for SharedMemory {
    fn bytes(&self) -> &[u8] {
        // SAFETY: `ptr` is valid for `len` bytes while `self` (an `Arc` handle) lives; the
        // engine holds the borrow only inside one call (`AppMemory`'s contract), and the
        // application side never holds a reference into the buffer (copying accessors only).
        unsafe { std::slice::from_raw_parts(self.block.ptr.as_ptr(), self.block.len) }
    }
    fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `bytes`; the engine's `MrTable` hands out one mutable borrow at a time
        // (it needs `&mut` itself), so two regions over the same buffer never alias mutably.
        unsafe { std::slice::from_raw_parts_mut(self.block.ptr.as_ptr(), self.block.len) }
    }
}

/// A caller's `(ptr, len)`: what `ibv_reg_mr` registers for a C program.
pub struct RawMemory {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the memory is the caller's; `RawMemory::new`'s contract makes it valid from any
// thread until the region is deregistered.
unsafe impl Send for RawMemory {}

impl RawMemory {
    /// Wrap `len` bytes at `ptr` (a null `ptr` is allowed only with `len == 0`).
    ///
    /// # Safety
    ///
    /// `ptr` must be valid for reads and writes of `len` bytes from now until the region over
    /// it is deregistered and the returned handle dropped, and nothing may hold a Rust
    /// reference into those bytes meanwhile (C callers, and Rust callers using raw pointers,
    /// satisfy this). The verbs contract on outstanding work requests applies.
    pub unsafe fn new(ptr: *mut u8, len: usize) -> Option<RawMemory> {
        match NonNull::new(ptr) {
            Some(ptr) => Some(RawMemory { ptr, len }),
            None if len == 0 => Some(RawMemory { ptr: NonNull::dangling(), len: 0 }),
            None => None,
        }
    }
}

impl fmt::Debug for RawMemory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RawMemory({} bytes at {:p})", self.len, self.ptr)
    }
}

impl AppMemory for RawMemory {
    fn bytes(&self) -> &[u8] {
        // SAFETY: `RawMemory::new`'s contract: valid for `len` bytes until deregistration.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
    fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `bytes`, and no other reference exists (`new`'s contract).
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_buffer_accessors() {
        let m = SharedMemory::new(10_000);
        assert_eq!(m.addr() % ALIGN as u64, 0);
        assert_eq!(m.to_vec(), vec![0u8; 10_000]);
        m.write(9_990, &[1; 10]).unwrap();
        let e = m.write(9_991, &[1; 10]).unwrap_err();
        assert_eq!(e, OutOfRange { offset: 9_991, len: 10, size: 10_000 });
        assert!(m.read(usize::MAX, &mut [0; 2]).is_err());
        let r = m.clone();
        let mut b = [0u8; 11];
        r.read(9_989, &mut b).unwrap();
        assert_eq!(b, [0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]);
        assert_eq!(AppMemory::bytes(&r).len(), 10_000);
        assert_eq!(AppMemory::bytes(&r).as_ptr() as u64, m.addr());
        let z = SharedMemory::new(0);
        assert!(z.is_empty() && AppMemory::bytes(&z).is_empty());
    }

    #[test]
    fn raw_memory_needs_a_pointer_unless_empty() {
        // SAFETY: null with length 0 is never dereferenced.
        assert!(unsafe { RawMemory::new(std::ptr::null_mut(), 0) }.is_some());
        // SAFETY: refused before any use.
        assert!(unsafe { RawMemory::new(std::ptr::null_mut(), 1) }.is_none());
    }
}
