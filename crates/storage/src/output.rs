//! Building Arrow arrays of a column's declared type from decoded values.
//!
//! Main storage and the delta both decode to native values or byte slices;
//! these helpers wrap them in the Arrow array the table schema asks for, so
//! the output type follows the schema, never the encoding.

use std::sync::Arc;

use arrow_array::builder::make_view;
use arrow_array::{ArrayRef, BooleanArray, make_array};
use arrow_buffer::{ArrowNativeType, BooleanBuffer, Buffer, NullBuffer, ScalarBuffer};
use arrow_data::ArrayDataBuilder;
use arrow_schema::DataType;

use crate::error::{Error, Result};

/// Longest value a view stores inline (Arrow's `MAX_INLINE_VIEW_LEN`).
const MAX_INLINE_VIEW_LEN: usize = 12;

/// A `Utf8View` / `BinaryView` decode references the source buffer instead
/// of copying when the output needs at least 1/`VIEW_SHARE_RATIO` of the
/// source's bytes; below that a copy keeps a small result from pinning (and
/// an IPC writer from shipping) a large shared buffer.
const VIEW_SHARE_RATIO: usize = 4;

/// A primitive array of type `data_type` (whose native type is `T`), its
/// values buffer moved in without a copy.
pub fn primitive_array<T: ArrowNativeType>(
    data_type: &DataType,
    values: Vec<T>,
    nulls: Option<NullBuffer>,
) -> Result<ArrayRef> {
    debug_assert_eq!(data_type.primitive_width(), Some(size_of::<T>()));
    let data = ArrayDataBuilder::new(data_type.clone())
        .len(values.len())
        .add_buffer(Buffer::from_vec(values))
        .nulls(nulls)
        .build()?;
    Ok(make_array(data))
}

/// A boolean array.
pub(crate) fn boolean_array(values: BooleanBuffer, nulls: Option<NullBuffer>) -> ArrayRef {
    Arc::new(BooleanArray::new(values, nulls))
}

/// Drops a validity bitmap without nulls (Arrow arrays need none).
pub(crate) fn normalize_nulls(nulls: Option<NullBuffer>) -> Option<NullBuffer> {
    nulls.filter(|n| n.null_count() > 0)
}

/// True for the view types.
fn is_view(data_type: &DataType) -> bool {
    matches!(data_type, DataType::Utf8View | DataType::BinaryView)
}

/// Builds a byte array (`Utf8`, `LargeUtf8`, `Utf8View`, `Binary`, ...) of
/// `len` values, value `i` being `value(i)`, by copying the bytes.
pub(crate) fn bytes_array<'a>(
    data_type: &DataType,
    len: usize,
    nulls: Option<NullBuffer>,
    value: impl Fn(usize) -> &'a [u8],
) -> Result<ArrayRef> {
    if is_view(data_type) {
        let mut views = Vec::with_capacity(len);
        let mut data = Vec::new();
        for i in 0..len {
            let v = value(i);
            let offset = data.len();
            if v.len() > MAX_INLINE_VIEW_LEN {
                data.extend_from_slice(v);
            }
            views.push(make_view(v, 0, view_offset(offset)?));
        }
        return view_array(data_type, views, vec![Buffer::from_vec(data)], nulls);
    }
    let total: usize = (0..len).map(|i| value(i).len()).sum();
    let mut bytes = Vec::with_capacity(total);
    let large = matches!(data_type, DataType::LargeUtf8 | DataType::LargeBinary);
    if large {
        let mut offsets = Vec::with_capacity(len + 1);
        offsets.push(0i64);
        for i in 0..len {
            bytes.extend_from_slice(value(i));
            offsets.push(bytes.len() as i64);
        }
        offsets_array(data_type, offsets, bytes, nulls)
    } else {
        if i32::try_from(total).is_err() {
            return Err(Error::Arrow(arrow_schema::ArrowError::OffsetOverflowError(total)));
        }
        let mut offsets = Vec::with_capacity(len + 1);
        offsets.push(0i32);
        for i in 0..len {
            bytes.extend_from_slice(value(i));
            offsets.push(bytes.len() as i32);
        }
        offsets_array(data_type, offsets, bytes, nulls)
    }
}

