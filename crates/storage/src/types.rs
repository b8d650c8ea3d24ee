//! Column types: which Arrow types quiverdb stores, how each maps to a
//! physical representation, and the order-preserving `u64` keys that main
//! storage encodes.
//!
//! # Keys
//!
//! Main storage does not encode Arrow values directly. Every fixed-width
//! value is first mapped to a `u64` *key* such that comparing keys as
//! unsigned integers gives the value order:
//!
//! ```text
//!   signed ints   sign-extend to i64, flip bit 63      -5i8  -> 0x7FFF_FFFF_FFFF_FFFB
//!   unsigned      zero-extend                          200u8 -> 200
//!   floats        IEEE total order (sign-magnitude ->  -0.0  < +0.0 < inf < NaN
//!                 offset binary), as arrow-ord sorts
//!   boolean       false = 0, true = 1
//! ```
//!
//! Differences of keys equal differences of values, so frame-of-reference
//! and sequence encodings, predicates and sums work in the key domain and
//! the encodings are written once for all types. Decimal128 values are keyed
//! as i64 when the whole column fits (the usual case); otherwise the column is
//! stored by the `Wide` encoding and its zone-map keys are clamped to the i64
//! range (monotone, so pruning stays correct).

use arrow_buffer::ArrowNativeType;
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use std::sync::Arc;

use crate::error::{Error, Result};

/// A record id: the position of a row within one shard version (main
/// ids first, then delta ids).
pub type RecId = u32;

/// Bit 63: flipping it maps i64 order onto u64 order.
pub const SIGN_BIT: u64 = 1 << 63;

/// How a column is stored, independent of its exact Arrow type.
///
/// Several Arrow types share a physical type (`Date32` is `Int32`, every
/// `Timestamp` is `Int64`, the three string types are `Bytes`); the Arrow
/// type of the table schema decides what a decode produces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PhysicalType {
    /// Bit-packed booleans.
    Boolean,
    /// `i8`.
    Int8,
    /// `i16`.
    Int16,
    /// `i32` (also `Date32` and `Time32`).
    Int32,
    /// `i64` (also `Date64` and every `Timestamp`, `Time64` and `Duration`).
    Int64,
    /// `u8`.
    UInt8,
    /// `u16`.
    UInt16,
    /// `u32`.
    UInt32,
    /// `u64`.
    UInt64,
    /// `f32`.
    Float32,
    /// `f64`.
    Float64,
    /// `i128` decimal.
    Decimal128,
    /// Variable-length bytes (strings and binary).
    Bytes,
}

impl PhysicalType {
    /// The physical type of an Arrow type, or `None` if quiverdb does not store it.
    pub fn of(data_type: &DataType) -> Option<Self> {
        Some(match data_type {
            DataType::Boolean => Self::Boolean,
            DataType::Int8 => Self::Int8,
            DataType::Int16 => Self::Int16,
            DataType::Int32 | DataType::Date32 | DataType::Time32(_) => Self::Int32,
            DataType::Int64
            | DataType::Date64
            | DataType::Timestamp(_, _)
            | DataType::Time64(_)
            | DataType::Duration(_) => Self::Int64,
            DataType::UInt8 => Self::UInt8,
            DataType::UInt16 => Self::UInt16,
            DataType::UInt32 => Self::UInt32,
            DataType::UInt64 => Self::UInt64,
            DataType::Float32 => Self::Float32,
            DataType::Float64 => Self::Float64,
            DataType::Decimal128(_, _) => Self::Decimal128,
            DataType::Utf8
            | DataType::LargeUtf8
            | DataType::Utf8View
            | DataType::Binary
            | DataType::LargeBinary
            | DataType::BinaryView => Self::Bytes,
            // Structs, lists, maps and the other types stored in Arrow's
            // row format (see `crate::row_encoded`).
            other if crate::row_encoded::is_row_encoded(other) => Self::Bytes,
            _ => return None,
        })
    }

