//! UD through the C ABI, as `ibv_ud_pingpong` and RDMA-CM's datagram users do it: two UD QPs
//! of one context on `lo`. A sends a datagram to B through `ibv_create_ah`; B's buffer holds
//! the 40-byte GRH area (20 zero bytes and the IPv4 header) and then the payload; B answers the
//! sender with an address handle made by `ibv_create_ah_from_wc` from that completion and GRH;
//! a PD with an address handle cannot be freed.

use core::ffi::c_int;
use core::ptr::null_mut;
use uroce_verbs::abi::*;
use uroce_verbs::ah::*;
use uroce_verbs::datapath::*;
use uroce_verbs::device::*;

const QKEY: u32 = 0x1111_1111;
const SIGNALED: u32 = 2;
const WR_SEND: c_int = 2;
// enum ibv_qp_attr_mask
const STATE: c_int = 1;
const PKEY_INDEX: c_int = 16;
const PORT: c_int = 32;
const QKEY_MASK: c_int = 64;
const SQ_PSN: c_int = 65536;

/// RESET → INIT (Q_Key) → RTR → RTS, as ud_pingpong does.
unsafe fn ud_ready(qp: *mut IbvQp, psn: u32) {
    let mut a = QpAttrC { qp_state: 1, port_num: 1, qkey: QKEY, ..Default::default() };
    assert_eq!(ibv_modify_qp(qp, &mut a, STATE | PKEY_INDEX | PORT | QKEY_MASK), 0, "INIT");
    let mut a = QpAttrC { qp_state: 2, ..Default::default() };
    assert_eq!(ibv_modify_qp(qp, &mut a, STATE), 0, "RTR");
    let mut a = QpAttrC { qp_state: 3, sq_psn: psn, ..Default::default() };
    assert_eq!(ibv_modify_qp(qp, &mut a, STATE | SQ_PSN), 0, "RTS");
}

/// The device is `lo`, its engine on kernel UDP at a port of this process's own (one setting
/// for the whole process: both tests set the same).
fn use_lo() {
    std::env::set_var("UROCE_IFACES", "lo");
    std::env::set_var("UROCE_BACKEND", "udp");
    std::env::set_var("UROCE_UDP_PORT", (40000 + std::process::id() % 10000).to_string());
}

