//! Replay real Linux rxe traffic into uroce's responder and compare uroce's responses with
//! rxe's, header field by header field (opcode, PSN, AETH syndrome and MSN, atomic original
//! value, payload length).
//!
//! Sources: the project's own rxe fixtures (`rxe-compat/fixtures/`, recorded by its QEMU
//! harness with kernel 6.1 and 6.17 rxe) and the public rxe captures copied beside them
//! (`rxe-compat/fixtures/rxe-public/`); both are part of the repository. For every (responder IP, responder QPN) in a capture a
//! fresh uroce device takes the responder's place: same QPN, same IP and MAC, the requester's
//! MRs registered under the R_Keys and addresses the requests use.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use uroce_transport::connect::{connect_rc, RcLocal, RcRemote};
use uroce_transport::*;
use uroce_wire::opcode::Transport;
use uroce_wire::{parse_frame, EthernetAddress, Opcode, ParsedFrame, Syndrome};

fn read_pcap(path: &Path) -> Vec<Vec<u8>> {
    let f = std::fs::File::open(path).unwrap();
    let mut r = pcap_file::pcap::PcapReader::new(f).unwrap();
    let mut out = Vec::new();
    while let Some(p) = r.next_packet() {
        out.push(p.unwrap().data.into_owned());
    }
    out
}

/// What we compare of a response.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Resp {
    opcode: Opcode,
    psn: u32,
    syndrome: Option<Syndrome>,
    msn: Option<u32>,
    orig: Option<u64>,
    payload: usize,
}

fn resp(p: &ParsedFrame<'_>) -> Resp {
    Resp {
        opcode: p.roce.bth.opcode,
        psn: p.roce.bth.psn.value(),
        syndrome: p.roce.ext.aeth.map(|a| a.syndrome),
        msn: p.roce.ext.aeth.map(|a| a.msn.value()),
        orig: p.roce.ext.atomic_ack_eth.map(|a| a.orig),
        payload: p.roce.payload_len,
    }
}

/// Outcome of replaying one capture: groups replayed and mismatching responses.
struct Outcome {
    groups: usize,
    responses: usize,
    mismatches: Vec<String>,
}