    /// Width in bytes of one value in the delta (0 for booleans and bytes,
    /// which are stored as bitmaps and offsets + bytes).
    pub fn byte_width(self) -> usize {
        match self {
            Self::Boolean | Self::Bytes => 0,
            Self::Int8 | Self::UInt8 => 1,
            Self::Int16 | Self::UInt16 => 2,
            Self::Int32 | Self::UInt32 | Self::Float32 => 4,
            Self::Int64 | Self::UInt64 | Self::Float64 => 8,
            Self::Decimal128 => 16,
        }
    }

    /// True for the float types (whose sums are not exact integers).
    pub fn is_float(self) -> bool {
        matches!(self, Self::Float32 | Self::Float64)
    }
}

/// The type a column declared as `declared` is stored as: the value type
/// of a dictionary or run-end encoding, else the type itself.
pub fn stored_type(declared: &DataType) -> &DataType {
    match declared {
        DataType::Dictionary(_, values) => stored_type(values),
        DataType::RunEndEncoded(_, values) => stored_type(values.data_type()),
        other => other,
    }
}

/// True if a batch column of type `found` may be appended to a column
/// declared as `declared`: the types are equal, or both are strings
/// (Utf8 / LargeUtf8 / Utf8View), or both are binary.
pub fn ingest_compatible(declared: &DataType, found: &DataType) -> bool {
    let found = stored_type(found);
    declared == found || (is_string(declared) && is_string(found)) || (is_binary(declared) && is_binary(found))
}

/// True for Utf8, LargeUtf8 and Utf8View.
pub fn is_string(data_type: &DataType) -> bool {
    matches!(data_type, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View)
}

/// True for Binary, LargeBinary and BinaryView.
pub fn is_binary(data_type: &DataType) -> bool {
    matches!(data_type, DataType::Binary | DataType::LargeBinary | DataType::BinaryView)
}

/// A validated table schema: the Arrow schema plus each column's physical
/// type and the primary key.
#[derive(Debug, Clone)]
pub struct TableSchema {
    arrow: SchemaRef,
    physical: Arc<[PhysicalType]>,
    primary_key: Arc<[usize]>,
    unique: Arc<[Arc<[usize]>]>,
}

impl TableSchema {
    /// Validates an Arrow schema: unique names (no columns at all is fine), only
    /// supported types; `primary_key` names existing, distinct columns, which
    /// are made NOT NULL.
    pub fn try_new(schema: &Schema, primary_key: &[&str]) -> Result<Self> {
        let mut physical = Vec::with_capacity(schema.fields().len());
        // Dictionary- and run-end-encoded columns are stored as their
        // values: quiverdb picks its own encodings.
        let fields: Vec<Field> = schema
            .fields()
            .iter()
            .map(|f| f.as_ref().clone().with_data_type(stored_type(f.data_type()).clone()))
            .collect();
        let schema = &Schema::new_with_metadata(fields, schema.metadata().clone());
        for (i, field) in schema.fields().iter().enumerate() {
            if schema.fields()[..i].iter().any(|f| f.name() == field.name()) {
                return Err(Error::InvalidSchema(format!("column '{}' is declared twice", field.name())));
            }
            let ty = PhysicalType::of(field.data_type()).ok_or_else(|| Error::UnsupportedType {
                column: field.name().clone(),
                data_type: field.data_type().clone(),
            })?;
            physical.push(ty);
        }
        let mut key = Vec::with_capacity(primary_key.len());
        for name in primary_key {
            let idx = schema
                .index_of(name)
                .map_err(|_| Error::InvalidSchema(format!("primary key column '{name}' is not a column")))?;
            if key.contains(&idx) {
                return Err(Error::InvalidSchema(format!("primary key names column '{name}' twice")));
            }
            no_key_of_row_encoded(schema.field(idx), "a primary key")?;
            key.push(idx);
        }
        // Key columns are NOT NULL, as in SQL.
        let fields: Vec<Field> = schema
            .fields()
            .iter()
            .enumerate()
            .map(|(i, f)| {
                let f = f.as_ref().clone();
                if key.contains(&i) { f.with_nullable(false) } else { f }
            })
            .collect();
        let arrow = Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()));
        Ok(Self { arrow, physical: physical.into(), primary_key: key.into(), unique: Arc::new([]) })
    }

    /// This schema with UNIQUE constraints over the column sets `unique`
    /// (each non-empty, of existing, distinct columns).
    pub fn with_unique(mut self, unique: &[Vec<String>]) -> Result<Self> {
        let mut sets = Vec::with_capacity(unique.len());
        for set in unique {
            if set.is_empty() {
                return Err(Error::InvalidSchema("a UNIQUE constraint names no column".into()));
            }
            let mut columns = Vec::with_capacity(set.len());
            for name in set {
                let idx = self
                    .arrow
                    .index_of(name)
                    .map_err(|_| Error::InvalidSchema(format!("UNIQUE column '{name}' is not a column")))?;
                if columns.contains(&idx) {
                    return Err(Error::InvalidSchema(format!("a UNIQUE constraint names column '{name}' twice")));
                }
                no_key_of_row_encoded(self.arrow.field(idx), "a UNIQUE constraint")?;
                columns.push(idx);
            }
            sets.push(Arc::from(columns));
        }
        self.unique = sets.into();
        Ok(self)
    }

    /// The column sets of the UNIQUE constraints.
    pub fn unique(&self) -> &[Arc<[usize]>] {
        &self.unique
    }

    /// The Arrow schema of the table.
    pub fn arrow(&self) -> &SchemaRef {
        &self.arrow
    }

    /// Physical type of column `i`.
    pub fn physical(&self, i: usize) -> PhysicalType {
        self.physical[i]
    }

    /// Physical types of all columns.
    pub fn physical_types(&self) -> &[PhysicalType] {
        &self.physical
    }

    /// Column indexes of the primary key (empty when none was declared).
    pub fn primary_key(&self) -> &[usize] {
        &self.primary_key
    }

    /// Number of columns.
    pub fn len(&self) -> usize {
        self.physical.len()
    }

    /// True for a table without columns.
    pub fn is_empty(&self) -> bool {
        self.physical.is_empty()
    }

    /// The field of column `i`.
    pub fn field(&self, i: usize) -> &Field {
        self.arrow.field(i)
    }
}

