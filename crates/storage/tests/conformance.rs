//! Conformance: every main-storage encoding and the delta decode and gather
//! exactly what went in, for every type, against a plain `Vec` reference.

mod common;

use std::sync::Arc;

use arrow_array::*;
use arrow_schema::{DataType, Field, Schema};
use common::{Plain, SHAPES, all_types, gen_array, plain};
use proptest::prelude::*;
use quiverdb_storage::{BLOCK_SIZE, Database, EncodingKind, Error, MainColumn, PhysicalType, TableOptions};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Reads `reference.len()` rows back through `range` and `gather` in many
/// patterns and compares each with the reference.
fn check_reads(
    label: &str,
    data_type: &DataType,
    reference: &[Plain],
    range: impl Fn(usize, usize) -> quiverdb_storage::Result<ArrayRef>,
    gather: impl Fn(&[u32]) -> quiverdb_storage::Result<ArrayRef>,
    seed: u64,
) {
    let n = reference.len();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut ranges = vec![(0, n), (0, 0), (n, 0)];
    for edge in [1, BLOCK_SIZE - 1, BLOCK_SIZE, BLOCK_SIZE + 1, 2 * BLOCK_SIZE] {
        if edge < n {
            ranges.push((edge, n - edge));
            ranges.push((0, edge));
            ranges.push((edge - 1, (n - edge + 1).min(3)));
        }
    }
    for _ in 0..4 {
        if n > 0 {
            let s = rng.random_range(0..n);
            ranges.push((s, rng.random_range(0..=n - s)));
        }
    }
    for (start, len) in ranges {
        let out = range(start, len).unwrap_or_else(|e| panic!("{label}: range {start}+{len}: {e}"));
        assert_eq!(out.data_type(), data_type, "{label}: output type follows the schema");
        assert_eq!(plain(&out), &reference[start..start + len], "{label}: range {start}+{len}");
    }
    let mut gathers: Vec<Vec<u32>> =
        vec![Vec::new(), (0..n as u32).rev().collect(), (0..n as u32).step_by(BLOCK_SIZE).collect()];
    if n > 0 {
        let mut sorted: Vec<u32> = (0..n as u32).filter(|_| rng.random_range(0..3) == 0).collect();
        sorted.sort_unstable();
        gathers.push(sorted);
        gathers.push((0..n.min(200)).map(|_| rng.random_range(0..n as u32)).collect());
        gathers.push(vec![(n - 1) as u32; 20]);
    }
    for ids in gathers {
        let out = gather(&ids).unwrap_or_else(|e| panic!("{label}: gather: {e}"));
        assert_eq!(out.data_type(), data_type, "{label}: gather output type");
        let expected: Vec<Plain> = ids.iter().map(|&i| reference[i as usize].clone()).collect();
        assert_eq!(plain(&out), expected, "{label}: gather of {} ids", ids.len());
    }
}

