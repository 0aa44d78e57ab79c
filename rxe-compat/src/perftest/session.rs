//! The perftest out-of-band exchange as a state machine over any `Read + Write` stream.
//!
//! Contract:
//! * [`PerftestSession::client`] / [`PerftestSession::server`] run the preamble (version,
//!   sys data, MTU) and return a session in phase [`Phase::Setup`]; then the caller runs, in
//!   order, [`exchange_keys`](PerftestSession::exchange_keys) (before its QPs go to RTR),
//!   [`connected`](PerftestSession::connected) (after RTR/RTS),
//!   [`start`](PerftestSession::start) (after posting receives, right before the measurement)
//!   and [`finish`](PerftestSession::finish) (after the measurement). Each performs exactly
//!   the socket traffic stock perftest performs at that point for the configured test
//!   (non-duplex, RC, `RUN_REGULAR`; see the table in [`crate::perftest`]).
//! * Every message goes out in one `write_all` call (perftest reads each message with a single
//!   `read()` and fails on a short count) and is read with exactly its size.
//! * Every failure is a [`PerftestError`] naming the [`Step`]; a call in the wrong phase is
//!   [`PerftestError::OutOfOrder`]; after any error the session refuses further calls.
//! * Timeouts come from the stream (`TcpStream::set_read_timeout` / `set_write_timeout`);
//!   reach the stream with [`PerftestSession::stream`]. Note that a *server* of a
//!   write/read/atomic bandwidth test or a read/atomic latency test blocks in `finish` until
//!   the client has ended its measurement, like stock perftest.

use std::io::{self, Read, Write};

use super::keys::{KeyError, KeyFormat, PerftestDest};
use super::messages::{
    BwReport, IbMtu, MsgError, PerftestVersion, ReportField, DONE, MTU_LEN, REPORT_FIELD_LEN, SYS_DATA_LEN, VERSION_LEN,
};

/// Which end of the TCP connection this side is (perftest: client = has a server name).
/// The client writes first in every exchange, the server reads first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    /// Connects; writes then reads each message.
    Client,
    /// Accepts; reads then writes each message.
    Server,
}

/// The perftest test being run (both sides must run the same one).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TestKind {
    /// `ib_write_bw`
    WriteBw,
    /// `ib_read_bw`
    ReadBw,
    /// `ib_send_bw`
    SendBw,
    /// `ib_atomic_bw`
    AtomicBw,
    /// `ib_write_lat`
    WriteLat,
    /// `ib_read_lat`
    ReadLat,
    /// `ib_send_lat`
    SendLat,
    /// `ib_atomic_lat`
    AtomicLat,
}

impl TestKind {
    /// Every kind.
    pub const ALL: [TestKind; 8] = [
        TestKind::WriteBw,
        TestKind::ReadBw,
        TestKind::SendBw,
        TestKind::AtomicBw,
        TestKind::WriteLat,
        TestKind::ReadLat,
        TestKind::SendLat,
        TestKind::AtomicLat,
    ];

