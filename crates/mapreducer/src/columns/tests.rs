//! Column readers against storage's own decoding: every numeric type and
//! encoding, main blocks and delta chunks, every kind of selection.

use std::sync::Arc;

use arrow_array::{ArrayRef, BinaryArray, Float32Array, Float64Array, RecordBatch, StringArray, StringViewArray};
use arrow_schema::{DataType, Field, Schema};
use quiverdb_storage::{Database, EncodingKind, Table};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::*;
use crate::expr::Side;
use crate::scalar::Num;
use crate::test_tables::{Cell, Sels, cell, ints, lane, num, num_cell, steps, table};

const MAIN_ROWS: usize = 2600;
const DELTA_ROWS: usize = 1500;

/// A column of the fixture: its field, a generator of its values, and the
/// encoding its main storage must get (to be sure each one is covered).
struct Spec {
    field: Field,
    values: fn(&mut StdRng, usize, usize) -> ArrayRef,
    encoding: Option<EncodingKind>,
}

fn specs() -> Vec<Spec> {
    let f = |name: &str, dt: DataType, nullable: bool| Field::new(name, dt, nullable);
    vec![
        Spec {
            field: f("bitpacked", DataType::Int32, true),
            values: |r, n, _| ints(DataType::Int32, r, n, 0.1, |r, _| r.random_range(-500..500)),
            encoding: Some(EncodingKind::BitPacked),
        },
        Spec {
            field: f("constant", DataType::Int16, false),
            values: |r, n, first| {
                ints(DataType::Int16, r, n, 0.0, |r, _| if first == 0 { 42 } else { r.random_range(-9..9) })
            },
            encoding: Some(EncodingKind::Constant),
        },
        Spec {
            field: f("sequence", DataType::Int64, false),
            values: |r, n, first| ints(DataType::Int64, r, n, 0.0, |_, i| 1000 - 7 * (first + i) as i64),
            encoding: Some(EncodingKind::Sequence),
        },
        Spec {
            field: f("runs", DataType::UInt8, true),
            values: |r, n, first| {
                let run_values: Vec<i64> = (0..=(first + n) / 50).map(|_| r.random_range(0..256)).collect();
                ints(DataType::UInt8, r, n, 0.05, |_, i| run_values[(first + i) / 50])
            },
            encoding: Some(EncodingKind::RunEnd),
        },
        Spec {
            field: f("dictionary", DataType::Int64, false),
            values: |r, n, _| {
                const SPREAD: [i64; 5] = [-4_000_000_000_000_000_000, -1, 7, 3_000_000_000_000, i64::MAX];
                ints(DataType::Int64, r, n, 0.0, |r, _| SPREAD[r.random_range(0..SPREAD.len())])
            },
            encoding: Some(EncodingKind::Dictionary),
        },
        Spec {
            field: f("wide_i64", DataType::Int64, true),
            values: |r, n, _| ints(DataType::Int64, r, n, 0.02, |r, _| r.random()),
            encoding: None,
        },
        Spec {
            field: f("i8", DataType::Int8, false),
            values: |r, n, _| ints(DataType::Int8, r, n, 0.0, |r, _| r.random_range(-128..128)),
            encoding: None,
        },
        Spec {
            field: f("u16", DataType::UInt16, false),
            values: |r, n, _| ints(DataType::UInt16, r, n, 0.0, |r, _| r.random_range(0..65536)),
            encoding: None,
        },
        Spec {
            field: f("u32", DataType::UInt32, true),
            values: |r, n, _| ints(DataType::UInt32, r, n, 0.2, |r, _| r.random_range(0..=u32::MAX as i64)),
            encoding: None,
        },
        Spec {
            field: f("u64", DataType::UInt64, true),
            // Bits of random i64s: half of them above i64::MAX as u64.
            values: |r, n, _| ints(DataType::UInt64, r, n, 0.1, |r, _| r.random()),
            encoding: None,
        },
        Spec {
            field: f("f32", DataType::Float32, true),
            values: |r, n, _| {
                let special = [f32::NAN, -0.0, 0.0, f32::INFINITY, f32::NEG_INFINITY, -f32::NAN];
                let v: Vec<Option<f32>> = (0..n)
                    .map(|_| match r.random_range(0..10) {
                        0 => None,
                        1 => Some(special[r.random_range(0..special.len())]),
                        _ => Some(r.random_range(-1e6f32..1e6)),
                    })
                    .collect();
                Arc::new(Float32Array::from(v))
            },
            encoding: None,
        },
        Spec {
            field: f("f64", DataType::Float64, true),
            values: |r, n, _| {
                let special = [f64::NAN, -0.0, 0.0, f64::INFINITY, f64::MIN_POSITIVE, -f64::NAN];
                let v: Vec<Option<f64>> = (0..n)
                    .map(|_| match r.random_range(0..10) {
                        0 => None,
                        1 => Some(special[r.random_range(0..special.len())]),
                        _ => Some(r.random_range(-1e12..1e12)),
                    })
                    .collect();
                Arc::new(Float64Array::from(v))
            },
            encoding: None,
        },
        Spec {
            field: f("dec", DataType::Decimal128(18, 3), true),
            values: |r, n, _| {
                let t = DataType::Decimal128(18, 3);
                ints(t, r, n, 0.1, |r, _| r.random_range(-999_999_999_999_999..1_000_000_000_000_000))
            },
            encoding: None,
        },
        Spec {
            field: f("wide_dec", DataType::Decimal128(38, 0), true),
            values: |r, n, _| {
                let v: Vec<Option<i128>> = (0..n)
                    .map(|_| (!r.random_bool(0.1)).then(|| r.random::<i64>() as i128 * 1_000_000_000_000))
                    .collect();
                let a: arrow_array::Decimal128Array = v.into_iter().collect();
                Arc::new(a.with_precision_and_scale(38, 0).unwrap())
            },
            encoding: None,
        },
        Spec {
            field: f("bool", DataType::Boolean, true),
            values: |r, n, _| ints(DataType::Boolean, r, n, 0.15, |r, _| r.random_range(0..2)),
            encoding: None,
        },
        Spec {
            field: f("date", DataType::Date32, false),
            values: |r, n, _| ints(DataType::Date32, r, n, 0.0, |r, _| r.random_range(-20_000..40_000)),
            encoding: None,
        },
        Spec {
            field: f("names", DataType::Utf8, true),
            values: |r, n, _| {
                let v: Vec<Option<String>> =
                    (0..n).map(|_| (!r.random_bool(0.1)).then(|| format!("name {}", r.random_range(0..30)))).collect();
                Arc::new(StringArray::from(v))
            },
            encoding: Some(EncodingKind::Dictionary),
        },
        Spec {
            field: f("texts", DataType::Utf8, false),
            values: |r, n, first| {
                // Characters drawn from 1,792 two-byte ones: too random for
                // FSST, so the column stays plain.
                let v: Vec<String> = (0..n)
                    .map(|i| {
                        let noise: String =
                            (0..8).filter_map(|_| char::from_u32(r.random_range(0x100..0x800))).collect();
                        format!("{} {noise}", first + i)
                    })
                    .collect();
                Arc::new(StringArray::from(v))
            },
            encoding: Some(EncodingKind::Plain),
        },
        Spec {
            field: f("comments", DataType::Utf8View, true),
            values: |r, n, _| {
                let words = ["carefully", "final", "ideas", "sleep", "among", "the", "packages", "é"];
                let v: Vec<Option<String>> = (0..n)
                    .map(|_| {
                        (!r.random_bool(0.1)).then(|| {
                            (0..r.random_range(0..9))
                                .map(|_| words[r.random_range(0..words.len())])
                                .collect::<Vec<_>>()
                                .join(" ")
                        })
                    })
                    .collect();
                Arc::new(StringViewArray::from(v))
            },
            encoding: Some(EncodingKind::Fsst),
        },
        Spec {
            field: f("blobs", DataType::Binary, true),
            values: |r, n, _| {
                let v: Vec<Option<Vec<u8>>> = (0..n)
                    .map(|_| (!r.random_bool(0.1)).then(|| (0..r.random_range(0..12)).map(|_| r.random()).collect()))
                    .collect();
                Arc::new(BinaryArray::from_iter(v))
            },
            encoding: None,
        },
    ]
}

