//! The XDP program: UDP/4791 (RoCEv2) → `XSKMAP[rx_queue_index]` (one shard) or
//! `XSKMAP[rx_queue_index * shards + dest_qpn % shards]` (sharded runtime), everything else →
//! kernel.
//!
//! Built with [`crate::asm::Asm`] from a [`ProgramConfig`]. The same builder produces the
//! production program (fallback `XDP_PASS`) and test variants (fallback `XDP_DROP`, so that
//! `BPF_PROG_TEST_RUN` can tell "redirect attempted on an empty slot" from "passed").
//!
//! IPv4 header length: the UDP offset is computed from IHL (options allowed, IHL 5..=15);
//! IHL < 5 is malformed and goes to the kernel, which drops it. IPv6: only a UDP next header
//! directly after the fixed header is matched; extension headers (including the fragment
//! header) go to the kernel, as RoCEv2 (IBTA Annex A17) never uses them.

use crate::asm::{Alu, Asm, Assembled, Cond, Reg, Size};

/// RoCEv2's IANA-assigned UDP destination port (IBTA Annex A17, RoCEv2).
pub const ROCEV2_UDP_PORT: u16 = 4791;

/// `BPF_FUNC_redirect_map` and `BPF_FUNC_map_lookup_elem` from `enum bpf_func_id`.
const BPF_FUNC_REDIRECT_MAP: i32 = 51;
const BPF_FUNC_MAP_LOOKUP_ELEM: i32 = 1;

// Offsets in `struct xdp_md` (the XDP program context).
const XDP_MD_DATA: i16 = 0;
const XDP_MD_DATA_END: i16 = 4;
const XDP_MD_RX_QUEUE_INDEX: i16 = 16;

// Frame layout offsets (from the start of the Ethernet header, untagged).
const ETH_HLEN: i32 = 14;
const ETH_TYPE: i16 = 12;
const VLAN_HLEN: i32 = 4;
const IPV4_MIN_HLEN: i32 = 20;
const IPV6_HLEN: i32 = 40;
const UDP_HLEN: i32 = 8;
/// InfiniBand Base Transport Header length (IBTA vol. 1, 9.2); it follows the UDP header.
const BTH_LEN: i32 = 12;
/// Offset of the 24-bit destination QP in the BTH (byte 4 is reserved).
const BTH_DEST_QP: i16 = 5;

/// Largest supported [`ProgramConfig::shards`].
pub const MAX_SHARDS: u32 = 64;

/// XDP verdicts (`enum xdp_action`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum XdpAction {
    /// Program error; the frame is dropped and a tracepoint fires.
    Aborted = 0,
    /// Drop the frame.
    Drop = 1,
    /// Hand the frame to the kernel stack.
    Pass = 2,
    /// Bounce the frame out of the receiving interface.
    Tx = 3,
    /// Redirect (here: to the AF_XDP socket in the XSKMAP slot).
    Redirect = 4,
}

impl XdpAction {
    /// Decode a program return value.
    pub fn from_u32(v: u32) -> Option<Self> {
        Some(match v {
            0 => XdpAction::Aborted,
            1 => XdpAction::Drop,
            2 => XdpAction::Pass,
            3 => XdpAction::Tx,
            4 => XdpAction::Redirect,
            _ => return None,
        })
    }
}