    /// The perftest binary name.
    pub fn binary(self) -> &'static str {
        match self {
            TestKind::WriteBw => "ib_write_bw",
            TestKind::ReadBw => "ib_read_bw",
            TestKind::SendBw => "ib_send_bw",
            TestKind::AtomicBw => "ib_atomic_bw",
            TestKind::WriteLat => "ib_write_lat",
            TestKind::ReadLat => "ib_read_lat",
            TestKind::SendLat => "ib_send_lat",
            TestKind::AtomicLat => "ib_atomic_lat",
        }
    }

    /// Bandwidth test (as opposed to latency).
    pub fn is_bw(self) -> bool {
        matches!(self, TestKind::WriteBw | TestKind::ReadBw | TestKind::SendBw | TestKind::AtomicBw)
    }

    /// write_lat/read_lat/atomic_lat shake hands once with QP 0's keys before the per-QP loop
    /// (`ctx_hand_shake(&user_comm, my_dest, rem_dest)` before the loop in those mains).
    fn lat_preamble(self) -> bool {
        matches!(self, TestKind::WriteLat | TestKind::ReadLat | TestKind::AtomicLat)
    }

    /// send_bw/send_lat shake hands once with QP 0's keys right after `ctx_connect`.
    fn after_connect(self) -> bool {
        matches!(self, TestKind::SendBw | TestKind::SendLat)
    }

    /// write/read/atomic bw: sync handshake + `xchg_bw_reports` before closing.
    pub fn exchanges_report(self) -> bool {
        matches!(self, TestKind::WriteBw | TestKind::ReadBw | TestKind::AtomicBw)
    }

    /// Every test but write_lat ends with `ctx_close_connection` (one handshake, then, in
    /// perftest <= 6.16, `"done"`); write_lat just exits.
    pub fn has_close_handshake(self) -> bool {
        self != TestKind::WriteLat
    }

    /// The whole exchange as (purpose, QP index) handshakes, for `num_qps` QPs, in order,
    /// with [`Handshake::Report`] standing for the report exchange. For documentation and tests.
    pub fn script(self, num_qps: usize) -> Vec<(Handshake, usize)> {
        let mut v = Vec::new();
        if self.lat_preamble() {
            v.push((Handshake::LatPreamble, 0));
        }
        v.extend((0..num_qps).map(|i| (Handshake::Keys, i)));
        if self.after_connect() {
            v.push((Handshake::AfterConnect, 0));
        }
        v.extend((0..num_qps).map(|i| (Handshake::RemoteKeys, i)));
        v.push((Handshake::Start, 0));
        if self.exchanges_report() {
            v.push((Handshake::Sync, 0));
            v.push((Handshake::Report, 0));
        }
        if self.has_close_handshake() {
            v.push((Handshake::Close, 0));
        }
        v
    }
}

/// Why a key handshake happens (names the step in errors).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Handshake {
    /// Latency tests: QP 0's keys once before the per-QP loop.
    LatPreamble,
    /// The per-QP key exchange before `ctx_connect` (the one that carries information).
    Keys,
    /// send_bw/send_lat: QP 0 right after `ctx_connect`.
    AfterConnect,
    /// The per-QP re-exchange after `ctx_connect` (perftest prints "remote address" here).
    RemoteKeys,
    /// The last barrier before the measurement ("after moving qp to RTR"; for send tests,
    /// after the server posted its receives).
    Start,
    /// write/read/atomic bw: the barrier after the measurement, before the reports.
    Sync,
    /// Stands for the report exchange in [`TestKind::script`]; never a key handshake.
    Report,
    /// `ctx_close_connection`'s handshake.
    Close,
    /// An extra barrier requested with [`PerftestSession::barrier`].
    Barrier,
}

/// The step of the exchange an error happened in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Step {
    /// 16-byte version strings.
    Version,
    /// Sys data: cycle buffer (page size).
    CycleBuffer,
    /// Sys data: cache line size.
    CacheLineSize,
    /// MTU string.
    Mtu,
    /// A key handshake.
    Handshake {
        /// Why.
        purpose: Handshake,
        /// QP index whose keys are exchanged.
        qp: usize,
    },
    /// One field of the bandwidth report.
    Report(ReportField),
    /// Reading the `"done"` of a peer <= 6.16.
    PeerDone,
}

/// The session's phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    /// Preamble done; keys not exchanged yet.
    Setup,
    /// Keys exchanged; the caller moves its QPs to RTR/RTS now.
    KeysExchanged,
    /// Post-connect handshakes done; the caller posts receives (send tests) now.
    Connected,
    /// Start barrier passed; the measurement runs.
    Started,
    /// An error happened; the session is unusable.
    Failed,
}

/// Configuration errors (refused before anything is sent).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConfigError {
    /// Our version must be in [5.70, 6.28): below, the peer exits; from 6.28 a new peer would
    /// run `negotiate_params`, which uroce does not implement.
    UnsupportedOwnVersion(PerftestVersion),
    /// `num_qps` must be >= 1.
    NoQps,
    /// Sys data values must fit a positive `int`.
    BadSysData,
}

