//! Single-producer / single-consumer rings shared with the kernel (or, in tests, with
//! another [`Producer`]/[`Consumer`] over plain memory).
//!
//! Layout (per `XDP_MMAP_OFFSETS`): a `u32` producer index, a `u32` consumer index, a
//! `u32` flags word and an array of `size` entries (`size` a power of two). Indices are
//! free-running `u32` counters; the slot of index `i` is `i & (size - 1)`, and the ring
//! holds `producer - consumer` (wrapping) entries.
//!
//! Memory ordering (the protocol of `tools/lib/bpf/xsk.h` / libxdp):
//! * a producer writes entries, then publishes the new producer index with **Release**;
//! * a consumer loads the producer index with **Acquire** before reading entries, and
//!   publishes its consumer index with **Release** after it is done with them (so the
//!   producer, which loads the consumer index with **Acquire**, never overwrites an entry
//!   still being read).
//!
//! Each side caches the other side's index and only reloads it when the cached value says
//! the request cannot be satisfied, which keeps the shared cache line cold.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};

use memmap2::MmapRaw;

/// `XDP_RING_NEED_WAKEUP` in a ring's flags word.
const XDP_RING_NEED_WAKEUP: u32 = 1;

/// `struct xdp_desc`: an RX/TX descriptor (UMEM address, length, options).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct XdpDesc {
    /// UMEM offset of the first byte.
    pub addr: u64,
    /// Length in bytes.
    pub len: u32,
    /// `XDP_PKT_CONTD` (more fragments follow) and friends.
    pub options: u32,
}

const _: () = assert!(std::mem::size_of::<XdpDesc>() == 16);

/// `XDP_PKT_CONTD`: another descriptor of the same packet follows.
pub const XDP_PKT_CONTD: u32 = 1;

/// Where one ring's fields live. Plain pointers; lifetime is managed by the owner.
pub struct RingLayout<T> {
    producer: NonNull<AtomicU32>,
    consumer: NonNull<AtomicU32>,
    flags: NonNull<AtomicU32>,
    descs: NonNull<T>,
    size: u32,
}

impl<T> Clone for RingLayout<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for RingLayout<T> {}

impl<T> RingLayout<T> {
    /// # Safety
    /// `base + producer`, `base + consumer`, `base + flags` must point at 4-byte aligned
    /// `u32`s and `base + descs` at `size` properly aligned `T`s, all inside one live
    /// mapping that outlives every ring built from this layout. `size` must be a power of
    /// two.
    pub unsafe fn from_offsets(
        base: *mut u8,
        producer: usize,
        consumer: usize,
        flags: usize,
        descs: usize,
        size: u32,
    ) -> Self {
        debug_assert!(size.is_power_of_two());
        // SAFETY: the caller guarantees the offsets stay inside the mapping, so the pointer
        // additions are in bounds, and `base` is non-null (a live mapping).
        unsafe {
            RingLayout {
                producer: NonNull::new_unchecked(base.add(producer).cast()),
                consumer: NonNull::new_unchecked(base.add(consumer).cast()),
                flags: NonNull::new_unchecked(base.add(flags).cast()),
                descs: NonNull::new_unchecked(base.add(descs).cast()),
                size,
            }
        }
    }

    fn producer(&self) -> &AtomicU32 {
        // SAFETY: `from_offsets`' contract: valid, aligned, and alive while the ring lives.
        unsafe { self.producer.as_ref() }
    }
    fn consumer(&self) -> &AtomicU32 {
        // SAFETY: as for `producer`.
        unsafe { self.consumer.as_ref() }
    }
    fn flags(&self) -> &AtomicU32 {
        // SAFETY: as for `producer`.
        unsafe { self.flags.as_ref() }
    }
    fn slot(&self, idx: u32) -> *mut T {
        // SAFETY: `idx & (size - 1) < size`, inside the entry array (`from_offsets`).
        unsafe { self.descs.as_ptr().add((idx & (self.size - 1)) as usize) }
    }
}

/// The producing side of a ring.
pub struct Producer<T> {
    ring: RingLayout<T>,
    /// Next index to reserve.
    cached_prod: u32,
    /// Consumer index + size, as last loaded: reserving up to here is safe.
    cached_cons: u32,
    /// Producer index as last published.
    published: u32,
    _mem: Option<MmapRaw>,
}

