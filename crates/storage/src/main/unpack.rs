//! Unpacking FastLanes blocks, with the block's reference added in the same
//! pass and the values written as `u64` or `u32`, compiled three times:
//! with AVX-512, with AVX2 (chosen at run time when the CPU has them), and
//! for the baseline CPU. Also range tests fused with unpacking (AVX-512 or
//! AVX2). Every block unpacked on x86-64 first asks for the next one to be
//! prefetched.
//!
//! The FastLanes crate compiles its unpack loops (`#[inline(never)]`) for
//! the build's baseline target, where a 128-bit register holds two `u64`
//! lanes, and adds a reference in a second pass. Its `unpack!` macro lets us
//! instantiate the same loops inside functions compiled with AVX2 (four
//! lanes) and AVX-512 (eight), with the addition and the narrowing to `u32`
//! in the loop body.

use crate::block::BLOCK_SIZE;

/// A type unpacked values are written as: the low bits of each value.
pub(crate) trait Lane: Copy {
    /// The widest values it holds whole.
    const BITS: usize;
    fn from_u64(v: u64) -> Self;
}

impl Lane for u64 {
    const BITS: usize = 64;
    #[inline(always)]
    fn from_u64(v: u64) -> Self {
        v
    }
}

impl Lane for u32 {
    const BITS: usize = 32;
    #[inline(always)]
    fn from_u64(v: u64) -> Self {
        v as u32
    }
}

/// Unpacks a block of `width`-bit values (`words` holds exactly
/// `16 * width` words) into `out`, adding `reference` to every value
/// (wrapping) and keeping the low `T::BITS` bits of each.
#[inline]
pub(crate) fn unpack_for<T: Lane>(width: usize, words: &[u64], reference: u64, out: &mut [T; BLOCK_SIZE]) {
    // SAFETY: `out` holds BLOCK_SIZE values.
    unsafe { unpack_for_raw(width, words, reference, out.as_mut_ptr()) }
}

/// [`unpack_for`] into memory that may be uninitialised, such as a
/// vector's spare capacity.
///
/// # Safety
/// `out` must be valid for writes of `BLOCK_SIZE` values of `T`.
#[inline]
pub(crate) unsafe fn unpack_for_raw<T: Lane>(width: usize, words: &[u64], reference: u64, out: *mut T) {
    assert_eq!(words.len(), 16 * width, "16 words per bit of width");
    if width > T::BITS {
        // Only `u32` output of a block wider than 32 bits: unpack whole,
        // then narrow.
        let mut wide = [0u64; BLOCK_SIZE];
        unpack_for(width, words, reference, &mut wide);
        for (i, &v) in wide.iter().enumerate() {
            // SAFETY: `i < BLOCK_SIZE`, within `out` (the caller's promise).
            unsafe { out.add(i).write(T::from_u64(v)) };
        }
        return;
    }
    #[cfg(target_arch = "x86_64")]
    {
        prefetch_next_block(words);
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: AVX-512F is available (checked just above); `words`
            // holds 16 * width words and width <= T::BITS (checked above);
            // `out` takes BLOCK_SIZE values (the caller's promise).
            unsafe { unpack_avx512(width, words, reference, out) };
            return;
        }
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: as above, for AVX2.
            unsafe { unpack_avx2(width, words, reference, out) };
            return;
        }
    }
    // SAFETY: as above; the baseline build needs no CPU feature.
    unsafe { unpack_baseline(width, words, reference, out) }
}

/// Asks for the words after `words` (the next block of the column, whose
/// blocks are consecutive; assumed as wide as this one) to be brought into
/// the cache while this block is unpacked: the hardware prefetcher starts
/// too late on blocks of a few kilobytes (measured with seed_bench on
/// `SELECT COUNT(*) FROM t WHERE value > 500000`, a fused range test over a
/// 20-bit column: 1.1 ms without, 0.45–0.65 ms with). Prefetching past the column's end is harmless: a prefetch never
/// faults.
#[cfg(target_arch = "x86_64")]
#[inline]
fn prefetch_next_block(words: &[u64]) {
    use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
    let next = words.as_ptr().wrapping_add(words.len());
    for line in (0..words.len()).step_by(8) {
        // SAFETY: a prefetch reads nothing and never faults.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(next.wrapping_add(line).cast()) };
    }
}