/// Everything that can go wrong in the exchange.
#[derive(Debug)]
pub enum PerftestError {
    /// An I/O error other than a timeout or EOF.
    Io {
        /// Where.
        step: Step,
        /// The error.
        source: io::Error,
    },
    /// The stream's read or write timeout expired.
    Timeout {
        /// Where.
        step: Step,
    },
    /// The peer closed the connection in the middle of a message or before it.
    PeerClosed {
        /// Where.
        step: Step,
        /// Bytes of the message received before EOF.
        received: usize,
        /// The message's size.
        expected: usize,
    },
    /// A fixed-size message perftest could not have sent.
    Message {
        /// Where.
        step: Step,
        /// What.
        error: MsgError,
    },
    /// A key message that does not parse (or one of ours that cannot be encoded).
    Key {
        /// Where.
        step: Step,
        /// What.
        error: KeyError,
    },
    /// The peer's version is below 5.70 (perftest `check_version_compatibility` exits too).
    IncompatibleVersion {
        /// The peer's version.
        peer: PerftestVersion,
    },
    /// Refused configuration.
    Config(ConfigError),
    /// A call in the wrong phase.
    OutOfOrder {
        /// The method called.
        call: &'static str,
        /// The phase the session was in.
        phase: Phase,
    },
    /// `exchange_keys` got the wrong number of local keys.
    QpCount {
        /// Configured `num_qps`.
        expected: usize,
        /// Given.
        got: usize,
    },
    /// One side's GID is IPv4-mapped and the other's is not (perftest
    /// `ctx_check_gid_compatibility` fails the same way: "Found Incompatibility issue with
    /// GID types").
    GidTypeMismatch {
        /// Our GID is IPv4-mapped.
        ours_v4_mapped: bool,
        /// The peer's GID is IPv4-mapped.
        peer_v4_mapped: bool,
    },
    /// A later handshake carried keys different from the first exchange (an RC perftest
    /// always re-sends the same ones).
    KeysChanged {
        /// Where.
        step: Step,
        /// The keys from the first exchange.
        before: Box<PerftestDest>,
        /// The new ones.
        after: Box<PerftestDest>,
    },
    /// After the close handshake a peer <= 6.16 sent something other than `"done\0"`.
    UnexpectedTrailer {
        /// What it sent (at most 5 bytes).
        bytes: Vec<u8>,
    },
}

impl core::fmt::Display for PerftestError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            PerftestError::Io { step, source } => write!(f, "perftest exchange, {step:?}: {source}"),
            PerftestError::Timeout { step } => write!(f, "perftest exchange, {step:?}: timed out"),
            PerftestError::PeerClosed { step, received, expected } => write!(
                f,
                "perftest exchange, {step:?}: peer closed the connection after {received} of {expected} bytes"
            ),
            PerftestError::Message { step, error } => write!(f, "perftest exchange, {step:?}: {error}"),
            PerftestError::Key { step, error } => write!(f, "perftest exchange, {step:?}: {error}"),
            PerftestError::IncompatibleVersion { peer } => {
                write!(f, "peer perftest version {peer} is older than 5.70 (incompatible)")
            }
            PerftestError::Config(c) => write!(f, "perftest session configuration: {c:?}"),
            PerftestError::OutOfOrder { call, phase } => {
                write!(f, "perftest session: {call}() called in phase {phase:?}")
            }
            PerftestError::QpCount { expected, got } => {
                write!(f, "perftest session configured for {expected} QPs, got keys for {got}")
            }
            PerftestError::GidTypeMismatch { ours_v4_mapped, peer_v4_mapped } => write!(
                f,
                "GID types differ (ours IPv4-mapped: {ours_v4_mapped}, peer's: {peer_v4_mapped}); use the same IP version on both sides"
            ),
            PerftestError::KeysChanged { step, before, after } => {
                write!(f, "perftest exchange, {step:?}: peer keys changed from {before:?} to {after:?}")
            }
            PerftestError::UnexpectedTrailer { bytes } => {
                write!(f, "peer sent {bytes:02x?} after the last handshake instead of \"done\" or nothing")
            }
        }
    }
}

