//! Main storage: immutable, compressed columns built by a rebuild.
//!
//! A shard's main storage holds one [`MainColumn`] per table column. Each
//! column is split into blocks of [`BLOCK_SIZE`] values; every block has a
//! [`Zone`] (min, max, null count). The rebuild analyses the values of a
//! column (not its declared type) and keeps the smallest encoding:
//!
//! ```text
//!   fixed-width values ──to_key──▶ u64 keys ──▶ Constant | Sequence | BitPacked
//!                                               | RunEnd | Dict | Plain
//!   decimals beyond i64 ─────────────────────▶ Wide (plain i128)
//!   strings / binary ────────────────────────▶ StrDict | StrPlain
//! ```
//!
//! Nulls are a validity bitmap, present only when the column has nulls;
//! the key of a null slot repeats its neighbour's so runs and frames stay
//! tight. Decoding ([`MainColumn::decode_range`], [`MainColumn::gather`])
//! produces the Arrow type of the table schema, whatever the encoding.

pub mod bitpacked;
mod build;
pub(crate) mod decode;
pub mod dict;
pub mod run_end;
pub mod sequence;
pub mod strings;
mod unpack;

use std::fmt;

use arrow_buffer::NullBuffer;
use arrow_schema::DataType;

use crate::types::PhysicalType;
use bitpacked::BitPacked;
use dict::Dict;
use run_end::RunEnd;
use sequence::Sequence;
use strings::{StrDict, StrPlain};

pub use build::EncodingKind;

/// Values per block: the unit of zone maps, bit-packing frames, delta
/// chunks and scan batches. 1,024 is the FastLanes block (one 1,024-bit
/// register's worth of lanes), so it is fixed.
pub const BLOCK_SIZE: usize = 1024;

/// Zone map of one block.
///
/// `min` and `max` are over the block's non-null values, in the column's
/// key space: the value key for fixed-width columns (exact), the code for
/// dictionary strings (exact, code order = value order), and the 8-byte
/// prefix key ([`crate::types::prefix_key`]) for plain strings (a bound).
/// A block whose values are all null has `min > max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Zone {
    /// Smallest non-null key.
    pub min: u64,
    /// Largest non-null key.
    pub max: u64,
    /// Number of nulls in the block.
    pub null_count: u32,
}

impl Zone {
    /// True when the block holds no non-null value.
    pub fn all_null(&self) -> bool {
        self.min > self.max
    }
}

/// An encoding of `u64` keys.
#[derive(Debug, Clone)]
pub enum KeyEncoding {
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
    /// Number of rows.
    pub fn len(&self) -> usize {
        match self {
            Self::Constant { len, .. } => *len,
            Self::Sequence(s) => s.len(),
            Self::BitPacked(b) => b.len(),
            Self::RunEnd(r) => r.len(),
            Self::Dict(d) => d.len(),
            Self::Plain(p) => p.len(),
        }
    }

