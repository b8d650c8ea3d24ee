//! Nothing under `stream` allocates per row: a scan of 1M rows makes
//! exactly as many allocations as a scan of 10k rows (aggregates), and a
//! gather allocates per output batch, not per row.
//!
//! The counting allocator counts per thread, so other tests running in
//! parallel do not disturb the counts; scans run with one thread, on the
//! calling thread.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::Arc;

use arrow_array::{Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use quiverdb_mapreducer::{
    AggFunc, Aggregate, AggregateKernel, AggregateSpec, ArithOp, GatherKernel, GatherSpec, MapExpr, MapReducer, Scalar,
    ShardMapReducer,
};
use quiverdb_scan::{CmpOp, OrderBy, Predicate, ScanOptions, SortKey, scan, scan_order};
use quiverdb_storage::{Database, Table, TableOptions, TableSnapshot};

struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: forwards every call to `System` unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: the caller's contract is passed through to `System`.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract is passed through to `System`.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: the caller's contract is passed through to `System`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

fn allocations_of<T>(f: impl FnOnce() -> T) -> (u64, T) {
    let before = ALLOCATIONS.with(Cell::get);
    let out = f();
    (ALLOCATIONS.with(Cell::get) - before, out)
}

/// One shard (so per-shard setup is the same at both sizes): `rows` rows
/// rebuilt into main storage plus 3,000 rows in the delta.
fn table(rows: usize) -> (Database, Table) {
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("value", DataType::Int64, true),
        Field::new("category", DataType::Int64, false),
        Field::new("name", DataType::Utf8, false),
    ]));
    let db = Database::new();
    let options = TableOptions::default().with_shard_capacity(1 << 21).with_background_rebuild(false);
    let table = db.create_table("t", &schema, options).expect("create");
    let batch = |from: usize, n: usize| {
        RecordBatch::try_new(
            Arc::clone(&schema),
            vec![
                Arc::new(Int64Array::from_iter_values((from..from + n).map(|i| i as i64))),
                Arc::new(Int64Array::from_iter(
                    (from..from + n).map(|i| (i % 13 != 0).then_some(((i * 7919) % 1_000_000) as i64)),
                )),
                Arc::new(Int64Array::from_iter_values((from..from + n).map(|i| (i % 100) as i64))),
                Arc::new(StringArray::from_iter_values((from..from + n).map(|i| format!("name_{:02}", i % 50)))),
            ],
        )
        .expect("batch")
    };
    let mut at = 0;
    while at < rows {
        let n = 8192.min(rows - at);
        table.append(&batch(at, n)).expect("append");
        at += n;
    }
    table.rebuild().expect("rebuild");
    table.append(&batch(rows, 3000)).expect("append to the delta");
    (db, table)
}

fn aggregate_allocations(
    snap: &TableSnapshot,
    filter: Option<&Predicate>,
    keys: Vec<MapExpr>,
    aggs: Vec<Aggregate>,
) -> u64 {
    let spec = Arc::new(AggregateSpec::new(keys, aggs, snap.schema()).expect("spec"));
    let opts = ScanOptions::default().with_threads(1);
    let (n, acc) = allocations_of(|| {
        scan(snap, filter, &opts, || AggregateKernel::new(Arc::clone(&spec)), || spec.new_acc()).expect("scan")
    });
    assert!(acc.error().is_none(), "{:?}", acc.error());
    n
}

#[test]
fn aggregates_allocate_the_same_for_10k_and_1m_rows() {
    let (_a, small) = table(10_000);
    let (_b, large) = table(1_000_000);
    let (small, large) = (small.snapshot(), large.snapshot());
    assert_eq!(small.num_shards(), 1);
    assert_eq!(large.num_shards(), 1);
    let value = || MapExpr::col(1);
    let all = || {
        vec![
            Aggregate::count_star(),
            Aggregate::new(AggFunc::Count, value()),
            Aggregate::new(AggFunc::Sum, value()),
            Aggregate::new(AggFunc::Min, value()),
            Aggregate::new(AggFunc::Max, value()),
            Aggregate::new(AggFunc::Avg, value()),
            Aggregate::new(AggFunc::Min, MapExpr::col(3)),
        ]
    };
    let gt = Predicate::cmp(value(), CmpOp::Gt, Scalar::Int(500_000));
    let sparse = Predicate::cmp(MapExpr::col(0), CmpOp::Lt, Scalar::Int(3000)).or(Predicate::cmp(
        MapExpr::col(0).arith(ArithOp::Rem, MapExpr::lit(Scalar::Int(997), DataType::Int64)),
        CmpOp::Eq,
        Scalar::Int(3),
    ));
    let in_list =
        Predicate::InList { expr: MapExpr::col(2), values: (0..90).map(Scalar::Int).collect(), negated: false };
    let name = Predicate::cmp(MapExpr::col(3), CmpOp::Eq, Scalar::Bytes(b"name_07".to_vec()));
    let cases: Vec<(&str, Option<Predicate>, Vec<MapExpr>)> = vec![
        ("no filter", None, vec![]),
        ("value > 500000", Some(gt.clone()), vec![]),
        ("sparse ids", Some(sparse), vec![]),
        ("IN list", Some(in_list), vec![]),
        ("string equality", Some(name), vec![]),
        ("group by category", None, vec![MapExpr::col(2)]),
        (
            "group by category % 10, filtered",
            Some(gt),
            vec![MapExpr::col(2).arith(ArithOp::Rem, MapExpr::lit(Scalar::Int(10), DataType::Int64))],
        ),
        ("group by name", None, vec![MapExpr::col(3)]),
        ("group by two keys", None, vec![MapExpr::col(3), MapExpr::col(2)]),
    ];
    for (label, filter, keys) in cases {
        let a = aggregate_allocations(&small, filter.as_ref(), keys.clone(), all());
        let b = aggregate_allocations(&large, filter.as_ref(), keys, all());
        assert_eq!(a, b, "{label}: allocations differ between 10k rows ({a}) and 1M rows ({b})");
    }
}

