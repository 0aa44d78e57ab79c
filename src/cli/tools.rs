//! `uroce tool ...`: measurement tools used by `scripts/bench-datapath`.
//!
//! * [`xsk_blast`] — `uroce tool xsk-blast`: a raw AF_XDP frame blaster (`--tx`) and sink
//!   (`--rx`) built on the same AF_XDP socket layer ([`uroce_io::xsk`]) and XDP program
//!   (`uroce_xdp_prog::XdpSteering`) as the AF_XDP backend. It measures the I/O ceiling of a
//!   link at a given frame size: what `uroce perf` could reach if the RoCE engine cost
//!   nothing (credit flow control between sink and blaster stands in for the transport's
//!   send window, at no cost).
//! * [`tcp_pingpong`] — `uroce tool tcp-pingpong`: a kernel TCP ping-pong (TCP_NODELAY), the
//!   latency baseline `uroce perf write_lat` is compared with.
//!
//! Contract: every tool prints exactly one machine-readable result line on stdout (a tool
//! name, a role, then space-separated `key=value` pairs; formats in each command's help) and
//! exits 0 when the measurement succeeded, 1 when it ran but measured nothing (no frame
//! received, a drain that timed out), 2 on setup errors (`uroce: ...` on stderr).

use anyhow::Result;
use std::process::ExitCode;

mod tcp_pingpong;
mod xsk_blast;

/// Measurement tools.
#[derive(clap::Subcommand, Debug)]
pub enum ToolCommand {
    /// Raw AF_XDP frame blaster (--tx) / sink (--rx): the I/O ceiling at a frame size.
    #[command(long_about = xsk_blast::LONG_ABOUT)]
    XskBlast(xsk_blast::XskBlastArgs),
    /// TCP ping-pong (TCP_NODELAY) latency: --server --bind ADDR:PORT / --client ADDR:PORT.
    #[command(long_about = tcp_pingpong::LONG_ABOUT)]
    TcpPingpong(tcp_pingpong::TcpPingpongArgs),
}

/// Run a tool.
pub fn run(t: ToolCommand) -> Result<ExitCode> {
    match t {
        ToolCommand::XskBlast(a) => xsk_blast::run(&a),
        ToolCommand::TcpPingpong(a) => tcp_pingpong::run(&a),
    }
}
