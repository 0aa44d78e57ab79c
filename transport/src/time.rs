//! The engine's clock: time is always an input, never read from the OS.

use core::fmt;
use core::ops::{Add, AddAssign, Sub};
use core::time::Duration;

/// A point in time, in nanoseconds since an arbitrary epoch chosen by the caller (the runtime
/// uses its start; simulations start at 0).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Instant(u64);

impl Instant {
    /// The epoch.
    pub const ZERO: Instant = Instant(0);
    /// The far future (a timer that never fires).
    pub const NEVER: Instant = Instant(u64::MAX);

    /// From nanoseconds since the epoch.
    pub const fn from_nanos(ns: u64) -> Instant {
        Instant(ns)
    }
    /// Nanoseconds since the epoch.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }
    /// `self - earlier`, or zero if `earlier` is later.
    pub fn saturating_duration_since(self, earlier: Instant) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }
}

impl Add<Duration> for Instant {
    type Output = Instant;
    fn add(self, d: Duration) -> Instant {
        Instant(self.0.saturating_add(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)))
    }
}

impl AddAssign<Duration> for Instant {
    fn add_assign(&mut self, d: Duration) {
        *self = *self + d;
    }
}

impl Sub<Instant> for Instant {
    type Output = Duration;
    fn sub(self, o: Instant) -> Duration {
        self.saturating_duration_since(o)
    }
}

impl fmt::Debug for Instant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if *self == Instant::NEVER {
            write!(f, "never")
        } else {
            write!(f, "{}.{:09}s", self.0 / 1_000_000_000, self.0 % 1_000_000_000)
        }
    }
}

/// The IBTA local ACK timeout for a QP `timeout` attribute: 4.096 µs × 2^timeout
/// (IBTA §9.7.6.1.3 / C9-141); `0` means "no timeout" (infinite).
pub fn local_ack_timeout(timeout: u8) -> Option<Duration> {
    if timeout == 0 {
        None
    } else {
        Some(Duration::from_nanos(4096u64 << timeout.min(31)))
    }
}
