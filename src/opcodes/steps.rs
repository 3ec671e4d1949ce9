//! The steps `uroce opcodes` and `rxe-opcodes` run, the memory layout
//! both sides share, the payload pattern and the byte checks.
//!
//! This table is `steps[]` in `tests/interop/vm/rxe-opcodes.c`, field for
//! field, and [`StepSet`] its `-S` sets (`steps_awrite[]`, `steps_flush[]`). Both programs send a fingerprint of it (for their path MTU) in
//! the exchange, so a difference between the two stops the run before any
//! RDMA instead of showing up as a data mismatch; `-L` prints it.

use uroce_verbs::{WcStatus, WrOpcode};

/// Bytes of the one MR each side registers.
pub const BUF_SIZE: u64 = 1 << 20;
/// Every byte of both buffers before anything runs.
pub const FILL: u8 = 0x5a;
/// The client's READ/atomic destination before each such step.
pub const DST_FILL: u8 = 0xee;
/// Bytes after each payload that must keep their fill (nothing wrote
/// beyond the message).
pub const GUARD: u32 = 64;
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

/// The FETCH_ADD word before the step.
pub const FA_INIT: u64 = 0x1122_3344_ffff_ffff;
/// What FETCH_ADD adds (it carries across the 32-bit halves).
pub const FA_ADD: u64 = 0x0000_0001_0000_0001;
/// The FETCH_ADD word after the step.
pub const FA_FINAL: u64 = FA_INIT.wrapping_add(FA_ADD);
/// The COMPARE_SWAP word before the steps.
pub const CAS_INIT: u64 = 0x0102_0304_0506_0708;
/// What the first COMPARE_SWAP swaps in.
pub const CAS_SWAP: u64 = 0xa1a2_a3a4_a5a6_a7a8;
/// What the second (stale) COMPARE_SWAP would swap in.
pub const CAS_STALE: u64 = 0xdead_beef_dead_beef;

/// `IBV_SEND_SOLICITED`.
pub const F_SOLICITED: u32 = 4;
/// `IBV_SEND_INLINE`.
pub const F_INLINE: u32 = 8;
/// The server's RC receive queue is empty when this step arrives.
pub const F_RNR: u32 = 0x100;
/// FLUSH placement type: global visibility (`IBV_FLUSH_GLOBAL`).
pub const FLUSH_GLOBAL: u64 = 1;
/// FLUSH selectivity level: the range in the RETH (`IBV_FLUSH_RANGE`).
pub const FLUSH_RANGE: u64 = 0;

/// The QP a step runs on (numbered as in the C table).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QpKind {
    /// The UD QP.
    Ud = 0,
    /// The UC QP.
    Uc = 1,
    /// The RC QP.
    Rc = 2,
}

/// A step's length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Len {
    /// Always these bytes.
    Fixed(u32),
    /// 3000 bytes per 1024 bytes of path MTU: FIRST, MIDDLE and LAST
    /// packets at every MTU.
    Big,
    /// Exactly one path MTU.
    Mtu,
}

/// Which key the WR carries (numbered as in the C table).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Key {
    /// None.
    None = 0,
    /// The server's MR rkey.
    Mr = 1,
    /// The MR rkey with bits flipped: a remote access error.
    Bad = 2,
    /// The first memory window's rkey (to invalidate).
    Mw0 = 3,
    /// The second memory window's rkey (to invalidate).
    Mw1 = 4,
}

/// The remote address (numbered as in the C table).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// None (SEND).
    None = 0,
    /// The step's own slot.
    Slot = 1,
    /// The FETCH_ADD word.
    FetchAdd = 2,
    /// The COMPARE_SWAP word.
    CompareSwap = 3,
    /// Both atomic words (16 bytes).
    Atomics = 4,
    /// The previous step's slot (what it wrote there).
    Previous = 5,
}