#[test]
fn streaming_ids_allocates_nothing_per_row() {
    let (_a, small) = table(10_000);
    let (_b, large) = table(1_000_000);
    for snap in [small.snapshot(), large.snapshot()] {
        let spec = Arc::new(
            AggregateSpec::new(
                vec![MapExpr::col(2)],
                vec![Aggregate::new(AggFunc::Sum, MapExpr::col(1))],
                snap.schema(),
            )
            .expect("spec"),
        );
        let shard = snap.shard(0);
        let mut reducer =
            ShardMapReducer::open(shard, AggregateKernel::new(Arc::clone(&spec)).expect("kernel")).expect("open");
        // Warm up: all groups exist.
        let warm: Vec<u32> = (0..1024).collect();
        let mut acc = reducer.stream(spec.new_acc(), &warm);
        // Then interleaved main and delta ids, unsorted, as ordered scans produce.
        let rows = shard.rows() as u32;
        let mut ids = [0u32; 1024];
        let (n, a) = allocations_of(|| {
            for round in 0..50u32 {
                for (i, id) in ids.iter_mut().enumerate() {
                    let i = i as u32;
                    *id = if i.is_multiple_of(3) {
                        rows - 1 - (i * 7 + round) % 3000
                    } else {
                        (i * 7919 + round * 31) % (rows - 3000)
                    };
                }
                acc = reducer.stream(acc, &ids);
            }
            acc
        });
        assert!(a.error().is_none());
        assert_eq!(n, 0, "stream allocated {n} times for 51,200 ids of a {rows}-row shard");
    }
}

#[test]
fn gather_allocates_per_batch_not_per_row() {
    let (_a, small) = table(10_000);
    let (_b, large) = table(1_000_000);
    let run = |snap: &TableSnapshot| {
        let spec = Arc::new(GatherSpec::columns(snap.schema(), None, 8192).expect("spec"));
        let opts = ScanOptions::default().with_threads(1);
        allocations_of(|| {
            scan(snap, None, &opts, || GatherKernel::new(Arc::clone(&spec)), || spec.new_acc())
                .expect("scan")
                .finish()
                .expect("finish")
        })
    };
    let (a, small_batches) = run(&small.snapshot());
    let (b, large_batches) = run(&large.snapshot());
    let per_batch = (b - a) as f64 / (large_batches.len() - small_batches.len()) as f64;
    assert!(per_batch < 64.0, "{per_batch} allocations per 8,192-row batch");
    let rows: usize = large_batches.iter().map(RecordBatch::num_rows).sum();
    assert_eq!(rows, 1_003_000);
}

#[test]
fn ordered_top_k_allocates_the_same_for_10k_and_1m_rows() {
    let (_a, small) = table(10_000);
    let (_b, large) = table(1_000_000);
    let run = |snap: &TableSnapshot| {
        let spec = Arc::new(GatherSpec::columns(snap.schema(), Some(&[0, 1]), 8192).expect("spec"));
        let opts = ScanOptions::default().with_threads(1);
        let key = [SortKey::desc(MapExpr::col(1))];
        allocations_of(|| {
            scan_order(
                snap,
                None,
                OrderBy::new(&key).with_offset(5),
                &opts.clone().with_limit(Some(100)),
                || GatherKernel::new(Arc::clone(&spec)),
                || spec.new_acc(),
            )
            .expect("scan")
            .finish()
            .expect("finish")
        })
    };
    let (a, x) = run(&small.snapshot());
    let (b, y) = run(&large.snapshot());
    assert_eq!(x.iter().map(RecordBatch::num_rows).sum::<usize>(), 100);
    assert_eq!(y.iter().map(RecordBatch::num_rows).sum::<usize>(), 100);
    assert_eq!(a, b, "top-100 allocations: 10k rows {a}, 1M rows {b}");
}
