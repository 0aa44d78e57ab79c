//! uroce-rxe-compat: what interop with real peers needs.
//!
//! This crate will hold perftest's and ibv_rc_pingpong's out-of-band TCP exchanges, the
//! quirks of Linux rxe and ConnectX peers written down as data (each pinned by a test against
//! a real capture), and the QEMU-guest interop harness.

pub mod perftest;
pub mod pingpong;
pub mod quirks;

pub mod harness;
