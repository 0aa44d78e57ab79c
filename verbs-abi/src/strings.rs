//! The enum-to-string calls, with rdma-core's strings (programs print them: `ibv_rc_pingpong`'s
//! "Failed status transport retry counter exceeded (12)", `ibv_devinfo`'s port state).

use core::ffi::{c_char, c_int};
use std::ffi::CString;
use std::sync::OnceLock;
use uroce_transport::verbs::WcStatus;

/// NUL-terminated copies of `strs`, made once.
fn table(cell: &'static OnceLock<Vec<CString>>, strs: &[&str]) -> &'static [CString] {
    cell.get_or_init(|| strs.iter().map(|s| CString::new(*s).unwrap_or_default()).collect())
}

fn pick(t: &'static [CString], i: c_int, unknown: &'static core::ffi::CStr) -> *const c_char {
    usize::try_from(i).ok().and_then(|i| t.get(i)).map_or(unknown.as_ptr(), |s| s.as_ptr())
}

/// `ibv_wc_status_str(3)`: the engine's strings (`WcStatus::as_str`).
#[no_mangle]
pub extern "C" fn ibv_wc_status_str(status: c_int) -> *const c_char {
    static T: OnceLock<Vec<CString>> = OnceLock::new();
    let strs: Vec<&str> = WcStatus::ALL.iter().map(|s| s.as_str()).collect();
    pick(table(&T, &strs), status, c"unknown")
}

/// `ibv_node_type_str(3)` (`enum ibv_node_type`, from -1: unknown).
#[no_mangle]
pub extern "C" fn ibv_node_type_str(node_type: c_int) -> *const c_char {
    static T: OnceLock<Vec<CString>> = OnceLock::new();
    let strs = [
        "InfiniBand channel adapter",
        "InfiniBand switch",
        "InfiniBand router",
        "iWARP NIC",
        "usNIC",
        "usNIC UDP",
        "unspecified",
    ];
    pick(table(&T, &strs), node_type - 1, c"unknown")
}

/// `ibv_port_state_str(3)`.
#[no_mangle]
pub extern "C" fn ibv_port_state_str(state: c_int) -> *const c_char {
    static T: OnceLock<Vec<CString>> = OnceLock::new();
    let strs = ["no state change (NOP)", "down", "init", "armed", "active", "active defer"];
    pick(table(&T, &strs), state, c"unknown")
}

/// `ibv_event_type_str(3)`.
#[no_mangle]
pub extern "C" fn ibv_event_type_str(event: c_int) -> *const c_char {
    static T: OnceLock<Vec<CString>> = OnceLock::new();
    let strs = [
        "CQ error",
        "local work queue catastrophic error",
        "invalid request local work queue error",
        "local access violation work queue error",
        "communication established",
        "send queue drained",
        "path migrated",
        "path migration request error",
        "local catastrophic error",
        "port active",
        "port error",
        "LID change",
        "P_Key change",
        "SM change",
        "SRQ catastrophic error",
        "SRQ limit reached",
        "last WQE reached",
        "client reregistration",
        "GID table change",
        "WQ fatal",
    ];
    pick(table(&T, &strs), event, c"unknown")
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::ffi::CStr;

    fn s(p: *const c_char) -> String {
        // SAFETY: the functions return static NUL-terminated strings.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }

    #[test]
    fn strings_as_rdma_core_prints_them() {
        for (i, st) in WcStatus::ALL.iter().enumerate() {
            assert_eq!(*st as usize, i, "WcStatus::ALL is in enum order");
        }
        assert_eq!(s(ibv_wc_status_str(12)), "transport retry counter exceeded");
        assert_eq!(s(ibv_wc_status_str(5)), "Work Request Flushed Error");
        assert_eq!(s(ibv_wc_status_str(99)), "unknown");
        assert_eq!(s(ibv_wc_status_str(-1)), "unknown");
        assert_eq!(s(ibv_node_type_str(1)), "InfiniBand channel adapter");
        assert_eq!(s(ibv_node_type_str(-1)), "unknown");
        assert_eq!(s(ibv_port_state_str(4)), "active");
        assert_eq!(s(ibv_event_type_str(15)), "SRQ limit reached");
    }
}
