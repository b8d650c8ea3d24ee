//! Validation of incoming data against a table schema.
//!
//! Every append is validated whole before any byte of it is written:
//! column count and names, types (strings and binary accept all three of
//! their Arrow layouts), NOT NULL, and decimal precision. Single-row values
//! are range-checked against the column type.

use arrow_array::cast::AsArray;
use arrow_array::types::Decimal128Type;
use arrow_array::{Array, RecordBatch};
use arrow_buffer::ToByteSlice;
use arrow_schema::{DataType, Field};

use crate::delta::Cell;
use crate::error::{Error, Result};
use crate::types::{PhysicalType, TableSchema, Value, ingest_compatible, is_string, stored_type};

/// `batch` with its dictionary- and run-end-encoded columns decoded to the
/// value types the table stores (the batch itself when it has none).
pub(crate) fn decoded(batch: &RecordBatch) -> Result<std::borrow::Cow<'_, RecordBatch>> {
    let encoded = |ty: &DataType| matches!(ty, DataType::Dictionary(..) | DataType::RunEndEncoded(..));
    if !batch.schema().fields().iter().any(|f| encoded(f.data_type())) {
        return Ok(std::borrow::Cow::Borrowed(batch));
    }
    let schema = batch.schema();
    let mut fields = Vec::with_capacity(batch.num_columns());
    let mut columns = Vec::with_capacity(batch.num_columns());
    for (field, column) in schema.fields().iter().zip(batch.columns()) {
        let stored = stored_type(field.data_type());
        if encoded(field.data_type()) {
            columns.push(arrow_cast::cast(column, stored)?);
            fields.push(field.as_ref().clone().with_data_type(stored.clone()));
        } else {
            columns.push(std::sync::Arc::clone(column));
            fields.push(field.as_ref().clone());
        }
    }
    let schema = std::sync::Arc::new(arrow_schema::Schema::new_with_metadata(fields, schema.metadata().clone()));
    let options = arrow_array::RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
    Ok(std::borrow::Cow::Owned(RecordBatch::try_new_with_options(schema, columns, &options)?))
}

/// Checks that `batch` can be appended to `table` with schema `schema`.
pub(crate) fn validate_batch(table: &str, schema: &TableSchema, batch: &RecordBatch) -> Result<()> {
    if batch.num_columns() != schema.len() {
        return Err(Error::SchemaMismatch {
            table: table.into(),
            reason: format!("the table has {} columns, the data has {}", schema.len(), batch.num_columns()),
        });
    }
    let batch_schema = batch.schema();
    for (i, array) in batch.columns().iter().enumerate() {
        let field = schema.field(i);
        let given = batch_schema.field(i);
        if given.name() != field.name() {
            return Err(Error::SchemaMismatch {
                table: table.into(),
                reason: format!(
                    "column {} is '{}' in the table but '{}' in the data",
                    i + 1,
                    field.name(),
                    given.name()
                ),
            });
        }
        validate_array(table, field, array.as_ref())?;
    }
    Ok(())
}

/// Checks one column of incoming data against its field.
pub(crate) fn validate_array(table: &str, field: &Field, array: &dyn Array) -> Result<()> {
    if !ingest_compatible(field.data_type(), array.data_type()) {
        return Err(type_mismatch(table, field, array.data_type().to_string()));
    }
    if !field.is_nullable() && array.null_count() > 0 {
        return Err(Error::NullInNonNullable { table: table.into(), column: field.name().clone() });
    }
    if let DataType::Decimal128(precision, _) = field.data_type() {
        let decimals = array.as_primitive::<Decimal128Type>();
        if !within_precision(decimals.values(), *precision) {
            // Some slot is out of range: find the first valid one (null
            // slots may hold anything) for the error, if there is one.
            decimals
                .validate_decimal_precision(*precision)
                .map_err(|e| type_mismatch(table, field, format!("a value out of range ({e})")))?;
        }
    }
    Ok(())
}

/// Whether every value of `values` (null slots included) has at most
/// `precision` digits: one pass for the extremes, which the compiler
/// vectorizes, where arrow's check tests each value against a table.
fn within_precision(values: &[i128], precision: u8) -> bool {
    let Some(bound) = 10i128.checked_pow(u32::from(precision)) else { return true };
    let (min, max) = values.iter().fold((i128::MAX, i128::MIN), |(lo, hi), &v| (lo.min(v), hi.max(v)));
    values.is_empty() || (min > -bound && max < bound)
}

fn type_mismatch(table: &str, field: &Field, found: String) -> Error {
    Error::TypeMismatch {
        table: table.into(),
        column: field.name().clone(),
        expected: field.data_type().to_string(),
        found,
    }
}

