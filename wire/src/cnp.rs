//! Congestion Notification Packets, in the layout ConnectX emits (IBTA Annex A17, A17.9.2).
//!
//! A CNP is BTH opcode 0x81 with BECN set, DestQP = the QP of the flow's *sender* (the
//! reaction point), PSN 0, P_Key 0xffff, followed by 16 reserved zero bytes and the ICRC.
//! ConnectX sends it with IPv4 ToS 0xc2 (DSCP 48 = firmware default `CNP_DSCP`, ECN ECT(0)),
//! TTL 64, DF, UDP checksum 0, and a source port that is not fixed (0 on a ConnectX-4 Lx), so
//! receivers must key CNPs on DestQP only.

use crate::bth::{BthRepr, DEFAULT_PKEY};
use crate::ext::ExtHeaders;
use crate::opcode::Opcode;
use crate::packet::RoceRepr;
use crate::psn::{Psn, Qpn};

/// ConnectX's default DSCP for CNPs (`CNP_DSCP`).
pub const CNP_DSCP: u8 = 48;
/// ConnectX's default 802.1p priority for CNPs (`CNP_802P_PRIO`).
pub const CNP_PRIO: u8 = 6;

/// The transport part of a CNP aimed at `dest_qp`.
pub const fn cnp(dest_qp: Qpn) -> RoceRepr {
    RoceRepr {
        bth: BthRepr {
            opcode: Opcode::CNP,
            solicited: false,
            mig_req: false,
            pad_count: 0,
            pkey: DEFAULT_PKEY,
            fecn: false,
            becn: true,
            dest_qp,
            ack_req: false,
            psn: Psn::new(0),
        },
        ext: ExtHeaders {
            deth: None,
            feth: None,
            reth: None,
            atomic_eth: None,
            aeth: None,
            atomic_ack_eth: None,
            immdt: None,
            ieth: None,
        },
        payload_len: 0,
    }
}

/// True when `r` is a CNP (receivers should not look further than DestQP).
pub fn is_cnp(r: &RoceRepr) -> bool {
    r.bth.opcode == Opcode::CNP
}
