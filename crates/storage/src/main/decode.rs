//! Decoding main columns to Arrow: a contiguous range, or a gather of ids.
//!
//! Both walk the ids block by block. A block that many requested rows hit
//! is unpacked whole into a stack buffer; a block hit by only a few is read
//! value by value (`get`, which for bit-packing unpacks a single value):
//!
//! ```text
//!   ids   3 7 9 ... 1000 | 2051 | 4100 4101 ... 4900
//!         └ block 0: 600 ids → unpack 1,024, pick 600
//!                          └ block 2: 1 id → get(2051)
//!                                  └ block 4: 300 ids → unpack, pick
//! ```
//!
//! Unsorted ids (as ordered scans produce) work the same way: consecutive
//! ids that fall in one block are grouped; no sort is needed.
//!
//! A nested column reads the same rows of a struct's children; a list
//! reads its rows' offsets, then the child rows they span.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{ArrayRef, FixedSizeListArray, GenericListArray, MapArray, StructArray};
use arrow_buffer::{BooleanBuffer, NullBuffer, OffsetBuffer, ScalarBuffer};
use arrow_schema::{ArrowError, DataType};

use super::bitpacked::BitPacked;
use super::column::{Encoding, MainColumn, Nested};
use super::encoding::KeyEncoding;
use super::fsst::StrFsst;
use super::strings::{StrDict, StrPlain};
use crate::block::BLOCK_SIZE;
use crate::error::{Error, Result};
use crate::output::{
    boolean_array, bytes_array, contiguous_bytes_array, dictionary_views, normalize_nulls, primitive_array,
    share_source, view_array,
};
use crate::types::{KeyNative, with_native};

/// From this many requested rows in one block on, unpacking the whole block
/// beats reading values one by one (the FastLanes crate measures the
/// crossover at "~10 values"; 16 is the nearest power of two above).
pub(crate) const GATHER_UNPACK_THRESHOLD: usize = 16;

/// A source of `u64` values addressable by row and by block.
pub(crate) trait BlockSource {
    fn get(&self, row: usize) -> u64;
    fn decode_block(&self, block: usize, out: &mut [u64; BLOCK_SIZE]);
}

impl BlockSource for KeyEncoding {
    #[inline]
    fn get(&self, row: usize) -> u64 {
        KeyEncoding::get(self, row)
    }
    fn decode_block(&self, block: usize, out: &mut [u64; BLOCK_SIZE]) {
        KeyEncoding::decode_block(self, block, out)
    }
}

impl BlockSource for BitPacked {
    #[inline]
    fn get(&self, row: usize) -> u64 {
        BitPacked::get(self, row)
    }
    fn decode_block(&self, block: usize, out: &mut [u64; BLOCK_SIZE]) {
        BitPacked::decode_block(self, block, out)
    }
}

/// Which rows to decode.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Rows<'a> {
    /// `start .. start + len`.
    Range(usize, usize),
    /// These ids, in this order.
    Ids(&'a [u32]),
}

impl Rows<'_> {
    pub(crate) fn len(&self) -> usize {
        match self {
            Rows::Range(_, len) => *len,
            Rows::Ids(ids) => ids.len(),
        }
    }
}

/// Appends `conv(value)` for every row of `rows` to `out`.
pub(crate) fn collect<T>(src: &impl BlockSource, rows: Rows<'_>, conv: impl Fn(u64) -> T, out: &mut Vec<T>) {
    let mut buf = [0u64; BLOCK_SIZE];
    match rows {
        Rows::Range(start, len) => {
            let end = start + len;
            let mut row = start;
            while row < end {
                let block = row / BLOCK_SIZE;
                let block_start = block * BLOCK_SIZE;
                let hi = (block_start + BLOCK_SIZE).min(end);
                if hi - row < GATHER_UNPACK_THRESHOLD {
                    out.extend((row..hi).map(|r| conv(src.get(r))));
                } else {
                    src.decode_block(block, &mut buf);
                    out.extend(buf[row - block_start..hi - block_start].iter().map(|&k| conv(k)));
                }
                row = hi;
            }
        }
        Rows::Ids(ids) => {
            let mut i = 0;
            while i < ids.len() {
                let block = ids[i] as usize / BLOCK_SIZE;
                let mut j = i + 1;
                while j < ids.len() && ids[j] as usize / BLOCK_SIZE == block {
                    j += 1;
                }
                if j - i < GATHER_UNPACK_THRESHOLD {
                    out.extend(ids[i..j].iter().map(|&id| conv(src.get(id as usize))));
                } else {
                    src.decode_block(block, &mut buf);
                    out.extend(ids[i..j].iter().map(|&id| conv(buf[id as usize % BLOCK_SIZE])));
                }
                i = j;
            }
        }
    }
}

