//! perftest's connection-key message (`struct pingpong_dest` as text): every format perftest
//! has used, with exact sizes including the trailing NUL.
//!
//! Contract: [`KeyFormat::encode`] produces exactly the bytes `sprintf(msg, FMT, ...)` leaves in
//! perftest's `char msg[KEY_MSG_SIZE*]` buffer (which is written whole, NUL included);
//! [`KeyFormat::decode`] accepts exactly those messages and returns a typed [`KeyError`] for
//! anything else (wrong length, missing NUL, bad separator, non-hex digit). It never panics.
//! Hex digits are accepted in either case (perftest's reader uses `strtol(.., 16)`), but every
//! field must have the exact width the writer's `%0Nx` produces.

use core::fmt;

/// One QP's connection data as perftest exchanges it (`struct pingpong_dest`,
/// perftest `src/perftest_resources.h`).
///
/// Field meanings (perftest `set_up_connection`, `ctx_connect`, 25.01.0-0.80):
/// * `psn` is the sender's *initial send PSN* (`lrand48() & 0xffffff`); the peer uses it as its
///   `rq_psn`.
/// * `out_reads` is the sender's responder depth (its `max_dest_rd_atomic`); the peer uses the
///   value it *receives* as its own `max_rd_atomic` (initiator depth) — `ctx_modify_qp_to_rts`
///   sets `attr->max_rd_atomic = dest->out_reads`. 1 for write/send tests; for read/atomic the
///   device's `max_qp_rd_atom` (128 on rxe, 16 on ConnectX).
/// * `rkey`/`vaddr`: the sender's buffer, the target of the peer's RDMA WRITE/READ/atomics.
/// * `srqn`: XRC/DC SRQ number, 0 for RC.
/// * `tail_markers_vaddr`: only in the `_DV` forms (`--data_validation`, perftest >= 6.29).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct PerftestDest {
    /// LID (0 on RoCE).
    pub lid: u16,
    /// Outstanding RDMA READ / atomic operations the sender accepts as responder.
    pub out_reads: u16,
    /// QP number (24 bits).
    pub qpn: u32,
    /// Initial send PSN of the sender (24 bits).
    pub psn: u32,
    /// R_Key of the sender's buffer.
    pub rkey: u32,
    /// Virtual address of the sender's buffer.
    pub vaddr: u64,
    /// GID (raw network-order bytes) at the sender's `-x` index.
    pub gid: [u8; 16],
    /// SRQ number (XRC/DC), 0 for RC.
    pub srqn: u32,
    /// Data-validation tail markers address (`_DV` formats only, otherwise 0).
    pub tail_markers_vaddr: u64,
}

impl PerftestDest {
    /// True when the GID is an IPv4-mapped IPv6 address (`::ffff:a.b.c.d`), i.e. RoCEv2 over
    /// IPv4 (perftest `ipv6_addr_v4mapped`, used by `ctx_check_gid_compatibility`).
    pub fn gid_is_v4_mapped(&self) -> bool {
        self.gid[..10].iter().all(|&b| b == 0) && self.gid[10] == 0xff && self.gid[11] == 0xff
    }
}