impl std::error::Error for PerftestError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            PerftestError::Io { source, .. } => Some(source),
            PerftestError::Message { error, .. } => Some(error),
            PerftestError::Key { error, .. } => Some(error),
            _ => None,
        }
    }
}

/// Session parameters. Both sides must agree on `test`, `num_qps`, `key_format` and
/// `report_per_port` (perftest does not check; a mismatch shows up as a desynchronised
/// stream, i.e. a [`PerftestError::Key`] or [`PerftestError::Timeout`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SessionConfig {
    /// The test.
    pub test: TestKind,
    /// The version string we advertise (default "6.24"; must be in [5.70, 6.28)).
    pub version: PerftestVersion,
    /// Our path MTU (perftest: the port's active MTU, or `-m`).
    pub mtu: IbMtu,
    /// Our cycle buffer (perftest: `sysconf(_SC_PAGESIZE)`, default 4096).
    pub cycle_buffer: u32,
    /// Our cache line size (perftest: from sysfs, default 64).
    pub cache_line_size: u32,
    /// Number of QPs (`-q`, default 1).
    pub num_qps: usize,
    /// Key message format: [`KeyFormat::Gid`] on RoCE (perftest always has a GID index there).
    pub key_format: KeyFormat,
    /// `--report-per-port` (4 more report fields).
    pub report_per_port: bool,
    /// Exchange versions, sys data and MTU first (default). `false` is `--dont_xchg_versions`
    /// as its help text means it ("Do not exchange versions and MTU with other side"): the
    /// peer is taken to be our own version with our own sys data and MTU. Both sides must agree.
    /// Stock perftest 4.5 to 26.x cannot run with the flag: its never-filled `rem_version`
    /// reads as 0.0 and `check_version_compatibility` exits, so this only pairs uroce with uroce.
    pub exchange_versions: bool,
}

impl SessionConfig {
    /// Defaults for `test`: version "6.24", MTU 1024, cycle buffer 4096, cache line 64,
    /// one QP, GID key format, no per-port report.
    pub fn new(test: TestKind) -> Self {
        SessionConfig {
            test,
            version: PerftestVersion::uroce_default(),
            mtu: IbMtu::Mtu1024,
            cycle_buffer: 4096,
            cache_line_size: 64,
            num_qps: 1,
            key_format: KeyFormat::Gid,
            report_per_port: false,
            exchange_versions: true,
        }
    }

    fn validate(&self) -> Result<(), ConfigError> {
        if !self.version.is_compatible() || self.version.triggers_negotiation() {
            return Err(ConfigError::UnsupportedOwnVersion(self.version));
        }
        if self.num_qps == 0 {
            return Err(ConfigError::NoQps);
        }
        if self.cycle_buffer == 0
            || self.cache_line_size == 0
            || i32::try_from(self.cycle_buffer).is_err()
            || i32::try_from(self.cache_line_size).is_err()
        {
            return Err(ConfigError::BadSysData);
        }
        Ok(())
    }
}

/// What the peer announced in the preamble.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerInfo {
    /// Its version string.
    pub version: PerftestVersion,
    /// Its cycle buffer.
    pub cycle_buffer: u32,
    /// Its cache line size.
    pub cache_line_size: u32,
    /// Its path MTU.
    pub mtu: IbMtu,
}

/// The values both sides use after the preamble (`check_sys_data`: the max of both;
/// `check_mtu`: the min of both).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Agreed {
    /// max(ours, peer's) cycle buffer: perftest's `BUFF_SIZE(size, cycle_buffer)`.
    pub cycle_buffer: u32,
    /// max(ours, peer's) cache line size.
    pub cache_line_size: u32,
    /// min(ours, peer's) MTU: the path MTU to program into the QP.
    pub mtu: IbMtu,
}

