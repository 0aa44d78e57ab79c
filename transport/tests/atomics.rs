//! Atomics: two QPs FETCH_ADD one counter over a lossy, duplicating, reordering network — the
//! sum is exact because no atomic is ever executed twice (duplicates are answered from the
//! replay cache) — and COMPARE_SWAP semantics.

mod common;

use common::*;
use uroce_transport::sim::setup::*;
use uroce_transport::sim::{LinkConfig, Network};
use uroce_transport::*;

#[test]
fn two_qps_fetch_add_one_counter_exactly() {
    let link = LinkConfig { loss: 0.05, dup: 0.05, reorder: 0.05, ..Default::default() };
    let mut net = Network::new(41, link);
    for i in 1..=3 {
        net.add(device(i, 41));
    }
    let o = QpOptions { timeout: 10, ..Default::default() };
    // Node 0 holds the counter; nodes 1 and 2 each connect a QP to it, in one PD on node 0.
    let pd0 = net.dev(0).alloc_pd();
    let s1 = create_in(&mut net, 0, pd0, &o).unwrap();
    let s2 = create_in(&mut net, 0, pd0, &o).unwrap();
    let a = create(&mut net, 1, &o).unwrap();
    let b = create(&mut net, 2, &o).unwrap();
    connect_ends(&mut net, &a, &s1, &o).unwrap();
    connect_ends(&mut net, &b, &s2, &o).unwrap();
    let counter = reg(&mut net, 0, pd0, 8, ALL_ACCESS, |_| 0);
    let ra = reg(&mut net, 1, a.pd, 8 * 2000, ALL_ACCESS, |_| 0);
    let rb = reg(&mut net, 2, b.pd, 8 * 2000, ALL_ACCESS, |_| 0);
    let n = 1000u64;
    let mut posted = [0u64; 2];
    let mut done = [0u64; 2];
    let mut olds = Vec::new();
    let ends = [(a, ra, 3u64), (b, rb, 5u64)];
    let mut steps = 0;
    while done != [n, n] {
        for (k, (e, r, add)) in ends.iter().enumerate() {
            while posted[k] < n && posted[k] - done[k] < 16 {
                let s = [sge(r, (posted[k] as usize % 2000) * 8, 8)];
                net.dev(e.node)
                    .post_send(
                        e.qpn,
                        &SendWr {
                            wr_id: posted[k],
                            opcode: WrOpcode::AtomicFetchAndAdd,
                            sg_list: &s,
                            send_flags: SendFlags::SIGNALED,
                            remote_addr: counter.addr,
                            rkey: counter.rkey,
                            compare_add: *add,
                            ..Default::default()
                        },
                    )
                    .unwrap();
                posted[k] += 1;
            }
        }
        net.step();
        for (k, (e, r, _)) in ends.iter().enumerate() {
            for wc in drain_cq(&mut net, e.node, e.cq) {
                assert_eq!((wc.wr_id, wc.status), (done[k], WcStatus::Success));
                let off = (wc.wr_id as usize % 2000) * 8;
                olds.push(u64::from_le_bytes(mr_bytes(&mut net, e.node, r)[off..off + 8].try_into().unwrap()));
                done[k] += 1;
            }
        }
        steps += 1;
        assert!(steps < 10_000_000, "stuck at {done:?}");
    }
    let total = u64::from_le_bytes(mr_bytes(&mut net, 0, &counter)[..8].try_into().unwrap());
    assert_eq!(total, n * 3 + n * 5);
    // Every returned "original" value is distinct: each FETCH_ADD executed exactly once.
    olds.sort_unstable();
    olds.dedup();
    assert_eq!(olds.len() as u64, 2 * n);
    assert!(net.dev(0).counters().duplicate_request > 0, "duplicates really reached the responder");
}

#[test]
fn compare_swap_only_swaps_on_match() {
    let (mut net, a, b) = pair(42, LinkConfig::default(), &QpOptions::default());
    let mine = reg(&mut net, 0, a.pd, 16, ALL_ACCESS, |_| 0);
    let word = reg(&mut net, 1, b.pd, 8, ALL_ACCESS, |i| [7, 0, 0, 0, 0, 0, 0, 0][i]);
    for (k, (compare, swap, want_old, want_now)) in
        [(8u64, 99u64, 7u64, 7u64), (7, 99, 7, 99), (99, 1 << 63, 99, 1 << 63)].into_iter().enumerate()
    {
        let s = [sge(&mine, 0, 8)];
        net.dev(0)
            .post_send(
                a.qpn,
                &SendWr {
                    wr_id: k as u64,
                    opcode: WrOpcode::AtomicCmpAndSwp,
                    sg_list: &s,
                    send_flags: SendFlags::SIGNALED,
                    remote_addr: word.addr,
                    rkey: word.rkey,
                    compare_add: compare,
                    swap,
                    ..Default::default()
                },
            )
            .unwrap();
        let w = wait_wcs(&mut net, &a, 1, 10_000);
        assert_eq!((w[0].status, w[0].opcode, w[0].byte_len), (WcStatus::Success, WcOpcode::CompSwap, 8));
        assert_eq!(u64::from_le_bytes(mr_bytes(&mut net, 0, &mine)[..8].try_into().unwrap()), want_old);
        assert_eq!(u64::from_le_bytes(mr_bytes(&mut net, 1, &word)[..8].try_into().unwrap()), want_now);
    }
}
