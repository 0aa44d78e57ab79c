//! The UMEM: one anonymous, page-aligned mapping cut into equal power-of-two chunks
//! ("frames") that the kernel and user space hand back and forth by address.
//!
//! Ownership of each chunk is implied by where its address currently is: on the fill ring
//! or in the RX ring / TX ring / completion ring the kernel owns it; in a free list, an
//! `RxBatch` or a `TxFrame` user space owns it. This module only hands out byte views;
//! callers guarantee that they own the chunk behind a view (see the `# Safety` sections).

use std::io;

use memmap2::{MmapOptions, MmapRaw};

/// `XDP_PACKET_HEADROOM`: the kernel places received data this far into a chunk (plus the
/// UMEM headroom).
pub const XDP_PACKET_HEADROOM: u32 = 256;
/// Smallest chunk size the kernel accepts in aligned mode.
pub const MIN_CHUNK_SIZE: u32 = 2048;

/// Anonymous memory registered with a socket as its UMEM.
pub struct Umem {
    mem: MmapRaw,
    chunk_size: u32,
    frame_count: u32,
    headroom: u32,
}

impl std::fmt::Debug for Umem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Umem")
            .field("chunk_size", &self.chunk_size)
            .field("frame_count", &self.frame_count)
            .field("headroom", &self.headroom)
            .finish()
    }
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as usize
    } else {
        4096
    }
}

impl Umem {
    /// Map `frame_count` chunks of `chunk_size` bytes. `chunk_size` must be a power of two
    /// between 2048 and the page size; `headroom` is reserved at the start of every chunk
    /// (the kernel adds `XDP_PACKET_HEADROOM` on RX on top of it).
    pub fn new(frame_count: u32, chunk_size: u32, headroom: u32) -> io::Result<Self> {
        Self::check(frame_count, chunk_size, headroom)?;
        let len = frame_count as usize * chunk_size as usize;
        // Private anonymous memory, page aligned by mmap; populated up front so the
        // kernel's pin at XDP_UMEM_REG does not fault pages in one by one.
        let mem = MmapOptions::new().len(len).populate().map_anon()?;
        Ok(Umem { mem: MmapRaw::from(mem), chunk_size, frame_count, headroom })
    }

    /// The same geometry over the first `frame_count * chunk_size` bytes of the shared memory
    /// `fd` (a memfd several processes map: a shared UMEM, `XDP_SHARED_UMEM`). Chunk
    /// addresses are offsets, so each process may map it anywhere.
    pub fn shared(
        fd: std::os::fd::BorrowedFd<'_>,
        frame_count: u32,
        chunk_size: u32,
        headroom: u32,
    ) -> io::Result<Self> {
        Self::check(frame_count, chunk_size, headroom)?;
        let len = frame_count as usize * chunk_size as usize;
        let mem = MmapOptions::new().len(len).populate().map_raw(std::os::fd::AsRawFd::as_raw_fd(&fd))?;
        Ok(Umem { mem, chunk_size, frame_count, headroom })
    }

    fn check(frame_count: u32, chunk_size: u32, headroom: u32) -> io::Result<()> {
        let invalid = |m: &str| io::Error::new(io::ErrorKind::InvalidInput, m.to_string());
        if !chunk_size.is_power_of_two() || chunk_size < MIN_CHUNK_SIZE || chunk_size as usize > page_size() {
            return Err(invalid("chunk_size must be a power of two in 2048..=page size"));
        }
        if headroom + XDP_PACKET_HEADROOM + 64 > chunk_size {
            return Err(invalid("headroom leaves no room for a frame"));
        }
        if frame_count == 0 {
            return Err(invalid("frame_count must be > 0"));
        }
        Ok(())
    }

