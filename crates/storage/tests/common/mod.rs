//! Shared helpers of the storage integration tests: value generators over
//! every supported type, and a plain `Vec` reference of a column.

#![allow(dead_code)]

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::*;
use arrow_schema::{DataType, Field, TimeUnit};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Every type quiverdb stores, as declared column types.
pub(crate) fn all_types() -> Vec<DataType> {
    vec![
        DataType::Boolean,
        DataType::Int8,
        DataType::Int16,
        DataType::Int32,
        DataType::Int64,
        DataType::UInt8,
        DataType::UInt16,
        DataType::UInt32,
        DataType::UInt64,
        DataType::Float32,
        DataType::Float64,
        DataType::Utf8,
        DataType::LargeUtf8,
        DataType::Utf8View,
        DataType::Binary,
        DataType::LargeBinary,
        DataType::BinaryView,
        DataType::Date32,
        DataType::Timestamp(TimeUnit::Second, None),
        DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into())),
        DataType::Timestamp(TimeUnit::Microsecond, None),
        DataType::Timestamp(TimeUnit::Nanosecond, Some("+02:00".into())),
        DataType::Decimal128(38, 4),
        DataType::Decimal128(10, 2),
        DataType::Date64,
        DataType::Time32(TimeUnit::Second),
        DataType::Time32(TimeUnit::Millisecond),
        DataType::Time64(TimeUnit::Microsecond),
        DataType::Time64(TimeUnit::Nanosecond),
        DataType::Duration(TimeUnit::Second),
        DataType::Duration(TimeUnit::Millisecond),
        DataType::Duration(TimeUnit::Microsecond),
        DataType::Duration(TimeUnit::Nanosecond),
        // Stored in Arrow's row format.
        DataType::Float16,
        DataType::Decimal256(40, 2),
        DataType::FixedSizeBinary(8),
        DataType::Interval(arrow_schema::IntervalUnit::MonthDayNano),
        DataType::Null,
        // Stored as child columns.
        DataType::List(Arc::new(Field::new_list_field(DataType::Int64, true))),
        DataType::Struct(struct_fields()),
        DataType::LargeList(Arc::new(Field::new_list_field(DataType::Utf8, true))),
        DataType::FixedSizeList(Arc::new(Field::new_list_field(DataType::Float64, true)), 3),
        DataType::Map(Arc::new(Field::new("entries", DataType::Struct(map_fields()), false)), false),
        DataType::List(Arc::new(Field::new_list_field(DataType::Struct(struct_fields()), true))),
        DataType::Struct(arrow_schema::Fields::from(vec![
            Field::new("l", DataType::List(Arc::new(Field::new_list_field(DataType::Int64, true))), true),
            Field::new("s", DataType::Struct(struct_fields()), true),
            Field::new("d", DataType::Decimal128(12, 2), false),
        ])),
        // A child quiverdb keeps only in the row format.
        DataType::Struct(arrow_schema::Fields::from(vec![Field::new(
            "k",
            DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8)),
            true,
        )])),
    ]
}

/// The entries of the generated map columns.
fn map_fields() -> arrow_schema::Fields {
    arrow_schema::Fields::from(vec![
        Field::new("keys", DataType::Utf8, false),
        Field::new("values", DataType::Int64, true),
    ])
}

/// The fields of the generated struct columns.
fn struct_fields() -> arrow_schema::Fields {
    arrow_schema::Fields::from(vec![Field::new("a", DataType::Int64, true), Field::new("b", DataType::Utf8, true)])
}

/// One value as plain data: fixed-width values as their little-endian
/// bytes (bit-exact, so NaN payloads and -0.0 count), booleans as 0/1,
/// strings and binary as their bytes. `None` is NULL.
pub(crate) type Plain = Option<Vec<u8>>;

