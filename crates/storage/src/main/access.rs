//! Typed access to encoded main columns: what the crates above storage
//! read blocks through, without knowing the encodings.
//!
//! ```text
//!   MainColumn::keys()              Keys       fixed-width values as u64 keys
//!       get · decode_block · gather(sel)            any key encoding
//!       filter_block(KeyTest)                       on the encoded data:
//!           bit-packed   compare deltas with [lo - ref, hi - ref]
//!           dictionary   the test on codes (code_test, once per shard)
//!           run-end      one test per run;  constant: one per block
//!       sum_block(sel)                              Σ keys: n·ref + Σ deltas (a whole
//!                                                   block from its frame), runs × values,
//!                                                   arithmetic series
//!       fetch_i64 / extend_i64                      integers unpacked straight into
//!                                                   the caller's vector
//!   MainColumn::string_dictionary() StrDictionary  sorted values + bit-packed Codes
//!   MainColumn::bytes(row, buf) · wide_values()    strings (FSST decompressed into
//!                                                   buf), wide decimals
//!   MainColumn::decompress_rows(start, len)         an FSST block's strings at once
//! ```
//!
//! The dispatch on the encoding happens once per call (a block), never per
//! row: each arm is a loop over one encoding's layout.

use std::ops::Range;

use arrow_buffer::Buffer;

use super::bitpacked::BitPacked;
use super::column::Encoding;
use super::column::MainColumn;
use super::decode::GATHER_UNPACK_THRESHOLD;
use super::encoding::KeyEncoding;
use super::strings::StrDict;
use crate::block::{Bits, KeyTest, LANES, Sel, kernels};

/// Keys addressable by row and by block: a column's keys, or a
/// dictionary's codes.
pub trait KeySource {
    /// The key at `row`.
    fn get(&self, row: usize) -> u64;

    /// Decodes block `block` into `out`; slots past the column's end are
    /// unspecified.
    fn decode_block(&self, block: usize, out: &mut [u64; LANES]);

    /// The low 32 bits of `key - minus` for every key of block `block`,
    /// into `out` (through `scratch` unless the keys unpack straight into
    /// it): slot numbers, for keys known to lie in `minus..minus + 2^32`.
    fn decode_block_u32(&self, block: usize, minus: u64, out: &mut [u32; LANES], scratch: &mut [u64; LANES]);

    /// The keys of the rows `sel` of block `block`, one per lane, into
    /// `keys`: read one by one when few, from the unpacked block (in
    /// `scratch` for ids) otherwise.
    fn gather(&self, block: usize, sel: Sel<'_>, keys: &mut [u64; LANES], scratch: &mut [u64; LANES]) {
        let start = block * LANES;
        match sel {
            Sel::Range(a, b) if b - a < GATHER_UNPACK_THRESHOLD => {
                for (lane, offset) in (a..b).enumerate() {
                    keys[lane] = self.get(start + offset);
                }
            }
            Sel::Range(a, b) => {
                self.decode_block(block, keys);
                if a > 0 {
                    keys.copy_within(a..b, 0);
                }
            }
            Sel::Mask(..) => self.decode_block(block, keys),
            Sel::Ids(ids, base) if ids.len() < GATHER_UNPACK_THRESHOLD => {
                for (lane, &id) in ids.iter().enumerate() {
                    keys[lane] = self.get(start + (id - base) as usize);
                }
            }
            Sel::Ids(ids, base) => {
                self.decode_block(block, scratch);
                for (lane, &id) in ids.iter().enumerate() {
                    keys[lane] = scratch[(id - base) as usize];
                }
            }
        }
    }
}

/// The keys of a fixed-width main column (see [`crate::types::KeyNative`]:
/// keys order like the values).
#[derive(Debug, Clone, Copy)]
pub struct Keys<'a> {
    enc: &'a KeyEncoding,
}

/// The bit-packed codes of a dictionary-encoded column.
#[derive(Debug, Clone, Copy)]
pub struct Codes<'a> {
    packed: &'a BitPacked,
}

/// A string (or binary) column's sorted dictionary and its codes: code
/// order is value order.
#[derive(Debug, Clone, Copy)]
pub struct StrDictionary<'a> {
    dict: &'a StrDict,
}