/// Every applicable encoding of `array`, plus the one the chooser picks.
fn check_main(array: &ArrayRef, seed: u64) {
    let reference = plain(array.as_ref());
    let physical = PhysicalType::of(array.data_type()).expect("supported type");
    for force in std::iter::once(None).chain(EncodingKind::ALL.into_iter().map(Some)) {
        let label = format!("{} {:?} n={}", array.data_type(), force, array.len());
        let col = match MainColumn::from_array_with(array.as_ref(), force) {
            Ok(col) => col,
            Err(Error::InvalidOption { .. }) => {
                // Only these refusals are legitimate.
                let distinct: std::collections::HashSet<&Plain> = reference.iter().filter(|v| v.is_some()).collect();
                let wide = physical == PhysicalType::Decimal128
                    && reference.iter().flatten().any(|v| {
                        let x = i128::from_le_bytes(v[..16].try_into().expect("16 bytes"));
                        x < i64::MIN as i128 || x > i64::MAX as i128
                    });
                let ok = match force {
                    _ if physical == PhysicalType::Bytes => {
                        !matches!(force, Some(EncodingKind::Dictionary | EncodingKind::Plain | EncodingKind::Fsst))
                    }
                    _ if wide => force != Some(EncodingKind::Plain),
                    Some(EncodingKind::Constant) => distinct.len() > 1,
                    // FSST compresses bytes only.
                    Some(EncodingKind::Fsst) => true,
                    _ => false,
                };
                assert!(ok, "{label}: refused an applicable encoding");
                continue;
            }
            Err(e) => panic!("{label}: {e}"),
        };
        match force {
            // A nested column forces the encoding on each child it fits.
            _ if !col.children().is_empty() => assert_eq!(col.kind(), EncodingKind::Nested, "{label}"),
            Some(kind) => assert_eq!(col.kind(), kind, "{label}"),
            None => {}
        }
        assert_eq!(col.len(), array.len());
        assert_eq!(col.null_count(), array.logical_null_count(), "{label}: null count");
        for (b, zone) in col.zones().iter().enumerate() {
            let block = &reference[b * BLOCK_SIZE..((b + 1) * BLOCK_SIZE).min(reference.len())];
            let nulls = block.iter().filter(|v| v.is_none()).count();
            assert_eq!(zone.null_count as usize, nulls, "{label}: zone {b} null count");
            assert_eq!(zone.all_null(), nulls == block.len(), "{label}: zone {b} all null");
        }
        assert!(col.size_bytes() > 0 || array.is_empty() || matches!(col.kind(), EncodingKind::Sequence));
        check_reads(&label, array.data_type(), &reference, |s, l| col.decode_range(s, l), |ids| col.gather(ids), seed);
    }
}

/// The delta (and main + delta shards) of a table holding `array`.
fn check_delta(array: &ArrayRef, capacity: usize, seed: u64) {
    let reference = plain(array.as_ref());
    let schema = Schema::new(vec![Field::new("c", array.data_type().clone(), true)]);
    let db = Database::new();
    let options = TableOptions::default().with_shard_capacity(capacity).with_background_rebuild(false);
    let table = db.create_table("t", &schema, options).expect("create");
    let mut rng = StdRng::seed_from_u64(seed);
    let append = |from: usize, to: usize, rng: &mut StdRng| {
        let mut at = from;
        while at < to {
            let k = rng.random_range(1..=(to - at).min(3000));
            let batch = RecordBatch::try_new(Arc::new(schema.clone()), vec![array.slice(at, k)]).expect("batch");
            table.append(&batch).expect("append");
            at += k;
        }
    };
    let half = array.len() / 2;
    append(0, half, &mut rng);
    // First: only deltas. Then: main for the first half, delta for the rest.
    for phase in 0..2 {
        if phase == 1 {
            table.rebuild().expect("rebuild");
            append(half, array.len(), &mut rng);
        }
        let rows = if phase == 0 { half } else { array.len() };
        let snapshot = table.snapshot();
        let batches = snapshot.to_record_batches(None).expect("decode");
        let all: Vec<Plain> = batches.iter().flat_map(|b| plain(b.column(0).as_ref())).collect();
        assert_eq!(all, &reference[..rows], "delta phase {phase}: full decode");
        let mut offset = 0;
        for shard in snapshot.shards() {
            let part = &reference[offset..offset + shard.rows()];
            let label = format!("{} shard {} phase {phase}", array.data_type(), shard.id());
            check_reads(
                &label,
                array.data_type(),
                part,
                |s, l| {
                    let ids: Vec<u32> = (s as u32..(s + l) as u32).collect();
                    Ok(shard.gather(&ids, None)?.column(0).clone())
                },
                |ids| Ok(shard.gather(ids, None)?.column(0).clone()),
                seed,
            );
            offset += shard.rows();
        }
    }
}

#[test]
fn edge_cases_every_type() {
    for (t, data_type) in all_types().into_iter().enumerate() {
        for len in [0, 1, BLOCK_SIZE, BLOCK_SIZE + 1] {
            for (s, shape) in SHAPES.into_iter().enumerate() {
                for nulls in [0, 300, 1000] {
                    let seed = (t * 1000 + len * 10 + s) as u64 + nulls as u64;
                    check_main(&gen_array(&data_type, shape, len, nulls, seed), seed);
                }
            }
        }
    }
}

