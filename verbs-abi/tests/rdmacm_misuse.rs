//! The RDMA-CM entry points under misuse, called as a C program would: a NULL, foreign or
//! destroyed ID or channel, or a call in the wrong state, is -1 with `errno` (`EINVAL`,
//! `EADDRINUSE`, `EAGAIN`), never a crash and never an effect. Runs on the loopback interface
//! (`UROCE_IFACES=lo`) with kernel UDP on a port of its own.

use core::ffi::c_int;
use core::ptr::null_mut;
use uroce_verbs::abi::QpAttrC;
use uroce_verbs::rdmacm::abi::*;
use uroce_verbs::rdmacm::calls::*;
use uroce_verbs::rdmacm::ep::*;

fn errno() -> c_int {
    // SAFETY: the calling thread's errno.
    unsafe { *libc::__errno_location() }
}

/// -1 and this errno.
#[track_caller]
fn fails(r: c_int, e: c_int) {
    assert_eq!((r, errno()), (-1, e));
}

fn loopback(port: u16) -> libc::sockaddr_in {
    // SAFETY: all-zero is a valid sockaddr_in.
    let mut a: libc::sockaddr_in = unsafe { core::mem::zeroed() };
    a.sin_family = libc::AF_INET as libc::sa_family_t;
    a.sin_port = port.to_be();
    a.sin_addr.s_addr = u32::from(std::net::Ipv4Addr::LOCALHOST).to_be();
    a
}