/// One width's unpack loop: lanes outermost, as FastLanes vectorises.
///
/// # Safety
/// `out` must be valid for writes of `BLOCK_SIZE` values of `T`.
#[inline(always)]
unsafe fn unpack_width<const W: usize, const B: usize, T: Lane>(words: &[u64; B], reference: u64, out: *mut T) {
    use fastlanes::FastLanes;
    for lane in 0..u64::LANES {
        fastlanes::unpack!(u64, W, words, lane, |$idx, $elem| {
            // SAFETY: FastLanes' indices are below 1,024 = BLOCK_SIZE.
            unsafe { out.add($idx).write(T::from_u64($elem.wrapping_add(reference))) }
        });
    }
}

/// Writes `value` to the `BLOCK_SIZE` values at `out`.
///
/// # Safety
/// As [`unpack_width`].
#[inline(always)]
unsafe fn fill_block<T: Lane>(out: *mut T, value: T) {
    for i in 0..BLOCK_SIZE {
        // SAFETY: `i < BLOCK_SIZE` (the caller's promise).
        unsafe { out.add(i).write(value) };
    }
}

/// `$name::<T>(width, words, reference, out)`, compiled with `$feature`
/// (if any): calls [`unpack_width`] for the block's width.
macro_rules! dispatch_unpack {
    ($name:ident $(, $feature:literal)?) => {
        /// # Safety
        /// The CPU must have the function's target feature (if any);
        /// `words` must hold `16 * width` words, `width <= T::BITS`, and
        /// `out` must be valid for writes of `BLOCK_SIZE` values.
        $(#[cfg(target_arch = "x86_64")] #[target_feature(enable = $feature)])?
        #[allow(clippy::identity_op)] // `W * 16` with W = 1 in the expansion
        unsafe fn $name<T: Lane>(width: usize, words: &[u64], reference: u64, out: *mut T) {
            // SAFETY: `out` takes BLOCK_SIZE values (the caller's promise),
            // which is what every arm writes.
            unsafe {
                if T::BITS == 32 {
                    seq_macro::seq!(W in 1..=32 {
                        match width {
                            0 => fill_block(out, T::from_u64(reference)),
                            #(W => unpack_width::<W, { W * 16 }, T>(words.try_into().expect("16 words per bit of width"), reference, out),)*
                            _ => unreachable!("u32 output is unpacked from at most 32 bits"),
                        }
                    })
                } else {
                    seq_macro::seq!(W in 1..=64 {
                        match width {
                            0 => fill_block(out, T::from_u64(reference)),
                            #(W => unpack_width::<W, { W * 16 }, T>(words.try_into().expect("16 words per bit of width"), reference, out),)*
                            _ => unreachable!("widths are at most 64"),
                        }
                    })
                }
            }
        }
    };
}

dispatch_unpack!(unpack_avx512, "avx512f");
dispatch_unpack!(unpack_avx2, "avx2");
dispatch_unpack!(unpack_baseline);

/// Widths up to which [`range_bits`] compares while unpacking (wider
/// blocks unpack first, then compare): each width is a fully unrolled
/// loop of its own, so the bound keeps the code small.
const FUSED_MAX_WIDTH: usize = 32;

/// The values of a block of `width`-bit values (`words` holds exactly
/// `16 * width` words) with `value - lo <= span` (wrapping), as a bitmap in
/// row order, written to `out` (where the caller keeps it: the AVX-512
/// kernel's word stores are then read back by loads of the same size).
#[inline]
pub(crate) fn range_bits(width: usize, words: &[u64], lo: u64, span: u64, out: &mut [u64; 16]) {
    debug_assert_eq!(words.len(), 16 * width);
    #[cfg(target_arch = "x86_64")]
    if (1..=FUSED_MAX_WIDTH).contains(&width) {
        prefetch_next_block(words);
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: AVX-512F is available (checked just above); the width
            // is within the fused range.
            unsafe { range_bits_avx512(width, words, lo, span, out) };
            return;
        }
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: as above, for AVX2.
            unsafe { range_bits_avx2(width, words, lo, span, out) };
            return;
        }
    }
    *out = range_bits_unfused(width, words, lo, span);
}

/// [`range_bits`] by unpacking the block, then comparing.
fn range_bits_unfused(width: usize, words: &[u64], lo: u64, span: u64) -> [u64; 16] {
    let mut values = [0u64; BLOCK_SIZE];
    unpack_for(width, words, 0, &mut values);
    let mut bits = [0u64; 16];
    for (i, &v) in values.iter().enumerate() {
        bits[i / 64] |= u64::from(v.wrapping_sub(lo) <= span) << (i % 64);
    }
    bits
}

