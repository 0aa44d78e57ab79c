//! The I/O runtime: backends that move RoCEv2 frames between the engine and a network
//! interface (AF_XDP sockets, or a kernel UDP socket as a fallback).

pub mod xsk;
