//! Timers: each QP owns its deadlines ([`TimerTable`], indexed by [`Timer`]); the device keeps
//! one queue of `(deadline, qpn, timer)` ([`TimerQueue`]) that only says when to look.
//!
//! The table is the truth. The queue is an index over it, kept lazily, as TCP stacks keep their
//! retransmit timers: moving a deadline *later* (the local ACK timer restarting on every ACK
//! that makes progress, the per-packet case) only writes the table, and the queue's earlier
//! entry, when it comes due, is put back at the table's deadline; moving it *earlier* or arming
//! it pushes one entry; stopping it only clears the table. So the per-packet path does no
//! queue work, nothing is ever re-synchronised after a call, and firing timers costs
//! O(log n) per event with no scan over the QPs ([`TimerQueue::examine`]).

use crate::time::Instant;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// The timers of a QP.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug, Hash)]
pub enum Timer {
    /// Local ACK timeout: resend from the oldest unacknowledged PSN (IBTA §9.7.6.1.3).
    Retransmit = 0,
    /// The wait after an RNR NAK (IBTA §9.7.5.2.8, Table 45).
    Rnr = 1,
    /// Pacing: the time the next request packet may leave (a rate limit or congestion control).
    Departure = 2,
    /// The congestion-control algorithm's next event (DCQCN: rate increase, a folded decrease).
    Cc = 3,
}

impl Timer {
    /// Every timer, in index order.
    pub const ALL: [Timer; 4] = [Timer::Retransmit, Timer::Rnr, Timer::Departure, Timer::Cc];
}

const N: usize = Timer::ALL.len();

/// A QP's deadlines, and where its entries in the device's [`TimerQueue`] stand.
#[derive(Clone, Copy, Debug, Default)]
pub struct TimerTable {
    /// When each timer fires (`None`: stopped).
    deadline: [Option<Instant>; N],
    /// The time of this QP's live queue entry for each timer, if it has one (at most one is
    /// live; it is never later than `deadline`).
    queued: [Option<Instant>; N],
}

impl TimerTable {
    /// When `t` fires, if it is running.
    #[inline]
    pub fn get(&self, t: Timer) -> Option<Instant> {
        self.deadline[t as usize]
    }

    /// Start (or move) `t` to fire at `at`.
    #[inline]
    pub fn set(&mut self, q: &mut TimerQueue, qpn: u32, t: Timer, at: Instant) {
        let i = t as usize;
        self.deadline[i] = Some(at);
        // A live entry at or before `at` will come due first and be moved on then.
        if self.queued[i].is_none_or(|e| at < e) {
            self.queued[i] = Some(at);
            q.heap.push(Reverse((at, qpn, t)));
        }
    }

    /// Stop `t` (its queue entry, if any, is dropped when it comes up).
    #[inline]
    pub fn stop(&mut self, t: Timer) {
        self.deadline[t as usize] = None;
    }

    /// Stop every timer.
    pub fn stop_all(&mut self) {
        self.deadline = [None; N];
    }

    /// Whether any timer runs.
    pub fn any(&self) -> bool {
        self.deadline.iter().any(Option::is_some)
    }
}

/// The device-wide timer queue: a binary heap of `(deadline, qpn, timer)`, earliest first,
/// ties broken by QPN and timer (deterministic order).
#[derive(Debug, Default)]
pub struct TimerQueue {
    heap: BinaryHeap<Reverse<(Instant, u32, Timer)>>,
}

/// What the head of the queue holds (see [`TimerQueue::examine`]).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Head {
    /// This QP's timer is due: it has been taken off the queue and stopped in its table.
    Due(u32, Timer),
    /// The head is a live timer not yet due (or the queue is empty): nothing to do before
    /// [`TimerQueue::next`].
    Wait,
    /// The head was a stale entry and has been dropped or moved to its QP's later deadline;
    /// look again.
    Again,
}

