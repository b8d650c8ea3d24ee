//! Values between DataFusion (`ScalarValue`) and quiverdb (`Scalar`).

use arrow_schema::{DataType, TimeUnit};
use datafusion::common::ScalarValue;
use quiverdb_mapreducer::{Num, Scalar};

/// A DataFusion literal as a quiverdb scalar usable against an expression
/// of type `target`, or `None` if the two types do not agree (a decimal of
/// another scale, a timestamp of another unit, a string for a number...).
pub(crate) fn scalar_for(v: &ScalarValue, target: &DataType) -> Option<Scalar> {
    if v.is_null() {
        return Some(Scalar::Null);
    }
    let literal = v.data_type();
    let number = |t: &DataType| t.is_integer() || t.is_floating();
    let same_family = match (&literal, target) {
        (DataType::Decimal128(_, a), DataType::Decimal128(_, b)) => a == b,
        (DataType::Timestamp(a, _), DataType::Timestamp(b, _)) => a == b,
        (DataType::Time32(a), DataType::Time32(b))
        | (DataType::Time64(a), DataType::Time64(b))
        | (DataType::Duration(a), DataType::Duration(b)) => a == b,
        (DataType::Date32, DataType::Date32)
        | (DataType::Date64, DataType::Date64)
        | (DataType::Boolean, DataType::Boolean) => true,
        (a, b) if is_bytes(a) && is_bytes(b) => true,
        (a, b) => number(a) && number(b),
    };
    if !same_family {
        return None;
    }
    Some(match v {
        ScalarValue::Boolean(Some(b)) => Scalar::Boolean(*b),
        ScalarValue::Int8(Some(x)) => Scalar::Int(*x as i64),
        ScalarValue::Int16(Some(x)) => Scalar::Int(*x as i64),
        ScalarValue::Int32(Some(x)) => Scalar::Int(*x as i64),
        ScalarValue::Int64(Some(x)) => Scalar::Int(*x),
        ScalarValue::UInt8(Some(x)) => Scalar::UInt(*x as u64),
        ScalarValue::UInt16(Some(x)) => Scalar::UInt(*x as u64),
        ScalarValue::UInt32(Some(x)) => Scalar::UInt(*x as u64),
        ScalarValue::UInt64(Some(x)) => Scalar::UInt(*x),
        ScalarValue::Float32(Some(x)) => Scalar::Float(*x as f64),
        ScalarValue::Float64(Some(x)) => Scalar::Float(*x),
        ScalarValue::Decimal128(Some(x), _, _) => Scalar::Decimal(*x),
        ScalarValue::Date32(Some(x)) | ScalarValue::Time32Second(Some(x)) | ScalarValue::Time32Millisecond(Some(x)) => {
            Scalar::Int(*x as i64)
        }
        ScalarValue::Date64(Some(x))
        | ScalarValue::Time64Microsecond(Some(x))
        | ScalarValue::Time64Nanosecond(Some(x))
        | ScalarValue::DurationSecond(Some(x))
        | ScalarValue::DurationMillisecond(Some(x))
        | ScalarValue::DurationMicrosecond(Some(x))
        | ScalarValue::DurationNanosecond(Some(x)) => Scalar::Int(*x),
        ScalarValue::TimestampSecond(Some(x), _)
        | ScalarValue::TimestampMillisecond(Some(x), _)
        | ScalarValue::TimestampMicrosecond(Some(x), _)
        | ScalarValue::TimestampNanosecond(Some(x), _) => Scalar::Int(*x),
        ScalarValue::Utf8(Some(s)) | ScalarValue::LargeUtf8(Some(s)) | ScalarValue::Utf8View(Some(s)) => {
            Scalar::Bytes(s.as_bytes().to_vec())
        }
        ScalarValue::Binary(Some(b)) | ScalarValue::LargeBinary(Some(b)) | ScalarValue::BinaryView(Some(b)) => {
            Scalar::Bytes(b.clone())
        }
        _ => return None,
    })
}

fn is_bytes(t: &DataType) -> bool {
    matches!(
        t,
        DataType::Utf8
            | DataType::LargeUtf8
            | DataType::Utf8View
            | DataType::Binary
            | DataType::LargeBinary
            | DataType::BinaryView
    )
}

