//! The fixed-size binary/text messages of perftest's exchange other than the keys: the
//! version string, the sys-data integers, the MTU string and the bandwidth report.
//!
//! Contract: every `encode` produces the exact bytes perftest writes; every `decode` takes the
//! exact bytes perftest reads (it always reads the size it expects, see the module doc of
//! [`crate::perftest`]) and returns a typed [`MsgError`] for anything perftest could not have
//! sent. Nothing here panics on any input.

use core::fmt;

/// `MAX_VERSION` (perftest_parameters.h): the version buffer is 16 bytes, sent whole.
pub const VERSION_LEN: usize = 16;
/// Size of each sys-data integer (`sizeof(int)`), sent big-endian (`hton_int`).
pub const SYS_DATA_LEN: usize = 4;
/// Size of the MTU message when the remote version is >= 5.31 (`sizeof(char[2])`).
pub const MTU_LEN: usize = 2;
/// Size of each bandwidth-report field (`unsigned long` / `uint64_t` / `double`, LP64).
pub const REPORT_FIELD_LEN: usize = 8;
/// The `"done"` string perftest <= 6.16 writes (with its NUL) after the close handshake.
pub const DONE: &[u8; 5] = b"done\0";

/// A malformed fixed-size message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MsgError {
    /// The version string has no number at its start (C `atof` would give 0).
    VersionNotANumber {
        /// The bytes received, up to the first NUL.
        text: Vec<u8>,
    },
    /// A configured version string that cannot be sent (empty, too long, not ASCII, not a number).
    BadOwnVersion(String),
    /// The MTU message is not an `enum ibv_mtu` value 1..=5 printed with `%d`.
    BadMtu {
        /// The 2 bytes received.
        bytes: [u8; 2],
    },
    /// A sys-data value that is zero or negative.
    BadSysData {
        /// `"cycle_buffer"` or `"cache_line_size"`.
        field: &'static str,
        /// The value received.
        value: i32,
    },
}

impl fmt::Display for MsgError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MsgError::VersionNotANumber { text } => {
                write!(f, "version string {:?} is not a number", String::from_utf8_lossy(text))
            }
            MsgError::BadOwnVersion(s) => write!(f, "cannot advertise version string {s:?}"),
            MsgError::BadMtu { bytes } => {
                write!(f, "MTU message {bytes:02x?} is not \"1\"..\"5\" + NUL")
            }
            MsgError::BadSysData { field, value } => write!(f, "{field} {value} is not positive"),
        }
    }
}

impl std::error::Error for MsgError {}

/// A perftest protocol version string (the `VERSION` of perftest's `configure.ac`, e.g. "6.24"
/// for the 25.01.0-0.80 release), with the comparisons perftest makes on it.
///
/// perftest compares versions as numbers: `atof(rem_version)` against constants such as 5.70
/// or 6.28, sometimes through a `float` (`check_mtu`, `xchg_bw_reports`). So "6.3" counts as
/// 6.30, above 6.28. [`PerftestVersion::value`] reproduces `atof`.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct PerftestVersion {
    raw: [u8; VERSION_LEN],
}

impl fmt::Debug for PerftestVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PerftestVersion({:?})", String::from_utf8_lossy(self.text()))
    }
}

impl fmt::Display for PerftestVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&String::from_utf8_lossy(self.text()))
    }
}

impl PerftestVersion {
    /// What uroce advertises by default, as client and as server: "6.24", byte for byte what
    /// Debian trixie's perftest 25.01.0+0.80 sends. See the module doc of [`crate::perftest`]
    /// for why every stock perftest from 5.70 (incl. bookworm's "6.06") to 6.29 accepts it.
    pub const UROCE_DEFAULT: &'static str = "6.24";
    /// `check_version_compatibility`: perftest exits when the remote version is below this.
    pub const MIN_COMPATIBLE: f64 = 5.70;
    /// `negotiate_params` (perftest >= 6.28) runs only when the remote version is >= this.
    // 6.28 is perftest's constant, not an approximation of tau.
    #[allow(clippy::approx_constant)]
    pub const NEGOTIATION_FROM: f64 = 6.28;
    /// perftest up to 6.16 writes `"done\0"` after the close handshake; 6.17 (23.10.0-0.29,
    /// commit dbf395e) removed it.
    pub const NO_DONE_FROM: f64 = 6.17;