// SAFETY: the ring memory is a shared mapping (or test memory) whose other side is the
// kernel or a test thread; nothing in a Producer is tied to the creating thread, and the
// atomic protocol does not depend on which thread runs this side.
unsafe impl<T: Send> Send for Producer<T> {}

impl<T: Copy> Producer<T> {
    /// # Safety
    /// `ring` must satisfy [`RingLayout::from_offsets`]' contract for as long as this
    /// producer lives (`mem`, if given, is the mapping and is kept alive by it), and no
    /// other producer may exist for the ring.
    pub unsafe fn new(ring: RingLayout<T>, mem: Option<MmapRaw>) -> Self {
        let prod = ring.producer().load(Ordering::Relaxed);
        let cons = ring.consumer().load(Ordering::Acquire);
        Producer { ring, cached_prod: prod, cached_cons: cons.wrapping_add(ring.size), published: prod, _mem: mem }
    }

    /// Ring capacity.
    /// Take up the ring where another producer left it: a ring shared by several processes
    /// (the fill ring of a shared UMEM, `XDP_SHARED_UMEM`), each producing only under a lock
    /// they share. Call it with that lock held, before reserving.
    pub fn resync(&mut self) {
        debug_assert_eq!(self.unsubmitted(), 0, "resync with unsubmitted entries");
        let prod = self.ring.producer().load(Ordering::Acquire);
        self.cached_prod = prod;
        self.published = prod;
        self.cached_cons = self.ring.consumer().load(Ordering::Acquire).wrapping_add(self.ring.size);
    }

    pub fn size(&self) -> u32 {
        self.ring.size
    }

    /// Free slots, reloading the consumer index only if fewer than `want` look free.
    pub fn free(&mut self, want: u32) -> u32 {
        let free = self.cached_cons.wrapping_sub(self.cached_prod);
        if free >= want {
            return free;
        }
        self.cached_cons = self.ring.consumer().load(Ordering::Acquire).wrapping_add(self.ring.size);
        self.cached_cons.wrapping_sub(self.cached_prod)
    }

    /// Reserve up to `max` slots. Returns `(first index, count)`; fill them with
    /// [`write`](Self::write), then [`submit`](Self::submit).
    pub fn reserve(&mut self, max: u32) -> (u32, u32) {
        let n = self.free(max).min(max);
        let start = self.cached_prod;
        self.cached_prod = self.cached_prod.wrapping_add(n);
        (start, n)
    }

    /// Reserve exactly `n` slots or none.
    pub fn reserve_exact(&mut self, n: u32) -> Option<u32> {
        if self.free(n) < n {
            return None;
        }
        let start = self.cached_prod;
        self.cached_prod = self.cached_prod.wrapping_add(n);
        Some(start)
    }

    /// Write entry `idx` (an index handed out by `reserve`, not yet submitted).
    pub fn write(&mut self, idx: u32, value: T) {
        debug_assert!(
            idx.wrapping_sub(self.published) < self.cached_prod.wrapping_sub(self.published),
            "write outside the reserved window"
        );
        // SAFETY: the slot pointer is inside the entry array; the slot belongs to the
        // reserved, unpublished window, which the consumer does not read (it only reads
        // below the published producer index).
        unsafe { self.ring.slot(idx).write(value) }
    }

    /// Give back the last `n` reserved, unsubmitted slots.
    pub fn cancel(&mut self, n: u32) {
        let n = n.min(self.unsubmitted());
        self.cached_prod = self.cached_prod.wrapping_sub(n);
    }

    /// Reserved but not yet submitted slots.
    pub fn unsubmitted(&self) -> u32 {
        self.cached_prod.wrapping_sub(self.published)
    }

    /// Publish the next `n` reserved slots (Release: entries become visible first).
    pub fn submit(&mut self, n: u32) {
        let n = n.min(self.unsubmitted());
        self.published = self.published.wrapping_add(n);
        self.ring.producer().store(self.published, Ordering::Release);
    }

    /// Publish everything reserved so far.
    pub fn submit_all(&mut self) -> u32 {
        let n = self.unsubmitted();
        if n > 0 {
            self.submit(n);
        }
        n
    }

    /// Published entries the consumer has not consumed yet.
    pub fn pending(&self) -> u32 {
        self.published.wrapping_sub(self.ring.consumer().load(Ordering::Acquire))
    }

