//! uroce-xdp-prog: the XDP program that steers RoCEv2 (UDP/4791) frames to AF_XDP sockets.
//!
//! This crate will hold the program as eBPF bytecode assembled in Rust (no clang/LLVM at
//! build time), its loader over the raw `bpf(2)` syscall (XSKMAP creation, program load,
//! attachment through a bpf link that detaches when dropped or when the process dies), and a
//! test that runs the program through the kernel verifier and `BPF_PROG_TEST_RUN`.
