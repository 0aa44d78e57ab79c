//! uroce-transport: the RoCEv2 reliable-connection (RC) protocol engine, sans-IO.
//!
//! This crate will hold the verbs objects (device context, PD, MR, CQ, QP) with libibverbs
//! names and semantics, and the requester / responder / completer engine. It never touches
//! sockets, threads, the clock or the OS RNG: time and frames come in through
//! `handle_frame(now, ..)` / `handle_timeout(now)`, frames and completions go out through
//! `poll_transmit` / `poll_timeout` / CQ polling.
#![forbid(unsafe_code)]
