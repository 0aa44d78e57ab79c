//! `ibv_rc_pingpong`'s out-of-band TCP exchange (rdma-core `libibverbs/examples/rc_pingpong.c`
//! and `pingpong.c`; identical in Debian bookworm's rdma-core 44.0 and trixie's 56.1, and on
//! rdma-core master 691953d8 apart from non-wire options).
//!
//! # Protocol
//!
//! The message is the C string `sprintf(msg, "%04x:%06x:%06x:%s", lid, qpn, psn, wire_gid)`
//! in a buffer of `sizeof "0000:000000:000000:00000000000000000000000000000000"` = **52 bytes**,
//! written whole (NUL included). `wire_gid` (`gid_to_wire_gid`) is the 16 GID bytes as **32
//! lowercase hex digits without colons**: four `"%08x"` of `htobe32` of each native 32-bit
//! word, which on any host byte order prints the bytes in wire order. The reader
//! (`sscanf(msg, "%x:%x:%x:%s")` + `wire_gid_to_gid`, four `sscanf("%x")` of 8 characters)
//! takes the same form. Example from a real rxe capture: `0000:000021:59dfd7:00000000000000000000ffff0a01103e`.
//!
//! Verified: byte-exact replay of the public capture `pingpong_rc.pcap` in both roles
//! (`tests/pingpong_replay.rs`), and live (`tests/perftest_live.rs`): stock `ibv_rc_pingpong`
//! of rdma-core 44 and 56.1, as server and as client, prints uroce's QPN/PSN/GID as its
//! "remote address" and proceeds to its SEND loop.
//!
//! Order (`pp_client_exch_dest` / `pp_server_exch_dest`):
//! * client: connect, write its 52 bytes, read the server's 52 bytes, write `"done\0"`
//!   (5 bytes), close; **then** moves its QP to RTR/RTS and posts the first SEND.
//! * server: accept one connection, read 52 bytes, **move its QP to RTR/RTS**
//!   (`pp_connect_ctx`), write its 52 bytes, read and require exactly 5 bytes (the content is
//!   not checked), close.
//!
//! Both `read()`s are single calls that must return the full size, so each message must go out
//! in one `write()`. Default TCP port 18515 (`-p`).
//!
//! # What a peer must match (defaults of rc_pingpong)
//! * Traffic: RC SEND only (`IBV_WR_SEND`, signalled; inline when it fits), `-s` 4096-byte
//!   messages, `-n` 1000 iterations each way: the client sends first; each side sends its next
//!   message after both its previous send completed and a message was received. Every receive
//!   is posted with the full `size` (`rx_depth` 500 posted up front, refilled when <= 1 left),
//!   so a message longer than `size` is a local length error at the peer.
//! * The same buffer is used for sends and receives; it starts as `0x7b` bytes. With `-c` the
//!   client sets `buf[i] = i / page_size % sizeof(char)` — always **0** — at every page start
//!   before the first send, and the server checks the byte at every page start of its buffer
//!   (`"invalid data in page %d"`) after the run: echo a received message back unchanged and
//!   keep byte 0 of every 4096-byte page zero.
//! * QP: `qp_access_flags = 0` (no RDMA READ/WRITE/atomics accepted), `max_dest_rd_atomic = 1`,
//!   `max_rd_atomic = 1`, `min_rnr_timer = 12`, `timeout = 14`, `retry_cnt = 7`,
//!   `rnr_retry = 7`, `sl` 0 (`-l`), `path_mtu` = its own `-m` (default **1024**; the MTU is
//!   *not* exchanged, both sides must be given the same), `sq_psn` = its own PSN
//!   (`lrand48() & 0xffffff`), `rq_psn` = the peer's.
//! * Addressing: the GRH is used only if the peer's GID has a non-zero interface id
//!   (`dest->gid.global.interface_id`), with `hop_limit = 1` and `sgid_index = -g`. Without
//!   `-g` the GID sent is all zeros and nothing works on RoCE; run stock pingpong with `-g`
//!   (e.g. `-g 1` for the IPv4-mapped GID on rxe). LID is 0 on RoCE.

