//! Memory regions over application memory: the application keeps using its buffer while it is
//! registered (fills it, reads what a peer wrote, lets a peer read what it wrote), with the
//! same key, bounds and access checks as owned memory, and the engine never touches a byte
//! outside the registered range.

use uroce_mem::{RawMemory, SharedMemory};
use uroce_transport::sim::setup::*;
use uroce_transport::sim::{LinkConfig, Network};
use uroce_transport::*;

const PAGE: usize = 4096;

fn pair() -> (Network, QpEnd, QpEnd) {
    let mut net = Network::new(3, LinkConfig::default());
    net.add(device(1, 3));
    net.add(device(2, 3));
    let (a, b) = connect(&mut net, 0, 1, &QpOptions::default()).expect("connect");
    (net, a, b)
}

fn pattern(seed: u8, n: usize) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

/// Post `op` from A and run to its completion; returns the status.
fn run(net: &mut Network, a: &QpEnd, op: WrOpcode, local: Sge, remote: (u64, u32)) -> WcStatus {
    let s = [local];
    let wr = SendWr {
        wr_id: 9,
        opcode: op,
        sg_list: &s,
        send_flags: SendFlags::SIGNALED,
        remote_addr: remote.0,
        rkey: remote.1,
        ..Default::default()
    };
    net.dev(a.node).post_send(a.qpn, &wr).expect("post_send");
    let mut got = Vec::new();
    assert!(net.run_until(100_000, |n| {
        got.extend(drain_cq(n, a.node, a.cq));
        !got.is_empty()
    }));
    got[0].status
}

#[test]
fn the_application_keeps_using_a_registered_buffer() {
    let (mut net, a, b) = pair();
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
    // B's buffer is the application's: registered, and still in its hands.
    let app = SharedMemory::new(8 * PAGE);
    let mr_b = net.dev(1).reg_mr_app(b.pd, Box::new(app.clone()), access).unwrap();
    assert_eq!(mr_b.addr, app.addr(), "the region's address is the buffer's, as ibv_reg_mr's");
    assert_eq!(mr_b.length, 8 * PAGE);
    assert!(net.dev(1).mr(mr_b.lkey).unwrap().is_app_memory());
    // A's source is application memory too, filled after registration.
    let src = SharedMemory::new(8 * PAGE);
    let mr_a = net.dev(0).reg_mr_app(a.pd, Box::new(src.clone()), access).unwrap();
    let data = pattern(1, 5 * PAGE + 17);
    src.write(100, &data).unwrap();

    // A WRITEs into B's buffer; B's application reads it without deregistering.
    let l = Sge { addr: mr_a.addr + 100, length: data.len() as u32, lkey: mr_a.lkey };
    assert_eq!(run(&mut net, &a, WrOpcode::RdmaWrite, l, (mr_b.addr + 3, mr_b.rkey)), WcStatus::Success);
    let mut back = vec![0u8; data.len()];
    app.read(3, &mut back).unwrap();
    assert_eq!(back, data, "the peer's WRITE is in the application's buffer");
    assert_eq!(app.to_vec()[..3], [0, 0, 0]);
    assert!(app.to_vec()[3 + data.len()..].iter().all(|&x| x == 0), "nothing past the WRITE");

    // B's application changes its buffer while registered; A READs the new bytes.
    let fresh = pattern(9, 2 * PAGE);
    app.write(PAGE, &fresh).unwrap();
    let l = Sge { addr: mr_a.addr, length: fresh.len() as u32, lkey: mr_a.lkey };
    assert_eq!(run(&mut net, &a, WrOpcode::RdmaRead, l, (mr_b.addr + PAGE as u64, mr_b.rkey)), WcStatus::Success);
    let mut got = vec![0u8; fresh.len()];
    src.read(0, &mut got).unwrap();
    assert_eq!(got, fresh, "the READ saw what the application wrote after registering");

    // Deregistering hands the handle back; the old key is dead, the buffer unchanged.
    let before = app.to_vec();
    let h = net.dev(1).dereg_mr(mr_b.lkey).unwrap();
    assert!(h.into_owned().is_none(), "application memory is not the engine's to give back as a Box");
    let l = Sge { addr: mr_a.addr, length: 64, lkey: mr_a.lkey };
    assert_eq!(run(&mut net, &a, WrOpcode::RdmaWrite, l, (mr_b.addr, mr_b.rkey)), WcStatus::RemAccessErr);
    assert_eq!(app.to_vec(), before, "a WRITE through a deregistered key changed nothing");
}