/// The outcome of [`PerftestSession::finish`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Finished {
    /// The peer's bandwidth report (write/read/atomic bw only). On the server this is the
    /// client's measurement (what stock perftest servers print). On the client of a
    /// unidirectional test it is whatever the server sent: a stock server sends uninitialised
    /// memory there.
    pub peer_report: Option<BwReport>,
    /// The peer wrote `"done\0"` (perftest <= 6.16).
    pub peer_sent_done: bool,
}

/// One perftest out-of-band exchange (see the module doc).
#[derive(Debug)]
pub struct PerftestSession<S> {
    stream: S,
    role: Role,
    cfg: SessionConfig,
    peer: PeerInfo,
    phase: Phase,
    mine: Vec<PerftestDest>,
    theirs: Vec<PerftestDest>,
}

impl<S: Read + Write> PerftestSession<S> {
    /// Client side: write-then-read the version, sys data and MTU. `stream` is connected to
    /// the perftest server (default port [`super::DEFAULT_PORT`]).
    pub fn client(stream: S, cfg: SessionConfig) -> Result<Self, PerftestError> {
        Self::open(stream, cfg, Role::Client)
    }

    /// Server side: read-then-write the version, sys data and MTU. `stream` is the accepted
    /// connection.
    pub fn server(stream: S, cfg: SessionConfig) -> Result<Self, PerftestError> {
        Self::open(stream, cfg, Role::Server)
    }

    fn open(stream: S, cfg: SessionConfig, role: Role) -> Result<Self, PerftestError> {
        cfg.validate().map_err(PerftestError::Config)?;
        let mut s = PerftestSession {
            stream,
            role,
            cfg,
            peer: PeerInfo { version: cfg.version, cycle_buffer: 0, cache_line_size: 0, mtu: cfg.mtu },
            phase: Phase::Failed,
            mine: Vec::new(),
            theirs: Vec::new(),
        };
        s.preamble()?;
        s.phase = Phase::Setup;
        Ok(s)
    }

    /// `exchange_versions`, `check_version_compatibility`, `check_sys_data`, `check_mtu`.
    fn preamble(&mut self) -> Result<(), PerftestError> {
        if !self.cfg.exchange_versions {
            self.peer = PeerInfo {
                version: self.cfg.version,
                cycle_buffer: self.cfg.cycle_buffer,
                cache_line_size: self.cfg.cache_line_size,
                mtu: self.cfg.mtu,
            };
            return Ok(());
        }
        let mut v = [0u8; VERSION_LEN];
        self.xchg(&self.cfg.version.encode(), &mut v, Step::Version)?;
        let version =
            PerftestVersion::decode(&v).map_err(|error| PerftestError::Message { step: Step::Version, error })?;
        if !version.is_compatible() {
            return Err(PerftestError::IncompatibleVersion { peer: version });
        }
        self.peer.version = version;
        // Our version is >= 5.70, so the peer runs check_sys_data and sends a 2-byte MTU
        // (>= 5.32 / >= 5.31); the peer's is >= 5.70, so we do the same. A peer >= 6.28
        // skips negotiate_params because our version is < 6.28, and so do we.
        let cb = self.xchg_i32(self.cfg.cycle_buffer, Step::CycleBuffer, "cycle_buffer")?;
        let cl = self.xchg_i32(self.cfg.cache_line_size, Step::CacheLineSize, "cache_line_size")?;
        self.peer.cycle_buffer = cb;
        self.peer.cache_line_size = cl;
        let mut m = [0u8; MTU_LEN];
        self.xchg(&self.cfg.mtu.encode(), &mut m, Step::Mtu)?;
        self.peer.mtu = IbMtu::decode(m).map_err(|error| PerftestError::Message { step: Step::Mtu, error })?;
        Ok(())
    }

