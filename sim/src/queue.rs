//! The event queue: a timing wheel for the near future, a binary heap beyond it.
//!
//! A simulated 100 Gbit/s fabric has an event every few tens of nanoseconds, nearly all of
//! them within a few microseconds of the present (a frame's departure and arrival), and a few
//! far ahead (retransmission timers). The wheel has [`SLOTS`] slots of [`SLOT_NS`] each; an
//! event beyond its horizon waits in the heap and moves into the wheel when the present comes
//! close. Events pop in (time, sequence) order, ties in the order they were pushed: the same
//! order as a heap keyed by (time, sequence), which `tests` check against one.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// log2 of a slot's width in nanoseconds.
const SHIFT: u32 = 8;
/// A slot's width: 256 ns.
pub const SLOT_NS: u64 = 1 << SHIFT;
/// Slots in the wheel (a power of two): a horizon of 256 · 256 ns = 65.5 µs.
pub const SLOTS: usize = 256;
const MASK: u64 = SLOTS as u64 - 1;

struct Entry<E> {
    t: u64,
    seq: u64,
    ev: E,
}

/// Far entries, ordered by (time, sequence) only.
struct Far<E>(Entry<E>);
impl<E> PartialEq for Far<E> {
    fn eq(&self, o: &Self) -> bool {
        (self.0.t, self.0.seq) == (o.0.t, o.0.seq)
    }
}
impl<E> Eq for Far<E> {}
impl<E> PartialOrd for Far<E> {
    fn partial_cmp(&self, o: &Self) -> Option<core::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl<E> Ord for Far<E> {
    fn cmp(&self, o: &Self) -> core::cmp::Ordering {
        (self.0.t, self.0.seq).cmp(&(o.0.t, o.0.seq))
    }
}

/// Events of type `E` at nanosecond times.
pub struct EventQueue<E> {
    slots: Vec<Vec<Entry<E>>>,
    /// One bit per slot: not empty.
    occupied: Vec<u64>,
    /// The absolute slot (time >> SHIFT) of the present: every wheel entry's slot is in
    /// `cur .. cur + SLOTS`.
    cur: u64,
    in_wheel: usize,
    far: BinaryHeap<Reverse<Far<E>>>,
    seq: u64,
}

impl<E> Default for EventQueue<E> {
    fn default() -> Self {
        Self::new()
    }
}

impl<E> EventQueue<E> {
    /// An empty queue at time 0.
    pub fn new() -> Self {
        EventQueue {
            slots: (0..SLOTS).map(|_| Vec::new()).collect(),
            occupied: vec![0; SLOTS / 64],
            cur: 0,
            in_wheel: 0,
            far: BinaryHeap::new(),
            seq: 0,
        }
    }

    /// Events queued.
    pub fn len(&self) -> usize {
        self.in_wheel + self.far.len()
    }

    /// Whether none is queued.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Queue `ev` at time `t` (ns). A time before the last one popped is allowed (the wheel
    /// winds back, at a cost: meant for between runs).
    pub fn push(&mut self, t: u64, ev: E) {
        self.seq += 1;
        let e = Entry { t, seq: self.seq, ev };
        let a = t >> SHIFT;
        if a < self.cur {
            self.rewind(a);
        }
        self.insert(e);
    }

    fn insert(&mut self, e: Entry<E>) {
        let a = e.t >> SHIFT;
        if a < self.cur + SLOTS as u64 {
            let i = (a & MASK) as usize;
            self.slots[i].push(e);
            self.occupied[i / 64] |= 1 << (i % 64);
            self.in_wheel += 1;
        } else {
            self.far.push(Reverse(Far(e)));
        }
    }

    /// Everything out of the wheel, then the present set back to slot `a`.
    fn rewind(&mut self, a: u64) {
        for i in 0..SLOTS {
            for e in self.slots[i].drain(..) {
                self.far.push(Reverse(Far(e)));
            }
        }
        self.occupied.fill(0);
        self.in_wheel = 0;
        self.cur = a;
        self.migrate();
    }

    /// Far entries that came within the horizon go into the wheel.
    fn migrate(&mut self) {
        while self.far.peek().is_some_and(|Reverse(Far(e))| e.t >> SHIFT < self.cur + SLOTS as u64) {
            let Some(Reverse(Far(e))) = self.far.pop() else { break };
            self.insert(e);
        }
    }