/// What the program matches and what it does when the XSKMAP slot is empty.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProgramConfig {
    /// UDP destination port to steer (RoCEv2: 4791).
    pub udp_port: u16,
    /// Action for a matching frame when `XSKMAP[rx_queue_index]` holds no socket. Production
    /// uses `Pass` so the kernel still sees 4791 traffic (and answers ICMP port unreachable)
    /// while no AF_XDP socket is registered; tests use `Drop` to observe the redirect attempt.
    pub fallback: XdpAction,
    /// Load with `BPF_F_XDP_HAS_FRAGS` (multi-buffer aware). Needed for native XDP when the
    /// interface MTU exceeds what fits one page (about 3.5 KB on veth) and for AF_XDP
    /// multi-buffer (`XDP_USE_SG`). The program only reads headers within the first 98
    /// bytes (62 with one shard; VLAN + IPv4 with IHL 15 + UDP + BTH with several), which
    /// are always in the linear part, so it is correct either way.
    pub frags: bool,
    /// Number of engine shards, 1..=[`MAX_SHARDS`]. With 1 (the default) the program
    /// redirects to `XSKMAP[rx_queue_index]` and never looks past the UDP header. With
    /// `N > 1` it reads the BTH destination QP of a matching frame and redirects to slot
    /// [`ProgramConfig::slot`]`(rx_queue_index, dest_qpn % N)`; a matching frame too short
    /// to hold a whole BTH is `XDP_PASS` (see the crate docs).
    pub shards: u32,
    /// Redirect every frame, whatever it carries, to `XSKMAP[rx_queue_index]` (`uroce switch`
    /// forwards ARP and TCP too); `udp_port` and `shards` are then ignored.
    pub all_frames: bool,
    /// Several processes on the interface, each owning a block of QPNs (`dest_qpn >> 16`,
    /// 1..=255; `uroce_io::share`): redirect to slot `rx_queue_index * 256 + (dest_qpn >> 16)`
    /// ([`BLOCK_SLOTS`] per queue); `shards` must be 1. A MAD to QP1 goes to the block its CM
    /// message names (`uroce_wire::cm::steer`: a REQ's service through
    /// [`crate::XdpProgram::services`], else the receiver's ID's top byte); PFC frames and
    /// what names no block find no socket (block 0): the fallback.
    pub by_block: bool,
}

/// XSKMAP slots per RX queue with [`ProgramConfig::by_block`]: one per QPN block.
pub const BLOCK_SLOTS: u32 = 256;

impl Default for ProgramConfig {
    fn default() -> Self {
        ProgramConfig {
            udp_port: ROCEV2_UDP_PORT,
            fallback: XdpAction::Pass,
            frags: false,
            shards: 1,
            all_frames: false,
            by_block: false,
        }
    }
}

impl ProgramConfig {
    /// The XSKMAP slot of shard `shard`'s socket on RX queue `queue`: `queue * shards +
    /// shard`. With one shard this is `queue`. No range check (see
    /// [`crate::XdpProgram::slot`] for the checked version).
    pub fn slot(&self, queue: u32, shard: u32) -> u32 {
        queue * self.slots_per_queue() + shard
    }

    /// XSKMAP slots per RX queue: `shards`, or [`BLOCK_SLOTS`] with `by_block` (a "shard"
    /// is then a QPN block).
    pub fn slots_per_queue(&self) -> u32 {
        if self.by_block {
            BLOCK_SLOTS
        } else {
            self.shards
        }
    }

    /// The shard that owns QPN `qpn` (24-bit destination QP): `qpn % shards`.
    pub fn shard_of(&self, qpn: u32) -> u32 {
        (qpn & 0x00ff_ffff) % self.shards.max(1)
    }

    /// True if `shards` is in 1..=[`MAX_SHARDS`] (and 1 with `by_block`).
    pub fn shards_valid(&self) -> bool {
        (1..=MAX_SHARDS).contains(&self.shards) && (!self.by_block || self.shards == 1)
    }
}