/// Refuses a key (`what`) over `field` when its type is stored in the row
/// format (structs, lists, maps, ...).
fn no_key_of_row_encoded(field: &Field, what: &str) -> Result<()> {
    if crate::row_encoded::is_row_encoded(field.data_type()) {
        return Err(Error::InvalidSchema(format!(
            "column '{}' of type {} cannot be in {what}",
            field.name(),
            field.data_type()
        )));
    }
    Ok(())
}

/// A fixed-width native value with an order-preserving `u64` key.
///
/// `from_key(to_key(v)) == v` for every value (bit-exact for floats, so
/// NaN payloads and -0.0 survive), except `i128`, whose keys clamp to the
/// i64 range (main storage keys decimals only when they fit).
pub trait KeyNative: ArrowNativeType {
    /// The order-preserving key of `self`.
    fn to_key(self) -> u64;
    /// The value of a key produced by [`KeyNative::to_key`].
    fn from_key(key: u64) -> Self;
}

macro_rules! key_signed {
    ($($t:ty),*) => {$(
        impl KeyNative for $t {
            #[inline(always)]
            fn to_key(self) -> u64 {
                (self as i64 as u64) ^ SIGN_BIT
            }
            #[inline(always)]
            fn from_key(key: u64) -> Self {
                (key ^ SIGN_BIT) as i64 as $t
            }
        }
    )*};
}
key_signed!(i8, i16, i32, i64);

macro_rules! key_unsigned {
    ($($t:ty),*) => {$(
        impl KeyNative for $t {
            #[inline(always)]
            fn to_key(self) -> u64 {
                self as u64
            }
            #[inline(always)]
            fn from_key(key: u64) -> Self {
                key as $t
            }
        }
    )*};
}
key_unsigned!(u8, u16, u32, u64);

impl KeyNative for f64 {
    #[inline(always)]
    fn to_key(self) -> u64 {
        let bits = self.to_bits();
        // Negative: flip all bits (more negative = smaller). Positive: set the sign bit.
        bits ^ ((((bits as i64) >> 63) as u64) | SIGN_BIT)
    }
    #[inline(always)]
    fn from_key(key: u64) -> Self {
        // Keys with bit 63 set came from positive values.
        let mask = if key & SIGN_BIT != 0 { SIGN_BIT } else { u64::MAX };
        f64::from_bits(key ^ mask)
    }
}

