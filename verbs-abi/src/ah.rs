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

/// The IP version of the header in a GRH area (rdma-core `get_grh_header_version`): IPv6 when
/// its first word says 6, unless the last 20 bytes are an IPv4 header with a right checksum.
fn grh_version(grh: &[u8; 40]) -> Option<u8> {
    let v4 = &grh[20..40];
    if grh[0] >> 4 != 6 {
        return (v4[0] >> 4 == 4).then_some(4);
    }
    if v4[0] & 0xf != 5 {
        return Some(6);
    }
    let mut sum = 0u32;
    for (i, w) in v4.chunks(2).enumerate() {
        if i != 5 {
            sum += u32::from(u16::from_be_bytes([w[0], w[1]]));
        }
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    let check = !(sum as u16);
    Some(if check == u16::from_be_bytes([v4[10], v4[11]]) { 4 } else { 6 })
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
    match grh_version(b) {
        Some(4) => {
            let ip = &b[20..40];
            let (src, dst) = (&ip[12..16], &ip[16..20]);
            if dst[0] & 0xf0 == 0xe0 {
                return Err(libc::EINVAL);
            }
            let mapped = |a: &[u8]| {
                let mut g = [0u8; 16];
                g[10] = 0xff;
                g[11] = 0xff;
                g[12..].copy_from_slice(a);
                g
            };
            out.grh.sgid_index = find_gid(ctx, mapped(dst))?;
            out.grh.dgid = mapped(src);
            out.grh.hop_limit = ip[8];
            out.grh.traffic_class = ip[1];
            Ok(())
        }
        Some(_) => {
            let (sgid, dgid): ([u8; 16], [u8; 16]) = (b[8..24].try_into().unwrap(), b[24..40].try_into().unwrap());
            if dgid[0] == 0xff {
                return Err(libc::EINVAL);
            }
            // next header: UDP for RoCEv2 (0x1b would be IB's, which this device has no GID of)
            if b[6] != 17 {
                return Err(libc::EPROTONOSUPPORT);
            }
            out.grh.sgid_index = find_gid(ctx, dgid)?;
            out.grh.dgid = sgid;
            out.grh.hop_limit = b[7];
            out.grh.traffic_class = ((u32::from_be_bytes([b[0], b[1], b[2], b[3]]) >> 20) & 0xff) as u8;
            Ok(())
        }
        None => Err(libc::EPROTONOSUPPORT),
    }
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

#[cfg(test)]
mod tests {
    use super::grh_version;

    #[test]
    fn grh_version_is_rdma_cores() {
        let mut g = [0u8; 40];
        // 20 zero bytes, then an IPv4 header with its checksum (RFC 1071 example header).
        let ip = [0x45, 0, 0, 0x73, 0, 0, 0x40, 0, 0x40, 0x11, 0xb8, 0x61, 0xc0, 0xa8, 0, 1, 0xc0, 0xa8, 0, 0xc7];
        g[20..].copy_from_slice(&ip);
        assert_eq!(grh_version(&g), Some(4));
        g[0] = 0x60;
        // version 6 in the first word and a valid IPv4 header behind it: IPv4 wins
        assert_eq!(grh_version(&g), Some(4));
        g[30] ^= 1; // the checksum no longer holds: IPv6
        assert_eq!(grh_version(&g), Some(6));
        g[0] = 0;
        g[20] = 0x55;
        assert_eq!(grh_version(&g), None);
    }
}
