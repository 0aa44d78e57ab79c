//! Several processes on one UDP port: an `SK_REUSEPORT` program that gives each datagram to
//! the socket owning its destination QP.
//!
//! Every uroce process sharing a port binds its own socket to it with `SO_REUSEPORT` (one
//! reuseport group), and owns one *block* of QP numbers: those whose top eight bits are the
//! block (`qpn >> 16`, [`qpn_block`]). The program, attached to the group with
//! `SO_ATTACH_REUSEPORT_EBPF`, reads that byte of the BTH — byte 5 of the BTH, 13 bytes into
//! the UDP datagram (the context's data begins at the UDP header) — and selects the socket in
//! slot `block` of a `REUSEPORT_SOCKARRAY` map with `bpf_sk_select_reuseport`.
//!
//! QP1 is everyone's: a MAD to it goes to the process its CM message names
//! (`uroce_wire::cm::steer`). A REQ or SIDR REQ names a service: the program looks its
//! 8-byte service ID up in a hash map that each process fills with the services it listens on
//! ([`ReuseportSteering::listen`]) and selects that block. Every other CM message names the
//! receiver's communication ID (a SIDR REP its request ID), and each process allocates its IDs
//! with its block as the top byte: the program reads that byte as the block.
//!
//! A datagram too short for the byte, or for a block nobody holds, gets `SK_PASS` without a
//! selection: the kernel then picks a socket of the group by its hash, whose engine counts it
//! as a frame for an unknown QP — what a single process does with it (a REQ for a service
//! nobody listens on: that process's CM refuses it). The kernel removes a socket from the map
//! when the socket closes, so a process that dies leaves no stale slot.
//!
//! ```text
#![doc = include_str!("listing-reuseport.txt")]
//! ```

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use crate::asm::{Alu, Asm, AsmError, Assembled, Cond, Reg, Size};
use crate::error::{Error, Step};
use crate::loader::{load_prog, map_update};
use crate::services::ServiceMap;
use crate::sys::{self, *};

/// Slots of the map: one per possible QPN block.
pub const BLOCKS: u32 = 256;

/// Offset of the destination QP's top byte from the start of the UDP header (8-byte UDP
/// header, then BTH byte 5).
pub const QPN_BLOCK_OFFSET: i32 = 8 + 5;

/// `enum bpf_func_id`: `bpf_map_lookup_elem`, `bpf_skb_load_bytes`, `bpf_sk_select_reuseport`.
const BPF_FUNC_MAP_LOOKUP_ELEM: i32 = 1;
const BPF_FUNC_SKB_LOAD_BYTES: i32 = 26;
const BPF_FUNC_SK_SELECT_REUSEPORT: i32 = 82;
/// `enum sk_action`.
const SK_PASS: i32 = 1;
/// `SO_ATTACH_REUSEPORT_EBPF` (asm-generic/socket.h).
const SO_ATTACH_REUSEPORT_EBPF: libc::c_int = 52;

/// The block a QP number belongs to.
pub fn qpn_block(qpn: u32) -> u32 {
    (qpn >> 16) & 0xff
}

/// A little-endian load of big-endian bytes `b`: what the program compares a field with.
const fn le(b: [u8; 4]) -> i32 {
    i32::from_le_bytes(b)
}

