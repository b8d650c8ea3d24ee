//! Nested columns (structs, lists, large lists, fixed-size lists, maps)
//! stored as child columns.
//!
//! A nested column keeps its own validity; its values live in child main
//! columns, each encoded, zoned and compressed on its own like any column:
//!
//! ```text
//!   Struct<a, b>          a: MainColumn (len rows)   b: MainColumn (len rows)
//!   List<T>, Map<K, V>    offsets: Int64 MainColumn (len + 1 rows, from 0)
//!                         values:  MainColumn of T (or the map's entries struct)
//!   FixedSizeList<T, n>   values:  MainColumn of T (len × n rows)
//! ```
//!
//! Offsets are a column too, so equal-length lists encode as a sequence and
//! others bit-pack. This module builds them; [`super::decode`] reads them
//! (the same rows of a struct's children; a list's offsets of the rows and
//! then the child rows they span).
//! A nested type with a child quiverdb cannot store as a column (such as a
//! dictionary) is stored whole in Arrow's row format instead
//! ([`crate::row_encoded`]); the delta always holds nested values in that
//! format, and main storage built before child columns existed may too.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef, Int64Array};
use arrow_buffer::NullBuffer;
use arrow_schema::{ArrowError, DataType, FieldRef};

use super::column::{MainColumn, Nested};
use super::kind::EncodingKind;
use super::zone::Zone;
use crate::block::BLOCK_SIZE;
use crate::error::{Error, Result};
use crate::types::PhysicalType;

/// True if columns of `data_type` are stored as child columns: a struct,
/// list or map whose children quiverdb can store as columns.
pub(crate) fn has_child_columns(data_type: &DataType) -> bool {
    let storable = |field: &FieldRef| PhysicalType::of(field.data_type()).is_some();
    match data_type {
        DataType::Struct(fields) => fields.iter().all(storable),
        DataType::List(field) | DataType::LargeList(field) | DataType::FixedSizeList(field, _) => storable(field),
        DataType::Map(field, _) => storable(field),
        _ => false,
    }
}

/// A child column of `array`: with `force`, in that encoding where it
/// applies to the child's values, else in the one the chooser picks.
fn child(array: &dyn Array, force: Option<EncodingKind>) -> Result<MainColumn> {
    match MainColumn::from_array_with(array, force) {
        Err(Error::InvalidOption { .. }) if force.is_some() => MainColumn::from_array(array),
        other => other,
    }
}

/// Row ids address child columns as `u32`s (as they do shards).
fn child_len(len: usize) -> Result<usize> {
    if len > u32::MAX as usize {
        return Err(Error::Arrow(ArrowError::ComputeError(format!(
            "{len} nested values in one shard (at most {} are stored per column)",
            u32::MAX
        ))));
    }
    Ok(len)
}

impl Nested {
    /// The child columns of `array` (of a type [`has_child_columns`] accepts).
    pub(super) fn build(array: &dyn Array, force: Option<EncodingKind>) -> Result<Self> {
        match array.data_type() {
            DataType::Struct(_) => {
                let s = array.as_struct();
                Ok(Nested::Struct(s.columns().iter().map(|c| child(c.as_ref(), force)).collect::<Result<_>>()?))
            }
            DataType::List(_) => {
                let list = array.as_list::<i32>();
                Self::list(list.offsets().iter().map(|&o| i64::from(o)), list.values(), force)
            }
            DataType::LargeList(_) => {
                let list = array.as_list::<i64>();
                Self::list(list.offsets().iter().copied(), list.values(), force)
            }
            DataType::Map(..) => {
                let map = array.as_map();
                let entries: ArrayRef = Arc::new(map.entries().clone());
                Self::list(map.offsets().iter().map(|&o| i64::from(o)), &entries, force)
            }
            DataType::FixedSizeList(_, size) => {
                let list = array.as_fixed_size_list();
                let size = usize::try_from(*size).map_err(|_| Error::Internal(format!("list size {size}")))?;
                // A sliced fixed-size list slices its values too.
                let values = list.values().slice(0, array.len() * size);
                child_len(values.len())?;
                Ok(Nested::FixedSizeList { size, values: Box::new(child(values.as_ref(), force)?) })
            }
            other => Err(Error::Internal(format!("{other} has no child columns"))),
        }
    }

    /// A list's columns from its offsets (`len + 1`, possibly not from 0)
    /// and the values they index.
    fn list(offsets: impl Iterator<Item = i64>, values: &ArrayRef, force: Option<EncodingKind>) -> Result<Self> {
        let offsets: Vec<i64> = offsets.collect();
        let (first, last) = (offsets[0], offsets[offsets.len() - 1]);
        let values = values.slice(first as usize, child_len((last - first) as usize)?);
        let rebased = Int64Array::from_iter_values(offsets.iter().map(|o| o - first));
        Ok(Nested::List {
            offsets: Box::new(MainColumn::from_array(&rebased)?),
            values: Box::new(child(values.as_ref(), force)?),
        })
    }
}

