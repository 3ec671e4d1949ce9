//! Big-endian field access. Callers pass slices of the exact field width,
//! taken from a buffer whose length a `check_len` has already verified.

pub(crate) fn u24(bytes: &[u8]) -> u32 {
    u32::from_be_bytes([0, bytes[0], bytes[1], bytes[2]])
}

pub(crate) fn set_u24(bytes: &mut [u8], value: u32) {
    debug_assert!(value <= 0x00ff_ffff, "u24 field overflow: {value:#x}");
    bytes.copy_from_slice(&value.to_be_bytes()[1..]);
}

pub(crate) fn u16(bytes: &[u8]) -> u16 {
    u16::from_be_bytes([bytes[0], bytes[1]])
}

pub(crate) fn u32(bytes: &[u8]) -> u32 {
    u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]])
}

pub(crate) fn u64(bytes: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&bytes[..8]);
    u64::from_be_bytes(b)
}