impl TimerQueue {
    /// Entries in the queue (live and stale), for tests and diagnostics.
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// Whether the queue is empty.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    /// The QP the head entry belongs to (to look its table up for [`TimerQueue::examine`]).
    #[inline]
    pub fn head_qpn(&self) -> Option<u32> {
        self.heap.peek().map(|Reverse((_, qpn, _))| *qpn)
    }

    /// Examine the head entry against its QP's table (`None`: the QP is gone). Stale entries
    /// are dealt with whether or not they are due, so that when this returns
    /// [`Head::Wait`], [`TimerQueue::next`] is the next live deadline exactly.
    pub fn examine(&mut self, now: Instant, table: Option<&mut TimerTable>) -> Head {
        self.look(Some(now), table)
    }

    /// [`TimerQueue::examine`] with nothing due: only settle a stale head.
    pub fn settle(&mut self, table: Option<&mut TimerTable>) -> Head {
        self.look(None, table)
    }

    fn look(&mut self, now: Option<Instant>, table: Option<&mut TimerTable>) -> Head {
        let Some(&Reverse((at, qpn, t))) = self.heap.peek() else { return Head::Wait };
        let i = t as usize;
        let Some(tt) = table else {
            self.heap.pop();
            return Head::Again;
        };
        if tt.queued[i] != Some(at) {
            // Superseded by an earlier entry, or already handled.
            self.heap.pop();
            return Head::Again;
        }
        match tt.deadline[i] {
            None => {
                self.heap.pop();
                tt.queued[i] = None;
                Head::Again
            }
            Some(d) if d > at => {
                // The deadline moved later since this entry was queued: queue it there.
                self.heap.pop();
                tt.queued[i] = Some(d);
                self.heap.push(Reverse((d, qpn, t)));
                Head::Again
            }
            Some(_) if now.is_none_or(|n| at > n) => Head::Wait,
            Some(_) => {
                self.heap.pop();
                tt.queued[i] = None;
                tt.deadline[i] = None;
                Head::Due(qpn, t)
            }
        }
    }

