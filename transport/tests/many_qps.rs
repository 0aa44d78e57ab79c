//! 10,000 connected RC QP pairs between two engines: WRITEs spread round-robin over all of
//! them arrive byte for byte and advance every QP's PSNs; timers cost O(1) per timer that
//! fires, never a scan over the QPs.

use core::time::Duration;
use uroce_transport::sim::many::ManyQps;
use uroce_transport::*;

const N: usize = 10_000;

#[test]
fn ten_thousand_qp_pairs_carry_round_robin_writes() {
    let size = 3000; // three packets at MTU 1024
    let mut m = ManyQps::new(N, Mtu::Mtu1024, size, 4).expect("10,000 QP pairs");
    assert_eq!(m.qa.len(), N);
    m.run(size, 2 * N as u64, 256);
    assert_eq!(m.done, 2 * N as u64);
    let want: Vec<u8> = (0..size).map(|i| i as u8).collect();
    assert_eq!(m.b.mr(m.dst.lkey).unwrap().as_slice(), &want[..], "the data, byte for byte");
    // Each QP carried exactly two messages of three packets: its PSNs moved by six, both ways.
    for (i, (&qa, &qb)) in m.qa.iter().zip(&m.qb).enumerate() {
        let (pa, _) = m.psns[i];
        assert_eq!(m.a.query_qp(qa).unwrap().sq_psn, (pa + 6) & 0xff_ffff, "QP pair {i}: A's next PSN");
        assert_eq!(m.b.query_qp(qb).unwrap().rq_psn, (pa + 6) & 0xff_ffff, "QP pair {i}: B's expected PSN");
    }
    let c = m.a.counters();
    assert_eq!(c.sent_pkts, 6 * N as u64, "no retransmission");
    assert_eq!(m.b.counters().rcvd_pkts, 6 * N as u64);
}

#[test]
fn timers_fire_without_scanning_the_qps() {
    let mut m = ManyQps::new(N, Mtu::Mtu1024, 64, 4).expect("10,000 QP pairs");
    let s = [Sge { addr: m.src.addr, length: 64, lkey: m.src.lkey }];
    let mut buf = vec![0u8; m.a.max_frame_len()];
    // One WRITE on every QP, the i-th sent at i µs and never acknowledged (B sees nothing):
    // 10,000 local ACK timers, the i-th due at i µs + 67.1 ms (timeout 14).
    for (i, &q) in m.qa.iter().enumerate() {
        let wr = SendWr {
            wr_id: i as u64,
            opcode: WrOpcode::RdmaWrite,
            sg_list: &s,
            send_flags: SendFlags::SIGNALED,
            remote_addr: m.dst.addr,
            rkey: m.dst.rkey,
            ..Default::default()
        };
        m.a.post_send(q, &wr).unwrap();
        let now = Instant::from_nanos(i as u64 * 1000);
        assert!(m.a.poll_transmit(now, &mut buf).is_some());
    }
    assert_eq!(m.a.counters().sent_pkts, N as u64);
    assert!(m.a.timer_queue_len() <= N, "one entry per running timer: {}", m.a.timer_queue_len());
    let rto = Duration::from_nanos(4096 << 14);
    assert_eq!(m.a.poll_timeout(), Some(Instant::ZERO + rto), "the earliest of 10,000 deadlines, exactly");

    // Five microseconds after the first deadline: QPs 0..=5 time out, and the queue looks at
    // those six entries and the one after them — not at 10,000 QPs.
    let before = *m.a.counters();
    let now = Instant::ZERO + rto + Duration::from_micros(5);
    m.a.handle_timeout(now);
    let d = m.a.counters().delta(&before);
    assert_eq!(d.local_ack_timeout_err, 6);
    assert!(d.timer_queue_checks <= 8, "{} queue entries examined for 6 timers", d.timer_queue_checks);
    // The six retransmit (Go-Back-N from their one packet).
    let mut sent = 0;
    while m.a.poll_transmit(now, &mut buf).is_some() {
        sent += 1;
    }
    assert_eq!(sent, 6);
    // Nothing else is due until the next QP's deadline; asking costs one look.
    let before = *m.a.counters();
    m.a.handle_timeout(now);
    assert_eq!(m.a.poll_timeout(), Some(Instant::ZERO + rto + Duration::from_micros(6)));
    assert!(m.a.counters().delta(&before).timer_queue_checks <= 2);
}
