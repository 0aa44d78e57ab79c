//! Shared helpers for the transport integration tests.
#![allow(dead_code)]

use uroce_transport::sim::setup::*;
use uroce_transport::sim::{LinkConfig, Network};
use uroce_transport::*;

/// Two nodes (0 and 1) on a network with `link`, and one connected QP pair.
pub fn pair(seed: u64, link: LinkConfig, o: &QpOptions) -> (Network, QpEnd, QpEnd) {
    let mut net = Network::new(seed, link);
    net.add(device(1, seed));
    net.add(device(2, seed));
    let (a, b) = connect(&mut net, 0, 1, o).expect("connect");
    (net, a, b)
}

/// Deterministic test pattern.
pub fn pattern(seed: u64, i: usize) -> u8 {
    let x = (i as u64).wrapping_add(seed).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    (x >> 56) as u8
}

/// Run until `n` completions arrive on `end`'s CQ (bounded), returning them.
pub fn wait_wcs(net: &mut Network, end: &QpEnd, n: usize, max_steps: u64) -> Vec<WorkCompletion> {
    let mut got = Vec::new();
    let ok = net.run_until(max_steps, |net| {
        got.extend(drain_cq(net, end.node, end.cq));
        got.len() >= n
    });
    assert!(ok, "only {} of {} completions after {max_steps} steps; got {got:?}", got.len(), n);
    got
}

pub fn sge(mr: &MrInfo, off: usize, len: usize) -> Sge {
    Sge { addr: mr.addr + off as u64, length: len as u32, lkey: mr.lkey }
}

pub fn mr_bytes(net: &mut Network, node: usize, mr: &MrInfo) -> Vec<u8> {
    net.dev(node).mr(mr.lkey).unwrap().as_slice().to_vec()
}
