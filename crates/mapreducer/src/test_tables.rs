//! Fixtures of the unit tests: small tables with main and delta rows, and
//! a plain decoding of Arrow values to compare the kernels' results with.
//!
//! ```text
//!   table(schema, capacity, main, delta)
//!     append main ──▶ rebuild (encoded main storage) ──▶ append delta
//!   ints(type, rng, n, nulls, f)   a random integer-like column
//!   cell(array, i) ──▶ Cell        one comparable value per Arrow slot
//!   num(array, i)  ──▶ Option<Num> the value in its numeric domain
//!   steps(cols)                    each main block, then each delta chunk
//!   Sels::new(rng, len, first)     whole, range, mask and ids selections
//! ```

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::*;
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::{DataType, Schema};
use quiverdb_storage::{Database, Table, TableOptions};

use crate::RecId;
use crate::columns::ShardColumns;
use crate::expr::Side;
use crate::scalar::Num;
use crate::vector::{NumVector, Values};
use quiverdb_storage::block::{LANES, Sel, WORDS};
use rand::Rng;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;

/// A table whose first shards hold `main` in encoded main storage and
/// whose last shard then takes `delta` into its delta.
pub(crate) fn table(
    schema: &Arc<Schema>,
    capacity: usize,
    main: &RecordBatch,
    delta: &RecordBatch,
) -> (Database, Table) {
    let db = Database::new();
    let options = TableOptions::default().with_shard_capacity(capacity).with_background_rebuild(false);
    let table = db.create_table("t", schema, options).unwrap();
    table.append(main).unwrap();
    table.rebuild().unwrap();
    if delta.num_rows() > 0 {
        table.append(delta).unwrap();
    }
    (db, table)
}

/// `n` values of integer-like type `dt`, a fraction `nulls` of them NULL,
/// the others `f(rng, i)` for row `i`.
pub(crate) fn ints(
    dt: DataType,
    rng: &mut StdRng,
    n: usize,
    nulls: f64,
    f: impl Fn(&mut StdRng, usize) -> i64,
) -> ArrayRef {
    let v: Vec<Option<i64>> = (0..n).map(|i| (!rng.random_bool(nulls)).then(|| f(rng, i))).collect();
    int_array(&dt, &v)
}

/// An array of integer-like type `data_type` from `i64` values (UInt64
/// takes their bits, Boolean `v != 0`, decimals the unscaled value).
pub(crate) fn int_array(data_type: &DataType, values: &[Option<i64>]) -> ArrayRef {
    fn prim<T: ArrowPrimitiveType>(values: &[Option<i64>], f: impl Fn(i64) -> T::Native) -> ArrayRef {
        Arc::new(values.iter().map(|v| v.map(&f)).collect::<arrow_array::PrimitiveArray<T>>())
    }
    match data_type {
        DataType::Boolean => Arc::new(values.iter().map(|v| v.map(|x| x != 0)).collect::<arrow_array::BooleanArray>()),
        DataType::Int8 => prim::<Int8Type>(values, |v| v as i8),
        DataType::Int16 => prim::<Int16Type>(values, |v| v as i16),
        DataType::Int32 => prim::<Int32Type>(values, |v| v as i32),
        DataType::Int64 => prim::<Int64Type>(values, |v| v),
        DataType::UInt8 => prim::<UInt8Type>(values, |v| v as u8),
        DataType::UInt16 => prim::<UInt16Type>(values, |v| v as u16),
        DataType::UInt32 => prim::<UInt32Type>(values, |v| v as u32),
        DataType::UInt64 => prim::<UInt64Type>(values, |v| v as u64),
        DataType::Date32 => prim::<Date32Type>(values, |v| v as i32),
        DataType::Decimal128(p, s) => {
            let a: arrow_array::Decimal128Array = values.iter().map(|v| v.map(i128::from)).collect();
            Arc::new(a.with_precision_and_scale(*p, *s).unwrap())
        }
        other => panic!("int_array of {other}"),
    }
}

/// One Arrow value, comparable: integers of any width (and decimals,
/// booleans, dates) as `Int`, floats by their bits, strings as bytes.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Cell {
    Null,
    Int(i128),
    Float(u64),
    Bytes(Vec<u8>),
}

