//! Packet sequence numbers: 24-bit counters that wrap.
//!
//! A PSN has no total order: 0x000001 comes *after* 0xffffff. Two PSNs are
//! compared by their signed distance modulo 2^24 (serial number arithmetic,
//! as RFC 1982 and Linux rxe's `psn_compare` do): `b` is after `a` when
//! `b - a`, read as a signed 24-bit number, is positive. That is why `Psn`
//! implements neither `PartialOrd` nor `Ord`: use [`Psn::serial_cmp`],
//! [`Psn::is_before`], [`Psn::distance_to`] or [`Psn::in_window`].

use core::cmp::Ordering;
use core::fmt;
use core::ops::{Add, Sub};

/// A 24-bit packet sequence number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(from = "u32", into = "u32"))]
pub struct Psn(u32);

impl From<u32> for Psn {
    fn from(value: u32) -> Psn {
        Psn::new(value)
    }
}

impl From<Psn> for u32 {
    fn from(psn: Psn) -> u32 {
        psn.0
    }
}

impl Psn {
    /// The bits a PSN occupies.
    pub const MASK: u32 = 0x00ff_ffff;
    /// The number of distinct PSNs (2^24).
    pub const MODULUS: u32 = 1 << 24;
    /// The largest distance at which the order of two PSNs is defined.
    /// Outstanding packets must stay well inside it.
    pub const HALF_RANGE: u32 = 1 << 23;

    /// A PSN from the low 24 bits of `value`.
    pub const fn new(value: u32) -> Psn {
        Psn(value & Self::MASK)
    }

    /// The PSN as an integer in `0..2^24`.
    pub const fn value(self) -> u32 {
        self.0
    }

    /// The next PSN (wraps from 0xffffff to 0).
    pub const fn next(self) -> Psn {
        self.wrapping_add(1)
    }

    /// `self + count`, modulo 2^24.
    pub const fn wrapping_add(self, count: u32) -> Psn {
        Psn::new(self.0.wrapping_add(count))
    }

    /// `self - count`, modulo 2^24.
    pub const fn wrapping_sub(self, count: u32) -> Psn {
        Psn::new(self.0.wrapping_sub(count))
    }

    /// The signed distance from `self` to `other` in `-2^23..2^23`:
    /// positive when `other` is after `self`.
    pub const fn distance_to(self, other: Psn) -> i32 {
        // Shift the 24-bit difference into the top of an i32 and back, so
        // that bit 23 becomes the sign (rxe's `psn_compare`).
        ((other.0.wrapping_sub(self.0) << 8) as i32) >> 8
    }

    /// Orders two PSNs by serial arithmetic. Only meaningful when they are
    /// less than 2^23 apart, which is the case for PSNs of one live QP.
    pub const fn serial_cmp(self, other: Psn) -> Ordering {
        let d = other.distance_to(self);
        if d < 0 {
            Ordering::Less
        } else if d > 0 {
            Ordering::Greater
        } else {
            Ordering::Equal
        }
    }

    /// Whether `self` comes strictly before `other`.
    pub const fn is_before(self, other: Psn) -> bool {
        self.distance_to(other) > 0
    }

    /// Whether `self` comes strictly after `other`.
    pub const fn is_after(self, other: Psn) -> bool {
        other.distance_to(self) > 0
    }

    /// Whether `self` is one of the `len` PSNs starting at `start`
    /// (`start`, `start + 1`, ..., `start + len - 1`, all modulo 2^24).
    pub const fn in_window(self, start: Psn, len: u32) -> bool {
        self.0.wrapping_sub(start.0) & Self::MASK < len
    }
}

impl Add<u32> for Psn {
    type Output = Psn;
    fn add(self, count: u32) -> Psn {
        self.wrapping_add(count)
    }
}

impl Sub<u32> for Psn {
    type Output = Psn;
    fn sub(self, count: u32) -> Psn {
        self.wrapping_sub(count)
    }
}

impl fmt::Display for Psn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_keeps_24_bits() {
        assert_eq!(Psn::new(0x1ff_ffff).value(), 0xff_ffff);
        assert_eq!(Psn::new(0x100_0000).value(), 0);
    }

    #[test]
    fn add_and_sub_wrap_at_2_pow_24() {
        assert_eq!(Psn::new(0xff_ffff).next(), Psn::new(0));
        assert_eq!(Psn::new(0xff_fffe) + 5, Psn::new(3));
        assert_eq!(Psn::new(2) - 5, Psn::new(0xff_fffd));
        assert_eq!(Psn::new(7) + Psn::MODULUS, Psn::new(7));
    }

    #[test]
    fn distance_is_signed_and_wraps() {
        let a = Psn::new(0xff_fff0);
        let b = Psn::new(0x10);
        assert_eq!(a.distance_to(b), 0x20);
        assert_eq!(b.distance_to(a), -0x20);
        assert_eq!(a.distance_to(a), 0);
        assert_eq!(Psn::new(0).distance_to(Psn::new(0x7f_ffff)), 0x7f_ffff);
        // Exactly half the range away reads as "behind".
        assert_eq!(Psn::new(0).distance_to(Psn::new(0x80_0000)), -0x80_0000);
    }

    #[test]
    fn order_across_the_wrap() {
        let before = Psn::new(0xff_ffff);
        let after = Psn::new(0);
        assert!(before.is_before(after));
        assert!(after.is_after(before));
        assert!(!after.is_before(before));
        assert_eq!(before.serial_cmp(after), Ordering::Less);
        assert_eq!(after.serial_cmp(before), Ordering::Greater);
        assert_eq!(after.serial_cmp(after), Ordering::Equal);
        assert!(!after.is_before(after) && !after.is_after(after));
    }

    #[test]
    fn window_membership_across_the_wrap() {
        let start = Psn::new(0xff_fffe);
        assert!(Psn::new(0xff_fffe).in_window(start, 4));
        assert!(Psn::new(0xff_ffff).in_window(start, 4));
        assert!(Psn::new(0).in_window(start, 4));
        assert!(Psn::new(1).in_window(start, 4));
        assert!(!Psn::new(2).in_window(start, 4));
        assert!(!Psn::new(0xff_fffd).in_window(start, 4));
        assert!(!start.in_window(start, 0));
    }
}
