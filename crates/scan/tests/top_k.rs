//! Ordered scans with a limit over main storage whose zone maps seed the
//! shared k-th-best bound: deleted rows, NULLs and ties must never let a
//! block's zone edge stand for a row that is gone. Each result is compared
//! with a plain `Vec` sorted the same way.

use std::sync::Arc;

use arrow_array::{Array, Int64Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema};
use quiverdb_mapreducer::{GatherKernel, GatherSpec, MapExpr, Scalar};
use quiverdb_scan::{CmpOp, OrderBy, Predicate, ScanOptions, SortKey, delete_where, scan_order};
use quiverdb_storage::{Database, Table, TableOptions};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Rows `(id, value)`; `value` is NULL for some rows and repeats often.
fn table(rows: usize, seed: u64) -> (Database, Table, Vec<(i64, Option<i64>)>) {
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("value", DataType::Int64, true),
    ]));
    let db = Database::new();
    let options = TableOptions::default().with_shard_capacity(8192).with_background_rebuild(false);
    let table = db.create_table("t", &schema, options).expect("create");
    let mut rng = StdRng::seed_from_u64(seed);
    let data: Vec<(i64, Option<i64>)> =
        (0..rows as i64).map(|i| (i, rng.random_bool(0.95).then(|| rng.random_range(0..5_000)))).collect();
    for chunk in data.chunks(3000) {
        let batch = RecordBatch::try_new(
            Arc::clone(&schema),
            vec![
                Arc::new(Int64Array::from_iter_values(chunk.iter().map(|r| r.0))),
                Arc::new(Int64Array::from_iter(chunk.iter().map(|r| r.1))),
            ],
        )
        .expect("batch");
        table.append(&batch).expect("append");
    }
    table.rebuild().expect("rebuild");
    (db, table, data)
}

/// The values of the top `k` rows, as sorting a `Vec` gives them.
fn expected(data: &[(i64, Option<i64>)], key: &SortKey, k: usize) -> Vec<Option<i64>> {
    let mut v: Vec<Option<i64>> = data.iter().map(|r| r.1).collect();
    v.sort_by(|a, b| match (a, b) {
        (None, None) => std::cmp::Ordering::Equal,
        (None, Some(_)) => {
            if key.nulls_first {
                std::cmp::Ordering::Less
            } else {
                std::cmp::Ordering::Greater
            }
        }
        (Some(_), None) => {
            if key.nulls_first {
                std::cmp::Ordering::Greater
            } else {
                std::cmp::Ordering::Less
            }
        }
        (Some(x), Some(y)) => {
            if key.descending {
                y.cmp(x)
            } else {
                x.cmp(y)
            }
        }
    });
    v.truncate(k);
    v
}

fn top_k(table: &Table, key: &SortKey, k: usize, threads: usize) -> Vec<(i64, Option<i64>)> {
    let snapshot = table.snapshot();
    let spec = Arc::new(GatherSpec::columns(snapshot.schema(), None, 1024).expect("spec"));
    let options = ScanOptions::default().with_threads(threads);
    let batches = scan_order(
        &snapshot,
        None,
        OrderBy::new(std::slice::from_ref(key)),
        &options.clone().with_limit(Some(k)),
        || GatherKernel::new(Arc::clone(&spec)),
        || spec.new_acc(),
    )
    .expect("ordered scan")
    .finish()
    .expect("finish");
    let mut out = Vec::new();
    for b in &batches {
        let id = b.column(0).as_any().downcast_ref::<Int64Array>().expect("id");
        let value = b.column(1).as_any().downcast_ref::<Int64Array>().expect("value");
        out.extend((0..b.num_rows()).map(|i| (id.value(i), value.is_valid(i).then(|| value.value(i)))));
    }
    out
}

fn keys() -> Vec<SortKey> {
    let mut out = Vec::new();
    for descending in [true, false] {
        for nulls_first in [true, false] {
            out.push(SortKey { expr: MapExpr::col(1), descending, nulls_first });
        }
    }
    out
}

/// Checks every key order and several `k` against the reference; each
/// returned row must be a live row with its own value.
fn check(table: &Table, live: &[(i64, Option<i64>)], what: &str) {
    let by_id: std::collections::HashMap<i64, Option<i64>> = live.iter().copied().collect();
    for key in keys() {
        for k in [1, 7, 100, 1000, live.len() + 3] {
            for threads in [1, 2] {
                let got = top_k(table, &key, k, threads);
                let values: Vec<Option<i64>> = got.iter().map(|r| r.1).collect();
                assert_eq!(
                    values,
                    expected(live, &key, k),
                    "{what}: desc={} nulls_first={} k={k} threads={threads}",
                    key.descending,
                    key.nulls_first
                );
                let mut ids: Vec<i64> = got.iter().map(|r| r.0).collect();
                ids.sort_unstable();
                ids.dedup();
                assert_eq!(ids.len(), got.len(), "{what}: a row came back twice");
                assert!(
                    got.iter().all(|(id, v)| by_id.get(id) == Some(v)),
                    "{what}: a row that is not live, or not its own value"
                );
            }
        }
    }
}

#[test]
fn top_k_over_zone_maps_matches_a_sorted_vec() {
    let (_db, table, data) = table(50_000, 7);
    check(&table, &data, "rebuilt table");
}

/// Deleting the best rows leaves their blocks' zone maps pointing at
/// values no live row has: such blocks must not seed the bound.
#[test]
fn top_k_after_deleting_the_best_rows() {
    let (_db, table, data) = table(50_000, 11);
    let options = ScanOptions::default();
    // The highest and lowest values, spread over every shard and block.
    let gone = |v: i64| !(10..4_990).contains(&v);
    let p = Predicate::cmp(MapExpr::col(1), CmpOp::Lt, Scalar::Int(10)).or(Predicate::cmp(
        MapExpr::col(1),
        CmpOp::GtEq,
        Scalar::Int(4_990),
    ));
    let deleted = delete_where(&table, Some(&p), &options).expect("delete");
    let live: Vec<(i64, Option<i64>)> = data.iter().copied().filter(|r| !r.1.is_some_and(gone)).collect();
    assert_eq!(deleted, data.len() - live.len());
    assert!(deleted > 100, "the deletes must cover more rows than the largest small k");
    check(&table, &live, "after deleting the extremes");
}
