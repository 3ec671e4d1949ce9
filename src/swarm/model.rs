//! The reference model's memory and atomics: what remote memory must hold
//! at the end, and whether atomic results form a legal history.

use std::collections::{BTreeMap, VecDeque};
use std::rc::Rc;

/// A region one QP writes into on its peer (RDMA WRITE targets).
///
/// Over RC, WRITEs execute exactly once and in order: the image after
/// every WRITE known complete is certain. WRITEs that may or may not have
/// run (the QP failed with them outstanding) and every UC WRITE (UC may
/// lose, duplicate and reorder them, and may land only some packets) are
/// "uncertain": each byte they cover may hold their data or anything
/// that byte could hold without them.
pub struct Window {
    /// The image if every WRITE known complete ran, in order.
    pub certain: Vec<u8>,
    /// RC WRITEs posted and not yet retired, oldest first: (tag, offset,
    /// data).
    pub pending: VecDeque<(u64, u64, Rc<Vec<u8>>)>,
    /// WRITEs that may have run, in posting order: (offset, data).
    pub uncertain: Vec<(u64, Rc<Vec<u8>>)>,
}

impl Window {
    /// A window whose memory starts as `initial`.
    pub fn new(initial: Vec<u8>) -> Window {
        Window { certain: initial, pending: VecDeque::new(), uncertain: Vec::new() }
    }

    /// The oldest pending WRITE (tagged `tag`) completed.
    pub fn complete(&mut self, tag: u64) -> Result<(), String> {
        match self.pending.pop_front() {
            Some((t, off, data)) if t == tag => {
                self.certain[off as usize..off as usize + data.len()].copy_from_slice(&data);
                Ok(())
            }
            other => Err(format!(
                "model: WRITE {tag} retired but the oldest pending WRITE is {:?}",
                other.map(|p| p.0)
            )),
        }
    }

    /// The oldest pending WRITE (tagged `tag`) failed or was flushed: it
    /// may have run, in whole or in part.
    pub fn abandon(&mut self, tag: u64) -> Result<(), String> {
        match self.pending.pop_front() {
            Some((t, off, data)) if t == tag => {
                self.uncertain.push((off, data));
                Ok(())
            }
            other => Err(format!(
                "model: WRITE {tag} failed but the oldest pending WRITE is {:?}",
                other.map(|p| p.0)
            )),
        }
    }

    /// Checks the memory's final bytes. Returns how many bytes hold a
    /// value no legal history explains, and the first of them.
    pub fn check(&mut self, actual: &[u8]) -> Option<(usize, usize)> {
        // Anything still pending at the end (a liveness failure) may have
        // run.
        while let Some((_, off, data)) = self.pending.pop_front() {
            self.uncertain.push((off, data));
        }
        let mut primary = self.certain.clone();
        for (off, data) in &self.uncertain {
            primary[*off as usize..*off as usize + data.len()].copy_from_slice(data);
        }
        let mut explained: Vec<bool> = (0..actual.len())
            .map(|i| actual[i] == primary[i] || actual[i] == self.certain[i])
            .collect();
        for (off, data) in self.uncertain.iter().rev() {
            for (k, &byte) in data.iter().enumerate() {
                let i = *off as usize + k;
                if !explained[i] && actual[i] == byte {
                    explained[i] = true;
                }
            }
        }
        let bad = explained.iter().filter(|e| !**e).count();
        (bad > 0).then(|| (bad, explained.iter().position(|e| !*e).unwrap_or(0)))
    }
}

/// Where an atomic stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AtomicState {
    /// Posted, not retired.
    Pending,
    /// Completed: it ran once and returned this original value.
    Done(u64),
    /// Failed or flushed: it ran once or not at all.
    Uncertain,
}

/// One FETCH_ADD or COMPARE_SWAP.
#[derive(Debug, Clone, Copy)]
pub struct AtomicOp {
    /// The side (QP) that issued it.
    pub side: usize,
    /// FETCH_ADD: the addend. COMPARE_SWAP: the compare value.
    pub operand: u64,
    /// COMPARE_SWAP: the swap value (unique in the run).
    pub swap: u64,
    /// Its state.
    pub state: AtomicState,
}

/// An 8-byte word that atomics target.
pub struct Counter {
    /// Offset in the node's atomics region.
    pub offset: u64,
    /// Its value before the run.
    pub initial: u64,
    /// Operations on it, in posting order (per side: execution order).
    pub ops: Vec<AtomicOp>,
}

