//! QPN residue classes for sharded runtimes: a device configured as shard `i` of `n` hands out
//! only QPNs with `qpn % n == i` (the XDP program steers each frame by `dest QPN % n`), still at
//! random and above the 16 reserved numbers; a bad configuration is refused, not looped on.
//! A device of one process among several on an interface (`qpn_block`) hands out only QPNs
//! of its block (`qpn >> 16`), sharded within it the same way.

use uroce_transport::sim::setup::{ipv4, mac};
use uroce_transport::*;

fn device(index: u32, count: u32) -> Device {
    let mut cfg = DeviceConfig::new(mac(1), &[ipv4(1).into()]);
    cfg.seed = 5 + index as u64;
    cfg.qpn_shard = QpnShard { index, count };
    Device::new(cfg)
}

fn create(d: &mut Device, n: usize) -> Result<Vec<u32>, VerbsError> {
    let pd = d.alloc_pd();
    let cq = d.create_cq(16)?;
    let cap = QpCap { max_send_wr: 1, max_recv_wr: 1, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 };
    let init = QpInitAttr { qp_type: QpType::Rc, send_cq: cq, recv_cq: cq, cap, sq_sig_all: false, srq: None };
    (0..n).map(|_| d.create_qp(pd, &init)).collect()
}

#[test]
fn each_shard_gets_only_its_residue_class() {
    for count in [1u32, 2, 3, 4, 7, 64] {
        for index in 0..count.min(5) {
            let mut d = device(index, count);
            let qpns = create(&mut d, 500).unwrap();
            let class = QpnShard { index, count };
            assert!(qpns.iter().all(|&q| class.owns(q) && (0x11..=0xff_ffff).contains(&q)), "{class:?}: {qpns:x?}");
            let mut sorted = qpns.clone();
            sorted.sort_unstable();
            sorted.dedup();
            assert_eq!(sorted.len(), 500, "distinct");
            assert!(qpns.windows(2).any(|w| w[1] < w[0]), "random, not sequential");
        }
    }
}

#[test]
fn a_process_block_holds_every_qpn_and_its_shards_split_it() {
    for (block, count, index) in [(1u8, 1u32, 0u32), (2, 2, 1), (255, 3, 2), (0, 4, 0)] {
        let mut d = device(index, count);
        let mut cfg = d.config().clone();
        cfg.qpn_block = Some(block);
        d = Device::new(cfg);
        let qpns = create(&mut d, 2000).unwrap();
        let class = QpnShard { index, count };
        for &q in &qpns {
            assert_eq!(q >> 16, u32::from(block), "{q:#x} outside block {block}");
            assert!(class.owns(q) && q >= 0x11, "{q:#x}");
        }
        let mut sorted = qpns.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), qpns.len(), "distinct");
        assert!(qpns.windows(2).any(|w| w[1] < w[0]), "random, not sequential");
    }
    // A block holds 2^16 numbers; half of them per shard class may be in use at once.
    let mut d = device(0, 2);
    let mut cfg = d.config().clone();
    cfg.qpn_block = Some(7);
    d = Device::new(cfg);
    assert_eq!(create(&mut d, (1 << 16) / 2 / 2).unwrap().len(), 16384);
    assert_eq!(create(&mut d, 1), Err(VerbsError::Exhausted("QP numbers")));
}

#[test]
fn a_bad_shard_is_refused() {
    let mut d = device(4, 4);
    assert_eq!(create(&mut d, 1), Err(VerbsError::InvalidArgument("qpn_shard index not below its count")));
}

/// A frame steered to the wrong shard is handed back unchecked as another shard's (for the
/// runtime to relay), counted as such and nothing else; a frame for an unknown QP of this
/// shard's own class is an unknown QP's.
#[test]
fn another_shards_frame_is_handed_back_unchecked() {
    use uroce_transport::connect::{connect_rc, RcLocal, RcRemote};
    // B: shard 0 of 2 (even QPNs).
    let mut cfg = DeviceConfig::new(mac(2), &[ipv4(2).into()]);
    cfg.qpn_shard = QpnShard { index: 0, count: 2 };
    let mut b = Device::new(cfg);
    let mut a = device(0, 1);
    let qa = create(&mut a, 1).unwrap()[0];
    let remote = RcRemote { qpn: 0x1235, psn: 0, gid: b.config().gids[1], mac: mac(2) };
    connect_rc(&mut a, qa, &RcLocal::default(), &remote).unwrap();
    let wr = SendWr { wr_id: 1, opcode: WrOpcode::Send, ..Default::default() };
    a.post_send(qa, &wr).unwrap();
    let mut buf = vec![0u8; a.max_frame_len()];
    let n = a.poll_transmit(Instant::ZERO, &mut buf).expect("a SEND ONLY frame");
    let frame = buf[..n].to_vec();
    // Odd destination QPN 0x1235: shard 1's.
    assert_eq!(b.handle_frame(Instant::ZERO, &frame), Err(RxDrop::OtherShard(0x1235)));
    // Its ICRC is the owner's to check: a corrupt one is handed back the same way.
    let mut corrupt = frame.clone();
    *corrupt.last_mut().unwrap() ^= 1;
    assert_eq!(b.handle_frame(Instant::ZERO, &corrupt), Err(RxDrop::OtherShard(0x1235)));
    let c = *b.counters();
    assert_eq!((c.dropped_unknown_qp, c.dropped_wrong_shard, c.icrc_err, c.rcvd_pkts), (0, 2, 0, 0));
    // The same frame re-addressed to 0x1236 (even: this shard's class, but no such QP), with
    // its ICRC left unchecked so that the re-addressing does not break it.
    let mut cfg = DeviceConfig::new(mac(2), &[ipv4(2).into()]);
    cfg.qpn_shard = QpnShard { index: 0, count: 2 };
    cfg.check_icrc = false;
    let mut b = Device::new(cfg);
    let mut even = frame.clone();
    let bth = 14 + 20 + 8;
    even[bth + 7] = 0x36;
    assert_eq!(b.handle_frame(Instant::ZERO, &even), Err(RxDrop::UnknownQp(0x1236)));
    let c = *b.counters();
    assert_eq!((c.dropped_unknown_qp, c.dropped_wrong_shard), (1, 0));
}

/// A frame to the device's own address is delivered inside the engine only when its QP is the
/// device's own: with a block and a wire that brings own-address frames back (kernel UDP),
/// another process's QP on the same address (and QP1, everyone's) gets it through the wire,
/// where the kernel's steering finds its owner; over AF_XDP nothing would come back.
#[test]
fn only_the_blocks_own_qps_are_loopback() {
    let me: std::net::IpAddr = ipv4(1).into();
    let other: std::net::IpAddr = ipv4(2).into();
    let mut cfg = DeviceConfig::new(mac(1), &[me]);
    assert!(cfg.delivers_locally(me, 0x07_0042) && cfg.delivers_locally(me, 1), "no block: every own-address QP");
    assert!(!cfg.delivers_locally(other, 0x07_0042));
    cfg.qpn_block = Some(7);
    assert!(cfg.delivers_locally(me, 0x08_0042) && cfg.delivers_locally(me, 1), "AF_XDP: nothing comes back");
    cfg.own_address_via_wire = true;
    assert!(cfg.delivers_locally(me, 0x07_0042));
    assert!(!cfg.delivers_locally(me, 0x08_0042), "another process's block");
    assert!(!cfg.delivers_locally(me, 1), "QP1");
    assert!(!cfg.delivers_locally(other, 0x07_0042));
}
