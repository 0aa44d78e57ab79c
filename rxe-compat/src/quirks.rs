//! Linux rxe's wire-visible behaviours, written down as data.
//!
//! Every behaviour of the kernel's soft-RoCE driver (`drivers/infiniband/sw/rxe`) that a peer
//! can see on the wire, or that decides whether two peers interoperate, is one [`Quirk`] in
//! [`QUIRKS`]: what it is, the rule per kernel generation ([`RxeKernel`]: Linux 6.1 = Debian
//! bookworm, Linux 6.17 = Debian trixie-backports), the rxe source (file + function), what pins
//! it ([`Evidence`]: a test in `rxe-compat/tests/quirks.rs` over the recorded captures, the
//! shipped `rdma_rxe.ko`, or a live recording between QEMU guests; the source alone when nothing
//! can show it) and what uroce does about it ([`Uroce`]). The rules that are formulas are also small pure functions here
//! ([`rc_udp_sport`], [`ud_udp_sport`], [`AckReqCadence`], [`retry_step`], [`rnr_wait_jiffies`],
//! [`read_psns`], [`rd_atomic_resources`], ...), so tests and the engine can use the same code.
//!
//! Sources read: Debian `linux-source-6.1` 6.1.192-3, `linux-source-6.12` 6.12.118-1 and
//! `linux-source-7.2` 7.2.12-1~bpo13+1. 6.17 lies between 6.12 and 7.2, and every function cited
//! here is identical in 6.12 and 7.2 except for refactors (`timer_container_of`, ODP atomics, an
//! extra QP event on R_Key violations), so "6.17" below means that code. The captures were made
//! with the guest kernels 6.1.0-57-amd64 and 6.17.13+deb13-amd64 (`fixtures/README.md`).
//!
//! Contract: data and pure functions only: no I/O, no allocation, no panics (all arithmetic is
//! wrapping or saturating, every table index is masked). [`RxeKernel::from_release`] and
//! [`RxeKernel::from_flavour`] return a typed [`QuirkError`].

use core::fmt;
use uroce_wire::opcode::{Operation, Position};
use uroce_wire::Psn;

/// A kernel generation of rxe peers uroce is tested against.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RxeKernel {
    /// Linux 6.1 (Debian bookworm, the harness's `bookworm` flavour; captures `rxe-bookworm-*`).
    Linux6_1,
    /// Linux 6.17 (Debian trixie-backports, the harness's `trixie` flavour; captures `rxe-trixie-*`).
    Linux6_17,
}

impl RxeKernel {
    /// Both generations, oldest first.
    pub const ALL: [RxeKernel; 2] = [RxeKernel::Linux6_1, RxeKernel::Linux6_17];

    /// The Debian release (and harness flavour) that ships this kernel.
    pub const fn debian(self) -> &'static str {
        match self {
            RxeKernel::Linux6_1 => "bookworm",
            RxeKernel::Linux6_17 => "trixie",
        }
    }

    /// The `uname -r` of the guest kernel the captures were recorded with.
    pub const fn captured_release(self) -> &'static str {
        match self {
            RxeKernel::Linux6_1 => "6.1.0-57-amd64",
            RxeKernel::Linux6_17 => "6.17.13+deb13-amd64",
        }
    }

    /// The generation of a kernel release string (`uname -r`, e.g. `6.1.0-57-amd64`): its
    /// major.minor must be 6.1 or 6.17.
    pub fn from_release(release: &str) -> Result<RxeKernel, QuirkError> {
        let mut it = release.split(['.', '-', '+']);
        match (it.next(), it.next()) {
            (Some("6"), Some("1")) => Ok(RxeKernel::Linux6_1),
            (Some("6"), Some("17")) => Ok(RxeKernel::Linux6_17),
            _ => Err(QuirkError::UnknownKernelRelease),
        }
    }

    /// The generation of a harness flavour name (`bookworm` or `trixie`).
    pub fn from_flavour(flavour: &str) -> Result<RxeKernel, QuirkError> {
        match flavour {
            "bookworm" => Ok(RxeKernel::Linux6_1),
            "trixie" => Ok(RxeKernel::Linux6_17),
            _ => Err(QuirkError::UnknownFlavour),
        }
    }
}

impl fmt::Display for RxeKernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RxeKernel::Linux6_1 => f.write_str("rxe 6.1 (bookworm)"),
            RxeKernel::Linux6_17 => f.write_str("rxe 6.17 (trixie)"),
        }
    }
}

/// Errors of the lookups in this module.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QuirkError {
    /// A kernel release that is neither 6.1.x nor 6.17.x.
    UnknownKernelRelease,
    /// A flavour name that is neither `bookworm` nor `trixie`.
    UnknownFlavour,
}

impl fmt::Display for QuirkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            QuirkError::UnknownKernelRelease => f.write_str("kernel release is neither 6.1 nor 6.17"),
            QuirkError::UnknownFlavour => f.write_str("flavour is neither bookworm nor trixie"),
        }
    }
}

impl std::error::Error for QuirkError {}

/// Names every entry of [`QUIRKS`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum QuirkId {
    /// UDP source port of a QP's frames.
    UdpSourcePort,
    /// UDP checksum over IPv4 and IPv6.
    UdpChecksum,
    /// IPv4 don't-fragment flag.
    Ipv4DontFragment,
    /// IPv4 identification field.
    Ipv4Identification,
    /// IPv4 TTL / IPv6 hop limit.
    TtlHopLimit,
    /// IPv4 TOS / IPv6 traffic class, including the ECN bits.
    TrafficClass,
    /// IPv6 flow label.
    Ipv6FlowLabel,
    /// BTH fields rxe always sends the same.
    BthFixedFields,
    /// AETH credit field of ACKs and responses.
    AethCredits,
    /// Which request packets carry AckReq.
    AckReqCadence,
    /// PSNs a requester keeps outstanding.
    SendWindow,
    /// One ACK per AckReq'd request, never coalesced.
    AckPerRequest,
    /// What the AETH MSN counts, including READ responses.
    Msn,
    /// PSNs a READ request consumes, and the shape of its responses.
    ReadResponses,
    /// Atomic acknowledge contents.
    AtomicAck,
    /// RNR NAK syndrome and PSN.
    RnrNak,
    /// RNR timer table and how long the requester really waits.
    RnrTimerTable,
    /// An RNR NAK does not latch; the next out-of-order packet still gets a PSN NAK.
    RnrNakThenPsnNak,
    /// After a PSN sequence error NAK the responder stays silent until the expected PSN.
    PsnNakLatch,
    /// Requester retransmission after a NAK (Go-Back-N).
    GoBackN,
    /// The PSN of the ACK for a duplicate SEND/WRITE.
    DuplicateAckPsn,
    /// retry_cnt / rnr_retry semantics, 7 = infinite.
    RetryCount,
    /// READ/atomic responder resources (duplicate replay depth).
    RdAtomicResources,
    /// FLUSH and ATOMIC WRITE (IBA 1.5 opcodes).
    Ibta15Opcodes,
}

