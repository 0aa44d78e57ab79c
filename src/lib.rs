//! uroce: a userspace RoCEv2 transport stack.
//!
//! This package is the facade over the workspace crates ([`wire`]) and hosts the `uroce`
//! command-line tool ([`cli`]), capture tooling ([`pcap`]) and the I/O runtime ([`io`]).
//! See the README for what works today.

pub use uroce_wire as wire;

pub mod cli;
pub mod io;
pub mod netns;
pub mod pcap;
pub mod perf;
pub mod pingpong;
pub mod random;
pub mod runtime;
pub mod sample;