    /// The next occupied slot at or after `cur` (absolute), if the wheel holds anything.
    fn next_occupied(&self) -> Option<u64> {
        if self.in_wheel == 0 {
            return None;
        }
        let start = (self.cur & MASK) as usize;
        let words = SLOTS / 64;
        // the first word with its bits below `start` masked off, then the others in turn
        for k in 0..=words {
            let w = (start / 64 + k) % words;
            let mut bits = self.occupied[w];
            if k == 0 {
                bits &= !0u64 << (start % 64);
            } else if k == words {
                bits &= (1u64 << (start % 64)).wrapping_sub(1);
            }
            if bits != 0 {
                let i = w * 64 + bits.trailing_zeros() as usize;
                let ahead = (i as u64).wrapping_sub(self.cur & MASK) & MASK;
                return Some(self.cur + ahead);
            }
        }
        None
    }

    /// The earliest event, if its time is at most `until`.
    pub fn pop_until(&mut self, until: u64) -> Option<(u64, E)> {
        let end = until >> SHIFT;
        loop {
            let a = match self.next_occupied() {
                Some(a) => a,
                None => {
                    let a = self.far.peek()?.0 .0.t >> SHIFT;
                    if a > end {
                        return None;
                    }
                    self.cur = a;
                    self.migrate();
                    continue;
                }
            };
            if a > end {
                return None;
            }
            if a > self.cur {
                self.cur = a;
                // far entries may now fall before the wheel's next one
                if self.far.peek().is_some_and(|Reverse(Far(e))| e.t >> SHIFT < self.cur + SLOTS as u64) {
                    self.migrate();
                    continue;
                }
            }
            let i = (a & MASK) as usize;
            let slot = &mut self.slots[i];
            let (k, first) = slot.iter().enumerate().min_by_key(|(_, e)| (e.t, e.seq)).expect("an occupied slot");
            if first.t > until {
                return None;
            }
            let e = slot.swap_remove(k);
            if slot.is_empty() {
                self.occupied[i / 64] &= !(1 << (i % 64));
            }
            self.in_wheel -= 1;
            return Some((e.t, e.ev));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Pushes and pops interleaved (times near and far, ties, pushes before the last pop
        /// between runs) come out exactly as from a heap keyed by (time, sequence).
        #[test]
        fn same_order_as_a_heap(ops in proptest::collection::vec((0u8..4, 0u64..3, 0u64..2_000_000), 1..400)) {
            let mut q = EventQueue::new();
            let mut h: BinaryHeap<Reverse<(u64, u64)>> = BinaryHeap::new();
            let (mut now, mut seq) = (0u64, 0u64);
            for (op, scale, x) in ops {
                match op {
                    0 | 1 => {
                        // a delay of up to 2 ns, 2 µs or 2 ms (beyond the horizon)
                        let d = x / [1_000_000, 1_000, 1][scale as usize];
                        seq += 1;
                        q.push(now + d, seq);
                        h.push(Reverse((now + d, seq)));
                    }
                    2 => {
                        let until = now + x / 1000;
                        loop {
                            let want = h.peek().filter(|Reverse((t, _))| *t <= until).map(|&Reverse(k)| k);
                            let got = q.pop_until(until);
                            prop_assert_eq!(got, want);
                            if want.is_none() { break; }
                            h.pop();
                            now = want.unwrap().0;
                        }
                        now = now.max(until);
                    }
                    _ => {
                        // between runs: an event before the present
                        let t = now.saturating_sub(x % 5000);
                        seq += 1;
                        q.push(t, seq);
                        h.push(Reverse((t, seq)));
                        now = t;
                    }
                }
                prop_assert_eq!(q.len(), h.len());
            }
        }
    }

    #[test]
    fn empty_and_far() {
        let mut q = EventQueue::new();
        assert_eq!(q.pop_until(u64::MAX), None::<(u64, u8)>);
        q.push(10 * SLOT_NS * SLOTS as u64, 1u8);
        q.push(5, 2);
        assert_eq!(q.pop_until(4), None);
        assert_eq!(q.pop_until(u64::MAX), Some((5, 2)));
        assert_eq!(q.pop_until(u64::MAX), Some((10 * SLOT_NS * SLOTS as u64, 1)));
        assert!(q.is_empty());
    }
}
