//! The encodings of `u64` keys (fixed-width values as order-preserving
//! `u64`s); [`super::column::Encoding`] holds them beside wide decimals,
//! strings and child columns. Private to storage: the crates above read encoded data through
//! [`super::access`] and [`super::MainColumn`]'s methods, so an encoding
//! can be added or changed here without touching them.

use super::bitpacked::BitPacked;
use super::dict::Dict;
use super::run_end::RunEnd;
use super::sequence::Sequence;
use crate::block::BLOCK_SIZE;

/// An encoding of `u64` keys.
#[derive(Debug, Clone)]
pub(crate) enum KeyEncoding {
    /// Every row has the same key.
    Constant {
        /// The key.
        key: u64,
        /// Number of rows.
        len: usize,
    },
    /// Runs of arithmetic progressions.
    Sequence(Sequence),
    /// Frame-of-reference bit-packing per block.
    BitPacked(BitPacked),
    /// Runs of equal keys.
    RunEnd(RunEnd),
    /// Sorted dictionary with bit-packed codes.
    Dict(Dict),
    /// Plain keys.
    Plain(Box<[u64]>),
}

impl KeyEncoding {
    /// The key at `row`.
    #[inline]
    pub(crate) fn get(&self, row: usize) -> u64 {
        match self {
            Self::Constant { key, .. } => *key,
            Self::Sequence(s) => s.get(row),
            Self::BitPacked(b) => b.get(row),
            Self::RunEnd(r) => r.get(row),
            Self::Dict(d) => d.get(row),
            Self::Plain(p) => p[row],
        }
    }

    /// Decodes block `block` into `out`; slots past the column's end are
    /// unspecified.
    pub(crate) fn decode_block(&self, block: usize, out: &mut [u64; BLOCK_SIZE]) {
        match self {
            Self::Constant { key, .. } => out.fill(*key),
            Self::Sequence(s) => s.decode_block(block, out),
            Self::BitPacked(b) => b.decode_block(block, out),
            Self::RunEnd(r) => r.decode_block(block, out),
            Self::Dict(d) => d.decode_block(block, out),
            Self::Plain(p) => {
                let start = block * BLOCK_SIZE;
                let end = (start + BLOCK_SIZE).min(p.len());
                out[..end - start].copy_from_slice(&p[start..end]);
            }
        }
    }

    /// Heap bytes used.
    pub(crate) fn size_bytes(&self) -> usize {
        match self {
            Self::Constant { .. } => 8,
            Self::Sequence(s) => s.size_bytes(),
            Self::BitPacked(b) => b.size_bytes(),
            Self::RunEnd(r) => r.size_bytes(),
            Self::Dict(d) => d.size_bytes(),
            Self::Plain(p) => p.len() * 8,
        }
    }
}
