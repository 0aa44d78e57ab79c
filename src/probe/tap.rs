//! The probe's tap: counts each direction's data messages, applies the plan's faults to the
//! frames they name, once each, and records every RoCE frame that crosses it.

use super::{Action, Dir, Fault, Target};
use std::sync::{Arc, Mutex};
use uroce_io::tap::Tap;
use uroce_transport::Instant;
use uroce_wire::{Operation, Psn, Syndrome, Transport};

/// What kind of frame a [`Seen`] was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SeenKind {
    /// A request or READ response: packet `pkt` of data message `msg` of its direction;
    /// `fresh` for a first transmission (a PSN past every one seen before), `end` for a LAST
    /// or ONLY packet.
    Data {
        /// Message (1-based).
        msg: u32,
        /// Packet in the message (1-based).
        pkt: u32,
        /// First transmission.
        fresh: bool,
        /// Last packet of its message.
        end: bool,
        /// A READ request.
        read_request: bool,
    },
    /// An ACKNOWLEDGE or ATOMIC ACKNOWLEDGE and its AETH syndrome.
    Ack(Syndrome),
    /// A CNP.
    Cnp,
    /// Anything else with a BTH (other transports, reserved opcodes).
    Other,
}

/// One frame at the tap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Seen {
    /// When (the port's clock, ns).
    pub t_ns: u64,
    /// Direction.
    pub dir: Dir,
    /// BTH opcode.
    pub opcode: u8,
    /// BTH PSN.
    pub psn: Psn,
    /// For ACKs, the AETH MSN.
    pub msn: u32,
    /// Kind.
    pub kind: SeenKind,
    /// FNV-1a of the payload: a retransmission must carry the bytes of the first transmission.
    pub hash: u64,
    /// The fault of the plan applied to this frame (index).
    pub fault: Option<usize>,
    /// Out: the frame went on the wire (not dropped by the tap). In: always true (the frame
    /// crossed the wire; an `in` drop keeps it from uroce's engine).
    pub on_wire: bool,
}

/// What the tap saw and did; shared with whoever reads it after the run.
#[derive(Clone, Debug, Default)]
pub struct ProbeLog {
    /// The plan.
    pub plan: Vec<Fault>,
    /// Every RoCE frame, in the order the tap saw them.
    pub seen: Vec<Seen>,
    /// When each fault of the plan was applied.
    pub fired: Vec<Option<u64>>,
}

#[derive(Default)]
struct Stream {
    next: Option<Psn>,
    msgs: u32,
    pkt: u32,
    /// Last PSN of each message (index msg - 1), once its end packet passed.
    last: Vec<Option<Psn>>,
}

impl Stream {
    fn data(&mut self, psn: Psn, start: bool, end: bool) -> (u32, u32, bool) {
        let fresh = self.next.is_none_or(|n| !psn.before(n));
        if fresh {
            if start || self.msgs == 0 {
                self.msgs += 1;
                self.pkt = 0;
                self.last.push(None);
            }
            self.pkt += 1;
            self.next = Some(psn.add(1));
            if end {
                if let Some(l) = self.last.last_mut() {
                    *l = Some(psn);
                }
            }
            (self.msgs, self.pkt, true)
        } else {
            (self.msgs, self.pkt, false)
        }
    }

    fn last_psn(&self, msg: u32) -> Option<Psn> {
        self.last.get((msg as usize).checked_sub(1)?).copied().flatten()
    }
}

struct Held {
    frame: Vec<u8>,
    left: u8,
    deadline: u64,
}

/// The tap; see the module docs. Frames that are not RoCEv2 pass untouched and unrecorded.
pub struct ProbeTap {
    plan: Vec<Fault>,
    fired: Vec<bool>,
    streams: [Stream; 2],
    held: [Option<Held>; 2],
    log: Arc<Mutex<ProbeLog>>,
}

/// A reordered frame is let go after this long even if fewer frames passed it.
const REORDER_LIMIT_NS: u64 = 2_000_000;

