//! A main column (one encoded column of a shard's main storage, with its
//! zone maps and validity) and a shard's main storage (one column per table
//! column).

use std::fmt;
use std::sync::Arc;

use arrow_buffer::NullBuffer;
use arrow_schema::DataType;

use super::encoding::Encoding;
use super::kind::EncodingKind;
use super::zone::Zone;
use crate::block::BLOCK_SIZE;
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
        Self { data_type, physical, len, encoding: Arc::new(encoding), validity, zones }
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

    /// Heap bytes of the encoded values, dictionaries included (not the
    /// zone maps or validity).
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
