//! The C entry points under misuse and at their edges, called as a C program would: a NULL,
//! foreign or destroyed handle is an error code (or NULL and `errno`), never a crash; empty GID
//! slots answer as rdma-core answers them; the compat `ibv_query_port` writes only its 48
//! bytes; completion channels refuse misuse (`EINVAL`, `EBUSY`, `EAGAIN` when empty and
//! non-blocking). Runs on the loopback interface (`UROCE_IFACES=lo`), which every machine has.

use core::ffi::{c_int, CStr};
use core::ptr::null_mut;
use uroce_verbs::abi::*;
use uroce_verbs::datapath::{ibv_alloc_pd, ibv_create_cq, ibv_dealloc_pd, ibv_destroy_cq};
use uroce_verbs::device::*;
use uroce_verbs::events::*;
use uroce_verbs::stubs;

fn errno() -> c_int {
    // SAFETY: the calling thread's errno.
    unsafe { *libc::__errno_location() }
}

#[test]
fn handles_are_checked_and_edges_answer_as_rdma_core() {
    // One test function: the environment is process-wide. The engine (started by the first
    // PD) uses kernel UDP on a port of its own, away from other tests' 4791.
    std::env::set_var("UROCE_IFACES", "lo");
    std::env::set_var("UROCE_BACKEND", "udp");
    std::env::set_var("UROCE_UDP_PORT", (40000 + std::process::id() % 20000).to_string());
    // SAFETY: every call below passes either valid pointers or deliberately bad handles,
    // which is what is being tested: the library must not dereference those.
    unsafe {
        let mut n = -1;
        let list = ibv_get_device_list(&mut n);
        assert!(!list.is_null());
        assert_eq!(n, 1);
        assert!((*list.add(1)).is_null(), "NULL-terminated");
        let dev = *list;
        assert_eq!(CStr::from_ptr(ibv_get_device_name(dev)).to_str().unwrap(), "uroce_lo");
        // the same device object on every list
        let again = ibv_get_device_list(null_mut());
        assert_eq!(*again, dev);
        ibv_free_device_list(again);

        // bad handles
        let mut junk = [0u8; 1024];
        let foreign = junk.as_mut_ptr().cast::<IbvDevice>();
        assert!(ibv_open_device(null_mut()).is_null());
        assert_eq!(errno(), libc::EINVAL);
        assert!(ibv_open_device(foreign).is_null());
        assert!(ibv_get_device_name(foreign).is_null());
        assert_eq!(ibv_get_device_guid(foreign), 0);
        assert_eq!(ibv_close_device(null_mut()), libc::EINVAL);
        assert_eq!(ibv_close_device(foreign.cast()), libc::EINVAL);
        let mut attr: DeviceAttr = core::mem::zeroed();
        assert_eq!(ibv_query_device(foreign.cast(), &mut attr), libc::EINVAL);
        assert!(ibv_alloc_pd(foreign.cast()).is_null());
        assert_eq!(ibv_dealloc_pd(foreign.cast()), libc::EINVAL);

        // a real context
        let ctx = ibv_open_device(dev);
        assert!(!ctx.is_null());
        let vctx = ctx.cast::<u8>().sub(320).cast::<VerbsContext>();
        assert_eq!((*vctx).sz, 648);
        assert_eq!((*ctx).abi_compat as usize, usize::MAX);
        assert_eq!((*ctx).cmd_fd, -1);
        assert!((*ctx).async_fd >= 0);
        assert_eq!(ibv_query_device(ctx, &mut attr), 0);
        assert_eq!(attr.phys_port_cnt, 1);
        assert_eq!(attr.max_qp_rd_atom, 128);
        assert_eq!(ibv_query_device(ctx, null_mut()), libc::EINVAL);

        // query_port: the extended op fills all 56 bytes, the compat export only 48
        let mut full = [0xaau8; 64];
        let qp = (*vctx).query_port.expect("query_port op");
        assert_eq!(qp(ctx, 1, full.as_mut_ptr().cast(), 56), 0);
        let p = full.as_ptr().cast::<PortAttr>().read_unaligned();
        assert_eq!((p.state, p.link_layer, p.gid_tbl_len), (4, 2, GID_TABLE_LEN as c_int));
        assert_eq!(full[56..], [0xaa; 8], "nothing past the caller's length");
        let mut compat = [0xaau8; 64];
        assert_eq!(ibv_query_port(ctx, 1, compat.as_mut_ptr().cast()), 0);
        assert_eq!(compat[..48], full[..48]);
        assert_eq!(compat[48..], [0xaa; 16]);
        assert_eq!(ibv_query_port(ctx, 2, compat.as_mut_ptr().cast()), libc::EINVAL, "one port");
        assert_eq!(qp(ctx, 1, null_mut(), 56), libc::EINVAL);

        // GIDs: lo has 127.0.0.1 (and ::1): slot 1 is ::ffff:127.0.0.1; empty slots 0/ENODATA
        let mut gid = [0xffu8; 16];
        assert_eq!(ibv_query_gid(ctx, 1, 1, &mut gid), 0);
        assert_eq!(gid, std::net::Ipv4Addr::LOCALHOST.to_ipv6_mapped().octets());
        let last = GID_TABLE_LEN as c_int - 1;
        assert_eq!(ibv_query_gid(ctx, 1, last, &mut gid), 0);
        assert_eq!(gid, [0; 16], "an empty slot is a zero GID");
        assert_eq!(ibv_query_gid(ctx, 1, last + 1, &mut gid), -1);
        assert_eq!(ibv_query_gid(ctx, 1, -1, &mut gid), -1);
        let mut e = GidEntry::default();
        let sz = core::mem::size_of::<GidEntry>();
        assert_eq!(_ibv_query_gid_ex(ctx, 1, 1, &mut e, 0, sz), 0);
        assert_eq!((e.gid_index, e.port_num, e.gid_type), (1, 1, GID_TYPE_ROCE_V2));
        assert_eq!(_ibv_query_gid_ex(ctx, 1, last as u32, &mut e, 0, sz), libc::ENODATA);
        assert_eq!(_ibv_query_gid_ex(ctx, 1, 1, &mut e, 0, sz - 1), libc::EINVAL, "entry too small");
        assert_eq!(_ibv_query_gid_ex(ctx, 1, 1, &mut e, 1, sz), libc::EINVAL, "unknown flags");
        let mut ty = -1;
        assert_eq!(ibv_query_gid_type(ctx, 1, 0, &mut ty), 0);
        assert_eq!(ty, GID_TYPE_SYSFS_ROCE_V2);
        let mut pkey = 0u16;
        assert_eq!(ibv_query_pkey(ctx, 1, 0, &mut pkey), 0);
        assert_eq!(u16::from_be(pkey), 0xffff);
        assert_eq!(ibv_query_pkey(ctx, 1, 1, &mut pkey), libc::EINVAL);
        assert_eq!(ibv_get_pkey_index(ctx, 1, 0xffffu16.to_be()), 0);

        // the datapath ops on handles that are not QPs or CQs
        let ops = &(*ctx).ops;
        assert!(ops.poll_cq.expect("poll_cq")(null_mut(), 1, null_mut()) < 0);
        assert!(ops.poll_cq.expect("poll_cq")(junk.as_mut_ptr().cast(), 1, null_mut()) < 0);
        let mut bad = null_mut();
        let wr = 0x1234usize as *mut core::ffi::c_void;
        assert_eq!(ops.post_send.expect("post_send")(null_mut(), wr, &mut bad), libc::EINVAL);
        assert_eq!(bad, wr, "bad_wr names the first WR");
        bad = null_mut();
        assert_eq!(ops.post_recv.expect("post_recv")(junk.as_mut_ptr().cast(), wr, &mut bad), libc::EINVAL);
        assert_eq!(bad, wr);
        assert!(stubs::ibv_import_device().is_null());
        assert_eq!(errno(), libc::EOPNOTSUPP);
        // SRQs: misuse is EINVAL, through the inline verb too
        assert!(uroce_verbs::srq::ibv_create_srq(null_mut(), null_mut()).is_null());
        assert_eq!(errno(), libc::EINVAL);
        assert_eq!(uroce_verbs::srq::ibv_destroy_srq(junk.as_mut_ptr().cast()), libc::EINVAL);
        assert_eq!(uroce_verbs::srq::ibv_query_srq(null_mut(), null_mut()), libc::EINVAL);
        bad = null_mut();
        assert_eq!(ops.post_srq_recv.expect("post_srq_recv")(junk.as_mut_ptr().cast(), wr, &mut bad), libc::EINVAL);
        assert_eq!(bad, wr);

        // completion channels: misuse is EINVAL, a used channel EBUSY, an empty non-blocking
        // channel EAGAIN; req_notify_cq needs a channel
        assert!(ibv_create_comp_channel(null_mut()).is_null());
        assert_eq!(errno(), libc::EINVAL);
        assert_eq!(ibv_destroy_comp_channel(junk.as_mut_ptr().cast()), libc::EINVAL);
        let (mut got_cq, mut got_ctx) = (null_mut(), null_mut());
        assert_eq!(ibv_get_cq_event(null_mut(), &mut got_cq, &mut got_ctx), -1);
        assert_eq!(errno(), libc::EINVAL);
        let ch = ibv_create_comp_channel(ctx);
        assert!(!ch.is_null());
        assert_eq!(((*ch).context, (*ch).refcnt), (ctx, 0));
        assert_eq!(ibv_get_cq_event(ch, null_mut(), &mut got_ctx), -1, "NULL out-pointer");
        let cq = ibv_create_cq(ctx, 16, 0x5eed as *mut _, ch, 0);
        assert!(!cq.is_null());
        assert_eq!(((*cq).channel, (*ch).refcnt), (ch, 1));
        assert_eq!(ibv_destroy_comp_channel(ch), libc::EBUSY, "a CQ uses it");
        let plain = ibv_create_cq(ctx, 16, null_mut(), null_mut(), 0);
        assert!(!plain.is_null());
        let arm = ops.req_notify_cq.expect("req_notify_cq");
        assert_eq!(arm(plain.cast(), 0), libc::EINVAL, "no channel to notify");
        assert_eq!(arm(junk.as_mut_ptr().cast(), 0), libc::EINVAL);
        assert_eq!(arm(cq.cast(), 0), 0);
        assert_eq!(arm(cq.cast(), 1), 0);
        let fl = libc::fcntl((*ch).fd, libc::F_GETFL);
        assert_eq!(libc::fcntl((*ch).fd, libc::F_SETFL, fl | libc::O_NONBLOCK), 0);
        assert_eq!(ibv_get_cq_event(ch, &mut got_cq, &mut got_ctx), -1, "nothing queued");
        assert_eq!(errno(), libc::EAGAIN);
        ibv_ack_cq_events(null_mut(), 1);
        ibv_ack_cq_events(junk.as_mut_ptr().cast(), 1);
        assert_eq!(ibv_destroy_cq(plain), 0);
        assert_eq!(ibv_destroy_cq(cq), 0, "no event handed out: nothing to wait for");
        assert_eq!((*ch).refcnt, 0);
        assert_eq!(ibv_destroy_comp_channel(ch), 0);
        assert_eq!(ibv_destroy_comp_channel(ch), libc::EINVAL, "a channel destroyed twice");
        let afl = libc::fcntl((*ctx).async_fd, libc::F_GETFL);
        assert_eq!(libc::fcntl((*ctx).async_fd, libc::F_SETFL, afl | libc::O_NONBLOCK), 0);
        let mut ev = [0u8; 16];
        assert_eq!(ibv_get_async_event(ctx, ev.as_mut_ptr().cast()), -1, "no async event");
        assert_eq!(errno(), libc::EAGAIN);
        assert_eq!(ibv_get_async_event(junk.as_mut_ptr().cast(), ev.as_mut_ptr().cast()), -1);
        assert_eq!(errno(), libc::EINVAL);

        // PDs, then destroyed handles
        let pd = ibv_alloc_pd(ctx);
        assert!(!pd.is_null());
        assert_eq!((*pd).context, ctx);
        assert_eq!(ibv_dealloc_pd(pd), 0);
        assert_eq!(ibv_dealloc_pd(pd), libc::EINVAL, "a PD freed twice");
        assert_eq!(ibv_close_device(ctx), 0);
        assert_eq!(ibv_close_device(ctx), libc::EINVAL, "a context closed twice");
        assert_eq!(ibv_query_device(ctx, &mut attr), libc::EINVAL);
        assert_eq!(ibv_query_gid(ctx, 1, 0, &mut gid), -1);
        ibv_free_device_list(list);
        ibv_free_device_list(null_mut());
    }
}