/// The key-message formats perftest has used on its TCP socket.
///
/// | variant | `sprintf` format | size | where |
/// | --- | --- | --- | --- |
/// | `Plain` | `KEY_PRINT_FMT` `%04x:%04x:%06x:%06x:%08x:%016llx:%08x` | 59 | since 2013 (19d98c8), gid_index == -1 (IB without `-x`) |
/// | `Gid` | `KEY_PRINT_FMT_GID` = above with 16 `%02x:` before `%08x:` | 108 | **RoCE** (perftest 4.5 .. 6.29) |
/// | `Dv` | `KEY_PRINT_FMT_DV` (+ `%016llx` tail markers before srqn) | 76 | `--data_validation`, perftest >= 6.29 |
/// | `GidDv` | `KEY_PRINT_FMT_GID_DV` | 125 | `--data_validation` with a GID |
/// | `Legacy` | `%04x:%04x:%06x:%06x:%08x:%016Lx` (no srqn) | 50 | 2010-2013 |
/// | `LegacyGid` | above + 16 `:%02x` (no trailing colon) | 98 | 2010-2013 |
/// | `Original` | `%04x:%06x:%06x:%08x:%016Lx` (no out_reads) | 45 | ae65c60 (2010) |
/// | `OriginalGid` | above + 16 `:%02x` | 93 | ae65c60 (2010) |
///
/// Sizes include the trailing NUL: perftest writes `sizeof msg` bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KeyFormat {
    /// `KEY_PRINT_FMT`, 59 bytes.
    Plain,
    /// `KEY_PRINT_FMT_GID`, 108 bytes: what perftest sends on RoCE.
    Gid,
    /// `KEY_PRINT_FMT_DV`, 76 bytes.
    Dv,
    /// `KEY_PRINT_FMT_GID_DV`, 125 bytes.
    GidDv,
    /// Pre-XRC `KEY_PRINT_FMT` without srqn, 50 bytes.
    Legacy,
    /// Pre-XRC `KEY_PRINT_FMT_GID`, 98 bytes.
    LegacyGid,
    /// The 2010 format without out_reads, 45 bytes.
    Original,
    /// The 2010 GID format, 93 bytes.
    OriginalGid,
}

/// The fields of a key message, for error reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KeyField {
    /// LID.
    Lid,
    /// out_reads.
    OutReads,
    /// QPN.
    Qpn,
    /// PSN.
    Psn,
    /// R_Key.
    Rkey,
    /// Virtual address.
    Vaddr,
    /// Tail markers address (DV).
    TailMarkers,
    /// GID byte `n`.
    Gid(u8),
    /// SRQ number.
    Srqn,
}

impl fmt::Display for KeyField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyField::Lid => f.write_str("LID"),
            KeyField::OutReads => f.write_str("out_reads"),
            KeyField::Qpn => f.write_str("QPN"),
            KeyField::Psn => f.write_str("PSN"),
            KeyField::Rkey => f.write_str("RKey"),
            KeyField::Vaddr => f.write_str("VAddr"),
            KeyField::TailMarkers => f.write_str("tail_markers_vaddr"),
            KeyField::Gid(n) => write!(f, "GID[{n}]"),
            KeyField::Srqn => f.write_str("SRQn"),
        }
    }
}

/// Why a key message could not be encoded or decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyError {
    /// The message is not exactly the format's size.
    WrongLength {
        /// The format's size (NUL included).
        expected: usize,
        /// What was given.
        got: usize,
    },
    /// The last byte is not NUL.
    MissingNul,
    /// A separator `:` was expected at `offset`.
    BadSeparator {
        /// Byte offset in the message.
        offset: usize,
        /// The byte found there.
        found: u8,
    },
    /// A non-hex character inside a field.
    BadHex {
        /// The field.
        field: KeyField,
        /// Byte offset in the message.
        offset: usize,
        /// The byte found there.
        found: u8,
    },
    /// Encoding: a value does not fit the field's printed width (QPN and PSN are 24-bit).
    ValueTooWide {
        /// The field.
        field: KeyField,
        /// The value.
        value: u64,
    },
}

impl fmt::Display for KeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyError::WrongLength { expected, got } => {
                write!(f, "key message is {got} bytes, expected {expected}")
            }
            KeyError::MissingNul => f.write_str("key message does not end with NUL"),
            KeyError::BadSeparator { offset, found } => {
                write!(f, "expected ':' at offset {offset}, found byte 0x{found:02x}")
            }
            KeyError::BadHex { field, offset, found } => {
                write!(f, "non-hex byte 0x{found:02x} in {field} at offset {offset}")
            }
            KeyError::ValueTooWide { field, value } => {
                write!(f, "{field} value 0x{value:x} does not fit its printed width")
            }
        }
    }
}

