//! Per-device counters, named like Linux rxe's `hw_counters` (`rxe_hw_counters.c`) where rxe
//! has one, plus the drops rxe does not count (bad ICRC, unknown QP, wrong source, ...).

macro_rules! counters {
    ($( $(#[$m:meta])* $name:ident ),* $(,)?) => {
        /// Device counters. Names match rxe's `/sys/class/infiniband/<dev>/ports/1/hw_counters`.
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
        pub struct Counters { $( $(#[$m])* pub $name: u64, )* }

        impl Counters {
            /// `(name, value)` for every counter.
            pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
                [$( (stringify!($name), self.$name), )*].into_iter()
            }
            /// `self - earlier`, field by field (saturating).
            pub fn delta(&self, earlier: &Counters) -> Counters {
                Counters { $( $name: self.$name.saturating_sub(earlier.$name), )* }
            }
            /// Field-by-field sum.
            pub fn add(&mut self, o: &Counters) {
                $( self.$name += o.$name; )*
            }
        }
    };
}

counters! {
    /// Packets sent.
    sent_pkts,
    /// Packets received and accepted (passed header, ICRC and QP checks).
    rcvd_pkts,
    /// Duplicate requests received (responder).
    duplicate_request,
    /// Out-of-sequence requests received (responder; each dropped).
    out_of_seq_request,
    /// RNR NAKs received (requester).
    rcvd_rnr_err,
    /// RNR NAKs sent (responder).
    send_rnr_err,
    /// PSN sequence error NAKs received (requester).
    rcvd_seq_err,
    /// ACKs coalesced into a later one instead of being sent.
    ack_deferred,
    /// Transport retry counter exhausted.
    retry_exceeded_err,
    /// RNR retry counter exhausted.
    retry_rnr_exceeded_err,
    /// Retries started by the completer (NAK, implicit NAK or timeout).
    completer_retry_err,
    /// Error NAKs sent (invalid request, remote access, remote operational).
    send_err,
    /// Link down events.
    link_downed,
    /// SEND messages sent.
    rdma_sends,
    /// SEND messages received.
    rdma_recvs,
    /// Local ACK timeouts (mlx5: local_ack_timeout_err).
    local_ack_timeout_err,
    /// Packets retransmitted (Go-Back-N).
    retransmitted_pkts,
    /// PSN sequence error NAKs sent.
    send_seq_err,
    /// Frames dropped: bad ICRC.
    icrc_err,
    /// Frames dropped: not a RoCEv2 frame uroce can decode (truncated, bad lengths, ...).
    malformed_pkts,
    /// Frames dropped: not for any local GID.
    dropped_wrong_dst,
    /// Frames dropped: unknown destination QP.
    dropped_unknown_qp,
    /// Frames dropped: source address differs from the QP's connected peer.
    dropped_bad_src,
    /// Frames dropped: from the peer's IP address but not from the MAC the QP sends to
    /// ([`crate::Guards::src_mac`]).
    dropped_bad_src_mac,
    /// Frames dropped: from another UDP source port than the one the QP's peer uses
    /// ([`crate::Guards::udp_sport`]).
    dropped_bad_src_port,
    /// Error NAKs dropped: their MSN is not the responder's for the NAKed request
    /// ([`crate::Guards::nak_msn`]).
    dropped_bad_nak_msn,
    /// Duplicate READ requests not executed again ([`crate::Guards::read_replay_interval`]).
    dup_read_limited,
    /// Frames dropped: P_Key mismatch.
    dropped_bad_pkey,
    /// Frames dropped: opcode not valid for the QP type, or unsupported.
    dropped_bad_opcode,
    /// Frames dropped: QP not in a state that receives.
    dropped_qp_state,
    /// Responses dropped as unexpected by the completer (stale or duplicate).
    dropped_stale_response,
    /// CNPs received (for a local QP from its peer, or not).
    rcvd_cnp,
    /// CE-marked data frames received: requests at a responder, READ responses at a requester
    /// (mlx5 `np_ecn_marked_roce_packets`; the notification point's input).
    np_ecn_marked_roce_packets,
    /// CNPs sent (mlx5 `np_cnp_sent`).
    np_cnp_sent,
    /// CNPs a QP's reaction point acted on (mlx5 `rp_cnp_handled`).
    rp_cnp_handled,
    /// CNPs for a QP with no reaction point (mlx5 `rp_cnp_ignored`).
    rp_cnp_ignored,
    /// Completions delivered beyond a CQ's capacity (an overflow; none are lost).
    cq_overflow,
    /// Request packets received in sequence (each moved the responder's expected PSN; also in
    /// `rcvd_pkts`): the peer's requests, where `rcvd_pkts` also holds its responses. A runtime
    /// tells a two-way exchange from it ([`crate::Device`] users: `uroce_io`'s poll linger).
    rcvd_in_seq_requests,
    /// Packets placed by the receive fast path (RDMA WRITE FIRST, MIDDLE, LAST and ONLY
    /// without immediate data; also in `rcvd_pkts`).
    rx_fast_path_pkts,
    /// Packets built by the transmit fast path (SEND and WRITE MIDDLE; also in `sent_pkts`).
    tx_fast_path_pkts,
    /// Timer-queue entries examined (`handle_timeout`, `poll_timeout`): the cost of timers,
    /// O(1) per timer that fires or moves, never a scan over the QPs.
    timer_queue_checks,
    /// Frames for a QPN outside this device's class (`DeviceConfig::qpn_shard`), returned
    /// unchecked as `RxDrop::OtherShard`: they arrived on a receive queue of this shard's and
    /// the sharded runtime relays them to their QP's shard.
    dropped_wrong_shard,
    /// Frames a QP connected to one of this device's own GIDs sent to itself: received by the
    /// device, never transmitted (also in `sent_pkts` and, if accepted, `rcvd_pkts`).
    loopback_pkts,
    /// UC packets dropped with the rest of their message: a PSN gap, a broken opcode
    /// sequence, no receive WQE, an R_Key or length violation (UC is never NAKed).
    dropped_uc_msg,
    /// UD datagrams dropped: the DETH's Q_Key is not the QP's (rxe `check_keys`).
    dropped_bad_qkey,
    /// UD datagrams dropped: no receive WQE (UD is never NAKed).
    dropped_ud_no_wqe,
    /// UD datagrams dropped: larger than the receive WQE's buffer (less its 40-byte GRH area).
    dropped_ud_too_long,
    /// UD sends larger than the MTU: not sent, completed as sent (C10-93.1.1, as rxe does).
    ud_oversize_sends,
}
