//! The payload pattern, the fills around it, and the byte checks.

/// Every byte of both buffers before anything runs.
pub const FILL: u8 = 0x5a;
/// The client's READ/atomic destination before each such step.
pub const DST_FILL: u8 = 0xee;
/// Bytes after each payload that must keep their fill (nothing wrote
/// beyond the message).
pub const GUARD: u32 = 64;

/// The byte at offset `i` of step `n`'s payload (steps count from 1).
pub fn pattern(n: u32, i: u32) -> u8 {
    i.wrapping_mul(131).wrapping_add(i >> 8).wrapping_add(n.wrapping_mul(59)).wrapping_add(17) as u8
}

/// Step `n`'s first `len` payload bytes.
pub fn pattern_bytes(n: u32, len: u32) -> Vec<u8> {
    (0..len).map(|i| pattern(n, i)).collect()
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
