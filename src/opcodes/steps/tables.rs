//! The step tables ([`STEPS`], the `-S` sets), the values their atomics
//! use, their fingerprint and their `-L` listing.

use super::step::{
    Key, Len, QpKind, Step, Target, FLUSH_GLOBAL, FLUSH_RANGE, F_INLINE, F_RNR, F_SOLICITED,
};
use uroce_verbs::{WcStatus, WrOpcode};

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