    /// The earliest queued time: exact (a live deadline) once [`TimerQueue::examine`] has
    /// returned [`Head::Wait`]; otherwise never later than the next live deadline.
    #[inline]
    pub fn next(&self) -> Option<Instant> {
        self.heap.peek().map(|Reverse((at, _, _))| *at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(ns: u64) -> Instant {
        Instant::from_nanos(ns)
    }

    /// Drive the queue for one QP's table as the device does; returns what fired at `now`.
    fn fire(q: &mut TimerQueue, tt: &mut TimerTable, now: Instant) -> Vec<Timer> {
        let mut out = Vec::new();
        loop {
            match q.examine(now, Some(tt)) {
                Head::Due(_, k) => out.push(k),
                Head::Wait => return out,
                Head::Again => {}
            }
        }
    }

    #[test]
    fn later_moves_cost_nothing_and_fire_at_the_last_deadline() {
        let (mut q, mut tt) = (TimerQueue::default(), TimerTable::default());
        tt.set(&mut q, 7, Timer::Retransmit, t(100));
        for d in 101..1000 {
            tt.set(&mut q, 7, Timer::Retransmit, t(d));
        }
        assert_eq!(q.len(), 1, "moving a deadline later pushes nothing");
        assert_eq!(fire(&mut q, &mut tt, t(100)), vec![], "the entry at 100 moves to 999");
        assert_eq!(q.next(), Some(t(999)));
        assert_eq!(fire(&mut q, &mut tt, t(998)), vec![]);
        assert_eq!(fire(&mut q, &mut tt, t(999)), vec![Timer::Retransmit]);
        assert_eq!(tt.get(Timer::Retransmit), None);
        assert_eq!(q.next(), None);
    }

    #[test]
    fn earlier_moves_and_stops() {
        let (mut q, mut tt) = (TimerQueue::default(), TimerTable::default());
        tt.set(&mut q, 1, Timer::Rnr, t(500));
        tt.set(&mut q, 1, Timer::Rnr, t(200));
        tt.set(&mut q, 1, Timer::Departure, t(300));
        assert_eq!(fire(&mut q, &mut tt, t(0)), vec![]);
        assert_eq!(q.next(), Some(t(200)));
        assert_eq!(fire(&mut q, &mut tt, t(250)), vec![Timer::Rnr]);
        // The superseded entry at 500 is dropped, not fired.
        tt.stop(Timer::Departure);
        assert_eq!(fire(&mut q, &mut tt, t(1000)), vec![]);
        assert!(q.is_empty());
        assert!(!tt.any());
        // Re-arming at a stale entry's old time fires once.
        tt.set(&mut q, 1, Timer::Rnr, t(2000));
        tt.set(&mut q, 1, Timer::Rnr, t(1500));
        assert_eq!(fire(&mut q, &mut tt, t(3000)), vec![Timer::Rnr]);
        assert!(q.is_empty());
    }

    #[test]
    fn a_gone_qp_is_dropped_and_order_is_deterministic() {
        let mut q = TimerQueue::default();
        let mut a = TimerTable::default();
        let mut b = TimerTable::default();
        b.set(&mut q, 9, Timer::Retransmit, t(10));
        a.set(&mut q, 3, Timer::Retransmit, t(10));
        a.set(&mut q, 3, Timer::Rnr, t(10));
        assert_eq!(q.head_qpn(), Some(3));
        assert_eq!(q.examine(t(10), Some(&mut a)), Head::Due(3, Timer::Retransmit));
        assert_eq!(q.examine(t(10), Some(&mut a)), Head::Due(3, Timer::Rnr));
        assert_eq!(q.examine(t(10), None), Head::Again, "QP 9 was destroyed");
        assert_eq!(q.examine(t(10), Some(&mut b)), Head::Wait);
        assert!(q.is_empty());
    }

    /// Against a model that keeps exact deadlines: random sets, stops and firing times give
    /// the same timers at the same times.
    #[test]
    fn against_an_exact_model() {
        use rand_chacha::ChaCha8Rng;
        use rand_core::{Rng, SeedableRng};
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut q = TimerQueue::default();
        let mut tables = [TimerTable::default(); 4];
        let mut model: [[Option<u64>; N]; 4] = [[None; N]; 4];
        let mut now = 0u64;
        for _ in 0..20_000 {
            let qp = (rng.next_u32() % 4) as usize;
            let k = Timer::ALL[(rng.next_u32() % N as u32) as usize];
            match rng.next_u32() % 4 {
                0 | 1 => {
                    let at = now + (rng.next_u32() % 1000) as u64;
                    tables[qp].set(&mut q, qp as u32, k, t(at));
                    model[qp][k as usize] = Some(at);
                }
                2 => {
                    tables[qp].stop(k);
                    model[qp][k as usize] = None;
                }
                _ => {
                    now += (rng.next_u32() % 300) as u64;
                    let mut fired = Vec::new();
                    while let Some(qpn) = q.head_qpn() {
                        match q.examine(t(now), Some(&mut tables[qpn as usize])) {
                            Head::Due(qpn, k) => fired.push((qpn as usize, k)),
                            Head::Wait => break,
                            Head::Again => {}
                        }
                    }
                    let mut want = Vec::new();
                    for (i, m) in model.iter_mut().enumerate() {
                        for k in Timer::ALL {
                            if m[k as usize].is_some_and(|d| d <= now) {
                                m[k as usize] = None;
                                want.push((i, k));
                            }
                        }
                    }
                    fired.sort();
                    want.sort();
                    assert_eq!(fired, want, "at {now}");
                    let next = model.iter().flatten().flatten().min().copied();
                    assert_eq!(q.next().map(Instant::as_nanos), next, "next deadline at {now}");
                }
            }
        }
    }
}