    /// True when there are no rows.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The key at `row`.
    #[inline]
    pub fn get(&self, row: usize) -> u64 {
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
    pub fn decode_block(&self, block: usize, out: &mut [u64; BLOCK_SIZE]) {
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
    pub fn size_bytes(&self) -> usize {
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
pub enum Encoding {
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
    pub fn kind(&self) -> EncodingKind {
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
    pub fn size_bytes(&self) -> usize {
        match self {
            Encoding::Keys(k) => k.size_bytes(),
            Encoding::Wide(w) => w.len() * 16,
            Encoding::StrDict(d) => d.size_bytes(),
            Encoding::StrPlain(p) => p.size_bytes(),
        }
    }

    /// Bytes of dictionary values (0 for non-dictionary encodings).
    pub fn dictionary_bytes(&self) -> usize {
        match self {
            Encoding::Keys(KeyEncoding::Dict(d)) => d.values().len() * 8,
            Encoding::StrDict(d) => d.dictionary_bytes(),
            _ => 0,
        }
    }
}

/// One immutable, encoded column of a shard's main storage.
#[derive(Debug, Clone)]
pub struct MainColumn {
    data_type: DataType,
    physical: PhysicalType,
    len: usize,
    encoding: Encoding,
    validity: Option<NullBuffer>,
    zones: Box<[Zone]>,
}

impl MainColumn {
    /// A column from its parts, for decoding a checkpoint
    /// ([`crate::durable::checkpoint`]), which validates every invariant
    /// the encoders establish before calling this: `encoding` holds `len`
    /// values of a kind that suits `physical`, `validity` (when present)
    /// has `len` bits and at least one null, and `zones` has one exact
    /// zone per block.
    pub(crate) fn from_parts(
        data_type: DataType,
        physical: PhysicalType,
        len: usize,
        encoding: Encoding,
        validity: Option<NullBuffer>,
        zones: Box<[Zone]>,
    ) -> Self {
        debug_assert_eq!(PhysicalType::of(&data_type), Some(physical));
        debug_assert_eq!(zones.len(), len.div_ceil(BLOCK_SIZE));
        debug_assert!(validity.as_ref().is_none_or(|v| v.len() == len && v.null_count() > 0));
        Self { data_type, physical, len, encoding, validity, zones }
    }

    /// The Arrow type decodes produce.
    pub fn data_type(&self) -> &DataType {
        &self.data_type
    }

    /// The physical type.
    pub fn physical(&self) -> PhysicalType {
        self.physical
    }

    /// Number of rows.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when the column has no rows.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The encoding.
    pub fn encoding(&self) -> &Encoding {
        &self.encoding
    }

    /// The validity bitmap; `None` when the column has no nulls.
    pub fn validity(&self) -> Option<&NullBuffer> {
        self.validity.as_ref()
    }

    /// Number of nulls.
    pub fn null_count(&self) -> usize {
        self.validity.as_ref().map_or(0, |v| v.null_count())
    }

    /// True if row `row` is null.
    #[inline]
    pub fn is_null(&self, row: usize) -> bool {
        self.validity.as_ref().is_some_and(|v| v.is_null(row))
    }

    /// Zone maps, one per block.
    pub fn zones(&self) -> &[Zone] {
        &self.zones
    }

    /// Number of blocks.
    pub fn num_blocks(&self) -> usize {
        self.len.div_ceil(BLOCK_SIZE)
    }

    /// Smallest and largest non-null key of the whole column, in the zone
    /// key space (see [`Zone`]); `None` when every value is null.
    pub fn key_range(&self) -> Option<(u64, u64)> {
        let min = self.zones.iter().filter(|z| !z.all_null()).map(|z| z.min).min()?;
        let max = self.zones.iter().filter(|z| !z.all_null()).map(|z| z.max).max()?;
        Some((min, max))
    }

    /// Heap bytes used: values, validity and zone maps.
    pub fn size_bytes(&self) -> usize {
        self.encoding.size_bytes() + self.validity_bytes() + self.zone_bytes()
    }

    /// Bytes of the validity bitmap.
    pub fn validity_bytes(&self) -> usize {
        self.validity.as_ref().map_or(0, |v| v.buffer().len())
    }

    /// Bytes of the zone maps.
    pub fn zone_bytes(&self) -> usize {
        self.zones.len() * size_of::<Zone>()
    }
}

impl fmt::Display for MainColumn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} rows, {} bytes, {}", self.data_type, self.len, self.size_bytes(), self.encoding.kind())
    }
}

/// A shard's main storage: one column per table column, equal lengths.
#[derive(Debug, Clone, Default)]
pub struct Main {
    rows: usize,
    columns: Box<[MainColumn]>,
}

impl Main {
    /// Main storage over `columns` (all of length `rows`).
    pub(crate) fn new(rows: usize, columns: Vec<MainColumn>) -> Self {
        debug_assert!(columns.iter().all(|c| c.len() == rows));
        Self { rows, columns: columns.into() }
    }

    /// Main storage with no rows.
    pub(crate) fn empty(columns: usize) -> Self {
        Self { rows: 0, columns: Vec::with_capacity(columns).into() }
    }

    /// Number of rows.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// The columns; empty when the main has no rows.
    pub fn columns(&self) -> &[MainColumn] {
        &self.columns
    }

    /// Column `i`, or `None` when the main has no rows.
    pub fn column(&self, i: usize) -> Option<&MainColumn> {
        self.columns.get(i)
    }

    /// Heap bytes used.
    pub fn size_bytes(&self) -> usize {
        self.columns.iter().map(MainColumn::size_bytes).sum()
    }
}
