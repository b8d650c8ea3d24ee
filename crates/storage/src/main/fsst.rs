//! FSST: free text compressed with a table of up to 255 symbols.
//!
//! ```text
//!   symbols   0 "the "  1 "ly "  2 "ckages"  …   (1 to 8 bytes each)
//!   value     "the packages"  →  codes 0 'p' 'a' 2 …   (255 escapes a byte)
//!   bytes     every value's codes, one after another
//!   offsets   0 9 17 …        (bit-packed, like plain strings)
//! ```
//!
//! FSST (Boncz, Neumann, Leis: "FSST: Fast Random Access String
//! Compression", VLDB 2020) replaces frequent substrings by one-byte codes.
//! Unlike a block compressor (LZ4, zstd) every value decompresses on its
//! own, so a gather reads one row without its neighbours and a decode only
//! the rows it returns; a scan decompresses a block's rows in one call
//! (their codes lie one after another). Text with few repeated values
//! but a small vocabulary (TPC-H's comments, addresses, names) shrinks to
//! a third to a half; values still compare after decompression, so zone
//! maps hold the same prefixes as plain strings. The symbol table is
//! trained per column of a shard by the `fsst-rs` crate.

use std::mem::MaybeUninit;

use ::fsst::{Compressor, Decompressor, Symbol};
use arrow_buffer::Buffer;

use super::bitpacked::BitPacked;
use super::strings::RawBytes;
use crate::block::BLOCK_SIZE;

/// The code that escapes one literal byte.
pub(crate) const ESCAPE: u8 = 255;

/// FSST-compressed strings or binary: a symbol table, and each value's
/// codes behind bit-packed offsets.
#[derive(Clone)]
pub(crate) struct StrFsst {
    /// Symbols by code (little-endian bytes); entries past `n_symbols` are
    /// unused.
    symbols: Box<[Symbol; 255]>,
    /// Symbol lengths by code (1 to 8 for the first `n_symbols`).
    lengths: Box<[u8; 255]>,
    n_symbols: u8,
    offsets: BitPacked,
    bytes: Buffer,
}

impl std::fmt::Debug for StrFsst {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StrFsst")
            .field("symbols", &self.n_symbols)
            .field("values", &self.len())
            .field("bytes", &self.bytes.len())
            .finish()
    }
}

impl StrFsst {
    /// Compresses `raw` with a symbol table trained on it.
    pub(crate) fn encode(raw: &RawBytes) -> Self {
        let values: Vec<&[u8]> = (0..raw.len()).map(|i| raw.get(i)).collect();
        let compressor = Compressor::train(&values);
        let mut bytes: Vec<u8> = Vec::with_capacity(raw.bytes.len() / 2 + 16);
        let mut offsets = Vec::with_capacity(raw.len() + 1);
        offsets.push(0u64);
        for v in values {
            // At worst every byte is escaped: two output bytes per input byte.
            bytes.reserve(2 * v.len() + 8);
            // SAFETY: the spare capacity holds at least `2 * v.len()` bytes,
            // the most `compress_into` writes, and its return value counts
            // the bytes it initialized.
            unsafe {
                let n = compressor.compress_into(v, bytes.spare_capacity_mut());
                bytes.set_len(bytes.len() + n);
            }
            offsets.push(bytes.len() as u64);
        }
        bytes.shrink_to_fit();
        let parts = compressor.into_parts();
        Self {
            symbols: Box::new(parts.symbols),
            lengths: Box::new(parts.lengths),
            n_symbols: parts.n_symbols,
            offsets: BitPacked::encode(&offsets),
            bytes: Buffer::from_vec(bytes),
        }
    }

    /// Compressed strings from their parts, for decoding a checkpoint
    /// ([`crate::durable::checkpoint`]), which validates before calling
    /// this (with [`StrFsst::check`]) that the symbols are 1 to 8 bytes,
    /// that `offsets` start at 0, never descend and end at `bytes.len()`,
    /// and that every value's codes are symbols or complete escapes.
    pub(crate) fn from_parts(symbols: &[u64], lengths: &[u8], offsets: BitPacked, bytes: Buffer) -> Self {
        debug_assert!(symbols.len() == lengths.len() && symbols.len() < 256);
        let mut table = Box::new([Symbol::ZERO; 255]);
        let mut lens = Box::new([0u8; 255]);
        for (i, (&s, &l)) in symbols.iter().zip(lengths).enumerate() {
            table[i] = Symbol::from_slice(&s.to_le_bytes());
            lens[i] = l;
        }
        Self { symbols: table, lengths: lens, n_symbols: symbols.len() as u8, offsets, bytes }
    }

