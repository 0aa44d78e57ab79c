//! Event channels (`struct rdma_event_channel`): a semaphore eventfd the program polls, one
//! count per queued event, and the queue. `rdma_get_cm_event` reads one count (blocking, or
//! `EAGAIN` when the program made the descriptor non-blocking), then takes one event.

use super::abi::RdmaEventChannelC;
use super::{lock, EventBox};
use core::ffi::c_int;
use std::collections::VecDeque;
use std::sync::Mutex;

/// An event channel: `struct rdma_event_channel` first, so its address is the program's handle.
#[repr(C)]
pub struct Channel {
    /// What the program sees.
    pub c: RdmaEventChannelC,
    queue: Mutex<VecDeque<Box<EventBox>>>,
}

impl Channel {
    /// A channel with an empty queue.
    pub fn new() -> Result<Box<Channel>, c_int> {
        // SAFETY: plain syscall; the descriptor is checked, then owned by the channel.
        let fd = unsafe { libc::eventfd(0, libc::EFD_SEMAPHORE | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EMFILE));
        }
        Ok(Box::new(Channel { c: RdmaEventChannelC { fd }, queue: Mutex::new(VecDeque::new()) }))
    }

    /// A new channel, registered: the program's handle.
    pub fn register() -> Result<*mut RdmaEventChannelC, c_int> {
        let p = Box::into_raw(Channel::new()?);
        super::CHANNELS.insert(p.cast(), p);
        Ok(p.cast())
    }

    /// Queue an event and make the descriptor readable once more.
    pub fn push(&self, e: Box<EventBox>) {
        lock(&self.queue).push_back(e);
        let one: u64 = 1;
        // SAFETY: our eventfd; 8 bytes from a valid u64 is its ABI.
        unsafe { libc::write(self.c.fd, (&one as *const u64).cast(), 8) };
    }

    /// Wait for (or, on a non-blocking descriptor, look for) the next event. A count whose
    /// event moved to another channel ([`Channel::take_for`]) is passed over.
    pub fn pop(&self) -> Result<Box<EventBox>, c_int> {
        loop {
            let mut v: u64 = 0;
            // SAFETY: our eventfd; reading 8 bytes into a valid u64 is its ABI.
            let n = unsafe { libc::read(self.c.fd, (&mut v as *mut u64).cast(), 8) };
            if n != 8 {
                return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO));
            }
            if let Some(e) = lock(&self.queue).pop_front() {
                return Ok(e);
            }
        }
    }

    /// Take out the queued events of one ID, a listener's connect requests among them
    /// (`rdma_migrate_id` moves them with it).
    #[allow(clippy::vec_box)] // the queue's boxes, moved as they are to the new channel's queue
    pub fn take_for(&self, id: *mut super::abi::RdmaCmIdC) -> Vec<Box<EventBox>> {
        let mut q = lock(&self.queue);
        let of = |e: &EventBox| if e.c.listen_id.is_null() { e.c.id } else { e.c.listen_id };
        let (mine, rest): (VecDeque<_>, VecDeque<_>) = q.drain(..).partition(|e| of(e) == id);
        *q = rest;
        mine.into()
    }

    /// Events waiting.
    pub fn pending(&self) -> usize {
        lock(&self.queue).len()
    }
}

impl Drop for Channel {
    fn drop(&mut self) {
        // SAFETY: the channel owns its descriptor.
        unsafe { libc::close(self.c.fd) };
    }
}