/// One step: a work request the client posts and what both sides check.
#[derive(Debug, Clone, Copy)]
pub struct Step {
    /// What it is called in the output.
    pub name: &'static str,
    /// The QP.
    pub qp: QpKind,
    /// The operation.
    pub op: WrOpcode,
    /// The length.
    pub len: Len,
    /// [`F_SOLICITED`], [`F_INLINE`], [`F_RNR`].
    pub flags: u32,
    /// The immediate data (`*_WITH_IMM`).
    pub imm: u32,
    /// The key.
    pub key: Key,
    /// The remote address.
    pub target: Target,
    /// FETCH_ADD's addend, COMPARE_SWAP's compare value.
    pub compare_add: u64,
    /// COMPARE_SWAP's swap value.
    pub swap: u64,
    /// The value an atomic returns.
    pub expect_orig: u64,
    /// The completion status the client expects.
    pub expect: WcStatus,
}

const fn step(name: &'static str, qp: QpKind, op: WrOpcode, len: Len) -> Step {
    Step {
        name,
        qp,
        op,
        len,
        flags: 0,
        imm: 0,
        key: Key::None,
        target: Target::None,
        compare_add: 0,
        swap: 0,
        expect_orig: 0,
        expect: WcStatus::Success,
    }
}

const fn imm(s: Step, imm: u32) -> Step {
    Step { imm, ..s }
}

const fn flags(s: Step, flags: u32) -> Step {
    Step { flags, ..s }
}

const fn to(s: Step, key: Key, target: Target) -> Step {
    Step { key, target, ..s }
}

const fn atomic(s: Step, compare_add: u64, swap: u64, expect_orig: u64) -> Step {
    Step { compare_add, swap, expect_orig, ..s }
}

const SMALL: Len = Len::Fixed(64);

/// The steps, in the order the client runs them (`steps[]` in
/// rxe-opcodes.c). The bad rkey is last: its NAK breaks the RC connection.
pub static STEPS: [Step; 26] = {
    use Key::{Bad, Mr, Mw0, Mw1};
    use QpKind::{Rc, Uc, Ud};
    use Target::{Atomics, CompareSwap, FetchAdd, Slot};
    use WrOpcode::*;
    [
        imm(step("UD SEND_WITH_IMM", Ud, SendWithImm, Len::Fixed(256)), 0x0d0d_0001),
        imm(step("UC SEND_WITH_IMM", Uc, SendWithImm, SMALL), 0x0c0c_0001),
        step("UC SEND multi", Uc, Send, Len::Big),
        to(
            imm(step("UC RDMA_WRITE_WITH_IMM multi", Uc, RdmaWriteWithImm, Len::Big), 0x0c0c_0002),
            Mr,
            Slot,
        ),
        to(
            imm(step("UC RDMA_WRITE_WITH_IMM only", Uc, RdmaWriteWithImm, SMALL), 0x0c0c_0003),
            Mr,
            Slot,
        ),
        to(step("UC RDMA_WRITE multi", Uc, RdmaWrite, Len::Big), Mr, Slot),
        imm(step("RC SEND_WITH_IMM only", Rc, SendWithImm, SMALL), 0x0a0a_0001),
        imm(step("RC SEND_WITH_IMM multi", Rc, SendWithImm, Len::Big), 0x0a0a_0002),
        to(
            imm(step("RC RDMA_WRITE_WITH_IMM only", Rc, RdmaWriteWithImm, SMALL), 0x0a0a_0003),
            Mr,
            Slot,
        ),
        to(
            imm(step("RC RDMA_WRITE_WITH_IMM multi", Rc, RdmaWriteWithImm, Len::Big), 0x0a0a_0004),
            Mr,
            Slot,
        ),
        step("RC SEND zero-length", Rc, Send, Len::Fixed(0)),
        to(step("RC RDMA_WRITE zero-length", Rc, RdmaWrite, Len::Fixed(0)), Mr, Slot),
        flags(step("RC SEND 2 bytes solicited", Rc, Send, Len::Fixed(2)), F_SOLICITED),
        to(step("RC SEND_WITH_INV only", Rc, SendWithInv, SMALL), Mw0, Target::None),
        to(step("RC SEND_WITH_INV multi", Rc, SendWithInv, Len::Big), Mw1, Target::None),
        flags(step("RC SEND into empty RQ (RNR)", Rc, Send, SMALL), F_RNR),
        to(
            flags(step("RC RDMA_WRITE inline 32", Rc, RdmaWrite, Len::Fixed(32)), F_INLINE),
            Mr,
            Slot,
        ),
        to(step("RC RDMA_WRITE multi", Rc, RdmaWrite, Len::Big), Mr, Slot),
        to(step("RC RDMA_READ zero-length", Rc, RdmaRead, Len::Fixed(0)), Mr, Slot),
        to(step("RC RDMA_READ only", Rc, RdmaRead, Len::Mtu), Mr, Slot),
        to(step("RC RDMA_READ multi", Rc, RdmaRead, Len::Big), Mr, Slot),
        atomic(
            to(step("RC FETCH_ADD", Rc, AtomicFetchAndAdd, Len::Fixed(8)), Mr, FetchAdd),
            FA_ADD,
            0,
            FA_INIT,
        ),
        atomic(
            to(step("RC COMPARE_SWAP (swap)", Rc, AtomicCmpAndSwp, Len::Fixed(8)), Mr, CompareSwap),
            CAS_INIT,
            CAS_SWAP,
            CAS_INIT,
        ),
        atomic(
            to(
                step("RC COMPARE_SWAP (no swap)", Rc, AtomicCmpAndSwp, Len::Fixed(8)),
                Mr,
                CompareSwap,
            ),
            CAS_INIT,
            CAS_STALE,
            CAS_SWAP,
        ),
        to(step("RC RDMA_READ atomic results", Rc, RdmaRead, Len::Fixed(16)), Mr, Atomics),
        Step {
            expect: WcStatus::RemAccessErr,
            ..to(step("RC RDMA_WRITE bad rkey", Rc, RdmaWrite, SMALL), Bad, Slot)
        },
    ]
};

