//! The extended QP through the C ABI, as a verbs program uses it (`ibv_create_qp_ex` through
//! the context's op, `ibv_qp_to_qp_ex`, the `ibv_wr_*` pointers): two extended RC QPs of one
//! context on `lo`, connected to each other. A batch of WRITEs (SGE and inline) lands byte
//! for byte with one completion per signaled WR carrying the `wr_id` set before its call; a
//! batch is posted all or none (an operation the QP was not created for, a set before any
//! opcode, more WRs than the send queue holds: an errno from `ibv_wr_complete` and nothing on
//! the wire); `ibv_wr_abort` drops a batch; creation refuses what uroce lacks; a foreign
//! handle is ignored, never dereferenced. The QPs' CQ is an extended one (`ibv_create_cq_ex`),
//! polled with `ibv_start_poll`/`ibv_next_poll`/`ibv_end_poll` and `ibv_wc_read_*`.

use core::ffi::c_void;
use core::ptr::null_mut;
use uroce_verbs::abi::*;
use uroce_verbs::datapath::*;
use uroce_verbs::device::*;
use uroce_verbs::qp_ex::*;

mod common;
use common::*;

const INIT_ATTR_PD: u32 = 1;
const INIT_ATTR_SEND_OPS_FLAGS: u32 = 1 << 6;
const WITH_BIND_MW: u64 = 1 << 8;

fn init_ex(pd: *mut IbvPd, cq: *mut IbvCq, depth: u32, send_ops: u64) -> QpInitAttrExC {
    // SAFETY: pointers and integers: all-zero is valid.
    let mut a: QpInitAttrExC = unsafe { core::mem::zeroed() };
    (a.send_cq, a.recv_cq, a.qp_type, a.pd) = (cq, cq, 2, pd);
    a.cap = QpCapC { max_send_wr: depth, max_recv_wr: depth, max_send_sge: 2, max_recv_sge: 1, max_inline_data: 64 };
    a.comp_mask = INIT_ATTR_PD | INIT_ATTR_SEND_OPS_FLAGS;
    a.send_ops_flags = send_ops;
    a
}