#[test]
fn a_datagram_and_its_answer_through_an_ah_made_from_the_completion() {
    use_lo();
    // SAFETY: a verbs program's calls, on objects this test created and keeps alive.
    unsafe {
        let list = ibv_get_device_list(null_mut());
        let ctx = ibv_open_device(*list);
        assert!(!ctx.is_null());
        let mut gid = [0u8; 16];
        assert_eq!(ibv_query_gid(ctx, 1, 1, &mut gid), 0);
        let pd = ibv_alloc_pd(ctx);
        let cq = ibv_create_cq(ctx, 64, null_mut(), null_mut(), 0);
        let cap = QpCapC { max_send_wr: 8, max_recv_wr: 8, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 };
        let mut init = QpInitAttrC {
            qp_context: null_mut(),
            send_cq: cq,
            recv_cq: cq,
            srq: null_mut(),
            cap,
            qp_type: 4, // IBV_QPT_UD
            sq_sig_all: 0,
        };
        let (qa, qb) = (ibv_create_qp(pd, &mut init), ibv_create_qp(pd, &mut init));
        assert!(!qa.is_null() && !qb.is_null());
        ud_ready(qa, 1);
        ud_ready(qb, 2);
        let mut buf: Vec<u8> = (0..8192u32).map(|i| (i % 251) as u8).collect();
        buf[4096..].fill(0);
        let mr = ibv_reg_mr(pd, buf.as_mut_ptr().cast(), buf.len(), 1);
        assert!(!mr.is_null());
        let (base, lkey) = (buf.as_ptr() as u64, (*mr).lkey);
        let ops = &(*ctx).ops;
        let (post_send, post_recv, poll) = (ops.post_send.unwrap(), ops.post_recv.unwrap(), ops.poll_cq.unwrap());
        let recv = |qp: *mut IbvQp, wr_id: u64, at: u64, len: u32| {
            let mut s = SgeC { addr: base + at, length: len, lkey };
            let mut r = RecvWrC { wr_id, next: null_mut(), sg_list: &mut s, num_sge: 1 };
            let mut bad = null_mut();
            assert_eq!(post_recv(qp.cast(), (&mut r as *mut RecvWrC).cast(), &mut bad), 0);
        };
        let send = |qp: *mut IbvQp, wr_id: u64, ah: *mut IbvAh, qpn: u32, at: u64, len: u32| {
            let mut s = SgeC { addr: base + at, length: len, lkey };
            let mut w: SendWrC = core::mem::zeroed();
            (w.wr_id, w.sg_list, w.num_sge, w.opcode, w.send_flags) = (wr_id, &mut s, 1, WR_SEND, SIGNALED);
            // wr.ud: ah, remote_qpn, remote_qkey
            (w.remote_addr, w.rkey_or_compare_add) = (ah as u64, qpn as u64 | (QKEY as u64) << 32);
            let mut bad = null_mut();
            post_send(qp.cast(), (&mut w as *mut SendWrC).cast(), &mut bad)
        };
        let wait = |n: usize| {
            let mut got = Vec::new();
            let mut wc = [WcC::default(); 4];
            for _ in 0..2_000_000 {
                let k = poll(cq.cast(), 4, wc.as_mut_ptr().cast());
                got.extend_from_slice(&wc[..k as usize]);
                if got.len() >= n {
                    break;
                }
            }
            got.sort_by_key(|w| w.wr_id);
            got
        };

        // A → B, through an AH to the device's own IPv4 GID.
        let mut attr = AhAttrC { is_global: 1, port_num: 1, ..Default::default() };
        attr.grh = GlobalRoute { dgid: gid, sgid_index: 1, hop_limit: 64, ..Default::default() };
        let ah = ibv_create_ah(pd, &mut attr);
        assert!(!ah.is_null());
        recv(qb, 10, 4096, 40 + 1000);
        assert_eq!(send(qa, 1, ah, (*qb).qp_num, 0, 1000), 0);
        let got = wait(2);
        assert_eq!(got.len(), 2, "{:?}", got.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>());
        let w = got[1];
        assert_eq!((got[0].wr_id, got[0].status), (1, 0));
        assert_eq!((w.wr_id, w.status, w.byte_len, w.src_qp, w.wc_flags & 1), (10, 0, 1040, (*qa).qp_num, 1));
        assert_eq!(buf[4096..4096 + 20], [0u8; 20], "the GRH area of an IPv4 datagram starts with 20 zeros");
        assert_eq!(buf[4116] >> 4, 4, "then the IPv4 header");
        assert_eq!(buf[4096 + 40..4096 + 1040], buf[..1000]);

        // B answers the sender: an AH made from the completion and the GRH area.
        let back = ibv_create_ah_from_wc(pd, &w, buf.as_ptr().add(4096).cast(), 1);
        assert!(!back.is_null());
        let mut derived = AhAttrC::default();
        assert_eq!(ibv_init_ah_from_wc(ctx, 1, &w, buf.as_ptr().add(4096).cast(), &mut derived), 0);
        assert_eq!((derived.is_global, derived.grh.sgid_index, derived.grh.dgid), (1, 1, gid));
        assert_eq!(derived.grh.hop_limit, 64);
        recv(qa, 11, 6144, 40 + 500);
        assert_eq!(send(qb, 2, back, w.src_qp, 2000, 500), 0);
        let got = wait(2);
        assert_eq!(
            got.iter().map(|w| (w.wr_id, w.status, w.byte_len)).collect::<Vec<_>>(),
            [(2, 0, 500), (11, 0, 540)]
        );
        assert_eq!(buf[6144 + 40..6144 + 540], buf[2000..2500]);

        // A UD send needs a live AH; a PD with AHs is busy until they go.
        assert_eq!(send(qa, 3, 0x1000 as *mut IbvAh, 5, 0, 8), libc::EINVAL);
        assert_eq!(ibv_dereg_mr(mr), 0);
        assert_eq!(ibv_destroy_qp(qa), 0);
        assert_eq!(ibv_destroy_qp(qb), 0);
        assert_eq!(ibv_dealloc_pd(pd), libc::EBUSY);
        assert_eq!(ibv_destroy_ah(ah), 0);
        assert_eq!(ibv_destroy_ah(back), 0);
        assert_eq!(ibv_destroy_ah(back), libc::EINVAL);
        assert_eq!(ibv_dealloc_pd(pd), 0);
        assert_eq!(ibv_destroy_cq(cq), 0);
        assert_eq!(ibv_close_device(ctx), 0);
        ibv_free_device_list(list);
    }
}