fn replay(path: &Path) -> Outcome {
    let frames = read_pcap(path);
    let parsed: Vec<(usize, ParsedFrame<'_>)> = frames
        .iter()
        .enumerate()
        .filter_map(|(i, f)| parse_frame(f).ok().map(|p| (i, p)))
        .filter(|(_, p)| p.roce.info().is_some_and(|i| i.transport == Transport::Rc))
        .collect();
    // Group requests by responder (IP, QPN).
    let mut groups: BTreeMap<(IpAddr, u32), Vec<usize>> = BTreeMap::new();
    for (k, (_, p)) in parsed.iter().enumerate() {
        if p.roce.info().unwrap().is_request() {
            groups.entry((p.ip.dst_addr(), p.roce.bth.dest_qp.value())).or_default().push(k);
        }
    }
    let mut out = Outcome { groups: 0, responses: 0, mismatches: Vec::new() };
    for ((rip, rqpn), reqs) in groups {
        let first = &parsed[reqs[0]].1;
        let (first_psn, last_psn) = (first.roce.bth.psn, parsed[*reqs.last().unwrap()].1.roce.bth.psn);
        let peer_ip = first.ip.src_addr();
        let eth = first.eth.unwrap();
        // rxe's responses to this requester: from the responder, response opcodes, PSNs in the
        // range the requests used, after the first request.
        let theirs: Vec<&ParsedFrame<'_>> = parsed[reqs[0]..]
            .iter()
            .map(|(_, p)| p)
            .filter(|p| p.ip.src_addr() == rip && p.ip.dst_addr() == peer_ip && p.roce.info().unwrap().is_response())
            .filter(|p| p.roce.bth.psn.diff(first_psn) >= 0 && p.roce.bth.psn.diff(last_psn) <= 64)
            .collect();
        let Some(peer_qpn) = theirs.first().map(|p| p.roce.bth.dest_qp.value()) else { continue };
        let theirs: Vec<Resp> =
            theirs.iter().filter(|p| p.roce.bth.dest_qp.value() == peer_qpn).map(|p| resp(p)).collect();
        // RNR traffic depends on when the application posted receives: not replayable.
        if theirs.iter().any(|r| matches!(r.syndrome, Some(Syndrome::RnrNak(_)))) {
            continue;
        }
        let mut cfg = DeviceConfig::new(eth.dst_addr, &[rip]);
        cfg.seed = 1;
        let sgid_index = cfg.gids.iter().position(|g| g.to_ip() == rip).expect("responder GID") as u8;
        let mut dev = Device::new(cfg);
        let pd = dev.alloc_pd();
        let cq = dev.create_cq(1 << 16).unwrap();
        let cap = QpCap { max_send_wr: 64, max_recv_wr: 4096, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 };
        let qpn = dev
            .create_qp_with_qpn(
                pd,
                &QpInitAttr { qp_type: QpType::Rc, send_cq: cq, recv_cq: cq, cap, sq_sig_all: false, srq: None },
                rqpn,
            )
            .unwrap();
        connect(&mut dev, qpn, eth.src_addr, peer_ip, sgid_index, peer_qpn, first_psn.value());
        // The requester's target buffers, under the keys and addresses it uses.
        let mut mrs: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
        for &k in &reqs {
            let e = &parsed[k].1.roce.ext;
            let (key, va, len) = match (e.reth, e.atomic_eth) {
                (Some(r), _) => (r.rkey, r.va, r.dma_len as u64),
                (_, Some(a)) => (a.rkey, a.va, 8),
                _ => continue,
            };
            let m = mrs.entry(key).or_insert((va, va + len));
            m.0 = m.0.min(va);
            m.1 = m.1.max(va + len);
        }
        for (key, (lo, hi)) in mrs {
            let len = (hi - lo).max(8) as usize;
            dev.reg_mr_with_key(pd, vec![0u8; len].into_boxed_slice(), lo, ALL, key).unwrap();
        }
        // rxe's memory held whatever perftest left there; before each atomic, put the value
        // rxe reported as "original" at the target, so the returned value is comparable.
        let origs: BTreeMap<u32, u64> = theirs.iter().filter_map(|r| r.orig.map(|o| (r.psn, o))).collect();
        let rbuf = dev.reg_mr(pd, vec![0u8; 1 << 20].into_boxed_slice(), AccessFlags::LOCAL_WRITE).unwrap();
        for i in 0..4000u64 {
            let s = [Sge { addr: rbuf.addr, length: 1 << 20, lkey: rbuf.lkey }];
            dev.post_recv(qpn, &RecvWr { wr_id: i, sg_list: &s }).unwrap();
        }
        let mut ours = Vec::new();
        let mut buf = vec![0u8; 9000];
        for &k in &reqs {
            let (i, ref p) = parsed[k];
            if let (Some(a), Some(o)) = (p.roce.ext.atomic_eth, origs.get(&p.roce.bth.psn.value())) {
                let mr = dev.mr_mut(a.rkey).unwrap();
                let off = (a.va - mr.addr) as usize;
                mr.as_mut_slice()[off..off + 8].copy_from_slice(&o.to_le_bytes());
            }
            dev.handle_frame(Instant::ZERO, &frames[i])
                .unwrap_or_else(|e| panic!("{}: frame {}: {e:?}", path.display(), i + 1));
            while let Some(n) = dev.poll_transmit(Instant::ZERO, &mut buf) {
                ours.push(resp(&parse_frame(&buf[..n]).unwrap()));
            }
        }
        out.groups += 1;
        out.responses += theirs.len();
        if ours != theirs {
            let first_diff = ours.iter().zip(&theirs).position(|(a, b)| a != b).unwrap_or(ours.len().min(theirs.len()));
            out.mismatches.push(format!(
                "{} responder {rip} qp {rqpn:#x}: {} responses from uroce, {} from rxe; first difference at #{first_diff}:\n  uroce {:?}\n  rxe   {:?}",
                path.display(),
                ours.len(),
                theirs.len(),
                ours.get(first_diff),
                theirs.get(first_diff)
            ));
        }
    }
    out
}

const ALL: AccessFlags = AccessFlags(
    AccessFlags::LOCAL_WRITE.0
        | AccessFlags::REMOTE_WRITE.0
        | AccessFlags::REMOTE_READ.0
        | AccessFlags::REMOTE_ATOMIC.0,
);

fn connect(
    dev: &mut Device,
    qpn: u32,
    peer_mac: EthernetAddress,
    peer_ip: IpAddr,
    sgid_index: u8,
    peer_qpn: u32,
    rq_psn: u32,
) {
    let local = RcLocal {
        access: ALL,
        sgid_index,
        path_mtu: Mtu::Mtu1024,
        sq_psn: 0,
        max_dest_rd_atomic: 128,
        max_rd_atomic: 16,
        min_rnr_timer: 12,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        hop_limit: 64,
        ..RcLocal::default()
    };
    let remote = RcRemote { qpn: peer_qpn, psn: rq_psn, gid: Gid::from_ip(peer_ip), mac: peer_mac };
    connect_rc(dev, qpn, &local, &remote).unwrap();
}

/// The `.pcap` files of `dir` (part of the repository: none is a failure, never a skip).
fn pcaps(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "pcap"))
        .collect();
    v.sort();
    assert!(!v.is_empty(), "no captures in {}", dir.display());
    v
}

#[test]
fn uroce_responds_like_rxe_to_rxe_requests_project_fixtures() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../rxe-compat/fixtures");
    let mut total = Outcome { groups: 0, responses: 0, mismatches: Vec::new() };
    for f in pcaps(&dir) {
        let o = replay(&f);
        eprintln!("{}: {} responders, {} responses compared", f.display(), o.groups, o.responses);
        total.groups += o.groups;
        total.responses += o.responses;
        total.mismatches.extend(o.mismatches);
    }
    assert!(total.groups >= 40 && total.responses >= 300, "{} groups, {} responses", total.groups, total.responses);
    assert!(total.mismatches.is_empty(), "{}", total.mismatches.join("\n"));
}

#[test]
fn uroce_responds_like_rxe_to_rxe_requests_public_captures() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../rxe-compat/fixtures/rxe-public");
    let mut mismatches = Vec::new();
    let mut responses = 0;
    for f in pcaps(&dir) {
        let o = replay(&f);
        eprintln!("{}: {} responders, {} responses compared", f.display(), o.groups, o.responses);
        responses += o.responses;
        mismatches.extend(o.mismatches);
    }
    assert!(responses >= 100);
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
}