/// One shard: `MAIN_ROWS` rows in main storage (three blocks, the last
/// partial), then `DELTA_ROWS` in the delta (two chunks, the last partial).
fn fixture(seed: u64) -> (Database, Table, Vec<Spec>) {
    let mut rng = StdRng::seed_from_u64(seed);
    let specs = specs();
    let schema = Arc::new(Schema::new(specs.iter().map(|s| s.field.clone()).collect::<Vec<_>>()));
    let mut batch = |first: usize, n: usize| {
        let columns = specs.iter().map(|s| (s.values)(&mut rng, n, first)).collect();
        RecordBatch::try_new(Arc::clone(&schema), columns).unwrap()
    };
    let (main, delta) = (batch(0, MAIN_ROWS), batch(MAIN_ROWS, DELTA_ROWS));
    let (db, table) = table(&schema, 1 << 16, &main, &delta);
    (db, table, specs)
}

#[test]
fn fetches_equal_storage_decoding_for_every_type_encoding_and_selection() {
    let (_db, table, specs) = fixture(11);
    let snap = table.snapshot();
    assert_eq!(snap.num_shards(), 1);
    let shard = snap.shard(0);
    let batch = shard.to_record_batch(None).unwrap();
    let cols = ShardColumns::open(shard, 0..specs.len()).unwrap();
    assert_eq!((cols.main_rows(), cols.delta_rows()), (MAIN_ROWS, DELTA_ROWS));
    assert_eq!((cols.main_blocks(), cols.delta_chunks()), (3, 2));
    for (c, spec) in specs.iter().enumerate() {
        let kind = shard.main().column(c).unwrap().kind();
        if let Some(want) = spec.encoding {
            assert_eq!(kind, want, "column {} is meant to cover {want}", spec.field.name());
        }
    }
    let mut rng = StdRng::seed_from_u64(12);
    let mut scratch = Scratch::default();
    for (c, spec) in specs.iter().enumerate() {
        let src = cols.column(c);
        let name = spec.field.name();
        assert_eq!(src.data_type(), spec.field.data_type());
        let Some(domain) = domain_of(src.physical()) else {
            continue;
        };
        assert_eq!(Some(domain), Domain::of(spec.field.data_type()), "{name}");
        let expected = batch.column(c);
        let mut out = NumVector::new(domain);
        for (side, first, len) in steps(&cols) {
            let sels = Sels::new(&mut rng, len, first);
            for sel in sels.each(len, first) {
                let validity = match side {
                    Side::Main(b) => {
                        src.fetch_main(b, sel, &mut scratch, &mut out).unwrap();
                        src.main_validity(b, sel)
                    }
                    Side::Delta(ch) => {
                        src.fetch_delta(ch, sel, &mut out).unwrap();
                        src.delta_validity(ch, sel)
                    }
                };
                assert_eq!(out.len, sel.lanes(), "{name} {sel:?}");
                let mut seen = 0;
                sel.for_each(|l, offset| {
                    seen += 1;
                    let row = first + offset;
                    let want = num(expected.as_ref(), row);
                    assert_eq!(num_cell(lane(&out, l)), num_cell(want), "{name}: {side:?}, row {row}, {sel:?}");
                    assert_eq!(validity.is_none_or(|v| v.get(l)), want.is_some(), "{name}: validity of row {row}");
                });
                assert_eq!(seen, sel.count());
            }
        }
    }
}

