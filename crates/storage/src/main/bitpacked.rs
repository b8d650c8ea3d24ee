//! Frame-of-reference bit-packing, one frame per 1,024-value block.
//!
//! ```text
//!   keys of block b:  [1_000_017, 1_000_003, 1_000_250, ...]   (1,024 keys)
//!   reference       = min = 1_000_003
//!   deltas          = key - reference, all < 2^width
//!   width           = bits of (max - min) = 8
//!   packed          = 1,024 x 8 bits = 16 x 8 u64 words, FastLanes layout
//! ```
//!
//! Each block stores its reference (a `u64` key), its width (0..=64) and the
//! offset of its words; a block of width `w` occupies exactly `16 * w` words.
//! The FastLanes layout (Afroozeh & Boncz, VLDB 2023) interleaves the 1,024
//! values over 16 lanes so that unpacking a block vectorises without
//! intrinsics; `unpack_single` reads one value without unpacking the block.
//! The last block of a column is padded with its reference, so every block
//! unpacks as a whole.
//!
//! The same structure stores dictionary codes and string offsets, so it is
//! the workhorse of main storage.

use std::ops::Range;

use fastlanes::BitPacking;

use crate::block::BLOCK_SIZE;

/// Words of packed data per bit of width in one block (1,024 bits / 64).
pub(crate) const WORDS_PER_BIT: usize = BLOCK_SIZE / 64;

/// Per-block frame: reference key, word offset and bit width.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Frame {
    /// The block's minimum key; every value is `reference + delta`.
    pub reference: u64,
    /// Σ deltas of the block (wrapping; exact when `width <= 53`, as
    /// 1,024 deltas below 2^53 cannot reach 2^64): a whole block sums
    /// without unpacking.
    pub delta_sum: u64,
    /// Index into [`BitPacked::words`] of the block's first word.
    pub offset: u32,
    /// Bits per delta (0..=64).
    pub width: u8,
}

/// A bit-packed `u64` sequence with a frame of reference per block.
#[derive(Debug, Clone)]
pub(crate) struct BitPacked {
    len: usize,
    frames: Box<[Frame]>,
    words: Box<[u64]>,
}

/// The number of bits needed to store `range` (0 for 0).
#[inline]
pub(crate) fn bits_for(range: u64) -> u8 {
    (64 - range.leading_zeros()) as u8
}

impl BitPacked {
    /// Packs `keys` (any length).
    pub(crate) fn encode(keys: &[u64]) -> Self {
        let blocks = keys.len().div_ceil(BLOCK_SIZE);
        let mut frames = Vec::with_capacity(blocks);
        let mut words = Vec::new();
        let mut buf = [0u64; BLOCK_SIZE];
        for chunk in keys.chunks(BLOCK_SIZE) {
            let (min, max) = min_max(chunk);
            let width = bits_for(max - min);
            let offset = u32::try_from(words.len()).expect("a shard's packed words fit u32");
            if width == 0 {
                frames.push(Frame { reference: min, delta_sum: 0, offset, width });
                continue;
            }
            let mut delta_sum = 0u64;
            for (d, &k) in buf.iter_mut().zip(chunk) {
                *d = k - min;
                delta_sum = delta_sum.wrapping_add(*d);
            }
            frames.push(Frame { reference: min, delta_sum, offset, width });
            buf[chunk.len()..].fill(0);
            let n = WORDS_PER_BIT * width as usize;
            words.resize(words.len() + n, 0);
            let out = &mut words[offset as usize..];
            // SAFETY: `buf` has exactly 1,024 values and `out[..n]` exactly
            // 16 * width words, the lengths `unchecked_pack` requires; every
            // delta is < 2^width because `width = bits_for(max - min)`.
            unsafe { u64::unchecked_pack(width as usize, &buf, &mut out[..n]) };
        }
        Self { len: keys.len(), frames: frames.into(), words: words.into() }
    }

