//! Unpacking FastLanes blocks, compiled for the baseline CPU and with AVX2
//! (chosen at run time when the CPU has it).
//!
//! The FastLanes crate compiles its unpack loops (`#[inline(never)]`) for
//! the build's baseline target, where a 128-bit register holds two `u64`
//! lanes. Its `unpack!` macro lets us instantiate the same loops inside a
//! function compiled with AVX2, which holds four.

use fastlanes::{BitPacking, FastLanes};

use super::BLOCK_SIZE;

/// Unpacks a block of `width`-bit values (`words` holds exactly
/// `16 * width` words) into `out`.
#[inline]
pub(crate) fn unpack(width: usize, words: &[u64], out: &mut [u64; BLOCK_SIZE]) {
    debug_assert_eq!(words.len(), 16 * width);
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: AVX2 is available (checked just above).
        unsafe { unpack_avx2(width, words, out) };
        return;
    }
    // SAFETY: `words` has 16 * width words and `out` 1,024 values, as
    // `unchecked_unpack` requires (checked by the caller, `BitPacked`).
    unsafe { u64::unchecked_unpack(width, words, out) };
}

/// Unpacks a block and adds `reference` to every value (wrapping).
#[inline]
pub(crate) fn unpack_for(width: usize, words: &[u64], reference: u64, out: &mut [u64; BLOCK_SIZE]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: AVX2 is available (checked just above).
        unsafe {
            unpack_avx2(width, words, out);
            add_avx2(out, reference);
        }
        return;
    }
    // SAFETY: as in `unpack`.
    unsafe { fastlanes::FoR::unchecked_unfor_pack(width, words, reference, out) };
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn add_avx2(out: &mut [u64; BLOCK_SIZE], reference: u64) {
    for v in out.iter_mut() {
        *v = v.wrapping_add(reference);
    }
}

/// One width's unpack loop: lanes outermost, as FastLanes vectorises.
#[inline(always)]
fn unpack_width<const W: usize, const B: usize>(words: &[u64; B], out: &mut [u64; BLOCK_SIZE]) {
    for lane in 0..u64::LANES {
        fastlanes::unpack!(u64, W, words, lane, |$idx, $elem| {
            out[$idx] = $elem
        });
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[allow(clippy::identity_op)] // `W * 16` with W = 1 in the expansion
unsafe fn unpack_avx2(width: usize, words: &[u64], out: &mut [u64; BLOCK_SIZE]) {
    seq_macro::seq!(W in 1..=64 {
        match width {
            0 => out.fill(0),
            #(W => unpack_width::<W, { W * 16 }>(words.try_into().expect("16 words per bit of width"), out),)*
            _ => unreachable!("widths are at most 64"),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dispatched_unpack_matches_fastlanes() {
        for width in [1usize, 7, 20, 33, 63, 64] {
            let values: Vec<u64> = (0..1024u64).map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - width)).collect();
            let values: Vec<u64> = if width == 64 { values } else { values.iter().map(|v| v & ((1 << width) - 1)).collect() };
            let mut packed = vec![0u64; 16 * width];
            // SAFETY: 1,024 inputs, 16 * width outputs, values below 2^width.
            unsafe { u64::unchecked_pack(width, &values, &mut packed) };
            let mut out = [0u64; BLOCK_SIZE];
            unpack(width, &packed, &mut out);
            assert_eq!(&out[..], &values[..], "width {width}");
            unpack_for(width, &packed, 5, &mut out);
            assert!(out.iter().zip(&values).all(|(o, v)| *o == v.wrapping_add(5)));
        }
    }
}