impl MainColumn {
    /// Decodes rows `start .. start + len` to an Arrow array of the column's type.
    pub fn decode_range(&self, start: usize, len: usize) -> Result<ArrayRef> {
        if start.checked_add(len).is_none_or(|end| end > self.len) {
            return Err(Error::Internal(format!(
                "decode of rows {start}..{} of a {}-row column",
                start.saturating_add(len),
                self.len
            )));
        }
        self.read(Rows::Range(start, len))
    }

    /// Gathers the rows `ids` (any order, repeats allowed) to an Arrow array
    /// of the column's type.
    pub fn gather(&self, ids: &[u32]) -> Result<ArrayRef> {
        if let Some(&bad) = ids.iter().find(|&&id| id as usize >= self.len) {
            return Err(Error::Internal(format!("gather of row {bad} from a {}-row column", self.len)));
        }
        self.read(Rows::Ids(ids))
    }

    /// [`Self::decode_range`] or [`Self::gather`], `rows` already checked
    /// against the column's length.
    pub(crate) fn read(&self, rows: Rows<'_>) -> Result<ArrayRef> {
        let nulls = match rows {
            Rows::Range(start, len) => normalize_nulls(self.validity.as_ref().map(|v| v.slice(start, len))),
            Rows::Ids(ids) => self.validity.as_ref().and_then(|v| {
                let bits = BooleanBuffer::collect_bool(ids.len(), |i| v.is_valid(ids[i] as usize));
                normalize_nulls(Some(NullBuffer::new(bits)))
            }),
        };
        if let Encoding::Nested(nested) = &*self.encoding {
            return nested.read(&self.data_type, rows, nulls);
        }
        let stored = self.decode_stored(rows, nulls)?;
        crate::row_encoded::decode(stored, &self.data_type)
    }

    /// [`Self::decode`], with row-encoded values still as their byte
    /// strings (Binary).
    fn decode_stored(&self, rows: Rows<'_>, nulls: Option<NullBuffer>) -> Result<ArrayRef> {
        let data_type = crate::row_encoded::stored_type(&self.data_type);
        let n = rows.len();
        match &*self.encoding {
            Encoding::Keys(enc) => with_native!(self.physical,
                T => {
                    let mut out: Vec<T> = Vec::with_capacity(n);
                    collect(enc, rows, T::from_key, &mut out);
                    primitive_array(data_type, out, nulls)
                },
                bool => {
                    let mut out: Vec<u64> = Vec::with_capacity(n);
                    collect(enc, rows, |k| k, &mut out);
                    Ok(boolean_array(BooleanBuffer::collect_bool(n, |i| out[i] != 0), nulls))
                },
                bytes => Err(Error::Internal("key encoding on a bytes column".into())),
            ),
            Encoding::Wide(values) => {
                let out: Vec<i128> = match rows {
                    Rows::Range(start, len) => values[start..start + len].to_vec(),
                    Rows::Ids(ids) => ids.iter().map(|&i| values[i as usize]).collect(),
                };
                primitive_array(data_type, out, nulls)
            }
            Encoding::StrDict(dict) => self.decode_dict(dict, rows, nulls),
            Encoding::StrPlain(plain) => self.decode_plain(plain, rows, nulls),
            Encoding::StrFsst(fsst) => self.decode_fsst(fsst, rows, nulls),
            Encoding::Nested(_) => Err(Error::Internal("nested columns read as bytes".into())),
        }
    }

