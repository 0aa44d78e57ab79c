//! The protocol formulas the engine shares with `rxe-compat`'s quirk table, each stated once:
//! the UDP source port and flow label, the AckReq cadence, a retry counter's step, the PSNs a
//! READ consumes, the responder's READ/atomic resources and the send window. The engine uses
//! them where it implements the rule; `uroce_rxe_compat::quirks` re-exports them (with rxe's
//! parameters) and documents each against the rxe source, and its tests hold them to real rxe
//! captures.

/// Lowest RoCEv2 UDP source port (`IB_ROCE_UDP_ENCAP_VALID_PORT_MIN`, rxe
/// `RXE_ROCE_V2_SPORT`).
pub const ROCE_V2_SPORT_MIN: u16 = 0xc000;

/// `include/rdma/ib_verbs.h` `rdma_calc_flow_label`: a 20-bit flow label from the two QPNs,
/// symmetric in them.
pub const fn calc_flow_label(lqpn: u32, rqpn: u32) -> u32 {
    let mut v = lqpn as u64 * rqpn as u64;
    v ^= v >> 20;
    v ^= v >> 40;
    (v & 0xf_ffff) as u32
}

/// `include/rdma/ib_verbs.h` `rdma_flow_label_to_udp_sport`: fold a 20-bit flow label to 14
/// bits and set the top two.
pub const fn flow_label_to_udp_sport(fl: u32) -> u16 {
    let low = (fl & 0x3fff) ^ ((fl & 0xf_c000) >> 14);
    (low as u16) | ROCE_V2_SPORT_MIN
}

/// The UDP source port of an RC/UC QP (`rdma_get_udp_sport(ah_attr.grh.flow_label, qp_num,
/// dest_qp_num)`, set by rxe's `rxe_modify_qp` whenever `IB_QP_AV` is modified, and by mlx5):
/// from the AV's flow label, or from the QPNs when it is 0. Symmetric in the two QPNs, so both
/// directions of a connection use the same port. The flow label is a 20-bit field.
pub const fn rc_udp_sport(flow_label: u32, lqpn: u32, rqpn: u32) -> u16 {
    let fl = if flow_label != 0 { flow_label & 0xf_ffff } else { calc_flow_label(lqpn, rqpn) };
    flow_label_to_udp_sport(fl)
}

/// The UDP source port of a UD QP: rxe's create-time port, `RXE_ROCE_V2_SPORT +
/// (hash_32(qpn, 14) & 0x3fff)` (`rxe_qp.c` `rxe_qp_init_req`; a UD QP is never given an AV,
/// so `rxe_modify_qp` never replaces it). `hash_32` is `include/linux/hash.h`'s
/// `(val * GOLDEN_RATIO_32) >> (32 - bits)`.
pub const fn ud_udp_sport(qpn: u32) -> u16 {
    const GOLDEN_RATIO_32: u32 = 0x61c8_8647;
    let h = qpn.wrapping_mul(GOLDEN_RATIO_32) >> (32 - 14);
    ROCE_V2_SPORT_MIN + (h & 0x3fff) as u16
}

/// The flow label RDMA-CM puts in the path of a RoCEv2 connection over IPv4 (or IPv6 without a
/// flow label of its own): `drivers/infiniband/core/cma.c` `cma_get_roce_udp_flow_label`,
/// `(sport * 31 + dport) & 0xfffff` of the RDMA-CM port space's source and destination ports.
/// The sport of such a connection is [`rc_udp_sport`] of this label.
pub const fn rdma_cm_flow_label(cm_src_port: u16, cm_dst_port: u16) -> u32 {
    (cm_src_port as u32).wrapping_mul(31).wrapping_add(cm_dst_port as u32) & 0xf_ffff
}

/// The node GUID of a device on an Ethernet port with MAC `mac`: its modified EUI-64 (the
/// U/L bit flipped, ff:fe in the middle), as rxe derives it (`rxe_net.c` `rxe_net_add` →
/// `addrconf_addr_eui48`), in wire byte order. It is the CA GUID of CM messages too.
pub const fn node_guid(mac: [u8; 6]) -> [u8; 8] {
    [mac[0] ^ 2, mac[1], mac[2], 0xff, 0xfe, mac[3], mac[4], mac[5]]
}

/// The AckReq bit of a datagram from QP `qpn`: rxe sets AckReq on the last packet of every QP
/// that is neither UD nor UC (`rxe_req.c` `init_req_packet`), and its GSI QP (QP1,
/// `IB_QPT_GSI`) is such a QP: every MAD leaves with AckReq (`rdma_cm.pcap`), a UD QP's
/// datagrams without (`pingpong_ud.pcap`). Nobody acknowledges either.
pub const fn datagram_ack_req(qpn: u32) -> bool {
    qpn == 1
}

