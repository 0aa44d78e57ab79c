//! `uroce probe`: Lumina-style conformance of a peer. Instead of random faults, targeted ones —
//! drop exactly the k-th packet of the m-th message, drop the ACK of a message, corrupt an
//! ICRC, mark CE, duplicate, reorder — placed on a legitimate perftest connection to the peer
//! by a [`uroce_io::tap::Tap`] between uroce's engine and the wire, then the peer's reaction
//! measured from what crossed the wire ([`report`]): NAK generation latency, retransmission
//! start, extent and latency, READ re-execution, CNP generation, and whether every
//! retransmitted packet carried the bytes of its first transmission.
//!
//! Directions are seen from uroce: `out` faults act on frames uroce sends (the peer's
//! responder or NP is tested), `in` faults on frames the peer sends (its requester, or its
//! READ responder, is tested).

pub mod report;
mod tap;

pub use tap::{ProbeLog, ProbeTap, Seen, SeenKind};

use std::fmt;
use std::str::FromStr;

/// Which way a faulted frame travels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dir {
    /// Sent by uroce to the peer.
    Out,
    /// Sent by the peer to uroce.
    In,
}

/// What is done to the frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Lost.
    Drop,
    /// Delivered twice.
    Dup,
    /// Held until this many later data frames of its direction have passed.
    Reorder(u8),
    /// IP ECN set to Congestion Experienced (a switch's mark; the ICRC does not cover ECN).
    Ce,
    /// The ICRC's last byte inverted.
    BadIcrc,
}

/// Which frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// Packet `pkt` (1-based) of data message `msg` (1-based, first transmissions only) of
    /// the fault's direction: requests, or READ responses.
    Packet {
        /// Message.
        msg: u32,
        /// Packet in the message.
        pkt: u32,
    },
    /// The first positive ACK (ACKNOWLEDGE) of the fault's direction that covers data message
    /// `msg` of the other direction.
    Ack {
        /// Message.
        msg: u32,
    },
}

/// One fault of a plan: `out:drop@m3.2`, `in:drop@ack5`, `out:reorder1@m9.2`, `out:ce@m4.1`,
/// `out:icrc@m6.2`, `out:dup@m7.4`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fault {
    /// Direction.
    pub dir: Dir,
    /// Action.
    pub action: Action,
    /// Frame.
    pub target: Target,
}

/// Why a fault does not parse.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BadFault(pub String);

impl fmt::Display for BadFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "bad fault `{}`: expected DIR:ACTION@TARGET, DIR out|in, ACTION drop|dup|ce|icrc|reorderN, \
             TARGET mM.P (packet P of message M) or ackM (e.g. out:drop@m3.2, in:drop@ack5)",
            self.0
        )
    }
}

impl std::error::Error for BadFault {}

impl FromStr for Fault {
    type Err = BadFault;

    fn from_str(s: &str) -> Result<Fault, BadFault> {
        let bad = || BadFault(s.to_string());
        let (dir, rest) = s.split_once(':').ok_or_else(bad)?;
        let (action, target) = rest.split_once('@').ok_or_else(bad)?;
        let dir = match dir {
            "out" => Dir::Out,
            "in" => Dir::In,
            _ => return Err(bad()),
        };
        let action = match action {
            "drop" => Action::Drop,
            "dup" => Action::Dup,
            "ce" => Action::Ce,
            "icrc" => Action::BadIcrc,
            a => match a.strip_prefix("reorder").map(str::parse::<u8>) {
                Some(Ok(n)) if n > 0 => Action::Reorder(n),
                _ => return Err(bad()),
            },
        };
        let positive = |v: &str| v.parse::<u32>().ok().filter(|&n| n > 0).ok_or_else(bad);
        let target = if let Some(m) = target.strip_prefix("ack") {
            Target::Ack { msg: positive(m)? }
        } else if let Some(mp) = target.strip_prefix('m') {
            let (m, p) = mp.split_once('.').ok_or_else(bad)?;
            Target::Packet { msg: positive(m)?, pkt: positive(p)? }
        } else {
            return Err(bad());
        };
        if matches!(target, Target::Ack { .. }) && action != Action::Drop {
            return Err(bad());
        }
        Ok(Fault { dir, action, target })
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let dir = match self.dir {
            Dir::Out => "out",
            Dir::In => "in",
        };
        let action = match self.action {
            Action::Drop => "drop".to_string(),
            Action::Dup => "dup".to_string(),
            Action::Ce => "ce".to_string(),
            Action::BadIcrc => "icrc".to_string(),
            Action::Reorder(n) => format!("reorder{n}"),
        };
        match self.target {
            Target::Packet { msg, pkt } => write!(f, "{dir}:{action}@m{msg}.{pkt}"),
            Target::Ack { msg } => write!(f, "{dir}:{action}@ack{msg}"),
        }
    }
}

