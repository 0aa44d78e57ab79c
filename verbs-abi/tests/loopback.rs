//! Loopback through the C ABI, as a verbs program does it (rdma-core's own tests connect a
//! process's QPs to each other): two RC QPs of one context on `lo`, each connected to the
//! other's QPN at the device's own IPv4-mapped GID. The engine receives their frames itself
//! (nothing goes out), an RDMA WRITE lands in the program's own buffer, a solicited SEND with
//! immediate wakes a completion channel, and a WRITE with a wrong rkey fails both QPs with an
//! `IBV_EVENT_QP_FATAL` each on `async_fd`. And two contexts share the device's engine:
//! closing one releases everything it left there.

use core::ptr::null_mut;
use uroce_verbs::abi::*;
use uroce_verbs::datapath::*;
use uroce_verbs::device::*;
use uroce_verbs::events::*;

mod common;
use common::*;

/// The device is `lo`, its engine on kernel UDP at a port of this process's own (one setting
/// for the whole process: both tests set the same).
fn use_lo() {
    std::env::set_var("UROCE_IFACES", "lo");
    std::env::set_var("UROCE_BACKEND", "udp");
    std::env::set_var("UROCE_UDP_PORT", (30000 + std::process::id() % 10000).to_string());
}

/// An RC QP's init attributes on `cq`: `depth` WRs each way, one SGE, `inline` bytes inline.
fn rc_init(cq: *mut IbvCq, depth: u32, inline: u32) -> QpInitAttrC {
    QpInitAttrC {
        qp_context: null_mut(),
        send_cq: cq,
        recv_cq: cq,
        srq: null_mut(),
        cap: QpCapC {
            max_send_wr: depth,
            max_recv_wr: depth,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: inline,
        },
        qp_type: 2,
        sq_sig_all: 0,
    }
}