    fn xchg_i32(&mut self, mine: u32, step: Step, field: &'static str) -> Result<u32, PerftestError> {
        let mut b = [0u8; SYS_DATA_LEN];
        self.xchg(&mine.to_be_bytes(), &mut b, step)?;
        let v = i32::from_be_bytes(b);
        u32::try_from(v)
            .ok()
            .filter(|&v| v > 0)
            .ok_or(PerftestError::Message { step, error: MsgError::BadSysData { field, value: v } })
    }

    /// Our role.
    pub fn role(&self) -> Role {
        self.role
    }

    /// Our configuration.
    pub fn config(&self) -> &SessionConfig {
        &self.cfg
    }

    /// The current phase.
    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// What the peer announced.
    pub fn peer(&self) -> &PeerInfo {
        &self.peer
    }

    /// The values both sides now use (max cycle buffer / cache line, min MTU).
    pub fn agreed(&self) -> Agreed {
        Agreed {
            cycle_buffer: self.cfg.cycle_buffer.max(self.peer.cycle_buffer),
            cache_line_size: self.cfg.cache_line_size.max(self.peer.cache_line_size),
            mtu: self.cfg.mtu.min(self.peer.mtu),
        }
    }

    /// The peer's keys (empty before [`exchange_keys`](Self::exchange_keys)).
    pub fn peer_dests(&self) -> &[PerftestDest] {
        &self.theirs
    }

    /// The underlying stream (e.g. to change its timeouts).
    pub fn stream(&self) -> &S {
        &self.stream
    }

    /// The underlying stream, mutably.
    pub fn stream_mut(&mut self) -> &mut S {
        &mut self.stream
    }

    /// Exchange the per-QP keys (one [`PerftestDest`] per QP, `num_qps` of them) before the
    /// QPs go to RTR; returns the peer's, in QP order. Latency tests first swap QP 0's keys
    /// once more, like perftest. With a GID key format, fails with
    /// [`PerftestError::GidTypeMismatch`] like perftest's `ctx_check_gid_compatibility`.
    pub fn exchange_keys(&mut self, mine: &[PerftestDest]) -> Result<Vec<PerftestDest>, PerftestError> {
        self.expect_phase("exchange_keys", Phase::Setup)?;
        if mine.len() != self.cfg.num_qps {
            return Err(PerftestError::QpCount { expected: self.cfg.num_qps, got: mine.len() });
        }
        // Refuse unencodable keys before anything is sent.
        for (qp, d) in mine.iter().enumerate() {
            self.cfg.key_format.encode(d).map_err(|error| PerftestError::Key {
                step: Step::Handshake { purpose: Handshake::Keys, qp },
                error,
            })?;
        }
        self.mine = mine.to_vec();
        self.guard(|s| {
            if s.cfg.test.lat_preamble() {
                s.handshake(Handshake::LatPreamble, 0)?;
            }
            let mut theirs = Vec::with_capacity(s.mine.len());
            for qp in 0..s.mine.len() {
                theirs.push(s.handshake(Handshake::Keys, qp)?);
            }
            if s.cfg.key_format.has_gid() {
                let (a, b) = (s.mine[0].gid_is_v4_mapped(), theirs[0].gid_is_v4_mapped());
                if a != b {
                    return Err(PerftestError::GidTypeMismatch { ours_v4_mapped: a, peer_v4_mapped: b });
                }
            }
            s.theirs = theirs;
            Ok(())
        })?;
        self.phase = Phase::KeysExchanged;
        Ok(self.theirs.clone())
    }

    /// After our QPs are in RTR/RTS: the post-connect handshakes (send tests: QP 0 once, then
    /// every QP; other tests: every QP). The peer must re-send the keys it sent first.
    pub fn connected(&mut self) -> Result<(), PerftestError> {
        self.expect_phase("connected", Phase::KeysExchanged)?;
        self.guard(|s| {
            if s.cfg.test.after_connect() {
                s.checked_handshake(Handshake::AfterConnect, 0)?;
            }
            for qp in 0..s.mine.len() {
                s.checked_handshake(Handshake::RemoteKeys, qp)?;
            }
            Ok(())
        })?;
        self.phase = Phase::Connected;
        Ok(())
    }