/// The program, with the socket array's and the service map's fds in its `ld_imm64`s.
pub fn reuseport_program(map_fd: i32, services_fd: i32) -> Result<Assembled, AsmError> {
    use uroce_wire::cm::{steer, AttrId};
    let o = |v: usize| v as i32;
    let attr = |a: AttrId| le([(a.0 >> 8) as u8, a.0 as u8, 0, 0]);
    let mut a = Asm::new();
    let (pass, select, by_id, by_service) =
        (a.label("pass"), a.label("select"), a.label("by_id"), a.label("by_service"));
    // Stack: key (u32) at -4, dest QP at -8, MAD header at -32..-8, service ID at -40.
    let load = |a: &mut Asm, at: i32, to: i16, len: i32| {
        a.mov64_reg(Reg::R1, Reg::R6).mov64_imm(Reg::R2, at).mov64_reg(Reg::R3, Reg::R10);
        a.alu64_imm(Alu::Add, Reg::R3, i32::from(to)).mov64_imm(Reg::R4, len);
        a.call(BPF_FUNC_SKB_LOAD_BYTES);
    };
    a.comment("r6 = ctx (struct sk_reuseport_md *)").mov64_reg(Reg::R6, Reg::R1);
    a.comment("key = 0 (u32 on the stack)").store_imm(Size::W, Reg::R10, -4, 0);
    a.comment("bpf_skb_load_bytes(ctx, 13, &key, 1): BTH byte 5, the dest QP's top byte");
    load(&mut a, QPN_BLOCK_OFFSET, -4, 1);
    a.comment("too short: the kernel's hash chooses").jmp_imm(Cond::Ne, Reg::R0, 0, pass);
    a.comment("qp = 0").store_imm(Size::W, Reg::R10, -8, 0);
    a.comment("the whole dest QP");
    load(&mut a, QPN_BLOCK_OFFSET, -8, 3);
    a.jmp_imm(Cond::Ne, Reg::R0, 0, select);
    a.load(Size::W, Reg::R1, Reg::R10, -8);
    a.comment("not QP1: its block's socket").jmp_imm(Cond::Ne, Reg::R1, le([0, 0, 1, 0]), select);
    a.comment("QP1: the MAD header");
    load(&mut a, o(steer::MAD_IN_UDP), -32, 24);
    a.comment("too short: block 0, nobody's").jmp_imm(Cond::Ne, Reg::R0, 0, select);
    a.load(Size::B, Reg::R1, Reg::R10, -32 + o(steer::MGMT_CLASS_IN_UDP - steer::MAD_IN_UDP) as i16);
    a.comment("not the CM's class: nobody's").jmp_imm(Cond::Ne, Reg::R1, 0x07, select);
    a.load(Size::H, Reg::R1, Reg::R10, -32 + o(steer::ATTR_ID_IN_UDP - steer::MAD_IN_UDP) as i16);
    a.comment("REQ: by service").jmp_imm(Cond::Eq, Reg::R1, attr(AttrId::REQ), by_service);
    a.comment("SIDR_REQ: by service").jmp_imm(Cond::Eq, Reg::R1, attr(AttrId::SIDR_REQ), by_service);
    a.comment("the remote communication ID's top byte")
        .mov64_imm(Reg::R7, o(steer::DATA_IN_UDP + steer::REMOTE_COMM_ID));
    a.jmp_imm(Cond::Ne, Reg::R1, attr(AttrId::SIDR_REP), by_id);
    a.comment("SIDR_REP: the request ID's top byte").mov64_imm(Reg::R7, o(steer::DATA_IN_UDP + steer::REQUEST_ID));
    a.bind(by_id);
    a.mov64_reg(Reg::R1, Reg::R6).mov64_reg(Reg::R2, Reg::R7).mov64_reg(Reg::R3, Reg::R10);
    a.alu64_imm(Alu::Add, Reg::R3, -4).mov64_imm(Reg::R4, 1);
    a.comment("key = that byte (zeroed on failure: nobody's)").call(BPF_FUNC_SKB_LOAD_BYTES);
    a.ja(select);
    a.bind(by_service);
    a.comment("the service ID");
    load(&mut a, o(steer::DATA_IN_UDP + steer::SERVICE_ID), -40, 8);
    a.jmp_imm(Cond::Ne, Reg::R0, 0, select);
    a.comment("the services' map").ld_map_fd(Reg::R1, services_fd);
    a.mov64_reg(Reg::R2, Reg::R10).alu64_imm(Alu::Add, Reg::R2, -40);
    a.comment("bpf_map_lookup_elem(services, &service_id)").call(BPF_FUNC_MAP_LOOKUP_ELEM);
    a.comment("nobody listens: the hash chooses").jmp_imm(Cond::Eq, Reg::R0, 0, pass);
    a.load(Size::W, Reg::R1, Reg::R0, 0);
    a.comment("key = the listener's block").store(Size::W, Reg::R10, -4, Reg::R1);
    a.bind(select);
    a.mov64_reg(Reg::R1, Reg::R6);
    a.comment("the REUSEPORT_SOCKARRAY").ld_map_fd(Reg::R2, map_fd);
    a.mov64_reg(Reg::R3, Reg::R10);
    a.comment("&key").alu64_imm(Alu::Add, Reg::R3, -4);
    a.mov64_imm(Reg::R4, 0);
    a.comment("bpf_sk_select_reuseport; an empty slot: the hash chooses").call(BPF_FUNC_SK_SELECT_REUSEPORT);
    a.bind(pass);
    a.comment("SK_PASS").mov64_imm(Reg::R0, SK_PASS);
    a.exit();
    a.finish()
}

