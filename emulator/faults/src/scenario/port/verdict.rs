//! What the [`Port`](super::Port) tells the runtime about a packet, and its limits.

use super::*;

/// Packets held for reordering at most; past it a packet goes unheld.
pub const MAX_HELD: usize = 64;
/// Firings kept in the log until drained; past it they are counted only.
pub const MAX_LOG: usize = 4096;
/// Device actions kept until polled.
pub const MAX_DEVICE_ACTIONS: usize = 1024;

/// Who the device is, to narrow rules by `role` and `device`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceInfo {
    /// Its address (`UROCE_ADDR`; in the simulator the node's).
    pub address: IpAddr,
    /// The process's role (`--role`), if any.
    pub role: Option<String>,
}

/// What becomes of one packet at the port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PortVerdict {
    /// The copies that go on now, in order (none: dropped or held), each
    /// with its delay (background line delay and reordering, plus a rule's
    /// `delay`) and its flipped bit (background or a rule's `corrupt`).
    pub copies: [Option<CopyVerdict>; 2],
    /// Extra copies of the first copy (a `duplicate` rule), the i-th
    /// (1-based) `i × extra_gap_ns` after it.
    pub extra: u8,
    /// Gap between extra copies.
    pub extra_gap_ns: u64,
    /// Held by a `reorder` rule: it comes out of [`Port::take_released`].
    pub held: bool,
    /// Why it was dropped, if it was.
    pub dropped: Option<DropCause>,
    /// Whether any rule fired on it.
    pub fired: bool,
    /// The background faults' own verdict (egress, when the scenario has
    /// background faults): drawn for every packet, whatever the rules did.
    pub background: Option<Verdict>,
}

/// Why the port dropped a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropCause {
    /// A `drop` rule.
    Rule,
    /// The link is down (`link_down`).
    LinkDown,
    /// The peer is cut off (`partition`).
    Partition,
    /// The background random loss.
    Background,
}

/// A held packet whose turn came.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    /// Its direction.
    pub dir: Dir,
    /// The local QPN it was given with.
    pub local_qpn: Option<Qpn>,
    /// The IP packet.
    pub packet: Vec<u8>,
    /// Its copies (as [`PortVerdict::copies`]).
    pub copies: [Option<CopyVerdict>; 2],
}