impl std::error::Error for KeyError {}

/// How the fields are laid out in one format.
struct Layout {
    out_reads: bool,
    srqn: bool,
    tail_markers: bool,
    gid: bool,
    /// The GID forms since 2013 end with `":"` after the last field.
    trailing_colon: bool,
}

impl KeyFormat {
    /// Every format, for tests and tools.
    pub const ALL: [KeyFormat; 8] = [
        KeyFormat::Plain,
        KeyFormat::Gid,
        KeyFormat::Dv,
        KeyFormat::GidDv,
        KeyFormat::Legacy,
        KeyFormat::LegacyGid,
        KeyFormat::Original,
        KeyFormat::OriginalGid,
    ];

    /// Message size on the wire, trailing NUL included (`KEY_MSG_SIZE*`).
    pub const fn wire_len(self) -> usize {
        match self {
            KeyFormat::Plain => 59,
            KeyFormat::Gid => 108,
            KeyFormat::Dv => 76,
            KeyFormat::GidDv => 125,
            KeyFormat::Legacy => 50,
            KeyFormat::LegacyGid => 98,
            KeyFormat::Original => 45,
            KeyFormat::OriginalGid => 93,
        }
    }

    /// Whether the format carries the GID.
    pub const fn has_gid(self) -> bool {
        self.layout().gid
    }

    const fn layout(self) -> Layout {
        let (out_reads, srqn, tail_markers, gid, trailing_colon) = match self {
            KeyFormat::Plain => (true, true, false, false, false),
            KeyFormat::Gid => (true, true, false, true, true),
            KeyFormat::Dv => (true, true, true, false, false),
            KeyFormat::GidDv => (true, true, true, true, true),
            KeyFormat::Legacy => (true, false, false, false, false),
            KeyFormat::LegacyGid => (true, false, false, true, false),
            KeyFormat::Original => (false, false, false, false, false),
            KeyFormat::OriginalGid => (false, false, false, true, false),
        };
        Layout { out_reads, srqn, tail_markers, gid, trailing_colon }
    }

    /// The (field, printed width) sequence of this format.
    fn fields(self) -> impl Iterator<Item = (KeyField, usize)> {
        let l = self.layout();
        let head = [
            Some((KeyField::Lid, 4)),
            l.out_reads.then_some((KeyField::OutReads, 4)),
            Some((KeyField::Qpn, 6)),
            Some((KeyField::Psn, 6)),
            Some((KeyField::Rkey, 8)),
            Some((KeyField::Vaddr, 16)),
            l.tail_markers.then_some((KeyField::TailMarkers, 16)),
        ];
        let gid = (0..16u8).filter(move |_| l.gid).map(|i| (KeyField::Gid(i), 2));
        let tail = l.srqn.then_some((KeyField::Srqn, 8));
        head.into_iter().flatten().chain(gid).chain(tail)
    }

    /// Encode `d` exactly as perftest's `ethernet_write_keys` does (`sprintf` into a
    /// `char msg[len]`, the whole buffer written, NUL included). Fields the format lacks are
    /// not sent. Fails only when QPN or PSN exceed 24 bits (perftest would overflow its buffer).
    pub fn encode(self, d: &PerftestDest) -> Result<Vec<u8>, KeyError> {
        use std::fmt::Write as _;
        let mut s = String::with_capacity(self.wire_len());
        let l = self.layout();
        let mut first = true;
        for (field, width) in self.fields() {
            let v = field_value(d, field);
            if width < 16 && v >> (4 * width) != 0 {
                return Err(KeyError::ValueTooWide { field, value: v });
            }
            if !first {
                s.push(':');
            }
            first = false;
            // Writing to a String cannot fail.
            let _ = write!(s, "{v:0width$x}");
        }
        if l.trailing_colon {
            s.push(':');
        }
        let mut out = s.into_bytes();
        out.push(0);
        debug_assert_eq!(out.len(), self.wire_len());
        Ok(out)
    }

