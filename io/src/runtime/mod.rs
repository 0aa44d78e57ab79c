//! The runtime: a [`Port`] owns one engine ([`uroce_transport::Device`]) and one I/O backend
//! and moves frames between them; a [`Runtime`] runs a port's progress loop on its own threads
//! so application threads can post work and poll completions.
//!
//! Two ways to drive a port:
//! * run-to-completion: the application calls [`Port::poll`] (or [`Port::drive`]) itself, in
//!   one thread, between its own work — no locks, the fastest path (`uroce perf` does this);
//! * threaded: [`Runtime::start`] spawns a progress thread per receive queue of the backend
//!   (one per AF_XDP socket; the threads share the engine through one lock), each of which
//!   busy-polls while there is work and backs off (spin, then sleep on its queue's descriptor
//!   and a wake-up eventfd, never longer than the next engine timer) when the device is idle,
//!   so an idle device does not burn a core;
//! * sharded: [`ShardedRuntime`] runs `N` ports (engine shards, QPs placed by QPN, frames
//!   steered by the XDP program) each on its own progress thread, sharing no lock.

pub mod connect;
mod idle;
pub mod pause;
mod port;
mod sharded;
mod threaded;

pub use idle::{Notify, WatchedCq};
pub use port::{BackendKind, Port, PortConfig, PortStats, DEFAULT_TX_BUDGET};
pub use sharded::{ShardCq, ShardState, ShardStats, ShardedConfig, ShardedRuntime};
pub use threaded::{EventHandler, RoundHook, Runtime, APP_ACTIVE, LINGER};
