//! Bringing an RC QP from RESET to RTS against a known peer: the one place that states the
//! INIT → RTR → RTS attribute masks (IBTA §11.2.4.2, `ibv_modify_qp`'s required attributes).