    /// The consumer asked to be woken (`XDP_RING_NEED_WAKEUP`).
    pub fn needs_wakeup(&self) -> bool {
        self.ring.flags().load(Ordering::Relaxed) & XDP_RING_NEED_WAKEUP != 0
    }
}

/// The consuming side of a ring.
pub struct Consumer<T> {
    ring: RingLayout<T>,
    /// Producer index as last loaded.
    cached_prod: u32,
    /// Next index to peek.
    cached_cons: u32,
    /// Consumer index as last published.
    released: u32,
    _mem: Option<MmapRaw>,
}

// SAFETY: see `Producer`'s Send impl.
unsafe impl<T: Send> Send for Consumer<T> {}

impl<T: Copy> Consumer<T> {
    /// # Safety
    /// As for [`Producer::new`], with "no other consumer".
    pub unsafe fn new(ring: RingLayout<T>, mem: Option<MmapRaw>) -> Self {
        let cons = ring.consumer().load(Ordering::Relaxed);
        let prod = ring.producer().load(Ordering::Acquire);
        Consumer { ring, cached_prod: prod, cached_cons: cons, released: cons, _mem: mem }
    }

    /// Ring capacity.
    /// Take up the ring where another consumer left it (the completion ring of a shared
    /// UMEM); as [`Producer::resync`], under the consumers' shared lock.
    pub fn resync(&mut self) {
        debug_assert_eq!(self.unreleased(), 0, "resync with unreleased entries");
        let cons = self.ring.consumer().load(Ordering::Acquire);
        self.cached_cons = cons;
        self.released = cons;
        self.cached_prod = self.ring.producer().load(Ordering::Acquire);
    }

    pub fn size(&self) -> u32 {
        self.ring.size
    }

    /// Entries the ring's shared indices show nobody has consumed yet, whichever consumer last
    /// took it (a look without the consumers' lock: a stale answer only means the entries are
    /// taken at a later look).
    pub fn shared_len(&self) -> u32 {
        self.ring.producer().load(Ordering::Acquire).wrapping_sub(self.ring.consumer().load(Ordering::Acquire))
    }

    /// Entries ready to peek (at most `max`), reloading the producer index only if fewer
    /// than `max` are known.
    pub fn available(&mut self, max: u32) -> u32 {
        let mut n = self.cached_prod.wrapping_sub(self.cached_cons);
        if n < max {
            self.cached_prod = self.ring.producer().load(Ordering::Acquire);
            n = self.cached_prod.wrapping_sub(self.cached_cons);
        }
        n.min(max)
    }

    /// Take up to `max` entries: `(first index, count)`. Read them with
    /// [`read`](Self::read), then [`release`](Self::release) them.
    pub fn peek(&mut self, max: u32) -> (u32, u32) {
        let n = self.available(max);
        let start = self.cached_cons;
        self.cached_cons = self.cached_cons.wrapping_add(n);
        (start, n)
    }

    /// Read entry `idx` (peeked, not yet released).
    pub fn read(&self, idx: u32) -> T {
        debug_assert!(
            idx.wrapping_sub(self.released) < self.cached_cons.wrapping_sub(self.released),
            "read outside the peeked window"
        );
        // SAFETY: the slot pointer is inside the entry array; the entry is below the
        // producer index loaded with Acquire (so fully written) and not yet released (so
        // the producer does not overwrite it).
        unsafe { self.ring.slot(idx).read() }
    }

    /// Un-peek the last `n` peeked, unreleased entries (they will be peeked again).
    pub fn cancel(&mut self, n: u32) {
        let n = n.min(self.unreleased());
        self.cached_cons = self.cached_cons.wrapping_sub(n);
    }

    /// Peeked but not released entries.
    pub fn unreleased(&self) -> u32 {
        self.cached_cons.wrapping_sub(self.released)
    }

    /// Hand the next `n` peeked entries back to the producer (Release: our reads happen
    /// before the producer may reuse the slots).
    pub fn release(&mut self, n: u32) {
        let n = n.min(self.unreleased());
        self.released = self.released.wrapping_add(n);
        self.ring.consumer().store(self.released, Ordering::Release);
    }

    /// The producer asked to be woken (`XDP_RING_NEED_WAKEUP`).
    pub fn needs_wakeup(&self) -> bool {
        self.ring.flags().load(Ordering::Relaxed) & XDP_RING_NEED_WAKEUP != 0
    }
}