/// A UD QP receiving from an SRQ armed at a limit: the datagram takes the SRQ below it, and
/// `IBV_EVENT_SRQ_LIMIT_REACHED` naming the SRQ arrives on `async_fd`; acknowledging it counts
/// on the SRQ; the limit reads 0 (disarmed) afterwards.
#[test]
fn an_srq_below_its_limit_raises_the_event_on_async_fd() {
    use_lo();
    use uroce_verbs::events::*;
    use uroce_verbs::srq::*;
    // SAFETY: a verbs program's calls, on objects this test created and keeps alive.
    unsafe {
        let list = ibv_get_device_list(null_mut());
        let ctx = ibv_open_device(*list);
        let mut gid = [0u8; 16];
        assert_eq!(ibv_query_gid(ctx, 1, 1, &mut gid), 0);
        let pd = ibv_alloc_pd(ctx);
        let cq = ibv_create_cq(ctx, 16, null_mut(), null_mut(), 0);
        let mut si = SrqInitAttrC { srq_context: null_mut(), attr: SrqAttrC { max_wr: 8, max_sge: 1, srq_limit: 0 } };
        let srq = ibv_create_srq(pd, &mut si);
        assert!(!srq.is_null());
        let cap = QpCapC { max_send_wr: 4, max_recv_wr: 4, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 };
        let mut init = QpInitAttrC {
            qp_context: null_mut(),
            send_cq: cq,
            recv_cq: cq,
            srq: null_mut(),
            cap,
            qp_type: 4,
            sq_sig_all: 1,
        };
        let qa = ibv_create_qp(pd, &mut init);
        init.srq = srq.cast();
        let qb = ibv_create_qp(pd, &mut init);
        assert!(!qa.is_null() && !qb.is_null());
        ud_ready(qa, 0);
        ud_ready(qb, 0);
        let mut buf = vec![0u8; 4096];
        let mr = ibv_reg_mr(pd, buf.as_mut_ptr().cast(), buf.len(), 1);
        let (base, lkey) = (buf.as_ptr() as u64, (*mr).lkey);
        let ops = &(*ctx).ops;
        let mut bad = null_mut();
        for k in 0..2u64 {
            let mut s = SgeC { addr: base + 1024 + k * 1024, length: 1024, lkey };
            let mut r = RecvWrC { wr_id: k, next: null_mut(), sg_list: &mut s, num_sge: 1 };
            assert_eq!(ops.post_srq_recv.unwrap()(srq.cast(), (&mut r as *mut RecvWrC).cast(), &mut bad), 0);
        }
        // a receive of its own on a QP that has an SRQ: EINVAL, bad_wr set
        let mut s = SgeC { addr: base, length: 8, lkey };
        let mut r = RecvWrC { wr_id: 9, next: null_mut(), sg_list: &mut s, num_sge: 1 };
        let rp = (&mut r as *mut RecvWrC).cast();
        assert_eq!(ops.post_recv.unwrap()(qb.cast(), rp, &mut bad), libc::EINVAL);
        assert_eq!(bad, rp);
        let mut a = SrqAttrC { srq_limit: 2, ..Default::default() };
        assert_eq!(ibv_modify_srq(srq, &mut a, 2 /* IBV_SRQ_LIMIT */), 0);
        let mut attr = AhAttrC { is_global: 1, port_num: 1, ..Default::default() };
        attr.grh = GlobalRoute { dgid: gid, sgid_index: 1, hop_limit: 64, ..Default::default() };
        let ah = ibv_create_ah(pd, &mut attr);
        let mut s = SgeC { addr: base, length: 100, lkey };
        let mut w: SendWrC = core::mem::zeroed();
        (w.wr_id, w.sg_list, w.num_sge, w.opcode) = (7, &mut s, 1, WR_SEND);
        (w.remote_addr, w.rkey_or_compare_add) = (ah as u64, (*qb).qp_num as u64 | (QKEY as u64) << 32);
        assert_eq!(ops.post_send.unwrap()(qa.cast(), (&mut w as *mut SendWrC).cast(), &mut bad), 0);
        let mut ev = IbvAsyncEvent { element: null_mut(), event_type: -1 };
        assert_eq!(ibv_get_async_event(ctx, &mut ev), 0);
        assert_eq!((ev.event_type, ev.element), (15 /* IBV_EVENT_SRQ_LIMIT_REACHED */, srq.cast()));
        ibv_ack_async_event(&mut ev);
        assert_eq!((*srq).events_completed, 1);
        let mut q = SrqAttrC::default();
        assert_eq!(ibv_query_srq(srq, &mut q), 0);
        assert_eq!((q.max_wr, q.max_sge, q.srq_limit), (8, 1, 0));
        assert_eq!(ibv_destroy_srq(srq), libc::EBUSY, "a QP receives from it");
        assert_eq!(ibv_close_device(ctx), 0, "closing releases the SRQ with the rest");
        ibv_free_device_list(list);
    }
}