impl Counter {
    /// Checks a FETCH_ADD counter: the completed additions, sorted by the
    /// value they saw, must chain from the initial value to the final one,
    /// every gap being filled by additions that may have run; and each
    /// QP's additions saw increasing values in posting order.
    pub fn check_fetch_add(&self, actual: u64) -> Result<(), String> {
        let mut known: Vec<(u64, u64)> = self
            .ops
            .iter()
            .filter_map(|op| match op.state {
                AtomicState::Done(orig) => Some((orig, op.operand)),
                _ => None,
            })
            .collect();
        known.sort_unstable();
        let uncertain: Vec<u64> = self
            .ops
            .iter()
            .filter(|op| matches!(op.state, AtomicState::Uncertain | AtomicState::Pending))
            .map(|op| op.operand)
            .collect();
        let mut cur = u128::from(self.initial);
        let mut gaps = 0u128;
        for &(orig, add) in &known {
            let orig = u128::from(orig);
            if orig < cur {
                return Err(format!(
                    "FETCH_ADD returned {orig:#x}, but the counter had already passed it \
                     (at least {cur:#x}): an addition ran twice or a result is wrong"
                ));
            }
            gaps += orig - cur;
            cur = orig + u128::from(add);
        }
        let actual_wide = u128::from(actual);
        if actual_wide < cur {
            return Err(format!(
                "final value {actual:#x} is below {cur:#x}, the sum the completed additions reach"
            ));
        }
        gaps += actual_wide - cur;
        if !subset_sum(&uncertain, gaps) {
            return Err(format!(
                "the completed additions leave {gaps} unexplained, which no subset of the {} \
                 additions that may have run adds up to (initial {:#x}, final {actual:#x})",
                uncertain.len(),
                self.initial
            ));
        }
        // Per QP, in posting order: each saw at least what the previous one
        // left.
        let mut last: BTreeMap<usize, (u64, u64)> = BTreeMap::new();
        for op in &self.ops {
            let AtomicState::Done(orig) = op.state else { continue };
            if let Some(&(prev, add)) = last.get(&op.side) {
                if u128::from(orig) < u128::from(prev) + u128::from(add) {
                    return Err(format!(
                        "side {}: FETCH_ADD saw {orig:#x} after an earlier one saw {prev:#x} \
                         and added {add}: executed out of order",
                        op.side
                    ));
                }
            }
            last.insert(op.side, (orig, op.operand));
        }
        Ok(())
    }

    /// Checks a COMPARE_SWAP counter. Swap values are unique, so the
    /// successful swaps (known, plus possibly some that may have run) must
    /// form one chain of values from the initial value to the final one;
    /// every failed swap must have seen a value of that chain; and each
    /// QP's swaps saw the chain in order (a success moves past its value).
    pub fn check_compare_swap(&self, actual: u64) -> Result<(), String> {
        let mut from: BTreeMap<u64, Vec<usize>> = BTreeMap::new();
        let mut known = 0usize;
        for (i, op) in self.ops.iter().enumerate() {
            if op.state == AtomicState::Done(op.operand) {
                from.entry(op.operand).or_default().push(i);
                known += 1;
            }
        }
        if let Some((v, ops)) = from.iter().find(|(_, ops)| ops.len() > 1) {
            return Err(format!("{} swaps all succeeded from the value {v:#x}", ops.len()));
        }
        let uncertain: Vec<usize> = (0..self.ops.len())
            .filter(|&i| matches!(self.ops[i].state, AtomicState::Uncertain | AtomicState::Pending))
            .collect();
        let mut search = ChainSearch {
            ops: &self.ops,
            from: &from,
            uncertain: &uncertain,
            used: vec![false; uncertain.len()],
            known,
            actual,
            budget: 200_000,
            chain: vec![self.initial],
        };
        if !search.extend(self.initial, 0) {
            let why = if search.budget == 0 { " (search budget spent)" } else { "" };
            return Err(format!(
                "no chain of successful swaps leads from {:#x} to the final value {actual:#x}{why}",
                self.initial
            ));
        }
        let position: BTreeMap<u64, usize> =
            search.chain.iter().enumerate().map(|(i, &v)| (v, i)).collect();
        let mut last: BTreeMap<usize, usize> = BTreeMap::new();
        for op in &self.ops {
            let AtomicState::Done(orig) = op.state else { continue };
            let Some(&pos) = position.get(&orig) else {
                return Err(format!(
                    "side {}: COMPARE_SWAP returned {orig:#x}, a value the word never held",
                    op.side
                ));
            };
            if let Some(&min) = last.get(&op.side) {
                if pos < min {
                    return Err(format!(
                        "side {}: COMPARE_SWAP saw {orig:#x} (step {pos}) after an earlier one \
                         left the word at step {min} or later: executed out of order",
                        op.side
                    ));
                }
            }
            let next = if orig == op.operand { pos + 1 } else { pos };
            last.insert(op.side, next);
        }
        Ok(())
    }
}

struct ChainSearch<'a> {
    ops: &'a [AtomicOp],
    from: &'a BTreeMap<u64, Vec<usize>>,
    uncertain: &'a [usize],
    used: Vec<bool>,
    known: usize,
    actual: u64,
    budget: u32,
    chain: Vec<u64>,
}

