//! Copying short byte runs (a small packet's payload, a few header bytes)
//! without a call to `memcpy`: for a handful of bytes the call costs more
//! than the copy.

/// Copies `src` into `dst`, which must have the same length (as
/// `copy_from_slice`, which it is for runs over 16 bytes). A run of up to
/// 16 bytes is copied as fixed-size pieces that may overlap (the same bytes
/// written twice), which the compiler turns into a few moves.
#[inline]
pub fn copy_short(dst: &mut [u8], src: &[u8]) {
    let n = src.len();
    assert_eq!(dst.len(), n, "copy_short: source and destination lengths differ");
    match n {
        0 => {}
        1..=3 => {
            dst[0] = src[0];
            dst[n / 2] = src[n / 2];
            dst[n - 1] = src[n - 1];
        }
        4..=7 => {
            dst[..4].copy_from_slice(&src[..4]);
            dst[n - 4..].copy_from_slice(&src[n - 4..]);
        }
        8..=16 => {
            dst[..8].copy_from_slice(&src[..8]);
            dst[n - 8..].copy_from_slice(&src[n - 8..]);
        }
        _ => dst.copy_from_slice(src),
    }
}

/// Sets every byte of `dst` to zero; a run of 4 to 8 bytes (a pad and an
/// ICRC) as two 4-byte stores that may overlap, without a call to `memset`.
#[inline]
pub fn zero_short(dst: &mut [u8]) {
    let n = dst.len();
    if (4..=8).contains(&n) {
        dst[..4].fill(0);
        dst[n - 4..].fill(0);
    } else {
        dst.fill(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_and_zeroes_every_length() {
        let src: Vec<u8> = (1..=80u8).collect();
        for n in 0..=70 {
            for at in [0, 1, 5] {
                let mut dst = [0xeeu8; 80];
                copy_short(&mut dst[at..at + n], &src[..n]);
                assert_eq!(&dst[at..at + n], &src[..n], "copy of {n} at {at}");
                assert!(dst[..at].iter().all(|&b| b == 0xee), "before, {n} at {at}");
                assert!(dst[at + n..].iter().all(|&b| b == 0xee), "after, {n} at {at}");
                let mut z = src.clone();
                zero_short(&mut z[at..at + n]);
                assert!(z[at..at + n].iter().all(|&b| b == 0), "zero {n} at {at}");
                assert_eq!(&z[..at], &src[..at]);
                assert_eq!(&z[at + n..], &src[at + n..]);
            }
        }
    }

    #[test]
    #[should_panic(expected = "lengths differ")]
    fn refuses_different_lengths() {
        copy_short(&mut [0u8; 4], &[1, 2, 3]);
    }
}