/// `-S awrite` (`steps_awrite[]`): ATOMIC_WRITE, each read back, one right
/// behind a multi-packet WRITE, and last one with a bad rkey. An
/// ATOMIC_WRITE's 8 bytes are the step's pattern, as a WRITE's payload.
pub static AWRITE_STEPS: [Step; 6] = {
    use Key::{Bad, Mr};
    use QpKind::Rc;
    use Target::{Previous, Slot};
    use WrOpcode::*;
    [
        to(step("RC ATOMIC_WRITE", Rc, AtomicWrite, Len::Fixed(8)), Mr, Slot),
        to(step("RC RDMA_READ the ATOMIC_WRITE", Rc, RdmaRead, Len::Fixed(8)), Mr, Previous),
        to(step("RC RDMA_WRITE multi", Rc, RdmaWrite, Len::Big), Mr, Slot),
        to(step("RC ATOMIC_WRITE after a WRITE", Rc, AtomicWrite, Len::Fixed(8)), Mr, Slot),
        to(step("RC RDMA_READ the ATOMIC_WRITE", Rc, RdmaRead, Len::Fixed(8)), Mr, Previous),
        Step {
            expect: WcStatus::RemAccessErr,
            ..to(step("RC ATOMIC_WRITE bad rkey", Rc, AtomicWrite, Len::Fixed(8)), Bad, Slot)
        },
    ]
};

/// `-S flush` (`steps_flush[]`): a WRITE, then a FLUSH of it (global
/// visibility, the range) to a peer that gave no flush right. The status is
/// what Linux rxe 6.12's answer gives: it has none (its ICRC of a FLUSH
/// covers the headers twice, so it drops every FLUSH with the IBA's ICRC;
/// docs/interop.md), and the retries run out. rxe-opcodes can only be this
/// set's server (rdma-core 44 has no `ibv_wr_flush`).
pub static FLUSH_STEPS: [Step; 2] = {
    use Key::Mr;
    use QpKind::Rc;
    use Target::{Previous, Slot};
    use WrOpcode::*;
    [
        to(step("RC RDMA_WRITE", Rc, RdmaWrite, SMALL), Mr, Slot),
        Step {
            swap: (FLUSH_RANGE << 8) | FLUSH_GLOBAL,
            expect: WcStatus::RetryExcErr,
            ..to(step("RC FLUSH (global, range)", Rc, Flush, SMALL), Mr, Previous)
        },
    ]
};