fn fnv(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &x| (h ^ u64::from(x)).wrapping_mul(0x0000_0100_0000_01b3))
}

fn idx(d: Dir) -> usize {
    match d {
        Dir::Out => 0,
        Dir::In => 1,
    }
}

fn other(d: Dir) -> Dir {
    match d {
        Dir::Out => Dir::In,
        Dir::In => Dir::Out,
    }
}

impl ProbeTap {
    /// A tap applying `plan`; the log it fills.
    pub fn new(plan: Vec<Fault>) -> (ProbeTap, Arc<Mutex<ProbeLog>>) {
        let log =
            Arc::new(Mutex::new(ProbeLog { plan: plan.clone(), seen: Vec::new(), fired: vec![None; plan.len()] }));
        let tap = ProbeTap {
            fired: vec![false; plan.len()],
            plan,
            streams: [Stream::default(), Stream::default()],
            held: [None, None],
            log: log.clone(),
        };
        (tap, log)
    }

    /// Classify `frame`, pick the fault that applies, record it; `None` for non-RoCE frames.
    fn observe(&mut self, now: u64, dir: Dir, frame: &[u8]) -> Option<(Seen, Option<Action>)> {
        let f = uroce_wire::parse_frame(frame).ok()?;
        let bth = &f.roce.bth;
        let mut seen = Seen {
            t_ns: now,
            dir,
            opcode: bth.opcode.0,
            psn: bth.psn,
            msn: f.roce.ext.aeth.map_or(0, |a| a.msn.value()),
            kind: SeenKind::Other,
            hash: fnv(f.payload()),
            fault: None,
            on_wire: true,
        };
        let mut action = None;
        if let Some(info) = bth.opcode.info() {
            let data = matches!(info.transport, Transport::Rc | Transport::Uc)
                && (info.is_request() || info.operation == Operation::ReadResponse);
            if info.transport == Transport::Cnp {
                seen.kind = SeenKind::Cnp;
            } else if data {
                let (msg, pkt, fresh) =
                    self.streams[idx(dir)].data(bth.psn, info.position.is_start(), info.position.is_end());
                if info.operation == Operation::ReadResponse {
                    // READ responses use the request's PSNs: a re-issued READ is behind them
                    let req = &mut self.streams[idx(other(dir))];
                    if req.next.is_none_or(|n| bth.psn.add(1).after(n)) {
                        req.next = Some(bth.psn.add(1));
                    }
                }
                seen.kind = SeenKind::Data {
                    msg,
                    pkt,
                    fresh,
                    end: info.position.is_end(),
                    read_request: info.operation == Operation::ReadRequest,
                };
                if fresh {
                    let hit =
                        self.plan.iter().enumerate().position(|(i, p)| {
                            !self.fired[i] && p.dir == dir && p.target == Target::Packet { msg, pkt }
                        });
                    if let Some(i) = hit {
                        seen.fault = Some(i);
                        action = Some(self.plan[i].action);
                    }
                }
            } else if let Some(a) = f.roce.ext.aeth.filter(|_| info.operation == Operation::Acknowledge) {
                seen.kind = SeenKind::Ack(a.syndrome);
                if matches!(a.syndrome, Syndrome::Ack(_)) {
                    let others = &self.streams[idx(other(dir))];
                    let hit = self.plan.iter().enumerate().position(|(i, p)| {
                        !self.fired[i]
                            && p.dir == dir
                            && matches!(p.target, Target::Ack { msg }
                                if others.last_psn(msg).is_some_and(|l| !bth.psn.before(l)))
                    });
                    if let Some(i) = hit {
                        seen.fault = Some(i);
                        action = Some(self.plan[i].action);
                    }
                }
            }
        }
        if let Some(i) = seen.fault {
            self.fired[i] = true;
            if let Ok(mut l) = self.log.lock() {
                l.fired[i] = Some(now);
            }
        }
        if dir == Dir::Out && action == Some(Action::Drop) {
            seen.on_wire = false;
        }
        Some((seen, action))
    }