    fn decode_dict(&self, dict: &StrDict, rows: Rows<'_>, nulls: Option<NullBuffer>) -> Result<ArrayRef> {
        let data_type = crate::row_encoded::stored_type(&self.data_type);
        let n = rows.len();
        let mut codes: Vec<u32> = Vec::with_capacity(n);
        collect(dict.codes(), rows, |c| c as u32, &mut codes);
        if is_view(data_type) && n >= dict.dict_len() {
            // Views of the dictionary, computed once, then gathered by code:
            // no string is copied.
            let (views, any_ref) = dictionary_views(dict.dict_offsets(), dict.dict_bytes());
            if !any_ref || dict.dict_bytes().len() <= u32::MAX as usize {
                let out: Vec<u128> = codes.iter().map(|&c| views[c as usize]).collect();
                let buffers = if any_ref { vec![dict.dict_bytes().clone()] } else { Vec::new() };
                return view_array(data_type, out, buffers, nulls);
            }
        }
        bytes_array(data_type, n, nulls, |i| dict.dict_value(codes[i] as usize))
    }

    fn decode_plain(&self, plain: &StrPlain, rows: Rows<'_>, nulls: Option<NullBuffer>) -> Result<ArrayRef> {
        let data_type = crate::row_encoded::stored_type(&self.data_type);
        let n = rows.len();
        let bytes = plain.bytes();
        // (start, end) byte range of every requested row.
        let ranges: Vec<(usize, usize)> = match rows {
            Rows::Range(start, len) => {
                let mut offsets = Vec::with_capacity(len + 1);
                collect(plain.offsets(), Rows::Range(start, len + 1), |o| o as usize, &mut offsets);
                offsets.windows(2).map(|w| (w[0], w[1])).collect()
            }
            Rows::Ids(ids) => ids.iter().map(|&id| plain.range(id as usize)).collect(),
        };
        if is_view(data_type) {
            let needed: usize = ranges.iter().map(|(s, e)| e - s).sum();
            if share_source(needed, bytes.len()) {
                let views =
                    ranges.iter().map(|&(s, e)| arrow_array::builder::make_view(&bytes[s..e], 0, s as u32)).collect();
                return view_array(data_type, views, vec![bytes.clone()], nulls);
            }
        }
        bytes_array(data_type, n, nulls, |i| &bytes[ranges[i].0..ranges[i].1])
    }
}

impl MainColumn {
    /// Decompresses the rows into one buffer, sized exactly beforehand.
    fn decode_fsst(&self, fsst: &StrFsst, rows: Rows<'_>, nulls: Option<NullBuffer>) -> Result<ArrayRef> {
        let data_type = crate::row_encoded::stored_type(&self.data_type);
        let mut offsets = Vec::with_capacity(rows.len() + 1);
        let bytes = match rows {
            Rows::Range(start, len) => {
                let mut bytes = Vec::new();
                fsst.decompress_range(start, len, &mut bytes, &mut offsets);
                bytes
            }
            Rows::Ids(ids) => {
                let mut total = 0;
                offsets.push(0);
                for &id in ids {
                    total += fsst.decoded_len(fsst.codes(id as usize));
                    offsets.push(total);
                }
                let mut bytes = Vec::with_capacity(total);
                for (i, &id) in ids.iter().enumerate() {
                    fsst.decompress_into(fsst.codes(id as usize), offsets[i + 1] - offsets[i], &mut bytes);
                }
                bytes
            }
        };
        contiguous_bytes_array(data_type, bytes, &offsets, nulls)
    }
}

fn is_view(data_type: &arrow_schema::DataType) -> bool {
    matches!(data_type, arrow_schema::DataType::Utf8View | arrow_schema::DataType::BinaryView)
}

// ------------------------------------------------------------ nested

