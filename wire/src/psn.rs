//! 24-bit sequence arithmetic: packet sequence numbers ([`Psn`]), message sequence numbers
//! ([`Msn`]) and queue pair numbers ([`Qpn`]).
//!
//! PSNs live in a 24-bit circular space. Ordering is only meaningful within half the space
//! (2^23), exactly as Linux rxe compares them (`psn_compare`: `(s32)((a - b) << 8)`), so
//! [`Psn`] deliberately does not implement `Ord`; use [`Psn::diff`] / [`Psn::before`].

use core::fmt;

/// Mask of a 24-bit field.
pub const MASK24: u32 = 0x00ff_ffff;

macro_rules! u24_newtype {
    ($(#[$m:meta])* $name:ident) => {
        $(#[$m])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
        pub struct $name(u32);

        impl $name {
            /// Largest value (2^24 - 1).
            pub const MAX: $name = $name(MASK24);
            /// The value modulo 2^24.
            #[inline]
            pub const fn new(v: u32) -> Self {
                $name(v & MASK24)
            }
            /// The value, `< 2^24`.
            #[inline]
            pub const fn value(self) -> u32 {
                self.0
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!(stringify!($name), "({:#08x})"), self.0)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{:#08x}", self.0)
            }
        }

        impl From<$name> for u32 {
            fn from(v: $name) -> u32 {
                v.0
            }
        }
    };
}

u24_newtype!(
    /// A 24-bit packet sequence number with wrap-aware arithmetic.
    Psn
);
u24_newtype!(
    /// A 24-bit message sequence number (AETH.MSN), counted by the responder.
    Msn
);
u24_newtype!(
    /// A 24-bit queue pair number (BTH.DestQP, DETH.SrcQP).
    Qpn
);

impl Psn {
    /// `self + n` modulo 2^24.
    #[inline]
    pub const fn add(self, n: u32) -> Psn {
        Psn(self.0.wrapping_add(n) & MASK24)
    }

    /// `self - n` modulo 2^24.
    #[inline]
    pub const fn sub(self, n: u32) -> Psn {
        Psn(self.0.wrapping_sub(n) & MASK24)
    }

    /// Signed distance `self - other` in the circular space, in `-2^23 ..= 2^23 - 1`
    /// (rxe `psn_compare`).
    #[inline]
    pub const fn diff(self, other: Psn) -> i32 {
        ((self.0.wrapping_sub(other.0) << 8) as i32) >> 8
    }

    /// `self` comes strictly before `other` (within a 2^23 window).
    #[inline]
    pub const fn before(self, other: Psn) -> bool {
        self.diff(other) < 0
    }

    /// `self` comes strictly after `other` (within a 2^23 window).
    #[inline]
    pub const fn after(self, other: Psn) -> bool {
        self.diff(other) > 0
    }

    /// `lo <= self <= hi` in circular order (`hi` not before `lo`).
    #[inline]
    pub const fn within(self, lo: Psn, hi: Psn) -> bool {
        self.diff(lo) >= 0 && hi.diff(self) >= 0
    }
}

impl Msn {
    /// `self + n` modulo 2^24.
    #[inline]
    pub const fn add(self, n: u32) -> Msn {
        Msn(self.0.wrapping_add(n) & MASK24)
    }

    /// Signed distance `self - other` modulo 2^24 (as for [`Psn::diff`]).
    #[inline]
    pub const fn diff(self, other: Msn) -> i32 {
        ((self.0.wrapping_sub(other.0) << 8) as i32) >> 8
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn test_wrap() {
        let top = Psn::new(0xff_ffff);
        assert_eq!(top.add(1), Psn::new(0));
        assert_eq!(Psn::new(0).sub(1), top);
        assert_eq!(Psn::new(0).diff(top), 1);
        assert_eq!(top.diff(Psn::new(0)), -1);
        assert!(top.before(Psn::new(5)));
        assert!(Psn::new(5).after(top));
        assert!(Psn::new(2).within(top, Psn::new(3)));
        assert!(!Psn::new(4).within(top, Psn::new(3)));
        assert_eq!(Psn::new(0x1234_5678).value(), 0x34_5678);
    }

    #[test]
    fn test_half_window() {
        // Exactly 2^23 apart is "before" in both directions' sign convention of rxe: the
        // shifted difference is i32::MIN >> 8, i.e. negative.
        let a = Psn::new(0);
        let b = Psn::new(1 << 23);
        assert_eq!(b.diff(a), -(1 << 23));
        assert_eq!(a.diff(b), -(1 << 23));
    }

    proptest! {
        #[test]
        fn prop_add_diff(a in 0u32..=MASK24, n in 0u32..(1 << 23)) {
            let p = Psn::new(a);
            prop_assert_eq!(p.add(n).diff(p), n as i32);
            prop_assert_eq!(p.diff(p.add(n)), -(n as i32));
            prop_assert_eq!(p.add(n).sub(n), p);
            prop_assert!(p.add(n).value() <= MASK24);
        }
    }
}