    /// A bit-packed array from its parts, for decoding a checkpoint
    /// ([`crate::durable::checkpoint`]), which validates what
    /// [`BitPacked::encode`] guarantees before calling this: one frame per
    /// block of `len` values, each frame's `16 * width` words (width at
    /// most 64) within `words`, `delta_sum` exact, and the padding of the
    /// last block equal to its reference.
    pub(crate) fn from_parts(len: usize, frames: Box<[Frame]>, words: Box<[u64]>) -> Self {
        debug_assert_eq!(frames.len(), len.div_ceil(BLOCK_SIZE));
        debug_assert!(
            frames.iter().all(|f| f.width <= 64 && f.offset as usize + WORDS_PER_BIT * f.width as usize <= words.len())
        );
        Self { len, frames, words }
    }

    /// All packed words (the frames' offsets index into them).
    pub(crate) fn words(&self) -> &[u64] {
        &self.words
    }

    /// The exact size [`BitPacked::encode`] would produce for `keys`, in bytes.
    pub(crate) fn estimate_size(keys: &[u64]) -> usize {
        let bits: usize = keys
            .chunks(BLOCK_SIZE)
            .map(|c| {
                let (min, max) = min_max(c);
                bits_for(max - min) as usize
            })
            .sum();
        bits * WORDS_PER_BIT * 8 + keys.len().div_ceil(BLOCK_SIZE) * size_of::<Frame>()
    }

    /// Number of values.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// True when there are no values.
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The frames, one per block.
    pub(crate) fn frames(&self) -> &[Frame] {
        &self.frames
    }

    /// The packed words of block `block` (`16 * width` words).
    #[inline]
    pub(crate) fn block_words(&self, block: usize) -> &[u64] {
        let f = self.frames[block];
        let start = f.offset as usize;
        &self.words[start..start + WORDS_PER_BIT * f.width as usize]
    }

    /// Unpacks block `block` into `out` (values past the column's end are
    /// the block's reference).
    #[inline]
    pub(crate) fn decode_block(&self, block: usize, out: &mut [u64; BLOCK_SIZE]) {
        let f = self.frames[block];
        super::unpack::unpack_for(f.width as usize, self.block_words(block), f.reference, out);
    }

    /// Unpacks block `block`'s deltas (values minus the block's
    /// reference) into `out`; padding slots past the column's end are 0.
    #[inline]
    pub(crate) fn decode_block_deltas(&self, block: usize, out: &mut [u64; BLOCK_SIZE]) {
        let width = self.frames[block].width as usize;
        super::unpack::unpack_for(width, self.block_words(block), 0, out);
    }

    /// Unpacks block `block` in one pass as `base(reference) + delta`
    /// (wrapping) for every value: `base` maps the block's reference key to
    /// the value it stands for (a signed column's keys have their sign bit
    /// flipped), so a block of keys decodes straight into the values.
    #[inline]
    pub(crate) fn decode_block_from(&self, block: usize, base: impl FnOnce(u64) -> u64, out: &mut [u64; BLOCK_SIZE]) {
        let f = self.frames[block];
        super::unpack::unpack_for(f.width as usize, self.block_words(block), base(f.reference), out);
    }

    /// [`Self::decode_block_from`], with the values reinterpreted as `i64`.
    #[inline]
    pub(crate) fn decode_block_i64(&self, block: usize, base: impl FnOnce(u64) -> u64, out: &mut [i64; BLOCK_SIZE]) {
        // SAFETY: `i64` and `u64` have the same size and alignment and
        // every bit pattern is valid for both.
        let out = unsafe { &mut *(out as *mut [i64; BLOCK_SIZE]).cast::<[u64; BLOCK_SIZE]>() };
        self.decode_block_from(block, base, out);
    }