impl Nested {
    /// The `rows` of the column (of type `data_type`, with `nulls` for them).
    fn read(&self, data_type: &DataType, rows: Rows<'_>, nulls: Option<NullBuffer>) -> Result<ArrayRef> {
        match (self, data_type) {
            (Nested::Struct(children), DataType::Struct(fields)) => {
                let arrays = children.iter().map(|c| c.read(rows)).collect::<Result<Vec<_>>>()?;
                Ok(Arc::new(StructArray::try_new_with_length(fields.clone(), arrays, nulls, rows.len())?))
            }
            (Nested::List { offsets, values }, _) => {
                let (offsets, values) = list_rows(offsets, values, rows)?;
                Ok(match data_type {
                    DataType::List(field) => {
                        Arc::new(GenericListArray::<i32>::try_new(field.clone(), narrow(&offsets)?, values, nulls)?)
                    }
                    DataType::LargeList(field) => Arc::new(GenericListArray::<i64>::try_new(
                        field.clone(),
                        OffsetBuffer::new(ScalarBuffer::from(offsets)),
                        values,
                        nulls,
                    )?),
                    DataType::Map(field, sorted) => Arc::new(MapArray::try_new(
                        field.clone(),
                        narrow(&offsets)?,
                        values.as_struct().clone(),
                        nulls,
                        *sorted,
                    )?),
                    other => return Err(Error::Internal(format!("list columns read as {other}"))),
                })
            }
            (Nested::FixedSizeList { size, values }, DataType::FixedSizeList(field, width)) => {
                let size = *size;
                let values = match rows {
                    Rows::Range(start, len) => values.read(Rows::Range(start * size, len * size))?,
                    Rows::Ids(ids) => {
                        let ids: Vec<u32> =
                            ids.iter().flat_map(|&id| id * size as u32..(id + 1) * size as u32).collect();
                        values.read(Rows::Ids(&ids))?
                    }
                };
                Ok(Arc::new(FixedSizeListArray::try_new_with_length(field.clone(), *width, values, nulls, rows.len())?))
            }
            (_, other) => Err(Error::Internal(format!("nested columns read as {other}"))),
        }
    }
}

/// The offsets (from 0) and values of a list column's `rows`.
fn list_rows(offsets: &MainColumn, values: &MainColumn, rows: Rows<'_>) -> Result<(Vec<i64>, ArrayRef)> {
    match rows {
        Rows::Range(start, len) => {
            let read = offsets.read(Rows::Range(start, len + 1))?;
            let stored = read.as_primitive::<Int64Type>().values();
            let first = stored[0];
            let values = values.read(Rows::Range(first as usize, (stored[len] - first) as usize))?;
            Ok((stored.iter().map(|o| o - first).collect(), values))
        }
        Rows::Ids(ids) => {
            let bounds: Vec<u32> = ids.iter().flat_map(|&id| [id, id + 1]).collect();
            let read = offsets.read(Rows::Ids(&bounds))?;
            let stored = read.as_primitive::<Int64Type>().values();
            let mut out = Vec::with_capacity(ids.len() + 1);
            out.push(0i64);
            let mut child_ids = Vec::new();
            for pair in stored.chunks_exact(2) {
                child_ids.extend(pair[0] as u32..pair[1] as u32);
                out.push(child_ids.len() as i64);
            }
            Ok((out, values.read(Rows::Ids(&child_ids))?))
        }
    }
}

/// `offsets` as a List's or Map's 32-bit offsets.
fn narrow(offsets: &[i64]) -> Result<OffsetBuffer<i32>> {
    let last = offsets.last().copied().unwrap_or(0);
    if i32::try_from(last).is_err() {
        return Err(Error::Arrow(ArrowError::ComputeError(format!(
            "{last} list values in one batch exceed a List's 32-bit offsets; declare the column a LargeList"
        ))));
    }
    Ok(OffsetBuffer::new(ScalarBuffer::from(offsets.iter().map(|&o| o as i32).collect::<Vec<_>>())))
}