use core::fmt;
use std::io::{self, Read, Write};

use crate::perftest::{KeyError, KeyField};

/// Default TCP port.
pub const DEFAULT_PORT: u16 = 18515;
/// Size of the address message, NUL included.
pub const MSG_LEN: usize = 52;
/// What the client writes after reading the server's message (`"done"` with its NUL).
pub const DONE: &[u8; 5] = b"done\0";
/// Default message size (`-s`).
pub const DEFAULT_SIZE: u32 = 4096;
/// Default iterations (`-n`).
pub const DEFAULT_ITERS: u32 = 1000;
/// Default receive queue depth (`-r`).
pub const DEFAULT_RX_DEPTH: u32 = 500;
/// Default path MTU in bytes (`-m`).
pub const DEFAULT_MTU: u32 = 1024;
/// Default service level (`-l`).
pub const DEFAULT_SL: u8 = 0;
/// Initial buffer contents (`memset(ctx->buf, 0x7b, size)`).
pub const BUFFER_FILL: u8 = 0x7b;
/// GRH hop limit rc_pingpong programs.
pub const HOP_LIMIT: u8 = 1;

/// One side's address as exchanged (`struct pingpong_dest` of rc_pingpong.c).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct PingpongDest {
    /// LID (0 on RoCE).
    pub lid: u16,
    /// QP number (24 bits).
    pub qpn: u32,
    /// Initial send PSN (24 bits).
    pub psn: u32,
    /// GID bytes in wire order.
    pub gid: [u8; 16],
}

impl PingpongDest {
    /// The 52 bytes rc_pingpong writes. Fails when QPN or PSN exceed 24 bits.
    pub fn encode(&self) -> Result<[u8; MSG_LEN], KeyError> {
        if self.qpn > 0xff_ffff {
            return Err(KeyError::ValueTooWide { field: KeyField::Qpn, value: self.qpn.into() });
        }
        if self.psn > 0xff_ffff {
            return Err(KeyError::ValueTooWide { field: KeyField::Psn, value: self.psn.into() });
        }
        let mut s = format!("{:04x}:{:06x}:{:06x}:", self.lid, self.qpn, self.psn);
        for b in self.gid {
            s.push_str(&format!("{b:02x}"));
        }
        let mut out = [0u8; MSG_LEN];
        let b = s.as_bytes();
        // 4+1+6+1+6+1+32 = 51 characters, then the NUL already in `out`.
        let n = b.len().min(MSG_LEN - 1);
        out[..n].copy_from_slice(&b[..n]);
        Ok(out)
    }

    /// Parse a 52-byte message; exact widths, any hex case, trailing NUL required.
    pub fn decode(msg: &[u8]) -> Result<Self, KeyError> {
        if msg.len() != MSG_LEN {
            return Err(KeyError::WrongLength { expected: MSG_LEN, got: msg.len() });
        }
        if msg[MSG_LEN - 1] != 0 {
            return Err(KeyError::MissingNul);
        }
        let colon = |off: usize| match msg[off] {
            b':' => Ok(()),
            found => Err(KeyError::BadSeparator { offset: off, found }),
        };
        let lid = crate::perftest::parse_hex(msg, 0, 4, KeyField::Lid)?;
        colon(4)?;
        let qpn = crate::perftest::parse_hex(msg, 5, 6, KeyField::Qpn)?;
        colon(11)?;
        let psn = crate::perftest::parse_hex(msg, 12, 6, KeyField::Psn)?;
        colon(18)?;
        let mut gid = [0u8; 16];
        for (i, g) in gid.iter_mut().enumerate() {
            *g = crate::perftest::parse_hex(msg, 19 + 2 * i, 2, KeyField::Gid(i as u8))? as u8;
        }
        Ok(PingpongDest { lid: lid as u16, qpn: qpn as u32, psn: psn as u32, gid })
    }
}