/// A step set (`-S`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum StepSet {
    /// [`STEPS`].
    Base,
    /// [`AWRITE_STEPS`].
    Awrite,
    /// [`FLUSH_STEPS`].
    Flush,
}

impl StepSet {
    /// Its steps.
    pub fn steps(self) -> &'static [Step] {
        match self {
            StepSet::Base => &STEPS,
            StepSet::Awrite => &AWRITE_STEPS,
            StepSet::Flush => &FLUSH_STEPS,
        }
    }

    /// Its name (`-S NAME`).
    pub fn name(self) -> &'static str {
        match self {
            StepSet::Base => "base",
            StepSet::Awrite => "awrite",
            StepSet::Flush => "flush",
        }
    }
}

impl Step {
    /// Its length at path MTU `mtu` bytes.
    pub fn bytes(&self, mtu: u32) -> u32 {
        match self.len {
            Len::Fixed(n) => n,
            Len::Big => 3000 * mtu / 1024,
            Len::Mtu => mtu,
        }
    }

    /// A SEND of any kind.
    pub fn is_send(&self) -> bool {
        matches!(self.op, WrOpcode::Send | WrOpcode::SendWithImm | WrOpcode::SendWithInv)
    }

    /// An RDMA WRITE of any kind.
    pub fn is_write(&self) -> bool {
        matches!(self.op, WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm)
    }

    /// An RDMA READ.
    pub fn is_read(&self) -> bool {
        self.op == WrOpcode::RdmaRead
    }

    /// FETCH_ADD or COMPARE_SWAP.
    pub fn is_atomic(&self) -> bool {
        matches!(self.op, WrOpcode::AtomicFetchAndAdd | WrOpcode::AtomicCmpAndSwp)
    }

    /// Its payload (the step's pattern) lands in its slot: a WRITE or an
    /// ATOMIC_WRITE.
    pub fn writes_slot(&self) -> bool {
        self.is_write() || self.op == WrOpcode::AtomicWrite
    }

    /// It carries immediate data.
    pub fn has_imm(&self) -> bool {
        matches!(self.op, WrOpcode::SendWithImm | WrOpcode::RdmaWriteWithImm)
    }

    /// It consumes one of the server's receives.
    pub fn takes_recv(&self) -> bool {
        self.is_send() || self.op == WrOpcode::RdmaWriteWithImm
    }
}

/// The byte at offset `i` of step `n`'s payload (steps count from 1).
pub fn pattern(n: u32, i: u32) -> u8 {
    i.wrapping_mul(131).wrapping_add(i >> 8).wrapping_add(n.wrapping_mul(59)).wrapping_add(17) as u8
}

/// Step `n`'s first `len` payload bytes.
pub fn pattern_bytes(n: u32, len: u32) -> Vec<u8> {
    (0..len).map(|i| pattern(n, i)).collect()
}

/// The C table's fingerprint: FNV-1a over every field that decides what
/// goes on the wire and what is checked, each as a little-endian u32, at
/// path MTU `mtu` bytes.
pub fn fingerprint(mtu: u32) -> u32 {
    fingerprint_of(&STEPS, mtu)
}

/// [`fingerprint`] of any step table.
pub fn fingerprint_of(steps: &[Step], mtu: u32) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for s in steps {
        let fields = [
            s.qp as u32,
            u32::from(s.op.raw()),
            s.bytes(mtu),
            s.flags,
            s.imm,
            s.key as u32,
            s.target as u32,
            s.compare_add as u32,
            (s.compare_add >> 32) as u32,
            s.swap as u32,
            (s.swap >> 32) as u32,
            s.expect_orig as u32,
            (s.expect_orig >> 32) as u32,
            u32::from(s.expect.raw()),
        ];
        for byte in fields.iter().flat_map(|v| v.to_le_bytes()) {
            h ^= u32::from(byte);
            h = h.wrapping_mul(0x0100_0193);
        }
    }
    h
}

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

