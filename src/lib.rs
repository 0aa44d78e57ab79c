//! uroce: a userspace RoCEv2 transport stack.
//!
//! This package hosts the `uroce` command-line tool ([`cli`]: `perf`, `pingpong`, `demo`,
//! `pcap`, `sim`, tools), capture checking ([`pcap`]) and the namespace set-up of `demo` and
//! the tests ([`netns`]). The engine is `uroce-transport`, the backends and the runtime are
//! `uroce-io`. See the README for what works today.

pub use uroce_wire as wire;

pub mod attack;
pub mod cli;
pub mod flows;
pub mod fuzz;
pub mod netns;
pub mod pcap;
pub mod perf;
pub mod pingpong;
pub mod probe;
pub mod sample;
pub mod switch;
