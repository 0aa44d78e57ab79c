//! # uroce-sim: a deterministic datacenter simulator that runs the real engine
//!
//! Hosts are `uroce_transport::Device`s, unchanged; they talk RC over links with a bandwidth
//! and a propagation delay, through switches with a shared buffer, per-port, per-priority
//! egress queues, WRED/ECN marking and PFC ([`switch`]). Discrete events, one seeded RNG:
//! the same seed gives the same run, byte for byte.
//!
//! | module | what |
//! |---|---|
//! | [`fabric`] | hosts running the engine, switches, links, flows of RDMA WRITEs, the event loop, samples |
//! | [`scenario`] | fairness, incast, loss, deadlock, storm, fabric: summary tables, CSV, SVG plots |
//! | [`plot`] | SVG line charts |
//! | [`queue`] | the event queue: a timing wheel, a heap beyond its horizon |
//! | [`pfc`] | 802.1Qbb PFC frames (`uroce_wire::pfc`) on the simulated wire |
//! | [`topology`] | dumbbell, N:1 incast, leaf-spine, ring |
//! | [`switch`] | the switch model (buffer, queues, ECN, PFC, watchdog), event-loop free |

pub mod fabric;
pub mod pfc;
pub mod plot;
pub mod queue;
pub mod scenario;
pub mod switch;
pub mod topology;
