//! What the peer did about each fault, measured from the probe's log, beside what IBTA
//! requires. Each fault is judged in its window: from when it was applied to when the next
//! one was (or the end of the run).

use super::tap::{ProbeLog, Seen, SeenKind};
use super::{Action, Dir, Fault, Target};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use uroce_wire::{NakCode, Psn, Syndrome};

/// How the peer's reaction compares with the requirement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// As IBTA requires.
    Conforms,
    /// Not as IBTA requires (or, for a CE mark, no congestion notification).
    Differs,
    /// The fault's frame never came (the run was shorter, or the message had fewer packets).
    NotApplied,
}

impl Verdict {
    fn as_str(self) -> &'static str {
        match self {
            Verdict::Conforms => "conforms",
            Verdict::Differs => "DIFFERS",
            Verdict::NotApplied => "not applied",
        }
    }
}

/// One fault's line of the report.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// The fault.
    pub fault: Fault,
    /// The PSN of the faulted frame.
    pub psn: Option<Psn>,
    /// What IBTA requires of the peer.
    pub requires: &'static str,
    /// What the peer did.
    pub observed: String,
    /// The reaction's latency (defined per row kind, in `observed`), µs.
    pub latency_us: Option<f64>,
    /// The comparison.
    pub verdict: Verdict,
}

/// The whole report.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Report {
    /// One row per fault of the plan.
    pub rows: Vec<Row>,
    /// Retransmitted packets whose payload differed from their first transmission's.
    pub integrity_errors: Vec<String>,
    /// Retransmitted (or re-executed) data packets compared byte for byte, per direction.
    pub compared: [u64; 2],
}

impl Report {
    /// Rows with this verdict.
    pub fn count(&self, v: Verdict) -> usize {
        self.rows.iter().filter(|r| r.verdict == v).count()
    }

    /// The report as a markdown table and a summary line.
    pub fn to_markdown(&self, peer: &str) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "| # | fault ({peer}) | PSN | IBTA requires | peer did | latency | verdict |");
        let _ = writeln!(s, "|---|---|---|---|---|---|---|");
        for (i, r) in self.rows.iter().enumerate() {
            let psn = r.psn.map_or("-".to_string(), |p| format!("{:#08x}", p.value()));
            let lat = r.latency_us.map_or("-".to_string(), fmt_us);
            let _ = writeln!(
                s,
                "| {} | `{}` | {psn} | {} | {} | {lat} | {} |",
                i + 1,
                r.fault,
                r.requires,
                r.observed,
                r.verdict.as_str()
            );
        }
        let _ = writeln!(
            s,
            "\nprobe-summary: faults {} conforms {} differs {} not_applied {} integrity_compared {}/{} integrity_errors {}",
            self.rows.len(),
            self.count(Verdict::Conforms),
            self.count(Verdict::Differs),
            self.count(Verdict::NotApplied),
            self.compared[0],
            self.compared[1],
            self.integrity_errors.len()
        );
        for e in &self.integrity_errors {
            let _ = writeln!(s, "integrity: {e}");
        }
        s
    }
}

/// The rows of a report's table as printed ([`Report::to_markdown`]): (fault, what the peer
/// did, verdict), for whoever reads the report back (tests, campaign scripts).
pub fn parse_rows(markdown: &str) -> Vec<(String, String, String)> {
    markdown
        .lines()
        .filter(|l| l.starts_with("| ") && l.contains('`'))
        .filter_map(|l| {
            let c: Vec<&str> = l.split('|').map(str::trim).collect();
            Some((c.get(2)?.trim_matches('`').to_string(), c.get(5)?.to_string(), c.get(7)?.to_string()))
        })
        .collect()
}

fn fmt_us(us: f64) -> String {
    if us >= 10_000.0 {
        format!("{:.1} ms", us / 1000.0)
    } else {
        format!("{us:.0} µs")
    }
}

fn us(a: &Seen, b: &Seen) -> f64 {
    b.t_ns.saturating_sub(a.t_ns) as f64 / 1000.0
}

fn is_nak(s: &Seen, code: Option<NakCode>) -> bool {
    matches!(s.kind, SeenKind::Ack(Syndrome::Nak(c)) if code.is_none_or(|k| k == c))
}

fn is_ack(s: &Seen) -> bool {
    matches!(s.kind, SeenKind::Ack(Syndrome::Ack(_)))
}

