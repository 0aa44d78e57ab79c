//! # uroce-verbs: a drop-in `libibverbs.so.1`
//!
//! Unmodified verbs programs (`ibv_devinfo`, `ibv_rc_pingpong`, perftest, …) load this library
//! instead of rdma-core's through `LD_LIBRARY_PATH`: it exports every symbol rdma-core 44's
//! `libibverbs.so.1` exports, at the same versions (`libibverbs.map`; `IBVERBS_1.0` …
//! `IBVERBS_1.14` and `IBVERBS_PRIVATE_34`, whose symbols `libmlx5.so.1` and `libefa.so.1` need
//! to load), and presents each network interface as an RDMA device with no kernel RDMA at all.
//!
//! Rust cannot give a `cdylib` symbol versions (rustc's own version script wins), so the crate
//! is a `staticlib` that `scripts/build-verbs` links with `cc -shared` and the version script;
//! see the README.
//!
//! | module | what |
//! |---|---|
//! | [`abi`] | libibverbs' structs, `#[repr(C)]`, checked against the C headers |
//! | [`device`] | devices (interfaces), contexts, queries |
//! | [`datapath`] | PDs, MRs over the program's memory, CQs, RC QPs, posting and polling, on the engine's progress thread |
//! | [`events`] | completion channels (a pipe per channel), `ibv_req_notify_cq`, CQ events, async events (an eventfd per context) |
//! | [`strings`] | `ibv_wc_status_str` and the other enum-to-string calls |
//! | [`stubs`] | every other exported symbol: the documented error until it is implemented |
//!
//! What works today: device discovery and every query (`ibv_devices`, `ibv_devinfo -v`),
//! PDs, MRs, CQs with completion channels, RC QPs with posting and polling (loopback too), async
//! events. SRQs, UD and UC are the next steps (issue 15); until then they fail with
//! `EOPNOTSUPP`.

// Every exported `unsafe extern "C"` function's contract is libibverbs' (its man page): the
// pointers a program passes are its own objects or ones this library handed out.
#![allow(clippy::missing_safety_doc)]

pub mod abi;
pub mod ah;
pub mod congestion;
pub mod cq_ex;
pub mod datapath;
pub mod device;
pub mod events;
pub mod qp_ex;
pub mod rdmacm;
pub mod srq;
pub mod strings;
pub mod stubs;

use core::ffi::c_void;
use core::marker::PhantomData;
use std::collections::BTreeMap;
use std::sync::Mutex;

/// Set the calling thread's `errno`.
pub(crate) fn set_errno(e: i32) {
    // SAFETY: __errno_location returns the calling thread's errno slot.
    unsafe { *libc::__errno_location() = e };
}

/// The calling thread's `errno`.
pub(crate) fn errno() -> i32 {
    // SAFETY: __errno_location returns the calling thread's errno slot.
    unsafe { *libc::__errno_location() }
}

/// Live objects of one kind handed to the program, by the address the program holds. Every
/// entry point looks its handles up here before touching them, so a NULL, foreign or
/// destroyed handle is an error code, not a dereference.
pub struct Registry<T> {
    map: Mutex<BTreeMap<usize, usize>>,
    _t: PhantomData<fn() -> T>,
}

impl<T> Default for Registry<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> Registry<T> {
    /// Empty.
    pub const fn new() -> Self {
        Registry { map: Mutex::new(BTreeMap::new()), _t: PhantomData }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<usize, usize>> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Register `obj` (a leaked `Box`) under the handle `key`.
    pub fn insert(&self, key: *const c_void, obj: *mut T) {
        self.lock().insert(key as usize, obj as usize);
    }

    /// Unregister `key`, handing back the object it owned (dropping it frees it).
    pub fn take(&self, key: *const c_void) -> Option<Box<T>> {
        let o = self.lock().remove(&(key as usize))?;
        // SAFETY: registered objects are leaked Boxes; removed from the map, this is the one owner.
        Some(unsafe { Box::from_raw(o as *mut T) })
    }

    /// The object registered under `key`.
    ///
    /// The reference is valid until the object is removed; as in rdma-core, a program that
    /// destroys an object while another of its threads still uses it is in error.
    pub fn get<'a>(&self, key: *const c_void) -> Option<&'a T> {
        let o = self.lock().get(&(key as usize)).copied()?;
        // SAFETY: registered objects are live leaked Boxes until removed.
        Some(unsafe { &*(o as *const T) })
    }

    /// The handles of the registered objects for which `pred` holds.
    pub fn keys_where(&self, pred: impl Fn(&T) -> bool) -> Vec<*mut c_void> {
        let m = self.lock();
        // SAFETY: registered objects are live leaked Boxes while the map's lock is held.
        m.iter().filter(|(_, &o)| pred(unsafe { &*(o as *const T) })).map(|(&k, _)| k as *mut c_void).collect()
    }

    /// Objects registered.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// None registered?
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