/// The zones of a nested column: null counts only (nested values have no
/// order scans use), full key range where a block has a value.
pub(super) fn zones(len: usize, validity: Option<&NullBuffer>) -> Vec<Zone> {
    (0..len.div_ceil(BLOCK_SIZE))
        .map(|b| {
            let start = b * BLOCK_SIZE;
            let n = (len - start).min(BLOCK_SIZE);
            let nulls = validity.map_or(0, |v| v.slice(start, n).null_count());
            zone(n, nulls)
        })
        .collect()
}

/// The zone of a nested column's block of `n` rows with `nulls` nulls.
pub(crate) fn zone(n: usize, nulls: usize) -> Zone {
    let (min, max) = if nulls == n { (u64::MAX, 0) } else { (0, u64::MAX) };
    Zone { min, max, null_count: nulls as u32 }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::types::Int64Type;
    use arrow_array::{FixedSizeListArray, Int64Array, ListArray, StringArray, StructArray};
    use arrow_schema::Field;

    fn strings(n: usize) -> ArrayRef {
        Arc::new(StringArray::from_iter_values((0..n).map(|i| ["red", "green", "blue"][i % 3])))
    }

    #[test]
    fn children_are_encoded_on_their_own() {
        let n = 5000;
        let fields = vec![Field::new("id", DataType::Int64, false), Field::new("colour", DataType::Utf8, false)];
        let ids: ArrayRef = Arc::new(Int64Array::from_iter_values(0..n as i64));
        let s = StructArray::try_new(fields.into(), vec![ids, strings(n)], None).unwrap();
        let col = MainColumn::from_array(&s).unwrap();
        assert_eq!(col.kind(), EncodingKind::Nested);
        let kinds: Vec<EncodingKind> = col.children().iter().map(|c| c.kind()).collect();
        assert_eq!(kinds, [EncodingKind::Sequence, EncodingKind::Dictionary]);
        // Far below the row format's bytes (about 20 per row).
        let row_format = crate::row_encoded::encode(&s).unwrap();
        assert!(col.size_bytes() * 10 < row_format.get_array_memory_size(), "{} bytes", col.size_bytes());
        assert_eq!(col.decode_range(0, n).unwrap().to_data(), s.to_data());

        // Lists of three: the offsets are a sequence.
        let lists = ListArray::from_iter_primitive::<Int64Type, _, _>(
            (0..n as i64).map(|i| Some(vec![Some(i), None, Some(i % 7)])),
        );
        let col = MainColumn::from_array(&lists).unwrap();
        let children = col.children();
        assert_eq!((children[0].kind(), children[0].len(), children[1].len()), (EncodingKind::Sequence, n + 1, 3 * n));
        let ids = [4999, 0, 17, 17, 2048];
        let gathered = col.gather(&ids).unwrap();
        for (k, &id) in ids.iter().enumerate() {
            assert_eq!(gathered.as_list::<i32>().value(k).to_data(), lists.value(id as usize).to_data());
        }
    }

    #[test]
    fn sliced_inputs_and_forced_children() {
        let n = 3000;
        let field = Arc::new(Field::new_list_field(DataType::Int64, true));
        let values: ArrayRef = Arc::new(Int64Array::from_iter((0..2 * n as i64).map(|i| (i % 5 != 0).then_some(i))));
        let fixed = FixedSizeListArray::try_new(field, 2, values, None).unwrap().slice(100, 2000);
        let col = MainColumn::from_array_with(&fixed, Some(EncodingKind::Plain)).unwrap();
        assert_eq!(col.children()[0].kind(), EncodingKind::Plain);
        assert_eq!(col.decode_range(0, 2000).unwrap().to_data(), fixed.to_data());
        assert_eq!(col.decode_range(1500, 3).unwrap().to_data(), fixed.slice(1500, 3).to_data());

        let lists = ListArray::from_iter_primitive::<Int64Type, _, _>(
            (0..n as i64).map(|i| (i % 9 != 0).then(|| (0..i % 4).map(Some).collect::<Vec<_>>())),
        )
        .slice(7, 1000);
        // Constant fits no child here: each child picks its own.
        let col = MainColumn::from_array_with(&lists, Some(EncodingKind::Constant)).unwrap();
        assert_eq!(col.decode_range(0, 1000).unwrap().to_data(), lists.to_data());
        assert_eq!(col.null_count(), lists.null_count());
        assert!(matches!(
            MainColumn::from_array_with(&strings(3), Some(EncodingKind::Nested)),
            Err(Error::InvalidOption { .. })
        ));
    }

    #[test]
    fn a_child_without_a_column_keeps_the_row_format() {
        let dict =
            arrow_cast::cast(&strings(10), &DataType::Dictionary(Box::new(DataType::Int8), Box::new(DataType::Utf8)))
                .unwrap();
        let fields = vec![Field::new("d", dict.data_type().clone(), true)];
        let s = StructArray::try_new(fields.into(), vec![dict], None).unwrap();
        assert!(!has_child_columns(s.data_type()));
        let col = MainColumn::from_array(&s).unwrap();
        assert!(col.children().is_empty());
        assert_eq!(col.decode_range(0, 10).unwrap().to_data(), s.to_data());
    }
}
