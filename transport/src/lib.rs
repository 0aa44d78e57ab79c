//! # uroce-transport: the RoCEv2 reliable-connection engine, sans-IO
//!
//! What a ConnectX NIC or Linux rxe does in hardware or in the kernel, as a pure state
//! machine: verbs objects with libibverbs names and semantics ([`verbs`], [`Device`]) and the
//! requester / responder / completer of an RC queue pair ([`qp`]).
//!
//! The engine never touches sockets, threads, the clock or the OS RNG. Frames and time come in
//! ([`Device::handle_frame`], [`Device::handle_timeout`]); frames, timeouts and completions go
//! out ([`Device::poll_transmit`], [`Device::poll_timeout`], [`Device::poll_cq`]). The AF_XDP
//! runtime, the simulator ([`sim`]) and the fuzzers all drive it the same way.
#![forbid(unsafe_code)]

pub mod cc;
pub mod cm;
pub mod config;
pub mod connect;
pub mod counters;
pub mod cq;
pub mod device;
pub mod formulas;
pub mod grh;
pub mod mr;
pub mod path;
pub mod qp;
pub mod rdmacm;
pub mod sim;
pub mod slab;
pub mod time;
pub mod timer;
pub mod verbs;

pub use counters::Counters;
pub use device::{Device, DeviceConfig, Guards, Ipv4Ident, MrInfo, QpnShard, Quirks, RxDrop, READ_REPLAYS_FREE};
pub use mr::{AppMemory, MrMemory};
pub use qp::AsyncEvent;
pub use time::Instant;
pub use verbs::*;