#[test]
fn two_qps_of_one_context_talk_over_its_own_gid() {
    use_lo();
    // SAFETY: a verbs program's calls, on objects this test created and keeps alive.
    unsafe {
        let list = ibv_get_device_list(null_mut());
        let ctx = ibv_open_device(*list);
        assert!(!ctx.is_null());
        let mut gid = [0u8; 16];
        assert_eq!(ibv_query_gid(ctx, 1, 1, &mut gid), 0);
        let pd = ibv_alloc_pd(ctx);
        let ch = ibv_create_comp_channel(ctx);
        let cq = ibv_create_cq(ctx, 64, null_mut(), ch, 0);
        assert!(!pd.is_null() && !ch.is_null() && !cq.is_null());
        let mut init = rc_init(cq, 16, 0);
        let (qa, qb) = (ibv_create_qp(pd, &mut init), ibv_create_qp(pd, &mut init));
        assert!(!qa.is_null() && !qb.is_null());
        connect(qa, (*qb).qp_num, 100, 200, gid);
        connect(qb, (*qa).qp_num, 200, 100, gid);

        let mut buf: Vec<u8> = (0..16384u32).map(|i| (i % 253) as u8).collect();
        buf[8192..].fill(0);
        let mr = ibv_reg_mr(pd, buf.as_mut_ptr().cast(), buf.len(), ALL_ACCESS);
        assert!(!mr.is_null());
        let (base, lkey, rkey) = (buf.as_ptr() as u64, (*mr).lkey, (*mr).rkey);
        let ops = &(*ctx).ops;
        let (post_send, post_recv, poll) = (ops.post_send.unwrap(), ops.post_recv.unwrap(), ops.poll_cq.unwrap());
        let mut wc = [WcC::default(); 4];
        let mut bad = null_mut();
        // A signaled RDMA WRITE from `qp`; polls until `cq` has a completion: (count, first).
        let write = |qp: *mut IbvQp, wr_id, mut s: SgeC, remote_addr, rkey: u32| {
            let mut w: SendWrC = core::mem::zeroed();
            (w.wr_id, w.sg_list, w.num_sge, w.opcode, w.send_flags) = (wr_id, &mut s, 1, WR_RDMA_WRITE, SIGNALED);
            (w.remote_addr, w.rkey_or_compare_add) = (remote_addr, rkey as u64);
            let mut bad = null_mut();
            assert_eq!(post_send(qp.cast(), (&mut w as *mut SendWrC).cast(), &mut bad), 0);
            let mut out = [WcC::default(); 4];
            for _ in 0..1_000_000 {
                let n = poll(cq.cast(), 4, out.as_mut_ptr().cast());
                if n != 0 {
                    return (n, out[0]);
                }
            }
            (0, out[0])
        };

        // RDMA WRITE of 3000 bytes, A -> B, in the same buffer (offset 0 -> 8192).
        let (n, w) = write(qa, 1, SgeC { addr: base, length: 3000, lkey }, base + 8192, rkey);
        assert_eq!((n, w.wr_id, w.status, w.opcode), (1, 1, 0, 1 /* IBV_WC_RDMA_WRITE */));
        assert_eq!(buf[8192..11192], buf[..3000], "the WRITE landed in the program's own memory");

        // A solicited SEND with immediate, B -> A, while the CQ is armed for solicited events.
        let mut rs = SgeC { addr: base + 12288, length: 4096, lkey };
        let mut r = RecvWrC { wr_id: 20, next: null_mut(), sg_list: &mut rs, num_sge: 1 };
        assert_eq!(post_recv(qa.cast(), (&mut r as *mut RecvWrC).cast(), &mut bad), 0);
        assert_eq!(ops.req_notify_cq.unwrap()(cq.cast(), 1), 0);
        let mut s = SgeC { addr: base + 100, length: 1000, lkey };
        let mut w: SendWrC = core::mem::zeroed();
        (w.wr_id, w.sg_list, w.num_sge, w.opcode) = (2, &mut s, 1, WR_SEND_WITH_IMM);
        (w.send_flags, w.imm_data) = (SIGNALED | SOLICITED, 0x1234_5678u32.to_be());
        assert_eq!(post_send(qb.cast(), (&mut w as *mut SendWrC).cast(), &mut bad), 0);
        let (mut ev_cq, mut ev_ctx) = (null_mut(), null_mut());
        assert_eq!(ibv_get_cq_event(ch, &mut ev_cq, &mut ev_ctx), 0, "the solicited SEND raises an event");
        assert_eq!(ev_cq, cq);
        ibv_ack_cq_events(cq, 1);
        let mut got = Vec::new();
        for _ in 0..1_000_000 {
            let n = poll(cq.cast(), 4, wc.as_mut_ptr().cast());
            got.extend_from_slice(&wc[..n as usize]);
            if got.len() >= 2 {
                break;
            }
        }
        got.sort_by_key(|w| w.wr_id);
        assert_eq!(got.len(), 2);
        assert_eq!((got[0].wr_id, got[0].status, got[0].opcode), (2, 0, 0 /* IBV_WC_SEND */));
        assert_eq!((got[1].wr_id, got[1].status, got[1].opcode), (20, 0, 128 /* IBV_WC_RECV */));
        assert_eq!((got[1].byte_len, u32::from_be(got[1].imm_data), got[1].src_qp), (1000, 0x1234_5678, (*qb).qp_num));
        assert_eq!(buf[12288..13288], buf[100..1100]);

        // A WRITE with a wrong rkey: B's responder NAKs (remote access) and both QPs enter the
        // error state; A's WRITE completes with IBV_WC_REM_ACCESS_ERR, and each QP raises
        // IBV_EVENT_QP_FATAL on the context's async_fd (as rxe_qp_error does).
        let (n, w) = write(qa, 5, SgeC { addr: base, length: 64, lkey }, base + 8192, rkey ^ 0x5a5a);
        assert_eq!((n, w.wr_id, w.status), (1, 5, 10 /* IBV_WC_REM_ACCESS_ERR */));
        let mut fatal = Vec::new();
        for _ in 0..2 {
            let mut ev = IbvAsyncEvent { element: null_mut(), event_type: -1 };
            assert_eq!(ibv_get_async_event(ctx, &mut ev), 0);
            assert_eq!(ev.event_type, 1, "IBV_EVENT_QP_FATAL");
            fatal.push(ev.element as usize);
            ibv_ack_async_event(&mut ev);
        }
        fatal.sort();
        let mut want = vec![qa as usize, qb as usize];
        want.sort();
        assert_eq!(fatal, want, "one QP_FATAL for each QP");
        assert_eq!(((*qa).events_completed, (*qb).events_completed), (1, 1), "acknowledged");
        let fl = libc::fcntl((*ctx).async_fd, libc::F_GETFL);
        assert_eq!(libc::fcntl((*ctx).async_fd, libc::F_SETFL, fl | libc::O_NONBLOCK), 0);
        let mut ev = IbvAsyncEvent { element: null_mut(), event_type: -1 };
        assert_eq!(ibv_get_async_event(ctx, &mut ev), -1, "no third event");

        assert_eq!(ibv_destroy_qp(qa), 0);
        assert_eq!(ibv_destroy_qp(qb), 0);
        assert_eq!(ibv_dereg_mr(mr), 0);
        assert_eq!(ibv_destroy_cq(cq), 0, "its one event was acknowledged");
        assert_eq!(ibv_destroy_comp_channel(ch), 0);
        assert_eq!(ibv_dealloc_pd(pd), 0);
        assert_eq!(ibv_close_device(ctx), 0);
        ibv_free_device_list(list);
    }
}