/// A big-endian (network order) 16-bit constant as a `u16` load from packet memory
/// yields it on this host.
/// The block a MAD to QP1 belongs to, into r4, then on to `redirect`: what
/// `uroce_wire::cm::steer` says — a REQ's or SIDR REQ's service ID looked up in the listeners'
/// map, otherwise the top byte of the receiver's ID (a SIDR REP's request ID, any other
/// message's remote communication ID); block 0 (nobody's: the fallback) for a frame too short,
/// another management class, or a service nobody listens on. `r2 + udp` is the UDP header,
/// `r3` data_end, `r6` the context; r1..r5 are clobbered.
fn qp1_block(a: &mut Asm, udp: i32, services_fd: i32, redirect: crate::asm::Label) {
    use uroce_wire::cm::{steer, AttrId};
    use Reg::*;
    let at = |off: usize| (udp + off as i32) as i16;
    // The attribute as a u16 load of its big-endian bytes sees it.
    let attr = |a: AttrId| net16(a.0);
    let (nobody, by_service) = (a.label("qp1_nobody"), a.label("qp1_by_service"));
    let end = steer::DATA_IN_UDP + steer::SERVICE_ID + 8;
    a.mov64_reg(R4, R2).alu64_imm(Alu::Add, R4, udp + end as i32);
    a.comment("too short for a CM message's steering fields").jmp_reg(Cond::Gt, R4, R3, nobody);
    a.comment("r4 = management class").load(Size::B, R4, R2, at(steer::MGMT_CLASS_IN_UDP));
    a.comment("not the CM's").jmp_imm(Cond::Ne, R4, 0x07, nobody);
    a.comment("r5 = attribute ID").load(Size::H, R5, R2, at(steer::ATTR_ID_IN_UDP));
    a.comment("REQ: by service").jmp_imm(Cond::Eq, R5, attr(AttrId::REQ), by_service);
    a.comment("SIDR_REQ: by service").jmp_imm(Cond::Eq, R5, attr(AttrId::SIDR_REQ), by_service);
    let by_remote = a.label("qp1_by_remote_id");
    a.jmp_imm(Cond::Ne, R5, attr(AttrId::SIDR_REP), by_remote);
    let top_byte = |a: &mut Asm, what: &str, off: usize| {
        a.comment(what).load(Size::B, R4, R2, at(steer::DATA_IN_UDP + off));
        a.ja(redirect);
    };
    top_byte(a, "SIDR_REP: r4 = the request ID's top byte", steer::REQUEST_ID);
    a.bind(by_remote);
    top_byte(a, "r4 = the remote communication ID's top byte", steer::REMOTE_COMM_ID);
    a.bind(by_service);
    a.comment("the service ID, as on the wire").load(Size::DW, R4, R2, at(steer::DATA_IN_UDP + steer::SERVICE_ID));
    a.store(Size::DW, R10, -8, R4);
    a.comment("the listeners' map").ld_map_fd(R1, services_fd);
    a.mov64_reg(R2, R10).alu64_imm(Alu::Add, R2, -8);
    a.comment("bpf_map_lookup_elem(services, &service_id)").call(BPF_FUNC_MAP_LOOKUP_ELEM);
    a.comment("nobody listens").jmp_imm(Cond::Eq, R0, 0, nobody);
    a.comment("r4 = the listener's block").load(Size::W, R4, R0, 0);
    a.ja(redirect);
    a.bind(nobody);
    a.comment("r4 = block 0: nobody's").mov64_imm(R4, 0);
    a.ja(redirect);
}

fn net16(v: u16) -> i32 {
    i32::from(u16::from_ne_bytes(v.to_be_bytes()))
}