    /// The barrier right before the measurement. For send tests the *server* must have
    /// posted its receive WQEs before calling this (perftest `ctx_set_recv_wqes`).
    pub fn start(&mut self) -> Result<(), PerftestError> {
        self.expect_phase("start", Phase::Connected)?;
        self.guard(|s| s.checked_handshake(Handshake::Start, 0))?;
        self.phase = Phase::Started;
        Ok(())
    }

    /// An extra barrier (QP 0's keys), e.g. the per-size handshakes of `-a` in send_bw or the
    /// duplex ones. Not part of the default non-duplex flows.
    pub fn barrier(&mut self) -> Result<(), PerftestError> {
        if !matches!(self.phase, Phase::KeysExchanged | Phase::Connected | Phase::Started) {
            return Err(PerftestError::OutOfOrder { call: "barrier", phase: self.phase });
        }
        self.guard(|s| s.checked_handshake(Handshake::Barrier, 0))
    }

    /// `xchg_bw_reports`: swap the bandwidth reports, field by field. Returns the peer's.
    /// [`finish`](Self::finish) calls it for write/read/atomic bw; call it directly only for
    /// flows the session does not model (duplex).
    pub fn exchange_report(&mut self, mine: &BwReport) -> Result<BwReport, PerftestError> {
        if self.phase != Phase::Started {
            return Err(PerftestError::OutOfOrder { call: "exchange_report", phase: self.phase });
        }
        self.guard(|s| s.report(mine))
    }

    /// End the test: for write/read/atomic bw the sync handshake and the report exchange
    /// (`my_report`, zeros if `None`; a stock server prints the client's), then (every test but
    /// write_lat) the close handshake; then `"done\0"` if our version is <= 6.16, and, if the
    /// peer's version is <= 6.16, its `"done\0"` is read. The stream is then dropped (closed),
    /// as perftest closes right after the close handshake. Waiting for the peer's EOF instead
    /// would deadlock two uroce sides, and a stock peer does not need it.
    pub fn finish(mut self, my_report: Option<&BwReport>) -> Result<Finished, PerftestError> {
        self.expect_phase("finish", Phase::Started)?;
        let mut peer_report = None;
        if self.cfg.test.exchanges_report() {
            self.checked_handshake(Handshake::Sync, 0)?;
            peer_report = Some(self.report(&my_report.copied().unwrap_or_default())?);
        }
        let mut f = self.close()?;
        f.peer_report = peer_report;
        Ok(f)
    }

    /// End the test without [`finish`](Self::finish)'s sync and report: only the close
    /// handshake (every test but write_lat) and the `"done"` rules. For the flows that do
    /// their own syncs and report exchange with [`barrier`](Self::barrier) and
    /// [`exchange_report`](Self::exchange_report): duplex (`-b`: H, traffic, R, then this)
    /// and the per-size syncs of `-a`.
    pub fn close(mut self) -> Result<Finished, PerftestError> {
        self.expect_phase("close", Phase::Started)?;
        let mut peer_sent_done = false;
        if self.cfg.test.has_close_handshake() {
            self.checked_handshake(Handshake::Close, 0)?;
            if self.cfg.version.sends_done() {
                // perftest <= 6.16 writes "done" and never reads the peer's; the peer may have
                // closed already, so a failed write is not an error (dbf395e).
                let _ = self.stream.write_all(DONE).and_then(|()| self.stream.flush());
            }
            if self.peer.version.sends_done() {
                peer_sent_done = self.read_peer_done()?;
            }
        }
        Ok(Finished { peer_report: None, peer_sent_done })
    }

