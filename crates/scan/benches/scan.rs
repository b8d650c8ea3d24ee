//! Scan speed swept over selectivity (1/1024 … 1023/1024) and encoding,
//! unordered (count and gather) against ordered (gather sorted by the
//! filtered column).
//!
//! ```text
//! cargo bench -p quiverdb-scan --bench scan
//! ```

use std::hint::black_box;
use std::sync::Arc;

use arrow_array::{Int64Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use quiverdb_mapreducer::{Aggregate, AggregateKernel, AggregateSpec, GatherKernel, GatherSpec, MapExpr, Scalar};
use quiverdb_scan::{CmpOp, OrderBy, Predicate, ScanOptions, SortKey, scan, scan_order};
use quiverdb_storage::{Database, EncodingKind, Table, TableOptions, TableSnapshot};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Four full shards.
const ROWS: usize = 4 * 65_536;
/// Values are drawn from 0..SPAN (so a threshold of s·SPAN selects ≈ s).
const SPAN: i64 = 1 << 20;

/// A one-column table whose values suit `kind`, rebuilt into main storage.
fn table(kind: EncodingKind) -> (Database, Table) {
    let mut rng = StdRng::seed_from_u64(3);
    let values: Vec<i64> = match kind {
        EncodingKind::Sequence => (0..ROWS as i64).map(|i| i * SPAN / ROWS as i64).collect(),
        EncodingKind::RunEnd => (0..ROWS as i64).map(|i| (i / 600) * 600 * SPAN / ROWS as i64).collect(),
        EncodingKind::Dictionary => (0..ROWS).map(|_| rng.random_range(0..64) * (SPAN / 64) + 12_345_678_901).collect(),
        _ => (0..ROWS).map(|_| rng.random_range(0..SPAN)).collect(),
    };
    let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false)]));
    let db = Database::new();
    let t = db.create_table("t", &schema, TableOptions::default().with_background_rebuild(false)).expect("create");
    t.append(&RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(values))]).expect("batch")).expect("append");
    t.rebuild().expect("rebuild");
    (db, t)
}

fn filter(kind: EncodingKind, selectivity: f64) -> Predicate {
    let base = if kind == EncodingKind::Dictionary { 12_345_678_901 } else { 0 };
    Predicate::cmp(MapExpr::col(0), CmpOp::Lt, Scalar::Int(base + (selectivity * SPAN as f64) as i64))
}

fn count(snap: &TableSnapshot, f: &Predicate, opts: &ScanOptions) -> usize {
    let spec = Arc::new(AggregateSpec::new(vec![], vec![Aggregate::count_star()], snap.schema()).expect("spec"));
    let acc = scan(snap, Some(f), opts, || AggregateKernel::new(Arc::clone(&spec)), || spec.new_acc()).expect("scan");
    acc.num_groups()
}

fn bench(c: &mut Criterion) {
    let selectivities = [1.0 / 1024.0, 1.0 / 64.0, 1.0 / 8.0, 0.5, 1023.0 / 1024.0];
    let opts = ScanOptions::default().with_threads(1);
    for kind in [EncodingKind::BitPacked, EncodingKind::Dictionary, EncodingKind::RunEnd, EncodingKind::Sequence] {
        let (_db, t) = table(kind);
        let snap = t.snapshot();
        let spec = Arc::new(GatherSpec::columns(snap.schema(), None, 8192).expect("spec"));
        let mut group = c.benchmark_group(format!("scan i64 {kind}"));
        group.sample_size(20).throughput(Throughput::Elements(ROWS as u64));
        for s in selectivities {
            let f = filter(kind, s);
            let label = format!("kept {:.0}/1024", s * 1024.0);
            group.bench_function(BenchmarkId::new("unordered count", &label), |b| {
                b.iter(|| black_box(count(&snap, &f, &opts)))
            });
            group.bench_function(BenchmarkId::new("unordered gather", &label), |b| {
                b.iter(|| {
                    let acc = scan(&snap, Some(&f), &opts, || GatherKernel::new(Arc::clone(&spec)), || spec.new_acc())
                        .expect("scan");
                    black_box(acc.finish().expect("finish"))
                })
            });
            if s <= 1.0 / 8.0 {
                group.bench_function(BenchmarkId::new("ordered gather", &label), |b| {
                    b.iter(|| {
                        let key = [SortKey::asc(MapExpr::col(0))];
                        let acc = scan_order(
                            &snap,
                            Some(&f),
                            OrderBy::new(&key),
                            &opts,
                            || GatherKernel::new(Arc::clone(&spec)),
                            || spec.new_acc(),
                        )
                        .expect("scan");
                        black_box(acc.finish().expect("finish"))
                    })
                });
                group.bench_function(BenchmarkId::new("ordered top 100", &label), |b| {
                    b.iter(|| {
                        let key = [SortKey::desc(MapExpr::col(0))];
                        let acc = scan_order(
                            &snap,
                            Some(&f),
                            OrderBy::new(&key),
                            &opts.clone().with_limit(Some(100)),
                            || GatherKernel::new(Arc::clone(&spec)),
                            || spec.new_acc(),
                        )
                        .expect("scan");
                        black_box(acc.finish().expect("finish"))
                    })
                });
            }
        }
        group.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