#[test]
fn rdma_cm_calls_refuse_bad_handles_and_wrong_states() {
    std::env::set_var("UROCE_IFACES", "lo");
    std::env::set_var("UROCE_BACKEND", "udp");
    std::env::set_var("UROCE_UDP_PORT", (40000 + std::process::id() % 20000).to_string());
    // SAFETY: every call passes valid pointers or deliberately bad handles, which is what is
    // being tested: the library must look handles up, not dereference them.
    unsafe {
        let mut junk = [0u64; 128];
        let foreign = junk.as_mut_ptr().cast::<RdmaCmIdC>();
        let bogus_ch = junk.as_mut_ptr().cast::<RdmaEventChannelC>();
        let mut out = null_mut();
        let mut attr = QpAttrC::default();
        let mut mask = 0;
        for id in [null_mut(), foreign] {
            fails(uroce_rdma_destroy_id(id), libc::EINVAL);
            fails(uroce_rdma_resolve_route(id, 100), libc::EINVAL);
            fails(uroce_rdma_listen(id, 1), libc::EINVAL);
            fails(uroce_rdma_connect(id, null_mut()), libc::EINVAL);
            fails(uroce_rdma_accept(id, null_mut()), libc::EINVAL);
            fails(uroce_rdma_disconnect(id), libc::EINVAL);
            fails(uroce_rdma_get_request(id, &mut out), libc::EINVAL);
            fails(uroce_rdma_init_qp_attr(id, &mut attr, &mut mask), libc::EINVAL);
            fails(uroce_rdma_establish(id), libc::EINVAL);
            fails(uroce_rdma_migrate_id(id, null_mut()), libc::EINVAL);
            uroce_rdma_destroy_qp(id);
            uroce_rdma_destroy_ep(id);
        }
        fails(uroce_rdma_create_ep(null_mut(), null_mut(), null_mut(), null_mut()), libc::EINVAL);
        fails(uroce_rdma_create_id(bogus_ch, &mut out, null_mut(), RDMA_PS_TCP), libc::EINVAL);
        fails(uroce_rdma_create_id(null_mut(), &mut out, null_mut(), 0x4242), libc::EINVAL);
        fails(uroce_rdma_get_cm_event(bogus_ch, &mut null_mut()), libc::EINVAL);

        // A synchronous ID cannot become synchronous again.
        let mut sync = null_mut();
        assert_eq!(uroce_rdma_create_id(null_mut(), &mut sync, null_mut(), RDMA_PS_TCP), 0);
        fails(uroce_rdma_migrate_id(sync, null_mut()), libc::EINVAL);
        assert_eq!(uroce_rdma_destroy_id(sync), 0);

        // An ID on a channel, through the states.
        let ch = uroce_rdma_create_event_channel();
        assert!(!ch.is_null());
        let mut id = null_mut();
        assert_eq!(uroce_rdma_create_id(ch, &mut id, null_mut(), RDMA_PS_TCP), 0);
        fails(uroce_rdma_get_request(id, &mut out), libc::EINVAL); // not synchronous
        fails(uroce_rdma_connect(id, null_mut()), libc::EINVAL); // unbound
        fails(uroce_rdma_listen(id, 1), libc::EINVAL);
        fails(uroce_rdma_init_qp_attr(id, &mut attr, &mut mask), libc::EINVAL);
        let mut a = loopback(0);
        assert_eq!(uroce_rdma_bind_addr(id, (&raw mut a).cast()), 0);
        assert!(!(*id).verbs.is_null() && !(*id).pd.is_null(), "bound: the device's context and PD");
        let port = u16::from_be(uroce_rdma_get_src_port(id));
        assert!(port >= 32768, "an ephemeral port: {port}");
        let mut again = null_mut();
        assert_eq!(uroce_rdma_create_id(ch, &mut again, null_mut(), RDMA_PS_TCP), 0);
        let mut same = loopback(port);
        fails(uroce_rdma_bind_addr(again, (&raw mut same).cast()), libc::EADDRINUSE);
        assert_eq!(uroce_rdma_listen(id, 4), 0);
        attr.qp_state = 1; // INIT: what any ID knows
        assert_eq!(uroce_rdma_init_qp_attr(id, &mut attr, &mut mask), 0);
        assert_eq!((attr.qp_state, attr.port_num, attr.pkey_index), (1, 1, 0));
        assert_eq!(mask, 1 | 8 | 16 | 32, "STATE | ACCESS_FLAGS | PKEY_INDEX | PORT");
        attr.qp_state = 2; // RTR: no peer yet
        fails(uroce_rdma_init_qp_attr(id, &mut attr, &mut mask), libc::EINVAL);
        attr.qp_state = 99;
        fails(uroce_rdma_init_qp_attr(id, &mut attr, &mut mask), libc::EINVAL);
        fails(uroce_rdma_init_qp_attr(id, null_mut(), &mut mask), libc::EINVAL);
        fails(uroce_rdma_establish(id), libc::EINVAL); // no connect response
        fails(uroce_rdma_accept(id, null_mut()), libc::EINVAL); // a listener
        fails(uroce_rdma_disconnect(id), libc::EINVAL);
        fails(uroce_rdma_migrate_id(id, bogus_ch), libc::EINVAL);

        // A non-blocking channel with nothing queued: EAGAIN.
        let fl = libc::fcntl((*ch).fd, libc::F_GETFL);
        assert_eq!(libc::fcntl((*ch).fd, libc::F_SETFL, fl | libc::O_NONBLOCK), 0);
        let mut ev = null_mut();
        fails(uroce_rdma_get_cm_event(ch, &mut ev), libc::EAGAIN);
        fails(uroce_rdma_ack_cm_event(junk.as_mut_ptr().cast()), libc::EINVAL);

        // Migrated to another channel and back, then destroyed: once.
        let ch2 = uroce_rdma_create_event_channel();
        assert_eq!(uroce_rdma_migrate_id(id, ch2), 0);
        assert_eq!((*id).channel, ch2);
        assert_eq!(uroce_rdma_migrate_id(id, ch), 0);
        assert_eq!(uroce_rdma_destroy_id(id), 0);
        fails(uroce_rdma_destroy_id(id), libc::EINVAL);
        fails(uroce_rdma_listen(id, 1), libc::EINVAL);
        assert_eq!(uroce_rdma_destroy_id(again), 0);
        uroce_rdma_destroy_event_channel(ch2);
        uroce_rdma_destroy_event_channel(ch);
        uroce_rdma_destroy_event_channel(ch); // twice: nothing happens
    }
}