    /// A version string to advertise. Must be ASCII, 1..=15 bytes, start with a number.
    pub fn new(text: &str) -> Result<Self, MsgError> {
        let b = text.as_bytes();
        if b.is_empty() || b.len() >= VERSION_LEN || !text.is_ascii() || b.contains(&0) {
            return Err(MsgError::BadOwnVersion(text.to_owned()));
        }
        let mut raw = [0u8; VERSION_LEN];
        raw[..b.len()].copy_from_slice(b);
        let v = PerftestVersion { raw };
        if atof(v.text()).is_none() {
            return Err(MsgError::BadOwnVersion(text.to_owned()));
        }
        Ok(v)
    }

    /// uroce's default ("6.24").
    pub fn uroce_default() -> Self {
        // UROCE_DEFAULT is a valid constant; fall back to a literal construction anyway.
        Self::new(Self::UROCE_DEFAULT).unwrap_or(PerftestVersion { raw: *b"6.24\0\0\0\0\0\0\0\0\0\0\0\0" })
    }

    /// The 16 bytes perftest writes: `strncpy(version, VERSION, 16)`, NUL padded.
    pub fn encode(&self) -> [u8; VERSION_LEN] {
        self.raw
    }

    /// Decode the peer's 16 bytes. Fails when `atof` would not find a number.
    pub fn decode(raw: &[u8; VERSION_LEN]) -> Result<Self, MsgError> {
        let v = PerftestVersion { raw: *raw };
        if atof(v.text()).is_none() {
            return Err(MsgError::VersionNotANumber { text: v.text().to_vec() });
        }
        Ok(v)
    }

    /// The text up to the first NUL (all 16 bytes if there is none).
    pub fn text(&self) -> &[u8] {
        let end = self.raw.iter().position(|&b| b == 0).unwrap_or(VERSION_LEN);
        &self.raw[..end]
    }

    /// `atof(version)`.
    pub fn value(&self) -> f64 {
        atof(self.text()).unwrap_or(0.0)
    }

    /// What a peer checks in `check_version_compatibility` (exit if `atof(remote) < 5.70`).
    pub fn is_compatible(&self) -> bool {
        self.value() >= Self::MIN_COMPATIBLE
    }

    /// Whether a perftest peer >= 6.28 would run `negotiate_params` against this version.
    pub fn triggers_negotiation(&self) -> bool {
        self.value() >= Self::NEGOTIATION_FROM
    }

    /// Whether perftest of this version writes `"done\0"` after the close handshake.
    pub fn sends_done(&self) -> bool {
        self.value() < Self::NO_DONE_FROM
    }

    /// `check_sys_data` runs when the remote version is >= 5.32.
    pub fn exchanges_sys_data(&self) -> bool {
        self.value() >= 5.32
    }

    /// MTU message size `check_mtu` uses for this remote version (`float rem_vers`):
    /// 2 bytes from 5.31, 4 before, none below 5.1.
    pub fn mtu_len(&self) -> Option<usize> {
        let v = self.value() as f32;
        if f64::from(v) >= 5.1 {
            Some(if f64::from(v) >= 5.31 { 2 } else { 4 })
        } else {
            None
        }
    }

    /// Size of the report's `iters` field for this remote version (`xchg_bw_reports`,
    /// `float remote_version >= 5.33`): 8, else 4.
    pub fn report_iters_len(&self) -> usize {
        if f64::from(self.value() as f32) >= 5.33 {
            8
        } else {
            4
        }
    }
}

/// C `atof` on a byte string: leading white space, then the longest prefix that is a decimal
/// floating-point number. `None` when there is no digit at all (atof returns 0 then).
fn atof(b: &[u8]) -> Option<f64> {
    let mut i = 0;
    while i < b.len() && matches!(b[i], b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c) {
        i += 1;
    }
    let start = i;
    if i < b.len() && matches!(b[i], b'+' | b'-') {
        i += 1;
    }
    let int_start = i;
    while i < b.len() && b[i].is_ascii_digit() {
        i += 1;
    }
    let mut digits = i - int_start;
    if i < b.len() && b[i] == b'.' {
        i += 1;
        let f = i;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        digits += i - f;
    }
    if digits == 0 {
        return None;
    }
    let mut end = i;
    if i < b.len() && matches!(b[i], b'e' | b'E') {
        let mut j = i + 1;
        if j < b.len() && matches!(b[j], b'+' | b'-') {
            j += 1;
        }
        let e = j;
        while j < b.len() && b[j].is_ascii_digit() {
            j += 1;
        }
        if j > e {
            end = j;
        }
    }
    core::str::from_utf8(&b[start..end]).ok()?.parse::<f64>().ok()
}