/// The rule of one behaviour per kernel generation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rule {
    /// The same rule in 6.1 and 6.17.
    Same(&'static str),
    /// Different rules.
    Differs {
        /// Linux 6.1 (bookworm).
        linux_6_1: &'static str,
        /// Linux 6.17 (trixie).
        linux_6_17: &'static str,
    },
}

impl Rule {
    /// The rule for `kernel`.
    pub const fn for_kernel(self, kernel: RxeKernel) -> &'static str {
        match (self, kernel) {
            (Rule::Same(r), _) => r,
            (Rule::Differs { linux_6_1, .. }, RxeKernel::Linux6_1) => linux_6_1,
            (Rule::Differs { linux_6_17, .. }, RxeKernel::Linux6_17) => linux_6_17,
        }
    }
    /// Whether both generations behave the same.
    pub const fn is_same(self) -> bool {
        matches!(self, Rule::Same(_))
    }
}

/// Where in the kernel a rule is implemented.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SourceRef {
    /// Path under the kernel tree.
    pub file: &'static str,
    /// Function (or table) name.
    pub function: &'static str,
}

const fn src(file: &'static str, function: &'static str) -> SourceRef {
    SourceRef { file, function }
}

/// What pins a rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Evidence {
    /// A test in `rxe-compat/tests/quirks.rs` checks it on every recorded capture (both
    /// generations) and on the public rxe captures when present.
    Captures(&'static str),
    /// A test reads it out of the shipped `rdma_rxe.ko` of both guest images.
    Module(&'static str),
    /// An `#[ignore]`d test in `rxe-compat/tests/quirks.rs` records real rxe traffic between two
    /// QEMU guests per generation and checks it (the recorded fixtures are too short to show it).
    Live(&'static str),
    /// No capture can show it (the reason); it is read from the source only.
    SourceOnly(&'static str),
}

/// What uroce does about a behaviour.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Uroce {
    /// uroce's engine sends the same (how).
    Matches(&'static str),
    /// uroce accepts what rxe sends (and what else).
    AcceptsBoth(&'static str),
    /// Matched only when a `uroce_transport::Quirks` flag is set (which).
    QuirkFlag(&'static str),
    /// uroce behaves differently: how, whether it matters, what the engine should do.
    Differs(&'static str),
}

impl Uroce {
    /// The explanation text.
    pub const fn text(self) -> &'static str {
        match self {
            Uroce::Matches(t) | Uroce::AcceptsBoth(t) | Uroce::QuirkFlag(t) | Uroce::Differs(t) => t,
        }
    }
}

/// One rxe behaviour.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Quirk {
    /// Which one.
    pub id: QuirkId,
    /// What it is.
    pub what: &'static str,
    /// The rule per kernel generation.
    pub rule: Rule,
    /// Where rxe implements it.
    pub source: &'static [SourceRef],
    /// What pins it.
    pub evidence: Evidence,
    /// What uroce does.
    pub uroce: Uroce,
}

/// The entry for `id`.
pub fn quirk(id: QuirkId) -> Option<&'static Quirk> {
    QUIRKS.iter().find(|q| q.id == id)
}

// ---------------------------------------------------------------------------------------------
// Formulas
// ---------------------------------------------------------------------------------------------

/// The RoCEv2 UDP destination port (IANA; rxe `ROCE_V2_UDP_DPORT`).
pub const ROCE_V2_UDP_DPORT: u16 = 4791;

/// The UDP source port and flow label formulas, shared with the engine (stated once, in
/// `uroce_transport::formulas`): `ROCE_V2_SPORT_MIN` (rxe `RXE_ROCE_V2_SPORT`),
/// `rdma_calc_flow_label`, `rdma_flow_label_to_udp_sport`, and the RC/UC source port
/// `rdma_get_udp_sport(ah_attr.grh.flow_label, qp_num, dest_qp_num)` that `rxe_modify_qp`
/// (`rxe_verbs.c`) sets whenever `IB_QP_AV` is modified: symmetric in the two QPNs, so both
/// directions of a connection use the same port when the flow label is 0 (perftest,
/// ibv_rc_pingpong) or the same on both sides (RDMA-CM, [`rdma_cm_flow_label`]).
pub use uroce_transport::formulas::{calc_flow_label, flow_label_to_udp_sport, rc_udp_sport, ROCE_V2_SPORT_MIN};

/// The UDP source port a QP gets when it is created (`rxe_qp.c` `rxe_qp_init_req`:
/// `RXE_ROCE_V2_SPORT + (hash_32(qpn, 14) & 0x3fff)`), which UD QPs and the GSI QP (QP1, the
/// RDMA-CM MADs) keep because they never get an `IB_QP_AV` modify: the engine's formula.
pub use uroce_transport::formulas::{datagram_ack_req, ud_udp_sport};

/// The flow label RDMA-CM puts in the path of a RoCEv2 connection: the engine's formula.
pub use uroce_transport::formulas::rdma_cm_flow_label;

/// The UDP checksum rxe writes, over IPv4 and IPv6 alike (`rxe_net.c` `prepare_udp_hdr`).
pub const UDP_CHECKSUM: u16 = 0;

/// rxe sets DF on every IPv4 frame (`rxe_net.c` `prepare4`: `df = htons(IP_DF)`).
pub const IPV4_DONT_FRAGMENT: bool = true;

/// The TTL / hop limit on the wire with a default routing table: the route's hop limit
/// (`ip4_dst_hoplimit` / `ip6_dst_hoplimit`, sysctl default 64), never the application's.
pub const DEFAULT_HOP_LIMIT: u8 = 64;

/// The TTL / hop limit rxe puts on the wire for a RoCEv2 GID: `ib_resolve_unicast_gid_dmac`
/// (`drivers/infiniband/core/verbs.c`, on every `modify_qp` with `IB_QP_AV` from user space)
/// overwrites `ah_attr.grh.hop_limit` with the route's hop limit from
/// `rdma_addr_find_l2_eth_by_grh`, so what the application asked for is discarded
/// (ibv_rc_pingpong asks for 1, perftest for 255; both go out with 64).
pub const fn wire_hop_limit(_app_hop_limit: u8, route_hop_limit: u8) -> u8 {
    route_hop_limit
}

/// The IPv6 flow label rxe sends: always 0 (`rxe_net.c` `prepare_ipv6_hdr`:
/// `ip6_flow_hdr(ip6h, prio, htonl(0))`); the AV's flow label only feeds [`rc_udp_sport`].
pub const IPV6_FLOW_LABEL: u32 = 0;

/// `CONFIG_HZ` of the Debian kernels (bookworm and trixie: `CONFIG_HZ_250=y`).
pub const DEBIAN_HZ: u32 = 250;

/// How far the IPv4 identification may move between two consecutive frames from one source to
/// one destination whose identifications were taken `elapsed_jiffies` ticks apart:
/// `__ip_select_ident` → `ip_idents_reserve` (`net/ipv4/route.c`) adds 1 per frame to a
/// counter shared by every frame with the same (saddr, daddr, protocol) hash bucket — not per
/// QP — plus a random `get_random_u32_below(now - old)` when the bucket's jiffies stamp changed.
/// So the step is exactly 1 within one tick or across one tick, and in `1..=elapsed_jiffies`
/// after longer. rxe takes the identification when it builds the packet (`rxe_prepare`), so a
/// capture's timestamps bound `elapsed_jiffies` only loosely (in a TCG guest not at all).
/// Returns the inclusive (min, max) step.
pub const fn ip_id_step_bounds(elapsed_jiffies: u32) -> (u16, u16) {
    let max = if elapsed_jiffies <= 1 { 1 } else { elapsed_jiffies };
    (1, if max > u16::MAX as u32 { u16::MAX } else { max as u16 })
}

/// Whether `next` may follow `prev` as the IPv4 identification of consecutive frames of one
/// (source, destination) pair `elapsed_jiffies` apart ([`ip_id_step_bounds`]).
pub const fn ip_id_step_ok(prev: u16, next: u16, elapsed_jiffies: u32) -> bool {
    let step = next.wrapping_sub(prev);
    let (lo, hi) = ip_id_step_bounds(elapsed_jiffies);
    step >= lo && step <= hi
}

/// The BTH P_Key rxe sends (`IB_DEFAULT_PKEY_FULL`).
pub const BTH_PKEY: u16 = 0xffff;

/// The AETH syndrome of every positive ACK, READ response and atomic ACK rxe sends:
/// `AETH_ACK_UNLIMITED` (credit code 31, "no end-to-end flow control").
pub const AETH_ACK_UNLIMITED: u8 = 0x1f;

/// `rxe_param.h` `RXE_MAX_PKT_PER_ACK`.
pub const RXE_MAX_PKT_PER_ACK: u32 = 64;

/// rxe's AckReq rule (`rxe_req.c` `init_req_packet`) with rxe's interval,
/// [`RXE_MAX_PKT_PER_ACK`]: the engine's [`uroce_transport::formulas::AckReqCadence`], where
/// the rule is stated.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AckReqCadence(uroce_transport::formulas::AckReqCadence);

impl AckReqCadence {
    /// A fresh QP.
    pub const fn new() -> AckReqCadence {
        AckReqCadence(uroce_transport::formulas::AckReqCadence::new())
    }
    /// Whether the next request packet (`end`: the last or only packet of its message) carries
    /// AckReq.
    pub fn packet(&mut self, end: bool) -> bool {
        self.0.packet(end, RXE_MAX_PKT_PER_ACK)
    }
}

/// `rxe_param.h` `RXE_MAX_UNACKED_PSNS`: the requester stops when its next PSN would be more
/// than this past the oldest unacknowledged one (`rxe_req.c` `rxe_requester`:
/// `psn_compare(req.psn, comp.psn + RXE_MAX_UNACKED_PSNS) > 0` → wait).
pub const RXE_MAX_UNACKED_PSNS: u32 = 128;

/// PSNs an rxe requester can have outstanding: the oldest unacknowledged one and the 128 after
/// it ([`send_window_allows`]), 129 in all (seen live).
pub const RXE_SEND_WINDOW_PSNS: u32 = RXE_MAX_UNACKED_PSNS + 1;

/// Whether rxe sends a packet whose PSN is `ahead` past the oldest unacknowledged PSN.
pub const fn send_window_allows(ahead: u32) -> bool {
    uroce_transport::formulas::send_window_allows(ahead as i32, RXE_MAX_UNACKED_PSNS)
}

/// `RETRY_INFINITE` (7) and [`RetryStep`]: the engine's, where the rule is stated.
pub use uroce_transport::formulas::{RetryStep, RETRY_INFINITE};

/// One step of `retry_cnt` (timeouts, PSN NAKs, implicit NAKs) or `rnr_retry` (RNR NAKs) in rxe:
/// 0 → exhausted, 7 → retry and stay 7 (`rxe_comp.c` `rxe_completer`: `if (qp->comp.retry_cnt
/// != 7) qp->comp.retry_cnt--`, same for `rnr_retry`), else retry and decrement. Both counters
/// go back to the QP's attribute values on every ACK or response that makes progress
/// (`reset_retry_counters`). The engine's [`uroce_transport::formulas::retry_step`] with 7
/// infinite.
pub const fn retry_step(left: u8) -> RetryStep {
    uroce_transport::formulas::retry_step(left, true)
}

/// rxe's RNR timer table (`rxe_comp.c` `rnrnak_usec[32]`), µs per 5-bit code: the spec's
/// Table 45 except code 25, where rxe has 61410 instead of 61440 (a typo). Read back out of
/// both shipped modules by `rnr_timer_table_is_the_shipped_modules`.
pub const RNRNAK_USEC: [u32; 32] = uroce_wire::aeth::RXE_RNR_TIMER_US;

/// The RNR code rxe's table differs from the spec in.
pub const RNR_TABLE_TYPO_CODE: u8 = 25;

/// rxe's RNR wait for `code`, in µs ([`RNRNAK_USEC`]; the code is masked to 5 bits).
pub const fn rnr_timer_usec(code: u8) -> u32 {
    RNRNAK_USEC[(code & 0x1f) as usize]
}

/// How many jiffies rxe really waits after an RNR NAK with `code`: `rnrnak_jiffies` =
/// `max(usecs_to_jiffies(rnrnak_usec[code]), 1)` (rounded up), armed as `jiffies + n`, so it
/// fires after `(n - 1, n]` ticks. With [`DEBIAN_HZ`] every code from 1 to 17 (3.84 ms) is one
/// tick, "the next tick", 0–4 ms later, perftest's 12 (0.64 ms) included.
pub const fn rnr_wait_jiffies(code: u8, hz: u32) -> u64 {
    let us = rnr_timer_usec(code) as u64;
    let j = (us * hz as u64).div_ceil(1_000_000);
    if j == 0 {
        1
    } else {
        j
    }
}

/// The `min_rnr_timer` perftest and ibv_rc_pingpong set on their QPs (RTR), i.e. the RNR code
/// an rxe responder run by them NAKs with.
pub const PERFTEST_MIN_RNR_TIMER: u8 = 12;

/// The AETH syndrome of rxe's RNR NAK: `AETH_RNR_NAK | (min_rnr_timer & 0x1f)` (`rxe_resp.c`
/// `rxe_responder`, `RESPST_ERR_RNR`).
pub const fn rnr_nak_syndrome(min_rnr_timer: u8) -> u8 {
    0x20 | (min_rnr_timer & 0x1f)
}

/// The AETH syndrome of a PSN sequence error NAK (`AETH_NAK_PSN_SEQ_ERROR`).
pub const PSN_SEQ_NAK_SYNDROME: u8 = 0x60;

/// PSNs a READ request of `len` bytes consumes at path MTU `mtu` = its response packets:
/// `max(ceil(len / mtu), 1)` (`rxe_req.c` `update_wqe_psn`, `rxe_resp.c` `rxe_prepare_res`);
/// `mtu == 0` counts as one packet. The engine's, where the rule is stated.
pub use uroce_transport::formulas::read_psns;

/// `rxe_param.h` `RXE_MAX_QP_RD_ATOM` (= `RXE_MAX_QP_INIT_RD_ATOM`): the device's
/// `max_qp_rd_atom`, which perftest advertises as `out_reads` (128 in the captures' key
/// messages).
pub const RXE_MAX_QP_RD_ATOM: u32 = 128;

/// The number of responder resources (READ and atomic replay entries) of a QP:
/// `roundup_pow_of_two(max_dest_rd_atomic)`, 0 when 0 (`rxe_qp.c` `rxe_qp_from_attr` →
/// `alloc_rd_atomic_resources`). A ring: `rxe_prepare_res` recycles the oldest entry ("it is the
/// requester's job to not send too many"), so a duplicate READ/atomic older than this many
/// READ/atomic requests finds no entry and is silently dropped. The requester side rounds
/// `max_rd_atomic` up the same way. The engine's, where the rule is stated.
pub use uroce_transport::formulas::rd_atomic_resources;

/// The PSN rxe's ACK for a duplicate SEND/WRITE carries: `resp.ack_psn - 1` (`rxe_resp.c`
/// `duplicate_request`, C9-105), where `ack_psn` is one past the last SEND/WRITE/atomic packet
/// it executed — not the duplicate's own PSN.
pub fn duplicate_ack_psn(ack_psn: Psn) -> Psn {
    ack_psn.sub(1)
}

/// Whether an rxe responder counts this request packet in its MSN once it is executed
/// (`rxe_resp.c` `execute`, `atomic_reply`, `process_flush`, `atomic_write_reply`): the last
/// packet of a SEND/WRITE, every READ request (when accepted, before its responses: C9-148),
/// every atomic, and in 6.17 FLUSH and ATOMIC WRITE.
pub const fn msn_counts(kernel: RxeKernel, op: Operation, pos: Position) -> bool {
    match op {
        Operation::Send
        | Operation::SendWithImm
        | Operation::SendWithInv
        | Operation::Write
        | Operation::WriteWithImm => pos.is_end(),
        Operation::ReadRequest | Operation::CompareSwap | Operation::FetchAdd => true,
        Operation::Flush | Operation::AtomicWrite => supports(kernel, op),
        Operation::ReadResponse | Operation::Acknowledge | Operation::AtomicAcknowledge | Operation::Cnp => false,
    }
}

/// Whether an rxe responder of this generation executes requests of `op` at all. FLUSH (0x1c)
/// and ATOMIC WRITE (0x1d) came with Linux 6.2; a 6.1 `rxe_rcv` finds no `rxe_opcode[]` entry
/// and drops them without a response. CNPs are dropped by every generation
/// (`check_type_state`: not an RC opcode).
pub const fn supports(kernel: RxeKernel, op: Operation) -> bool {
    match op {
        Operation::Flush | Operation::AtomicWrite => matches!(kernel, RxeKernel::Linux6_17),
        Operation::Cnp => false,
        _ => true,
    }
}

// ---------------------------------------------------------------------------------------------
// The table
// ---------------------------------------------------------------------------------------------

/// Every behaviour, in wire order (network layer, requester, responder, completer).
pub const QUIRKS: &[Quirk] = &[
    Quirk {
        id: QuirkId::UdpSourcePort,
        what: "UDP source port of a QP's frames (ECMP entropy; receivers accept any)",
        rule: Rule::Same(
            "RC/UC: rdma_get_udp_sport(ah_attr.grh.flow_label, local QPN, remote QPN) = \
             0xC000 | fold14(flow label or rdma_calc_flow_label(lqpn, rqpn)), the same in both \
             directions ([`rc_udp_sport`]); with RDMA-CM the flow label is \
             (cm sport*31 + cm dport) & 0xfffff ([`rdma_cm_flow_label`]). UD and QP1: \
             0xC000 + (hash_32(qpn, 14) & 0x3fff) from QP creation ([`ud_udp_sport`])",
        ),
        source: &[
            src("drivers/infiniband/sw/rxe/rxe_verbs.c", "rxe_modify_qp"),
            src("include/rdma/ib_verbs.h", "rdma_get_udp_sport / rdma_calc_flow_label"),
            src("drivers/infiniband/sw/rxe/rxe_qp.c", "rxe_qp_init_req"),
            src("drivers/infiniband/core/cma.c", "cma_get_roce_udp_flow_label"),
        ],
        evidence: Evidence::Captures("udp_source_port_is_rdma_get_udp_sport"),
        uroce: Uroce::Matches(
            "the engine's frame template takes formulas::rc_udp_sport, this table's rc_udp_sport (unless \
             DeviceConfig::udp_sport pins one port, as the kernel-UDP backend must); a UD QP's datagrams \
             formulas::ud_udp_sport (path::emit_datagram), QP1's included (55410, as rxe's)",
        ),
    },
    Quirk {
        id: QuirkId::UdpChecksum,
        what: "UDP checksum",
        rule: Rule::Same(
            "0 on IPv4 and on IPv6 (no checksum offload either); rxe's receive sockets accept a \
             zero checksum on IPv6 (udp_sock_create without use_udp6_rx_checksums) and drop a wrong \
             non-zero one in the UDP layer before rxe sees it",
        ),
        source: &[src("drivers/infiniband/sw/rxe/rxe_net.c", "prepare_udp_hdr / rxe_setup_udp_tunnel")],
        evidence: Evidence::Captures("udp_checksum_is_zero_on_ipv4_and_ipv6"),
        uroce: Uroce::Matches(
            "DeviceConfig::udp_checksum = UdpChecksum::Zero by default, IPv4 and IPv6; parse accepts 0",
        ),
    },
    Quirk {
        id: QuirkId::Ipv4DontFragment,
        what: "IPv4 flags / fragment offset",
        rule: Rule::Same("DF set, MF clear, offset 0 on every frame"),
        source: &[src("drivers/infiniband/sw/rxe/rxe_net.c", "prepare4 / prepare_ipv4_hdr")],
        evidence: Evidence::Captures("ipv4_header_df_ttl_tos"),
        uroce: Uroce::Matches("FrameTemplate::new sets dont_frag: true"),
    },
    Quirk {
        id: QuirkId::Ipv4Identification,
        what: "IPv4 identification (covered by the ICRC: a box that rewrites it breaks RoCE)",
        rule: Rule::Same(
            "__ip_select_ident: one counter per (saddr, daddr, protocol) hash bucket shared by all \
             QPs, +1 per frame, plus a random skip below the ticks since the bucket's last frame \
             ([`ip_id_step_ok`]); never per QP, never 0-step or backwards. In the captures 99% of \
             frames < 1 ms apart step by exactly 1",
        ),
        source: &[
            src("drivers/infiniband/sw/rxe/rxe_net.c", "prepare_ipv4_hdr"),
            src("net/ipv4/route.c", "__ip_select_ident / ip_idents_reserve"),
        ],
        evidence: Evidence::Captures("ipv4_identification_is_a_per_destination_counter"),
        uroce: Uroce::Matches(
            "DeviceConfig::ipv4_ident = Ipv4Ident::Counter (default): one u16 counter per (source, \
             destination) shared by the device's QPs, +1 per frame including retransmissions, \
             starting from the device seed; the kernel-UDP backend uses Ipv4Ident::Zero (its \
             socket sends 0)",
        ),
    },
    Quirk {
        id: QuirkId::TtlHopLimit,
        what: "IPv4 TTL / IPv6 hop limit",
        rule: Rule::Same(
            "the route's hop limit (64 with default sysctls), whatever ah_attr.grh.hop_limit the \
             application set: ib_resolve_unicast_gid_dmac overwrites it for RoCEv2 GIDs, \
             link-local ones included ([`wire_hop_limit`])",
        ),
        source: &[
            src("drivers/infiniband/core/verbs.c", "ib_resolve_unicast_gid_dmac"),
            src("drivers/infiniband/core/addr.c", "rdma_addr_find_l2_eth_by_grh"),
            src("drivers/infiniband/sw/rxe/rxe_net.c", "prepare_ipv4_hdr / prepare_ipv6_hdr"),
        ],
        evidence: Evidence::Captures("ipv4_header_df_ttl_tos"),
        uroce: Uroce::Matches(
            "DeviceConfig::hop_limit (default 64) is written whatever the AV asks, as the kernel \
             resolves it from the route for every RoCE device",
        ),
    },
    Quirk {
        id: QuirkId::TrafficClass,
        what: "IPv4 TOS / IPv6 traffic class, ECN bits",
        rule: Rule::Same(
            "ah_attr.grh.traffic_class verbatim (perftest -T / default 0 → 0x00); rxe never sets \
             ECT itself, never reacts to CE and never sends CNPs",
        ),
        source: &[src("drivers/infiniband/sw/rxe/rxe_net.c", "prepare4 / prepare6")],
        evidence: Evidence::Captures("ipv4_header_df_ttl_tos"),
        uroce: Uroce::Matches(
            "path_repr splits av.traffic_class into DSCP and ECN unchanged while DeviceConfig::cc \
             is off (the default); with cc.ecn uroce sends ECT(0), and with cc.np / cc.rp it \
             answers CE with CNPs and reacts to them, as ConnectX does (rxe drops the CNPs: \
             harmless)",
        ),
    },
    Quirk {
        id: QuirkId::Ipv6FlowLabel,
        what: "IPv6 flow label",
        rule: Rule::Same("always 0, even when the AV has a flow label (it only feeds the UDP source port)"),
        source: &[src("drivers/infiniband/sw/rxe/rxe_net.c", "prepare_ipv6_hdr")],
        evidence: Evidence::Captures("ipv6_header_flow_label_hop_limit_tclass"),
        uroce: Uroce::Matches(
            "FrameTemplate::new writes flow label 0; the AV's flow label only feeds the UDP source port",
        ),
    },
    Quirk {
        id: QuirkId::BthFixedFields,
        what: "BTH fields that never vary",
        rule: Rule::Same("MigReq 0, TVer 0, P_Key 0xFFFF, FECN/BECN 0, reserved bits 0"),
        source: &[
            src("drivers/infiniband/sw/rxe/rxe_req.c", "init_req_packet"),
            src("drivers/infiniband/sw/rxe/rxe_resp.c", "prepare_ack_packet"),
        ],
        evidence: Evidence::Captures("bth_fixed_fields"),
        uroce: Uroce::Matches("FrameTemplate: mig_req false, DEFAULT_PKEY, fecn/becn false"),
    },
    Quirk {
        id: QuirkId::AethCredits,
        what: "AETH syndrome of positive ACKs, READ responses and atomic ACKs",
        rule: Rule::Same("0x1F (credit code 31, unlimited); incoming credits are ignored"),
        source: &[src("drivers/infiniband/sw/rxe/rxe_resp.c", "acknowledge / read_reply / send_atomic_ack")],
        evidence: Evidence::Captures("aeth_syndromes"),
        uroce: Uroce::Matches("Syndrome::ACK_UNLIMITED"),
    },
    Quirk {
        id: QuirkId::AckReqCadence,
        what: "which request packets carry AckReq",
        rule: Rule::Same(
            "the last/only packet of every message (READ requests and atomics included) and, inside \
             a long message, every 66th packet: noack_pkts++ > 64 ([`AckReqCadence`]); the counter \
             survives retries. UC and UD never; the GSI QP (QP1, IB_QPT_GSI) on every MAD \
             ([`datagram_ack_req`])",
        ),
        source: &[
            src("drivers/infiniband/sw/rxe/rxe_req.c", "init_req_packet"),
            src("drivers/infiniband/sw/rxe/rxe_param.h", "RXE_MAX_PKT_PER_ACK"),
        ],
        evidence: Evidence::Live(
            "ack_req_cadence (END packets, every fixture) and live_long_write_{bookworm,trixie} \
             (256-packet messages: packets 66, 132, 198; retransmissions keep the count)",
        ),
        uroce: Uroce::Matches(
            "formulas::AckReqCadence (this table's AckReqCadence) in the send state: AckReq when END or \
             noack_pkts > ack_req_interval (64), i.e. the 66th packet; the count carries on through a rewind; \
             datagrams formulas::datagram_ack_req (path::emit_datagram)",
        ),
    },
    Quirk {
        id: QuirkId::SendWindow,
        what: "PSNs a requester keeps outstanding",
        rule: Rule::Same(
            "a packet goes out while its PSN is at most 128 (RXE_MAX_UNACKED_PSNS) past the oldest \
             unacknowledged one: 129 PSNs in flight ([`send_window_allows`])",
        ),
        source: &[src("drivers/infiniband/sw/rxe/rxe_req.c", "rxe_requester")],
        evidence: Evidence::Live("live_long_write_{bookworm,trixie}: 129 PSNs past the last ACK seen"),
        uroce: Uroce::Matches("requester.rs poll_request sends while psn - una <= send_window (128): 129 in flight"),
    },
    Quirk {
        id: QuirkId::AckPerRequest,
        what: "ACK generation",
        rule: Rule::Same(
            "one ACK per request packet that has AckReq, carrying that packet's PSN, sent at once; \
             no timer and no coalescing (ACKs are cumulative, so a lost ACK is covered by the next); \
             a duplicate SEND/WRITE packet is ACKed whether or not it has AckReq",
        ),
        source: &[src("drivers/infiniband/sw/rxe/rxe_resp.c", "acknowledge")],
        evidence: Evidence::Captures("one_ack_per_ack_req"),
        uroce: Uroce::Differs(
            "Responder::push_ack replaces an ACK still queued at the tail by the later one, so when \
             the I/O layer feeds several AckReq'd requests before draining poll_transmit uroce sends \
             fewer ACKs than rxe. Harmless (cumulative ACKs); to match, never coalesce",
        ),
    },
    Quirk {
        id: QuirkId::Msn,
        what: "AETH MSN",
        rule: Rule::Same(
            "count of completed requests since the QP was reset: +1 at the end of each SEND/WRITE, \
             at each READ request when accepted (so the READ's responses already carry it, C9-148) \
             and at each atomic; NAKs carry the current count ([`msn_counts`])",
        ),
        source: &[src("drivers/infiniband/sw/rxe/rxe_resp.c", "execute / atomic_reply")],
        evidence: Evidence::Captures("msn_counts_completed_requests"),
        uroce: Uroce::Matches("responder.rs MSN rules (C9-148 for READ)"),
    },
    Quirk {
        id: QuirkId::ReadResponses,
        what: "READ request PSNs and responses",
        rule: Rule::Same(
            "a READ of L bytes consumes max(ceil(L/mtu), 1) PSNs ([`read_psns`]); responses use them \
             in order, FIRST/LAST/ONLY with AETH 0x1F and the MSN, MIDDLE without AETH",
        ),
        source: &[
            src("drivers/infiniband/sw/rxe/rxe_req.c", "update_wqe_psn"),
            src("drivers/infiniband/sw/rxe/rxe_resp.c", "read_reply / rxe_prepare_res"),
        ],
        evidence: Evidence::Captures("read_requests_consume_one_psn_per_response"),
        uroce: Uroce::Matches("requester/responder PSN accounting as rxe"),
    },
    Quirk {
        id: QuirkId::AtomicAck,
        what: "atomic acknowledge",
        rule: Rule::Same(
            "ATOMIC_ACKNOWLEDGE with the request's PSN, AETH 0x1F and the MSN, and the original \
             8-byte value; each atomic executed once, in PSN order",
        ),
        source: &[src("drivers/infiniband/sw/rxe/rxe_resp.c", "atomic_reply / send_atomic_ack")],
        evidence: Evidence::Captures("atomic_acks"),
        uroce: Uroce::Matches("responder exec_atomic"),
    },
    Quirk {
        id: QuirkId::RnrNak,
        what: "RNR NAK (no receive WQE for a SEND)",
        rule: Rule::Same(
            "syndrome 0x20 | min_rnr_timer of the responder's QP ([`rnr_nak_syndrome`]; perftest: \
             12 → 0x2C), PSN = the refused request's, MSN = current; the QP stays up",
        ),
        source: &[src("drivers/infiniband/sw/rxe/rxe_resp.c", "rxe_responder (RESPST_ERR_RNR)")],
        evidence: Evidence::Captures("rnr_naks"),
        uroce: Uroce::Matches("responder: Syndrome::RnrNak(RnrTimer::new(min_rnr_timer)) with the request PSN"),
    },
    Quirk {
        id: QuirkId::RnrTimerTable,
        what: "RNR timer values",
        rule: Rule::Same(
            "the spec's Table 45 except code 25 = 61410 µs (spec 61.44 ms), and the wait is \
             max(usecs_to_jiffies(t), 1) jiffies at HZ 250 ([`rnr_wait_jiffies`]): codes 1-17 \
             (up to 3.84 ms) all wait \"until the next tick\", 0-4 ms",
        ),
        source: &[src("drivers/infiniband/sw/rxe/rxe_comp.c", "rnrnak_usec[] / rnrnak_jiffies")],
        evidence: Evidence::Module("rnr_timer_table_is_the_shipped_modules"),
        uroce: Uroce::Differs(
            "uroce waits the spec's value with µs precision (uroce_wire::RnrTimer; the rxe table is \
             uroce_wire::aeth::RXE_RNR_TIMER_US). The 30 µs at code 25 is far below rxe's own \
             4 ms tick; no interop effect, no change needed",
        ),
    },
    Quirk {
        id: QuirkId::RnrNakThenPsnNak,
        what: "what follows an RNR NAK",
        rule: Rule::Same(
            "an RNR NAK does not set the sent_psn_nak latch: the next request past the refused PSN \
             gets a NAK PSN sequence error with the refused PSN, then silence; so a flight hitting an \
             empty RQ is answered RNR NAK(p) + NAK-SEQ(p)",
        ),
        source: &[src("drivers/infiniband/sw/rxe/rxe_resp.c", "check_psn / rxe_responder (RESPST_ERR_RNR)")],
        evidence: Evidence::Captures("rnr_nak_does_not_latch"),
        uroce: Uroce::Matches(
            "the responder does not latch on an RNR NAK: the next packet of the flight gets one \
             PSN-sequence-error NAK, later ones are dropped (responder.rs handle_request)",
        ),
    },
    Quirk {
        id: QuirkId::PsnNakLatch,
        what: "NAK then silence",
        rule: Rule::Same(
            "a request ahead of the expected PSN gets one NAK PSN sequence error carrying the \
             expected PSN; later out-of-order requests are dropped silently until the expected PSN \
             arrives (sent_psn_nak); a lost NAK is recovered only by the requester's timeout",
        ),
        source: &[src("drivers/infiniband/sw/rxe/rxe_resp.c", "check_psn")],
        evidence: Evidence::Captures("rnr_nak_does_not_latch"),
        uroce: Uroce::Matches("responder nak_latched"),
    },
    Quirk {
        id: QuirkId::GoBackN,
        what: "requester retransmission",
        rule: Rule::Same(
            "Go-Back-N from the NAKed PSN (after an RNR NAK: once the RNR timer fired), re-sending \
             every later packet of the send queue",
        ),
        source: &[src("drivers/infiniband/sw/rxe/rxe_req.c", "req_retry / rnr_nak_timer")],
        evidence: Evidence::Captures("rnr_retransmission_goes_back_to_the_naked_psn"),
        uroce: Uroce::Matches("completer on_rnr_nak → SendState::on_rnr, then on_rnr_timeout (Go-Back-N resume)"),
    },
    Quirk {
        id: QuirkId::DuplicateAckPsn,
        what: "ACK for a duplicate SEND/WRITE",
        rule: Rule::Same(
            "not executed again; ACKed with PSN = ack_psn - 1, the last SEND/WRITE/atomic PSN \
             executed, not the duplicate's own PSN ([`duplicate_ack_psn`])",
        ),
        source: &[src("drivers/infiniband/sw/rxe/rxe_resp.c", "duplicate_request")],
        evidence: Evidence::Live(
            "responder_model_for_send_write_streams, exercised when live_long_write_trixie's slow guests \
             make the requester time out (54 duplicates ACKed with ack_psn - 1 in one run); no fixture \
             has a duplicate",
        ),
        uroce: Uroce::Differs(
            "deliberate: uroce ACKs the duplicate's own PSN (responder.rs handle_duplicate) so it \
             cannot cover a later READ still in flight. A requester accepts either",
        ),
    },
    Quirk {
        id: QuirkId::RetryCount,
        what: "retry_cnt / rnr_retry",
        rule: Rule::Same(
            "7 means retry forever for BOTH counters (the spec gives 7 that meaning for rnr_retry \
             only); 0..6 count down, exhaustion completes with RETRY_EXC_ERR / RNR_RETRY_EXC_ERR and \
             errors the QP; both reset on every ACK/response that makes progress ([`retry_step`]). \
             perftest and ibv_rc_pingpong use 7",
        ),
        source: &[src(
            "drivers/infiniband/sw/rxe/rxe_comp.c",
            "rxe_completer (COMPST_ERROR_RETRY, COMPST_RNR_RETRY) / reset_retry_counters",
        )],
        evidence: Evidence::SourceOnly(
            "counters reset on every ACK, so no capture can show exhaustion; the engine tests \
             engine_retry_cnt_7_is_infinite_{by_default,with_the_quirk} show what the flag changes",
        ),
        uroce: Uroce::QuirkFlag(
            "Quirks::retry_cnt_7_infinite (default false): without it retry_cnt 7 means 7 retries, so a \
             silent or stalled peer errors the QP after 8 local ACK timeouts (0.54 s at timeout 14) \
             where rxe retries forever (engine_retry_cnt_7_is_infinite_by_default); rnr_retry 7 is \
             infinite either way",
        ),
    },
    Quirk {
        id: QuirkId::RdAtomicResources,
        what: "responder resources (READ/atomic duplicate replay depth)",
        rule: Rule::Same(
            "a ring of roundup_pow_of_two(max_dest_rd_atomic) entries shared by READs and atomics \
             ([`rd_atomic_resources`]); the oldest is recycled; a duplicate READ is executed again \
             from memory, a duplicate atomic is answered from the stored original value, a duplicate \
             older than the ring is dropped without a response. Device max_qp_rd_atom 128",
        ),
        source: &[
            src("drivers/infiniband/sw/rxe/rxe_qp.c", "rxe_qp_from_attr / alloc_rd_atomic_resources"),
            src("drivers/infiniband/sw/rxe/rxe_resp.c", "rxe_prepare_res / find_resource / duplicate_request"),
        ],
        evidence: Evidence::Captures(
            "perftest_sees_rxe_max_qp_rd_atom (the device's 128 as perftest's out_reads; the ring's \
             recycling needs more than 128 READ/atomics in flight and is from the source)",
        ),
        uroce: Uroce::Matches(
            "responder.rs: a ring of max_dest_rd_atomic.next_power_of_two() entries; \
             DeviceConfig::max_qp_rd_atom = 128",
        ),
    },
    Quirk {
        id: QuirkId::Ibta15Opcodes,
        what: "FLUSH (0x1C) and ATOMIC WRITE (0x1D)",
        rule: Rule::Differs {
            linux_6_1: "not implemented: rxe_rcv finds no rxe_opcode[] entry and drops the packet without \
                        a response (the requester times out)",
            linux_6_17: "executed (since 6.2); FLUSH answered with a READ_RESPONSE_ONLY without payload, \
                         ATOMIC WRITE likewise; both count in the MSN",
        },
        source: &[
            src("drivers/infiniband/sw/rxe/rxe_recv.c", "rxe_rcv"),
            src("drivers/infiniband/sw/rxe/rxe_resp.c", "process_flush / atomic_write_reply / acknowledge"),
        ],
        evidence: Evidence::Module("ibta15_opcodes_in_the_shipped_modules"),
        uroce: Uroce::Differs(
            "uroce's responder NAKs both with invalid request and errors the QP (check_op_valid); \
             uroce never sends them. Only matters with a peer that issues them (perftest does not)",
        ),
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_id_has_one_entry() {
        use QuirkId::*;
        let all = [
            UdpSourcePort,
            UdpChecksum,
            Ipv4DontFragment,
            Ipv4Identification,
            TtlHopLimit,
            TrafficClass,
            Ipv6FlowLabel,
            BthFixedFields,
            AethCredits,
            AckReqCadence,
            SendWindow,
            AckPerRequest,
            Msn,
            ReadResponses,
            AtomicAck,
            RnrNak,
            RnrTimerTable,
            RnrNakThenPsnNak,
            PsnNakLatch,
            GoBackN,
            DuplicateAckPsn,
            RetryCount,
            RdAtomicResources,
            Ibta15Opcodes,
        ];
        assert_eq!(all.len(), QUIRKS.len());
        for id in all {
            assert_eq!(QUIRKS.iter().filter(|q| q.id == id).count(), 1, "{id:?}");
            assert!(quirk(id).is_some());
        }
    }

    #[test]
    fn kernel_lookup() {
        assert_eq!(RxeKernel::from_release("6.1.0-57-amd64"), Ok(RxeKernel::Linux6_1));
        assert_eq!(RxeKernel::from_release("6.17.13+deb13-amd64"), Ok(RxeKernel::Linux6_17));
        assert_eq!(RxeKernel::from_release("6.12.1"), Err(QuirkError::UnknownKernelRelease));
        assert_eq!(RxeKernel::from_release(""), Err(QuirkError::UnknownKernelRelease));
        assert_eq!(RxeKernel::from_flavour("trixie"), Ok(RxeKernel::Linux6_17));
        assert_eq!(RxeKernel::from_flavour("sid"), Err(QuirkError::UnknownFlavour));
        for k in RxeKernel::ALL {
            assert_eq!(RxeKernel::from_release(k.captured_release()), Ok(k));
            assert_eq!(RxeKernel::from_flavour(k.debian()), Ok(k));
        }
    }

    #[test]
    fn formulas() {
        // rdma_get_udp_sport of QPN 0x11 with itself: fl = 289 → 0xc121
        assert_eq!(rc_udp_sport(0, 0x11, 0x11), 0xc121);
        assert_eq!(rc_udp_sport(0, 0x1b, 0x1d), rc_udp_sport(0, 0x1d, 0x1b));
        assert_eq!(rc_udp_sport(0x70bbd, 1, 2), flow_label_to_udp_sport(0x70bbd));
        assert_eq!(ud_udp_sport(0x22), 65320);
        assert_eq!(ud_udp_sport(1), 55410);
        let mut c = AckReqCadence::new();
        let pattern: Vec<bool> = (0..140).map(|i| c.packet(i == 139)).collect();
        let set: Vec<usize> = pattern.iter().enumerate().filter(|(_, &a)| a).map(|(i, _)| i).collect();
        assert_eq!(set, [65, 131, 139]);
        assert_eq!(retry_step(7), RetryStep::Retry { left: 7 });
        assert_eq!(retry_step(6), RetryStep::Retry { left: 5 });
        assert_eq!(retry_step(0), RetryStep::Exhausted);
        assert_eq!(rnr_timer_usec(25), 61_410);
        assert_eq!(rnr_timer_usec(25 | 0x20), 61_410);
        assert_eq!(rnr_wait_jiffies(12, DEBIAN_HZ), 1);
        assert_eq!(rnr_wait_jiffies(1, DEBIAN_HZ), 1);
        assert_eq!(rnr_wait_jiffies(20, DEBIAN_HZ), 3);
        assert_eq!(rnr_wait_jiffies(0, DEBIAN_HZ), 164);
        assert_eq!(rnr_nak_syndrome(12), 0x2c);
        assert_eq!((read_psns(0, 1024), read_psns(1, 1024), read_psns(1025, 1024), read_psns(3000, 0)), (1, 1, 2, 1));
        assert_eq!((rd_atomic_resources(0), rd_atomic_resources(1), rd_atomic_resources(5)), (0, 1, 8));
        assert_eq!(rd_atomic_resources(255), 256);
        assert_eq!(duplicate_ack_psn(Psn::new(0)), Psn::new(0xff_ffff));
        assert!(ip_id_step_ok(0xffff, 0, 0));
        assert!(!ip_id_step_ok(5, 5, 0));
        assert!(!ip_id_step_ok(5, 7, 1));
        assert!(ip_id_step_ok(5, 7, 2));
        assert_eq!(ip_id_step_bounds(u32::MAX), (1, u16::MAX));
        assert!(msn_counts(RxeKernel::Linux6_1, Operation::ReadRequest, Position::Only));
        assert!(!msn_counts(RxeKernel::Linux6_1, Operation::Write, Position::Middle));
        assert!(!msn_counts(RxeKernel::Linux6_1, Operation::Flush, Position::Only));
        assert!(msn_counts(RxeKernel::Linux6_17, Operation::Flush, Position::Only));
        assert_eq!(wire_hop_limit(1, DEFAULT_HOP_LIMIT), 64);
        assert_eq!(rdma_cm_flow_label(0xbd69, 0x1c06), 0x70bbd);
    }
}