impl KeyNative for f32 {
    #[inline(always)]
    fn to_key(self) -> u64 {
        let bits = self.to_bits();
        let flipped = bits ^ ((((bits as i32) >> 31) as u32) | (1 << 31));
        flipped as u64
    }
    #[inline(always)]
    fn from_key(key: u64) -> Self {
        let key = key as u32;
        let mask = if key & (1 << 31) != 0 { 1 << 31 } else { u32::MAX };
        f32::from_bits(key ^ mask)
    }
}

impl KeyNative for i128 {
    #[inline(always)]
    fn to_key(self) -> u64 {
        (self.clamp(i64::MIN as i128, i64::MAX as i128) as i64).to_key()
    }
    #[inline(always)]
    fn from_key(key: u64) -> Self {
        i64::from_key(key) as i128
    }
}

/// Runs an expression with `$T` bound to the native type of a fixed-width
/// [`PhysicalType`]; booleans and bytes take their own arms. Dispatching
/// through this once per block or array keeps type matches out of row loops.
macro_rules! with_native {
    ($physical:expr, $T:ident => $body:expr, bool => $bool:expr, bytes => $bytes:expr $(,)?) => {
        match $physical {
            $crate::types::PhysicalType::Boolean => $bool,
            $crate::types::PhysicalType::Bytes => $bytes,
            $crate::types::PhysicalType::Int8 => {
                type $T = i8;
                $body
            }
            $crate::types::PhysicalType::Int16 => {
                type $T = i16;
                $body
            }
            $crate::types::PhysicalType::Int32 => {
                type $T = i32;
                $body
            }
            $crate::types::PhysicalType::Int64 => {
                type $T = i64;
                $body
            }
            $crate::types::PhysicalType::UInt8 => {
                type $T = u8;
                $body
            }
            $crate::types::PhysicalType::UInt16 => {
                type $T = u16;
                $body
            }
            $crate::types::PhysicalType::UInt32 => {
                type $T = u32;
                $body
            }
            $crate::types::PhysicalType::UInt64 => {
                type $T = u64;
                $body
            }
            $crate::types::PhysicalType::Float32 => {
                type $T = f32;
                $body
            }
            $crate::types::PhysicalType::Float64 => {
                type $T = f64;
                $body
            }
            $crate::types::PhysicalType::Decimal128 => {
                type $T = i128;
                $body
            }
        }
    };
}
pub(crate) use with_native;

/// True when every value of a decimal column fits the i64 key domain.
pub(crate) fn fits_i64(v: i128) -> bool {
    v >= i64::MIN as i128 && v <= i64::MAX as i128
}

/// The order-preserving 8-byte prefix key of a byte string: its first 8
/// bytes, big-endian, zero-padded. Non-strict (`a < b` implies
/// `prefix_key(a) <= prefix_key(b)`), which is what zone maps need.
#[inline]
pub fn prefix_key(bytes: &[u8]) -> u64 {
    let mut buf = [0u8; 8];
    let n = bytes.len().min(8);
    buf[..n].copy_from_slice(&bytes[..n]);
    u64::from_be_bytes(buf)
}

