//! Newtypes for the identifiers that travel in headers, so that a queue pair
//! number can never be passed where a remote key is expected.

use core::fmt;

/// A queue pair number: 24 bits on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(from = "u32", into = "u32"))]
pub struct Qpn(u32);

impl From<u32> for Qpn {
    fn from(value: u32) -> Qpn {
        Qpn::new(value)
    }
}

impl From<Qpn> for u32 {
    fn from(qpn: Qpn) -> u32 {
        qpn.0
    }
}

impl Qpn {
    /// The largest value a QPN field can hold.
    pub const MAX: u32 = 0x00ff_ffff;
    /// QP0, the subnet management QP (not used by RoCE).
    pub const SMI: Qpn = Qpn(0);
    /// QP1, the general services QP that carries CM MADs.
    pub const GSI: Qpn = Qpn(1);
    /// The multicast QPN (IBA 0xFFFFFF): a UD packet to it goes to every
    /// QP attached to the group its destination GID names.
    pub const MULTICAST: Qpn = Qpn(Self::MAX);

    /// A QPN from the low 24 bits of `value` (higher bits are dropped, as
    /// they would be on the wire).
    pub const fn new(value: u32) -> Qpn {
        Qpn(value & Self::MAX)
    }

    /// The number as an integer.
    pub const fn value(self) -> u32 {
        self.0
    }
}

impl fmt::Display for Qpn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "0x{:06x}", self.0)
    }
}

/// A remote key: names a memory region or window on the responder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Rkey(pub u32);

impl fmt::Display for Rkey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "0x{:08x}", self.0)
    }
}

/// A queue key: the password a UD datagram must carry to be accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Qkey(pub u32);

impl Qkey {
    /// Q_Keys with the high bit set are privileged (e.g. 0x80010000, the
    /// CM's Q_Key); an unprivileged sender may not use them.
    pub const fn is_privileged(self) -> bool {
        self.0 & 0x8000_0000 != 0
    }
}

impl fmt::Display for Qkey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "0x{:08x}", self.0)
    }
}
