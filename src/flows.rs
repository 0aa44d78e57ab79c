//! `uroce pcap --flows`: a capture seen per QP, the way a person looks at a transfer that went
//! wrong — packets and messages per opcode, the PSN range, retransmissions (a PSN below the
//! highest already seen: Go-Back-N from there) and their extent, gaps (PSNs that never passed
//! the capture point), NAKs by kind, RNR NAKs, CE marks and CNPs, and goodput.
//!
//! A flow is one direction to one QP: (source IP, destination IP, destination QP). Requests
//! and READ responses are PSN-ordered streams, so their PSNs are tracked; ACKs are not (a
//! coalesced ACK legitimately jumps ahead), only their syndromes are counted.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::Duration;
use uroce_wire::{Ecn, NakCode, Operation, ParsedFrame, Psn, Syndrome, Transport};

/// One direction to one QP.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct FlowKey {
    /// Sender.
    pub src: IpAddr,
    /// Receiver.
    pub dst: IpAddr,
    /// The receiver's QP.
    pub dest_qp: u32,
}

/// What one flow carried.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Flow {
    /// First and last timestamps.
    pub first: Duration,
    /// See `first`.
    pub last: Duration,
    /// Packets.
    pub packets: u64,
    /// Packets per opcode name.
    pub opcodes: BTreeMap<&'static str, u64>,
    /// Messages ended (LAST or ONLY packets, first transmissions only).
    pub messages: u64,
    /// Payload bytes, first transmissions only.
    pub payload: u64,
    /// Payload bytes of retransmitted packets.
    pub payload_again: u64,
    /// The first PSN and the one after the highest seen (PSN-ordered flows).
    pub psn: Option<(Psn, Psn)>,
    /// Times the PSN went back (a Go-Back-N restart, or a duplicate).
    pub retransmissions: u64,
    /// The flow's silence before each retransmission, summed and the longest: what the
    /// retransmissions cost (a timeout shows as a silence of about the QP's ACK timeout, a NAK
    /// as about a round trip).
    pub retx_stall: Duration,
    /// See `retx_stall`.
    pub retx_stall_max: Duration,
    /// The flow's longest silence between two of its packets.
    pub longest_silence: Duration,
    /// Packets at a PSN already seen.
    pub retransmitted: u64,
    /// Times the PSN jumped ahead.
    pub gaps: u64,
    /// PSNs jumped over (never seen at the capture point before a later one).
    pub missing: u64,
    /// ACKs with a positive syndrome.
    pub acks: u64,
    /// NAKs by kind.
    pub naks: BTreeMap<&'static str, u64>,
    /// RNR NAKs.
    pub rnr_naks: u64,
    /// Packets sent ECN-capable (ECT(0) or ECT(1)).
    pub ect: u64,
    /// Packets marked congestion experienced.
    pub ce: u64,
    /// CNPs.
    pub cnps: u64,
    /// The PSN a retransmission in progress sends next (its packets follow one another).
    pub retx_next: Option<Psn>,
    /// (time, PSN after the first) of every PSN-ordered packet: the sequence graph.
    pub points: Vec<(Duration, i64)>,
}

impl Flow {
    /// Goodput over the flow's lifetime, bytes per second (first transmissions only).
    pub fn goodput(&self) -> f64 {
        let t = self.last.saturating_sub(self.first).as_secs_f64();
        if t > 0.0 {
            self.payload as f64 / t
        } else {
            0.0
        }
    }
}

/// Every flow of a capture.
#[derive(Clone, Debug, Default)]
pub struct Flows {
    /// By key, in order.
    pub flows: BTreeMap<FlowKey, Flow>,
}

fn nak_name(c: NakCode) -> &'static str {
    match c {
        NakCode::PsnSequenceError => "PSN sequence error",
        NakCode::InvalidRequest => "invalid request",
        NakCode::RemoteAccessError => "remote access error",
        NakCode::RemoteOperationalError => "remote operational error",
        NakCode::InvalidRdRequest => "invalid RD request",
        NakCode::Reserved(_) => "reserved",
    }
}

impl Flows {
    /// Account one decoded RoCEv2 frame captured at `ts`.
    pub fn add(&mut self, ts: Duration, f: &ParsedFrame<'_>) {
        let bth = &f.roce.bth;
        let key = FlowKey { src: f.ip.src_addr(), dst: f.ip.dst_addr(), dest_qp: bth.dest_qp.value() };
        let fl = self.flows.entry(key).or_default();
        if fl.packets == 0 {
            fl.first = ts;
            fl.last = ts;
        }
        let silence = ts.saturating_sub(fl.last);
        fl.longest_silence = fl.longest_silence.max(silence);
        fl.last = fl.last.max(ts);
        fl.packets += 1;
        match f.ip.ecn() {
            Ecn::Ect0 | Ecn::Ect1 => fl.ect += 1,
            Ecn::Ce => fl.ce += 1,
            Ecn::NotEct => {}
        }
        let Some(info) = bth.opcode.info() else {
            *fl.opcodes.entry("reserved opcode").or_default() += 1;
            return;
        };
        *fl.opcodes.entry(info.name).or_default() += 1;
        if info.transport == Transport::Cnp {
            fl.cnps += 1;
            return;
        }
        if let Some(a) = f.roce.ext.aeth {
            match a.syndrome {
                Syndrome::Ack(_) => fl.acks += 1,
                Syndrome::RnrNak(_) => fl.rnr_naks += 1,
                Syndrome::Nak(c) => *fl.naks.entry(nak_name(c)).or_default() += 1,
                Syndrome::Reserved(_) => *fl.naks.entry("reserved syndrome").or_default() += 1,
            }
        }
        // PSN-ordered: requests and READ responses of the connected transports.
        let ordered = matches!(info.transport, Transport::Rc | Transport::Uc)
            && (info.is_request() || info.operation == Operation::ReadResponse);
        let episodes = fl.retransmissions;
        let again = ordered && Self::track_psn(fl, ts, bth.psn);
        if fl.retransmissions > episodes {
            fl.retx_stall += silence;
            fl.retx_stall_max = fl.retx_stall_max.max(silence);
        }
        let len = f.roce.payload_len as u64;
        if again {
            fl.payload_again += len;
        } else {
            fl.payload += len;
            if info.position.is_end() && info.is_request() {
                fl.messages += 1;
            }
        }
    }