/// Where the pingpong exchange failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PingpongStep {
    /// Sending our address.
    SendAddress,
    /// Receiving the peer's address.
    RecvAddress,
    /// Client: sending `"done"`; server: receiving it.
    Done,
}

/// Errors of the pingpong exchange.
#[derive(Debug)]
pub enum PingpongError {
    /// I/O error.
    Io {
        /// Where.
        step: PingpongStep,
        /// The error.
        source: io::Error,
    },
    /// The stream's timeout expired.
    Timeout {
        /// Where.
        step: PingpongStep,
    },
    /// EOF before the full message.
    PeerClosed {
        /// Where.
        step: PingpongStep,
        /// Bytes received.
        received: usize,
        /// Bytes expected.
        expected: usize,
    },
    /// The peer's address message does not parse, or ours cannot be encoded.
    BadMessage {
        /// Where.
        step: PingpongStep,
        /// What.
        error: KeyError,
    },
}

impl fmt::Display for PingpongError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PingpongError::Io { step, source } => {
                write!(f, "pingpong exchange, {step:?}: {source}")
            }
            PingpongError::Timeout { step } => write!(f, "pingpong exchange, {step:?}: timed out"),
            PingpongError::PeerClosed { step, received, expected } => {
                write!(f, "pingpong exchange, {step:?}: peer closed after {received} of {expected} bytes")
            }
            PingpongError::BadMessage { step, error } => {
                write!(f, "pingpong exchange, {step:?}: {error}")
            }
        }
    }
}

impl std::error::Error for PingpongError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            PingpongError::Io { source, .. } => Some(source),
            PingpongError::BadMessage { error, .. } => Some(error),
            _ => None,
        }
    }
}

/// Client side: write our address, read the server's, write `"done\0"`. The caller then
/// drops the stream (rc_pingpong closes it) and moves its QP to RTR/RTS.
pub fn client_exchange<S: Read + Write>(mut stream: S, mine: &PingpongDest) -> Result<PingpongDest, PingpongError> {
    let msg = mine.encode().map_err(|error| PingpongError::BadMessage { step: PingpongStep::SendAddress, error })?;
    send(&mut stream, &msg, PingpongStep::SendAddress)?;
    let mut buf = [0u8; MSG_LEN];
    recv(&mut stream, &mut buf, PingpongStep::RecvAddress)?;
    let peer = PingpongDest::decode(&buf)
        .map_err(|error| PingpongError::BadMessage { step: PingpongStep::RecvAddress, error })?;
    send(&mut stream, DONE, PingpongStep::Done)?;
    Ok(peer)
}

/// Server side, first half: read the client's address. Move the QP to RTR/RTS with it (and
/// post receives) **before** [`PingpongServer::reply`], as rc_pingpong's server does: the
/// client starts sending as soon as it has our reply.
pub fn server_accept<S: Read + Write>(mut stream: S) -> Result<(PingpongDest, PingpongServer<S>), PingpongError> {
    let mut buf = [0u8; MSG_LEN];
    recv(&mut stream, &mut buf, PingpongStep::RecvAddress)?;
    let peer = PingpongDest::decode(&buf)
        .map_err(|error| PingpongError::BadMessage { step: PingpongStep::RecvAddress, error })?;
    Ok((peer, PingpongServer { stream }))
}

/// A server that has read the client's address and owes it a reply.
#[derive(Debug)]
pub struct PingpongServer<S> {
    stream: S,
}

impl<S: Read + Write> PingpongServer<S> {
    /// Write our address and read the client's 5-byte `"done"` (only its length is checked,
    /// as rc_pingpong does). The stream is dropped afterwards.
    pub fn reply(mut self, mine: &PingpongDest) -> Result<(), PingpongError> {
        let msg =
            mine.encode().map_err(|error| PingpongError::BadMessage { step: PingpongStep::SendAddress, error })?;
        send(&mut self.stream, &msg, PingpongStep::SendAddress)?;
        let mut done = [0u8; DONE.len()];
        recv(&mut self.stream, &mut done, PingpongStep::Done)
    }
}