    /// Appends rows `rows` of block `block` to `dst`, decoded as in
    /// [`Self::decode_block_i64`]: unpacked straight into `dst`'s spare
    /// capacity when it has room for a whole block, with no copy in
    /// between; through a block on the stack otherwise (never growing
    /// `dst` by more than the rows).
    pub(crate) fn extend_block_i64(
        &self,
        block: usize,
        base: impl FnOnce(u64) -> u64,
        rows: Range<usize>,
        dst: &mut Vec<i64>,
    ) {
        assert!(rows.start <= rows.end && rows.end <= BLOCK_SIZE, "rows {rows:?} of a block");
        let f = self.frames[block];
        let (width, words, base) = (f.width as usize, self.block_words(block), base(f.reference));
        if dst.capacity() - dst.len() < BLOCK_SIZE {
            let mut values = [0u64; BLOCK_SIZE];
            super::unpack::unpack_for(width, words, base, &mut values);
            dst.extend(values[rows].iter().map(|&v| v as i64));
            return;
        }
        let len = dst.len();
        // SAFETY: the spare capacity holds BLOCK_SIZE values past `len`
        // (checked above), which the unpack writes (an `i64` takes any
        // `u64`'s bits); the rows kept are moved to the front, so the
        // first `rows.len()` of them are initialised when the length
        // grows.
        unsafe {
            let spare = dst.as_mut_ptr().add(len).cast::<u64>();
            super::unpack::unpack_for_raw(width, words, base, spare);
            if rows.start > 0 {
                std::ptr::copy(spare.add(rows.start), spare, rows.len());
            }
            dst.set_len(len + rows.len());
        }
    }

    /// Unpacks block `block` in one pass as the low 32 bits of `value -
    /// minus` (wrapping) for every value: slot numbers straight from the
    /// keys, for keys known to lie in `minus..minus + 2^32`.
    #[inline]
    pub(crate) fn decode_block_u32(&self, block: usize, minus: u64, out: &mut [u32; BLOCK_SIZE]) {
        let f = self.frames[block];
        super::unpack::unpack_for(f.width as usize, self.block_words(block), f.reference.wrapping_sub(minus), out);
    }

    /// The rows of block `block` whose delta (value minus the block's
    /// reference) satisfies `delta - lo <= span` (wrapping), as a bitmap
    /// written to `out`; padding slots past the column's end hold delta 0.
    /// Small widths compare while unpacking, without writing the values
    /// out.
    #[inline]
    pub(crate) fn block_delta_range_bits(&self, block: usize, lo: u64, span: u64, out: &mut [u64; 16]) {
        let width = self.frames[block].width as usize;
        if width == 0 {
            *out = [if 0u64.wrapping_sub(lo) <= span { u64::MAX } else { 0 }; 16];
            return;
        }
        super::unpack::range_bits(width, self.block_words(block), lo, span, out)
    }

    /// The value at `index`.
    #[inline]
    pub(crate) fn get(&self, index: usize) -> u64 {
        debug_assert!(index < self.len);
        let block = index / BLOCK_SIZE;
        let f = self.frames[block];
        if f.width == 0 {
            return f.reference;
        }
        // SAFETY: `block_words` has exactly 16 * width words and
        // `index % 1024 < 1024`.
        let delta =
            unsafe { u64::unchecked_unpack_single(f.width as usize, self.block_words(block), index % BLOCK_SIZE) };
        f.reference.wrapping_add(delta)
    }

    /// Heap bytes used.
    pub(crate) fn size_bytes(&self) -> usize {
        self.frames.len() * size_of::<Frame>() + self.words.len() * 8
    }
}