#[test]
fn delta_every_type() {
    for (t, data_type) in all_types().into_iter().enumerate() {
        for (s, shape) in SHAPES.into_iter().enumerate() {
            let seed = (t * 100 + s) as u64;
            let array = gen_array(&data_type, shape, 2 * BLOCK_SIZE + 77, [0, 250, 1000][s % 3], seed);
            check_delta(&array, 1000, seed);
            check_delta(&array, 65_536, seed);
        }
    }
}

#[test]
fn integer_extremes() {
    fn cycle<T: Copy>(values: &[T], n: usize) -> Vec<T> {
        (0..n).map(|i| values[i % values.len()]).collect()
    }
    let n = BLOCK_SIZE + 1;
    let arrays: Vec<ArrayRef> = vec![
        Arc::new(Int8Array::from(cycle(&[i8::MIN, i8::MAX, 0, -1, 1], n))),
        Arc::new(Int16Array::from(cycle(&[i16::MIN, i16::MAX, 0, -1], n))),
        Arc::new(Int32Array::from(cycle(&[i32::MIN, i32::MAX, 0, -7], n))),
        Arc::new(Int64Array::from(cycle(&[i64::MIN, i64::MAX, 0, -1], n))),
        Arc::new(UInt8Array::from(cycle(&[0, u8::MAX], n))),
        Arc::new(UInt16Array::from(cycle(&[0, u16::MAX, 1], n))),
        Arc::new(UInt32Array::from(cycle(&[0, u32::MAX], n))),
        Arc::new(UInt64Array::from(cycle(&[0, u64::MAX, u64::MAX - 1], n))),
        Arc::new(Int64Array::from(cycle(&[i64::MIN], n))),
        Arc::new(UInt64Array::from(cycle(&[u64::MAX], n))),
        Arc::new(Float64Array::from(cycle(&[f64::NAN, -0.0, 0.0, f64::INFINITY, f64::NEG_INFINITY, -f64::NAN], n))),
        Arc::new(Float32Array::from(cycle(&[f32::NAN, -0.0, 0.0, f32::INFINITY, f32::MIN, f32::MAX], n))),
        Arc::new(
            Decimal128Array::from(cycle(&[-(10i128.pow(38) - 1), 10i128.pow(38) - 1, 0, i64::MIN as i128 - 1], n))
                .with_precision_and_scale(38, 0)
                .expect("valid"),
        ),
        Arc::new(Int64Array::from_iter_values((0..n as i64).map(|i| i64::MAX - i))),
        Arc::new(Int64Array::from_iter_values((0..n as i64).map(|i| i.wrapping_mul(i64::MAX / 3)))),
        Arc::new(StringArray::from(cycle(&["", &"long ".repeat(1000), "ünï", "😀"], n))),
    ];
    for (i, array) in arrays.iter().enumerate() {
        check_main(array, i as u64);
        check_delta(array, 700, i as u64);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn main_encodings_match_reference(
        type_index in 0..all_types().len(),
        shape in 0..SHAPES.len(),
        len in 0usize..2600,
        nulls in prop_oneof![Just(0u32), Just(1000u32), 1u32..600],
        seed in any::<u64>(),
    ) {
        let array = gen_array(&all_types()[type_index], SHAPES[shape], len, nulls, seed);
        check_main(&array, seed);
    }

    #[test]
    fn delta_matches_reference(
        type_index in 0..all_types().len(),
        shape in 0..SHAPES.len(),
        len in 1usize..3000,
        capacity in prop_oneof![Just(7usize), Just(1000usize), Just(65_536usize)],
        nulls in prop_oneof![Just(0u32), 1u32..600],
        seed in any::<u64>(),
    ) {
        let array = gen_array(&all_types()[type_index], SHAPES[shape], len, nulls, seed);
        check_delta(&array, capacity, seed);
    }
}
