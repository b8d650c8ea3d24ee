//! Scalars and the numeric domains expressions compute in.
//!
//! ```text
//!   Arrow type                                   domain
//!   Boolean, Int8-64, UInt8-32, dates, times,
//!   timestamps, durations                           I64   (narrow types wrap to their width)
//!   UInt64                                          U64
//!   Float32, Float64                                F64   (Float32 rounded after every step)
//!   Decimal128                                      I128  (unscaled)
//!   Utf8/Binary and their forms                     —     (column references only)
//! ```

use arrow_schema::DataType;

/// The numeric domain of an Arrow type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Domain {
    /// Signed 64-bit integers (and the narrower integer-like types).
    I64,
    /// Unsigned 64-bit integers.
    U64,
    /// 64-bit floats.
    F64,
    /// Unscaled 128-bit decimals.
    I128,
}

impl Domain {
    /// The domain of `data_type`, or `None` for non-numeric types.
    pub fn of(data_type: &DataType) -> Option<Self> {
        Some(match data_type {
            DataType::Boolean
            | DataType::Int8
            | DataType::Int16
            | DataType::Int32
            | DataType::Int64
            | DataType::UInt8
            | DataType::UInt16
            | DataType::UInt32
            | DataType::Date32
            | DataType::Date64
            | DataType::Time32(_)
            | DataType::Time64(_)
            | DataType::Duration(_)
            | DataType::Timestamp(_, _) => Self::I64,
            DataType::UInt64 => Self::U64,
            DataType::Float32 | DataType::Float64 => Self::F64,
            DataType::Decimal128(_, _) => Self::I128,
            _ => return None,
        })
    }
}

/// A single value.
#[derive(Debug, Clone, PartialEq)]
pub enum Scalar {
    /// SQL NULL.
    Null,
    /// A boolean.
    Boolean(bool),
    /// A signed integer (also dates in days and timestamps in their unit).
    Int(i64),
    /// An unsigned integer.
    UInt(u64),
    /// A float.
    Float(f64),
    /// An unscaled decimal.
    Decimal(i128),
    /// A string or binary value.
    Bytes(Vec<u8>),
}

impl Scalar {
    /// True for NULL.
    pub fn is_null(&self) -> bool {
        matches!(self, Scalar::Null)
    }

    /// The value in `domain`, if it is a non-null number that converts
    /// exactly (integers to floats may round, as SQL casts do).
    pub fn to_num(&self, domain: Domain) -> Option<Num> {
        Some(match (self, domain) {
            (Scalar::Boolean(b), Domain::I64) => Num::I64(*b as i64),
            (Scalar::Int(v), Domain::I64) => Num::I64(*v),
            (Scalar::UInt(v), Domain::I64) => Num::I64(i64::try_from(*v).ok()?),
            (Scalar::Int(v), Domain::U64) => Num::U64(u64::try_from(*v).ok()?),
            (Scalar::UInt(v), Domain::U64) => Num::U64(*v),
            (Scalar::Float(v), Domain::F64) => Num::F64(*v),
            (Scalar::Int(v), Domain::F64) => Num::F64(*v as f64),
            (Scalar::UInt(v), Domain::F64) => Num::F64(*v as f64),
            (Scalar::Decimal(v), Domain::I128) => Num::I128(*v),
            (Scalar::Int(v), Domain::I128) => Num::I128(*v as i128),
            _ => return None,
        })
    }

    /// The bytes of a string or binary scalar.
    pub fn as_bytes(&self) -> Option<&[u8]> {
        match self {
            Scalar::Bytes(b) => Some(b),
            _ => None,
        }
    }
}

/// A non-null number in its domain.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Num {
    /// I64 domain.
    I64(i64),
    /// U64 domain.
    U64(u64),
    /// F64 domain.
    F64(f64),
    /// I128 domain.
    I128(i128),
}

impl Num {
    /// The domain of the number.
    pub fn domain(&self) -> Domain {
        match self {
            Num::I64(_) => Domain::I64,
            Num::U64(_) => Domain::U64,
            Num::F64(_) => Domain::F64,
            Num::I128(_) => Domain::I128,
        }
    }

    /// The number as a scalar of type `data_type`.
    pub fn to_scalar(self, data_type: &DataType) -> Scalar {
        match (self, data_type) {
            (Num::I64(v), DataType::Boolean) => Scalar::Boolean(v != 0),
            (Num::I64(v), DataType::UInt8 | DataType::UInt16 | DataType::UInt32) => Scalar::UInt(v as u64),
            (Num::I64(v), _) => Scalar::Int(v),
            (Num::U64(v), _) => Scalar::UInt(v),
            (Num::F64(v), _) => Scalar::Float(v),
            (Num::I128(v), _) => Scalar::Decimal(v),
        }
    }
}

/// Wraps an I64-domain value to the width of its Arrow type, as Arrow's
/// wrapping kernels do for that type.
#[inline(always)]
pub(crate) fn wrap_i64(v: i64, width: IntWidth) -> i64 {
    match width {
        IntWidth::I8 => v as i8 as i64,
        IntWidth::I16 => v as i16 as i64,
        IntWidth::I32 => v as i32 as i64,
        IntWidth::U8 => v as u8 as i64,
        IntWidth::U16 => v as u16 as i64,
        IntWidth::U32 => v as u32 as i64,
        IntWidth::Bool => (v != 0) as i64,
        IntWidth::I64 => v,
    }
}

/// The width an I64-domain value wraps to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum IntWidth {
    Bool,
    I8,
    I16,
    I32,
    I64,
    U8,
    U16,
    U32,
}

impl IntWidth {
    pub(crate) fn of(data_type: &DataType) -> Self {
        match data_type {
            DataType::Boolean => Self::Bool,
            DataType::Int8 => Self::I8,
            DataType::Int16 => Self::I16,
            DataType::Int32 | DataType::Date32 | DataType::Time32(_) => Self::I32,
            DataType::UInt8 => Self::U8,
            DataType::UInt16 => Self::U16,
            DataType::UInt32 => Self::U32,
            _ => Self::I64,
        }
    }

    /// The type's range, as (min, max).
    pub(crate) fn range(self) -> (i64, i64) {
        match self {
            Self::Bool => (0, 1),
            Self::I8 => (i8::MIN as i64, i8::MAX as i64),
            Self::I16 => (i16::MIN as i64, i16::MAX as i64),
            Self::I32 => (i32::MIN as i64, i32::MAX as i64),
            Self::I64 => (i64::MIN, i64::MAX),
            Self::U8 => (0, u8::MAX as i64),
            Self::U16 => (0, u16::MAX as i64),
            Self::U32 => (0, u32::MAX as i64),
        }
    }
}