/// Which perftest test carries the probe.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
#[value(rename_all = "snake_case")]
pub enum ProbeTest {
    /// `ib_write_lat`: both sides write in turn, so both the peer's responder and its
    /// requester are under test, one message at a time.
    WriteLat,
    /// `ib_read_lat`: uroce reads from the peer (its READ responder under test).
    ReadLat,
}

impl ProbeTest {
    /// The perftest test.
    pub fn perf_test(self) -> crate::perf::Test {
        match self {
            ProbeTest::WriteLat => crate::perf::Test::WriteLat,
            ProbeTest::ReadLat => crate::perf::Test::ReadLat,
        }
    }

    /// The default plan for messages of `pkts` packets each (at least 4 packets and 40
    /// messages; faults three messages apart so that each reaction has settled before the next
    /// fault, none on the last messages, whose reactions the end of the run would cut off).
    pub fn default_plan(self, pkts: u32) -> Vec<Fault> {
        let p = |s: &str| s.parse::<Fault>().expect("built-in plan");
        let mid = 2.min(pkts);
        let last = pkts;
        match self {
            ProbeTest::WriteLat => vec![
                p(&format!("out:drop@m3.{mid}")),
                p(&format!("out:icrc@m6.{mid}")),
                p(&format!("out:reorder1@m9.{mid}")),
                p(&format!("out:dup@m12.{mid}")),
                p(&format!("out:dup@m15.{last}")),
                p("out:ce@m18.1"),
                p(&format!("in:drop@m21.{mid}")),
                p(&format!("in:drop@m24.{last}")),
                p("out:drop@ack27"),
                p("in:drop@ack30"),
                p(&format!("out:drop@m33.{last}")),
            ],
            ProbeTest::ReadLat => vec![
                p(&format!("in:drop@m3.{mid}")),
                p(&format!("in:drop@m6.{last}")),
                p("in:drop@m9.1"),
                p("out:drop@m12.1"),
                p("out:dup@m15.1"),
                p("out:ce@m18.1"),
            ],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_parse_and_print_back() {
        for s in ["out:drop@m3.2", "in:drop@ack5", "out:reorder2@m9.1", "out:ce@m4.1", "in:icrc@m6.4", "out:dup@m7.4"] {
            let f: Fault = s.parse().unwrap();
            assert_eq!(f.to_string(), s);
        }
        let f: Fault = "in:reorder3@m2.1".parse().unwrap();
        assert_eq!(f, Fault { dir: Dir::In, action: Action::Reorder(3), target: Target::Packet { msg: 2, pkt: 1 } });
        for s in [
            "out:drop",
            "sideways:drop@m1.1",
            "out:drop@m0.1",
            "out:drop@m1",
            "out:ce@ack3",
            "out:reorder0@m1.1",
            "out:zap@m1.1",
        ] {
            assert!(s.parse::<Fault>().is_err(), "{s} parsed");
        }
    }

    #[test]
    fn default_plans_fit_the_run() {
        for t in [ProbeTest::WriteLat, ProbeTest::ReadLat] {
            let plan = t.default_plan(4);
            assert!(plan.iter().all(|f| match f.target {
                Target::Packet { msg, pkt } => msg <= 40 && pkt <= 4,
                Target::Ack { msg } => msg <= 40,
            }));
        }
    }
}
