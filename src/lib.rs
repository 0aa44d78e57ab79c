//! uroce: a userspace RoCEv2 transport stack.
//!
//! This package is the facade over the workspace crates and hosts the `uroce` command-line
//! tool. See the README for what works today.

pub use uroce_wire as wire;

pub mod io;
pub mod pcap;
