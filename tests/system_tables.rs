//! `quiverdb.system.tables`, `system.columns` and `system.memory` report
//! what the tables hold, compared with the storage API's own figures, and
//! the schema `system` cannot be written to.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{Array, RecordBatch};
use quiverdb::{Database, SessionOptions, TableOptions};

async fn rows(ctx: &datafusion::prelude::SessionContext, sql: &str) -> Vec<RecordBatch> {
    quiverdb::sql(ctx, sql).await.unwrap().collect().await.unwrap()
}

/// Column `name` of `batches` as text, per row.
fn text(batches: &[RecordBatch], name: &str) -> Vec<String> {
    batches
        .iter()
        .flat_map(|b| {
            let c = b.column_by_name(name).unwrap().as_string::<i32>();
            (0..c.len()).map(|i| c.value(i).to_string()).collect::<Vec<_>>()
        })
        .collect()
}

/// Column `name` of `batches` as integers, per row.
fn ints(batches: &[RecordBatch], name: &str) -> Vec<Option<i64>> {
    batches
        .iter()
        .flat_map(|b| {
            let c = b.column_by_name(name).unwrap().as_primitive::<Int64Type>();
            (0..c.len()).map(|i| c.is_valid(i).then(|| c.value(i))).collect::<Vec<_>>()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn system_tables_report_what_storage_holds() {
    let db = Database::new();
    let options = SessionOptions {
        table_options: TableOptions::default().with_shard_capacity(1000).with_background_rebuild(false),
        memory_limit: Some(256 << 20),
        ..SessionOptions::default()
    };
    let ctx = quiverdb::session_context_with(&db, options);
    rows(&ctx, "CREATE TABLE t (id BIGINT NOT NULL, name VARCHAR, score DOUBLE)").await;
    rows(
        &ctx,
        "INSERT INTO t SELECT value, 'name ' || CAST(value % 7 AS VARCHAR), CAST(value AS DOUBLE) / 3 \
         FROM generate_series(1, 2500)",
    )
    .await;
    rows(&ctx, "CREATE SCHEMA s").await;
    rows(&ctx, "CREATE TABLE s.u AS VALUES (1, 'x'), (2, NULL)").await;
    db.table("t").unwrap().rebuild().unwrap();
    rows(&ctx, "DELETE FROM t WHERE id <= 10").await;

    let tables = rows(&ctx, "SELECT * FROM quiverdb.system.tables ORDER BY table_schema, table_name").await;
    assert_eq!(text(&tables, "table_schema"), ["public", "s"]);
    assert_eq!(text(&tables, "table_name"), ["t", "u"]);
    for (i, stored) in ["t", "s.u"].iter().enumerate() {
        let table = db.table(stored).unwrap();
        let usage = table.memory_usage();
        let expect = |name: &str, v: usize| assert_eq!(ints(&tables, name)[i], Some(v as i64), "{stored}: {name}");
        expect("rows", table.row_count());
        expect("shards", table.snapshot().num_shards());
        expect("main_rows", usage.main_rows);
        expect("delta_rows", usage.delta_rows);
        expect("main_bytes", usage.main_bytes());
        expect("delta_bytes", usage.delta_bytes());
        expect("delete_bytes", usage.delete_bytes);
        expect("index_bytes", usage.index_bytes);
        expect("total_bytes", usage.total_bytes());
    }
    assert_eq!(ints(&tables, "rows"), [Some(2490), Some(2)]);
    assert_eq!(ints(&tables, "main_rows")[0], Some(2500), "rebuilt before the delete");

    let columns = rows(&ctx, "SELECT * FROM quiverdb.system.columns WHERE table_name = 't'").await;
    assert_eq!(text(&columns, "column_name"), ["id", "name", "score"]);
    assert_eq!(text(&columns, "data_type"), ["Int64", "Utf8View", "Float64"]);
    let usage = db.table("t").unwrap().memory_usage();
    for (i, column) in usage.columns.iter().enumerate() {
        assert_eq!(ints(&columns, "main_bytes")[i], Some(column.main_bytes as i64));
        assert_eq!(ints(&columns, "dictionary_bytes")[i], Some(column.dictionary_bytes as i64));
        assert_eq!(ints(&columns, "total_bytes")[i], Some(column.total_bytes() as i64));
    }
    // The ids are one sequence per shard; the seven names a dictionary.
    let encodings = text(&columns, "encodings");
    assert!(encodings[0].starts_with("sequence (2500 rows"), "{encodings:?}");
    assert!(encodings[1].starts_with("dictionary (2500 rows"), "{encodings:?}");

    let memory = rows(&ctx, "SELECT name, bytes FROM quiverdb.system.memory").await;
    let figures: BTreeMap<String, Option<i64>> =
        text(&memory, "name").into_iter().zip(ints(&memory, "bytes")).collect();
    let all_tables: usize = ["t", "s.u"].iter().map(|t| db.table(t).unwrap().memory_usage().total_bytes()).sum();
    assert_eq!(figures["tables"], Some(all_tables as i64));
    assert_eq!(figures["query_limit"], Some(256 << 20));
    assert!(figures["process_rss"].is_some_and(|b| b > 1 << 20), "{figures:?}");
    assert!(figures["query_reserved"].is_some_and(|b| b >= 0), "{figures:?}");

    // Joins and filters over them work as over any table.
    let big = rows(
        &ctx,
        "SELECT c.table_name, SUM(c.total_bytes) = MAX(t.main_bytes + t.delta_bytes) AS adds_up \
         FROM quiverdb.system.columns c JOIN quiverdb.system.tables t USING (table_schema, table_name) \
         GROUP BY c.table_name ORDER BY c.table_name",
    )
    .await;
    let adds_up = big[0].column(1).as_boolean();
    assert!((0..adds_up.len()).all(|i| adds_up.value(i)), "columns add up to their tables");

    // The schema is quiverdb's own.
    for sql in [
        "CREATE TABLE quiverdb.system.mine (a INT)",
        "DROP TABLE quiverdb.system.tables",
        "CREATE SCHEMA system",
        "DROP SCHEMA system",
        "INSERT INTO quiverdb.system.tables VALUES ('a', 'b', 1, 1, 1, 1, 1, 1, 1, 1)",
    ] {
        let e = match quiverdb::sql(&ctx, sql).await {
            Ok(df) => df.collect().await.map(|_| ()).unwrap_err(),
            Err(e) => e,
        };
        assert!(!e.to_string().is_empty(), "{sql}");
    }
    let names = rows(&ctx, "SELECT schema_name FROM information_schema.schemata ORDER BY schema_name").await;
    assert!(text(&names, "schema_name").contains(&"system".to_string()));
}
