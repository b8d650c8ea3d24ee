//! Arrow arrays of a declared type from domain values.

use std::sync::Arc;

use arrow_array::builder::{BinaryBuilder, LargeBinaryBuilder, LargeStringBuilder, StringBuilder};
use arrow_array::{ArrayRef, BinaryViewArray, BooleanArray, Float32Array, Float64Array, StringViewArray};
use arrow_buffer::{ArrowNativeType, BooleanBuffer, NullBuffer};
use arrow_schema::DataType;

use crate::error::{Error, Result};

/// A validity bitmap from per-row flags; `None` when every row is valid.
pub(crate) fn nulls_from(valid: &[bool]) -> Option<NullBuffer> {
    if valid.iter().all(|&v| v) {
        return None;
    }
    Some(NullBuffer::new(BooleanBuffer::from(valid)))
}

/// A primitive array of `data_type` from native values (storage's builder:
/// the values buffer is moved in, not copied).
pub(crate) fn native_array<T: ArrowNativeType>(
    data_type: &DataType,
    values: Vec<T>,
    nulls: Option<NullBuffer>,
) -> Result<ArrayRef> {
    Ok(quiverdb_storage::primitive_array(data_type, values, nulls)?)
}

/// An array of the I64-domain type `data_type` (booleans, integers up to
/// 32 unsigned / 64 signed bits, dates, times, timestamps, durations).
pub(crate) fn i64_array(data_type: &DataType, values: Vec<i64>, nulls: Option<NullBuffer>) -> Result<ArrayRef> {
    Ok(match data_type {
        DataType::Boolean => {
            Arc::new(BooleanArray::new(BooleanBuffer::collect_bool(values.len(), |i| values[i] != 0), nulls))
        }
        DataType::Int8 => native_array(data_type, values.iter().map(|&v| v as i8).collect(), nulls)?,
        DataType::Int16 => native_array(data_type, values.iter().map(|&v| v as i16).collect(), nulls)?,
        DataType::Int32 | DataType::Date32 | DataType::Time32(_) => {
            native_array(data_type, values.iter().map(|&v| v as i32).collect(), nulls)?
        }
        DataType::UInt8 => native_array(data_type, values.iter().map(|&v| v as u8).collect(), nulls)?,
        DataType::UInt16 => native_array(data_type, values.iter().map(|&v| v as u16).collect(), nulls)?,
        DataType::UInt32 => native_array(data_type, values.iter().map(|&v| v as u32).collect(), nulls)?,
        // Moved, not copied.
        DataType::Int64
        | DataType::Date64
        | DataType::Timestamp(_, _)
        | DataType::Time64(_)
        | DataType::Duration(_) => native_array(data_type, values, nulls)?,
        other => return Err(Error::Internal(format!("I64-domain output of type {other}"))),
    })
}

/// An array of `Float32` or `Float64` from F64-domain values.
pub(crate) fn f64_array(data_type: &DataType, values: Vec<f64>, nulls: Option<NullBuffer>) -> Result<ArrayRef> {
    Ok(match data_type {
        DataType::Float32 => Arc::new(Float32Array::new(values.iter().map(|&v| v as f32).collect(), nulls)),
        DataType::Float64 => Arc::new(Float64Array::new(values.into(), nulls)),
        other => return Err(Error::Internal(format!("F64-domain output of type {other}"))),
    })
}

/// A byte array (any string or binary layout) from optional values.
pub(crate) fn bytes_array<'v>(
    data_type: &DataType,
    values: impl Iterator<Item = Option<&'v [u8]>>,
) -> Result<ArrayRef> {
    let utf8 = |v: &'v [u8]| -> Result<&'v str> {
        std::str::from_utf8(v).map_err(|e| Error::Internal(format!("invalid UTF-8 in a string column: {e}")))
    };
    Ok(match data_type {
        DataType::Utf8 => {
            let mut b = StringBuilder::new();
            for v in values {
                b.append_option(v.map(utf8).transpose()?);
            }
            Arc::new(b.finish())
        }
        DataType::LargeUtf8 => {
            let mut b = LargeStringBuilder::new();
            for v in values {
                b.append_option(v.map(utf8).transpose()?);
            }
            Arc::new(b.finish())
        }
        DataType::Utf8View => {
            let v: Vec<Option<&str>> = values.map(|v| v.map(utf8).transpose()).collect::<Result<_>>()?;
            Arc::new(StringViewArray::from(v))
        }
        DataType::Binary => {
            let mut b = BinaryBuilder::new();
            for v in values {
                b.append_option(v);
            }
            Arc::new(b.finish())
        }
        DataType::LargeBinary => {
            let mut b = LargeBinaryBuilder::new();
            for v in values {
                b.append_option(v);
            }
            Arc::new(b.finish())
        }
        DataType::BinaryView => Arc::new(BinaryViewArray::from(values.collect::<Vec<_>>())),
        other => return Err(Error::Internal(format!("bytes output of type {other}"))),
    })
}
