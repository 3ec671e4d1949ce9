//! Buffers in registered memory: a FIFO allocator per work queue, the
//! scatter/gather layout of one buffer, and the canary that must survive
//! wherever the HCA has no business writing.

use std::collections::VecDeque;
use uroce_sim::{Probability, SimRng};
use uroce_verbs::{Mr, Sge};

/// A FIFO allocator over one memory region. A work queue retires its WRs
/// in posting order, so its buffers are freed in allocation order: a ring.
pub struct Arena {
    /// The region.
    pub mr: Mr,
    size: u64,
    /// Live allocations, oldest first: (start, length).
    live: VecDeque<(u64, u64)>,
}

impl Arena {
    /// An allocator over all of `mr`.
    pub fn new(mr: Mr) -> Arena {
        let size = mr.length();
        Arena { mr, size, live: VecDeque::new() }
    }

    /// Allocates `len` bytes (at least 8, rounded up to 8); `None` when the
    /// ring has no room now.
    pub fn alloc(&mut self, len: u64) -> Option<u64> {
        let len = len.max(8).div_ceil(8) * 8;
        if len > self.size {
            return None;
        }
        let start = match (self.live.front(), self.live.back()) {
            (Some(&(oldest, _)), Some(&(newest, newest_len))) => {
                let end = newest + newest_len;
                if newest >= oldest {
                    if end + len <= self.size {
                        end
                    } else if len <= oldest {
                        0
                    } else {
                        return None;
                    }
                } else if end + len <= oldest {
                    end
                } else {
                    return None;
                }
            }
            _ => 0,
        };
        self.live.push_back((start, len));
        Some(start)
    }

    /// Frees the oldest allocation.
    pub fn free_oldest(&mut self) {
        self.live.pop_front();
    }

    /// Takes back the newest allocation (a post that failed).
    pub fn free_newest(&mut self) {
        self.live.pop_back();
    }
}

/// The byte a buffer holds at region offset `at` until the HCA writes it.
pub fn canary(at: u64) -> u8 {
    ((at.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 56) as u8) ^ 0x5a
}

/// Where one buffer's bytes go: SGE pieces inside an allocation, with
/// gaps between them that must keep their canary.
#[derive(Debug, Clone, Default)]
pub struct Layout {
    /// Region offset of the allocation.
    pub base: u64,
    /// Bytes allocated.
    pub total: u64,
    /// The pieces in SGE order: (offset in the allocation, length).
    pub pieces: Vec<(u64, u64)>,
}

impl Layout {
    /// Draws a layout of `len` bytes over at most `max_sge` SGEs. A
    /// zero-length buffer may get no SGE at all when `allow_empty`.
    pub fn draw(rng: &mut SimRng, len: u64, max_sge: u32, allow_empty: bool) -> Layout {
        if len == 0 && allow_empty && rng.chance(Probability::from_percent(50)) {
            return Layout::default();
        }
        let n = 1 + rng.below(u64::from(max_sge.max(1)).min(len.max(1))) as usize;
        let mut cuts: Vec<u64> = (0..n - 1).map(|_| rng.range_inclusive(0, len)).collect();
        cuts.sort_unstable();
        let mut lengths = Vec::with_capacity(n);
        let mut prev = 0;
        for cut in cuts.into_iter().chain(std::iter::once(len)) {
            lengths.push(cut - prev);
            prev = cut;
        }
        let gap = |rng: &mut SimRng| {
            if rng.chance(Probability::from_percent(50)) {
                0
            } else {
                rng.range_inclusive(1, 24)
            }
        };
        // Pieces usually lie in SGE order in memory, sometimes reversed.
        let reversed = rng.chance(Probability::from_percent(20));
        let mut offsets = vec![0u64; n];
        let mut at = gap(rng);
        let order: Vec<usize> = if reversed { (0..n).rev().collect() } else { (0..n).collect() };
        for i in order {
            offsets[i] = at;
            at += lengths[i] + gap(rng);
        }
        Layout { base: 0, total: at, pieces: offsets.into_iter().zip(lengths).collect() }
    }

    /// The SGEs of the buffer in region `mr`.
    pub fn sges(&self, mr: &Mr) -> Vec<Sge> {
        self.pieces.iter().map(|&(off, len)| mr.sge(self.base + off, len as u32)).collect()
    }

    /// The allocation's bytes: the canary everywhere, then `data` poured
    /// into the pieces in SGE order (at most their capacity).
    pub fn image(&self, data: &[u8]) -> Vec<u8> {
        let mut bytes: Vec<u8> = (0..self.total).map(|i| canary(self.base + i)).collect();
        let mut left = data;
        for &(off, len) in &self.pieces {
            let take = (len as usize).min(left.len());
            bytes[off as usize..off as usize + take].copy_from_slice(&left[..take]);
            left = &left[take..];
        }
        bytes
    }

    /// Reads the buffer back: the first `len` bytes through the pieces,
    /// and where a canary was lost, if anywhere.
    pub fn read_back(&self, mr: &Mr, len: u64) -> Result<(Vec<u8>, Canary), String> {
        let bytes = mr
            .read_vec(self.base, self.total as usize)
            .map_err(|e| format!("reading a buffer back: {e}"))?;
        let mut data = Vec::with_capacity(len as usize);
        // 0: outside every piece; 1: in a piece, past the data; 2: data.
        let mut role = vec![0u8; bytes.len()];
        for &(off, piece) in &self.pieces {
            let take = piece.min(len - data.len() as u64);
            let range = off as usize..(off + take) as usize;
            data.extend_from_slice(&bytes[range.clone()]);
            role[range].iter_mut().for_each(|b| *b = 2);
            role[(off + take) as usize..(off + piece) as usize].iter_mut().for_each(|b| *b = 1);
        }
        let lost = |which: u8| {
            (0..bytes.len())
                .find(|&i| role[i] == which && bytes[i] != canary(self.base + i as u64))
                .map(|i| i as u64)
        };
        Ok((data, Canary { gap: lost(0), slack: lost(1) }))
    }

    /// Bytes the pieces can hold.
    pub fn capacity(&self) -> u64 {
        self.pieces.iter().map(|&(_, len)| len).sum()
    }
}

/// Where a buffer read back lost its canary (offsets in the allocation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Canary {
    /// A byte outside every SGE: nothing may ever write it.
    pub gap: Option<u64>,
    /// A byte inside the SGEs, past the data: a receive buffer may hold
    /// bytes of an earlier message there only on UC (a message abandoned
    /// half-way leaves them in the WQE the next message takes).
    pub slack: Option<u64>,
}

impl Canary {
    /// The first byte lost anywhere.
    pub fn any(&self) -> Option<u64> {
        match (self.gap, self.slack) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// `len` random bytes.
pub fn random_bytes(rng: &mut SimRng, len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        out.extend_from_slice(&rng.next_u64().to_le_bytes());
    }
    out.truncate(len);
    out
}