fn data(s: &Seen) -> Option<(u32, u32, bool, bool, bool)> {
    match s.kind {
        SeenKind::Data { msg, pkt, fresh, end, read_request } => Some((msg, pkt, fresh, end, read_request)),
        _ => None,
    }
}

fn nak_text(s: &Seen) -> String {
    match s.kind {
        SeenKind::Ack(Syndrome::Nak(c)) => format!("NAK {c:?} PSN {:#08x}", s.psn.value()),
        SeenKind::Ack(Syndrome::RnrNak(_)) => format!("RNR NAK PSN {:#08x}", s.psn.value()),
        _ => "?".into(),
    }
}

/// Judge every fault of `log`.
pub fn analyse(log: &ProbeLog) -> Report {
    let mut report = Report::default();
    // window ends: the next applied fault's time after each one's
    let mut times: Vec<u64> = log.fired.iter().flatten().copied().collect();
    times.sort_unstable();
    for (i, fault) in log.plan.iter().enumerate() {
        let Some(t0) = log.fired[i] else {
            report.rows.push(Row {
                fault: *fault,
                psn: None,
                requires: requirement(fault, None),
                observed: "the frame never came".into(),
                latency_us: None,
                verdict: Verdict::NotApplied,
            });
            continue;
        };
        let t1 = times.iter().copied().find(|&t| t > t0).unwrap_or(u64::MAX);
        let hit = log.seen.iter().find(|s| s.fault == Some(i)).copied();
        let window: Vec<Seen> =
            log.seen.iter().filter(|s| s.t_ns >= t0 && s.t_ns < t1 && s.fault != Some(i)).copied().collect();
        let row = match hit {
            Some(h) => judge(fault, &h, &window),
            None => Row {
                fault: *fault,
                psn: None,
                requires: requirement(fault, None),
                observed: "applied, but not recorded".into(),
                latency_us: None,
                verdict: Verdict::NotApplied,
            },
        };
        report.rows.push(row);
    }
    integrity(log, &mut report);
    report
}

/// Every data packet seen again at the same PSN must carry the same payload.
fn integrity(log: &ProbeLog, report: &mut Report) {
    let mut first: BTreeMap<(u8, u32), u64> = BTreeMap::new();
    for s in &log.seen {
        if data(s).is_none() {
            continue;
        }
        let d = match s.dir {
            Dir::Out => 0u8,
            Dir::In => 1,
        };
        match first.get(&(d, s.psn.value())) {
            None => {
                first.insert((d, s.psn.value()), s.hash);
            }
            Some(&h) => {
                report.compared[d as usize] += 1;
                if h != s.hash {
                    report.integrity_errors.push(format!(
                        "{} PSN {:#08x}: a retransmission carried other bytes than the first transmission",
                        if d == 0 { "uroce" } else { "peer" },
                        s.psn.value()
                    ));
                }
            }
        }
    }
}

/// A READ response (RC opcodes 0x0d..=0x10).
fn is_read_response(s: &Seen) -> bool {
    uroce_wire::Opcode(s.opcode).info().is_some_and(|i| i.operation == uroce_wire::Operation::ReadResponse)
}

/// What IBTA requires of the peer for `f` (`hit`: the faulted frame, when it came).
fn requirement(f: &Fault, hit: Option<&Seen>) -> &'static str {
    let (end, read_req) = hit.and_then(data).map_or((false, false), |d| (d.3, d.4));
    match (f.dir, f.action, f.target) {
        (Dir::Out, Action::Ce, _) => "a CNP to the sender's QP (RoCEv2 annex A17, DCQCN's NP)",
        (Dir::Out, Action::Dup, _) if read_req => "the duplicate READ answered: re-executed from memory, same bytes (§9.7.5.1.3)",
        (Dir::Out, Action::Dup, _) => "duplicate not executed again, re-ACKed if it asks (§9.7.5.1.3, C9-105), no NAK",
        (Dir::Out, Action::Drop, Target::Ack { .. }) => {
            "resend from the oldest unACKed PSN after its ACK timeout (§9.7.6.1.3), unless a later ACK covers it (§9.7.5.1.2)"
        }
        (Dir::In, Action::Drop, Target::Ack { .. }) => "re-ACK the resent request, not execute it again (§9.7.5.1.3, C9-105)",
        (Dir::Out, Action::Drop | Action::BadIcrc, _) if read_req || end => {
            "silent (no gap to see); answer the requester's retransmission"
        }
        (Dir::Out, Action::BadIcrc, _) => {
            "drop it silently (§7.8.1 ICRC), then one NAK PSN sequence error at the next packet (§9.7.5.1.1)"
        }
        (Dir::Out, Action::Reorder(_), _) => {
            "NAK PSN sequence error for the late PSN; once it is accepted, the next packet is out of sequence too: one NAK per gap (§9.7.5.1.1)"
        }
        (Dir::Out, Action::Drop, _) => "one NAK PSN sequence error for the missing PSN (§9.7.5.1.1)",
        (Dir::In, Action::Drop, _) if hit.is_some_and(is_read_response) => {
            "re-execute the re-issued READ from its PSN, same bytes (§9.7.5.1.3)"
        }
        (Dir::In, Action::Drop, _) if end => "resend from the oldest unACKed PSN after its ACK timeout (§9.7.6.1.3)",
        (Dir::In, Action::Drop, _) => "resend from the NAKed PSN: Go-Back-N (§9.7.5.1.1)",
        (Dir::In, ..) => "(a fault on the peer's frames: tests uroce, not the peer)",
    }
}

