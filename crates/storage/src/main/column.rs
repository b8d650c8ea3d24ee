//! A main column (one encoded column of a shard's main storage, with its
//! zone maps and validity), its encoding, and a shard's main storage (one
//! column per table column). The encoding of a struct, list or map holds
//! main columns of its own (see [`super::nested`]), so the three types are
//! defined together.

use std::fmt;
use std::sync::Arc;

use arrow_buffer::NullBuffer;
use arrow_schema::DataType;

use super::encoding::KeyEncoding;
use super::fsst::StrFsst;
use super::kind::EncodingKind;
use super::strings::{StrDict, StrPlain};
use super::zone::Zone;
use crate::block::BLOCK_SIZE;
use crate::sketch::DistinctSketch;
use crate::types::PhysicalType;

/// One immutable, encoded column of a shard's main storage.
#[derive(Debug, Clone)]
pub struct MainColumn {
    pub(super) data_type: DataType,
    pub(super) physical: PhysicalType,
    pub(super) len: usize,
    /// Shared: a table redefined by ALTER TABLE keeps its encoded columns
    /// without copying them.
    pub(super) encoding: Arc<Encoding>,
    pub(super) validity: Option<NullBuffer>,
    pub(super) zones: Box<[Zone]>,
    /// The distinct-value sketch, built with the column (see
    /// [`MainColumn::distinct_sketch`]).
    pub(super) sketch: Option<DistinctSketch>,
    /// The smallest and largest non-null key of the zones, kept with them
    /// (see [`MainColumn::key_range`]): planning asks for it per shard.
    pub(super) range: Option<(u64, u64)>,
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
        let range = zone_range(&zones);
        Self { data_type, physical, len, encoding: Arc::new(encoding), validity, zones, sketch: None, range }
            .with_sketch()
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
    pub(crate) fn encoding(&self) -> &Encoding {
        &self.encoding
    }

    /// Which encoding the column uses.
    pub fn kind(&self) -> EncodingKind {
        self.encoding.kind()
    }

    /// The child columns of a struct, list or map stored as columns (for a
    /// list or map: its Int64 offsets, then its values); empty for other
    /// columns.
    pub fn children(&self) -> Vec<&MainColumn> {
        match &*self.encoding {
            Encoding::Nested(nested) => nested.children(),
            _ => Vec::new(),
        }
    }

    /// Heap bytes of the encoded values, dictionaries included (not the
    /// zone maps or validity); for a nested column, all of its children's.
    pub fn value_bytes(&self) -> usize {
        self.encoding.size_bytes()
    }

    /// Heap bytes of the dictionary (0 unless dictionary-encoded).
    pub fn dictionary_bytes(&self) -> usize {
        self.encoding.dictionary_bytes()
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
        self.range
    }

    /// A sketch of the column's distinct non-null values, built with the
    /// column (by a rebuild, or when a checkpoint is read) from what the
    /// encoding holds: a dictionary's entries, or every key of the other
    /// key encodings. `None` for encodings whose values would each be
    /// hashed at full width (plain and FSST strings, wide decimals, nested
    /// columns): their distinct values are not estimated.
    pub fn distinct_sketch(&self) -> Option<&DistinctSketch> {
        self.sketch.as_ref()
    }

    /// The column with its distinct-value sketch built.
    pub(super) fn with_sketch(mut self) -> Self {
        self.sketch = self.build_sketch();
        self
    }

    fn build_sketch(&self) -> Option<DistinctSketch> {
        let mut sketch = DistinctSketch::new();
        if self.null_count() == self.len {
            return Some(sketch);
        }
        // Null slots hold a neighbour's key (see `build::fill_nulls`):
        // adding it again changes nothing.
        match self.encoding.as_ref() {
            Encoding::Keys(KeyEncoding::Constant { key, .. }) => sketch.add_key(*key),
            Encoding::Keys(KeyEncoding::Dict(d)) => d.values().iter().for_each(|&k| sketch.add_key(k)),
            Encoding::Keys(keys) => {
                let mut block = [0u64; BLOCK_SIZE];
                for b in 0..self.num_blocks() {
                    keys.decode_block(b, &mut block);
                    let n = (self.len - b * BLOCK_SIZE).min(BLOCK_SIZE);
                    block[..n].iter().for_each(|&k| sketch.add_key(k));
                }
            }
            Encoding::StrDict(d) => (0..d.dict_len()).for_each(|code| sketch.add_bytes(d.dict_value(code))),
            Encoding::Wide(_) | Encoding::StrPlain(_) | Encoding::StrFsst(_) | Encoding::Nested(_) => return None,
        }
        Some(sketch)
    }