// The fused kernels. In the FastLanes layout, row `r` of the 16 lanes is
// `words[16 * (r * W / 64) + lane]` shifted right by `r * W % 64`
// (continued in the next word row when it straddles), and holds the values
// at indices `FL_ORDER[r / 8] * 16 + (r % 8) * 128 + lane`: 16 consecutive
// values of the block, so a row's 16 results are one aligned 16-bit piece
// of the bitmap.

/// A range test on the values of a `width`-bit block as the AVX-512 kernel
/// makes it: an interval of the width's values or its complement, or a
/// constant answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WidthTest {
    /// No value passes (false) or every value does (true).
    Const(bool),
    /// `v >= a`; the bits inverted when `flip`.
    AtLeast { a: u64, flip: bool },
    /// `a <= v <= b`; the bits inverted when `flip`.
    Between { a: u64, b: u64, flip: bool },
}

/// `v - lo <= span` (wrapping) on `width`-bit values `v`, as a [`WidthTest`].
fn width_test(width: usize, lo: u64, span: u64) -> WidthTest {
    let top = if width == 64 { u64::MAX } else { (1u64 << width) - 1 };
    let (a, b, flip) = match lo.checked_add(span) {
        Some(_) if lo > top => return WidthTest::Const(false),
        Some(hi) => (lo, hi.min(top), false),
        // `lo..` and `..=hw`, with `hw < lo`.
        None => {
            let hw = lo.wrapping_add(span);
            if lo > top {
                (0, hw.min(top), false)
            } else if hw + 1 == lo {
                return WidthTest::Const(true);
            } else {
                // Every value but `hw < v < lo`.
                (hw + 1, lo - 1, true)
            }
        }
    };
    match (a == 0, b == top) {
        (true, true) => WidthTest::Const(!flip),
        (false, true) => WidthTest::AtLeast { a, flip },
        (true, false) => WidthTest::AtLeast { a: b + 1, flip: !flip },
        (false, false) => WidthTest::Between { a, b, flip },
    }
}

/// [`range_bits`] with AVX-512F for widths 1..=32.
///
/// Each row's two registers of eight 64-bit lanes are shifted so that
/// every value ends at the top of its lane (a row straddling two words
/// takes its high bits from the next), and one permutation gathers the 16
/// lanes' upper halves into one register of 32-bit lanes: each holds its
/// value in its top `W` bits, over bits of other values. The row's 16
/// bits are then one 32-bit compare (`v >= a`) or a subtraction and a
/// compare (`a <= v <= b`) against bounds shifted up as well, with the
/// bits under an upper bound set, so what lies under a value never
/// changes the answer. (Shifting each value to the bottom of its lane,
/// masking, and comparing eight 64-bit lanes at a time took 35–50%
/// longer per block in a microbenchmark of 20-bit blocks.)
///
/// # Safety
/// AVX-512F must be available; `words` must hold `16 * width` words, and
/// `1 <= width <= 32`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn range_bits_avx512(width: usize, words: &[u64], lo: u64, span: u64, out: &mut [u64; 16]) {
    assert_eq!(words.len(), 16 * width, "16 words per bit of width");
    let (between, a, b, flip) = match width_test(width, lo, span) {
        WidthTest::Const(all) => {
            *out = [if all { u64::MAX } else { 0 }; 16];
            return;
        }
        WidthTest::AtLeast { a, flip } => (false, a, a, flip),
        WidthTest::Between { a, b, flip } => (true, a, b, flip),
    };
    let below = 32 - width as u32;
    let (lo_top, span_top) = ((a << below) as u32, (((b - a) << below) | ((1u64 << below) - 1)) as u32);
    let flip = if flip { u64::MAX } else { 0 };
    seq_macro::seq!(W in 1..=32 {
        match (width, between) {
            #(
                // SAFETY: AVX-512F (the caller's promise); `words` has
                // 16 * W words (asserted above).
                (W, false) => unsafe { range_bits_avx512_width::<W, false>(words.as_ptr(), lo_top, span_top, flip, out) },
                // SAFETY: as above.
                (W, true) => unsafe { range_bits_avx512_width::<W, true>(words.as_ptr(), lo_top, span_top, flip, out) },
            )*
            _ => unreachable!("fused widths are 1..=32"),
        }
    })
}