#[test]
fn extended_qps_post_batches_all_or_none_and_an_extended_cq_polls_them() {
    std::env::set_var("UROCE_IFACES", "lo");
    std::env::set_var("UROCE_BACKEND", "udp");
    std::env::set_var("UROCE_UDP_PORT", (50000 + std::process::id() % 10000).to_string());
    // SAFETY: a verbs program's calls on objects this test created and keeps alive; the
    // foreign handle at the end is what is being tested (the library must not dereference it).
    unsafe {
        let list = ibv_get_device_list(null_mut());
        let ctx = ibv_open_device(*list);
        assert!(!ctx.is_null());
        let vctx = ctx.cast::<u8>().sub(320).cast::<VerbsContext>();
        let create_qp_ex = (*vctx).create_qp_ex.expect("the context's create_qp_ex op");
        let mut gid = [0u8; 16];
        assert_eq!(ibv_query_gid(ctx, 1, 1, &mut gid), 0);
        let pd = ibv_alloc_pd(ctx);
        // The extended CQ: what creation refuses, then one with the standard fields.
        let create_cq_ex = (*vctx).create_cq_ex.expect("the context's create_cq_ex op");
        let mut ca: CqInitAttrExC = core::mem::zeroed();
        (ca.cqe, ca.wc_flags) = (64, 1 << 7 /* IBV_WC_EX_WITH_COMPLETION_TIMESTAMP */);
        assert!(create_cq_ex(ctx, &mut ca).is_null());
        assert_eq!(errno(), libc::EOPNOTSUPP, "timestamps");
        (ca.wc_flags, ca.comp_vector) = (0x7f, 1);
        assert!(create_cq_ex(ctx, &mut ca).is_null());
        assert_eq!(errno(), libc::EINVAL, "one completion vector");
        ca.comp_vector = 0;
        let cq = create_cq_ex(ctx, &mut ca);
        assert!(!pd.is_null() && !cq.is_null());
        let cx = &*cq.cast::<u8>().add(size_of::<IbvCq>()).cast::<CqExTail>();
        let c = cq.cast::<c_void>();
        let (start_poll, next_poll, end_poll) = (cx.start_poll.unwrap(), cx.next_poll.unwrap(), cx.end_poll.unwrap());
        let (read_opcode, read_qp_num) = (cx.read_opcode.unwrap(), cx.read_qp_num.unwrap());
        assert_eq!(start_poll(c, null_mut()), libc::ENOENT, "empty");

        // What creation refuses.
        let mut a = init_ex(pd, cq, 4, WITH_RDMA_WRITE | WITH_BIND_MW);
        assert!(create_qp_ex(ctx, &mut a).is_null());
        assert_eq!(errno(), libc::EOPNOTSUPP, "memory windows");
        let mut a = init_ex(pd, cq, 4, WITH_RDMA_WRITE);
        a.comp_mask = INIT_ATTR_SEND_OPS_FLAGS;
        assert!(create_qp_ex(ctx, &mut a).is_null());
        assert_eq!(errno(), libc::EINVAL, "no PD");
        assert!(create_qp_ex(ctx, null_mut()).is_null());

        // A: WRITE and SEND only, 4 WRs deep; B: a plain QP (not extended).
        let mut a = init_ex(pd, cq, 4, WITH_RDMA_WRITE | WITH_SEND);
        let qa = create_qp_ex(ctx, &mut a);
        assert!(!qa.is_null());
        assert_eq!(a.cap.max_send_wr, 4);
        let mut b = init_ex(pd, cq, 4, 0);
        b.comp_mask = INIT_ATTR_PD;
        let qb = create_qp_ex(ctx, &mut b);
        assert!(!qb.is_null());
        assert!(ibv_qp_to_qp_ex(qb).is_null(), "created without send_ops_flags");
        let qx = ibv_qp_to_qp_ex(qa).cast::<u8>();
        assert_eq!(qx, qa.cast::<u8>(), "the ibv_qp_ex begins with the ibv_qp");
        let x = &mut *qx.add(size_of::<IbvQp>()).cast::<QpExTail>();
        connect(qa, (*qb).qp_num, 7, 7, gid);
        connect(qb, (*qa).qp_num, 7, 7, gid);
        let q = qx.cast::<c_void>();

        let mut buf: Vec<u8> = (0..16384u32).map(|i| (i * 7 % 251) as u8).collect();
        buf[8192..].fill(0);
        let mr = ibv_reg_mr(pd, buf.as_mut_ptr().cast(), buf.len(), ALL_ACCESS);
        assert!(!mr.is_null());
        let (base, lkey, rkey) = (buf.as_ptr() as u64, (*mr).lkey, (*mr).rkey);
        // Every completion until `n` have come (or a million empty polls), through the
        // extended CQ's polling functions: their wr_ids (each a successful WRITE of A's).
        let qpn_a = (*qa).qp_num;
        let drain = |n: usize| {
            let mut ids = Vec::new();
            for _ in 0..1_000_000 {
                let mut attr = 0u32;
                let mut r = start_poll(c, &mut attr);
                if r == 0 {
                    while r == 0 {
                        assert_eq!(cx.status, 0, "wr_id {}", cx.wr_id);
                        assert_eq!((read_opcode(c), read_qp_num(c)), (1 /* IBV_WC_RDMA_WRITE */, qpn_a));
                        ids.push(cx.wr_id);
                        r = next_poll(c);
                    }
                    assert_eq!(r, libc::ENOENT);
                    end_poll(c);
                }
                if ids.len() >= n {
                    break;
                }
            }
            ids
        };
        let (start, complete, abort) = (x.wr_start.unwrap(), x.wr_complete.unwrap(), x.wr_abort.unwrap());
        let (write, sge, inline) = (x.wr_rdma_write.unwrap(), x.wr_set_sge.unwrap(), x.wr_set_inline_data.unwrap());
        let wr = |x: &mut QpExTail, id: u64, flags: u32, to: u64| {
            (x.wr_id, x.wr_flags) = (id, flags);
            write(q, rkey, base + to);
        };

        // A batch of three WRITEs: an SGE (signaled), two SGEs' worth inline (unsignaled), an
        // SGE (signaled). The inline source is changed right after the call: it was copied.
        let mut staged = *b"inline bytes, copied when set!";
        start(q);
        wr(x, 1, SIGNALED, 8192);
        sge(q, lkey, base, 3000);
        wr(x, 2, 0, 12000);
        inline(q, staged.as_ptr().cast(), staged.len());
        staged.fill(b'X');
        wr(x, 3, SIGNALED, 13000);
        sge(q, lkey, base + 4000, 100);
        assert_eq!(complete(q), 0);
        assert_eq!(drain(2), vec![1, 3], "the signaled WRs complete, with the wr_ids set before them");
        assert_eq!(buf[8192..11192], buf[..3000]);
        assert_eq!(&buf[12000..12030], b"inline bytes, copied when set!");
        assert_eq!(buf[13000..13100], buf[4000..4100]);

        // All or none: a READ (not among A's operations) after a good WRITE fails the batch,
        // and neither goes out; the next batch's one WRITE is the only completion.
        let read = x.wr_rdma_read.unwrap();
        start(q);
        wr(x, 10, SIGNALED, 14000);
        sge(q, lkey, base, 8);
        (x.wr_id, x.wr_flags) = (11, SIGNALED);
        read(q, rkey, base + 14000);
        sge(q, lkey, base, 8);
        assert_eq!(complete(q), libc::EINVAL);
        // A set before any opcode.
        start(q);
        sge(q, lkey, base, 8);
        assert_eq!(complete(q), libc::EINVAL);
        // More WRs than the send queue holds (4).
        start(q);
        for i in 0..5 {
            wr(x, 20 + i, SIGNALED, 14000);
            sge(q, lkey, base, 8);
        }
        assert_ne!(complete(q), 0, "five WRs in a queue of four");
        // Aborted, then completed without a start.
        start(q);
        wr(x, 30, SIGNALED, 14000);
        sge(q, lkey, base, 8);
        abort(q);
        assert_eq!(complete(q), libc::EINVAL);
        start(q);
        wr(x, 40, SIGNALED, 14500);
        sge(q, lkey, base + 500, 64);
        assert_eq!(complete(q), 0);
        assert_eq!(drain(1), vec![40], "nothing of the failed or aborted batches went out");
        assert_eq!(buf[14500..14564], buf[500..564]);
        assert_eq!(buf[14000..14008], [0; 8]);
        // Four fit.
        start(q);
        for i in 0..4 {
            wr(x, 50 + i, SIGNALED, 15000 + 16 * i);
            sge(q, lkey, base + 16 * i, 16);
        }
        assert_eq!(complete(q), 0);
        assert_eq!(drain(4), vec![50, 51, 52, 53]);
        assert_eq!(buf[15000..15064], buf[..64]);

        // A foreign handle through the same pointers: ignored, and EINVAL from wr_complete.
        let mut junk = [0u8; 512];
        let j = junk.as_mut_ptr().cast::<c_void>();
        start(j);
        write(j, 1, 2);
        sge(j, 1, 2, 3);
        assert_eq!(complete(j), libc::EINVAL);
        assert!(junk.iter().all(|&b| b == 0), "never written");
        assert!(ibv_qp_to_qp_ex(j.cast()).is_null());
        assert_eq!(start_poll(j, null_mut()), libc::EINVAL);
        assert_eq!(read_qp_num(j), 0);

        assert_eq!(ibv_destroy_qp(qa), 0);
        assert_eq!(ibv_destroy_qp(qb), 0);
        assert_eq!(ibv_dereg_mr(mr), 0);
        assert_eq!(ibv_destroy_cq(cq), 0);
        assert_eq!(ibv_dealloc_pd(pd), 0);
        assert_eq!(ibv_close_device(ctx), 0);
        ibv_free_device_list(list);
    }
}