/// The map and the program for one shared port. Any process holding both fds (passed over a
/// Unix socket) can join a socket to the group and put it in its block's slot.
#[derive(Debug)]
pub struct ReuseportSteering {
    map: OwnedFd,
    prog: OwnedFd,
    /// Service ID → the block of the process listening on it.
    services: ServiceMap,
}

impl ReuseportSteering {
    /// Create the map and load the program.
    pub fn create() -> Result<Self, Error> {
        let mut attr = MapCreateAttr {
            map_type: BPF_MAP_TYPE_REUSEPORT_SOCKARRAY,
            key_size: 4,
            value_size: 8,
            max_entries: BLOCKS,
            map_name: sys::obj_name("uroce_qpn_socks"),
            ..Default::default()
        };
        // SAFETY: MapCreateAttr is the BPF_MAP_CREATE layout and holds no pointers.
        let map = unsafe { bpf_fd(BPF_MAP_CREATE, &mut attr) }
            .map_err(|errno| Error::Syscall { step: Step::MapCreate, errno })?;
        let services = ServiceMap::create()?;
        let insns = reuseport_program(map.as_raw_fd(), services.as_fd().as_raw_fd())
            .map_err(|_| Error::InvalidArgument("reuseport program"))?;
        let prog = load_prog(&insns.insns, "uroce_qpn_steer", BPF_PROG_TYPE_SK_REUSEPORT, BPF_SK_REUSEPORT_SELECT, 0)?;
        Ok(ReuseportSteering { map, prog, services })
    }

    /// The steering behind fds another process created ([`ReuseportSteering::fds`], in that
    /// order).
    pub fn from_fds([map, prog, services]: [OwnedFd; 3]) -> Self {
        ReuseportSteering { map, prog, services: ServiceMap::from_fd(services) }
    }

    /// The socket array's, the program's and the service map's fds, to pass to another
    /// process.
    pub fn fds(&self) -> [BorrowedFd<'_>; 3] {
        [self.map.as_fd(), self.prog.as_fd(), self.services.as_fd()]
    }

    /// The CM listeners the program steers REQs and SIDR REQs by.
    pub fn services(&self) -> &ServiceMap {
        &self.services
    }

    /// Attach the program to the reuseport group of `sock` (bound, with `SO_REUSEPORT`).
    /// Attaching the same program again is harmless.
    pub fn attach(&self, sock: BorrowedFd<'_>) -> Result<(), Error> {
        let fd: libc::c_int = self.prog.as_raw_fd();
        // SAFETY: the option value is a live c_int holding the program's fd.
        let rc = unsafe {
            libc::setsockopt(
                sock.as_raw_fd(),
                libc::SOL_SOCKET,
                SO_ATTACH_REUSEPORT_EBPF,
                (&fd as *const libc::c_int).cast(),
                size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
            return Err(Error::Syscall { step: Step::ReuseportAttach, errno });
        }
        Ok(())
    }

    /// Put `sock` in slot `block`.
    pub fn insert(&self, block: u32, sock: BorrowedFd<'_>) -> Result<(), Error> {
        if block >= BLOCKS {
            return Err(Error::InvalidArgument("block >= 256"));
        }
        // The socket array's values are 8 bytes (a socket fd in, a cookie out).
        map_update(self.map.as_fd(), &block, &(sock.as_raw_fd() as u64))
    }
}
