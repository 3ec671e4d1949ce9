//! The memory both sides register and where everything is in it, and the
//! receives the server posts for a step table.

use super::step::{QpKind, Step, F_RNR};
use super::tables::STEPS;

/// Bytes of the one MR each side registers.
pub const BUF_SIZE: u64 = 1 << 20;
/// The GRH in front of every UD receive.
pub const GRH_LEN: u32 = 40;
/// The Q_Key of the UD QPs.
pub const UD_QKEY: u32 = 0x1111_1111;
/// RC receives posted beyond the steps' own; the bad rkey at the end moves
/// the QP to the error state and they are flushed.
pub const RC_SPARE: u64 = 3;
/// The `wr_id` of the first spare RC receive.
pub const SPARE_ID: u64 = 1000;
/// How long the server leaves its RC receive queue empty (the RNR window).
pub const RNR_WINDOW_MS: u64 = 200;

/// The server's UD receive buffer: GRH and up to 4096 bytes.
pub const OFF_UD_RECV: u64 = 0x00000;
/// The client's payload of the current SEND/WRITE.
pub const OFF_SRC: u64 = 0x02000;
/// The client's READ data and atomic results.
pub const OFF_DST: u64 = 0x06000;
/// The server's atomic words: word 0 the FETCH_ADD target, word 1 the
/// COMPARE_SWAP target.
pub const OFF_ATOMIC: u64 = 0x0a000;
/// The server's UC receive slots.
pub const OFF_UC_RECV: u64 = 0x10000;
/// The server's RC receive slots.
pub const OFF_RC_RECV: u64 = 0x20000;
/// The 64 KiB the server's two type-2 memory windows cover.
pub const OFF_MW: u64 = 0x50000;
/// Bytes the memory windows cover.
pub const MW_LEN: u64 = 0x10000;
/// One slot per step: its WRITE target or READ source, on the server.
pub const OFF_SLOT: u64 = 0x60000;
/// Bytes of a receive or step slot.
pub const SLOT: u64 = 0x4000;

/// The number of RC receives the server posts before the RNR step (it
/// posts the rest once they are all used).
pub fn rc_receives_before_rnr() -> usize {
    rc_receives_before_rnr_of(&STEPS)
}

/// [`rc_receives_before_rnr`] of any step table.
pub fn rc_receives_before_rnr_of(steps: &[Step]) -> usize {
    steps
        .iter()
        .take_while(|s| s.flags & F_RNR == 0)
        .filter(|s| s.qp == QpKind::Rc && s.takes_recv())
        .count()
}

/// The receive slot each receive-taking step gets on its QP (in step
/// order), by step index; `None` for steps that take none.
pub fn receive_slots() -> Vec<Option<u64>> {
    receive_slots_of(&STEPS)
}

/// [`receive_slots`] of any step table.
pub fn receive_slots_of(steps: &[Step]) -> Vec<Option<u64>> {
    let mut next = [0u64; 3];
    steps
        .iter()
        .map(|s| {
            s.takes_recv().then(|| {
                let slot = next[s.qp as usize];
                next[s.qp as usize] += 1;
                slot
            })
        })
        .collect()
}

/// Where step `s`'s receive slot `slot` is in the server's buffer.
pub fn receive_offset(s: &Step, slot: u64) -> u64 {
    match s.qp {
        QpKind::Ud => OFF_UD_RECV,
        QpKind::Uc => OFF_UC_RECV + slot * SLOT,
        QpKind::Rc => OFF_RC_RECV + slot * SLOT,
    }
}

/// Step `n`'s slot (its WRITE target or READ source) in the server's
/// buffer.
pub fn slot_offset(n: u32) -> u64 {
    OFF_SLOT + u64::from(n - 1) * SLOT
}
