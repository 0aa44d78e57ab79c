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

use core::cell::Cell;
use core::ffi::c_void;
use core::marker::PhantomData;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
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

/// Removals from any [`Registry`] so far.
static REMOVALS: AtomicU64 = AtomicU64::new(0);

/// A thread's last registry lookups: (registry, handle, object, [`REMOVALS`] when looked up).
struct Recent {
    slots: [Cell<(usize, usize, usize, u64)>; 4],
    next: Cell<usize>,
}

impl Recent {
    fn find(&self, registry: usize, key: usize, epoch: u64) -> Option<usize> {
        self.slots.iter().map(Cell::get).find(|&(r, k, _, e)| r == registry && k == key && e == epoch).map(|s| s.2)
    }

    fn remember(&self, registry: usize, key: usize, obj: usize, epoch: u64) {
        let i = self.next.get();
        self.slots[i % self.slots.len()].set((registry, key, obj, epoch));
        self.next.set(i.wrapping_add(1));
    }
}

thread_local! {
    static RECENT: Recent = const {
        Recent { slots: [const { Cell::new((0, 0, 0, u64::MAX)) }; 4], next: Cell::new(0) }
    };
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
        let mut m = self.lock();
        if m.insert(key as usize, obj as usize).is_some() {
            // A handle that named another object: remembered lookups of it are void.
            REMOVALS.fetch_add(1, Ordering::Release);
        }
    }

    /// Unregister `key`, handing back the object it owned (dropping it frees it).
    pub fn take(&self, key: *const c_void) -> Option<Box<T>> {
        let o = {
            let mut m = self.lock();
            let o = m.remove(&(key as usize));
            // Every thread's remembered lookups are void from here ([`Registry::get`]).
            REMOVALS.fetch_add(1, Ordering::Release);
            o?
        };
        // SAFETY: registered objects are leaked Boxes; removed from the map, this is the one owner.
        Some(unsafe { Box::from_raw(o as *mut T) })
    }

    /// The object registered under `key`.
    ///
    /// The reference is valid until the object is removed; as in rdma-core, a program that
    /// destroys an object while another of its threads still uses it is in error.
    ///
    /// The thread's last few lookups are remembered until any registry removes anything: a
    /// program polling one CQ and posting to one QP finds them without the lock (four lookups
    /// a round trip of `ib_write_lat`).
    pub fn get<'a>(&self, key: *const c_void) -> Option<&'a T> {
        let (me, key) = (self as *const Self as usize, key as usize);
        let epoch = REMOVALS.load(Ordering::Acquire);
        let o = match RECENT.with(|r| r.find(me, key, epoch)) {
            Some(o) => o,
            None => {
                let o = self.lock().get(&key).copied()?;
                RECENT.with(|r| r.remember(me, key, o, epoch));
                o
            }
        };
        // SAFETY: registered objects are live leaked Boxes until removed; a remembered lookup
        // is one made since the last removal from any registry.
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

#[cfg(test)]
mod tests {
    use super::*;

    static THINGS: Registry<u32> = Registry::new();

    fn leak(v: u32) -> *mut u32 {
        Box::into_raw(Box::new(v))
    }

    #[test]
    fn a_remembered_lookup_does_not_outlive_a_removal() {
        let a = leak(7);
        THINGS.insert(a.cast(), a);
        assert_eq!(THINGS.get(a.cast()).copied(), Some(7));
        assert_eq!(THINGS.get(a.cast()).copied(), Some(7), "the remembered lookup");
        // Another thread remembers it too.
        let key = a as usize;
        std::thread::scope(|s| {
            s.spawn(|| assert_eq!(THINGS.get(key as *const c_void).copied(), Some(7)));
        });
        assert_eq!(THINGS.take(a.cast()).map(|b| *b), Some(7));
        assert!(THINGS.get(a.cast()).is_none(), "removed: no answer from memory");
        std::thread::scope(|s| {
            s.spawn(|| assert!(THINGS.get(key as *const c_void).is_none()));
        });
    }

    #[test]
    fn a_handle_registered_again_names_its_new_object() {
        let (a, b) = (leak(1), leak(2));
        let key = 0x1000 as *const c_void;
        THINGS.insert(key, a);
        assert_eq!(THINGS.get(key).copied(), Some(1));
        THINGS.insert(key, b);
        assert_eq!(THINGS.get(key).copied(), Some(2));
        assert_eq!(THINGS.take(key).map(|b| *b), Some(2));
        // SAFETY: `a` was leaked above and is no longer registered.
        drop(unsafe { Box::from_raw(a) });
    }

    #[test]
    fn lookups_past_the_remembered_few_still_answer() {
        let objs: Vec<*mut u32> = (0..10).map(leak).collect();
        for &o in &objs {
            THINGS.insert(o.cast(), o);
        }
        for _ in 0..3 {
            for (i, &o) in objs.iter().enumerate() {
                assert_eq!(THINGS.get(o.cast()).copied(), Some(i as u32));
            }
        }
        for &o in &objs {
            assert!(THINGS.take(o.cast()).is_some());
        }
    }
}