/// The plain reference of an array (for types stored in the row format,
/// each value's display text, which is exact for them).
pub(crate) fn plain(array: &dyn Array) -> Vec<Plain> {
    let data = array.to_data();
    let nulls = array.logical_nulls();
    let row_encoded = (array.data_type().primitive_width().is_none()
        && !matches!(
            array.data_type(),
            DataType::Boolean
                | DataType::Utf8
                | DataType::LargeUtf8
                | DataType::Utf8View
                | DataType::Binary
                | DataType::LargeBinary
                | DataType::BinaryView
        ))
        || matches!(array.data_type(), DataType::Float16 | DataType::Interval(_) | DataType::Decimal256(..));
    let text = row_encoded.then(|| {
        arrow_cast::display::ArrayFormatter::try_new(array, &arrow_cast::display::FormatOptions::default())
            .expect("a formatter")
    });
    (0..array.len())
        .map(|i| {
            if nulls.as_ref().is_some_and(|n| n.is_null(i)) {
                return None;
            }
            if let Some(text) = &text {
                return Some(text.value(i).to_string().into_bytes());
            }
            Some(match array.data_type() {
                DataType::Boolean => vec![array.as_boolean().value(i) as u8],
                DataType::Utf8 => array.as_string::<i32>().value(i).as_bytes().to_vec(),
                DataType::LargeUtf8 => array.as_string::<i64>().value(i).as_bytes().to_vec(),
                DataType::Utf8View => array.as_string_view().value(i).as_bytes().to_vec(),
                DataType::Binary => array.as_binary::<i32>().value(i).to_vec(),
                DataType::LargeBinary => array.as_binary::<i64>().value(i).to_vec(),
                DataType::BinaryView => array.as_binary_view().value(i).to_vec(),
                dt => {
                    let w = dt.primitive_width().expect("fixed width");
                    let start = (data.offset() + i) * w;
                    data.buffers()[0].as_slice()[start..start + w].to_vec()
                }
            })
        })
        .collect()
}

/// Value shapes that steer the encoder toward each encoding.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Shape {
    Constant,
    Sequence,
    Runs,
    SmallRange,
    FewDistinct,
    Random,
    Extremes,
}

pub(crate) const SHAPES: [Shape; 7] = [
    Shape::Constant,
    Shape::Sequence,
    Shape::Runs,
    Shape::SmallRange,
    Shape::FewDistinct,
    Shape::Random,
    Shape::Extremes,
];

/// Strings that exercise the byte encodings: empty, inline-sized, long, Unicode.
const STRING_POOL: [&str; 8] = [
    "",
    "a",
    "name_0042",
    "exactly12byt",
    "thirteen byte",
    "a considerably longer string that does not fit a view",
    "ünïcødé ✓ 漢字",
    "\u{0}nul\u{0}",
];