/// `enum ibv_mtu`: the path MTU as perftest exchanges it (`"%d"` of the enum value).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum IbMtu {
    /// 256 bytes (IBV_MTU_256 = 1).
    Mtu256 = 1,
    /// 512 bytes.
    Mtu512 = 2,
    /// 1024 bytes (rxe on a 1500-byte Ethernet).
    Mtu1024 = 3,
    /// 2048 bytes.
    Mtu2048 = 4,
    /// 4096 bytes.
    Mtu4096 = 5,
}

impl IbMtu {
    /// From the enum value 1..=5.
    pub fn from_enum(v: u8) -> Option<Self> {
        Some(match v {
            1 => IbMtu::Mtu256,
            2 => IbMtu::Mtu512,
            3 => IbMtu::Mtu1024,
            4 => IbMtu::Mtu2048,
            5 => IbMtu::Mtu4096,
            _ => return None,
        })
    }
    /// From a size in bytes (256, 512, 1024, 2048, 4096).
    pub fn from_bytes(n: u32) -> Option<Self> {
        match n {
            256 => Some(IbMtu::Mtu256),
            512 => Some(IbMtu::Mtu512),
            1024 => Some(IbMtu::Mtu1024),
            2048 => Some(IbMtu::Mtu2048),
            4096 => Some(IbMtu::Mtu4096),
            _ => None,
        }
    }
    /// Size in bytes.
    pub fn bytes(self) -> u32 {
        128u32 << (self as u32)
    }
    /// The 2-byte message (`sprintf(cur, "%d", mtu)`, 2 bytes sent): e.g. `b"3\0"`.
    pub fn encode(self) -> [u8; MTU_LEN] {
        [b'0' + self as u8, 0]
    }
    /// Decode the peer's 2 bytes. perftest's reader (`strtol(rem, NULL, 10)`) would ignore a
    /// value outside 1..=5 and keep its own; a peer that sends one is not perftest, so it is
    /// refused here.
    pub fn decode(b: [u8; MTU_LEN]) -> Result<Self, MsgError> {
        if b[1] != 0 {
            return Err(MsgError::BadMtu { bytes: b });
        }
        b[0].checked_sub(b'0').and_then(IbMtu::from_enum).ok_or(MsgError::BadMtu { bytes: b })
    }
}

/// `struct bw_report_data` as exchanged by `xchg_bw_reports`: each field is its own 8-byte,
/// big-endian, lock-step exchange, in this order: size, iters, bw_peak, bw_avg, msgRate_avg,
/// then (only with `--report-per-port` on both sides) bw_avg_p1, msgRate_avg_p1, bw_avg_p2,
/// msgRate_avg_p2.
///
/// Units (perftest `calc_bw`): bandwidth in MiB/s (`report_fmt` MBS, factor 0x100000) or
/// Gbit/s (`--report_gbits`, factor 125000000); message rate in Mpps. In unidirectional tests
/// the *server* prints the *client's* report as its result (`print_full_bw_report(&rem_bw_rep)`),
/// in the server's unit, and the server's own report is uninitialised stack memory.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct BwReport {
    /// Message size in bytes.
    pub size: u64,
    /// Iterations (completed messages over all QPs).
    pub iters: u64,
    /// Peak bandwidth.
    pub bw_peak: f64,
    /// Average bandwidth.
    pub bw_avg: f64,
    /// Average message rate (Mpps).
    pub msg_rate_avg: f64,
    /// Per-port figures (`--report-per-port`).
    pub per_port: Option<PerPortReport>,
}

/// The `--report-per-port` part of [`BwReport`].
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PerPortReport {
    /// Port 1 average bandwidth.
    pub bw_avg_p1: f64,
    /// Port 1 message rate.
    pub msg_rate_avg_p1: f64,
    /// Port 2 average bandwidth.
    pub bw_avg_p2: f64,
    /// Port 2 message rate.
    pub msg_rate_avg_p2: f64,
}

/// The fields of [`BwReport`] in wire order, for error reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReportField {
    /// size
    Size,
    /// iters
    Iters,
    /// bw_peak
    BwPeak,
    /// bw_avg
    BwAvg,
    /// msgRate_avg
    MsgRateAvg,
    /// bw_avg_p1
    BwAvgP1,
    /// msgRate_avg_p1
    MsgRateAvgP1,
    /// bw_avg_p2
    BwAvgP2,
    /// msgRate_avg_p2
    MsgRateAvgP2,
}