/// Converts one value of a single-row append to the column's storage form.
pub(crate) fn encode_value<'a>(
    table: &str,
    field: &Field,
    physical: PhysicalType,
    value: &Value<'a>,
) -> Result<Cell<'a>> {
    let mismatch = || type_mismatch(table, field, value.kind().to_string());
    let out_of_range = || type_mismatch(table, field, format!("{value:?}, which is out of range"));
    macro_rules! int {
        ($t:ty) => {{
            let v: $t = match *value {
                Value::Int(i) => <$t>::try_from(i).map_err(|_| out_of_range())?,
                Value::UInt(u) => <$t>::try_from(u).map_err(|_| out_of_range())?,
                _ => return Err(mismatch()),
            };
            fixed(v.to_byte_slice())
        }};
    }
    if let Value::Null = value {
        return if field.is_nullable() {
            Ok(Cell::Null)
        } else {
            Err(Error::NullInNonNullable { table: table.into(), column: field.name().clone() })
        };
    }
    Ok(match physical {
        PhysicalType::Boolean => match value {
            Value::Boolean(b) => Cell::Bool(*b),
            _ => return Err(mismatch()),
        },
        PhysicalType::Int8 => int!(i8),
        PhysicalType::Int16 => int!(i16),
        PhysicalType::Int32 => int!(i32),
        PhysicalType::Int64 => int!(i64),
        PhysicalType::UInt8 => int!(u8),
        PhysicalType::UInt16 => int!(u16),
        PhysicalType::UInt32 => int!(u32),
        PhysicalType::UInt64 => int!(u64),
        PhysicalType::Float32 => match *value {
            Value::Float(f) => fixed((f as f32).to_byte_slice()),
            Value::Int(i) => fixed((i as f32).to_byte_slice()),
            _ => return Err(mismatch()),
        },
        PhysicalType::Float64 => match *value {
            Value::Float(f) => fixed(f.to_byte_slice()),
            Value::Int(i) => fixed((i as f64).to_byte_slice()),
            _ => return Err(mismatch()),
        },
        PhysicalType::Decimal128 => {
            let DataType::Decimal128(precision, scale) = field.data_type() else {
                return Err(Error::Internal("Decimal128 physical type on a non-decimal".into()));
            };
            let unscaled = match *value {
                Value::Decimal(v) => v,
                Value::Int(i) => 10i128
                    .checked_pow((*scale).max(0) as u32)
                    .and_then(|m| (i as i128).checked_mul(m))
                    .ok_or_else(out_of_range)?,
                _ => return Err(mismatch()),
            };
            let limit = 10i128.checked_pow(*precision as u32).unwrap_or(i128::MAX);
            if unscaled <= -limit || unscaled >= limit {
                return Err(out_of_range());
            }
            fixed(unscaled.to_byte_slice())
        }
        PhysicalType::Bytes => match value {
            Value::Str(s) => Cell::Bytes(s.as_bytes()),
            Value::Bytes(b)
                if !is_string(field.data_type()) && !crate::row_encoded::is_row_encoded(field.data_type()) =>
            {
                Cell::Bytes(b)
            }
            _ => return Err(mismatch()),
        },
    })
}

fn fixed(bytes: &[u8]) -> Cell<'static> {
    let mut buf = [0u8; 16];
    buf[..bytes.len()].copy_from_slice(bytes);
    Cell::Fixed(buf)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_schema::Field;

    #[test]
    fn values_are_range_checked() {
        let f = Field::new("a", DataType::Int8, false);
        assert!(encode_value("t", &f, PhysicalType::Int8, &Value::Int(127)).is_ok());
        assert!(matches!(encode_value("t", &f, PhysicalType::Int8, &Value::Int(128)), Err(Error::TypeMismatch { .. })));
        assert!(matches!(
            encode_value("t", &f, PhysicalType::Int8, &Value::Null),
            Err(Error::NullInNonNullable { .. })
        ));
        assert!(matches!(encode_value("t", &f, PhysicalType::Int8, &Value::Str("1")), Err(Error::TypeMismatch { .. })));
        let d = Field::new("d", DataType::Decimal128(5, 2), true);
        assert!(encode_value("t", &d, PhysicalType::Decimal128, &Value::Int(999)).is_ok());
        assert!(encode_value("t", &d, PhysicalType::Decimal128, &Value::Int(1000)).is_err());
        let s = Field::new("s", DataType::Utf8, true);
        assert!(encode_value("t", &s, PhysicalType::Bytes, &Value::Bytes(b"x")).is_err());
    }

    /// The one-pass precision check agrees with arrow's per-value check,
    /// at the bounds and with out-of-range bytes under null slots.
    #[test]
    fn decimal_precision_is_checked_at_its_bounds() {
        use arrow_array::Decimal128Array;
        let check = |values: Vec<Option<i128>>, precision: u8| {
            let field = Field::new("d", DataType::Decimal128(precision, 2), true);
            let array = Decimal128Array::from(values).with_precision_and_scale(precision, 2).unwrap();
            let reference = array.validate_decimal_precision(precision).is_ok();
            let got = validate_array("t", &field, &array);
            assert_eq!(got.is_ok(), reference, "{array:?} at precision {precision}: {got:?}");
            got.is_ok()
        };
        assert!(check(vec![Some(99_999), Some(-99_999), None], 5));
        assert!(!check(vec![Some(100_000)], 5));
        assert!(!check(vec![Some(1), Some(-100_000)], 5));
        assert!(check(vec![], 5));
        let max38 = 10i128.pow(38) - 1;
        assert!(check(vec![Some(max38), Some(-max38)], 38));
        assert!(!check(vec![Some(max38 + 1)], 38));
        // A null slot holding an out-of-range value is no error.
        let nulls = arrow_buffer::NullBuffer::from(vec![true, false]);
        let array =
            Decimal128Array::new(vec![5, 10i128.pow(20)].into(), Some(nulls)).with_precision_and_scale(5, 2).unwrap();
        let field = Field::new("d", DataType::Decimal128(5, 2), true);
        assert!(validate_array("t", &field, &array).is_ok());
    }
}