/// The fill ring: user space → kernel, UMEM chunk addresses to receive into.
pub struct FillRing(pub(crate) Producer<u64>);

impl FillRing {
    /// Put as many of `addrs` (a prefix) as fit on the ring and publish them. Returns how
    /// many were taken.
    pub fn produce(&mut self, addrs: &[u64]) -> usize {
        let (start, n) = self.0.reserve(addrs.len() as u32);
        for (i, &a) in addrs[..n as usize].iter().enumerate() {
            self.0.write(start.wrapping_add(i as u32), a);
        }
        self.0.submit(n);
        n as usize
    }
    /// Addresses on the ring not yet taken by the kernel.
    pub fn pending(&self) -> u32 {
        self.0.pending()
    }
    /// The driver wants a wakeup (`poll`/`recvfrom`) to pick up new fill entries.
    pub fn needs_wakeup(&self) -> bool {
        self.0.needs_wakeup()
    }
}

/// The completion ring: kernel → user space, addresses of transmitted TX frames.
pub struct CompletionRing(pub(crate) Consumer<u64>);

impl CompletionRing {
    /// Move up to `max` completed addresses into `out`; returns the count.
    pub fn consume(&mut self, max: u32, out: &mut Vec<u64>) -> usize {
        let (start, n) = self.0.peek(max);
        out.extend((0..n).map(|i| self.0.read(start.wrapping_add(i))));
        self.0.release(n);
        n as usize
    }
}

/// The RX ring: kernel → user space, received descriptors.
pub struct RxRing(pub(crate) Consumer<XdpDesc>);

impl RxRing {
    /// Peek up to `max` descriptors: `(first index, count)`.
    pub fn peek(&mut self, max: u32) -> (u32, u32) {
        self.0.peek(max)
    }
    /// Descriptor at a peeked index.
    pub fn desc(&self, idx: u32) -> XdpDesc {
        self.0.read(idx)
    }
    /// Un-peek the last `n` peeked descriptors.
    pub fn cancel(&mut self, n: u32) {
        self.0.cancel(n)
    }
    /// Release the next `n` peeked descriptors.
    pub fn release(&mut self, n: u32) {
        self.0.release(n)
    }
}

/// The TX ring: user space → kernel, descriptors to transmit.
pub struct TxRing(pub(crate) Producer<XdpDesc>);

