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
//! A datagram too short for the byte, or for a block nobody holds, gets `SK_PASS` without a
//! selection: the kernel then picks a socket of the group by its hash, whose engine counts it
//! as a frame for an unknown QP — what a single process does with it. The kernel removes a
//! socket from the map when the socket closes, so a process that dies leaves no stale slot.
//!
//! ```text
#![doc = include_str!("listing-reuseport.txt")]
//! ```

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use crate::asm::{Alu, Asm, AsmError, Assembled, Cond, Reg, Size};
use crate::error::{Error, Step};
use crate::loader::{load_prog, map_update};
use crate::sys::{self, *};

/// Slots of the map: one per possible QPN block.
pub const BLOCKS: u32 = 256;

/// Offset of the destination QP's top byte from the start of the UDP header (8-byte UDP
/// header, then BTH byte 5).
pub const QPN_BLOCK_OFFSET: i32 = 8 + 5;

/// `enum bpf_func_id`: `bpf_skb_load_bytes`, `bpf_sk_select_reuseport`.
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

/// The program, with the map's fd in its `ld_imm64`.
pub fn reuseport_program(map_fd: i32) -> Result<Assembled, AsmError> {
    let mut a = Asm::new();
    let pass = a.label("pass");
    a.comment("r6 = ctx (struct sk_reuseport_md *)").mov64_reg(Reg::R6, Reg::R1);
    a.comment("key = 0 (u32 on the stack)").store_imm(Size::W, Reg::R10, -4, 0);
    a.comment("offset: BTH byte 5, the dest QP's top byte").mov64_imm(Reg::R2, QPN_BLOCK_OFFSET);
    a.mov64_reg(Reg::R3, Reg::R10);
    a.comment("to = &key").alu64_imm(Alu::Add, Reg::R3, -4);
    a.comment("len = 1").mov64_imm(Reg::R4, 1);
    a.comment("bpf_skb_load_bytes(ctx, 13, &key, 1)").call(BPF_FUNC_SKB_LOAD_BYTES);
    a.comment("too short: the kernel's hash chooses").jmp_imm(Cond::Ne, Reg::R0, 0, pass);
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
        let insns = reuseport_program(map.as_raw_fd()).map_err(|_| Error::InvalidArgument("reuseport program"))?;
        let prog = load_prog(&insns.insns, "uroce_qpn_steer", BPF_PROG_TYPE_SK_REUSEPORT, BPF_SK_REUSEPORT_SELECT, 0)?;
        Ok(ReuseportSteering { map, prog })
    }

    /// The steering behind fds another process created ([`ReuseportSteering::fds`], in that
    /// order).
    pub fn from_fds(map: OwnedFd, prog: OwnedFd) -> Self {
        ReuseportSteering { map, prog }
    }

    /// The map's and the program's fds, to pass to another process.
    pub fn fds(&self) -> [BorrowedFd<'_>; 2] {
        [self.map.as_fd(), self.prog.as_fd()]
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