/// One value of a single-row append ([`crate::Table::append_row`]).
///
/// Integers, dates (days since the epoch) and timestamps (in the column's
/// unit) are given as `Int` or `UInt` and range-checked against the column;
/// decimals as `Decimal` (unscaled, in the column's scale) or `Int`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value<'a> {
    /// SQL NULL.
    Null,
    /// A boolean.
    Boolean(bool),
    /// A signed integer.
    Int(i64),
    /// An unsigned integer.
    UInt(u64),
    /// A float.
    Float(f64),
    /// An unscaled decimal.
    Decimal(i128),
    /// A string (for string columns).
    Str(&'a str),
    /// Bytes (for binary columns).
    Bytes(&'a [u8]),
}

impl Value<'_> {
    /// A short name of the value's kind, for error messages.
    pub fn kind(&self) -> &'static str {
        match self {
            Value::Null => "NULL",
            Value::Boolean(_) => "a boolean",
            Value::Int(_) => "a signed integer",
            Value::UInt(_) => "an unsigned integer",
            Value::Float(_) => "a float",
            Value::Decimal(_) => "a decimal",
            Value::Str(_) => "a string",
            Value::Bytes(_) => "bytes",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_buffer::ToByteSlice;

    fn assert_order<T: KeyNative + PartialOrd + Copy + std::fmt::Debug>(sorted: &[T]) {
        for w in sorted.windows(2) {
            assert!(w[0].to_key() < w[1].to_key(), "{:?} !< {:?}", w[0], w[1]);
        }
        for v in sorted {
            assert_eq!(T::from_key(v.to_key()).to_byte_slice(), v.to_byte_slice());
        }
    }

    #[test]
    fn keys_preserve_order_and_round_trip() {
        assert_order(&[i8::MIN, -1, 0, 1, i8::MAX]);
        assert_order(&[i16::MIN, -300, 0, 300, i16::MAX]);
        assert_order(&[i32::MIN, -1, 0, i32::MAX]);
        assert_order(&[i64::MIN, -1, 0, 1, i64::MAX]);
        assert_order(&[0u8, 1, u8::MAX]);
        assert_order(&[0u64, 1, u64::MAX - 1, u64::MAX]);
        assert_order(&[f64::NEG_INFINITY, -1.5, -0.0, 0.0, 1e-300, 2.0, f64::INFINITY, f64::NAN]);
        assert_order(&[f32::NEG_INFINITY, -1.5, -0.0, 0.0, 2.0, f32::INFINITY, f32::NAN]);
        assert_order(&[i64::MIN as i128, -1, 0, i64::MAX as i128]);
    }

    #[test]
    fn key_differences_are_value_differences() {
        let (a, b) = (-7i64, 1_000i64);
        assert_eq!(b.to_key().wrapping_sub(a.to_key()), (b - a) as u64);
        let (a, b) = (i32::MIN, i32::MAX);
        assert_eq!(b.to_key() - a.to_key(), u32::MAX as u64);
    }

    #[test]
    fn prefix_key_is_monotone() {
        let mut words: Vec<&[u8]> = vec![b"", b"a", b"a\0", b"ab", b"abcdefgh", b"abcdefghi", b"b", "é".as_bytes()];
        words.sort();
        for w in words.windows(2) {
            assert!(prefix_key(w[0]) <= prefix_key(w[1]));
        }
    }

    #[test]
    fn schema_validation() {
        let ok = Schema::new(vec![Field::new("a", DataType::Int64, true), Field::new("b", DataType::Utf8View, true)]);
        let s = TableSchema::try_new(&ok, &["a"]).unwrap();
        assert!(!s.field(0).is_nullable(), "key columns become NOT NULL");
        assert_eq!(s.physical(1), PhysicalType::Bytes);

        // Float16 is stored in the row format; a union is not stored.
        let half = Schema::new(vec![Field::new("d", DataType::Float16, true)]);
        assert_eq!(TableSchema::try_new(&half, &[]).unwrap().physical(0), PhysicalType::Bytes);
        assert!(matches!(TableSchema::try_new(&half, &["d"]), Err(Error::InvalidSchema(_))), "no key over it");
        let union = DataType::Union(
            arrow_schema::UnionFields::try_new(vec![0], vec![Field::new("i", DataType::Int32, true)]).unwrap(),
            arrow_schema::UnionMode::Dense,
        );
        let bad = Schema::new(vec![Field::new("u", union, true)]);
        assert!(matches!(TableSchema::try_new(&bad, &[]), Err(Error::UnsupportedType { .. })));
        let dup = Schema::new(vec![Field::new("a", DataType::Int64, true), Field::new("a", DataType::Int32, true)]);
        assert!(matches!(TableSchema::try_new(&dup, &[]), Err(Error::InvalidSchema(_))));
        assert!(matches!(TableSchema::try_new(&ok, &["zz"]), Err(Error::InvalidSchema(_))));
        // A table may have no columns (`CREATE TABLE t ()`).
        assert!(TableSchema::try_new(&Schema::empty(), &[]).is_ok_and(|s| s.is_empty()));
    }
}