    fn record(&self, s: Seen) {
        if let Ok(mut l) = self.log.lock() {
            l.seen.push(s);
        }
    }

    fn pass(&mut self, now: Instant, dir: Dir, frame: &[u8], out: &mut dyn FnMut(&[u8])) {
        let Some((mut seen, action)) = self.observe(now.as_nanos(), dir, frame) else {
            out(frame);
            return;
        };
        let is_data = matches!(seen.kind, SeenKind::Data { .. });
        match action {
            None => out(frame),
            Some(Action::Drop) => {}
            Some(Action::Dup) => {
                out(frame);
                out(frame);
            }
            Some(Action::Reorder(n)) => {
                self.held[idx(dir)] =
                    Some(Held { frame: frame.to_vec(), left: n, deadline: now.as_nanos() + REORDER_LIMIT_NS });
                seen.on_wire = dir == Dir::In;
            }
            Some(Action::Ce) => {
                let mut g = frame.to_vec();
                if !uroce_transport::sim::mark_ce(&mut g) {
                    tracing::warn!("probe: CE mark on a frame that is not ECN-capable: sent unmarked");
                }
                out(&g);
            }
            Some(Action::BadIcrc) => {
                let mut g = frame.to_vec();
                if let Some(b) = g.last_mut() {
                    *b ^= 0xff;
                }
                out(&g);
            }
        }
        self.record(seen);
        if action == Some(Action::Dup) && (dir == Dir::Out) {
            self.record(Seen { fault: None, ..seen });
        }
        if is_data && action.is_none() {
            self.release_after(now, dir, out);
        }
    }

    /// One more data frame of `dir` passed: let a reordered frame go once enough have.
    fn release_after(&mut self, now: Instant, dir: Dir, out: &mut dyn FnMut(&[u8])) {
        let slot = &mut self.held[idx(dir)];
        let Some(h) = slot.as_mut() else { return };
        h.left = h.left.saturating_sub(1);
        if h.left == 0 {
            let h = slot.take().expect("held");
            self.release(now, dir, h, out);
        }
    }

    fn release(&mut self, now: Instant, dir: Dir, h: Held, out: &mut dyn FnMut(&[u8])) {
        out(&h.frame);
        if dir == Dir::Out {
            // the reordered frame reaches the wire now: record when
            if let Ok(f) = uroce_wire::parse_frame(&h.frame) {
                let psn = f.roce.bth.psn;
                if let Ok(mut l) = self.log.lock() {
                    if let Some(s) =
                        l.seen.iter().rev().find(|s| s.dir == Dir::Out && s.psn == psn && !s.on_wire).copied()
                    {
                        l.seen.push(Seen { t_ns: now.as_nanos(), on_wire: true, fault: None, ..s });
                    }
                }
            }
        }
    }
}

impl Tap for ProbeTap {
    fn on_tx(&mut self, now: Instant, frame: &[u8], wire: &mut dyn FnMut(&[u8])) {
        self.pass(now, Dir::Out, frame, wire);
    }

    fn on_rx(&mut self, now: Instant, frame: &[u8], engine: &mut dyn FnMut(&[u8])) {
        self.pass(now, Dir::In, frame, engine);
    }

    fn poll(&mut self, now: Instant, wire: &mut dyn FnMut(&[u8]), engine: &mut dyn FnMut(&[u8])) {
        for dir in [Dir::Out, Dir::In] {
            if self.held[idx(dir)].as_ref().is_some_and(|h| h.deadline <= now.as_nanos()) {
                let h = self.held[idx(dir)].take().expect("held");
                match dir {
                    Dir::Out => self.release(now, dir, h, wire),
                    Dir::In => self.release(now, dir, h, engine),
                }
            }
        }
    }

    fn next_wake(&self) -> Option<Instant> {
        self.held.iter().flatten().map(|h| Instant::from_nanos(h.deadline)).min()
    }
}