impl MainColumn {
    /// The column's keys, for a fixed-width column (not wide decimals or
    /// strings).
    pub fn keys(&self) -> Option<Keys<'_>> {
        match self.encoding() {
            Encoding::Keys(enc) => Some(Keys { enc }),
            _ => None,
        }
    }

    /// The values of a decimal column too wide for the `i64` key domain.
    pub fn wide_values(&self) -> Option<&[i128]> {
        match self.encoding() {
            Encoding::Wide(values) => Some(values),
            _ => None,
        }
    }

    /// The dictionary of a dictionary-encoded string or binary column.
    pub fn string_dictionary(&self) -> Option<StrDictionary<'_>> {
        match self.encoding() {
            Encoding::StrDict(dict) => Some(StrDictionary { dict }),
            _ => None,
        }
    }

    /// The bytes of row `row` of a string or binary column (empty for
    /// other columns): borrowed from the column, or for a compressed
    /// column decompressed into `buf` (which a caller reuses across rows,
    /// so that reading rows allocates only while `buf` grows).
    #[inline]
    pub fn bytes<'b>(&'b self, row: usize, buf: &'b mut Vec<u8>) -> &'b [u8] {
        match self.encoding() {
            Encoding::StrDict(d) => d.get(row),
            Encoding::StrPlain(p) => p.get(row),
            Encoding::StrFsst(f) => f.get(row, buf),
            _ => &[],
        }
    }
}

/// Rows of a compressed string or binary column decompressed together
/// (see [`MainColumn::decompress_rows`]); reused from block to block.
#[derive(Debug, Default)]
pub struct BlockBytes {
    bytes: Vec<u8>,
    offsets: Vec<usize>,
}

impl BlockBytes {
    /// Row `i` of the rows decompressed last.
    #[inline]
    pub fn get(&self, i: usize) -> &[u8] {
        &self.bytes[self.offsets[i]..self.offsets[i + 1]]
    }
}

impl MainColumn {
    /// Decompresses rows `start..start + len` of a compressed (FSST) string
    /// or binary column into `out` at once, far faster than
    /// [`MainColumn::bytes`] row by row; false (and `out` untouched) for
    /// other columns, which `bytes` reads without copying.
    pub fn decompress_rows(&self, start: usize, len: usize, out: &mut BlockBytes) -> bool {
        match self.encoding() {
            Encoding::StrFsst(f) => {
                f.decompress_range(start, len, &mut out.bytes, &mut out.offsets);
                true
            }
            _ => false,
        }
    }
}

impl KeySource for Keys<'_> {
    #[inline]
    fn get(&self, row: usize) -> u64 {
        self.enc.get(row)
    }

    fn decode_block(&self, block: usize, out: &mut [u64; LANES]) {
        self.enc.decode_block(block, out)
    }

    fn decode_block_u32(&self, block: usize, minus: u64, out: &mut [u32; LANES], scratch: &mut [u64; LANES]) {
        match self.enc {
            KeyEncoding::BitPacked(bp) => bp.decode_block_u32(block, minus, out),
            _ => {
                self.enc.decode_block(block, scratch);
                for (o, &k) in out.iter_mut().zip(scratch.iter()) {
                    *o = k.wrapping_sub(minus) as u32;
                }
            }
        }
    }
}

impl KeySource for Codes<'_> {
    #[inline]
    fn get(&self, row: usize) -> u64 {
        self.packed.get(row)
    }

    fn decode_block(&self, block: usize, out: &mut [u64; LANES]) {
        self.packed.decode_block(block, out)
    }

    fn decode_block_u32(&self, block: usize, minus: u64, out: &mut [u32; LANES], _: &mut [u64; LANES]) {
        self.packed.decode_block_u32(block, minus, out)
    }
}

impl<'a> Keys<'a> {
    /// `test` on this column's dictionary codes, for a dictionary-encoded
    /// column (computed once per shard, then passed to
    /// [`Keys::filter_block`]); `None` for other encodings.
    pub fn code_test(&self, test: &KeyTest) -> Option<KeyTest> {
        match self.enc {
            KeyEncoding::Dict(d) => Some(test.on_dictionary(d.values())),
            _ => None,
        }
    }