/// The rows whose 16 values are bits `16 * p .. 16 * p + 16` of the bitmap:
/// `FL_ORDER` is its own inverse.
const fn row_of_piece(p: usize) -> usize {
    fastlanes::FL_ORDER[p % 8] * 8 + p / 8
}

/// One width of [`range_bits_avx512`]: `BETWEEN` tests `top - lo_top <=
/// span_top`, else `top >= lo_top`, on each value's 32-bit lane `top`;
/// every bitmap word is XORed with `flip`.
///
/// The rows are taken in the order of their pieces of the bitmap, so each
/// bitmap word is put together from four rows in a general register and
/// stored once. (Storing each row's 16 bits, and reading the words back,
/// made every such load wait for four stores to retire: a fifth of the
/// kernel's time.)
///
/// # Safety
/// AVX-512F must be available; `words` must point to `16 * W` readable words.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[allow(clippy::identity_op, clippy::erasing_op, clippy::eq_op)] // `R * W`, `P / 8` with P = 0 or 8 in the expansion
#[inline]
unsafe fn range_bits_avx512_width<const W: usize, const BETWEEN: bool>(
    words: *const u64,
    lo_top: u32,
    span_top: u32,
    flip: u64,
    out: &mut [u64; 16],
) {
    use std::arch::x86_64::*;
    let lo_v = _mm512_set1_epi32(lo_top as i32);
    let span_v = _mm512_set1_epi32(span_top as i32);
    // The upper halves of the lanes of two registers, in lane order.
    let uppers = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    let load = |row: usize, half: usize| {
        // SAFETY: word row `r * W / 64`, and the next one when the row
        // straddles (so at most row W - 1), lies within the 16 * W words.
        unsafe { _mm512_loadu_si512(words.add(row * 16 + half * 8).cast()) }
    };
    let shift = |v: __m512i, left: bool, by: usize| {
        let by = _mm_cvtsi64_si128(by as i64);
        if left { _mm512_sll_epi64(v, by) } else { _mm512_srl_epi64(v, by) }
    };
    let mut word = 0u64;
    seq_macro::seq!(P in 0..64 {{
        let r = row_of_piece(P);
        let (row, at) = (r * W / 64, r * W % 64);
        // Lanes `half * 8 ..` of the row, each value ending at bit 64.
        let align = |half: usize| {
            let v = load(row, half);
            if at + W > 64 {
                let up = 128 - at - W;
                _mm512_or_si512(shift(load(row + 1, half), true, up), shift(v, false, 64 - up))
            } else if at + W < 64 {
                shift(v, true, 64 - W - at)
            } else {
                v
            }
        };
        let tops = _mm512_permutex2var_epi32(align(0), uppers, align(1));
        let hits = if BETWEEN {
            _mm512_cmple_epu32_mask(_mm512_sub_epi32(tops, lo_v), span_v)
        } else {
            _mm512_cmpge_epu32_mask(tops, lo_v)
        };
        let mut bits = u64::from(hits);
        // Keeps LLVM's SLP vectoriser from gathering the rows' bits into
        // vector registers with byte inserts and variable shifts (slower
        // than the four shifts and ORs a word takes in a register).
        // SAFETY: an empty instruction string; `bits` stays as it is.
        unsafe { std::arch::asm!("/* {0} */", inout(reg) bits, options(pure, nomem, nostack, preserves_flags)) };
        if P % 4 == 0 {
            word = bits;
        } else {
            word |= bits << (16 * (P % 4));
        }
        if P % 4 == 3 {
            // Volatile, so that the 16 word stores are not merged into
            // vector stores built with inserts (the same vectoriser).
            // SAFETY: `P / 4 < 16`: within `out`.
            unsafe { std::ptr::write_volatile(out.as_mut_ptr().add(P / 4), word ^ flip) };
        }
    }});
}

/// [`range_bits`] with AVX2 for widths 1..=32.
///
/// # Safety
/// AVX2 must be available; `words` must hold `16 * width` words, and
/// `1 <= width <= 32`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn range_bits_avx2(width: usize, words: &[u64], lo: u64, span: u64, out: &mut [u64; 16]) {
    assert_eq!(words.len(), 16 * width, "16 words per bit of width");
    seq_macro::seq!(W in 1..=32 {
        match width {
            // SAFETY: AVX2 (the caller's promise); `words` has 16 * W
            // words (asserted above).
            #(W => unsafe { range_bits_avx2_width::<W>(words.as_ptr(), lo, span, out) },)*
            _ => unreachable!("fused widths are 1..=32"),
        }
    })
}