/// A quiverdb number of a column of `data_type` as a DataFusion scalar.
pub(crate) fn num_to_scalar(n: Num, data_type: &DataType) -> Option<ScalarValue> {
    Some(match (n, data_type) {
        (Num::I64(v), DataType::Boolean) => ScalarValue::Boolean(Some(v != 0)),
        (Num::I64(v), DataType::Int8) => ScalarValue::Int8(Some(v as i8)),
        (Num::I64(v), DataType::Int16) => ScalarValue::Int16(Some(v as i16)),
        (Num::I64(v), DataType::Int32) => ScalarValue::Int32(Some(v as i32)),
        (Num::I64(v), DataType::Int64) => ScalarValue::Int64(Some(v)),
        (Num::I64(v), DataType::UInt8) => ScalarValue::UInt8(Some(v as u8)),
        (Num::I64(v), DataType::UInt16) => ScalarValue::UInt16(Some(v as u16)),
        (Num::I64(v), DataType::UInt32) => ScalarValue::UInt32(Some(v as u32)),
        (Num::I64(v), DataType::Date32) => ScalarValue::Date32(Some(v as i32)),
        (Num::I64(v), DataType::Date64) => ScalarValue::Date64(Some(v)),
        (Num::I64(v), DataType::Time32(TimeUnit::Second)) => ScalarValue::Time32Second(Some(v as i32)),
        (Num::I64(v), DataType::Time32(TimeUnit::Millisecond)) => ScalarValue::Time32Millisecond(Some(v as i32)),
        (Num::I64(v), DataType::Time64(TimeUnit::Microsecond)) => ScalarValue::Time64Microsecond(Some(v)),
        (Num::I64(v), DataType::Time64(TimeUnit::Nanosecond)) => ScalarValue::Time64Nanosecond(Some(v)),
        (Num::I64(v), DataType::Duration(TimeUnit::Second)) => ScalarValue::DurationSecond(Some(v)),
        (Num::I64(v), DataType::Duration(TimeUnit::Millisecond)) => ScalarValue::DurationMillisecond(Some(v)),
        (Num::I64(v), DataType::Duration(TimeUnit::Microsecond)) => ScalarValue::DurationMicrosecond(Some(v)),
        (Num::I64(v), DataType::Duration(TimeUnit::Nanosecond)) => ScalarValue::DurationNanosecond(Some(v)),
        (Num::I64(v), DataType::Timestamp(unit, tz)) => match unit {
            TimeUnit::Second => ScalarValue::TimestampSecond(Some(v), tz.clone()),
            TimeUnit::Millisecond => ScalarValue::TimestampMillisecond(Some(v), tz.clone()),
            TimeUnit::Microsecond => ScalarValue::TimestampMicrosecond(Some(v), tz.clone()),
            TimeUnit::Nanosecond => ScalarValue::TimestampNanosecond(Some(v), tz.clone()),
        },
        (Num::U64(v), DataType::UInt64) => ScalarValue::UInt64(Some(v)),
        (Num::F64(v), DataType::Float32) => ScalarValue::Float32(Some(v as f32)),
        (Num::F64(v), DataType::Float64) => ScalarValue::Float64(Some(v)),
        (Num::I128(v), DataType::Decimal128(p, s)) => ScalarValue::Decimal128(Some(v), *p, *s),
        _ => return None,
    })
}

/// A byte string of a column of `data_type` as a DataFusion scalar.
pub(crate) fn bytes_to_scalar(b: &[u8], data_type: &DataType) -> Option<ScalarValue> {
    let text = || std::str::from_utf8(b).ok().map(str::to_string);
    Some(match data_type {
        DataType::Utf8 => ScalarValue::Utf8(Some(text()?)),
        DataType::LargeUtf8 => ScalarValue::LargeUtf8(Some(text()?)),
        DataType::Utf8View => ScalarValue::Utf8View(Some(text()?)),
        DataType::Binary => ScalarValue::Binary(Some(b.to_vec())),
        DataType::LargeBinary => ScalarValue::LargeBinary(Some(b.to_vec())),
        DataType::BinaryView => ScalarValue::BinaryView(Some(b.to_vec())),
        _ => return None,
    })
}