impl ChainSearch<'_> {
    /// Extends the chain from `value`, having used `used_known` known
    /// successes; true when it reaches the final value with all of them.
    fn extend(&mut self, value: u64, used_known: usize) -> bool {
        if self.budget == 0 {
            return false;
        }
        self.budget -= 1;
        if let Some(ops) = self.from.get(&value) {
            let next = self.ops[ops[0]].swap;
            self.chain.push(next);
            if self.extend(next, used_known + 1) {
                return true;
            }
            self.chain.pop();
            return false;
        }
        if used_known == self.known && value == self.actual {
            return true;
        }
        for k in 0..self.uncertain.len() {
            let op = self.ops[self.uncertain[k]];
            if self.used[k] || op.operand != value {
                continue;
            }
            self.used[k] = true;
            self.chain.push(op.swap);
            if self.extend(op.swap, used_known) {
                return true;
            }
            self.chain.pop();
            self.used[k] = false;
        }
        false
    }
}

/// Whether some subset of `values` sums to `target`.
fn subset_sum(values: &[u64], target: u128) -> bool {
    if target == 0 {
        return true;
    }
    let total: u128 = values.iter().map(|&v| u128::from(v)).sum();
    if target > total {
        return false;
    }
    if total > 50_000_000 {
        // Too large to decide exactly; the bound above is all we check.
        return true;
    }
    let bits = total as usize + 1;
    let mut reach = vec![0u64; bits.div_ceil(64)];
    reach[0] = 1;
    for &v in values {
        let v = v as usize;
        if v == 0 {
            continue;
        }
        let (words, shift) = (v / 64, v % 64);
        for i in (0..reach.len()).rev() {
            let mut shifted = 0u64;
            if i >= words {
                shifted = reach[i - words] << shift;
                if shift > 0 && i > words {
                    shifted |= reach[i - words - 1] >> (64 - shift);
                }
            }
            reach[i] |= shifted;
        }
    }
    let t = target as usize;
    reach[t / 64] >> (t % 64) & 1 == 1
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(side: usize, operand: u64, swap: u64, state: AtomicState) -> AtomicOp {
        AtomicOp { side, operand, swap, state }
    }

    #[test]
    fn subset_sums() {
        assert!(subset_sum(&[], 0));
        assert!(!subset_sum(&[], 1));
        assert!(subset_sum(&[3, 5, 7], 12));
        assert!(!subset_sum(&[3, 5, 7], 11));
        assert!(subset_sum(&[70, 1, 64], 135));
        assert!(!subset_sum(&[70, 64], 65));
    }

    #[test]
    fn fetch_add_histories() {
        let c = Counter {
            offset: 0,
            initial: 100,
            ops: vec![
                op(0, 5, 0, AtomicState::Done(100)),
                op(1, 7, 0, AtomicState::Done(105)),
                op(0, 0, 0, AtomicState::Done(112)),
                op(1, 3, 0, AtomicState::Uncertain),
            ],
        };
        assert!(c.check_fetch_add(112).is_ok());
        assert!(c.check_fetch_add(115).is_ok());
        assert!(c.check_fetch_add(113).is_err());
        let twice = Counter {
            ops: vec![op(0, 5, 0, AtomicState::Done(100)), op(1, 5, 0, AtomicState::Done(100))],
            ..c
        };
        assert!(twice.check_fetch_add(110).is_err());
    }

    #[test]
    fn compare_swap_histories() {
        let c = Counter {
            offset: 0,
            initial: 1,
            ops: vec![
                op(0, 1, 10, AtomicState::Done(1)),
                op(1, 1, 11, AtomicState::Done(10)),
                op(1, 10, 12, AtomicState::Uncertain),
                op(0, 12, 13, AtomicState::Done(12)),
            ],
        };
        assert!(c.check_compare_swap(13).is_ok());
        assert!(c.check_compare_swap(12).is_err());
        let ghost = Counter { ops: vec![op(0, 5, 10, AtomicState::Done(99))], ..c };
        assert!(ghost.check_compare_swap(1).is_err());
        let reordered = Counter {
            initial: 1,
            offset: 0,
            ops: vec![op(0, 1, 10, AtomicState::Done(1)), op(0, 7, 11, AtomicState::Done(1))],
        };
        assert!(reordered.check_compare_swap(10).is_err());
    }

    #[test]
    fn windows() {
        let mut w = Window::new(vec![0; 16]);
        w.pending.push_back((1, 0, Rc::new(vec![1; 8])));
        w.pending.push_back((2, 4, Rc::new(vec![2; 8])));
        w.complete(1).unwrap();
        w.abandon(2).unwrap();
        let mut a = vec![1u8; 8];
        a.extend([0u8; 8]);
        assert_eq!(w.check(&a), None);
        // The abandoned WRITE covers bytes 4..12: each may hold its data.
        a[5] = 2;
        a[11] = 2;
        assert_eq!(w.check(&a), None);
        // Bytes no WRITE covers must keep their value.
        a[13] = 2;
        a[15] = 9;
        assert_eq!(w.check(&a), Some((2, 13)));
    }
}