fn row(f: &Fault, h: &Seen, observed: String, latency_us: Option<f64>, ok: bool) -> Row {
    Row {
        fault: *f,
        psn: Some(h.psn),
        requires: requirement(f, Some(h)),
        observed,
        latency_us,
        verdict: if ok { Verdict::Conforms } else { Verdict::Differs },
    }
}

fn judge(f: &Fault, h: &Seen, w: &[Seen]) -> Row {
    let p = h.psn;
    let (end, read_req) = data(h).map_or((false, false), |d| (d.3, d.4));
    let peer = |s: &&Seen| s.dir == Dir::In;
    let ours = |s: &&Seen| s.dir == Dir::Out && s.on_wire;
    let other_naks = |w: &[Seen]| w.iter().filter(peer).filter(|s| is_nak(s, None)).count();
    match (f.dir, f.action, f.target) {
        (Dir::Out, Action::Ce, _) => match w.iter().filter(peer).find(|s| s.kind == SeenKind::Cnp) {
            Some(c) => row(f, h, format!("CNP (dest QP) PSN {:#08x}", c.psn.value()), Some(us(h, c)), true),
            None => row(f, h, "no CNP".into(), None, false),
        },
        (Dir::Out, Action::Dup, _) if read_req => {
            // Both copies leave back to back, so the original's response may not have started
            // when the duplicate arrives: a responder may answer both (rxe re-executes) or
            // restart the one response (uroce replaces a queued stream). Either way a whole
            // response must follow.
            let n = w.iter().filter(peer).filter(|s| s.psn == p && data(s).is_some()).count();
            let first = w.iter().filter(peer).find(|s| s.psn == p && data(s).is_some());
            let whole =
                first.is_some_and(|a| w.iter().filter(peer).any(|s| s.t_ns >= a.t_ns && data(s).is_some_and(|d| d.3)));
            let what =
                format!("answered {n} time(s){}", if whole { ", a whole response" } else { ", no whole response" });
            row(f, h, what, first.map(|s| us(h, s)), whole)
        }
        (Dir::Out, Action::Dup, _) => {
            let naks = other_naks(w);
            let acks: Vec<&Seen> = w.iter().filter(peer).filter(|s| is_ack(s) && !s.psn.before(p)).collect();
            let ok = naks == 0 && (!end || acks.len() >= 2);
            let what = if naks > 0 {
                format!(
                    "{naks} NAK(s): {}",
                    w.iter().filter(peer).filter(|s| is_nak(s, None)).map(nak_text).collect::<Vec<_>>().join(", ")
                )
            } else if end {
                format!("{} ACK(s) covering the PSN, no NAK", acks.len())
            } else {
                "no NAK; message completed".to_string()
            };
            row(f, h, what, acks.first().map(|a| us(h, a)), ok)
        }
        (Dir::Out, Action::Drop, Target::Ack { .. }) => {
            // our ACK of the peer's message lost: does the peer resend, from where, when?
            match w.iter().filter(peer).find(|s| data(s).is_some_and(|d| !d.2)) {
                Some(r) => {
                    let n = w.iter().filter(peer).filter(|s| data(s).is_some_and(|d| !d.2)).count();
                    row(
                        f,
                        h,
                        format!("resent from PSN {:#08x} ({n} packets) after its timeout", r.psn.value()),
                        Some(us(h, r)),
                        !h.psn.before(r.psn),
                    )
                }
                None => row(f, h, "no retransmission: a later ACK covered it".into(), None, true),
            }
        }
        (Dir::In, Action::Drop, Target::Ack { .. }) => {
            // the peer's ACK of our message lost: our retransmission must be re-ACKed
            let Some(r) = w.iter().filter(ours).find(|s| data(s).is_some_and(|d| !d.2)) else {
                return row(f, h, "no retransmission needed: a later ACK covered it".into(), None, true);
            };
            let after: Vec<&Seen> = w.iter().filter(peer).filter(|s| s.t_ns >= r.t_ns).collect();
            match after.iter().find(|s| matches!(s.kind, SeenKind::Ack(_))) {
                Some(a) if is_ack(a) => row(
                    f,
                    h,
                    format!("re-ACKed PSN {:#08x} (MSN {}) after our retransmission", a.psn.value(), a.msn),
                    Some(us(r, a)),
                    true,
                ),
                Some(a) => row(f, h, format!("{} after our retransmission", nak_text(a)), Some(us(r, a)), false),
                None => row(f, h, "no answer to our retransmission".into(), None, false),
            }
        }
        (Dir::Out, Action::Drop | Action::BadIcrc, _) if read_req || end => {
            let naks = other_naks(w);
            let retx = w.iter().filter(ours).find(|s| s.psn == p);
            let ans = retx.and_then(|r| {
                w.iter()
                    .filter(peer)
                    .find(|s| s.t_ns >= r.t_ns && s.psn == p || is_ack(s) && s.t_ns >= r.t_ns && !s.psn.before(p))
            });
            let what = match (naks, retx, ans) {
                (0, Some(_), Some(a)) => {
                    format!("silent until our retransmission, then answered it (PSN {:#08x})", a.psn.value())
                }
                (0, Some(_), None) => "silent; our retransmission unanswered".into(),
                (0, None, _) => "silent".into(),
                (n, ..) => format!("{n} NAK(s)"),
            };
            let lat = retx.zip(ans).map(|(r, a)| us(r, a));
            row(f, h, what, lat, naks == 0 && ans.is_some())
        }
        (Dir::Out, Action::Drop | Action::BadIcrc | Action::Reorder(_), _) => {
            let trigger = w.iter().filter(ours).find(|s| data(s).is_some() && s.psn.after(p));
            let naks: Vec<&Seen> = w.iter().filter(peer).filter(|s| is_nak(s, None)).collect();
            let seq = naks.iter().find(|s| is_nak(s, Some(NakCode::PsnSequenceError)));
            match seq {
                Some(n) => {
                    // a late packet reopens the gap behind it: then one more NAK, for the PSN after it
                    let ok = n.psn == p
                        && match f.action {
                            Action::Reorder(_) => {
                                naks.iter().all(|s| is_nak(s, Some(NakCode::PsnSequenceError)) && !s.psn.before(p))
                            }
                            _ => naks.len() == 1,
                        };
                    let extra = if naks.len() > 1 { format!(" ({} NAKs)", naks.len()) } else { String::new() };
                    row(f, h, format!("{}{extra}", nak_text(n)), trigger.map(|t| us(t, n)), ok)
                }
                None if !naks.is_empty() => {
                    row(f, h, naks.iter().map(|s| nak_text(s)).collect::<Vec<_>>().join(", "), None, false)
                }
                None => row(f, h, "no NAK".into(), None, false),
            }
        }
        (Dir::In, Action::Drop, _) => {
            let resp = is_read_response(h);
            // what uroce did about the loss: a NAK (requests), a re-issued READ (responses), or
            // nothing (a lost last packet: the peer's timeout, or ours for a READ)
            let ours_first = if resp {
                w.iter().filter(ours).find(|s| data(s).is_some_and(|d| d.4 && !d.2))
            } else {
                w.iter().filter(ours).find(|s| is_nak(s, Some(NakCode::PsnSequenceError)))
            };
            let start = ours_first.map_or(h.t_ns, |s| s.t_ns);
            let resent: Vec<&Seen> =
                w.iter().filter(peer).filter(|s| s.t_ns >= start && data(s).is_some_and(|d| !d.2)).collect();
            let Some(r) = resent.first() else {
                return row(f, h, "never resent".into(), None, false);
            };
            let from = match ours_first {
                Some(s) if resp => format!("after our re-issued READ (PSN {:#08x})", s.psn.value()),
                Some(_) => "after our NAK".to_string(),
                None => "after its timeout".to_string(),
            };
            let expect = ours_first.map_or(!p.before(r.psn), |s| r.psn == s.psn);
            row(
                f,
                h,
                format!("resent from PSN {:#08x}, {} packets, {from}", r.psn.value(), resent.len()),
                Some(ours_first.map_or_else(|| us(h, r), |s| us(s, r))),
                expect,
            )
        }
        (Dir::In, ..) => row(f, h, "applied".into(), None, true),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(t_us: u64, dir: Dir, psn: u32, kind: SeenKind) -> Seen {
        Seen {
            t_ns: t_us * 1000,
            dir,
            opcode: 0x0a,
            psn: Psn::new(psn),
            msn: 0,
            kind,
            hash: 7,
            fault: None,
            on_wire: true,
        }
    }

    fn d(msg: u32, pkt: u32, fresh: bool, end: bool) -> SeenKind {
        SeenKind::Data { msg, pkt, fresh, end, read_request: false }
    }

    #[test]
    fn a_lost_middle_packet_wants_one_seq_nak_for_its_psn() {
        let f: Fault = "out:drop@m1.2".parse().unwrap();
        let mut hit = seen(10, Dir::Out, 101, d(1, 2, true, false));
        hit.fault = Some(0);
        hit.on_wire = false;
        let good = ProbeLog {
            plan: vec![f],
            fired: vec![Some(10_000)],
            seen: vec![
                seen(9, Dir::Out, 100, d(1, 1, true, false)),
                hit,
                seen(11, Dir::Out, 102, d(1, 3, true, true)),
                seen(61, Dir::In, 101, SeenKind::Ack(Syndrome::Nak(NakCode::PsnSequenceError))),
                seen(70, Dir::Out, 101, d(1, 2, false, false)),
                seen(71, Dir::Out, 102, d(1, 3, false, true)),
            ],
        };
        let r = analyse(&good);
        assert_eq!(r.rows[0].verdict, Verdict::Conforms, "{:?}", r.rows[0]);
        assert_eq!(r.rows[0].latency_us, Some(50.0));
        assert_eq!(r.compared, [2, 0]);
        assert!(r.integrity_errors.is_empty());

        // the NAK names the wrong PSN, and a retransmission carries other bytes
        let mut bad = good.clone();
        bad.seen[3].psn = Psn::new(102);
        bad.seen[5].hash = 8;
        let r = analyse(&bad);
        assert_eq!(r.rows[0].verdict, Verdict::Differs);
        assert_eq!(r.integrity_errors.len(), 1);

        // no NAK at all
        let mut none = good.clone();
        none.seen.remove(3);
        assert_eq!(analyse(&none).rows[0].verdict, Verdict::Differs);
    }

    #[test]
    fn go_back_n_from_our_nak_and_a_missing_cnp() {
        let plan: Vec<Fault> = vec!["in:drop@m1.2".parse().unwrap(), "out:ce@m2.1".parse().unwrap()];
        let mut lost = seen(10, Dir::In, 201, d(1, 2, true, false));
        lost.fault = Some(0);
        let mut ce = seen(100, Dir::Out, 300, d(2, 1, true, true));
        ce.fault = Some(1);
        let log = ProbeLog {
            plan,
            fired: vec![Some(10_000), Some(100_000)],
            seen: vec![
                lost,
                seen(11, Dir::In, 202, d(1, 3, true, true)),
                seen(12, Dir::Out, 201, SeenKind::Ack(Syndrome::Nak(NakCode::PsnSequenceError))),
                seen(40, Dir::In, 201, d(1, 2, false, false)),
                seen(41, Dir::In, 202, d(1, 3, false, true)),
                ce,
            ],
        };
        let r = analyse(&log);
        assert_eq!(r.rows[0].verdict, Verdict::Conforms, "{:?}", r.rows[0]);
        assert!(r.rows[0].observed.contains("2 packets"), "{}", r.rows[0].observed);
        assert_eq!(r.rows[0].latency_us, Some(28.0));
        assert_eq!(r.rows[1].verdict, Verdict::Differs);
        assert_eq!(r.rows[1].observed, "no CNP");
        let md = r.to_markdown("test");
        assert!(md.contains("probe-summary: faults 2 conforms 1 differs 1 not_applied 0"), "{md}");
        let rows = parse_rows(&md);
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[1], ("out:ce@m2.1".to_string(), "no CNP".to_string(), "DIFFERS".to_string()));
    }
}