impl TxRing {
    /// Queue all of `descs` (one packet: every descriptor but the last carries
    /// `XDP_PKT_CONTD`) or none of them. Not visible to the kernel before
    /// [`publish`](Self::publish).
    pub fn push_all(&mut self, descs: &[XdpDesc]) -> bool {
        let Some(start) = self.0.reserve_exact(descs.len() as u32) else {
            return false;
        };
        for (i, d) in descs.iter().enumerate() {
            self.0.write(start.wrapping_add(i as u32), *d);
        }
        true
    }
    /// Publish everything queued; returns how many descriptors were published.
    pub fn publish(&mut self) -> u32 {
        self.0.submit_all()
    }
    /// Published descriptors the kernel has not picked up yet.
    pub fn pending(&self) -> u32 {
        self.0.pending()
    }
    /// Queued, unpublished descriptors.
    pub fn unpublished(&self) -> u32 {
        self.0.unsubmitted()
    }
    /// The kernel wants a `sendto` kick to process the ring.
    pub fn needs_wakeup(&self) -> bool {
        self.0.needs_wakeup()
    }
    /// Free slots.
    pub fn free(&mut self) -> u32 {
        let size = self.0.size();
        self.0.free(size)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Ring memory on the heap: three index words and `size` entries, like one mmapped
    /// ring. Producers/consumers built from it must not outlive it.
    pub(crate) struct TestRing<T> {
        words: Box<[AtomicU32; 4]>,
        entries: Box<[std::cell::UnsafeCell<T>]>,
    }

    // SAFETY: entries are only accessed through one Producer and one Consumer following
    // the ring protocol (Release/Acquire on the index words), which orders every write
    // before the corresponding read.
    unsafe impl<T: Send> Sync for TestRing<T> {}

    impl<T: Copy + Default> TestRing<T> {
        pub(crate) fn new(size: u32, start: u32) -> Self {
            let words = Box::new([AtomicU32::new(start), AtomicU32::new(start), AtomicU32::new(0), AtomicU32::new(0)]);
            let entries = (0..size).map(|_| std::cell::UnsafeCell::new(T::default())).collect();
            TestRing { words, entries }
        }

        fn layout(&self) -> RingLayout<T> {
            RingLayout {
                producer: NonNull::from(&self.words[0]),
                consumer: NonNull::from(&self.words[1]),
                flags: NonNull::from(&self.words[2]),
                // UnsafeCell<T> has T's layout; writes go through the raw pointer.
                descs: NonNull::new(self.entries.as_ptr() as *mut T).unwrap(),
                size: self.entries.len() as u32,
            }
        }

        pub(crate) fn pair(&self) -> (Producer<T>, Consumer<T>) {
            // SAFETY: the layout points into `self`, which the tests keep alive longer
            // than the pair; exactly one producer and one consumer are created.
            unsafe { (Producer::new(self.layout(), None), Consumer::new(self.layout(), None)) }
        }

        pub(crate) fn set_flags(&self, v: u32) {
            self.words[2].store(v, Ordering::Relaxed);
        }
    }

    fn push(p: &mut Producer<u64>, vals: impl Iterator<Item = u64>, max: u32) -> u32 {
        let vals: Vec<u64> = vals.take(max as usize).collect();
        let (start, n) = p.reserve(vals.len() as u32);
        for i in 0..n {
            p.write(start.wrapping_add(i), vals[i as usize]);
        }
        p.submit(n);
        n
    }

    fn pop(c: &mut Consumer<u64>, max: u32) -> Vec<u64> {
        let (start, n) = c.peek(max);
        let out = (0..n).map(|i| c.read(start.wrapping_add(i))).collect();
        c.release(n);
        out
    }

    #[test]
    fn fifo_and_capacity() {
        let mem = TestRing::<u64>::new(8, 0);
        let (mut p, mut c) = mem.pair();
        assert_eq!(push(&mut p, 0.., 5), 5);
        assert_eq!(push(&mut p, 5.., 10), 3, "only 8 slots");
        assert_eq!(p.reserve(1), (8, 0), "full ring reserves nothing");
        assert_eq!(p.pending(), 8);
        assert_eq!(pop(&mut c, 3), vec![0, 1, 2]);
        assert_eq!(p.pending(), 5);
        assert_eq!(push(&mut p, 8.., 10), 3, "3 slots freed");
        assert_eq!(pop(&mut c, 100), vec![3, 4, 5, 6, 7, 8, 9, 10]);
        assert!(pop(&mut c, 100).is_empty());
    }

    #[test]
    fn unsubmitted_entries_are_invisible() {
        let mem = TestRing::<u64>::new(4, 0);
        let (mut p, mut c) = mem.pair();
        let (start, n) = p.reserve(2);
        assert_eq!(n, 2);
        p.write(start, 7);
        p.write(start + 1, 8);
        assert_eq!(c.available(4), 0);
        p.submit(1);
        assert_eq!(pop(&mut c, 4), vec![7]);
        p.submit_all();
        assert_eq!(pop(&mut c, 4), vec![8]);
    }

    #[test]
    fn wraparound_of_u32_indices_with_varied_batches() {
        for start in [0u32, u32::MAX - 3, u32::MAX - 64, u32::MAX] {
            let mem = TestRing::<u64>::new(16, start);
            let (mut p, mut c) = mem.pair();
            let mut next_in = 0u64;
            let mut next_out = 0u64;
            let batches = [1u32, 3, 16, 7, 5, 2, 9, 16, 13, 4];
            for round in 0..200 {
                let b = batches[round % batches.len()];
                next_in += u64::from(push(&mut p, next_in.., b));
                let got = pop(&mut c, batches[(round + 3) % batches.len()]);
                for v in got {
                    assert_eq!(v, next_out, "start {start:#x} round {round}");
                    next_out += 1;
                }
                assert!(next_in - next_out <= 16);
            }
            for v in pop(&mut c, 16) {
                assert_eq!(v, next_out);
                next_out += 1;
            }
            assert_eq!(next_in, next_out);
            assert!(next_in > 500, "the indices wrapped past u32::MAX");
        }
    }

    #[test]
    fn cancel_rewinds_both_sides() {
        let mem = TestRing::<u64>::new(8, u32::MAX - 1);
        let (mut p, mut c) = mem.pair();
        let (s, n) = p.reserve(4);
        assert_eq!(n, 4);
        for i in 0..4 {
            p.write(s.wrapping_add(i), u64::from(i));
        }
        p.cancel(2);
        assert_eq!(p.submit_all(), 2);
        let (s, n) = c.peek(8);
        assert_eq!(n, 2);
        assert_eq!(c.read(s), 0);
        c.cancel(1);
        c.release(1);
        assert_eq!(pop(&mut c, 8), vec![1]);
        assert_eq!(p.free(8), 8);
    }

    #[test]
    fn reserve_exact_is_all_or_nothing() {
        let mem = TestRing::<u64>::new(4, 0);
        let (mut p, _c) = mem.pair();
        assert!(p.reserve_exact(3).is_some());
        assert!(p.reserve_exact(2).is_none());
        assert!(p.reserve_exact(1).is_some());
        assert!(p.reserve_exact(1).is_none());
    }

    #[test]
    fn need_wakeup_flag_is_read_from_the_ring() {
        let mem = TestRing::<u64>::new(4, 0);
        let (p, c) = mem.pair();
        assert!(!p.needs_wakeup() && !c.needs_wakeup());
        mem.set_flags(XDP_RING_NEED_WAKEUP);
        assert!(p.needs_wakeup() && c.needs_wakeup());
    }

    #[test]
    fn typed_rings_round_trip() {
        let mem = TestRing::<XdpDesc>::new(4, u32::MAX);
        let (p, c) = mem.pair();
        let (mut tx, mut rx) = (TxRing(p), RxRing(c));
        let d = |a| XdpDesc { addr: a, len: 60, options: 0 };
        assert!(tx.push_all(&[d(1), d(2), d(3)]));
        assert!(!tx.push_all(&[d(4), d(5)]), "only one slot left: all or nothing");
        assert_eq!(tx.unpublished(), 3);
        assert_eq!(rx.peek(4).1, 0, "not published yet");
        assert_eq!(tx.publish(), 3);
        let (s, n) = rx.peek(4);
        assert_eq!(n, 3);
        assert_eq!(rx.desc(s.wrapping_add(2)), d(3));
        rx.release(3);
        assert_eq!(tx.free(), 4);

        let mem = TestRing::<u64>::new(4, 0);
        let (p, c) = mem.pair();
        let (mut fill, mut comp) = (FillRing(p), CompletionRing(c));
        assert_eq!(fill.produce(&[10, 20, 30, 40, 50]), 4);
        assert_eq!(fill.pending(), 4);
        let mut out = Vec::new();
        assert_eq!(comp.consume(2, &mut out), 2);
        assert_eq!(comp.consume(8, &mut out), 2);
        assert_eq!(out, vec![10, 20, 30, 40]);
    }

    /// Producer and consumer on two threads: the Acquire/Release protocol delivers every
    /// value, in order, with no torn or stale entry.
    #[test]
    fn two_threads_transfer_a_million_entries() {
        const N: u64 = 1_000_000;
        let mem = std::sync::Arc::new(TestRing::<XdpDesc>::new(64, u32::MAX - 10));
        let (mut p, mut c) = mem.pair();
        let keep = mem.clone();
        let producer = std::thread::spawn(move || {
            let _keep = keep;
            let mut next = 0u64;
            while next < N {
                let (s, n) = p.reserve(((N - next) as u32).min(17));
                for i in 0..n {
                    let v = next + u64::from(i);
                    p.write(s.wrapping_add(i), XdpDesc { addr: v, len: v as u32 ^ 0xa5a5_a5a5, options: !(v as u32) });
                }
                p.submit(n);
                next += u64::from(n);
                if n == 0 {
                    std::hint::spin_loop();
                }
            }
        });
        let mut expect = 0u64;
        while expect < N {
            let (s, n) = c.peek(23);
            for i in 0..n {
                let d = c.read(s.wrapping_add(i));
                assert_eq!(d.addr, expect);
                assert_eq!(d.len, expect as u32 ^ 0xa5a5_a5a5);
                assert_eq!(d.options, !(expect as u32));
                expect += 1;
            }
            c.release(n);
            if n == 0 {
                std::hint::spin_loop();
            }
        }
        producer.join().unwrap();
    }
}