fn view_offset(offset: usize) -> Result<u32> {
    u32::try_from(offset).map_err(|_| Error::Arrow(arrow_schema::ArrowError::OffsetOverflowError(offset)))
}

/// An offsets + bytes array; `O` is `i32` or `i64` to match `data_type`.
fn offsets_array<O: ArrowNativeType>(
    data_type: &DataType,
    offsets: Vec<O>,
    bytes: Vec<u8>,
    nulls: Option<NullBuffer>,
) -> Result<ArrayRef> {
    let len = offsets.len() - 1;
    let builder = ArrayDataBuilder::new(data_type.clone())
        .len(len)
        .add_buffer(Buffer::from_vec(offsets))
        .add_buffer(Buffer::from_vec(bytes))
        .nulls(nulls);
    Ok(make_array(build_trusted(builder)?))
}

/// A string or binary array of `data_type` whose value `i` is
/// `bytes[offsets[i]..offsets[i + 1]]` (offsets ascending from 0): views
/// into `bytes`, or offsets over it, without copying the bytes.
pub(crate) fn contiguous_bytes_array(
    data_type: &DataType,
    bytes: Vec<u8>,
    offsets: &[usize],
    nulls: Option<NullBuffer>,
) -> Result<ArrayRef> {
    let total = offsets.last().copied().unwrap_or(0);
    if is_view(data_type) {
        view_offset(total)?;
        let views = offsets.windows(2).map(|w| make_view(&bytes[w[0]..w[1]], 0, w[0] as u32)).collect();
        return view_array(data_type, views, vec![Buffer::from_vec(bytes)], nulls);
    }
    if matches!(data_type, DataType::LargeUtf8 | DataType::LargeBinary) {
        return offsets_array(data_type, offsets.iter().map(|&o| o as i64).collect(), bytes, nulls);
    }
    if i32::try_from(total).is_err() {
        return Err(Error::Arrow(arrow_schema::ArrowError::OffsetOverflowError(total)));
    }
    offsets_array(data_type, offsets.iter().map(|&o| o as i32).collect(), bytes, nulls)
}

/// A view array from views and data buffers.
pub(crate) fn view_array(
    data_type: &DataType,
    views: Vec<u128>,
    buffers: Vec<Buffer>,
    nulls: Option<NullBuffer>,
) -> Result<ArrayRef> {
    let buffers = if buffers.iter().all(|b| b.is_empty()) { Vec::new() } else { buffers };
    let builder = ArrayDataBuilder::new(data_type.clone())
        .len(views.len())
        .add_buffer(ScalarBuffer::from(views).into_inner())
        .add_buffers(buffers)
        .nulls(nulls);
    Ok(make_array(build_trusted(builder)?))
}

/// Builds array data from storage that was validated when it was ingested
/// (UTF-8 checked, offsets monotone). Debug builds re-validate everything.
fn build_trusted(builder: ArrayDataBuilder) -> Result<arrow_data::ArrayData> {
    if cfg!(debug_assertions) {
        return Ok(builder.build()?);
    }
    // SAFETY: quiverdb builds these buffers itself from values that passed
    // Arrow validation at ingest (see `ingest::validate_batch`), with offsets
    // computed from the lengths it copied; debug builds check with `build()`.
    Ok(unsafe { builder.build_unchecked() })
}

/// Views for a byte dictionary of `n` entries whose data is `bytes` with
/// entry `i` at `offsets[i]..offsets[i + 1]`, referencing buffer 0.
/// Returns the views and whether any view references the buffer.
pub(crate) fn dictionary_views(offsets: &[u32], bytes: &[u8]) -> (Vec<u128>, bool) {
    let mut any_ref = false;
    let views = offsets
        .windows(2)
        .map(|w| {
            let v = &bytes[w[0] as usize..w[1] as usize];
            any_ref |= v.len() > MAX_INLINE_VIEW_LEN;
            make_view(v, 0, w[0])
        })
        .collect();
    (views, any_ref)
}

/// Whether a view decode needing `needed` bytes of a `source`-byte buffer
/// should reference it rather than copy.
pub(crate) fn share_source(needed: usize, source: usize) -> bool {
    source <= u32::MAX as usize && needed.saturating_mul(VIEW_SHARE_RATIO) >= source
}