    /// Decode a key message of this format. Fields the format lacks are 0.
    pub fn decode(self, msg: &[u8]) -> Result<PerftestDest, KeyError> {
        if msg.len() != self.wire_len() {
            return Err(KeyError::WrongLength { expected: self.wire_len(), got: msg.len() });
        }
        let body = &msg[..msg.len() - 1];
        if msg[msg.len() - 1] != 0 {
            return Err(KeyError::MissingNul);
        }
        let mut d = PerftestDest::default();
        let mut pos = 0usize;
        let mut first = true;
        for (field, width) in self.fields() {
            if !first {
                expect_colon(body, pos)?;
                pos += 1;
            }
            first = false;
            let v = parse_hex(body, pos, width, field)?;
            set_field(&mut d, field, v);
            pos += width;
        }
        if self.layout().trailing_colon {
            expect_colon(body, pos)?;
            pos += 1;
        }
        // The layout's widths add up to len - 1, so nothing can be left over; keep the check
        // as a guard against a layout edit that breaks the sum.
        if pos != body.len() {
            return Err(KeyError::WrongLength { expected: pos + 1, got: msg.len() });
        }
        Ok(d)
    }
}

fn field_value(d: &PerftestDest, f: KeyField) -> u64 {
    match f {
        KeyField::Lid => d.lid.into(),
        KeyField::OutReads => d.out_reads.into(),
        KeyField::Qpn => d.qpn.into(),
        KeyField::Psn => d.psn.into(),
        KeyField::Rkey => d.rkey.into(),
        KeyField::Vaddr => d.vaddr,
        KeyField::TailMarkers => d.tail_markers_vaddr,
        KeyField::Gid(i) => d.gid[usize::from(i) & 15].into(),
        KeyField::Srqn => d.srqn.into(),
    }
}

// Widths guarantee the value fits the target type (4 hex digits -> u16, 8 -> u32, 2 -> u8).
fn set_field(d: &mut PerftestDest, f: KeyField, v: u64) {
    match f {
        KeyField::Lid => d.lid = v as u16,
        KeyField::OutReads => d.out_reads = v as u16,
        KeyField::Qpn => d.qpn = v as u32,
        KeyField::Psn => d.psn = v as u32,
        KeyField::Rkey => d.rkey = v as u32,
        KeyField::Vaddr => d.vaddr = v,
        KeyField::TailMarkers => d.tail_markers_vaddr = v,
        KeyField::Gid(i) => d.gid[usize::from(i) & 15] = v as u8,
        KeyField::Srqn => d.srqn = v as u32,
    }
}

fn expect_colon(body: &[u8], pos: usize) -> Result<(), KeyError> {
    match body.get(pos) {
        Some(b':') => Ok(()),
        Some(&found) => Err(KeyError::BadSeparator { offset: pos, found }),
        None => Err(KeyError::BadSeparator { offset: pos, found: 0 }),
    }
}