impl BwReport {
    /// The fields exchanged, in wire order, with their 8-byte big-endian encodings.
    pub fn encode_fields(&self, per_port: bool) -> Vec<(ReportField, [u8; REPORT_FIELD_LEN])> {
        let mut v = vec![
            (ReportField::Size, self.size.to_be_bytes()),
            (ReportField::Iters, self.iters.to_be_bytes()),
            (ReportField::BwPeak, self.bw_peak.to_bits().to_be_bytes()),
            (ReportField::BwAvg, self.bw_avg.to_bits().to_be_bytes()),
            (ReportField::MsgRateAvg, self.msg_rate_avg.to_bits().to_be_bytes()),
        ];
        if per_port {
            let p = self.per_port.unwrap_or_default();
            v.extend([
                (ReportField::BwAvgP1, p.bw_avg_p1.to_bits().to_be_bytes()),
                (ReportField::MsgRateAvgP1, p.msg_rate_avg_p1.to_bits().to_be_bytes()),
                (ReportField::BwAvgP2, p.bw_avg_p2.to_bits().to_be_bytes()),
                (ReportField::MsgRateAvgP2, p.msg_rate_avg_p2.to_bits().to_be_bytes()),
            ]);
        }
        v
    }

    /// Set one field from its 8 received bytes.
    pub fn set_field(&mut self, f: ReportField, b: [u8; REPORT_FIELD_LEN]) {
        let u = u64::from_be_bytes(b);
        let d = f64::from_bits(u);
        match f {
            ReportField::Size => self.size = u,
            ReportField::Iters => self.iters = u,
            ReportField::BwPeak => self.bw_peak = d,
            ReportField::BwAvg => self.bw_avg = d,
            ReportField::MsgRateAvg => self.msg_rate_avg = d,
            ReportField::BwAvgP1 => self.per_port.get_or_insert_with(Default::default).bw_avg_p1 = d,
            ReportField::MsgRateAvgP1 => self.per_port.get_or_insert_with(Default::default).msg_rate_avg_p1 = d,
            ReportField::BwAvgP2 => self.per_port.get_or_insert_with(Default::default).bw_avg_p2 = d,
            ReportField::MsgRateAvgP2 => self.per_port.get_or_insert_with(Default::default).msg_rate_avg_p2 = d,
        }
    }

    /// Decode a whole report from its concatenated fields (5 x 8 or 9 x 8 bytes).
    pub fn decode(b: &[u8]) -> Option<BwReport> {
        let per_port = match b.len() {
            40 => false,
            72 => true,
            _ => return None,
        };
        let mut r = BwReport::default();
        let order = BwReport::default().encode_fields(per_port);
        for ((f, _), chunk) in order.into_iter().zip(b.chunks_exact(REPORT_FIELD_LEN)) {
            let mut a = [0u8; REPORT_FIELD_LEN];
            a.copy_from_slice(chunk);
            r.set_field(f, a);
        }
        Some(r)
    }
}

/// Bandwidth units perftest reports in (the `report_fmt` of both sides must agree, since
/// the server prints the client's numbers).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReportUnit {
    /// MiB/s (perftest's default "MB/sec", 1 MB = 0x100000 bytes).
    MiBps,
    /// Gbit/s (`--report_gbits`, 1 Gb = 125000000 bytes).
    Gbps,
}

