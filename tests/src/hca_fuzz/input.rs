//! Reading the input: the fuzz bytes as a program, zeros past the end.

/// The fuzz input, read front to back; past its end every read gives 0.
#[derive(Debug, Clone)]
pub struct Input<'a> {
    pub(super) data: &'a [u8],
}

impl<'a> Input<'a> {
    /// Reads `data`.
    pub fn new(data: &'a [u8]) -> Input<'a> {
        Input { data }
    }

    /// Whether every byte was read.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// One byte.
    pub fn u8(&mut self) -> u8 {
        match self.data.split_first() {
            Some((&b, rest)) => {
                self.data = rest;
                b
            }
            None => 0,
        }
    }

    /// Two bytes, little-endian.
    pub fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }

    /// Four bytes, little-endian.
    pub fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }

    /// Eight bytes, little-endian.
    pub fn u64(&mut self) -> u64 {
        u64::from(self.u32()) | u64::from(self.u32()) << 32
    }

    /// A 24-bit value (a PSN or a QPN).
    pub fn u24(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), 0])
    }

    /// A number below `n` (0 when `n` is 0 or 1).
    pub fn below(&mut self, n: usize) -> usize {
        match n {
            0 | 1 => 0,
            2..=256 => usize::from(self.u8()) % n,
            _ => self.u32() as usize % n,
        }
    }

    /// A coin.
    pub fn bool(&mut self) -> bool {
        self.u8() & 1 == 1
    }

    /// True with probability about `1 / n`.
    pub fn one_in(&mut self, n: u8) -> bool {
        self.u8() % n.max(1) == 0
    }

    /// Up to `n` bytes (fewer at the end of the input).
    pub fn bytes(&mut self, n: usize) -> &'a [u8] {
        let n = n.min(self.data.len());
        let (taken, rest) = self.data.split_at(n);
        self.data = rest;
        taken
    }

    /// One of `items` (which must not be empty).
    pub fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())]
    }
}
