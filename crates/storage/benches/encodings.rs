//! Decode and gather speed of every main-storage encoding and of the delta,
//! swept over access patterns: a contiguous range, random ids, and 1/1024
//! of the ids.
//!
//! ```text
//! cargo bench -p quiverdb-storage --bench encodings
//! ```

use std::hint::black_box;
use std::sync::Arc;

use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use quiverdb_storage::{Database, EncodingKind, MainColumn, TableOptions};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// One shard's worth of rows.
const ROWS: usize = 65_536;

/// A column whose values suit `kind` (so the forced encoding is realistic).
fn column_for(kind: EncodingKind, rng: &mut StdRng) -> ArrayRef {
    let values: Vec<i64> = match kind {
        EncodingKind::Constant => vec![42; ROWS],
        EncodingKind::Sequence => (0..ROWS as i64).collect(),
        EncodingKind::BitPacked => (0..ROWS).map(|_| rng.random_range(0..1_000_000)).collect(),
        EncodingKind::RunEnd => (0..ROWS as i64).map(|i| i / 500).collect(),
        EncodingKind::Dictionary => (0..ROWS).map(|_| rng.random_range(0..100) * 1_000_000_007).collect(),
        // (Nested is a layout, not in `EncodingKind::ALL`; FSST compresses
        // bytes only and is skipped.)
        EncodingKind::Plain | EncodingKind::Nested | EncodingKind::Fsst => (0..ROWS).map(|_| rng.random()).collect(),
    };
    Arc::new(Int64Array::from(values))
}

fn patterns(rng: &mut StdRng) -> Vec<(&'static str, Vec<u32>)> {
    let random: Vec<u32> = (0..ROWS / 8).map(|_| rng.random_range(0..ROWS as u32)).collect();
    let sparse: Vec<u32> = (0..ROWS as u32).step_by(1024).collect();
    vec![("random 1/8", random), ("every 1024th", sparse)]
}

/// Decode of all rows plus a gather per access pattern, for one column.
fn bench_column(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    label: impl std::fmt::Display,
    col: &MainColumn,
    patterns: &[(&str, Vec<u32>)],
) {
    group.throughput(Throughput::Elements(ROWS as u64));
    group.bench_function(BenchmarkId::new("decode contiguous", &label), |b| {
        b.iter(|| black_box(col.decode_range(0, ROWS).expect("decode")))
    });
    for (name, ids) in patterns {
        group.throughput(Throughput::Elements(ids.len() as u64));
        group.bench_function(BenchmarkId::new(format!("gather {name}"), &label), |b| {
            b.iter(|| black_box(col.gather(ids).expect("gather")))
        });
    }
}

fn bench_main(c: &mut Criterion) {
    let mut rng = StdRng::seed_from_u64(7);
    let pats = patterns(&mut rng);
    let mut group = c.benchmark_group("main i64");
    group.sample_size(20);
    for kind in EncodingKind::ALL.into_iter().filter(|&k| k != EncodingKind::Fsst) {
        let col = MainColumn::from_array_with(column_for(kind, &mut rng).as_ref(), Some(kind)).expect("encode");
        bench_column(&mut group, kind, &col, &pats);
    }
    group.finish();

    let names: Vec<String> = (0..ROWS).map(|_| format!("name_{:04}", rng.random_range(0..1000))).collect();
    let strings = StringArray::from(names);
    let mut group = c.benchmark_group("main utf8");
    group.sample_size(20);
    for kind in [EncodingKind::Dictionary, EncodingKind::Plain] {
        let col = MainColumn::from_array_with(&strings, Some(kind)).expect("encode");
        bench_column(&mut group, kind, &col, &pats);
    }
    group.finish();

    // Free text (a TPC-H-like comment of 3 to 10 words) plain and FSST.
    let words = ["furiously", "regular", "packages", "sleep", "carefully", "final", "ideas", "the", "deposits"];
    let comments: Vec<String> = (0..ROWS)
        .map(|_| {
            let n = rng.random_range(3..=10);
            (0..n).map(|_| words[rng.random_range(0..words.len())]).collect::<Vec<_>>().join(" ")
        })
        .collect();
    let text = StringArray::from(comments);
    let mut group = c.benchmark_group("main text");
    group.sample_size(20);
    for kind in [EncodingKind::Plain, EncodingKind::Fsst] {
        let col = MainColumn::from_array_with(&text, Some(kind)).expect("encode");
        bench_column(&mut group, kind, &col, &pats);
    }
    group.finish();
}

fn bench_delta(c: &mut Criterion) {
    let mut rng = StdRng::seed_from_u64(8);
    let pats = patterns(&mut rng);
    let schema =
        Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false), Field::new("s", DataType::Utf8, false)]));
    let batch = RecordBatch::try_new(
        Arc::clone(&schema),
        vec![
            column_for(EncodingKind::BitPacked, &mut rng),
            Arc::new(StringArray::from_iter_values((0..ROWS).map(|i| format!("name_{:04}", i % 1000)))),
        ],
    )
    .expect("batch");
    let db = Database::new();
    let table = db.create_table("t", &schema, TableOptions::default().with_background_rebuild(false)).expect("create");
    table.append(&batch).expect("append");
    let snapshot = table.snapshot();
    let shard = snapshot.shard(0);
    let mut group = c.benchmark_group("delta");
    group.sample_size(20);
    for (col, label) in [(0usize, "i64"), (1, "utf8")] {
        group.throughput(Throughput::Elements(ROWS as u64));
        group.bench_function(BenchmarkId::new("decode contiguous", label), |b| {
            b.iter(|| black_box(shard.to_record_batch(Some(&[col])).expect("decode")))
        });
        for (name, ids) in &pats {
            group.throughput(Throughput::Elements(ids.len() as u64));
            group.bench_function(BenchmarkId::new(format!("gather {name}"), label), |b| {
                b.iter(|| black_box(shard.gather(ids, Some(&[col])).expect("gather")))
            });
        }
    }
    group.throughput(Throughput::Elements(ROWS as u64));
    group.bench_function("append 8192-row batches", |b| {
        let small = batch.slice(0, 8192);
        b.iter(|| {
            let db = Database::new();
            let t =
                db.create_table("a", &schema, TableOptions::default().with_background_rebuild(false)).expect("create");
            for _ in 0..8 {
                t.append(&small).expect("append");
            }
        })
    });
    group.finish();
}

criterion_group!(benches, bench_main, bench_delta);
criterion_main!(benches);