/// Slot `i` of `array`.
pub(crate) fn cell(array: &dyn Array, i: usize) -> Cell {
    if array.is_null(i) {
        return Cell::Null;
    }
    match array.data_type() {
        DataType::Boolean => Cell::Int(array.as_boolean().value(i) as i128),
        DataType::Int8 => Cell::Int(array.as_primitive::<Int8Type>().value(i) as i128),
        DataType::Int16 => Cell::Int(array.as_primitive::<Int16Type>().value(i) as i128),
        DataType::Int32 => Cell::Int(array.as_primitive::<Int32Type>().value(i) as i128),
        DataType::Int64 => Cell::Int(array.as_primitive::<Int64Type>().value(i) as i128),
        DataType::UInt8 => Cell::Int(array.as_primitive::<UInt8Type>().value(i) as i128),
        DataType::UInt16 => Cell::Int(array.as_primitive::<UInt16Type>().value(i) as i128),
        DataType::UInt32 => Cell::Int(array.as_primitive::<UInt32Type>().value(i) as i128),
        DataType::UInt64 => Cell::Int(array.as_primitive::<UInt64Type>().value(i) as i128),
        DataType::Date32 => Cell::Int(array.as_primitive::<Date32Type>().value(i) as i128),
        DataType::Decimal128(..) => Cell::Int(array.as_primitive::<Decimal128Type>().value(i)),
        DataType::Float32 => Cell::Float((array.as_primitive::<Float32Type>().value(i) as f64).to_bits()),
        DataType::Float64 => Cell::Float(array.as_primitive::<Float64Type>().value(i).to_bits()),
        DataType::Utf8 => Cell::Bytes(array.as_string::<i32>().value(i).as_bytes().to_vec()),
        DataType::Utf8View => Cell::Bytes(array.as_string_view().value(i).as_bytes().to_vec()),
        DataType::Binary => Cell::Bytes(array.as_binary::<i32>().value(i).to_vec()),
        other => panic!("cell of {other}"),
    }
}

/// Slot `i` of a numeric `array` in its domain (`None` for NULL).
pub(crate) fn num(array: &dyn Array, i: usize) -> Option<Num> {
    Some(match (array.data_type(), cell(array, i)) {
        (_, Cell::Null) => return None,
        (DataType::UInt64, Cell::Int(v)) => Num::U64(v as u64),
        (DataType::Decimal128(..), Cell::Int(v)) => Num::I128(v),
        (_, Cell::Int(v)) => Num::I64(v as i64),
        (_, Cell::Float(bits)) => Num::F64(f64::from_bits(bits)),
        (t, c) => panic!("num of {t}: {c:?}"),
    })
}

/// The steps of a shard: each main block, then each delta chunk, with
/// its first record and its rows.
pub(crate) fn steps(cols: &ShardColumns<'_>) -> Vec<(Side, usize, usize)> {
    let main = (0..cols.main_blocks()).map(|b| (Side::Main(b), b * LANES, cols.block_len(b)));
    let delta = (0..cols.delta_chunks()).map(|c| (Side::Delta(c), cols.main_rows() + c * LANES, cols.chunk_len(c)));
    main.chain(delta).collect()
}

/// A value as a comparable cell (floats by bits, so NaN equals itself).
pub(crate) fn num_cell(n: Option<Num>) -> Cell {
    match n {
        None => Cell::Null,
        Some(Num::I64(v)) => Cell::Int(v as i128),
        Some(Num::U64(v)) => Cell::Int(v as i128),
        Some(Num::F64(v)) => Cell::Float(v.to_bits()),
        Some(Num::I128(v)) => Cell::Int(v),
    }
}

/// Lane `l` of `v`, NULL where the vector says so.
pub(crate) fn lane(v: &NumVector, l: usize) -> Option<Num> {
    if v.has_nulls && !v.validity.get(l) {
        return None;
    }
    Some(match &v.values {
        Values::I64(x) => Num::I64(x[l]),
        Values::U64(x) => Num::U64(x[l]),
        Values::F64(x) => Num::F64(x[l]),
        Values::I128(x) => Num::I128(x[l]),
    })
}

/// Selections of a block or chunk of `len` rows: all of it, a range that
/// starts and ends off word boundaries, a random mask, and random ids in
/// random order (`base` is the first record of the block).
pub(crate) struct Sels {
    range: (usize, usize),
    mask: [u64; WORDS],
    ids: Vec<RecId>,
}

impl Sels {
    pub(crate) fn new(rng: &mut StdRng, len: usize, base: usize) -> Self {
        let a = rng.random_range(0..len);
        let b = rng.random_range(a + 1..=len);
        let mut mask = [0u64; WORDS];
        for i in 0..len {
            if rng.random_bool(0.4) {
                mask[i / 64] |= 1 << (i % 64);
            }
        }
        let mut ids: Vec<RecId> = (0..len).filter(|_| rng.random_bool(0.3)).map(|o| (base + o) as RecId).collect();
        ids.shuffle(rng);
        Self { range: (a, b), mask, ids }
    }

    pub(crate) fn each<'s>(&'s self, len: usize, base: usize) -> [Sel<'s>; 4] {
        [
            Sel::Range(0, len),
            Sel::Range(self.range.0, self.range.1),
            Sel::Mask(&self.mask, len),
            Sel::Ids(&self.ids, base as RecId),
        ]
    }
}
