//! Address handles, for UD sends: `ibv_create_ah`, `ibv_destroy_ah`, and rdma-core's
//! `ibv_init_ah_from_wc` / `ibv_create_ah_from_wc`, which answer a received datagram by
//! reading its GRH area (`libibverbs/verbs.c`).
//!
//! An address handle is the engine's checked [`AddressHandle`] (a value: the engine keeps no
//! table of them) with the peer's MAC resolved when it is created, as the kernel resolves it
//! for rxe's `ibv_create_ah`.

use crate::abi::*;
use crate::datapath::{fail, resolve_dmac, rt_of};
use crate::device::{context, PDS};
use crate::{set_errno, Registry};
use core::ffi::c_int;
use std::net::IpAddr;
use uroce_transport::grh;
use uroce_transport::verbs::{AddressHandle, AddressVector, Gid as EngineGid};

/// An address handle: the program's `ibv_ah`, then the engine's.
#[repr(C)]
pub struct Ah {
    /// What the program sees.
    pub ibv: IbvAh,
    /// The checked address vector.
    pub engine: AddressHandle,
}

/// Live address handles, by address.
pub static AHS: Registry<Ah> = Registry::new();

/// `ibv_create_ah(3)`. RoCE needs the GRH (`is_global`); the destination's MAC comes from the
/// neighbour table (`EHOSTUNREACH` when it does not answer).
#[no_mangle]
pub unsafe extern "C" fn ibv_create_ah(pd: *mut IbvPd, attr: *mut AhAttrC) -> *mut IbvAh {
    let Some(p) = PDS.get(pd.cast()) else { return fail(libc::EINVAL) };
    let Ok((c, rt)) = rt_of(p.ibv.context) else { return fail(libc::EINVAL) };
    if attr.is_null() {
        return fail(libc::EINVAL);
    }
    // SAFETY: the caller's struct ibv_ah_attr.
    let a = unsafe { &*attr };
    if a.is_global == 0 || a.port_num != 1 {
        return fail(libc::EINVAL);
    }
    let g = &a.grh;
    let mut av = AddressVector {
        dgid: EngineGid(g.dgid),
        sgid_index: g.sgid_index,
        hop_limit: g.hop_limit,
        traffic_class: g.traffic_class,
        flow_label: g.flow_label,
        sl: a.sl,
        dmac: Default::default(),
    };
    av.dmac = match resolve_dmac(c, av.dgid, "ibv_create_ah") {
        Ok(m) => m,
        Err(e) => return fail(e),
    };
    let engine = match rt.with(|d| d.create_ah(p.engine, &av)) {
        Ok(h) => h,
        Err(e) => return fail(e.errno()),
    };
    let ah = Box::into_raw(Box::new(Ah { ibv: IbvAh { context: p.ibv.context, pd, handle: 0 }, engine }));
    AHS.insert(ah.cast(), ah);
    ah.cast()
}

/// `ibv_destroy_ah(3)`.
#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_ah(ah: *mut IbvAh) -> c_int {
    match AHS.take(ah.cast()) {
        Some(_) => 0,
        None => libc::EINVAL,
    }
}

/// The index of `gid` in the device's GID table (rdma-core `ibv_find_gid_index`, RoCEv2).
fn find_gid(ctx: *mut IbvContext, gid: [u8; 16]) -> Result<u8, c_int> {
    let c = context(ctx).ok_or(libc::EINVAL)?;
    c.dev.gids.iter().position(|g| g.0 == gid).map(|i| i as u8).ok_or(libc::ENOENT)
}

/// `ibv_init_ah_from_wc(3)`: the address vector that answers the sender of a received UD
/// datagram, from its completion and the GRH area of its buffer — rdma-core's `verbs.c`
/// rules: the sender's address as the destination GID, the GID the datagram was sent to as the
/// source (its index in this device's table), its TTL / hop limit and traffic class, the flow
/// label from the GRH's first word; multicast destinations refused (`EINVAL`).
#[no_mangle]
pub unsafe extern "C" fn ibv_init_ah_from_wc(
    ctx: *mut IbvContext,
    port: u8,
    wc: *const WcC,
    grh: *const Grh,
    attr: *mut AhAttrC,
) -> c_int {
    if context(ctx).is_none() || wc.is_null() || attr.is_null() {
        return fail_errno(libc::EINVAL);
    }
    // SAFETY: the caller's struct ibv_wc.
    let w = unsafe { &*wc };
    let mut out =
        AhAttrC { dlid: w.slid, sl: w.sl, src_path_bits: w.dlid_path_bits, port_num: port, ..Default::default() };
    let r = if w.wc_flags & 1 == 0 {
        // IBV_WC_GRH unset: nothing more to learn (an IB LID route).
        Ok(())
    } else if grh.is_null() {
        Err(libc::EINVAL)
    } else {
        // SAFETY: the caller's 40-byte GRH area (struct ibv_grh is 40 bytes, byte-aligned reads).
        let b: [u8; 40] = unsafe { grh.cast::<[u8; 40]>().read_unaligned() };
        out.is_global = 1;
        out.grh.flow_label = u32::from_be_bytes([b[0], b[1], b[2], b[3]]) & 0xf_ffff;
        from_grh(ctx, &b, &mut out)
    };
    // SAFETY: the caller's struct ibv_ah_attr.
    unsafe { attr.write(out) };
    match r {
        Ok(()) => 0,
        Err(e) => fail_errno(e),
    }
}

fn from_grh(ctx: *mut IbvContext, b: &[u8; 40], out: &mut AhAttrC) -> Result<(), c_int> {
    let g = grh::parse(b).map_err(|_| libc::EPROTONOSUPPORT)?;
    let gid = |a: IpAddr| EngineGid::from_ip(a).0;
    // A multicast destination has no unicast answer.
    if g.dst.is_multicast() {
        return Err(libc::EINVAL);
    }
    out.grh.sgid_index = find_gid(ctx, gid(g.dst))?;
    out.grh.dgid = gid(g.src);
    out.grh.hop_limit = g.hop_limit;
    out.grh.traffic_class = g.traffic_class;
    Ok(())
}

/// `ibv_create_ah_from_wc(3)`: [`ibv_init_ah_from_wc`], then [`ibv_create_ah`].
#[no_mangle]
pub unsafe extern "C" fn ibv_create_ah_from_wc(
    pd: *mut IbvPd,
    wc: *const WcC,
    grh: *const Grh,
    port: u8,
) -> *mut IbvAh {
    let Some(p) = PDS.get(pd.cast()) else { return fail(libc::EINVAL) };
    let mut attr = AhAttrC::default();
    // SAFETY: the caller's pointers, checked there.
    let r = unsafe { ibv_init_ah_from_wc(p.ibv.context, port, wc, grh, &mut attr) };
    if r != 0 {
        return fail(r);
    }
    // SAFETY: `attr` is ours.
    unsafe { ibv_create_ah(pd, &mut attr) }
}

fn fail_errno(e: c_int) -> c_int {
    set_errno(e);
    e
}