/// One width, four lanes per AVX2 register (a row's four registers are
/// four passes over the rows, to keep the code small). `v - lo <= span` is
/// tested as the signed `v - (lo - 2^63) <= span - 2^63` (subtracting 2^63
/// flips the sign bit), which AVX2 compares directly.
///
/// # Safety
/// AVX2 must be available; `words` must point to `16 * W` readable words.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[allow(clippy::identity_op, clippy::erasing_op, clippy::eq_op)] // `R * W`, `R / 8` with R = 0 or 8 in the expansion
#[inline]
unsafe fn range_bits_avx2_width<const W: usize>(words: *const u64, lo: u64, span: u64, out: &mut [u64; 16]) {
    use std::arch::x86_64::*;
    const SIGN: u64 = 1 << 63;
    let mask = _mm256_set1_epi64x(((1u64 << W) - 1) as i64);
    let lo_v = _mm256_set1_epi64x(lo.wrapping_sub(SIGN) as i64);
    let span_v = _mm256_set1_epi64x((span ^ SIGN) as i64);
    // Bits of the values that fail; inverted at the end.
    let mut miss = [0u64; 16];
    for q in 0..4 {
        let load = |row: usize| {
            // SAFETY: as in `range_bits_avx512_width`, for lanes 4q..4q+4.
            unsafe { _mm256_loadu_si256(words.add(row * 16 + q * 4).cast()) }
        };
        seq_macro::seq!(R in 0..64 {{
            let (row, shift) = (R * W / 64, R * W % 64);
            let mut v = load(row);
            if shift > 0 {
                v = _mm256_srl_epi64(v, _mm_cvtsi64_si128(shift as i64));
            }
            if shift + W > 64 {
                v = _mm256_or_si256(v, _mm256_sll_epi64(load(row + 1), _mm_cvtsi64_si128((64 - shift) as i64)));
            }
            if shift + W != 64 {
                v = _mm256_and_si256(v, mask);
            }
            let fails = _mm256_cmpgt_epi64(_mm256_sub_epi64(v, lo_v), span_v);
            let m = _mm256_movemask_pd(_mm256_castsi256_pd(fails)) as u64;
            let at = fastlanes::FL_ORDER[R / 8] * 16 + (R % 8) * 128;
            miss[at / 64] |= m << (at % 64 + q * 4);
        }});
    }
    *out = miss.map(|m| !m);
}

#[cfg(test)]
mod tests {
    use fastlanes::BitPacking;

    use super::*;