/// The AckReq rule (rxe `rxe_req.c` `init_req_packet`, RC only):
/// `ack_req = END || qp->req.noack_pkts++ > RXE_MAX_PKT_PER_ACK`, `noack_pkts = 0` when set.
/// The post-increment compares the count *before* this packet, so after an AckReq packet
/// `interval + 1` packets go without one and the next carries it (the 66th with rxe's 64). The
/// counter is per QP, is not reset by a retry (only by a QP reset) and counts every packet
/// built, retransmissions included.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AckReqCadence {
    noack_pkts: u32,
}

impl AckReqCadence {
    /// A fresh QP.
    pub const fn new() -> AckReqCadence {
        AckReqCadence { noack_pkts: 0 }
    }
    /// Whether the next request packet (`end`: the last or only packet of its message)
    /// carries AckReq, without counting it (the engine decides before it builds the packet).
    #[inline]
    pub const fn due(&self, end: bool, interval: u32) -> bool {
        end || self.noack_pkts > interval
    }
    /// A packet was built, with AckReq or without.
    #[inline]
    pub fn sent(&mut self, ack_req: bool) {
        self.noack_pkts = if ack_req { 0 } else { self.noack_pkts.saturating_add(1) };
    }
    /// [`AckReqCadence::due`] and [`AckReqCadence::sent`] in one: the next packet's AckReq.
    pub fn packet(&mut self, end: bool, interval: u32) -> bool {
        let ack = self.due(end, interval);
        self.sent(ack);
        ack
    }
}

/// The retry_cnt / rnr_retry value meaning "retry forever": the spec gives 7 that meaning for
/// rnr_retry (IBTA §9.7.5.2.8); rxe also for retry_cnt (`rxe_comp.c` `rxe_completer`:
/// `if (qp->comp.retry_cnt != 7) qp->comp.retry_cnt--`).
pub const RETRY_INFINITE: u8 = 7;

/// What a retry counter does when a retry is due.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RetryStep {
    /// Retry; the counter is now `left`.
    Retry {
        /// Counter after this retry.
        left: u8,
    },
    /// The counter was 0: complete with `IB_WC_RETRY_EXC_ERR` / `IB_WC_RNR_RETRY_EXC_ERR`.
    Exhausted,
}

/// One step of `retry_cnt` (timeouts, PSN NAKs, implicit NAKs) or `rnr_retry` (RNR NAKs):
/// 0 → exhausted; 7 with `seven_is_infinite` → retry and stay 7; else retry and decrement.
/// Both counters go back to the QP's attribute values on every ACK or response that makes
/// progress (`rxe_comp.c` `reset_retry_counters`).
pub const fn retry_step(left: u8, seven_is_infinite: bool) -> RetryStep {
    match left {
        RETRY_INFINITE if seven_is_infinite => RetryStep::Retry { left: RETRY_INFINITE },
        0 => RetryStep::Exhausted,
        n => RetryStep::Retry { left: n - 1 },
    }
}

/// PSNs a message of `len` bytes uses at path MTU `mtu`: its packets, or for a READ its
/// response packets, `max(ceil(len / mtu), 1)` (IBTA §9.7.1; rxe `rxe_req.c` `update_wqe_psn`,
/// `rxe_resp.c` `rxe_prepare_res`). `mtu == 0` (not a path MTU) counts as one packet.
pub const fn read_psns(len: u32, mtu: u32) -> u32 {
    if mtu == 0 {
        return 1;
    }
    let n = len.div_ceil(mtu);
    if n == 0 {
        1
    } else {
        n
    }
}

/// The number of responder resources (READ and atomic replay entries) of a QP:
/// `roundup_pow_of_two(max_dest_rd_atomic)`, 0 when 0 (`rxe_qp.c` `rxe_qp_from_attr` →
/// `alloc_rd_atomic_resources`). A ring: the oldest entry is recycled ("it is the requester's
/// job to not send too many").
pub const fn rd_atomic_resources(max_dest_rd_atomic: u8) -> u32 {
    if max_dest_rd_atomic == 0 {
        0
    } else {
        (max_dest_rd_atomic as u32).next_power_of_two()
    }
}

/// Whether a requester sends a packet `ahead` PSNs past the oldest unacknowledged one, with a
/// window of `window` (rxe `rxe_requester`: wait when `psn > una + RXE_MAX_UNACKED_PSNS`, so
/// `window + 1` PSNs may be outstanding).
pub const fn send_window_allows(ahead: i32, window: u32) -> bool {
    ahead <= window as i32
}