/// Minimum and maximum of a non-empty slice (`(u64::MAX, 0)` when empty).
#[inline]
pub(crate) fn min_max(values: &[u64]) -> (u64, u64) {
    // Four independent lanes so the compiler vectorises.
    let mut min = [u64::MAX; 4];
    let mut max = [0u64; 4];
    let chunks = values.chunks_exact(4);
    let rest = chunks.remainder();
    for c in chunks {
        for i in 0..4 {
            min[i] = min[i].min(c[i]);
            max[i] = max[i].max(c[i]);
        }
    }
    for &v in rest {
        min[0] = min[0].min(v);
        max[0] = max[0].max(v);
    }
    (min.into_iter().min().unwrap_or(u64::MAX), max.into_iter().max().unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_widths() {
        for width in [0u32, 1, 7, 20, 33, 63, 64] {
            let n = 2 * BLOCK_SIZE + 17;
            let keys: Vec<u64> = (0..n as u64)
                .map(|i| {
                    let span = if width == 64 { u64::MAX } else { (1u64 << width) - 1 };
                    5u64.wrapping_add(i.wrapping_mul(0x9E37_79B9_7F4A_7C15) & span)
                })
                .collect();
            let p = BitPacked::encode(&keys);
            assert_eq!(p.len(), n);
            let mut buf = [0; BLOCK_SIZE];
            for b in 0..3 {
                p.decode_block(b, &mut buf);
                let end = ((b + 1) * BLOCK_SIZE).min(n);
                assert_eq!(&buf[..end - b * BLOCK_SIZE], &keys[b * BLOCK_SIZE..end]);
            }
            for (i, &k) in keys.iter().enumerate() {
                assert_eq!(p.get(i), k, "width {width} index {i}");
            }
            assert_eq!(BitPacked::estimate_size(&keys), p.size_bytes());
            for (b, chunk) in keys.chunks(BLOCK_SIZE).enumerate() {
                let f = p.frames()[b];
                let sum = chunk.iter().fold(0u64, |s, &k| s.wrapping_add(k - f.reference));
                assert_eq!(f.delta_sum, sum, "width {width} block {b}");
            }
        }
    }

    #[test]
    fn every_block_decoder_gives_the_keys() {
        for width in [0u32, 1, 7, 20, 32, 33, 64] {
            let n = 3 * BLOCK_SIZE - 100;
            let keys: Vec<u64> = (0..n as u64)
                .map(|i| {
                    let span = if width == 64 { u64::MAX } else { (1u64 << width) - 1 };
                    (1u64 << 40).wrapping_add(i.wrapping_mul(0x9E37_79B9_7F4A_7C15) & span)
                })
                .collect();
            let p = BitPacked::encode(&keys);
            let minus = keys.iter().copied().min().unwrap_or(0);
            let shift = |k: u64| k.wrapping_add(7);
            for b in 0..3 {
                let rows = (n - b * BLOCK_SIZE).min(BLOCK_SIZE);
                let block = &keys[b * BLOCK_SIZE..b * BLOCK_SIZE + rows];
                let mut wide = [0i64; BLOCK_SIZE];
                p.decode_block_i64(b, shift, &mut wide);
                assert!(block.iter().zip(&wide).all(|(&k, &v)| v == shift(k) as i64), "i64, width {width} block {b}");
                let mut narrow = [0u32; BLOCK_SIZE];
                p.decode_block_u32(b, minus, &mut narrow);
                assert!(
                    block.iter().zip(&narrow).all(|(&k, &v)| v == (k - minus) as u32),
                    "u32, width {width} block {b}"
                );
                // Into spare capacity, and (without room for a block)
                // through the stack; from the block's start and not.
                for (room, a, z) in
                    [(BLOCK_SIZE + 5, 0, rows), (BLOCK_SIZE + 5, 3, rows), (rows, 0, rows), (rows - 3, 3, rows)]
                {
                    let mut dst: Vec<i64> = Vec::with_capacity(room + 2);
                    dst.extend([-1, -2]);
                    p.extend_block_i64(b, shift, a..z, &mut dst);
                    let expected: Vec<i64> =
                        [-1, -2].into_iter().chain(block[a..z].iter().map(|&k| shift(k) as i64)).collect();
                    assert_eq!(dst, expected, "extend, width {width} block {b} rows {a}..{z} room {room}");
                    if room < BLOCK_SIZE {
                        assert_eq!(dst.capacity(), room + 2, "the stack path does not grow the vector");
                    }
                }
            }
        }
    }

    #[test]
    fn full_range_block() {
        let keys = vec![0, u64::MAX, 1, u64::MAX - 1];
        let p = BitPacked::encode(&keys);
        assert_eq!(p.frames()[0].width, 64);
        assert_eq!((0..4).map(|i| p.get(i)).collect::<Vec<_>>(), keys);
    }
}