    /// Heap bytes used: values, validity and zone maps.
    pub fn size_bytes(&self) -> usize {
        self.encoding.size_bytes() + self.validity_bytes() + self.zone_bytes()
    }

    /// Bytes of the validity bitmap.
    pub fn validity_bytes(&self) -> usize {
        self.validity.as_ref().map_or(0, |v| v.buffer().len())
    }

    /// Bytes of the column's statistics: its zone maps and its
    /// distinct-value sketch.
    pub fn zone_bytes(&self) -> usize {
        self.zones.len() * size_of::<Zone>() + self.sketch.as_ref().map_or(0, DistinctSketch::size_bytes)
    }
}

impl fmt::Display for MainColumn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} rows, {} bytes, {}", self.data_type, self.len, self.size_bytes(), self.encoding.kind())
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
    /// FSST-compressed strings or binary.
    StrFsst(StrFsst),
    /// Child columns of a struct, list or map.
    Nested(Nested),
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
            Encoding::StrFsst(_) => EncodingKind::Fsst,
            Encoding::Nested(_) => EncodingKind::Nested,
        }
    }

    /// Heap bytes used by the values (not the zone maps or validity).
    pub(crate) fn size_bytes(&self) -> usize {
        match self {
            Encoding::Keys(k) => k.size_bytes(),
            Encoding::Wide(w) => w.len() * 16,
            Encoding::StrDict(d) => d.size_bytes(),
            Encoding::StrPlain(p) => p.size_bytes(),
            Encoding::StrFsst(f) => f.size_bytes(),
            Encoding::Nested(n) => n.size_bytes(),
        }
    }

    /// Bytes of dictionary values (0 for non-dictionary encodings).
    pub(crate) fn dictionary_bytes(&self) -> usize {
        match self {
            Encoding::Keys(KeyEncoding::Dict(d)) => d.values().len() * 8,
            Encoding::StrDict(d) => d.dictionary_bytes(),
            Encoding::StrFsst(_) => StrFsst::table_bytes(),
            _ => 0,
        }
    }
}

/// The child columns of a nested main column.
#[derive(Debug, Clone)]
pub(crate) enum Nested {
    /// A struct: one column per field, each as long as the struct.
    Struct(Box<[MainColumn]>),
    /// A list, large list or map: the offsets of every row's values (one
    /// more than the rows, from 0, ascending) and the values.
    List {
        /// Int64 offsets.
        offsets: Box<MainColumn>,
        /// The values every row's offsets index.
        values: Box<MainColumn>,
    },
    /// A fixed-size list: `size` values per row, row `i`'s from `i × size`.
    FixedSizeList {
        /// Values per row.
        size: usize,
        /// The values.
        values: Box<MainColumn>,
    },
}

impl Nested {
    /// Heap bytes of every child column (values, validity, zones).
    pub(crate) fn size_bytes(&self) -> usize {
        self.children().into_iter().map(MainColumn::size_bytes).sum()
    }

    /// The child columns (a list's offsets first).
    pub(crate) fn children(&self) -> Vec<&MainColumn> {
        match self {
            Nested::Struct(children) => children.iter().collect(),
            Nested::List { offsets, values } => vec![offsets, values],
            Nested::FixedSizeList { values, .. } => vec![values],
        }
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

/// The smallest and largest non-null key over `zones`; `None` when every
/// block is all null.
pub(super) fn zone_range(zones: &[Zone]) -> Option<(u64, u64)> {
    let min = zones.iter().filter(|z| !z.all_null()).map(|z| z.min).min()?;
    let max = zones.iter().filter(|z| !z.all_null()).map(|z| z.max).max()?;
    Some((min, max))
}