fn send<S: Write>(s: &mut S, buf: &[u8], step: PingpongStep) -> Result<(), PingpongError> {
    s.write_all(buf).and_then(|()| s.flush()).map_err(|e| io_err(step, e))
}

fn recv<S: Read>(s: &mut S, buf: &mut [u8], step: PingpongStep) -> Result<(), PingpongError> {
    let mut got = 0;
    while got < buf.len() {
        match s.read(&mut buf[got..]) {
            Ok(0) => return Err(PingpongError::PeerClosed { step, received: got, expected: buf.len() }),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(io_err(step, e)),
        }
    }
    Ok(())
}

fn io_err(step: PingpongStep, e: io::Error) -> PingpongError {
    match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => PingpongError::Timeout { step },
        _ => PingpongError::Io { step, source: e },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> PingpongDest {
        PingpongDest {
            lid: 0,
            qpn: 0x21,
            psn: 0x59dfd7,
            gid: [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0x0a, 0x01, 0x10, 0x3e],
        }
    }

    /// The client message of the public rxe capture pingpong_rc.pcap.
    #[test]
    fn exact_bytes_of_a_recorded_message() {
        let want = b"0000:000021:59dfd7:00000000000000000000ffff0a01103e\0";
        assert_eq!(want.len(), MSG_LEN);
        assert_eq!(MSG_LEN, "0000:000000:000000:00000000000000000000000000000000".len() + 1);
        assert_eq!(&sample().encode().unwrap(), want);
        assert_eq!(PingpongDest::decode(want).unwrap(), sample());
    }

    #[test]
    fn round_trip_extremes() {
        for d in [
            PingpongDest::default(),
            PingpongDest { lid: 0xffff, qpn: 0xff_ffff, psn: 0xff_ffff, gid: [0xff; 16] },
            PingpongDest { lid: 1, qpn: 2, psn: 3, gid: core::array::from_fn(|i| i as u8 * 17) },
        ] {
            let m = d.encode().unwrap();
            assert_eq!(m.len(), MSG_LEN);
            assert_eq!(m[MSG_LEN - 1], 0);
            assert_eq!(PingpongDest::decode(&m).unwrap(), d);
        }
        let too_big = PingpongDest { qpn: 0x100_0000, ..sample() };
        assert!(matches!(too_big.encode(), Err(KeyError::ValueTooWide { field: KeyField::Qpn, .. })));
        let too_big = PingpongDest { psn: 0x100_0000, ..sample() };
        assert!(matches!(too_big.encode(), Err(KeyError::ValueTooWide { field: KeyField::Psn, .. })));
    }

    #[test]
    fn malformed_messages() {
        let good = sample().encode().unwrap();
        for n in [0, 51, 53] {
            let mut m = good.to_vec();
            m.resize(n, b'0');
            assert_eq!(PingpongDest::decode(&m), Err(KeyError::WrongLength { expected: 52, got: n }));
        }
        let mut m = good;
        m[51] = b'0';
        assert_eq!(PingpongDest::decode(&m), Err(KeyError::MissingNul));
        let mut m = good;
        m[11] = b'-';
        assert_eq!(PingpongDest::decode(&m), Err(KeyError::BadSeparator { offset: 11, found: b'-' }));
        let mut m = good;
        m[30] = b'x';
        assert!(matches!(PingpongDest::decode(&m), Err(KeyError::BadHex { field: KeyField::Gid(5), offset: 30, .. })));
        // A GID written with colons (not what rc_pingpong sends) is refused.
        let colon = b"0000:000021:59dfd7:0000:0000:0000:0000:0000:ffff:0a\0";
        assert_eq!(colon.len(), 52);
        assert!(PingpongDest::decode(colon).is_err());
        // Uppercase hex is fine (sscanf %x).
        let upper = b"0000:00002A:59DFD7:00000000000000000000FFFF0A01103E\0";
        assert_eq!(PingpongDest::decode(upper).unwrap().qpn, 0x2a);
    }
}
