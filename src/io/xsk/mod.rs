//! AF_XDP sockets (placeholder).