    /// The SIMD kernels this CPU runs (by name), printed with the test's
    /// name so a run on a CPU without them says what it did not test. The
    /// portable kernels are always tested.
    fn simd_kernels(test: &str) -> Vec<&'static str> {
        #[cfg(target_arch = "x86_64")]
        let found = [
            ("avx512", std::arch::is_x86_feature_detected!("avx512f")),
            ("avx2", std::arch::is_x86_feature_detected!("avx2")),
        ];
        #[cfg(not(target_arch = "x86_64"))]
        let found: [(&str, bool); 0] = [];
        let (ran, skipped): (Vec<_>, Vec<_>) = found.iter().partition(|(_, available)| *available);
        let names = |v: &[&(&'static str, bool)]| v.iter().map(|(n, _)| *n).collect::<Vec<_>>();
        println!(
            "{test}: portable kernel tested; SIMD kernels tested: {:?}; skipped (not on this CPU): {:?}",
            names(&ran),
            names(&skipped)
        );
        names(&ran)
    }

    #[test]
    fn every_unpack_kernel_matches_fastlanes() {
        let simd = simd_kernels("unpack");
        for width in 0..=64usize {
            let values: Vec<u64> = (0..1024u64)
                .map(|i| if width == 0 { 0 } else { i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - width) })
                .collect();
            let mut packed = vec![0u64; 16 * width];
            if width > 0 {
                // SAFETY: 1,024 inputs, 16 * width outputs, values below 2^width.
                unsafe { u64::unchecked_pack(width, &values, &mut packed) };
                let mut reference = [0u64; BLOCK_SIZE];
                // SAFETY: as above.
                unsafe { u64::unchecked_unpack(width, &packed, &mut reference) };
                assert_eq!(&reference[..], &values[..], "fastlanes round trip, width {width}");
            }
            for base in [0u64, 5, u64::MAX - 2, 1 << 40] {
                let expect = |kernel: &str, got: &[u64]| {
                    for (i, (&g, &v)) in got.iter().zip(&values).enumerate() {
                        assert_eq!(g, v.wrapping_add(base), "{kernel}: width {width} base {base} value {i}");
                    }
                };
                let expect32 = |kernel: &str, got: &[u32]| {
                    for (i, (&g, &v)) in got.iter().zip(&values).enumerate() {
                        assert_eq!(
                            g,
                            v.wrapping_add(base) as u32,
                            "{kernel} (u32): width {width} base {base} value {i}"
                        );
                    }
                };
                let (mut out, mut out32) = ([0u64; BLOCK_SIZE], [0u32; BLOCK_SIZE]);
                unpack_for(width, &packed, base, &mut out);
                expect("dispatched", &out);
                unpack_for(width, &packed, base, &mut out32);
                expect32("dispatched", &out32);
                // SAFETY: `packed` holds 16 * width words; no CPU feature.
                unsafe { unpack_baseline(width, &packed, base, out.as_mut_ptr()) };
                expect("baseline", &out);
                if width <= 32 {
                    // SAFETY: as above, and width <= 32.
                    unsafe { unpack_baseline(width, &packed, base, out32.as_mut_ptr()) };
                    expect32("baseline", &out32);
                }
                #[cfg(target_arch = "x86_64")]
                for &kernel in &simd {
                    out.fill(0);
                    out32.fill(0);
                    // SAFETY: the kernel's feature is available; `packed`
                    // holds 16 * width words; u32 output only to 32 bits.
                    unsafe {
                        if kernel == "avx512" {
                            unpack_avx512(width, &packed, base, out.as_mut_ptr());
                            if width <= 32 {
                                unpack_avx512(width, &packed, base, out32.as_mut_ptr());
                            }
                        } else {
                            unpack_avx2(width, &packed, base, out.as_mut_ptr());
                            if width <= 32 {
                                unpack_avx2(width, &packed, base, out32.as_mut_ptr());
                            }
                        }
                    }
                    expect(kernel, &out);
                    if width <= 32 {
                        expect32(kernel, &out32);
                    }
                }
            }
        }
    }

    #[test]
    fn range_bits_match_unpack_then_compare() {
        let simd = simd_kernels("range_bits");
        let mut seed = 0x2545_F491_4F6C_DD1Du64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for width in 1..=64usize {
            let top = if width == 64 { u64::MAX } else { (1u64 << width) - 1 };
            let values: Vec<u64> = (0..1024).map(|_| next() & top).collect();
            let mut packed = vec![0u64; 16 * width];
            // SAFETY: 1,024 inputs, 16 * width outputs, values below 2^width.
            unsafe { u64::unchecked_pack(width, &values, &mut packed) };
            let pick = values[7];
            // Empty, everything, one value, both ends, wrapping ranges.
            let tests = [
                (0, top),
                (pick, 0),
                (0, pick),
                (pick, top - pick),
                (top / 3, top / 3),
                (top, 0),
                (top.wrapping_add(1), 5),
                (pick.wrapping_sub(top / 2), top),
                (u64::MAX - 3, 10),
                (5, u64::MAX),
                (next(), next()),
            ];
            for (lo, span) in tests {
                let mut dispatched = [0u64; 16];
                range_bits(width, &packed, lo, span, &mut dispatched);
                let mut kernels: Vec<(&str, [u64; 16])> =
                    vec![("dispatched", dispatched), ("unfused", range_bits_unfused(width, &packed, lo, span))];
                #[cfg(target_arch = "x86_64")]
                if width <= FUSED_MAX_WIDTH {
                    if simd.contains(&"avx512") {
                        let mut bits = [0u64; 16];
                        // SAFETY: AVX-512F is available; the width is fused.
                        unsafe { range_bits_avx512(width, &packed, lo, span, &mut bits) };
                        kernels.push(("avx512", bits));
                    }
                    if simd.contains(&"avx2") {
                        let mut bits = [0u64; 16];
                        // SAFETY: AVX2 is available; the width is fused.
                        unsafe { range_bits_avx2(width, &packed, lo, span, &mut bits) };
                        kernels.push(("avx2", bits));
                    }
                }
                for (kernel, bits) in kernels {
                    for (i, &v) in values.iter().enumerate() {
                        let expected = v.wrapping_sub(lo) <= span;
                        let got = bits[i / 64] >> (i % 64) & 1 == 1;
                        assert_eq!(got, expected, "{kernel}: width {width} lo {lo} span {span} value {i}");
                    }
                }
            }
        }
    }
}