/// Generates an array of `data_type` with `len` values of `shape`; about
/// `null_per_mille`/1000 of them NULL (exactly 1000 = all NULL).
pub(crate) fn gen_array(data_type: &DataType, shape: Shape, len: usize, null_per_mille: u32, seed: u64) -> ArrayRef {
    let mut rng = StdRng::seed_from_u64(seed);
    let nulls: Vec<bool> = (0..len).map(|_| rng.random_range(0..1000) < null_per_mille).collect();
    let ints: Vec<i64> = {
        let base: i64 = rng.random_range(-1_000_000..1_000_000);
        let step: i64 = rng.random_range(-5..6);
        let distinct: Vec<i64> = (0..rng.random_range(1..20)).map(|_| rng.random()).collect();
        let mut run_value = base;
        (0..len as i64)
            .map(|i| match shape {
                Shape::Constant => base,
                Shape::Sequence => base.wrapping_add(step.wrapping_mul(i)),
                Shape::Runs => {
                    if rng.random_range(0..50) == 0 {
                        run_value = rng.random_range(-100..100);
                    }
                    run_value
                }
                Shape::SmallRange => base + rng.random_range(0..1000),
                Shape::FewDistinct => distinct[rng.random_range(0..distinct.len())],
                Shape::Random => rng.random(),
                Shape::Extremes => [i64::MIN, i64::MAX, 0, -1, 1][rng.random_range(0..5)],
            })
            .collect()
    };
    let opt = |i: usize| !nulls[i];
    let array: ArrayRef = match data_type {
        DataType::Boolean => Arc::new(BooleanArray::from_iter((0..len).map(|i| opt(i).then(|| ints[i] & 1 == 1)))),
        DataType::Int8 => Arc::new(Int8Array::from_iter((0..len).map(|i| opt(i).then(|| ints[i] as i8)))),
        DataType::Int16 => Arc::new(Int16Array::from_iter((0..len).map(|i| opt(i).then(|| ints[i] as i16)))),
        DataType::Int32 => Arc::new(Int32Array::from_iter((0..len).map(|i| opt(i).then(|| ints[i] as i32)))),
        DataType::Int64 => Arc::new(Int64Array::from_iter((0..len).map(|i| opt(i).then(|| ints[i])))),
        DataType::UInt8 => Arc::new(UInt8Array::from_iter((0..len).map(|i| opt(i).then(|| ints[i] as u8)))),
        DataType::UInt16 => Arc::new(UInt16Array::from_iter((0..len).map(|i| opt(i).then(|| ints[i] as u16)))),
        DataType::UInt32 => Arc::new(UInt32Array::from_iter((0..len).map(|i| opt(i).then(|| ints[i] as u32)))),
        DataType::UInt64 => Arc::new(UInt64Array::from_iter((0..len).map(|i| opt(i).then(|| ints[i] as u64)))),
        DataType::Float32 => {
            Arc::new(Float32Array::from_iter((0..len).map(|i| opt(i).then(|| float(ints[i], shape) as f32))))
        }
        DataType::Float64 => Arc::new(Float64Array::from_iter((0..len).map(|i| opt(i).then(|| float(ints[i], shape))))),
        DataType::Date32 => Arc::new(Date32Array::from_iter((0..len).map(|i| opt(i).then(|| ints[i] as i32)))),
        DataType::Timestamp(_, _) => {
            let values: ArrayRef = Arc::new(Int64Array::from_iter((0..len).map(|i| opt(i).then(|| ints[i]))));
            arrow_cast::cast(&values, data_type).expect("Int64 casts to any timestamp")
        }
        DataType::Float16 => {
            let values: ArrayRef =
                Arc::new(Float32Array::from_iter((0..len).map(|i| opt(i).then(|| float(ints[i], shape) as f32))));
            arrow_cast::cast(&values, data_type).expect("Float32 casts to Float16")
        }
        DataType::Decimal256(..) => {
            let values: ArrayRef = Arc::new(Int64Array::from_iter((0..len).map(|i| opt(i).then(|| ints[i] / 100))));
            arrow_cast::cast(&values, data_type).expect("Int64 casts to Decimal256")
        }
        DataType::FixedSizeBinary(8) => Arc::new(
            FixedSizeBinaryArray::try_from_sparse_iter_with_size(
                (0..len).map(|i| opt(i).then(|| ints[i].to_be_bytes())),
                8,
            )
            .expect("eight bytes each"),
        ),
        DataType::Interval(arrow_schema::IntervalUnit::MonthDayNano) => {
            Arc::new(IntervalMonthDayNanoArray::from_iter((0..len).map(|i| {
                opt(i).then(|| {
                    arrow_buffer::IntervalMonthDayNano::new((ints[i] % 100) as i32, (ints[i] % 31) as i32, ints[i])
                })
            })))
        }
        DataType::List(field) if *field.data_type() == DataType::Int64 => {
            Arc::new(ListArray::from_iter_primitive::<arrow_array::types::Int64Type, _, _>((0..len).map(|i| {
                let v = ints[i];
                opt(i).then(|| (0..v.rem_euclid(4)).map(move |k| (k != 2).then_some(v.wrapping_add(k))))
            })))
        }
        DataType::Struct(fields) if *fields != struct_fields() => {
            // Each child generated as a column of its own; a non-nullable
            // child is NULL only where the struct is.
            let valid = arrow_buffer::NullBuffer::from((0..len).map(opt).collect::<Vec<bool>>());
            let nulls = (valid.null_count() > 0).then_some(valid);
            let children = fields
                .iter()
                .enumerate()
                .map(|(k, f)| {
                    let per_mille = if f.is_nullable() { 100 } else { 0 };
                    gen_array(f.data_type(), shape, len, per_mille, seed.wrapping_add(k as u64 + 1))
                })
                .collect();
            Arc::new(StructArray::try_new(fields.clone(), children, nulls).expect("a struct"))
        }
        DataType::Dictionary(_, values) => {
            let values = gen_array(values, shape, len, null_per_mille, seed);
            arrow_cast::cast(&values, data_type).expect("a dictionary")
        }
        DataType::List(field) | DataType::LargeList(field) if *field.data_type() != DataType::Int64 => {
            let lengths: Vec<usize> =
                (0..len).map(|i| if opt(i) { ints[i].rem_euclid(4) as usize } else { 0 }).collect();
            let values = gen_array(field.data_type(), shape, lengths.iter().sum(), 100, seed.wrapping_add(1));
            let valid = arrow_buffer::NullBuffer::from((0..len).map(opt).collect::<Vec<bool>>());
            let nulls = (valid.null_count() > 0).then_some(valid);
            match data_type {
                DataType::List(_) => Arc::new(
                    ListArray::try_new(field.clone(), arrow_buffer::OffsetBuffer::from_lengths(lengths), values, nulls)
                        .expect("a list"),
                ),
                _ => Arc::new(
                    LargeListArray::try_new(
                        field.clone(),
                        arrow_buffer::OffsetBuffer::from_lengths(lengths),
                        values,
                        nulls,
                    )
                    .expect("a large list"),
                ),
            }
        }
        DataType::FixedSizeList(field, size) => {
            let values = gen_array(field.data_type(), shape, len * *size as usize, 100, seed.wrapping_add(1));
            let valid = arrow_buffer::NullBuffer::from((0..len).map(opt).collect::<Vec<bool>>());
            let nulls = (valid.null_count() > 0).then_some(valid);
            Arc::new(FixedSizeListArray::try_new(field.clone(), *size, values, nulls).expect("a fixed-size list"))
        }
        DataType::Map(field, _) => {
            let lengths: Vec<usize> =
                (0..len).map(|i| if opt(i) { ints[i].rem_euclid(3) as usize } else { 0 }).collect();
            let total = lengths.iter().sum();
            let keys: ArrayRef = Arc::new(StringArray::from_iter_values((0..total).map(|k| format!("key {}", k % 5))));
            let values = gen_array(&DataType::Int64, shape, total, 100, seed.wrapping_add(1));
            let entries = StructArray::try_new(map_fields(), vec![keys, values], None).expect("entries");
            let valid = arrow_buffer::NullBuffer::from((0..len).map(opt).collect::<Vec<bool>>());
            let nulls = (valid.null_count() > 0).then_some(valid);
            Arc::new(
                MapArray::try_new(
                    field.clone(),
                    arrow_buffer::OffsetBuffer::from_lengths(lengths),
                    entries,
                    nulls,
                    false,
                )
                .expect("a map"),
            )
        }
        DataType::Struct(_) => {
            let a: ArrayRef = Arc::new(Int64Array::from_iter((0..len).map(|i| (ints[i] % 3 != 0).then_some(ints[i]))));
            let b: ArrayRef = Arc::new(StringArray::from_iter(
                (0..len).map(|i| Some(STRING_POOL[ints[i].rem_euclid(8) as usize].to_string())),
            ));
            let valid = arrow_buffer::NullBuffer::from((0..len).map(opt).collect::<Vec<bool>>());
            let nulls = (valid.null_count() > 0).then_some(valid);
            Arc::new(StructArray::try_new(struct_fields(), vec![a, b], nulls).expect("a struct"))
        }
        DataType::Null => Arc::new(NullArray::new(len)),
        // The same i32 and i64 values, typed as times, durations and Date64.
        DataType::Time32(_) => {
            let values = Int32Array::from_iter((0..len).map(|i| opt(i).then(|| ints[i] as i32)));
            make_array(values.into_data().into_builder().data_type(data_type.clone()).build().expect("i32-backed"))
        }
        DataType::Time64(_) | DataType::Duration(_) | DataType::Date64 => {
            let values = Int64Array::from_iter((0..len).map(|i| opt(i).then(|| ints[i])));
            make_array(values.into_data().into_builder().data_type(data_type.clone()).build().expect("i64-backed"))
        }
        DataType::Decimal128(p, s) => {
            let limit = 10i128.pow(*p as u32) - 1;
            // Values beyond i64 for wide precision, to reach the wide encoding.
            let scale: i128 = if *p > 19 { 1_000_000_000_000 } else { 1 };
            Arc::new(
                Decimal128Array::from_iter(
                    (0..len).map(|i| opt(i).then(|| (ints[i] as i128 * scale).clamp(-limit, limit))),
                )
                .with_precision_and_scale(*p, *s)
                .expect("valid decimal"),
            )
        }
        DataType::Utf8
        | DataType::LargeUtf8
        | DataType::Utf8View
        | DataType::Binary
        | DataType::LargeBinary
        | DataType::BinaryView => {
            let strings: Vec<Option<String>> = (0..len)
                .map(|i| {
                    opt(i).then(|| match shape {
                        Shape::Random | Shape::Sequence => {
                            format!("{}#{}", STRING_POOL[ints[i].rem_euclid(8) as usize], ints[i])
                        }
                        _ => STRING_POOL[ints[i].rem_euclid(8) as usize].to_string(),
                    })
                })
                .collect();
            let utf8: ArrayRef = Arc::new(StringArray::from(strings));
            let target = match data_type {
                DataType::Binary => DataType::Binary,
                other => other.clone(),
            };
            arrow_cast::cast(&utf8, &target).expect("string cast")
        }
        other => panic!("no generator for {other}"),
    };
    assert_eq!(array.data_type(), data_type);
    array
}

fn float(i: i64, shape: Shape) -> f64 {
    match shape {
        Shape::Extremes => [f64::NAN, -0.0, 0.0, f64::INFINITY, f64::NEG_INFINITY, f64::MIN_POSITIVE, f64::MAX]
            [i.rem_euclid(7) as usize],
        Shape::Random => f64::from_bits(i as u64),
        _ => i as f64 / 8.0,
    }
}