/// A difference between bytes read and the bytes wanted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mismatch {
    /// The first differing offset.
    pub offset: usize,
    /// The byte found there.
    pub got: u8,
    /// The byte wanted there.
    pub want: u8,
    /// How many bytes differ in all.
    pub differing: usize,
    /// How many bytes were compared.
    pub len: usize,
}

/// Compares `got` with `want(i)` byte by byte.
pub fn compare(got: &[u8], want: impl Fn(usize) -> u8) -> Option<Mismatch> {
    let offset = got.iter().enumerate().position(|(i, b)| *b != want(i))?;
    let differing = got.iter().enumerate().filter(|(i, b)| **b != want(*i)).count();
    Some(Mismatch { offset, got: got[offset], want: want(offset), differing, len: got.len() })
}

/// The C program's wording of a payload mismatch.
pub fn describe_mismatch(what: &str, m: &Mismatch) -> String {
    format!(
        "{what}: byte {} is 0x{:02x}, want 0x{:02x} ({} of {} bytes differ)",
        m.offset, m.got, m.want, m.differing, m.len
    )
}

/// The C program's wording of a guard (fill) mismatch.
pub fn describe_overrun(what: &str, m: &Mismatch) -> String {
    format!(
        "{what}: byte {} is 0x{:02x}, want the fill 0x{:02x} (written beyond the payload?)",
        m.offset, m.got, m.want
    )
}

/// Checks `bytes` (a payload followed by [`GUARD`] bytes): the payload
/// must be `want(i)`, the guard `fill`. `Err` says what differs first.
pub fn check_payload(
    what: &str,
    bytes: &[u8],
    len: usize,
    want: impl Fn(usize) -> u8,
    fill: u8,
) -> Result<(), String> {
    let (payload, guard) = bytes.split_at(len.min(bytes.len()));
    if let Some(m) = compare(payload, want) {
        return Err(describe_mismatch(what, &m));
    }
    match compare(guard, |_| fill) {
        Some(m) => Err(describe_overrun(what, &m)),
        None => Ok(()),
    }
}

/// The lines of `-L`: the table at path MTU `mtu`, as rxe-opcodes prints
/// it.
pub fn listing(mtu: u32, version: u32) -> String {
    listing_of(StepSet::Base, mtu, version)
}

