//! The fast paths (receive: RDMA WRITE packets placed without a `ParsedFrame`; transmit: SEND
//! and WRITE MIDDLE built without `build_request`'s general walk) against the general paths,
//! over whole soaks: the same seeded workload and lossy network run once with the fast paths
//! and once without must put the same frames on the wire, byte for byte and in the same order,
//! and end with the same report and counters (the fast paths' own counts aside). Every
//! operation, message sizes across packet boundaries, several SGEs, inline data, loss,
//! reordering, duplication and corruption (Go-Back-N resends from the middle of messages).

use std::cell::RefCell;
use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::rc::Rc;
use uroce_transport::sim::soak::{run_with_tap, SoakConfig, SoakReport};
use uroce_transport::*;

/// A soak's report and a hash of every frame it put on the wire, in order.
fn soak(cfg: &SoakConfig) -> (SoakReport, Vec<u64>) {
    let frames = Rc::new(RefCell::new(Vec::new()));
    let tap = frames.clone();
    let report = run_with_tap(
        cfg,
        Some(Box::new(move |_, f: &[u8]| {
            let mut h = DefaultHasher::new();
            f.hash(&mut h);
            tap.borrow_mut().push(h.finish());
        })),
    );
    let hashes = frames.borrow().clone();
    (report, hashes)
}

fn without_fast_counts(mut r: SoakReport) -> SoakReport {
    for c in &mut r.counters {
        c.rx_fast_path_pkts = 0;
        c.tx_fast_path_pkts = 0;
    }
    r
}

fn same_with_and_without(cfg: SoakConfig) {
    let (fast, fast_frames) = soak(&SoakConfig { fast_paths: true, ..cfg.clone() });
    let (slow, slow_frames) = soak(&SoakConfig { fast_paths: false, ..cfg });
    assert!(fast.passed(), "{}: {:?}", fast.summary(), fast.errors);
    let rx: u64 = fast.counters.iter().map(|c| c.rx_fast_path_pkts).sum();
    let tx: u64 = fast.counters.iter().map(|c| c.tx_fast_path_pkts).sum();
    assert!(rx > 100 && tx > 100, "the fast paths ran: rx {rx}, tx {tx}");
    assert!(slow.counters.iter().all(|c| c.rx_fast_path_pkts == 0 && c.tx_fast_path_pkts == 0));
    if let Some(i) = (0..fast_frames.len().min(slow_frames.len())).find(|&i| fast_frames[i] != slow_frames[i]) {
        panic!("frame {i} on the wire differs (of {} / {})", fast_frames.len(), slow_frames.len());
    }
    assert_eq!(fast_frames.len(), slow_frames.len(), "as many frames on the wire");
    assert_eq!(without_fast_counts(fast), without_fast_counts(slow));
}

#[test]
fn lossy_soak_is_the_same_frame_for_frame_with_and_without_fast_paths() {
    same_with_and_without(SoakConfig {
        ops: 3_000,
        seed: 11,
        loss: 0.05,
        reorder: 0.03,
        dup: 0.03,
        corrupt: 0.01,
        qps: 3,
        max_size: 48 * 1024,
        ..Default::default()
    });
}

#[test]
fn clean_soak_at_4096_mtu_is_the_same_with_and_without_fast_paths() {
    same_with_and_without(SoakConfig {
        ops: 1_000,
        seed: 12,
        mtu: Mtu::Mtu4096,
        max_size: 256 * 1024,
        ..Default::default()
    });
}

/// An inline WRITE longer than the path MTU has MIDDLE packets too; they carry the bytes copied
/// when the WR was posted, not what the region holds by the time they are sent (the transmit
/// fast path leaves inline WQEs to the general path).
#[test]
fn inline_data_longer_than_the_mtu_is_sent_as_posted() {
    use uroce_transport::sim::setup::*;
    use uroce_transport::sim::{LinkConfig, Network};
    let mut net = Network::new(3, LinkConfig::default());
    net.add(device(1, 4));
    net.add(device(2, 4));
    let cap = QpCap { max_inline_data: 2048, ..QpCap::default() };
    let o = QpOptions { mtu: Mtu::Mtu256, cap, ..Default::default() };
    let (qa, qb) = connect(&mut net, 0, 1, &o).expect("connect");
    let src = reg(&mut net, 0, qa.pd, 1500, ALL_ACCESS, |i| i as u8);
    let dst = reg(&mut net, 1, qb.pd, 1500, ALL_ACCESS, |_| 0);
    let s = [Sge { addr: src.addr, length: 1500, lkey: src.lkey }];
    let wr = SendWr {
        wr_id: 9,
        opcode: WrOpcode::RdmaWrite,
        sg_list: &s,
        send_flags: SendFlags::SIGNALED | SendFlags::INLINE,
        remote_addr: dst.addr,
        rkey: dst.rkey,
        ..Default::default()
    };
    net.dev(0).post_send(qa.qpn, &wr).expect("post_send");
    // The application reuses its buffer at once, as inline allows.
    net.dev(0).mr_mut(src.lkey).expect("src").as_mut_slice().fill(0xee);
    assert!(net.run_idle(100_000));
    let wc = drain_cq(&mut net, 0, qa.cq);
    assert_eq!(wc.len(), 1);
    assert_eq!(wc[0].status, WcStatus::Success);
    let got = net.dev(1).mr(dst.lkey).expect("dst").as_slice();
    assert!(got.iter().enumerate().all(|(i, &b)| b == i as u8), "the bytes as posted");
}