    /// Read the `"done\0"` of a peer <= 6.16. EOF, reset or timeout before it are tolerated
    /// (`false`): the measurement is complete by then. Other bytes are an error.
    fn read_peer_done(&mut self) -> Result<bool, PerftestError> {
        let mut buf = [0u8; DONE.len()];
        let mut got = 0;
        while got < buf.len() {
            match self.stream.read(&mut buf[got..]) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e)
                    if is_timeout(&e)
                        || matches!(e.kind(), io::ErrorKind::ConnectionReset | io::ErrorKind::ConnectionAborted) =>
                {
                    break
                }
                Err(source) => return Err(PerftestError::Io { step: Step::PeerDone, source }),
            }
        }
        match &buf[..got] {
            [] => Ok(false),
            b if b == DONE => Ok(true),
            b => Err(PerftestError::UnexpectedTrailer { bytes: b.to_vec() }),
        }
    }

    fn report(&mut self, mine: &BwReport) -> Result<BwReport, PerftestError> {
        let mut theirs = BwReport::default();
        for (field, bytes) in mine.encode_fields(self.cfg.report_per_port) {
            let mut b = [0u8; REPORT_FIELD_LEN];
            self.xchg(&bytes, &mut b, Step::Report(field))?;
            theirs.set_field(field, b);
        }
        Ok(theirs)
    }

    /// Handshake with QP `qp`'s keys; the peer's must equal those of the first exchange.
    fn checked_handshake(&mut self, purpose: Handshake, qp: usize) -> Result<(), PerftestError> {
        let got = self.handshake(purpose, qp)?;
        let before = self.theirs[qp];
        if got != before {
            return Err(PerftestError::KeysChanged {
                step: Step::Handshake { purpose, qp },
                before: Box::new(before),
                after: Box::new(got),
            });
        }
        Ok(())
    }

    /// `ctx_hand_shake`: client writes its keys then reads the peer's; server the reverse.
    fn handshake(&mut self, purpose: Handshake, qp: usize) -> Result<PerftestDest, PerftestError> {
        let step = Step::Handshake { purpose, qp };
        let f = self.cfg.key_format;
        let msg = f.encode(&self.mine[qp]).map_err(|error| PerftestError::Key { step, error })?;
        let mut buf = vec![0u8; f.wire_len()];
        self.xchg(&msg, &mut buf, step)?;
        f.decode(&buf).map_err(|error| PerftestError::Key { step, error })
    }

    /// `ctx_xchg_data_ethernet`: client write-then-read, server read-then-write.
    fn xchg(&mut self, mine: &[u8], theirs: &mut [u8], step: Step) -> Result<(), PerftestError> {
        match self.role {
            Role::Client => {
                self.send(mine, step)?;
                self.recv(theirs, step)
            }
            Role::Server => {
                self.recv(theirs, step)?;
                self.send(mine, step)
            }
        }
    }

    fn send(&mut self, buf: &[u8], step: Step) -> Result<(), PerftestError> {
        self.stream.write_all(buf).and_then(|()| self.stream.flush()).map_err(|e| io_err(step, e))
    }

    fn recv(&mut self, buf: &mut [u8], step: Step) -> Result<(), PerftestError> {
        let mut got = 0;
        while got < buf.len() {
            match self.stream.read(&mut buf[got..]) {
                Ok(0) => return Err(PerftestError::PeerClosed { step, received: got, expected: buf.len() }),
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(io_err(step, e)),
            }
        }
        Ok(())
    }

    fn expect_phase(&self, call: &'static str, want: Phase) -> Result<(), PerftestError> {
        if self.phase == want {
            Ok(())
        } else {
            Err(PerftestError::OutOfOrder { call, phase: self.phase })
        }
    }

    /// Run `f`; on error the session becomes [`Phase::Failed`].
    fn guard<T>(&mut self, f: impl FnOnce(&mut Self) -> Result<T, PerftestError>) -> Result<T, PerftestError> {
        let r = f(self);
        if r.is_err() {
            self.phase = Phase::Failed;
        }
        r
    }
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut)
}

fn io_err(step: Step, e: io::Error) -> PerftestError {
    if is_timeout(&e) {
        PerftestError::Timeout { step }
    } else if e.kind() == io::ErrorKind::UnexpectedEof {
        PerftestError::PeerClosed { step, received: 0, expected: 0 }
    } else {
        PerftestError::Io { step, source: e }
    }
}