/// [`listing`] of a step set.
pub fn listing_of(set: StepSet, mtu: u32, version: u32) -> String {
    let steps = set.steps();
    // The base set's line is the one rxe-opcodes printed before -S.
    let named = match set {
        StepSet::Base => String::new(),
        _ => format!(" step set {},", set.name()),
    };
    let mut s = format!(
        "rxe-opcodes exchange v{version}, path MTU {mtu},{named} {} steps, fingerprint 0x{:08x}\n",
        steps.len(),
        fingerprint_of(steps, mtu)
    );
    for (i, st) in steps.iter().enumerate() {
        s.push_str(&format!("{:2} {:<30} len={}\n", i + 1, st.name, st.bytes(mtu)));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pattern_is_the_c_programs() {
        // Printed by the C pattern() of rxe-opcodes.c.
        let c = [
            (1, 0, 0x4c),
            (1, 1, 0xcf),
            (1, 255, 0xc9),
            (1, 256, 0x4d),
            (1, 1023, 0xcc),
            (1, 11999, 0x97),
            (2, 0, 0x87),
            (2, 256, 0x88),
            (21, 1023, 0x68),
            (26, 11999, 0x5a),
        ];
        for (n, i, byte) in c {
            assert_eq!(pattern(n, i), byte, "pattern({n}, {i})");
        }
    }

    #[test]
    fn the_fingerprint_is_the_c_tables() {
        // `rxe-opcodes -L -m 1024` and `-m 4096` (the build of this commit).
        assert_eq!(fingerprint(1024), 0x97cf_8137);
        assert_eq!(fingerprint(4096), 0xb1ef_3df3);
        assert_ne!(fingerprint(1024), fingerprint(2048));
        // `rxe-opcodes -L -S awrite` and `-L -S flush`.
        assert_eq!(fingerprint_of(StepSet::Awrite.steps(), 1024), 0xec1e_e6fa);
        assert_eq!(fingerprint_of(StepSet::Flush.steps(), 1024), 0x9cc1_3f72);
    }

    #[test]
    fn the_iba15_sets_end_with_their_nak_and_read_back_what_they_wrote() {
        for set in [StepSet::Awrite, StepSet::Flush] {
            let steps = set.steps();
            let (last, rest) = steps.split_last().expect("steps");
            assert_ne!(last.expect, WcStatus::Success, "{set:?}: the NAK comes last");
            assert!(rest.iter().all(|s| s.expect == WcStatus::Success));
            for (i, s) in steps.iter().enumerate() {
                if s.target == Target::Previous {
                    assert!(i > 0 && steps[i - 1].writes_slot(), "{set:?} step {}", i + 1);
                    assert!(s.bytes(1024) <= steps[i - 1].bytes(1024));
                }
            }
        }
    }

    #[test]
    fn lengths_scale_with_the_mtu_past_two_packets() {
        for mtu in [256, 512, 1024, 2048, 4096] {
            let big = STEPS[2].bytes(mtu);
            assert!(big > 2 * mtu, "BIG {big} at MTU {mtu} is not FIRST/MIDDLE/LAST");
            assert!(u64::from(big + GUARD) <= SLOT);
        }
        assert_eq!(STEPS[2].bytes(1024), 3000);
        assert_eq!(STEPS[2].bytes(4096), 12000);
        assert_eq!(STEPS[19].bytes(4096), 4096);
    }

    #[test]
    fn the_layout_fits_and_the_rnr_step_finds_an_empty_queue() {
        assert!(slot_offset(STEPS.len() as u32) + SLOT <= BUF_SIZE);
        assert_eq!(rc_receives_before_rnr(), 8);
        let slots = receive_slots();
        let rc_slots =
            slots.iter().zip(&STEPS).filter(|(s, st)| s.is_some() && st.qp == QpKind::Rc);
        let last_rc = rc_slots.filter_map(|(s, _)| *s).max().expect("RC receives");
        assert!(OFF_RC_RECV + (last_rc + 1 + RC_SPARE) * SLOT <= OFF_MW);
        let uc = slots.iter().zip(&STEPS).filter(|(s, st)| s.is_some() && st.qp == QpKind::Uc);
        assert!(OFF_UC_RECV + uc.count() as u64 * SLOT <= OFF_RC_RECV);
        assert_eq!(STEPS.last().map(|s| s.expect), Some(WcStatus::RemAccessErr));
    }

    #[test]
    fn the_checker_catches_a_flipped_byte_a_shift_and_an_overrun() {
        let len = 3000;
        let good: Vec<u8> = pattern_bytes(8, len).into_iter().chain([FILL; 64]).collect();
        let want = |i: usize| pattern(8, i as u32);
        assert_eq!(check_payload("x", &good, len as usize, want, FILL), Ok(()));

        let mut flipped = good.clone();
        flipped[1500] ^= 0xff;
        let err = check_payload("x", &flipped, len as usize, want, FILL).unwrap_err();
        assert_eq!(
            err,
            format!(
                "x: byte 1500 is 0x{:02x}, want 0x{:02x} (1 of 3000 bytes differ)",
                flipped[1500], good[1500]
            )
        );

        // A packet's worth landed 1024 bytes late: every byte of it differs.
        let mut shifted = good.clone();
        shifted.copy_within(0..1024, 1024);
        let err = check_payload("x", &shifted, len as usize, want, FILL).unwrap_err();
        assert!(err.starts_with("x: byte 1024 is"), "{err}");
        assert!(err.contains("1024 of 3000 bytes differ"), "{err}");

        // Another step's payload (the same bytes moved by one step).
        let other: Vec<u8> = pattern_bytes(9, len).into_iter().chain([FILL; 64]).collect();
        assert!(check_payload("x", &other, len as usize, want, FILL).is_err());

        let mut overrun = good.clone();
        overrun[len as usize + 3] = 0;
        let err = check_payload("x", &overrun, len as usize, want, FILL).unwrap_err();
        assert!(err.contains("byte 3 is 0x00, want the fill 0x5a"), "{err}");
    }
}
