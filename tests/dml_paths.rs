//! DELETE and UPDATE change exactly the rows their WHERE names, through
//! every way a plan reaches execution in-process: `ctx.sql`, a plan
//! optimized first and then executed (`execute_logical_plan` analyses and
//! optimizes it again, as Postgres-wire servers built on DataFusion do), a
//! plan optimized several times, and a plan whose WHERE the optimizer
//! folds away. Each statement's outcome is compared with the same
//! statement applied to a plain `Vec` of the rows. (The Flight SQL paths
//! are in `flight_sql.rs`.)

#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{Int64Type, UInt64Type};
use arrow_array::{Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use datafusion::logical_expr::LogicalPlan;
use datafusion::prelude::SessionContext;
use quiverdb::server::{QuiverTable, ScanSettings};
use quiverdb::{Database, TableOptions};

/// The rows every test starts from: (id, value, name).
fn start_rows() -> Vec<(i64, i64, String)> {
    (1..=8).map(|id| (id, id * 10, format!("n{id}"))).collect()
}

/// A database with table `t` holding [`start_rows`], with `shard` rows per
/// shard; with `rebuild`, the rows are in main storage, else in deltas.
fn database(shard: usize, rebuild: bool) -> Database {
    let db = Database::new();
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("value", DataType::Int64, false),
        Field::new("name", DataType::Utf8, false),
    ]));
    let options = TableOptions::default().with_shard_capacity(shard).with_background_rebuild(false);
    let table = db.create_table("t", &schema, options).expect("create t");
    let rows = start_rows();
    let batch = RecordBatch::try_new(
        schema,
        vec![
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.0))),
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.1))),
            Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.2.clone()))),
        ],
    )
    .expect("batch");
    table.append(&batch).expect("append");
    if rebuild {
        table.rebuild().expect("rebuild");
    }
    db
}

/// The rows of `t`, sorted by id.
async fn rows(ctx: &SessionContext) -> Vec<(i64, i64, String)> {
    let batches = ctx.sql("SELECT id, value, name FROM t ORDER BY id").await.unwrap().collect().await.unwrap();
    let mut out = Vec::new();
    for b in &batches {
        let (id, value) = (b.column(0).as_primitive::<Int64Type>(), b.column(1).as_primitive::<Int64Type>());
        let name = datafusion::arrow::compute::cast(b.column(2), &DataType::Utf8).unwrap();
        let name = name.as_string::<i32>();
        for i in 0..b.num_rows() {
            out.push((id.value(i), value.value(i), name.value(i).to_string()));
        }
    }
    out
}

/// The affected-row count a DML plan returns.
fn count(batches: &[RecordBatch]) -> u64 {
    batches.iter().map(|b| b.column(0).as_primitive::<UInt64Type>().iter().flatten().sum::<u64>()).sum()
}

/// One statement and what it does to the rows.
struct Case {
    sql: &'static str,
    apply: fn(&mut Vec<(i64, i64, String)>) -> u64,
}

fn cases() -> Vec<Case> {
    vec![
        Case {
            sql: "DELETE FROM t WHERE id = 2",
            apply: |rows| {
                let before = rows.len();
                rows.retain(|r| r.0 != 2);
                (before - rows.len()) as u64
            },
        },
        Case {
            sql: "DELETE FROM t WHERE value > 50 AND name <> 'n7'",
            apply: |rows| {
                let before = rows.len();
                rows.retain(|r| !(r.1 > 50 && r.2 != "n7"));
                (before - rows.len()) as u64
            },
        },
        Case {
            sql: "UPDATE t SET value = value + 1 WHERE id = 3",
            apply: |rows| rows.iter_mut().filter(|r| r.0 == 3).map(|r| r.1 += 1).count() as u64,
        },
        Case {
            sql: "UPDATE t SET name = 'x' WHERE id IN (1, 8)",
            apply: |rows| rows.iter_mut().filter(|r| r.0 == 1 || r.0 == 8).map(|r| r.2 = "x".into()).count() as u64,
        },
        // The optimizer folds these WHEREs into an empty input.
        Case { sql: "DELETE FROM t WHERE 1 = 0", apply: |_| 0 },
        Case { sql: "UPDATE t SET value = 0 WHERE id IS NULL", apply: |_| 0 },
        // No WHERE: every row, as written.
        Case { sql: "UPDATE t SET value = -1", apply: |rows| rows.iter_mut().map(|r| r.1 = -1).count() as u64 },
    ]
}

/// How a statement's plan reaches execution.
#[derive(Debug, Clone, Copy)]
enum Path {
    /// `ctx.sql(..).collect()`.
    Sql,
    /// `state.optimize(plan)`, then `ctx.execute_logical_plan`.
    OptimizeThenExecute,
    /// Optimized three times, then executed.
    OptimizeThrice,
}

async fn run(ctx: &SessionContext, sql: &str, path: Path) -> datafusion::error::Result<Vec<RecordBatch>> {
    match path {
        Path::Sql => ctx.sql(sql).await?.collect().await,
        Path::OptimizeThenExecute | Path::OptimizeThrice => {
            let state = ctx.state();
            let mut plan: LogicalPlan = state.create_logical_plan(sql).await?;
            let times = if matches!(path, Path::OptimizeThrice) { 3 } else { 1 };
            for _ in 0..times {
                plan = state.optimize(&plan)?;
            }
            ctx.execute_logical_plan(plan).await?.collect().await
        }
    }
}

#[tokio::test]
async fn dml_changes_exactly_the_rows_its_where_names_on_every_path() {
    for (shard, rebuild) in [(1024, false), (1024, true), (3, true), (3, false)] {
        for path in [Path::Sql, Path::OptimizeThenExecute, Path::OptimizeThrice] {
            for case in cases() {
                let db = database(shard, rebuild);
                let ctx = quiverdb::session_context(&db);
                let mut expected = start_rows();
                let expected_count = (case.apply)(&mut expected);
                let what = format!("{} ({path:?}, shards of {shard}, rebuilt: {rebuild})", case.sql);
                let batches = run(&ctx, case.sql, path).await.unwrap_or_else(|e| panic!("{what}: {e}"));
                assert_eq!(count(&batches), expected_count, "affected rows of {what}");
                assert_eq!(rows(&ctx).await, expected, "table after {what}");
            }
        }
    }
}

/// A quiverdb table registered in a session without quiverdb's analysis
/// cannot trust the filters DataFusion hands it (none, for a WHERE its
/// optimizer folded away): DELETE and UPDATE fail there, changing nothing.
#[tokio::test]
async fn dml_outside_a_quiverdb_session_is_refused_not_widened() {
    let db = database(1024, true);
    let table = db.table("t").unwrap();
    let ctx = SessionContext::new();
    ctx.register_table("t", Arc::new(QuiverTable::new(table, Arc::new(HashMap::new()), ScanSettings::default())))
        .unwrap();
    for sql in ["DELETE FROM t WHERE 1 = 0", "DELETE FROM t WHERE id = 2", "UPDATE t SET value = 0 WHERE id = 3"] {
        let e = run(&ctx, sql, Path::Sql).await.expect_err(sql);
        assert!(e.to_string().contains("quiverdb session"), "{sql}: {e}");
    }
    assert_eq!(db.table("t").unwrap().row_count(), start_rows().len());
    assert_eq!(rows(&quiverdb::session_context(&db)).await, start_rows());
}
