//! Arbitrary MAD sequences into two communication managers that hold a connection between them
//! (and a listener and a REQ being answered). Each step feeds one side a MAD — one of the
//! connection's own messages with fuzzer-chosen bytes overwritten, from the peer or a stranger,
//! or raw bytes — advances the clock, or makes an API call. Whatever arrives:
//! * nothing panics, and the CMs' bounds hold (IDs, transmit queue);
//! * the established connection stays established unless a DREQ naming it (its IDs and QPN)
//!   came from its peer, or the application released it.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::net::IpAddr;
use std::time::Duration;
use uroce_transport::cm::*;
use uroce_transport::time::Instant;
use uroce_transport::QpType;
use uroce_wire::cm::{CmMessage, PathRepr};
use uroce_wire::mad::Mad;

const SID: u64 = 0x0106_4853;

fn params(qpn: u32, peer: IpAddr) -> ConnectParams<'static> {
    ConnectParams {
        peer: MadAddr::gsi(peer),
        service_id: SID,
        qp_type: QpType::Rc,
        local_qpn: qpn,
        starting_psn: 1,
        responder_resources: 1,
        initiator_depth: 1,
        retry_count: 7,
        rnr_retry_count: 7,
        path_mtu: 3,
        srq: false,
        primary: PathRepr::NONE,
        remote_cm_response_timeout: 20,
        local_cm_response_timeout: 20,
        max_cm_retries: 3,
        private_data: &[],
    }
}

fn accept(qpn: u32) -> AcceptParams<'static> {
    AcceptParams {
        local_qpn: qpn,
        starting_psn: 2,
        responder_resources: 1,
        initiator_depth: 1,
        target_ack_delay: 15,
        rnr_retry_count: 7,
        srq: false,
        private_data: &[],
    }
}

fn drain(from: &mut Cm, to: &mut Cm, from_ip: IpAddr, now: Instant, seen: &mut Vec<[u8; 256]>) {
    while let Some(m) = from.poll_transmit() {
        if seen.len() < 64 {
            seen.push(*m.mad);
        }
        let _ = to.handle_mad(now, MadAddr::gsi(from_ip), &m.mad[..]);
    }
}

fuzz_target!(|data: &[u8]| {
    let (ipa, ipb, evil): (IpAddr, IpAddr, IpAddr) =
        ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap(), "10.0.0.9".parse().unwrap());
    let cfg = |guid| CmConfig { ca_guid: guid, max_ids: 64, backlog: 8, max_tx_queue: 256, ..CmConfig::default() };
    let (mut a, mut b) = (Cm::new(cfg(0xa)), Cm::new(cfg(0xb)));
    b.listen(SID).unwrap();
    let mut now = Instant::ZERO;
    let mut seen = Vec::new();
    let ia = a.connect(now, &params(0x11, ipb)).unwrap();
    drain(&mut a, &mut b, ipa, now, &mut seen);
    let Some(CmEvent::ReqReceived { id: ib, .. }) = b.poll_event() else { panic!("no REQ") };
    b.accept(now, ib, &accept(0x22)).unwrap();
    drain(&mut b, &mut a, ipb, now, &mut seen);
    a.send_rtu(ia, &[]).unwrap();
    drain(&mut a, &mut b, ipa, now, &mut seen);
    assert_eq!(b.state(ib), Some(CmState::Established));
    // A second connection left half-open: b holds its REQ.
    let _ = a.connect(now, &params(0x12, ipb));
    drain(&mut a, &mut b, ipa, now, &mut seen);

    let mut released = false;
    for step in data.chunks(6) {
        let [op, x, y, z, ..] = *step else { break };
        let before = b.state(ib);
        let mut ended_by_peer = false;
        match op % 8 {
            0..=3 => {
                let mut m = seen[x as usize % seen.len()];
                m[y as usize] = z;
                if op & 0x10 != 0 {
                    m[(y as usize + 1) % 256] = step.get(4).copied().unwrap_or(0);
                }
                let from = if op & 0x20 != 0 { evil } else { ipa };
                if from == ipa {
                    if let Ok(CmMessage::Dreq(d)) = Mad::parse(&m[..], 0).and_then(|mad| CmMessage::parse(&mad, 0)) {
                        ended_by_peer = d.ids.remote == ib.0 && d.remote_qpn == 0x22;
                    }
                }
                let _ = b.handle_mad(now, MadAddr::gsi(from), &m[..]);
                let _ = a.handle_mad(now, MadAddr::gsi(ipb), &m[..]);
            }
            4 => {
                let _ = b.handle_mad(now, MadAddr::gsi(ipa), step);
            }
            5 => {
                now += Duration::from_millis(u64::from(x) << (y % 12));
                a.handle_timeout(now);
                b.handle_timeout(now);
            }
            6 => {
                let _ = a.connect(now, &params(0x100 + x as u32, ipb));
            }
            _ => match x % 4 {
                0 => released |= a.disconnect(now, ia, &[]).is_ok(),
                1 => released |= a.destroy(now, ia).is_ok(),
                2 => {
                    let _ = b.send_drep(now, ib, &[]);
                }
                _ => {
                    while let Some(e) = b.poll_event() {
                        if let CmEvent::ReqReceived { id, .. } = e {
                            let _ = b.accept(now, id, &accept(0x200 + y as u32));
                        }
                    }
                }
            },
        }
        drain(&mut a, &mut b, ipa, now, &mut seen);
        drain(&mut b, &mut a, ipb, now, &mut seen);
        while a.poll_event().is_some() {}
        if before == Some(CmState::Established) && !released && !ended_by_peer {
            assert_eq!(b.state(ib), Some(CmState::Established), "step {step:?}");
        }
        if b.state(ib) != Some(CmState::Established) {
            released = true;
        }
        assert!(a.ids_in_use() <= 64 && b.ids_in_use() <= 64);
    }
});
