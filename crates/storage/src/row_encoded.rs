//! Values stored in Arrow's row format: intervals, Decimal32/64/256,
//! FixedSizeBinary, Float16 and Null everywhere, and structs, lists and
//! maps in the delta (main storage keeps those as child columns where it
//! can, see [`crate::main::nested`]).
//!
//! Such a column is stored as byte strings (physical type `Bytes`), one per
//! row: the value in `arrow-row`'s format, which round-trips every value
//! exactly and compares bytewise in the value order (so zone maps over the
//! bytes are sound). Every byte-string encoding, the delta, checkpoints and
//! the log serve them unchanged; a NULL is a NULL byte string. Writes
//! encode (in the delta and when main storage is built), reads decode. The
//! scans filter and aggregate such columns only through DataFusion (and
//! NULL tests).

use std::sync::Arc;

use arrow_array::builder::BinaryBuilder;
use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef, new_null_array};
use arrow_row::{RowConverter, SortField};
use arrow_schema::DataType;

use crate::error::Result;

/// True for the types stored in the row format (in the delta; in main
/// storage unless they have child columns).
pub fn is_row_encoded(data_type: &DataType) -> bool {
    matches!(
        data_type,
        DataType::Struct(_)
            | DataType::List(_)
            | DataType::LargeList(_)
            | DataType::FixedSizeList(..)
            | DataType::Map(..)
            | DataType::Interval(_)
            | DataType::Decimal32(..)
            | DataType::Decimal64(..)
            | DataType::Decimal256(..)
            | DataType::FixedSizeBinary(_)
            | DataType::Float16
            | DataType::Null
    ) && RowConverter::supports_fields(&[SortField::new(data_type.clone())])
}

/// The type a column's byte strings are read as: Binary for row-encoded
/// columns, else the column's own type.
pub fn stored_type(data_type: &DataType) -> &DataType {
    if is_row_encoded(data_type) { &DataType::Binary } else { data_type }
}

/// `array` (of a row-encoded type) as a Binary array of its rows, NULL
/// where the value is.
pub fn encode(array: &dyn Array) -> Result<ArrayRef> {
    let converter = RowConverter::new(vec![SortField::new(array.data_type().clone())])?;
    let column = arrow_array::make_array(array.to_data());
    let rows = converter.convert_columns(&[Arc::clone(&column)])?;
    let nulls = column.logical_nulls();
    let mut out = BinaryBuilder::with_capacity(column.len(), rows.size());
    for i in 0..column.len() {
        if nulls.as_ref().is_some_and(|n| n.is_null(i)) {
            out.append_null();
        } else {
            out.append_value(rows.row(i).as_ref());
        }
    }
    Ok(Arc::new(out.finish()))
}

/// The values of `stored` (byte strings read as Binary) as an array of
/// `data_type`; `stored` itself unless the type is row-encoded.
pub fn decode(stored: ArrayRef, data_type: &DataType) -> Result<ArrayRef> {
    if !is_row_encoded(data_type) {
        return Ok(stored);
    }
    let converter = RowConverter::new(vec![SortField::new(data_type.clone())])?;
    let parser = converter.parser();
    let null_rows = converter.convert_columns(&[new_null_array(data_type, 1)])?;
    let null = null_rows.row(0);
    let bytes = stored.as_binary::<i32>();
    let rows = (0..bytes.len()).map(|i| if bytes.is_null(i) { null } else { parser.parse(bytes.value(i)) });
    let decoded = converter.convert_rows(rows)?.remove(0);
    // The row format gives dictionaries back as their values (a struct of
    // dictionaries as a struct of strings): cast them back, losslessly.
    if decoded.data_type() != data_type {
        return Ok(arrow_cast::cast(&decoded, data_type)?);
    }
    Ok(decoded)
}