    /// Number of values.
    pub(crate) fn len(&self) -> usize {
        self.offsets.len().saturating_sub(1)
    }

    /// The symbols (as little-endian `u64`s) and their lengths.
    pub(crate) fn symbols(&self) -> (Vec<u64>, &[u8]) {
        let n = self.n_symbols as usize;
        (self.symbols[..n].iter().map(|s| s.to_u64()).collect(), &self.lengths[..n])
    }

    /// Offsets of the values' codes (`len() + 1` entries).
    pub(crate) fn offsets(&self) -> &BitPacked {
        &self.offsets
    }

    /// The codes of all values.
    pub(crate) fn bytes(&self) -> &Buffer {
        &self.bytes
    }

    /// The codes of row `row`.
    #[inline]
    pub(crate) fn codes(&self, row: usize) -> &[u8] {
        &self.bytes[self.offsets.get(row) as usize..self.offsets.get(row + 1) as usize]
    }

    /// Bytes `codes` decompress to.
    #[inline]
    pub(crate) fn decoded_len(&self, codes: &[u8]) -> usize {
        let (mut i, mut len) = (0, 0);
        while i < codes.len() {
            if codes[i] == ESCAPE {
                len += 1;
                i += 2;
            } else {
                len += self.lengths[codes[i] as usize] as usize;
                i += 1;
            }
        }
        len
    }

    /// Appends the decompressed `codes` (whose decompressed length is
    /// `decoded`) to `out`.
    #[inline]
    pub(crate) fn decompress_into(&self, codes: &[u8], decoded: usize, out: &mut Vec<u8>) {
        out.reserve(decoded);
        let start = out.len();
        let spare: &mut [MaybeUninit<u8>] = &mut out.spare_capacity_mut()[..decoded];
        let n = Decompressor::new(&self.symbols, &self.lengths).decompress_into(codes, spare);
        debug_assert_eq!(n, decoded);
        // SAFETY: the decompressor initialized `n` bytes from `start`, and
        // `n <= decoded <= spare capacity`.
        unsafe { out.set_len(start + n.min(decoded)) };
    }

    /// Rows `start..start + len` decompressed into `bytes`, with
    /// `offsets` (`len + 1` of them, from 0) where each row starts, both
    /// cleared first: one decompression of the rows' codes, which never
    /// span two values.
    pub(crate) fn decompress_range(&self, start: usize, len: usize, bytes: &mut Vec<u8>, offsets: &mut Vec<usize>) {
        offsets.clear();
        offsets.reserve(len + 1);
        offsets.push(0);
        bytes.clear();
        if len == 0 {
            return;
        }
        // The rows' code offsets: a whole block unpacked at once when the
        // range is one (as scans ask), else read one by one.
        let mut block = [0u64; BLOCK_SIZE];
        let aligned = start.is_multiple_of(BLOCK_SIZE) && len <= BLOCK_SIZE;
        if aligned {
            self.offsets.decode_block(start / BLOCK_SIZE, &mut block);
        }
        let code_offset = |row: usize| {
            let i = row - start;
            if aligned && i < BLOCK_SIZE { block[i] as usize } else { self.offsets.get(row) as usize }
        };
        let (first, last) = (code_offset(start), code_offset(start + len));
        let mut total = 0;
        let mut from = first;
        for row in start + 1..=start + len {
            let to = code_offset(row);
            total += self.decoded_len(&self.bytes[from..to]);
            offsets.push(total);
            from = to;
        }
        self.decompress_into(&self.bytes[first..last], total, bytes);
    }

