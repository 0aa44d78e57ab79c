//! `uroce pingpong [host]`: an `ibv_rc_pingpong`-compatible RC ping-pong (its flags, its
//! out-of-band exchange from [`uroce_rxe_compat::pingpong`], its output), so the stock tool can
//! be the peer. (Being written.)

use anyhow::{bail, Result};
use std::process::ExitCode;

/// Flags of `uroce pingpong` (ibv_rc_pingpong's).
#[derive(clap::Args, Debug)]
pub struct PingpongArgs {
    /// The server to connect to; without it, this side is the server.
    host: Option<String>,
}

/// `uroce pingpong`.
pub fn run(a: &PingpongArgs) -> Result<ExitCode> {
    let _ = &a.host;
    bail!("not implemented yet")
}