    /// The rows of block `block` (`len` rows) whose key passes `test`,
    /// written to `out`, read from the encoding: `codes` is
    /// [`Keys::code_test`] of `test`.
    pub fn filter_block(
        &self,
        block: usize,
        len: usize,
        test: &KeyTest,
        codes: Option<&KeyTest>,
        scratch: &mut [u64; LANES],
        out: &mut Bits,
    ) {
        match (self.enc, codes) {
            (KeyEncoding::BitPacked(bp), _) => packed_filter(bp, block, len, test, scratch, out),
            (KeyEncoding::Dict(d), Some(c)) => packed_filter(d.codes(), block, len, c, scratch, out),
            (KeyEncoding::Constant { key, .. }, _) => {
                *out = if test.test(*key) { Bits::first(len) } else { Bits::EMPTY }
            }
            (KeyEncoding::Dict(d), None) => {
                d.codes().decode_block(block, scratch);
                for k in scratch.iter_mut() {
                    *k = d.values()[*k as usize];
                }
                *out = test.mask(scratch, len);
            }
            (KeyEncoding::RunEnd(re), _) => {
                let start = block * LANES;
                *out = Bits::EMPTY;
                let mut r = re.run_of(start);
                let mut row = start;
                while row < start + len {
                    let end = (re.ends()[r] as usize).min(start + len);
                    if test.test(re.values()[r]) {
                        *out = out.or(&Bits::range(row - start, end - start));
                    }
                    row = end;
                    r += 1;
                }
            }
            _ => {
                self.enc.decode_block(block, scratch);
                *out = test.mask(scratch, len);
            }
        }
    }

    /// Σ keys and count of the rows `sel` of block `block` (`block_len`
    /// rows) that are set in `valid` (all of `sel` when `None`), read from
    /// the encoding where it allows: a whole bit-packed block from its
    /// frame in O(1), a constant or run in one multiplication, a sequence
    /// as arithmetic series.
    pub fn sum_block(
        &self,
        block: usize,
        block_len: usize,
        sel: Sel<'_>,
        valid: Option<Bits>,
        scratch: &mut [u64; LANES],
    ) -> (u128, u64) {
        let start = block * LANES;
        let range = match (sel, valid) {
            (Sel::Range(a, b), None) => Some((a, b)),
            _ => None,
        };
        let lanes = valid.unwrap_or_else(|| sel.active());
        match self.enc {
            KeyEncoding::Constant { key, .. } => {
                let n = lanes.count() as u64;
                (*key as u128 * n as u128, n)
            }
            KeyEncoding::BitPacked(bp) => {
                let frame = bp.frames()[block];
                if frame.width == 0 {
                    let n = lanes.count() as u64;
                    return (frame.reference as u128 * n as u128, n);
                }
                let small = frame.width <= 53;
                if small && range == Some((0, block_len)) {
                    // A whole block: its frame holds the sum of its deltas.
                    let n = block_len as u64;
                    return (n as u128 * frame.reference as u128 + frame.delta_sum as u128, n);
                }
                // Unpack the deltas (without the reference) and sum them.
                let deltas = scratch;
                bp.decode_block_deltas(block, deltas);
                let (sum, n) = match (range, sel) {
                    (Some((a, b)), _) if small => (kernels::sum_small(deltas, a, b) as u128, (b - a) as u64),
                    (Some((a, b)), _) => (sum_all(&deltas[a..b], false), (b - a) as u64),
                    (None, Sel::Ids(ids, base)) => {
                        let mut s: u128 = 0;
                        lanes.for_each_one(|l| s += deltas[(ids[l] - base) as usize] as u128);
                        (s, lanes.count() as u64)
                    }
                    (None, Sel::Range(a, _)) => {
                        let mut s: u128 = 0;
                        lanes.for_each_one(|l| s += deltas[a + l] as u128);
                        (s, lanes.count() as u64)
                    }
                    (None, Sel::Mask(..)) if small => {
                        (kernels::masked_sum_small(deltas, &lanes) as u128, lanes.count() as u64)
                    }
                    (None, Sel::Mask(..)) => (masked_sum(&deltas[..], &lanes, false), lanes.count() as u64),
                };
                (n as u128 * frame.reference as u128 + sum, n)
            }
            KeyEncoding::Sequence(seq) if range.is_some() => {
                let (a, b) = range.unwrap_or_default();
                let mut total: u128 = 0;
                let mut row = start + a;
                let end = start + b;
                while row < end {
                    let r = seq.run_of(row);
                    let run = seq.runs()[r];
                    let run_end = seq.runs().get(r + 1).map_or(usize::MAX, |x| x.start as usize).min(end);
                    let k = (run_end - row) as i128;
                    let first = run.key(row) as i128;
                    let step = run.step as i64 as i128;
                    let last = first + (k - 1) * step;
                    if (0..=u64::MAX as i128).contains(&last) {
                        total += (k * first + step * k * (k - 1) / 2) as u128;
                    } else {
                        // The progression wraps around the key space: add key by key.
                        for i in row..run_end {
                            total += run.key(i) as u128;
                        }
                    }
                    row = run_end;
                }
                (total, (b - a) as u64)
            }
            KeyEncoding::RunEnd(re) if !matches!(sel, Sel::Ids(..)) => {
                let offset = if let Sel::Range(a, _) = sel { a } else { 0 };
                let (lo, hi) = (start + offset, start + offset + sel.lanes());
                let mut total: u128 = 0;
                let mut n = 0u64;
                let mut r = re.run_of(lo);
                let mut row = lo;
                while row < hi {
                    let run_end = (re.ends()[r] as usize).min(hi);
                    let k = lanes.and(&Bits::range(row - start - offset, run_end - start - offset)).count() as u64;
                    total += re.values()[r] as u128 * k as u128;
                    n += k;
                    row = run_end;
                    r += 1;
                }
                (total, n)
            }
            _ => {
                let mut keys = [0u64; LANES];
                self.gather(block, sel, &mut keys, scratch);
                let mut s: u128 = 0;
                lanes.for_each_one(|l| s += keys[l] as u128);
                (s, lanes.count() as u64)
            }
        }
    }