/// Two contexts on one device share its engine; closing one without destroying anything
/// releases what it left (its MR above all: the program may free that memory next) while the
/// other goes on.
#[test]
fn closing_a_context_releases_what_it_left_in_the_shared_engine() {
    use_lo();
    // SAFETY: a verbs program's calls on objects this test created; the stale handles at the
    // end are what is being tested (the library must refuse them, not use them).
    unsafe {
        let list = ibv_get_device_list(null_mut());
        let (c1, c2) = (ibv_open_device(*list), ibv_open_device(*list));
        assert!(!c1.is_null() && !c2.is_null());
        let pd = ibv_alloc_pd(c1);
        let keep = ibv_alloc_pd(c2);
        let ch = ibv_create_comp_channel(c1);
        let cq = ibv_create_cq(c1, 16, null_mut(), ch, 0);
        let mut init = rc_init(cq, 4, 16);
        let qp = ibv_create_qp(pd, &mut init);
        let mut buf = vec![0u8; 4096];
        let mr = ibv_reg_mr(pd, buf.as_mut_ptr().cast(), buf.len(), ALL_ACCESS);
        assert!(!pd.is_null() && !keep.is_null() && !cq.is_null() && !qp.is_null() && !mr.is_null());
        let lkey = (*mr).lkey;
        assert!(engine_has_mr(c2, lkey), "one engine: the other context sees the MR");
        assert_eq!(ibv_close_device(c1), 0, "closing with everything still in place");
        assert!(!engine_has_mr(c2, lkey), "the MR went with its context");
        drop(buf); // the program's memory may go now
        assert_eq!(ibv_destroy_qp(qp), libc::EINVAL, "the QP is gone too");
        assert_eq!(ibv_dereg_mr(mr), libc::EINVAL);
        assert_eq!(ibv_destroy_cq(cq), libc::EINVAL);
        assert_eq!(ibv_dealloc_pd(pd), libc::EINVAL);
        assert_eq!(ibv_destroy_comp_channel(ch), libc::EINVAL);
        assert_eq!(ibv_dealloc_pd(keep), 0, "the other context's objects are untouched");
        assert_eq!(ibv_close_device(c2), 0);
        ibv_free_device_list(list);
    }
}