#[test]
fn zone_keys_are_the_least_and_greatest_values_of_each_block() {
    let (_db, table, specs) = fixture(13);
    let snap = table.snapshot();
    let shard = snap.shard(0);
    let batch = shard.to_record_batch(None).unwrap();
    let cols = ShardColumns::open(shard, 0..specs.len()).unwrap();
    let mut checked = 0;
    for (c, spec) in specs.iter().enumerate() {
        let src = cols.column(c);
        let Some(main) = src.main().filter(|m| m.keys().is_some()) else { continue };
        for (b, zone) in main.zones().iter().enumerate() {
            // Block b's valid values, ordered as the kernels order them
            // (floats in IEEE total order).
            let mut values: Vec<Num> =
                (b * LANES..b * LANES + cols.block_len(b)).filter_map(|r| num(batch.column(c).as_ref(), r)).collect();
            values.sort_by(|x, y| match (x, y) {
                (Num::F64(x), Num::F64(y)) => x.total_cmp(y),
                (Num::I64(x), Num::I64(y)) => x.cmp(y),
                (Num::U64(x), Num::U64(y)) => x.cmp(y),
                (Num::I128(x), Num::I128(y)) => x.cmp(y),
                _ => unreachable!("one domain per column"),
            });
            let name = spec.field.name();
            assert_eq!(zone.all_null(), values.is_empty(), "{name} block {b}");
            if let (Some(lo), Some(hi)) = (values.first(), values.last()) {
                assert_eq!(num_cell(Some(key_to_num(src.physical(), zone.min))), num_cell(Some(*lo)), "{name} min {b}");
                assert_eq!(num_cell(Some(key_to_num(src.physical(), zone.max))), num_cell(Some(*hi)), "{name} max {b}");
                checked += 1;
            }
        }
    }
    assert!(checked > 30, "{checked} blocks checked");
}