    /// Chunk size in bytes.
    pub fn chunk_size(&self) -> u32 {
        self.chunk_size
    }
    /// Number of chunks.
    pub fn frame_count(&self) -> u32 {
        self.frame_count
    }
    /// User headroom at the start of each chunk.
    pub fn headroom(&self) -> u32 {
        self.headroom
    }
    /// Total size in bytes.
    pub fn len(&self) -> usize {
        self.mem.len()
    }
    /// Always false (a UMEM has at least one chunk).
    pub fn is_empty(&self) -> bool {
        self.mem.len() == 0
    }
    /// Start of the mapping.
    pub fn as_ptr(&self) -> *mut u8 {
        self.mem.as_mut_ptr()
    }
    /// Address of chunk `i`.
    pub fn chunk_addr(&self, i: u32) -> u64 {
        u64::from(i) * u64::from(self.chunk_size)
    }
    /// The chunk an address (e.g. an RX descriptor's, which points past the headroom)
    /// belongs to.
    pub fn chunk_of(&self, addr: u64) -> u64 {
        addr & !(u64::from(self.chunk_size) - 1)
    }
    /// True if `[addr, addr + len)` lies inside one chunk of this UMEM.
    pub fn contains(&self, addr: u64, len: u32) -> bool {
        let end = addr.checked_add(u64::from(len));
        match end {
            Some(end) => end <= self.mem.len() as u64 && self.chunk_of(addr) + u64::from(self.chunk_size) >= end,
            None => false,
        }
    }
    /// Bytes a TX frame can hold (chunk minus user headroom).
    pub fn tx_capacity(&self) -> u32 {
        self.chunk_size - self.headroom
    }
    /// Bytes an RX descriptor can hold (chunk minus both headrooms).
    pub fn rx_capacity(&self) -> u32 {
        self.chunk_size - self.headroom - XDP_PACKET_HEADROOM
    }

    /// `struct xdp_umem_reg` for `XDP_UMEM_REG`.
    pub(crate) fn reg(&self) -> libc::xdp_umem_reg {
        libc::xdp_umem_reg {
            addr: self.mem.as_mut_ptr() as u64,
            len: self.mem.len() as u64,
            chunk_size: self.chunk_size,
            headroom: self.headroom,
            flags: 0,
            tx_metadata_len: 0,
        }
    }

    /// Bytes `[addr, addr + len)`.
    ///
    /// # Safety
    /// The chunk must be owned by user space (not on the fill or TX ring) and not be
    /// mutably borrowed for the lifetime of the returned slice. The range must satisfy
    /// [`contains`](Self::contains).
    pub(crate) unsafe fn slice(&self, addr: u64, len: u32) -> &[u8] {
        debug_assert!(self.contains(addr, len));
        // SAFETY: in bounds per the caller; the kernel does not write a chunk user space
        // owns, and no `&mut` to it exists (caller), so a shared view is sound.
        unsafe { std::slice::from_raw_parts(self.as_ptr().add(addr as usize), len as usize) }
    }

    /// Mutable bytes `[addr, addr + len)`.
    ///
    /// # Safety
    /// As for [`slice`](Self::slice), and no other view of the range may exist for the
    /// lifetime of the returned slice.
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn slice_mut(&self, addr: u64, len: u32) -> &mut [u8] {
        debug_assert!(self.contains(addr, len));
        // SAFETY: in bounds and exclusively owned per the caller.
        unsafe { std::slice::from_raw_parts_mut(self.as_ptr().add(addr as usize), len as usize) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn geometry_and_bounds() {
        let u = Umem::new(8, 4096, 0).unwrap();
        assert_eq!(u.len(), 8 * 4096);
        assert_eq!(u.as_ptr() as usize % page_size(), 0, "page aligned");
        assert_eq!(u.chunk_addr(3), 3 * 4096);
        assert_eq!(u.chunk_of(3 * 4096 + 256 + 17), 3 * 4096);
        assert!(u.contains(4096 + 256, 3840));
        assert!(!u.contains(4096 + 256, 3841), "crosses into the next chunk");
        assert!(!u.contains(7 * 4096 + 100, 4000), "past the end");
        assert!(!u.contains(u64::MAX - 2, 10), "overflow");
        assert_eq!(u.rx_capacity(), 3840);
        assert_eq!(u.tx_capacity(), 4096);
        let r = u.reg();
        assert_eq!(r.len, 8 * 4096);
        assert_eq!(r.chunk_size, 4096);
    }

    #[test]
    fn rejects_bad_geometry() {
        assert!(Umem::new(8, 3000, 0).is_err());
        assert!(Umem::new(8, 1024, 0).is_err());
        assert!(Umem::new(8, 8192, 0).is_err() || page_size() >= 8192);
        assert!(Umem::new(0, 4096, 0).is_err());
        assert!(Umem::new(8, 2048, 2048 - 256).is_err());
        let u = Umem::new(2, 2048, 64).unwrap();
        assert_eq!(u.rx_capacity(), 2048 - 64 - 256);
    }

    #[test]
    fn views_read_back_what_was_written() {
        let u = Umem::new(2, 2048, 0).unwrap();
        // SAFETY: no kernel involved; the views do not overlap in time.
        unsafe {
            u.slice_mut(2048 + 10, 4).copy_from_slice(&[1, 2, 3, 4]);
            assert_eq!(u.slice(2048 + 10, 4), &[1, 2, 3, 4]);
        }
    }
}