    /// Decodes the rows `sel` of block `block` into `dst` as `base(key)`
    /// plus the key's offset from its block's reference (`base` maps a
    /// reference key to the value it stands for), straight from a
    /// bit-packed block in one pass; `false` (nothing written) for other
    /// encodings and for selections too small to unpack a block for.
    pub fn fetch_i64(
        &self,
        block: usize,
        sel: Sel<'_>,
        base: impl FnOnce(u64) -> u64,
        dst: &mut [i64; LANES],
        scratch: &mut [u64; LANES],
    ) -> bool {
        let KeyEncoding::BitPacked(bp) = self.enc else { return false };
        if sel.lanes() < GATHER_UNPACK_THRESHOLD {
            return false;
        }
        match sel {
            Sel::Range(a, b) => {
                bp.decode_block_i64(block, base, dst);
                if a > 0 {
                    dst.copy_within(a..b, 0);
                }
            }
            Sel::Mask(..) => bp.decode_block_i64(block, base, dst),
            Sel::Ids(ids, first) => {
                bp.decode_block_from(block, base, scratch);
                for (d, &id) in dst.iter_mut().zip(ids) {
                    *d = scratch[(id - first) as usize] as i64;
                }
            }
        }
        true
    }

    /// Appends rows `rows` of block `block` to `dst` as `map(key)`
    /// reinterpreted as `i64`, straight from a bit-packed block or a
    /// sequence (`map` must commute with adding offsets: a sign flip);
    /// `false` (nothing appended) for other encodings and ranges too small
    /// to unpack a block for.
    pub fn extend_i64(&self, block: usize, rows: Range<usize>, map: impl Fn(u64) -> u64, dst: &mut Vec<i64>) -> bool {
        match self.enc {
            KeyEncoding::BitPacked(bp) if rows.len() >= GATHER_UNPACK_THRESHOLD => {
                bp.extend_block_i64(block, map, rows, dst);
                true
            }
            KeyEncoding::Sequence(seq) => {
                seq.extend_block_i64(block, map, rows, dst);
                true
            }
            _ => false,
        }
    }
}

impl Codes<'_> {
    /// The rows of block `block` (`len` rows) whose code passes `test`,
    /// written to `out`, compared in the packed domain.
    pub fn filter_block(&self, block: usize, len: usize, test: &KeyTest, scratch: &mut [u64; LANES], out: &mut Bits) {
        packed_filter(self.packed, block, len, test, scratch, out)
    }
}

