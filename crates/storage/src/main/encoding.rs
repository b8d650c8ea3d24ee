//! The encodings of main storage, as one enum per kind of values: keys
//! (fixed-width values as order-preserving `u64`s), wide decimals, and
//! strings. Private to storage: the crates above read encoded data through
//! [`super::access`] and [`super::MainColumn`]'s methods, so an encoding
//! can be added or changed here without touching them.

use super::bitpacked::BitPacked;
use super::dict::Dict;
use super::kind::EncodingKind;
use super::run_end::RunEnd;
use super::sequence::Sequence;
use super::strings::{StrDict, StrPlain};
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

/// The encoding of a main column.
#[derive(Debug, Clone)]
pub(crate) enum Encoding {
    /// Fixed-width values as order-preserving keys.
    Keys(KeyEncoding),
    /// Decimals that do not fit the i64 key domain, stored plain.
    Wide(Box<[i128]>),
    /// Dictionary-encoded strings or binary.
    StrDict(StrDict),
    /// Plain strings or binary.
    StrPlain(StrPlain),
}

impl Encoding {
    /// Which encoding this is.
    pub(crate) fn kind(&self) -> EncodingKind {
        match self {
            Encoding::Keys(KeyEncoding::Constant { .. }) => EncodingKind::Constant,
            Encoding::Keys(KeyEncoding::Sequence(_)) => EncodingKind::Sequence,
            Encoding::Keys(KeyEncoding::BitPacked(_)) => EncodingKind::BitPacked,
            Encoding::Keys(KeyEncoding::RunEnd(_)) => EncodingKind::RunEnd,
            Encoding::Keys(KeyEncoding::Dict(_)) | Encoding::StrDict(_) => EncodingKind::Dictionary,
            Encoding::Keys(KeyEncoding::Plain(_)) | Encoding::Wide(_) | Encoding::StrPlain(_) => EncodingKind::Plain,
        }
    }

    /// Heap bytes used by the values (not the zone maps or validity).
    pub(crate) fn size_bytes(&self) -> usize {
        match self {
            Encoding::Keys(k) => k.size_bytes(),
            Encoding::Wide(w) => w.len() * 16,
            Encoding::StrDict(d) => d.size_bytes(),
            Encoding::StrPlain(p) => p.size_bytes(),
        }
    }

    /// Bytes of dictionary values (0 for non-dictionary encodings).
    pub(crate) fn dictionary_bytes(&self) -> usize {
        match self {
            Encoding::Keys(KeyEncoding::Dict(d)) => d.values().len() * 8,
            Encoding::StrDict(d) => d.dictionary_bytes(),
            _ => 0,
        }
    }
}