#[test]
fn bytes_of_main_rows_and_delta_chunks_equal_storage_decoding() {
    let (_db, table, specs) = fixture(17);
    let snap = table.snapshot();
    let shard = snap.shard(0);
    let batch = shard.to_record_batch(None).unwrap();
    let cols = ShardColumns::open(shard, 0..specs.len()).unwrap();
    let mut checked = 0;
    for (c, spec) in specs.iter().enumerate() {
        let src = cols.column(c);
        if domain_of(src.physical()).is_some() {
            continue;
        }
        let mut blocks: Vec<_> =
            (0..MAIN_ROWS.div_ceil(LANES)).map(|b| src.main_block_bytes(b, BlockBytes::default())).collect();
        for row in 0..MAIN_ROWS + DELTA_ROWS {
            let got = match row.checked_sub(MAIN_ROWS) {
                None => blocks[row / LANES].get(row % LANES),
                Some(d) => src.delta_bytes(d / LANES, d % LANES),
            };
            match cell(batch.column(c).as_ref(), row) {
                Cell::Bytes(want) => assert_eq!(got, want.as_slice(), "{} row {row}", spec.field.name()),
                Cell::Null => {}
                other => panic!("bytes column holds {other:?}"),
            }
        }
        checked += 1;
    }
    assert_eq!(checked, 4, "names, texts, comments and blobs");
}

/// Plain gathers of integer columns without NULLs decode straight into
/// the output: the same values as storage, for any range of a block.
#[test]
fn extend_main_i64_appends_the_values_of_a_range() {
    let (_db, table, specs) = fixture(19);
    let snap = table.snapshot();
    let shard = snap.shard(0);
    let batch = shard.to_record_batch(None).unwrap();
    let cols = ShardColumns::open(shard, 0..specs.len()).unwrap();
    let mut rng = StdRng::seed_from_u64(20);
    let mut scratch = Scratch::default();
    let mut extended = Vec::new();
    for (c, spec) in specs.iter().enumerate() {
        let src = cols.column(c);
        for b in 0..cols.main_blocks() {
            let len = cols.block_len(b);
            for (lo, hi) in [(0, len), (3, len - 5), {
                let a = rng.random_range(0..len);
                (a, rng.random_range(a..=len))
            }] {
                let mut dst = vec![-1i64];
                if !src.extend_main_i64(b, lo, hi, &mut scratch, &mut dst) {
                    assert_eq!(dst, [-1], "nothing appended");
                    continue;
                }
                let want: Vec<i64> = (b * LANES + lo..b * LANES + hi)
                    .map(|r| match num(batch.column(c).as_ref(), r) {
                        Some(Num::I64(v)) => v,
                        other => panic!("{} row {r}: {other:?} from an I64 gather", spec.field.name()),
                    })
                    .collect();
                assert_eq!(dst[1..], want, "{} block {b} rows {lo}..{hi}", spec.field.name());
                extended.push(spec.field.name().clone());
            }
        }
    }
    extended.dedup();
    // Every integer column without NULLs of the i64 domain, whatever its encoding.
    assert_eq!(extended, ["constant", "sequence", "dictionary", "i8", "u16", "date"]);
}

#[test]
fn opening_a_column_the_table_lacks_is_an_error() {
    let (_db, table, specs) = fixture(23);
    let snap = table.snapshot();
    let err = ShardColumns::open(snap.shard(0), [0, specs.len()]).unwrap_err();
    assert!(matches!(err, Error::InvalidExpression(_)), "{err}");
}