/// Parse `width` hex digits at `pos` (width <= 16).
pub(crate) fn parse_hex(body: &[u8], pos: usize, width: usize, field: KeyField) -> Result<u64, KeyError> {
    let mut v = 0u64;
    for i in 0..width {
        let off = pos + i;
        let b = *body.get(off).unwrap_or(&0);
        let nib = match b {
            b'0'..=b'9' => b - b'0',
            b'a'..=b'f' => b - b'a' + 10,
            b'A'..=b'F' => b - b'A' + 10,
            _ => return Err(KeyError::BadHex { field, offset: off, found: b }),
        };
        v = (v << 4) | u64::from(nib);
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> PerftestDest {
        PerftestDest {
            lid: 0,
            out_reads: 1,
            qpn: 0x11,
            psn: 0x9a611b,
            rkey: 0x261,
            vaddr: 0x5586_7221_b000,
            gid: [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 77, 0, 12],
            srqn: 0,
            tail_markers_vaddr: 0,
        }
    }

    /// The exact 108-byte message perftest 4.5 sent in the RECIPE's write_bw capture.
    #[test]
    fn gid_format_matches_recorded_perftest_bytes() {
        let want = b"0000:0001:000011:9a611b:00000261:000055867221b000:00:00:00:00:00:00:00:00:00:00:ff:ff:0a:4d:00:0c:00000000:\0";
        assert_eq!(want.len(), 108);
        let got = KeyFormat::Gid.encode(&sample()).unwrap();
        assert_eq!(got, want.to_vec());
        assert_eq!(KeyFormat::Gid.decode(want).unwrap(), sample());
    }

    #[test]
    fn exact_bytes_of_every_format() {
        let mut d = sample();
        d.srqn = 0xabc;
        d.tail_markers_vaddr = 0x1122_3344_5566_7788;
        d.lid = 0x1234;
        let g = "00:00:00:00:00:00:00:00:00:00:ff:ff:0a:4d:00:0c";
        let cases: [(KeyFormat, String); 8] = [
            (KeyFormat::Plain, "1234:0001:000011:9a611b:00000261:000055867221b000:00000abc".into()),
            (KeyFormat::Gid, format!("1234:0001:000011:9a611b:00000261:000055867221b000:{g}:00000abc:")),
            (KeyFormat::Dv, "1234:0001:000011:9a611b:00000261:000055867221b000:1122334455667788:00000abc".into()),
            (
                KeyFormat::GidDv,
                format!("1234:0001:000011:9a611b:00000261:000055867221b000:1122334455667788:{g}:00000abc:"),
            ),
            (KeyFormat::Legacy, "1234:0001:000011:9a611b:00000261:000055867221b000".into()),
            (KeyFormat::LegacyGid, format!("1234:0001:000011:9a611b:00000261:000055867221b000:{g}")),
            (KeyFormat::Original, "1234:000011:9a611b:00000261:000055867221b000".into()),
            (KeyFormat::OriginalGid, format!("1234:000011:9a611b:00000261:000055867221b000:{g}")),
        ];
        for (f, text) in cases {
            let mut want = text.into_bytes();
            want.push(0);
            assert_eq!(want.len(), f.wire_len(), "{f:?} size");
            let got = f.encode(&d).unwrap();
            assert_eq!(String::from_utf8_lossy(&got), String::from_utf8_lossy(&want), "{f:?}");
            // Round trip: the fields the format carries come back, the others are 0.
            let back = f.decode(&got).unwrap();
            let l = f.layout();
            let mut expect = d;
            if !l.out_reads {
                expect.out_reads = 0;
            }
            if !l.srqn {
                expect.srqn = 0;
            }
            if !l.tail_markers {
                expect.tail_markers_vaddr = 0;
            }
            if !l.gid {
                expect.gid = [0; 16];
            }
            assert_eq!(back, expect, "{f:?}");
        }
    }

    #[test]
    fn sizes_are_perftests_constants() {
        // KEY_MSG_SIZE, _GID, _DV, _GID_DV (perftest_communication.h), the 2013 and 2010 ones.
        let sizes: Vec<usize> = KeyFormat::ALL.iter().map(|f| f.wire_len()).collect();
        assert_eq!(sizes, [59, 108, 76, 125, 50, 98, 45, 93]);
        // sizeof "0000:000000:000000:00000000:0000000000000000" (ae65c60)
        assert_eq!(KeyFormat::Original.wire_len(), "0000:000000:000000:00000000:0000000000000000".len() + 1);
    }

    #[test]
    fn max_values_fill_every_width() {
        let d = PerftestDest {
            lid: 0xffff,
            out_reads: 0xffff,
            qpn: 0xff_ffff,
            psn: 0xff_ffff,
            rkey: u32::MAX,
            vaddr: u64::MAX,
            gid: [0xff; 16],
            srqn: u32::MAX,
            tail_markers_vaddr: u64::MAX,
        };
        for f in KeyFormat::ALL {
            let m = f.encode(&d).unwrap();
            assert_eq!(m.len(), f.wire_len());
            let back = f.decode(&m).unwrap();
            assert_eq!(back.qpn, 0xff_ffff);
            assert_eq!(back.vaddr, u64::MAX);
        }
    }

    #[test]
    fn too_wide_values_are_refused() {
        let mut d = sample();
        d.qpn = 0x100_0000;
        assert_eq!(KeyFormat::Gid.encode(&d), Err(KeyError::ValueTooWide { field: KeyField::Qpn, value: 0x100_0000 }));
        let mut d = sample();
        d.psn = 0x100_0000;
        assert!(matches!(KeyFormat::Plain.encode(&d), Err(KeyError::ValueTooWide { field: KeyField::Psn, .. })));
    }

    #[test]
    fn uppercase_hex_is_accepted() {
        let m = b"0000:0080:00001C:BC3497:00000D48:000062AC533FD000:00:00:00:00:00:00:00:00:00:00:FF:FF:0A:01:10:3D:00000000:\0";
        let d = KeyFormat::Gid.decode(m).unwrap();
        assert_eq!((d.qpn, d.psn, d.rkey, d.vaddr), (0x1c, 0xbc3497, 0xd48, 0x62ac_533f_d000));
        assert_eq!(d.out_reads, 0x80);
        assert!(d.gid_is_v4_mapped());
    }

    #[test]
    fn malformed_messages_give_typed_errors() {
        let good = KeyFormat::Gid.encode(&sample()).unwrap();
        // Every length but the right one.
        for n in [0, 1, 58, 107, 109, 200] {
            let mut m = good.clone();
            m.resize(n, b'0');
            assert_eq!(KeyFormat::Gid.decode(&m), Err(KeyError::WrongLength { expected: 108, got: n }), "len {n}");
        }
        let mut m = good.clone();
        m[107] = b'x';
        assert_eq!(KeyFormat::Gid.decode(&m), Err(KeyError::MissingNul));
        let mut m = good.clone();
        m[4] = b'-';
        assert_eq!(KeyFormat::Gid.decode(&m), Err(KeyError::BadSeparator { offset: 4, found: b'-' }));
        let mut m = good.clone();
        m[10] = b'g';
        assert_eq!(KeyFormat::Gid.decode(&m), Err(KeyError::BadHex { field: KeyField::Qpn, offset: 10, found: b'g' }));
        // The trailing colon of the GID forms is required.
        let mut m = good.clone();
        m[106] = b'0';
        assert_eq!(KeyFormat::Gid.decode(&m), Err(KeyError::BadSeparator { offset: 106, found: b'0' }));
        // An embedded NUL (a shorter C string padded to size) is a hex error, not a short read.
        let mut m = good.clone();
        m[60] = 0;
        assert!(matches!(KeyFormat::Gid.decode(&m), Err(KeyError::BadHex { found: 0, .. })));
        // A message of another format, even of a plausible size, is refused.
        let plain = KeyFormat::Plain.encode(&sample()).unwrap();
        assert!(KeyFormat::Gid.decode(&plain).is_err());
    }

    #[test]
    fn garbage_never_panics() {
        // Deterministic pseudo-random garbage of every size around each format.
        let mut x = 0x1234_5678_9abc_def0u64;
        for f in KeyFormat::ALL {
            for n in 0..f.wire_len() + 3 {
                for _ in 0..20 {
                    let m: Vec<u8> = (0..n)
                        .map(|_| {
                            x ^= x << 13;
                            x ^= x >> 7;
                            x ^= x << 17;
                            b"0123456789abcdef:\0zZ"[(x % 20) as usize]
                        })
                        .collect();
                    let _ = f.decode(&m);
                }
            }
        }
    }

    #[test]
    fn v4_mapped_detection() {
        let mut d = sample();
        assert!(d.gid_is_v4_mapped());
        d.gid = [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x50, 0x54, 0, 0xff, 0xfe, 0x77, 0, 0x0b];
        assert!(!d.gid_is_v4_mapped());
    }
}