    /// The PSN `p` of a PSN-ordered flow: `true` when it was seen already (a retransmission;
    /// consecutive retransmitted PSNs are one retransmission).
    fn track_psn(fl: &mut Flow, ts: Duration, p: Psn) -> bool {
        let Some((first, next)) = fl.psn else {
            fl.psn = Some((p, p.add(1)));
            fl.points.push((ts, 0));
            return false;
        };
        fl.points.push((ts, i64::from(p.diff(first))));
        if !p.before(next) {
            if p != next {
                fl.gaps += 1;
                fl.missing += p.diff(next) as u64;
            }
            fl.psn = Some((first, p.add(1)));
            fl.retx_next = None;
            return false;
        }
        fl.retransmitted += 1;
        if fl.retx_next != Some(p) {
            fl.retransmissions += 1;
        }
        fl.retx_next = Some(p.add(1));
        true
    }

    /// The report: one block per flow.
    pub fn write(&self, out: &mut dyn std::io::Write) -> std::io::Result<()> {
        for (k, f) in &self.flows {
            let span = f.last.saturating_sub(f.first).as_secs_f64();
            writeln!(
                out,
                "flow {} -> {} qp {:#08x}: {} packets, {} messages, {} payload bytes in {span:.6} s ({:.2} MB/s)",
                k.src,
                k.dst,
                k.dest_qp,
                f.packets,
                f.messages,
                f.payload,
                f.goodput() / 1e6
            )?;
            let ops: Vec<String> = f.opcodes.iter().map(|(n, c)| format!("{n} {c}")).collect();
            writeln!(out, "  opcodes: {}", ops.join(", "))?;
            if let Some((first, next)) = f.psn {
                writeln!(
                    out,
                    "  psn {:#08x}..{:#08x}: retransmissions {} ({} packets, {} bytes), gaps {} ({} PSNs missing)",
                    first.value(),
                    next.value(),
                    f.retransmissions,
                    f.retransmitted,
                    f.payload_again,
                    f.gaps,
                    f.missing
                )?;
                if f.retransmissions > 0 {
                    writeln!(
                        out,
                        "  silence before retransmissions: {:.3} ms in all, longest {:.3} ms",
                        f.retx_stall.as_secs_f64() * 1e3,
                        f.retx_stall_max.as_secs_f64() * 1e3
                    )?;
                }
            }
            writeln!(out, "  longest silence {:.3} ms", f.longest_silence.as_secs_f64() * 1e3)?;
            if f.acks + f.rnr_naks + f.naks.values().sum::<u64>() > 0 {
                let naks: Vec<String> = f.naks.iter().map(|(n, c)| format!("{n} {c}")).collect();
                let naks = if naks.is_empty() { "none".to_string() } else { naks.join(", ") };
                writeln!(out, "  acks {}, rnr naks {}, naks: {naks}", f.acks, f.rnr_naks)?;
            }
            if f.ect + f.ce + f.cnps > 0 {
                writeln!(out, "  ecn: {} ECT, {} CE; cnps {}", f.ect, f.ce, f.cnps)?;
            }
        }
        Ok(())
    }
}

/// `--plot DIR`: a PSN-over-time graph (tcptrace's sequence graph) per PSN-ordered flow, as
/// SVG: time since the capture's first frame against the PSN after the flow's first. A
/// Go-Back-N retransmission is the line falling back and climbing again.
pub fn plot(flows: &Flows, dir: &std::path::Path) -> std::io::Result<Vec<std::path::PathBuf>> {
    std::fs::create_dir_all(dir)?;
    let t0 = flows.flows.values().map(|f| f.first).min().unwrap_or_default();
    let mut written = Vec::new();
    for (k, f) in &flows.flows {
        if f.points.len() < 2 {
            continue;
        }
        let points = f.points.iter().map(|(t, p)| (t.saturating_sub(t0).as_secs_f64() * 1e3, *p as f64)).collect();
        let title = format!("{} -> {} qp {:#08x}", k.src, k.dst, k.dest_qp);
        let svg = uroce_sim::plot::line_chart(
            &title,
            "time (ms)",
            "PSN - first PSN",
            &[uroce_sim::plot::Series { name: "PSN".into(), points }],
        );
        let name = format!("psn-{}-{}-qp{:06x}.svg", k.src, k.dst, k.dest_qp).replace(':', "_");
        let path = dir.join(name);
        std::fs::write(&path, svg)?;
        written.push(path);
    }
    Ok(written)
}