impl<'a> StrDictionary<'a> {
    /// Rows of the column.
    pub fn len(&self) -> usize {
        self.dict.len()
    }

    /// True when the column has no rows.
    pub fn is_empty(&self) -> bool {
        self.dict.is_empty()
    }

    /// Entries of the dictionary.
    pub fn dict_len(&self) -> usize {
        self.dict.dict_len()
    }

    /// The value of code `code`.
    #[inline]
    pub fn value(&self, code: usize) -> &'a [u8] {
        self.dict.dict_value(code)
    }

    /// Where each entry starts in [`StrDictionary::values_buffer`], plus
    /// the end of the last.
    pub fn offsets(&self) -> &'a [u32] {
        self.dict.dict_offsets()
    }

    /// The bytes of every entry, back to back (shareable: Arrow views can
    /// point into it).
    pub fn values_buffer(&self) -> &'a Buffer {
        self.dict.dict_bytes()
    }

    /// The first code whose value is not below `v`.
    pub fn lower_bound(&self, v: &[u8]) -> usize {
        self.dict.lower_bound(v)
    }

    /// The rows' codes.
    pub fn codes(&self) -> Codes<'a> {
        Codes { packed: self.dict.codes() }
    }
}

/// Values of block `block` of `bp` (keys or dictionary codes) that pass
/// `test`, written to `out`: the test is shifted by the block's reference
/// and compared with the packed deltas, so no reference is added to any
/// value, and a range is compared while unpacking.
fn packed_filter(bp: &BitPacked, block: usize, len: usize, test: &KeyTest, scratch: &mut [u64; LANES], out: &mut Bits) {
    let reference = bp.frames()[block].reference;
    match test {
        KeyTest::Range { empty: true, .. } => *out = Bits::EMPTY,
        &KeyTest::Range { hi, .. } if hi < reference => *out = Bits::EMPTY,
        &KeyTest::Range { lo, hi, .. } => {
            // lo <= hi, so the shifted bounds keep their order.
            let (lo, hi) = (lo.saturating_sub(reference), hi - reference);
            bp.block_delta_range_bits(block, lo, hi - lo, &mut out.0);
            if len < LANES {
                *out = out.and(&Bits::first(len));
            }
        }
        KeyTest::Set(set) => match set.bitset() {
            Some((lo, words)) => {
                // The bitset's first key shifted by the reference, as for
                // ranges: `delta - (lo - reference)` is `key - lo`.
                bp.decode_block_deltas(block, scratch);
                *out = kernels::bitset_mask(scratch, len, lo.wrapping_sub(reference), words);
            }
            None => {
                bp.decode_block(block, scratch);
                *out = test.mask(scratch, len);
            }
        },
    }
}

/// Σ values; `small` promises every value is below 2^53, so 1,024 of them
/// fit a u64 and the loop vectorises.
#[inline]
fn sum_all(v: &[u64], small: bool) -> u128 {
    if small {
        let mut acc = [0u64; 4];
        let chunks = v.chunks_exact(4);
        let rest: u64 = chunks.remainder().iter().sum();
        for c in chunks {
            for i in 0..4 {
                acc[i] += c[i];
            }
        }
        (acc.iter().sum::<u64>() + rest) as u128
    } else {
        v.iter().map(|&x| x as u128).sum()
    }
}

/// Σ of the lanes set in `mask`, 64 lanes at a time.
#[inline]
fn masked_sum(v: &[u64], mask: &Bits, small: bool) -> u128 {
    let mut total: u128 = 0;
    for (w, &word) in mask.0.iter().enumerate() {
        if word == 0 {
            continue;
        }
        let lanes = &v[w * 64..w * 64 + 64];
        if word == u64::MAX {
            total += sum_all(lanes, small);
        } else if small {
            let mut s = 0u64;
            for (j, &x) in lanes.iter().enumerate() {
                s += x & 0u64.wrapping_sub((word >> j) & 1);
            }
            total += s as u128;
        } else {
            for (j, &x) in lanes.iter().enumerate() {
                total += (x & 0u64.wrapping_sub((word >> j) & 1)) as u128;
            }
        }
    }
    total
}
