//! perftest's out-of-band TCP exchange ("Data ex. method: Ethernet"), so that uroce can run
//! perftest tests against stock `ib_*_bw` / `ib_*_lat` binaries, as client and as server.
//!
//! * [`PerftestDest`] / [`KeyFormat`]: the connection-key message in every format perftest has
//!   used (module `keys`).
//! * [`PerftestVersion`], [`IbMtu`], [`BwReport`]: the other fixed-size messages.
//! * [`PerftestSession`]: the exchange as a state machine over any `Read + Write`
//!   (a `std::net::TcpStream` in practice): preamble, keys, barriers, reports, close.
//!
//! Scope: RC, no `--run_infinitely`, no RDMA-CM (`-R`), no `--data_validation`, no XRC/DC, no
//! `--write_with_imm`. [`PerftestSession::finish`] runs the default one-way, one-size flows;
//! the others — bidirectional (`-b`) and all sizes (`-a`), whose extra syncs perftest takes from
//! each side's own command line (nothing in the exchange announces them) — are built from
//! [`PerftestSession::barrier`], [`PerftestSession::exchange_report`] and
//! [`PerftestSession::close`] (`uroce perf`'s `bw` module lists each flow).
//!
//! # Findings (perftest source, `github.com/linux-rdma/perftest`)
//!
//! Versions that matter, with the string each sends (`AC_INIT` in `configure.ac`, copied into
//! `user_param.version` by every test's `main`, `strncpy(.., VERSION, 16)`):
//!
//! | release | tag (commit) | VERSION | Debian |
//! | --- | --- | --- | --- |
//! | 4.5-0.17 | `v4.5-0.17` (e63987c4) | **"6.06"** | bookworm `perftest 4.5+0.17-1` (the RECIPE capture shows "6.06") |
//! | 24.01.0-0.38 | `24.01.0-0.38` | "6.20" | — (the public rxe captures, copied into `rxe-compat/fixtures/rxe-public`, send "6.20") |
//! | 25.01.0-0.80 | `25.01.0-0.80` (6730e979) | **"6.24"** | trixie `perftest 25.01.0+0.80-1` |
//! | 26.01.5 | `perftest-26.01.5` (6a66a60c) | "6.28" | — (first with `negotiate_params`, commit 5453511) |
//! | master | 00b55b66 (2026-07) | "6.29" | — (adds the `_DV` key formats) |
//!
//! Sequence (`src/write_bw.c` etc., identical in 4.5-0.17 and 25.01.0-0.80 for the plain RC
//! tests; the only diffs are `--write_with_imm` branches): `establish_connection` (TCP to port
//! 18515, `DEF_PORT`), `sleep(1)`, then
//! 1. `exchange_versions`: 16 bytes (`MAX_VERSION`) each way, NUL padded.
//!    `check_version_compatibility`: `exit(1)` if `atof(rem_version) < 5.70`.
//! 2. `check_sys_data` (if remote >= 5.32): `cycle_buffer` then `cache_line_size`, each a
//!    4-byte big-endian `int` (`hton_int`); both sides keep the max.
//! 3. `check_mtu` (if remote >= 5.1): `sprintf(cur, "%d", mtu)` (the `enum ibv_mtu` digit, e.g.
//!    "3" = 1024) sent as 2 bytes (remote >= 5.31, else 4); both keep the min of valid values.
//! 4. `negotiate_params` — only perftest >= 6.28, and only `if (atof(rem_version) >= 6.28)`:
//!    a binary `struct perftest_parameters_negotiate` (`perftest_parameters.h` on master:
//!    7 network-order `int`s test_method..report_fmt, pad, `uint64_t` size and iters, 8 `int`s
//!    aes_xts..data_validation, a raw host-order `struct ibv_device_attr`, and a `uint64_t`
//!    mlx5dv comp_mask only `#ifdef HAVE_MLX5DV`, so even its size is build-dependent); every
//!    `int`/`u64` field must be equal (`compare`), the device attrs only lower `out_reads`.
//!    **Not in 4.5 nor 25.01.** Not implemented: see the version decision below.
//! 5. Key handshakes (`ctx_hand_shake`, per test below), 108-byte [`KeyFormat::Gid`] messages
//!    on RoCE (`gid_index != -1`); the reader (`ethernet_read_keys`) parses the GID form with
//!    `strpbrk(':')` + `strtol(.., 16)`, the plain form with `sscanf`.
//! 6. `xchg_bw_reports` (write/read/atomic bw): size (`unsigned long`, 8), iters (`uint64_t`,
//!    8 if remote >= 5.33 else 4), bw_peak, bw_avg, msgRate_avg (`double`s), each its own
//!    8-byte big-endian (`hton_64`/`bswap_double`) lock-step exchange; 4 more doubles with
//!    `--report-per-port`. See [`BwReport`].
//! 7. `ctx_close_connection`: one handshake, then in perftest <= 6.16 (4.5 included)
//!    `write(sockfd, "done", 5)` — written unsolicited by *both* sides and never read — and
//!    `close()`. Commit dbf395e ("Fix race in non-rdmacm ctx_close_connection()", first in
//!    23.10.0-0.29 = "6.17") removed the `"done"`; 25.01 just closes.
//!
//! Every exchange is lock-step: the client (the side given a server name) writes its message
//! then reads the peer's; the server reads then writes (`ctx_hand_shake`,
//! `ctx_xchg_data_ethernet`). Each message is read with **one** `read()` that must return the
//! full size (`ethernet_read_data`, `ethernet_read_keys`), so each of our messages must leave
//! in one `write()`; [`PerftestSession`] always writes a message with a single `write_all`.
//!
//! Handshakes per test (N = `-q`, QP *i*'s keys; "0" = QP 0's keys), non-duplex, `RUN_REGULAR`
//! ([`TestKind::script`] returns this list):
//!
//! | test | before `ctx_connect` | after | start | after the measurement |
//! | --- | --- | --- | --- | --- |
//! | write_bw, read_bw, atomic_bw | N | N | 0 | 0 (sync), report, 0 (close) |
//! | send_bw | N | 0, N | 0 (after the server's `ctx_set_recv_wqes`) | 0 (close) |
//! | write_lat | 0, N | N | 0 | nothing: the socket closes at exit, no `"done"` even in 4.5 |
//! | read_lat, atomic_lat | 0, N | N | 0 | 0 (close) |
//! | send_lat | N | 0, N | 0 (after `ctx_set_recv_wqes`) | 0 (close) |
//!
//! Checked against the public rxe captures (perftest "6.20", 1 QP): write/read/atomic bw =
//! 3 x 108 before the data, then 108, 5 x 8, 108; send_bw = 4 x 108, then 108; write_lat =
//! 4 x 108 and nothing after; read_lat = 4 x 108 then 108 (the tests in `tests/` replay them).
//! The server side of write/read/atomic bw and of read/atomic lat does its post-measurement
//! handshakes right after "start" and blocks in them until the client has finished.
//!
//! In the unidirectional bw tests the server prints the *client's* report as its result
//! (`print_full_bw_report(&user_param, &rem_bw_rep, NULL)`) and sends its own uninitialised
//! `my_bw_rep`: the captures show stack garbage (e.g. `00007ffd40000000`) in the server's
//! 8-byte replies.
//!
//! What a peer does with the keys (`perftest_resources.c` 25.01, `ctx_modify_qp_to_rtr/rts`):
//! `dest_qp_num = rem.qpn`, `rq_psn = rem.psn`, `sq_psn = my.psn`, `max_dest_rd_atomic =
//! my.out_reads`, `max_rd_atomic = rem.out_reads`, `min_rnr_timer = 12`, `timeout = 14` (`-u`),
//! `retry_cnt = rnr_retry = 7`, `path_mtu` = the agreed MTU, GRH `hop_limit = 0xFF`,
//! `traffic_class` from `-T`, `sgid_index` from `-x`. Its buffer is
//! `BUFF_SIZE(size, cycle_buffer)` = max(size, agreed cycle buffer) bytes at `vaddr`;
//! perftest's own client cycles its remote address within it.
//! `ctx_check_gid_compatibility` fails unless both GIDs are IPv4-mapped or both are not.
//!
//! # Version decision: uroce advertises "6.24" as client and as server
//!
//! What our advertised version changes in a stock peer (all `atof(rem_version)` tests in
//! 4.5-0.17, 25.01.0-0.80 and master): `< 5.70` -> the peer exits; `>= 5.32` -> sys data
//! exchanged; `>= 5.31` -> 2-byte MTU; `>= 5.33` -> 8-byte iters; `>= 6.28` -> a peer >= 6.28
//! runs `negotiate_params` (master `perftest_communication.c:1042`). Nothing else: `"done"`
//! depends on the *writer's* own version, and no peer checks for a version *newer* than
//! its own. So any version in [5.70, 6.28) gives byte-identical behaviour with every stock
//! perftest from 5.70 to 6.29:
//! * 4.5 ("6.06") peer, either role: sees 6.24 >= 5.70, runs sys data, 2-byte MTU, 8-byte
//!   iters, writes `"done"` after the close handshake (we read it).
//! * 25.01 ("6.24") peer, either role: has no negotiation code at all; everything else as
//!   above, no `"done"`. With "6.24" the whole exchange is byte-identical to two stock 25.01
//!   binaries talking to each other.
//! * a 6.28 or newer peer, either role: the check is symmetric and only looks at the *remote*
//!   version: it sees 6.24 < 6.28 and skips `negotiate_params`; we see its 6.28+ but skip
//!   too (our version < 6.28 means it will not negotiate). "6.27" would do the same; "6.24"
//!   is chosen because it is a real release (trixie's) rather than an invented point.
//!
//! uroce's own version is configurable ([`SessionConfig::version`]); values outside [5.70, 6.28)
//! are refused ([`ConfigError::UnsupportedOwnVersion`]). A version < 6.17 (e.g. "6.06" to mimic
//! bookworm byte for byte) makes [`PerftestSession::finish`] write `"done"` too.
//!
//! Verified: (1) source reading of the tags above; (2) byte-exact replay of the public rxe
//! captures ("6.20", both roles, `tests/perftest_replay.rs`); (3) live against the stock
//! binaries in QEMU rxe guests (`tests/perftest_live.rs`): bookworm perftest 4.5 ("6.06") and
//! trixie perftest 25.01 ("6.24") `ib_write_bw`/`ib_read_bw`/`ib_atomic_bw`/`ib_read_lat`
//! servers complete the whole exchange with uroce's "6.24" client, exit 0, print our keys and
//! print the report we sent (the 4.5 ones send `"done"`, the 25.01 ones do not); a stock
//! `ib_write_bw` client of either version accepts uroce's server keys and starts its
//! measurement. Not verified live: the post-measurement part with a stock *client* (needs the
//! RoCE data path), send/write latency tests, and any perftest >= 6.28 (no binary; from source).

mod keys;
mod messages;
mod session;

pub(crate) use keys::parse_hex;
pub use keys::{KeyError, KeyField, KeyFormat, PerftestDest};
pub use messages::{
    BwReport, IbMtu, MsgError, PerPortReport, PerftestVersion, ReportField, ReportUnit, DONE, MTU_LEN,
    REPORT_FIELD_LEN, SYS_DATA_LEN, VERSION_LEN,
};
pub use session::{
    Agreed, ConfigError, Finished, Handshake, PeerInfo, PerftestError, PerftestSession, Phase, Role, SessionConfig,
    Step, TestKind,
};

/// perftest's default TCP port (`DEF_PORT`, perftest_parameters.h).
pub const DEFAULT_PORT: u16 = 18515;