#[test]
fn nothing_outside_the_registered_range_is_touched() {
    let (mut net, a, b) = pair();
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
    // Three pages; only the middle one is registered (a C caller's (ptr, len)), the others are
    // canaries.
    let outer = SharedMemory::new(3 * PAGE);
    let canary = pattern(0xAA, 3 * PAGE);
    outer.write(0, &canary).unwrap();
    // SAFETY: `outer` outlives the registration (it is dropped at the end of the test, after
    // the network), and the test touches it only through its copying accessors.
    let raw = unsafe { RawMemory::new(outer.as_ptr().add(PAGE), PAGE) }.unwrap();
    let mr_b = net.dev(1).reg_mr_app(b.pd, Box::new(raw), access).unwrap();
    assert_eq!(mr_b.addr, outer.addr() + PAGE as u64);
    let mr_a = net.dev(0).reg_mr(a.pd, pattern(3, 4 * PAGE).into_boxed_slice(), access).unwrap();

    // A WRITE that crosses the end by 8 bytes, one that starts before it, a READ past it.
    let l = Sge { addr: mr_a.addr, length: 16, lkey: mr_a.lkey };
    let end = mr_b.addr + PAGE as u64;
    assert_eq!(run(&mut net, &a, WrOpcode::RdmaWrite, l, (end - 8, mr_b.rkey)), WcStatus::RemAccessErr);
    assert_eq!(outer.to_vec(), canary, "a WRITE across the end wrote nothing, inside or out");

    let (mut net, a, b) = pair();
    // SAFETY: as above.
    let raw = unsafe { RawMemory::new(outer.as_ptr().add(PAGE), PAGE) }.unwrap();
    let mr_b = net.dev(1).reg_mr_app(b.pd, Box::new(raw), access).unwrap();
    let mr_a = net.dev(0).reg_mr(a.pd, vec![0u8; 4 * PAGE].into_boxed_slice(), access).unwrap();
    let l = Sge { addr: mr_a.addr, length: 2 * PAGE as u32, lkey: mr_a.lkey };
    assert_eq!(run(&mut net, &a, WrOpcode::RdmaWrite, l, (mr_b.addr - 1, mr_b.rkey)), WcStatus::RemAccessErr);
    assert_eq!(outer.to_vec(), canary, "a WRITE starting before the region wrote nothing");

    let (mut net, a, b) = pair();
    // SAFETY: as above.
    let raw = unsafe { RawMemory::new(outer.as_ptr().add(PAGE), PAGE) }.unwrap();
    let mr_b = net.dev(1).reg_mr_app(b.pd, Box::new(raw), access).unwrap();
    let mr_a = net.dev(0).reg_mr(a.pd, vec![0u8; 4 * PAGE].into_boxed_slice(), access).unwrap();
    let l = Sge { addr: mr_a.addr, length: PAGE as u32 + 1, lkey: mr_a.lkey };
    assert_eq!(run(&mut net, &a, WrOpcode::RdmaRead, l, (mr_b.addr, mr_b.rkey)), WcStatus::RemAccessErr);
    assert!(net.dev(0).mr(mr_a.lkey).unwrap().as_slice().iter().all(|&x| x == 0), "a READ past the end read nothing");

    // An exact fit works, and lands only in the middle page.
    let (mut net, a, b) = pair();
    // SAFETY: as above.
    let raw = unsafe { RawMemory::new(outer.as_ptr().add(PAGE), PAGE) }.unwrap();
    let mr_b = net.dev(1).reg_mr_app(b.pd, Box::new(raw), access).unwrap();
    let data = pattern(5, PAGE);
    let mr_a = net.dev(0).reg_mr(a.pd, data.clone().into_boxed_slice(), access).unwrap();
    let l = Sge { addr: mr_a.addr, length: PAGE as u32, lkey: mr_a.lkey };
    assert_eq!(run(&mut net, &a, WrOpcode::RdmaWrite, l, (mr_b.addr, mr_b.rkey)), WcStatus::Success);
    let now = outer.to_vec();
    assert_eq!(now[PAGE..2 * PAGE], data[..]);
    assert_eq!(now[..PAGE], canary[..PAGE], "the page before is untouched");
    assert_eq!(now[2 * PAGE..], canary[2 * PAGE..], "the page after is untouched");
    drop(net);
}

#[test]
fn sends_gather_from_and_scatter_into_application_memory() {
    let (mut net, a, b) = pair();
    let recv = SharedMemory::new(2 * PAGE);
    let mr_r = net.dev(1).reg_mr_app(b.pd, Box::new(recv.clone()), AccessFlags::LOCAL_WRITE).unwrap();
    let send = SharedMemory::new(2 * PAGE);
    let mr_s = net.dev(0).reg_mr_app(a.pd, Box::new(send.clone()), AccessFlags::NONE).unwrap();
    let data = pattern(7, 3000);
    send.write(500, &data).unwrap();
    let r = [Sge { addr: mr_r.addr + 10, length: 4000, lkey: mr_r.lkey }];
    net.dev(1).post_recv(b.qpn, &RecvWr { wr_id: 4, sg_list: &r }).unwrap();
    let l = Sge { addr: mr_s.addr + 500, length: 3000, lkey: mr_s.lkey };
    assert_eq!(run(&mut net, &a, WrOpcode::Send, l, (0, 0)), WcStatus::Success);
    let wc = drain_cq(&mut net, 1, b.cq);
    assert_eq!((wc[0].status, wc[0].byte_len), (WcStatus::Success, 3000));
    let mut got = vec![0u8; 3000];
    recv.read(10, &mut got).unwrap();
    assert_eq!(got, data);
    // A local SGE past the end of an application region: local protection error.
    let l = Sge { addr: mr_s.addr + 2 * PAGE as u64 - 8, length: 16, lkey: mr_s.lkey };
    assert_eq!(run(&mut net, &a, WrOpcode::Send, l, (0, 0)), WcStatus::LocProtErr);
}