impl ReportUnit {
    /// Bytes per unit (perftest `format_factor`).
    pub fn factor(self) -> f64 {
        match self {
            ReportUnit::MiBps => 1_048_576.0,
            ReportUnit::Gbps => 125_000_000.0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_bytes_and_comparisons() {
        let v = PerftestVersion::uroce_default();
        assert_eq!(&v.encode(), b"6.24\0\0\0\0\0\0\0\0\0\0\0\0");
        assert!(v.is_compatible());
        assert!(!v.triggers_negotiation());
        assert!(!v.sends_done());
        let old = PerftestVersion::decode(b"6.06\0\0\0\0\0\0\0\0\0\0\0\0").unwrap();
        assert!(old.is_compatible() && old.sends_done() && !old.triggers_negotiation());
        let new = PerftestVersion::new("6.29").unwrap();
        assert!(new.triggers_negotiation() && !new.sends_done());
        // atof semantics: "6.3" is 6.30 > 6.28; "6.27" is below.
        assert!(PerftestVersion::new("6.3").unwrap().triggers_negotiation());
        assert!(!PerftestVersion::new("6.27").unwrap().triggers_negotiation());
        assert!(!PerftestVersion::new("5.6").unwrap().is_compatible());
        assert!(PerftestVersion::new("5.70").unwrap().is_compatible());
        assert!(PerftestVersion::new("6.16").unwrap().sends_done());
        assert!(!PerftestVersion::new("6.17").unwrap().sends_done());
        // Sizes derived from the remote version (all fixed for any compatible version).
        assert_eq!(v.mtu_len(), Some(2));
        assert_eq!(v.report_iters_len(), 8);
        assert!(v.exchanges_sys_data());
        // The float comparison quirk: (float)5.33 < 5.33, so "5.33" still gets 4-byte iters.
        assert_eq!(PerftestVersion::new("5.33").unwrap().report_iters_len(), 4);
        assert_eq!(PerftestVersion::new("5.34").unwrap().report_iters_len(), 8);
    }

    #[test]
    fn version_decode_is_lenient_like_atof_but_typed() {
        let mut raw = [b'x'; 16];
        assert!(matches!(PerftestVersion::decode(&raw), Err(MsgError::VersionNotANumber { .. })));
        raw = [0; 16];
        assert!(PerftestVersion::decode(&raw).is_err());
        // No NUL at all: all 16 bytes are the text.
        raw = *b"6.24000000000000";
        let v = PerftestVersion::decode(&raw).unwrap();
        assert_eq!(v.text().len(), 16);
        assert!((v.value() - 6.24).abs() < 1e-9);
        // Leading blanks and trailing junk, as atof allows.
        raw = *b"  6.20-beta\0\0\0\0\0";
        assert!((PerftestVersion::decode(&raw).unwrap().value() - 6.20).abs() < 1e-9);
        for bad in ["", "x6", "1234567890123456", "6.2\u{e9}"] {
            assert!(PerftestVersion::new(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn mtu_messages() {
        assert_eq!(IbMtu::Mtu1024.encode(), *b"3\0");
        assert_eq!(IbMtu::decode(*b"3\0"), Ok(IbMtu::Mtu1024));
        assert_eq!(IbMtu::decode(*b"5\0"), Ok(IbMtu::Mtu4096));
        for bad in [*b"0\0", *b"6\0", *b"33", *b"\0\0", *b"a\0", [0xff, 0]] {
            assert_eq!(IbMtu::decode(bad), Err(MsgError::BadMtu { bytes: bad }));
        }
        assert_eq!(IbMtu::Mtu256.bytes(), 256);
        assert_eq!(IbMtu::Mtu4096.bytes(), 4096);
        assert_eq!(IbMtu::from_bytes(1024), Some(IbMtu::Mtu1024));
        assert_eq!(IbMtu::from_bytes(1500), None);
        assert!(IbMtu::Mtu1024 < IbMtu::Mtu4096);
    }

    /// The client report recorded in the RECIPE's write_bw capture (perftest 4.5).
    #[test]
    fn report_fields_match_recorded_bytes() {
        let b =
            hex8(&["0000000000001000", "0000000000000014", "3fa503fdf932556e", "3f9da9ddc8fef3cc", "3f4cf7e29648fa15"]);
        let r = BwReport::decode(&b).unwrap();
        assert_eq!(r.size, 4096);
        assert_eq!(r.iters, 20);
        assert!((r.bw_peak - 0.0410).abs() < 5e-5, "{}", r.bw_peak);
        assert!((r.bw_avg - 0.0290).abs() < 5e-5);
        assert!((r.msg_rate_avg - 0.000884).abs() < 5e-7);
        let enc: Vec<u8> = r.encode_fields(false).into_iter().flat_map(|(_, b)| b).collect();
        assert_eq!(enc, b);
        assert!(BwReport::decode(&b[..39]).is_none());
        let pp = BwReport { per_port: Some(PerPortReport { bw_avg_p1: 1.5, ..Default::default() }), ..r };
        let enc: Vec<u8> = pp.encode_fields(true).into_iter().flat_map(|(_, b)| b).collect();
        assert_eq!(enc.len(), 72);
        assert_eq!(BwReport::decode(&enc), Some(pp));
    }

    fn hex8(v: &[&str]) -> Vec<u8> {
        v.iter().flat_map(|s| (0..8).map(move |i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap())).collect()
    }
}