    /// The value at `row`, decompressed into `buf` (cleared first).
    #[inline]
    pub(crate) fn get<'b>(&self, row: usize, buf: &'b mut Vec<u8>) -> &'b [u8] {
        let codes = self.codes(row);
        buf.clear();
        self.decompress_into(codes, self.decoded_len(codes), buf);
        buf
    }

    /// Checks every value's codes: each a symbol, or an escape followed by
    /// its byte. Returns the total decompressed bytes, or the first row
    /// that fails.
    pub(crate) fn check(&self) -> Result<usize, usize> {
        let mut total = 0;
        for row in 0..self.len() {
            let codes = self.codes(row);
            let mut i = 0;
            while i < codes.len() {
                match codes[i] {
                    ESCAPE if i + 1 < codes.len() => i += 2,
                    c if c < self.n_symbols => i += 1,
                    _ => return Err(row),
                }
            }
            total += self.decoded_len(codes);
        }
        Ok(total)
    }

    /// Heap bytes used.
    pub(crate) fn size_bytes(&self) -> usize {
        Self::table_bytes() + self.offsets.size_bytes() + self.bytes.len()
    }

    /// Bytes of the symbol table.
    pub(crate) fn table_bytes() -> usize {
        255 * 9
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(values: &[String]) -> RawBytes {
        let mut r = RawBytes::with_capacity(values.len(), 0);
        for v in values {
            r.push(v.as_bytes());
        }
        r
    }

    fn comments(n: usize) -> Vec<String> {
        let words = ["the", "furiously", "regular", "packages", "sleep", "carefully", "blithely", "final", "ideas"];
        (0..n)
            .map(|i| (0..(3 + i % 7)).map(|j| words[(i * 7 + j * 3) % words.len()]).collect::<Vec<_>>().join(" "))
            .collect()
    }

    #[test]
    fn round_trip_compresses_text() {
        let mut values = comments(5000);
        values.push(String::new());
        values.push("ünïcödé ✓ and bytes that are rare: \u{1}\u{2}~".into());
        let r = raw(&values);
        let f = StrFsst::encode(&r);
        assert_eq!(f.len(), values.len());
        let mut buf = Vec::new();
        for (i, v) in values.iter().enumerate() {
            assert_eq!(f.get(i, &mut buf), v.as_bytes(), "row {i}");
        }
        assert_eq!(f.check(), Ok(r.bytes.len()));
        // A range decompresses at once to the same values.
        let (mut bytes, mut offsets) = (Vec::new(), Vec::new());
        // Unaligned ranges, whole blocks, and the last (short) block.
        let last_block = values.len() / BLOCK_SIZE * BLOCK_SIZE;
        for (start, len) in [
            (0, 0),
            (0, 1),
            (17, 1024),
            (values.len() - 3, 3),
            (0, BLOCK_SIZE),
            (BLOCK_SIZE, BLOCK_SIZE),
            (last_block, values.len() - last_block),
        ] {
            f.decompress_range(start, len, &mut bytes, &mut offsets);
            assert_eq!(offsets.len(), len + 1);
            for i in 0..len {
                assert_eq!(&bytes[offsets[i]..offsets[i + 1]], values[start + i].as_bytes(), "row {}", start + i);
            }
        }
        assert!(f.size_bytes() * 2 < r.bytes.len(), "{} of {} bytes", f.size_bytes(), r.bytes.len());
    }

    #[test]
    fn parts_round_trip_and_check_rejects_bad_codes() {
        let values = comments(100);
        let f = StrFsst::encode(&raw(&values));
        let (symbols, lengths) = f.symbols();
        let g = StrFsst::from_parts(&symbols, lengths, f.offsets().clone(), f.bytes().clone());
        let mut buf = Vec::new();
        for (i, v) in values.iter().enumerate() {
            assert_eq!(g.get(i, &mut buf), v.as_bytes());
        }
        // An escape as a value's last code, and a code past the symbols.
        let dangling =
            StrFsst::from_parts(&symbols, lengths, BitPacked::encode(&[0, 1]), Buffer::from_vec(vec![ESCAPE]));
        assert_eq!(dangling.check(), Err(0));
        let unused =
            StrFsst::from_parts(&symbols[..1], &lengths[..1], BitPacked::encode(&[0, 1]), Buffer::from_vec(vec![7u8]));
        assert_eq!(unused.check(), Err(0));
    }
}