/// Assemble the program for `cfg`; `map_fd` is the XSKMAP file descriptor and `services_fd`
/// the CM listeners' [`crate::ServiceMap`], read with [`ProgramConfig::by_block`] only (any
/// values for a listing; the kernel resolves them at load time).
///
/// # Panics
///
/// If `cfg.shards` is not in 1..=[`MAX_SHARDS`] ([`crate::XdpProgram::load`] checks this
/// first and returns an error instead).
pub fn assemble(cfg: &ProgramConfig, map_fd: i32, services_fd: i32) -> Assembled {
    use Reg::*;
    assert!(cfg.shards_valid(), "ProgramConfig::shards = {} is not in 1..={MAX_SHARDS}", cfg.shards);
    let sharded = cfg.shards > 1 || cfg.by_block;
    let mut a = Asm::new();
    if cfg.all_frames {
        a.comment("r6 = ctx").mov64_reg(R6, R1);
        a.comment("r1 = &xsks_map").ld_map_fd(R1, map_fd);
        a.comment("r2 = ctx->rx_queue_index").load(Size::W, R2, R6, XDP_MD_RX_QUEUE_INDEX);
        a.comment("r3 = action if the slot is empty").mov64_imm(R3, cfg.fallback as i32);
        a.comment("bpf_redirect_map(map, queue, fallback): every frame").call(BPF_FUNC_REDIRECT_MAP);
        a.exit();
        return a.finish().expect("the XDP program assembles");
    }
    let pass = a.label("pass");
    let l3 = a.label("l3");
    let ipv4 = a.label("ipv4");
    let ipv6 = a.label("ipv6");
    let udp = a.label("udp");
    let mac_control = a.label("mac_control");
    let redirect = a.label("redirect");

    // r6 = ctx (callee-saved across the helper call), r2 = data, r3 = data_end.
    a.comment("r6 = ctx").mov64_reg(R6, R1);
    a.comment("r2 = ctx->data").load(Size::W, R2, R1, XDP_MD_DATA);
    a.comment("r3 = ctx->data_end").load(Size::W, R3, R1, XDP_MD_DATA_END);

    // Ethernet header.
    a.mov64_reg(R4, R2);
    a.alu64_imm(Alu::Add, R4, ETH_HLEN);
    a.comment("truncated Ethernet header").jmp_reg(Cond::Gt, R4, R3, pass);
    a.comment("r5 = EtherType (network order)").load(Size::H, R5, R2, ETH_TYPE);
    a.comment("untagged").jmp_imm(Cond::Ne, R5, net16(0x8100), l3);

    // One 802.1Q tag: read the inner EtherType, then shift the base pointer by 4 so the
    // rest of the program uses untagged offsets.
    a.mov64_reg(R4, R2);
    a.alu64_imm(Alu::Add, R4, ETH_HLEN + VLAN_HLEN);
    a.comment("truncated 802.1Q tag").jmp_reg(Cond::Gt, R4, R3, pass);
    a.comment("r5 = inner EtherType").load(Size::H, R5, R2, ETH_TYPE + VLAN_HLEN as i16);
    a.comment("r2 = data + 4: untagged offsets from here on").alu64_imm(Alu::Add, R2, VLAN_HLEN);

    a.bind(l3);
    a.comment("IPv4").jmp_imm(Cond::Eq, R5, net16(0x0800), ipv4);
    a.comment("IPv6").jmp_imm(Cond::Eq, R5, net16(0x86dd), ipv6);
    a.comment("MAC control (802.1Qbb PFC)").jmp_imm(Cond::Eq, R5, net16(0x8808), mac_control);
    a.comment("ARP, a second tag (QinQ), anything else").ja(pass);

    // PFC frames go to the socket too: the runtime honours them (the kernel ignores them).
    a.bind(mac_control);
    if sharded {
        a.comment("r4 = shard 0 (a PAUSE is for the port)").mov64_imm(R4, 0);
    }
    a.ja(redirect);

    // IPv4.
    a.bind(ipv4).mov64_reg(R4, R2);
    a.alu64_imm(Alu::Add, R4, ETH_HLEN + IPV4_MIN_HLEN);
    a.comment("truncated IPv4 header").jmp_reg(Cond::Gt, R4, R3, pass);
    a.comment("r5 = version | IHL").load(Size::B, R5, R2, ETH_HLEN as i16);
    a.mov64_reg(R4, R5);
    a.alu64_imm(Alu::And, R4, 0xf0);
    a.comment("version != 4").jmp_imm(Cond::Ne, R4, 0x40, pass);
    a.alu64_imm(Alu::And, R5, 0x0f);
    a.comment("IHL < 5 is malformed: kernel drops it").jmp_imm(Cond::Lt, R5, 5, pass);
    a.comment("r4 = protocol").load(Size::B, R4, R2, (ETH_HLEN + 9) as i16);
    a.comment("not UDP").jmp_imm(Cond::Ne, R4, 17, pass);
    a.comment("r4 = flags | fragment offset").load(Size::H, R4, R2, (ETH_HLEN + 6) as i16);
    a.comment("MF | offset (network order)").alu64_imm(Alu::And, R4, net16(0x3fff));
    a.comment("fragments go to the kernel for reassembly").jmp_imm(Cond::Ne, R4, 0, pass);
    a.comment("r5 = IHL * 4, in 20..=60").alu64_imm(Alu::Lsh, R5, 2);
    a.comment("r2 = base + IP header length (UDP at r2 + 14)").alu64_reg(Alu::Add, R2, R5);
    a.mov64_reg(R4, R2);
    a.alu64_imm(Alu::Add, R4, ETH_HLEN + UDP_HLEN);
    a.comment("truncated UDP header").jmp_reg(Cond::Gt, R4, R3, pass);
    a.comment("r4 = UDP destination port").load(Size::H, R4, R2, (ETH_HLEN + 2) as i16);
    a.ja(udp);

    // IPv6 (fixed header + UDP directly).
    a.bind(ipv6).mov64_reg(R4, R2);
    a.alu64_imm(Alu::Add, R4, ETH_HLEN + IPV6_HLEN + UDP_HLEN);
    a.comment("truncated IPv6 or UDP header").jmp_reg(Cond::Gt, R4, R3, pass);
    a.comment("r4 = version | traffic class").load(Size::B, R4, R2, ETH_HLEN as i16);
    a.alu64_imm(Alu::And, R4, 0xf0);
    a.comment("version != 6").jmp_imm(Cond::Ne, R4, 0x60, pass);
    a.comment("r4 = next header").load(Size::B, R4, R2, (ETH_HLEN + 6) as i16);
    a.comment("not UDP (ICMPv6/ND, TCP, extension headers)").jmp_imm(Cond::Ne, R4, 17, pass);
    a.comment("r4 = UDP destination port").load(Size::H, R4, R2, (ETH_HLEN + IPV6_HLEN + 2) as i16);
    if sharded {
        // Same convention as the IPv4 path from here on: UDP header at r2 + 14.
        a.comment("r2 = base + IPv6 header length (UDP at r2 + 14)").alu64_imm(Alu::Add, R2, IPV6_HLEN);
    }

    // Port check and redirect.
    a.bind(udp);
    a.comment("not our UDP port").jmp_imm(Cond::Ne, R4, net16(cfg.udp_port), pass);
    if sharded {
        // r2 + 14 is the UDP header, r2 + 22 the BTH. Read the 24-bit destination QP
        // (big-endian, BTH bytes 5..8) a byte at a time.
        let bth = ETH_HLEN + UDP_HLEN;
        a.mov64_reg(R4, R2);
        a.alu64_imm(Alu::Add, R4, bth + BTH_LEN);
        a.comment("truncated BTH: not RoCEv2, kernel").jmp_reg(Cond::Gt, R4, R3, pass);
        a.comment("r4 = dest QP bits 23..16").load(Size::B, R4, R2, bth as i16 + BTH_DEST_QP);
        a.alu64_imm(Alu::Lsh, R4, 16);
        a.comment("r5 = dest QP bits 15..8").load(Size::B, R5, R2, bth as i16 + BTH_DEST_QP + 1);
        a.alu64_imm(Alu::Lsh, R5, 8);
        a.alu64_reg(Alu::Or, R4, R5);
        a.comment("r5 = dest QP bits 7..0").load(Size::B, R5, R2, bth as i16 + BTH_DEST_QP + 2);
        a.comment("r4 = dest QPN").alu64_reg(Alu::Or, R4, R5);
        if cfg.by_block {
            let not_qp1 = a.label("not_qp1");
            a.comment("QP1 is everyone's: its MADs by what they name").jmp_imm(Cond::Ne, R4, 1, not_qp1);
            qp1_block(&mut a, ETH_HLEN, services_fd, redirect);
            a.bind(not_qp1);
            a.comment("r4 = block = dest QPN >> 16").alu64_imm(Alu::Rsh, R4, 16);
        } else {
            a.comment("r4 = shard = dest QPN % shards").alu64_imm(Alu::Mod, R4, cfg.shards as i32);
        }
    }
    a.bind(redirect);
    a.comment("r1 = &xsks_map").ld_map_fd(R1, map_fd);
    a.comment("r2 = ctx->rx_queue_index").load(Size::W, R2, R6, XDP_MD_RX_QUEUE_INDEX);
    if sharded {
        a.alu64_imm(Alu::Mul, R2, cfg.slots_per_queue() as i32);
        a.comment("r2 = slot = queue * slots per queue + shard").alu64_reg(Alu::Add, R2, R4);
    }
    a.comment("r3 = action if the slot is empty").mov64_imm(R3, cfg.fallback as i32);
    let call = if sharded { "bpf_redirect_map(map, slot, fallback)" } else { "bpf_redirect_map(map, queue, fallback)" };
    a.comment(call).call(BPF_FUNC_REDIRECT_MAP);
    a.exit();

    a.bind(pass);
    a.comment("XDP_PASS").mov64_imm(R0, XdpAction::Pass as i32);
    a.exit();

    // The program is fixed and its labels are all bound: assembly cannot fail.
    a.finish().expect("the XDP program assembles")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The listings in the crate docs are those of the production program (map fd shown as
    /// 0), unsharded, with 4 shards and by block, and of the reuseport steering program. Regenerate with
    /// `UROCE_WRITE_LISTING=1 cargo test --release -p uroce-xdp-prog listing`.
    #[test]
    fn listing_in_docs_is_current() {
        let cases = [
            (ProgramConfig::default(), "listing.txt", include_str!("listing.txt")),
            (
                ProgramConfig { shards: 4, ..ProgramConfig::default() },
                "listing-sharded.txt",
                include_str!("listing-sharded.txt"),
            ),
            (
                ProgramConfig { by_block: true, ..ProgramConfig::default() },
                "listing-by-block.txt",
                include_str!("listing-by-block.txt"),
            ),
        ];
        let reuseport = crate::reuseport::reuseport_program(0, 0).unwrap().listing();
        let listings = cases
            .into_iter()
            .map(|(cfg, file, stored)| (assemble(&cfg, 0, 0).listing(), file, stored))
            .chain([(reuseport, "listing-reuseport.txt", include_str!("listing-reuseport.txt"))]);
        for (listing, file, stored) in listings {
            let path = format!("{}/src/{file}", env!("CARGO_MANIFEST_DIR"));
            if std::env::var_os("UROCE_WRITE_LISTING").is_some() {
                std::fs::write(&path, &listing).unwrap();
            }
            assert_eq!(listing, stored, "src/{file} is stale; regenerate it (see the test's doc comment)");
        }
    }

    #[test]
    fn config_changes_only_the_port_and_fallback_immediates() {
        let a = assemble(&ProgramConfig::default(), 3, 0);
        let b = assemble(
            &ProgramConfig {
                udp_port: 1234,
                fallback: XdpAction::Drop,
                frags: true,
                shards: 1,
                all_frames: false,
                by_block: false,
            },
            3,
            0,
        );
        assert_eq!(a.insns.len(), b.insns.len());
        let diffs: Vec<usize> = (0..a.insns.len()).filter(|&i| a.insns[i] != b.insns[i]).collect();
        assert_eq!(diffs.len(), 2, "{diffs:?}");
        assert!(b.insns.iter().any(|i| i.imm == net16(1234)));
    }

    #[test]
    fn one_shard_is_the_unsharded_program() {
        // `shards: 1` must not change a single instruction (the listing test pins the bytes).
        let one = assemble(&ProgramConfig { shards: 1, ..ProgramConfig::default() }, 3, 0);
        assert_eq!(one.insns, assemble(&ProgramConfig::default(), 3, 0).insns);
        assert!(!one.insns.iter().any(|i| i.code == 0x97 || i.code == 0x27), "no MOD/MUL with one shard");
    }

    #[test]
    fn shards_add_the_bth_read_and_the_slot_arithmetic() {
        let one = assemble(&ProgramConfig::default(), 3, 0);
        for n in [2u32, 3, 4, 7, 64] {
            let p = assemble(&ProgramConfig { shards: n, ..ProgramConfig::default() }, 3, 0);
            // The BTH read and slot arithmetic (14), and shard 0 for a PAUSE frame (1).
            assert_eq!(p.insns.len(), one.insns.len() + 15, "shards {n}");
            // ALU64 MOD/MUL by immediate n.
            assert!(p.insns.iter().any(|i| i.code == 0x97 && i.imm == n as i32), "shards {n}: MOD");
            assert!(p.insns.iter().any(|i| i.code == 0x27 && i.imm == n as i32), "shards {n}: MUL");
        }
    }

    #[test]
    #[should_panic(expected = "not in 1..=64")]
    fn zero_shards_do_not_assemble() {
        assemble(&ProgramConfig { shards: 0, ..ProgramConfig::default() }, 3, 0);
    }

    #[test]
    fn slot_and_shard_formulas() {
        let c = ProgramConfig { shards: 4, ..ProgramConfig::default() };
        assert_eq!(c.slot(0, 3), 3);
        assert_eq!(c.slot(2, 1), 9);
        assert_eq!(c.shard_of(0x00_0102), 0x102 % 4);
        assert_eq!(c.shard_of(0xff00_0007), 3, "only the 24 QPN bits count");
        assert_eq!(ProgramConfig::default().slot(5, 0), 5);
        assert!(!ProgramConfig { shards: 65, ..c }.shards_valid());
    }

    #[test]
    fn net16_is_what_a_u16_load_sees() {
        let bytes = [0x12u8, 0xb7]; // 4791 on the wire
        assert_eq!(net16(4791), i32::from(u16::from_ne_bytes(bytes)));
    }
}
