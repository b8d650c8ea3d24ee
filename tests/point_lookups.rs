//! SQL point lookups through the primary-key index (`QuiverLookupExec`)
//! return what a scan returns.
//!
//! Every query runs on three sides: a quiverdb database whose tables have
//! primary keys (where key filters plan a lookup), the same tables and
//! statements in a quiverdb database without primary keys (always a scan),
//! and plain DataFusion over `MemTable` copies of the reference's rows.
//! Results are compared as sorted formatted rows (plus column names); the
//! EXPLAIN of the keyed side must show `QuiverLookupExec` for the queries
//! whose filters fix every key column, and must not for the others.
//!
//! The tables span many shards (500 rows each), with rows rebuilt into
//! main storage, rows only in deltas, and rows deleted, updated (key and
//! non-key columns) and re-inserted through SQL; the whole query list runs
//! again after a rebuild and a second round of changes. Key types: BIGINT,
//! INT, SMALLINT, TINYINT, INT/BIGINT UNSIGNED, VARCHAR, BYTEA, DECIMAL,
//! DATE, TIMESTAMP (with and without zone), TIME, composite keys (packed
//! and not, declared in another order than the columns), and a DOUBLE key
//! (never looked up). Prepared statements, joins, subqueries and views
//! with key filters inside, writes fed by lookups, ALTER TABLE, TRUNCATE,
//! INSERT OVERWRITE, lookups racing background rebuilds, and snapshot
//! consistency (a lookup sees the session's own INSERT and DELETE; a
//! planned lookup and a planned scan read the same snapshot) are covered
//! too.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use arrow_array::RecordBatch;
use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
use datafusion::common::ScalarValue;
use datafusion::datasource::MemTable;
use datafusion::error::DataFusionError;
use datafusion::physical_plan::{ExecutionPlan, collect, displayable};
use datafusion::prelude::SessionContext;
use quiverdb::{Database, SessionOptions, TableOptions};

const LOOKUP: &str = "QuiverLookupExec";

/// Whether the keyed side must plan a lookup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Plan {
    /// Every key column is fixed: `QuiverLookupExec` must appear.
    Lookup,
    /// Not eligible: it must not appear.
    Scan,
    /// Either (coercions and the optimizer decide); only the result counts.
    Any,
}
use Plan::{Any, Lookup, Scan};

/// One table, created with and without its primary key.
struct TableDef {
    name: &'static str,
    columns: &'static str,
    key: &'static str,
    /// `INSERT` statements filling it (run on both sides).
    fill: &'static [&'static str],
}

fn tables() -> Vec<TableDef> {
    vec![
        TableDef {
            name: "k",
            columns: "id BIGINT NOT NULL, value BIGINT, name VARCHAR, opt BIGINT",
            key: "id",
            // ids 3v - 1500: -1497, -1494, ..., 13500 (gaps at the others).
            fill: &["INSERT INTO k SELECT 3 * value - 1500, (value * 37) % 1000, 'n' || CAST(value AS VARCHAR), \
                 CASE WHEN value % 4 = 0 THEN NULL ELSE value END FROM generate_series(1, 2750)"],
        },
        TableDef {
            name: "other",
            columns: "oid BIGINT NOT NULL, kid BIGINT, note VARCHAR",
            key: "oid",
            fill: &["INSERT INTO other SELECT value, 3 * ((value * 7) % 3000) - 1500, 'o' || CAST(value AS VARCHAR) \
                     FROM generate_series(1, 1000)"],
        },
        TableDef {
            name: "k32",
            columns: "id32 INT NOT NULL, v BIGINT",
            key: "id32",
            fill: &[
                "INSERT INTO k32 SELECT CAST((value - 1000) * 1000 AS INT), value FROM generate_series(1, 2000)",
                "INSERT INTO k32 VALUES (2147483647, -1), (-2147483648, -2)",
            ],
        },
        TableDef {
            name: "ku",
            columns: "u INT UNSIGNED NOT NULL, v BIGINT",
            key: "u",
            fill: &[
                "INSERT INTO ku SELECT CAST(value * 7 AS INT UNSIGNED) AS u, value AS v FROM generate_series(0, 1500)",
                "INSERT INTO ku VALUES (4294967295, -1)",
            ],
        },
        TableDef {
            name: "ku64",
            columns: "u BIGINT UNSIGNED NOT NULL, v BIGINT",
            key: "u",
            fill: &[
                "INSERT INTO ku64 SELECT CAST(value AS BIGINT UNSIGNED) AS u, value AS v FROM generate_series(0, 600)",
                "INSERT INTO ku64 VALUES (18446744073709551615, -1), (9223372036854775808, -2)",
            ],
        },
        TableDef {
            name: "ks",
            columns: "s VARCHAR NOT NULL, v BIGINT",
            key: "s",
            fill: &[
                "INSERT INTO ks SELECT 'key' || CAST(value AS VARCHAR), value FROM generate_series(1, 2000)",
                "INSERT INTO ks VALUES ('', -1), ('ünï', -2), ('Key1', -3), ('key1 ', -4)",
                "INSERT INTO ks SELECT repeat('a-long-string-key-', 4) || CAST(value AS VARCHAR), value \
                 FROM generate_series(1, 300)",
            ],
        },
        TableDef {
            name: "kc",
            columns: "a INT NOT NULL, b BIGINT NOT NULL, c VARCHAR",
            key: "a, b",
            fill: &["INSERT INTO kc SELECT CAST(value % 20 AS INT), value / 20, 'c' || CAST(value AS VARCHAR) \
                     FROM generate_series(0, 3999)"],
        },
        TableDef {
            name: "kdec",
            columns: "d DECIMAL(12,2) NOT NULL, v BIGINT",
            key: "d",
            fill: &[
                "INSERT INTO kdec SELECT CAST(CAST(value AS VARCHAR) || '.' || lpad(CAST(value % 100 AS VARCHAR), 2, '0') \
                 AS DECIMAL(12,2)), value FROM generate_series(1, 2000)",
                "INSERT INTO kdec VALUES (CAST('-5.25' AS DECIMAL(12,2)), -1), (CAST('0' AS DECIMAL(12,2)), -2)",
            ],
        },
        TableDef {
            name: "kc2",
            columns: "a INT NOT NULL, x BIGINT, b VARCHAR NOT NULL",
            // Key columns in another order than the table's.
            key: "b, a",
            fill: &["INSERT INTO kc2 SELECT CAST(value % 7 AS INT), value, 'b' || CAST(value / 7 AS VARCHAR) \
                     FROM generate_series(0, 2099)"],
        },
        TableDef {
            name: "kts",
            columns: "ts TIMESTAMP NOT NULL, v BIGINT",
            key: "ts",
            fill: &[
                "INSERT INTO kts SELECT arrow_cast(value * 1500000000, 'Timestamp(Nanosecond, None)'), value \
                 FROM generate_series(0, 1199)",
                "INSERT INTO kts VALUES (TIMESTAMP '1969-12-31 23:59:59', -1), (TIMESTAMP '1900-01-01 00:00:00.000000001', -2)",
            ],
        },
        TableDef {
            name: "ksm",
            columns: "k SMALLINT NOT NULL, v BIGINT",
            key: "k",
            fill: &["INSERT INTO ksm SELECT CAST(value * 3 - 30000 AS SMALLINT), value FROM generate_series(0, 1100)"],
        },
        TableDef {
            name: "kc3",
            columns: "a INT NOT NULL, s VARCHAR NOT NULL, v BIGINT",
            key: "a, s",
            fill: &["INSERT INTO kc3 SELECT CAST(value % 50 - 25 AS INT), 's' || CAST(value / 50 AS VARCHAR), value \
                     FROM generate_series(0, 1999)"],
        },
        TableDef {
            name: "kc4",
            columns: "d DECIMAL(12,2) NOT NULL, s VARCHAR NOT NULL, v BIGINT",
            key: "d, s",
            fill: &["INSERT INTO kc4 SELECT CAST(CAST(value % 30 - 15 AS VARCHAR) || '.25' AS DECIMAL(12,2)), \
                     's' || CAST(value / 30 AS VARCHAR), value FROM generate_series(0, 1499)"],
        },
        TableDef {
            name: "kc5",
            columns: "x SMALLINT NOT NULL, y INT NOT NULL, z DATE NOT NULL, v BIGINT",
            key: "x, y, z",
            fill: &["INSERT INTO kc5 SELECT CAST(value % 5 - 2 AS SMALLINT), CAST(value / 5 % 40 - 20 AS INT), \
                     arrow_cast(arrow_cast(value / 200 - 3, 'Int32'), 'Date32'), value FROM generate_series(0, 1399)"],
        },
        TableDef {
            name: "kd",
            columns: "d DATE NOT NULL, v BIGINT",
            key: "d",
            // 2024-01-01 is day 19723 of the Unix epoch.
            fill: &[
                "INSERT INTO kd SELECT arrow_cast(arrow_cast(value + 19723, 'Int32'), 'Date32'), value \
                 FROM generate_series(0, 1499)",
                "INSERT INTO kd VALUES (DATE '1969-12-31', -1), (DATE '0001-01-01', -2), (DATE '1900-06-15', -3)",
            ],
        },
    ]
}

/// The keyed database, the reference database (same tables without
/// primary keys), and a session over each.
struct Sides {
    keyed_db: Database,
    reference_db: Database,
    keyed: SessionContext,
    reference: SessionContext,
}

fn session(db: &Database) -> SessionContext {
    let options = SessionOptions {
        table_options: TableOptions::default().with_shard_capacity(500).with_background_rebuild(false),
        target_partitions: 4,
        ..SessionOptions::default()
    };
    quiverdb::session_context_with(db, options)
}

impl Sides {
    fn new() -> Self {
        let (keyed_db, reference_db) = (Database::new(), Database::new());
        let (keyed, reference) = (session(&keyed_db), session(&reference_db));
        Self { keyed_db, reference_db, keyed, reference }
    }

    /// Runs a statement on both sides; both must succeed.
    async fn both(&self, sql: &str) {
        for (side, ctx) in [("keyed", &self.keyed), ("reference", &self.reference)] {
            if let Err(e) = run(ctx, sql).await {
                panic!("{side}: {sql}: {e}");
            }
        }
    }

    /// Creates and fills `tables` on both sides.
    async fn create(&self, tables: &[TableDef]) {
        for t in tables {
            let keyed = format!("CREATE TABLE {} ({}, PRIMARY KEY ({}))", t.name, t.columns, t.key);
            run(&self.keyed, &keyed).await.unwrap();
            let plain = format!("CREATE TABLE {} ({})", t.name, t.columns);
            run(&self.reference, &plain).await.unwrap();
            for fill in t.fill {
                self.both(fill).await;
            }
        }
    }

    fn rebuild(&self, names: &[&str]) {
        for name in names {
            self.keyed_db.table(name).unwrap().rebuild().unwrap();
            self.reference_db.table(name).unwrap().rebuild().unwrap();
        }
    }

    /// Plain DataFusion over `MemTable` copies of the reference's tables.
    async fn memory(&self, names: &[&str]) -> SessionContext {
        let ctx = SessionContext::new();
        for name in names {
            let df = quiverdb::sql(&self.reference, &format!("SELECT * FROM {name}")).await.unwrap();
            let schema = Arc::new(df.schema().as_arrow().clone());
            let batches = df.collect().await.unwrap();
            let table = MemTable::try_new(schema, vec![batches]).unwrap();
            ctx.register_table(*name, Arc::new(table)).unwrap();
        }
        ctx
    }
}

/// A statement's column names and batches.
async fn run(ctx: &SessionContext, sql: &str) -> Result<(Vec<String>, Vec<RecordBatch>), DataFusionError> {
    let df = quiverdb::sql(ctx, sql).await?;
    let names = df.schema().fields().iter().map(|f| f.name().clone()).collect();
    Ok((names, df.collect().await?))
}

/// A statement on a plain DataFusion session.
async fn run_plain(ctx: &SessionContext, sql: &str) -> Result<(Vec<String>, Vec<RecordBatch>), DataFusionError> {
    let df = ctx.sql(sql).await?;
    let names = df.schema().fields().iter().map(|f| f.name().clone()).collect();
    Ok((names, df.collect().await?))
}

/// Every row of `batches`, formatted, in order.
fn formatted(batches: &[RecordBatch]) -> Vec<String> {
    let options = FormatOptions::default().with_null("NULL");
    let mut out = Vec::new();
    for b in batches {
        let columns: Vec<ArrayFormatter<'_>> =
            b.columns().iter().map(|c| ArrayFormatter::try_new(c.as_ref(), &options).unwrap()).collect();
        for i in 0..b.num_rows() {
            out.push(columns.iter().map(|c| c.value(i).to_string()).collect::<Vec<_>>().join(" | "));
        }
    }
    out
}

fn sorted(batches: &[RecordBatch]) -> Vec<String> {
    let mut rows = formatted(batches);
    rows.sort();
    rows
}

/// A result as compared: column names and sorted rows, or the failure.
type Outcome = Result<(Vec<String>, Vec<String>), String>;

fn outcome(result: Result<(Vec<String>, Vec<RecordBatch>), DataFusionError>) -> Outcome {
    result.map(|(names, batches)| (names, sorted(&batches))).map_err(|e| e.to_string())
}

/// The physical plan `EXPLAIN sql` shows.
async fn physical_plan(ctx: &SessionContext, sql: &str) -> String {
    let (_, batches) = run(ctx, &format!("EXPLAIN {sql}")).await.unwrap();
    let (mut plan, mut physical) = (String::new(), false);
    for b in &batches {
        let (kind, text) = (formatted(&[b.project(&[0]).unwrap()]), formatted(&[b.project(&[1]).unwrap()]));
        for (kind, text) in kind.iter().zip(&text) {
            if kind == "physical_plan" {
                physical = true;
                plan.push_str(text);
            }
        }
    }
    assert!(physical, "no physical plan in EXPLAIN {sql}: {:?}", formatted(&batches));
    plan
}

/// Collects every mismatch, so one run reports them all.
#[derive(Default)]
struct Failures(Vec<String>);

impl Failures {
    fn add(&mut self, what: String) {
        eprintln!("MISMATCH: {what}");
        self.0.push(what);
    }

    fn finish(self) {
        assert!(self.0.is_empty(), "{} mismatches:\n{}", self.0.len(), self.0.join("\n---\n"));
    }
}

/// Runs `sql` on all three sides (`memory` may be `None` for statements
/// plain DataFusion cannot run the same way) and checks results and plan.
async fn check(sides: &Sides, memory: Option<&SessionContext>, sql: &str, plan: Plan, failures: &mut Failures) {
    let keyed = outcome(run(&sides.keyed, sql).await);
    let reference = outcome(run(&sides.reference, sql).await);
    if keyed != reference {
        failures.add(format!("{sql}\n  keyed:     {keyed:?}\n  reference: {reference:?}"));
    }
    if let Some(memory) = memory {
        let plain = outcome(run_plain(memory, sql).await);
        if reference != plain {
            failures.add(format!("{sql}\n  reference: {reference:?}\n  datafusion: {plain:?}"));
        }
    }
    if keyed.is_err() {
        return;
    }
    let text = physical_plan(&sides.keyed, sql).await;
    let found = text.contains(LOOKUP);
    match plan {
        Lookup if !found => failures.add(format!("{sql}\n  expected a lookup, plan:\n{text}")),
        Scan if found => failures.add(format!("{sql}\n  expected no lookup, plan:\n{text}")),
        _ => {}
    }
}

/// `sql LIMIT n` without ORDER BY: the keyed side returns `min(n, all)`
/// rows, each one of the reference's rows of `sql` (as a multiset).
async fn check_limit(sides: &Sides, sql: &str, n: usize, offset: usize, failures: &mut Failures) {
    let limited = format!("{sql} LIMIT {n} OFFSET {offset}");
    let (_, got) = run(&sides.keyed, &limited).await.unwrap();
    let (_, all) = run(&sides.reference, sql).await.unwrap();
    let (got, mut all) = (sorted(&got), sorted(&all));
    if got.len() != n.min(all.len().saturating_sub(offset)) {
        failures.add(format!("{limited}\n  {} rows: {got:?}\n  reference without limit: {all:?}", got.len()));
    }
    for row in &got {
        match all.iter().position(|r| r == row) {
            Some(i) => {
                all.remove(i);
            }
            None => failures.add(format!("{limited}\n  row {row} is not (or no longer) in the reference")),
        }
    }
    let text = physical_plan(&sides.keyed, &limited).await;
    if !text.contains(LOOKUP) {
        failures.add(format!("{limited}\n  expected a lookup, plan:\n{text}"));
    }
}

/// `SELECT ... WHERE id IN (<ids>)`: a list of `n` ids in and around the
/// table's, some present, some deleted, some absent, repeated ones.
fn id_list(n: usize, seed: u64) -> String {
    let mut x = seed;
    let mut ids = Vec::with_capacity(n);
    for _ in 0..n {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ids.push(((x >> 33) % 16000) as i64 - 1600);
    }
    ids.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
}

/// The queries run in every phase, with whether each must be a lookup.
fn queries() -> Vec<(String, Plan)> {
    let some = "3, 3, 6, 1, 0, 30, 60, 90, 100090, 120, 9003, 99999, 6753, 6753, 13500, 12000, -1497, 1002";
    let big = id_list(400, 7);
    let q: Vec<(String, Plan)> = vec![
        // Single keys: present in main, updated, deleted, absent, in deltas.
        ("SELECT * FROM k WHERE id = 33".into(), Lookup),
        ("SELECT * FROM k WHERE id = 3".into(), Lookup),
        ("SELECT * FROM k WHERE id = 6".into(), Lookup),
        ("SELECT * FROM k WHERE id = 0".into(), Lookup),
        ("SELECT * FROM k WHERE id = 300".into(), Lookup),
        ("SELECT * FROM k WHERE id = 1".into(), Lookup),
        ("SELECT * FROM k WHERE id = 99999".into(), Lookup),
        ("SELECT * FROM k WHERE id = -1497".into(), Lookup),
        ("SELECT * FROM k WHERE id = 6753".into(), Lookup),
        ("SELECT * FROM k WHERE id = 9000".into(), Lookup),
        ("SELECT * FROM k WHERE id = 9003".into(), Lookup),
        ("SELECT * FROM k WHERE id = 12000".into(), Lookup),
        ("SELECT * FROM k WHERE 13500 = id".into(), Lookup),
        ("SELECT * FROM k WHERE 30 = id".into(), Lookup),
        ("SELECT * FROM k WHERE id = 60".into(), Lookup),
        ("SELECT * FROM k WHERE id = 90".into(), Lookup),
        ("SELECT * FROM k WHERE id = 100090".into(), Lookup),
        ("SELECT * FROM k WHERE id = 120".into(), Lookup),
        ("SELECT * FROM k WHERE id = 1002".into(), Lookup),
        ("SELECT * FROM k WHERE id = 16 + 17".into(), Lookup),
        ("SELECT * FROM k WHERE id = CAST(33 AS INT)".into(), Any),
        ("SELECT * FROM k WHERE id = '33'".into(), Any),
        ("SELECT * FROM k WHERE id = 33.0".into(), Any),
        ("SELECT * FROM k WHERE NOT (id <> 33)".into(), Any),
        // Lists, duplicates, NULLs, ORs.
        (format!("SELECT * FROM k WHERE id IN ({some})"), Lookup),
        ("SELECT * FROM k WHERE id IN (3, NULL, 6)".into(), Any),
        ("SELECT * FROM k WHERE id IN (3)".into(), Any),
        ("SELECT * FROM k WHERE id IN (1, 2, 4)".into(), Lookup),
        ("SELECT * FROM k WHERE id = NULL".into(), Any),
        ("SELECT * FROM k WHERE id IN (NULL)".into(), Any),
        ("SELECT * FROM k WHERE id IN (NULL, NULL)".into(), Any),
        ("SELECT * FROM k WHERE id = 3 OR id = 6".into(), Lookup),
        ("SELECT * FROM k WHERE id = 1 OR id = 2".into(), Lookup),
        ("SELECT * FROM k WHERE id = 3 OR id = 6 OR id = 2 OR id = 9003 OR id = 0".into(), Lookup),
        ("SELECT * FROM k WHERE id = 3 OR 12000 = id".into(), Lookup),
        ("SELECT * FROM k WHERE id IN (3, 6) OR id = 30".into(), Lookup),
        ("SELECT * FROM k WHERE id IN (3, 6, 9, 30, 9003) AND id IN (6, 30, 33, 9003)".into(), Lookup),
        ("SELECT * FROM k WHERE id = 3 AND id = 6".into(), Any),
        ("SELECT * FROM k WHERE id IN (3, 6, 33) AND id > 5".into(), Lookup),
        (format!("SELECT * FROM k WHERE id IN ({big})"), Lookup),
        (format!("SELECT id, name FROM k WHERE id IN ({big}) AND value < 500"), Lookup),
        // Key filter and other filters.
        (format!("SELECT * FROM k WHERE id IN ({some}) AND value > 500"), Lookup),
        (format!("SELECT * FROM k WHERE id IN ({big}) AND name LIKE 'n5%'"), Lookup),
        (format!("SELECT * FROM k WHERE id IN ({big}) AND opt IS NULL"), Lookup),
        (format!("SELECT * FROM k WHERE id IN ({some}) AND opt IS NULL"), Lookup),
        (format!("SELECT * FROM k WHERE id IN ({some}) AND opt IS NOT NULL AND value < 300"), Lookup),
        ("SELECT * FROM k WHERE id = 33 AND value = 0".into(), Lookup),
        (format!("SELECT * FROM k WHERE id IN ({some}) AND NOT (opt > 600)"), Lookup),
        (format!("SELECT id FROM k WHERE id IN ({some}) AND (opt > 600) IS NOT TRUE"), Lookup),
        (format!("SELECT id FROM k WHERE id IN ({some}) AND coalesce(opt, -1) < 0"), Lookup),
        ("SELECT * FROM k WHERE (id = 3 OR id = 6) AND (value > 0 OR name = 'x')".into(), Lookup),
        (format!("SELECT * FROM k WHERE id IN ({some}) AND name LIKE '%\\_u' ESCAPE '\\'"), Lookup),
        // Projections of non-key columns, residuals on unprojected ones.
        (format!("SELECT name FROM k WHERE id IN ({some})"), Lookup),
        (format!("SELECT value, opt FROM k WHERE id IN ({some}) AND name LIKE '%u'"), Lookup),
        (format!("SELECT name FROM k WHERE id IN ({big}) AND value + opt > 700"), Lookup),
        (format!("SELECT opt FROM k WHERE id IN ({some}) AND upper(name) <> 'N501_U'"), Lookup),
        ("SELECT value * 2 AS twice, name FROM k WHERE id = 9003".into(), Lookup),
        // Aggregates.
        (format!("SELECT COUNT(*) FROM k WHERE id IN ({some})"), Lookup),
        (format!("SELECT COUNT(*) FROM k WHERE id IN ({big})"), Lookup),
        ("SELECT COUNT(*) FROM k WHERE id = 33".into(), Lookup),
        ("SELECT COUNT(*) FROM k WHERE id = 0".into(), Lookup),
        ("SELECT COUNT(*) FROM k WHERE id IN (3, 9003)".into(), Lookup),
        (format!("SELECT COUNT(*) FROM k WHERE id IN ({some}) AND value > 200"), Lookup),
        (format!("SELECT COUNT(*) FROM k WHERE id IN ({big}) AND opt IS NULL"), Lookup),
        ("SELECT 1 FROM k WHERE id IN (3, 6, 9003, 33)".into(), Lookup),
        (format!("SELECT COUNT(opt), SUM(value), MIN(name), MAX(id) FROM k WHERE id IN ({big})"), Lookup),
        (format!("SELECT opt IS NULL, COUNT(*) FROM k WHERE id IN ({big}) GROUP BY opt IS NULL"), Lookup),
        (format!("SELECT COUNT(DISTINCT value) FROM k WHERE id IN ({some})"), Lookup),
        // Ordered limits (deterministic: the ids are unique).
        (format!("SELECT * FROM k WHERE id IN ({some}) ORDER BY id LIMIT 3"), Lookup),
        (format!("SELECT * FROM k WHERE id IN ({big}) ORDER BY value DESC, id LIMIT 5 OFFSET 2"), Lookup),
        ("SELECT id, name FROM k WHERE id = 33 LIMIT 1".into(), Lookup),
        ("SELECT id, name FROM k WHERE id = 0 LIMIT 1".into(), Lookup),
        (format!("SELECT id FROM k WHERE id IN ({some}) LIMIT 0"), Any),
        (format!("SELECT COUNT(*) FROM (SELECT id FROM k WHERE id IN ({some}) LIMIT 100)"), Lookup),
        // Not eligible: no key fixed.
        ("SELECT * FROM k WHERE id > 13000".into(), Scan),
        ("SELECT * FROM k WHERE id BETWEEN 30 AND 36".into(), Scan),
        ("SELECT * FROM k WHERE id = value".into(), Scan),
        ("SELECT COUNT(*) FROM k WHERE id NOT IN (3, 6)".into(), Scan),
        ("SELECT * FROM k WHERE id = 3 OR value = 5".into(), Scan),
        ("SELECT * FROM k WHERE id = 3 OR name = 'n600'".into(), Scan),
        ("SELECT * FROM k WHERE id + 0 = 3".into(), Scan),
        ("SELECT * FROM k WHERE value = 74".into(), Scan),
        ("SELECT * FROM k WHERE id IN (SELECT id FROM k WHERE value = 74)".into(), Scan),
        // Joins and subqueries with a key filter inside.
        (format!("SELECT k.id, k.name, o.note FROM k JOIN other o ON k.id = o.kid WHERE k.id IN ({big})"), Lookup),
        (
            "SELECT k.id, o.oid FROM k JOIN other o ON k.id = o.kid WHERE o.oid IN (1, 2, 3, 50, 700, 5000)".into(),
            Lookup,
        ),
        (format!("SELECT k.id, o.oid FROM k LEFT JOIN other o ON k.id = o.kid WHERE k.id IN ({some})"), Lookup),
        (
            format!("SELECT k.id, o.oid FROM k LEFT JOIN other o ON k.id = o.kid AND o.oid = 5 WHERE k.id IN ({some})"),
            Lookup,
        ),
        ("SELECT * FROM k WHERE id IN (SELECT kid FROM other WHERE oid IN (1, 2, 3, 4, 5))".into(), Lookup),
        ("SELECT * FROM k WHERE EXISTS (SELECT 1 FROM other o WHERE o.kid = k.id AND o.oid = 7)".into(), Lookup),
        ("SELECT id, (SELECT note FROM other WHERE oid = 5) AS n FROM k WHERE id = 33".into(), Lookup),
        ("SELECT id FROM k WHERE id = (SELECT MAX(kid) FROM other WHERE oid IN (1, 2))".into(), Any),
        (
            format!(
                "WITH x AS (SELECT id, value FROM k WHERE id IN ({some})) \
                 SELECT a.id, b.id FROM x a JOIN x b ON a.value < b.value"
            ),
            Lookup,
        ),
        ("SELECT id FROM k WHERE id = 3 UNION ALL SELECT id FROM k WHERE id IN (6, 9003, 3)".into(), Lookup),
        ("SELECT * FROM (SELECT id, value * 2 AS v2 FROM k) s WHERE s.id IN (3, 6, 1)".into(), Lookup),
        ("SELECT a.id, b.id FROM k a JOIN k b ON a.value = b.value WHERE a.id IN (3, 33, 9003, 6753)".into(), Lookup),
        ("SELECT k.id, o.oid FROM k JOIN other o ON k.id = o.kid WHERE o.kid = 33".into(), Any),
        ("SELECT k.id, o.note FROM k, other o WHERE k.id = 33 AND o.oid = 11".into(), Lookup),
        // INT key: literals in and out of its range.
        ("SELECT * FROM k32 WHERE id32 = 5000".into(), Lookup),
        ("SELECT * FROM k32 WHERE id32 = 5001".into(), Lookup),
        ("SELECT * FROM k32 WHERE id32 IN (5000, 6000, 7001, -999000)".into(), Lookup),
        ("SELECT * FROM k32 WHERE id32 = 2147483647".into(), Lookup),
        ("SELECT * FROM k32 WHERE id32 = -2147483648".into(), Any),
        ("SELECT * FROM k32 WHERE id32 = 3000000000".into(), Any),
        ("SELECT * FROM k32 WHERE id32 = 2147483648".into(), Any),
        ("SELECT * FROM k32 WHERE id32 = -3000000000".into(), Any),
        ("SELECT * FROM k32 WHERE id32 = 4294972296".into(), Any),
        ("SELECT * FROM k32 WHERE id32 IN (5000, 3000000000)".into(), Any),
        ("SELECT * FROM k32 WHERE id32 = 5000 OR id32 = 4294972296".into(), Any),
        ("SELECT * FROM k32 WHERE id32 = CAST(5000 AS BIGINT)".into(), Any),
        // Unsigned keys: negative and too large literals.
        ("SELECT * FROM ku WHERE u = 7".into(), Lookup),
        ("SELECT * FROM ku WHERE u = 0".into(), Lookup),
        ("SELECT * FROM ku WHERE u IN (7, 14, 15, 10500)".into(), Lookup),
        ("SELECT * FROM ku WHERE u = 4294967295".into(), Any),
        ("SELECT * FROM ku WHERE u = -1".into(), Any),
        ("SELECT * FROM ku WHERE u = -7".into(), Any),
        ("SELECT * FROM ku WHERE u IN (7, -7)".into(), Any),
        ("SELECT * FROM ku WHERE u = 4294967296".into(), Any),
        ("SELECT * FROM ku WHERE u = 4294967303".into(), Any),
        ("SELECT * FROM ku64 WHERE u = 5".into(), Any),
        ("SELECT * FROM ku64 WHERE u = -1".into(), Any),
        ("SELECT * FROM ku64 WHERE u = -5".into(), Any),
        ("SELECT * FROM ku64 WHERE u = 18446744073709551615".into(), Any),
        ("SELECT * FROM ku64 WHERE u = 9223372036854775808".into(), Any),
        ("SELECT * FROM ku64 WHERE u IN (5, 9223372036854775808, -1)".into(), Any),
        // String key.
        ("SELECT * FROM ks WHERE s = 'key42'".into(), Lookup),
        ("SELECT * FROM ks WHERE s = ''".into(), Lookup),
        ("SELECT * FROM ks WHERE s = 'Key1'".into(), Lookup),
        ("SELECT * FROM ks WHERE s = 'key1 '".into(), Lookup),
        ("SELECT * FROM ks WHERE s = 'KEY42'".into(), Lookup),
        ("SELECT * FROM ks WHERE s IN ('key1', 'key1', 'nope', 'ünï', 'key2000', 'key2001')".into(), Lookup),
        ("SELECT * FROM ks WHERE s = 'key42' OR s = 'key43'".into(), Lookup),
        ("SELECT v FROM ks WHERE s IN ('key7', 'key8') AND v > 7".into(), Lookup),
        ("SELECT * FROM ks WHERE s = 'key' || '42'".into(), Any),
        ("SELECT * FROM ks WHERE s LIKE 'key4%'".into(), Scan),
        ("SELECT * FROM ks WHERE upper(s) = 'KEY42'".into(), Scan),
        ("SELECT * FROM ks WHERE s > 'key1999'".into(), Scan),
        // Composite key (a INT, b BIGINT).
        ("SELECT * FROM kc WHERE a = 1 AND b = 2".into(), Lookup),
        ("SELECT * FROM kc WHERE b = 2 AND a = 1".into(), Lookup),
        ("SELECT * FROM kc WHERE a = 1 AND b IN (2, 3)".into(), Lookup),
        ("SELECT * FROM kc WHERE a = 1 AND b IN (2, 3, 500, 2, -1)".into(), Lookup),
        ("SELECT * FROM kc WHERE a IN (1, 2, 25) AND b IN (3, 4)".into(), Lookup),
        ("SELECT * FROM kc WHERE (a = 1 OR a = 2) AND b = 7".into(), Lookup),
        ("SELECT c FROM kc WHERE a = 1 AND b = 2 AND c LIKE 'c%'".into(), Lookup),
        ("SELECT COUNT(*) FROM kc WHERE a IN (0, 5, 19) AND b IN (0, 100, 199, 200)".into(), Lookup),
        ("SELECT * FROM kc WHERE a = 1 AND b = 2 AND a = 3".into(), Any),
        ("SELECT * FROM kc WHERE a = 1".into(), Scan),
        ("SELECT COUNT(*) FROM kc WHERE a = 1".into(), Scan),
        ("SELECT * FROM kc WHERE b = 2".into(), Scan),
        ("SELECT * FROM kc WHERE a = 1 AND b > 190".into(), Scan),
        ("SELECT * FROM kc WHERE a = 1 AND b = 2 OR a = 3 AND b = 4".into(), Any),
        ("SELECT * FROM kc WHERE a = 1 OR b = 2".into(), Scan),
        ("SELECT * FROM kc WHERE a = 3000000000 AND b = 2".into(), Any),
        ("SELECT * FROM ks WHERE s = repeat('a-long-string-key-', 4) || '17'".into(), Any),
        ("SELECT * FROM ks WHERE s = 'a-long-string-key-a-long-string-key-a-long-string-key-a-long-string-key-17'".into(), Lookup),
        (
            "SELECT v FROM ks WHERE s IN ('a-long-string-key-a-long-string-key-a-long-string-key-a-long-string-key-300', \
             'a-long-string-key-a-long-string-key-a-long-string-key-a-long-string-key-301', 'key9')"
                .into(),
            Lookup,
        ),
        // Composite key declared (b VARCHAR, a INT), columns in the order (a, x, b).
        ("SELECT * FROM kc2 WHERE a = 3 AND b = 'b10'".into(), Lookup),
        ("SELECT * FROM kc2 WHERE b = 'b10' AND a = 3".into(), Lookup),
        ("SELECT x FROM kc2 WHERE b IN ('b10', 'b11', 'b999') AND a IN (0, 6, 7)".into(), Lookup),
        ("SELECT * FROM kc2 WHERE a = 3 AND b IN ('b10', 'b299') AND x > 100".into(), Lookup),
        ("SELECT COUNT(*) FROM kc2 WHERE a IN (1, 2) AND b = 'b5'".into(), Lookup),
        ("SELECT * FROM kc2 WHERE b = 'b10'".into(), Scan),
        ("SELECT * FROM kc2 WHERE a = 3".into(), Scan),
        // TIMESTAMP key.
        ("SELECT * FROM kts WHERE ts = TIMESTAMP '1970-01-01 00:00:03'".into(), Lookup),
        ("SELECT * FROM kts WHERE ts = TIMESTAMP '1970-01-01 00:00:03.5'".into(), Lookup),
        ("SELECT * FROM kts WHERE ts = TIMESTAMP '1970-01-01 00:00:04.5'".into(), Lookup),
        ("SELECT * FROM kts WHERE ts IN (TIMESTAMP '1970-01-01 00:00:00', TIMESTAMP '1970-01-01 00:29:58.5')".into(), Lookup),
        ("SELECT * FROM kts WHERE ts = '1970-01-01T00:00:06'".into(), Any),
        ("SELECT * FROM kts WHERE ts = CAST('1970-01-01T00:00:06' AS TIMESTAMP(3))".into(), Any),
        ("SELECT * FROM kts WHERE ts = CAST('1970-01-01T00:00:06' AS TIMESTAMP(0))".into(), Any),
        ("SELECT * FROM kts WHERE ts = DATE '1970-01-01'".into(), Any),
        ("SELECT * FROM kts WHERE ts = to_timestamp_seconds(6)".into(), Any),
        ("SELECT * FROM kts WHERE ts = arrow_cast(4500000000, 'Timestamp(Nanosecond, None)')".into(), Any),
        ("SELECT * FROM kts WHERE ts = arrow_cast(4500000001, 'Timestamp(Nanosecond, None)')".into(), Any),
        ("SELECT * FROM kts WHERE ts = arrow_cast(4500, 'Timestamp(Millisecond, None)')".into(), Any),
        ("SELECT * FROM kts WHERE ts = TIMESTAMP '1969-12-31 23:59:59'".into(), Lookup),
        ("SELECT * FROM kts WHERE ts = TIMESTAMP '1900-01-01 00:00:00.000000001'".into(), Lookup),
        ("SELECT * FROM kts WHERE ts IN (TIMESTAMP '1960-01-01 00:00:00', TIMESTAMP '1969-12-31 23:59:58')".into(), Lookup),
        ("SELECT * FROM kd WHERE d IN (DATE '1969-12-31', DATE '0001-01-01', DATE '1900-06-15', DATE '1900-06-16')".into(), Lookup),
        ("SELECT * FROM kd WHERE d = DATE '1960-01-01'".into(), Lookup),
        // Composite keys whose first column is signed (a packed key, and keys of bytes).
        ("SELECT * FROM kc3 WHERE a = -25 AND s = 's0'".into(), Lookup),
        ("SELECT * FROM kc3 WHERE a IN (-25, -1, 0, 24, 25) AND s IN ('s0', 's39', 's40')".into(), Lookup),
        ("SELECT * FROM kc3 WHERE a = -3 AND s = 's7'".into(), Lookup),
        ("SELECT * FROM kc3 WHERE a = -3".into(), Scan),
        ("SELECT * FROM kc4 WHERE d = CAST('-15.25' AS DECIMAL(12,2)) AND s = 's0'".into(), Lookup),
        (
            "SELECT * FROM kc4 WHERE d IN (CAST('-15.25' AS DECIMAL(12,2)), CAST('14.25' AS DECIMAL(12,2)), \
             CAST('-0.25' AS DECIMAL(12,2)), CAST('0.25' AS DECIMAL(12,2))) AND s IN ('s0', 's49', 's50')"
                .into(),
            Lookup,
        ),
        ("SELECT * FROM kc4 WHERE d = CAST('-1.25' AS DECIMAL(12,2)) AND s = 's60'".into(), Lookup),
        ("SELECT * FROM kc5 WHERE x = -2 AND y = -20 AND z = DATE '1969-12-29'".into(), Lookup),
        (
            "SELECT * FROM kc5 WHERE x IN (-2, -1, 0, 2) AND y IN (-20, -1, 19) \
             AND z IN (DATE '1969-12-29', DATE '1969-12-31', DATE '1970-01-01', DATE '1970-01-04')"
                .into(),
            Lookup,
        ),
        ("SELECT * FROM kc5 WHERE x = 1 AND y = 5 AND z = DATE '1970-01-05'".into(), Lookup),
        ("SELECT * FROM kc5 WHERE x = 1 AND y = 5".into(), Scan),
        // SMALLINT key.
        ("SELECT * FROM ksm WHERE k = -30000".into(), Lookup),
        ("SELECT * FROM ksm WHERE k = 3".into(), Lookup),
        ("SELECT * FROM ksm WHERE k IN (0, -29997, -26700, -25500, 5)".into(), Lookup),
        ("SELECT * FROM ksm WHERE k = 40000".into(), Any),
        ("SELECT * FROM ksm WHERE k = -32768".into(), Any),
        ("SELECT * FROM ksm WHERE k IN (-30000, 70000)".into(), Any),
        // BIGINT key against literals outside its range.
        ("SELECT * FROM k WHERE id = 9223372036854775808".into(), Any),
        ("SELECT * FROM k WHERE id = 18446744073709551615".into(), Any),
        ("SELECT * FROM k WHERE id IN (33, 9223372036854775808)".into(), Any),
        // An empty key set: two lists with nothing in common.
        ("SELECT * FROM k WHERE id IN (3, 6) AND id IN (33, 36)".into(), Any),
        ("SELECT * FROM k WHERE (id = 3 OR id = 6) AND id IN (33, 36)".into(), Any),
        ("SELECT * FROM k WHERE (id = 3 OR id = 6) AND (id = 33 OR id = 36)".into(), Any),
        ("SELECT COUNT(*) FROM k WHERE id IN (3, 6) AND id IN (33, 36)".into(), Any),
        ("SELECT * FROM kc WHERE a IN (1, 2) AND a = 3 AND b = 2".into(), Any),
        // Duplicate output columns, columns in another order.
        ("SELECT id AS x, id AS y, name, id FROM k WHERE id IN (3, 33)".into(), Lookup),
        ("SELECT opt, name, value, id FROM k WHERE id IN (3, 33, 30)".into(), Lookup),
        // DECIMAL(12,2) key.
        ("SELECT * FROM kdec WHERE d = CAST('12.12' AS DECIMAL(12,2))".into(), Lookup),
        ("SELECT * FROM kdec WHERE d = CAST('-5.25' AS DECIMAL(12,2))".into(), Lookup),
        ("SELECT * FROM kdec WHERE d = CAST('0' AS DECIMAL(12,2))".into(), Lookup),
        ("SELECT * FROM kdec WHERE d = CAST('12.13' AS DECIMAL(12,2))".into(), Lookup),
        (
            "SELECT * FROM kdec WHERE d IN (CAST('12.12' AS DECIMAL(12,2)), CAST('1999.99' AS DECIMAL(12,2)), \
             CAST('100.00' AS DECIMAL(12,2)), CAST('7.07' AS DECIMAL(12,2)))"
                .into(),
            Lookup,
        ),
        ("SELECT * FROM kdec WHERE d = CAST('12.120' AS DECIMAL(13,3))".into(), Any),
        ("SELECT * FROM kdec WHERE d = CAST('12.125' AS DECIMAL(13,3))".into(), Any),
        ("SELECT * FROM kdec WHERE d = CAST('12.1' AS DECIMAL(4,1))".into(), Any),
        ("SELECT * FROM kdec WHERE d = 12.12".into(), Any),
        ("SELECT * FROM kdec WHERE d = 12".into(), Any),
        ("SELECT * FROM kdec WHERE d = 100".into(), Any),
        ("SELECT * FROM kdec WHERE d = '12.12'".into(), Any),
        ("SELECT * FROM kdec WHERE d IN (12.12, 7.07, 13)".into(), Any),
        // DATE key.
        ("SELECT * FROM kd WHERE d = DATE '2024-01-02'".into(), Lookup),
        ("SELECT * FROM kd WHERE d = DATE '2024-01-01'".into(), Lookup),
        ("SELECT * FROM kd WHERE d = DATE '1999-01-01'".into(), Lookup),
        ("SELECT * FROM kd WHERE d IN (DATE '2024-01-02', DATE '2024-03-01', DATE '1999-01-01')".into(), Lookup),
        ("SELECT * FROM kd WHERE d = DATE '2024-01-02' OR d = DATE '2025-02-28'".into(), Lookup),
        ("SELECT * FROM kd WHERE d = '2024-01-05'".into(), Any),
        ("SELECT * FROM kd WHERE d = CAST('2024-01-05' AS TIMESTAMP)".into(), Any),
        ("SELECT * FROM kd WHERE d = CAST('2024-01-05T12:00:00' AS TIMESTAMP)".into(), Any),
        ("SELECT * FROM kd WHERE d > DATE '2027-01-01'".into(), Scan),
    ];
    q
}

/// The largest key count a lookup takes, and one more than that (run
/// once: slow in debug builds).
fn key_limit_queries() -> Vec<(String, Plan)> {
    let list = |n: i64| (0..n).map(|v| v.to_string()).collect::<Vec<_>>().join(", ");
    vec![
        (format!("SELECT COUNT(*), MIN(c) FROM kc WHERE a IN ({}) AND b IN ({})", list(100), list(1000)), Lookup),
        (format!("SELECT COUNT(*), MIN(c) FROM kc WHERE a IN ({}) AND b IN ({})", list(101), list(1000)), Scan),
    ]
}

/// `LIMIT` without ORDER BY (checked against the reference as a subset).
fn limit_queries() -> Vec<(String, usize, usize)> {
    let some = "3, 6, 1, 0, 30, 60, 9003, 6753, 13500, 12000, -1497, 33, 36, 39";
    vec![
        (format!("SELECT * FROM k WHERE id IN ({some})"), 2, 0),
        (format!("SELECT * FROM k WHERE id IN ({some})"), 100, 0),
        (format!("SELECT * FROM k WHERE id IN ({some})"), 2, 3),
        (format!("SELECT * FROM k WHERE id IN ({some})"), 5, 8),
        (format!("SELECT id, name FROM k WHERE id IN ({some}) AND value > 500"), 1, 0),
        (format!("SELECT id, name FROM k WHERE id IN ({some}) AND value > 500"), 3, 0),
        (format!("SELECT id, name FROM k WHERE id IN ({some}) AND value > 500"), 1, 1),
        (format!("SELECT name FROM k WHERE id IN ({some}) AND opt IS NULL"), 1, 0),
        ("SELECT * FROM k WHERE id = 0".into(), 1, 0),
        ("SELECT * FROM k WHERE id = 33".into(), 1, 1),
        ("SELECT * FROM kc WHERE a IN (1, 2, 3) AND b IN (4, 5, 6)".into(), 4, 0),
    ]
}

const NAMES: [&str; 15] =
    ["k", "other", "k32", "ku", "ku64", "ks", "kc", "kc2", "kc3", "kc4", "kc5", "kts", "ksm", "kdec", "kd"];

/// The tables of [`tables`]: part of each rebuilt into main, part left in
/// deltas, then DELETEs, UPDATEs and re-INSERTs through SQL.
async fn setup() -> Sides {
    let sides = Sides::new();
    sides.create(&tables()).await;
    sides.rebuild(&NAMES);
    // Rows only in deltas (of new shards and of the last, partly filled one).
    for sql in [
        "INSERT INTO k SELECT 3 * value - 1500, (value * 37) % 1000, 'n' || CAST(value AS VARCHAR), \
         CASE WHEN value % 4 = 0 THEN NULL ELSE value END FROM generate_series(2751, 5000)",
        "INSERT INTO other SELECT value, 3 * ((value * 11) % 5000) - 1500, 'o' || CAST(value AS VARCHAR) \
         FROM generate_series(1001, 1300)",
        "INSERT INTO k32 SELECT CAST(value * 1000 + 1 AS INT), value FROM generate_series(1, 700)",
        "INSERT INTO ks SELECT 'key' || CAST(value AS VARCHAR), value FROM generate_series(2001, 2600)",
        "INSERT INTO kc SELECT CAST(value % 20 AS INT), value / 20, 'c' || CAST(value AS VARCHAR) \
         FROM generate_series(4000, 4999)",
        "INSERT INTO kd SELECT arrow_cast(arrow_cast(value + 19723, 'Int32'), 'Date32'), value \
         FROM generate_series(1500, 2199)",
        "INSERT INTO kc2 SELECT CAST(value % 7 AS INT), value, 'b' || CAST(value / 7 AS VARCHAR) \
         FROM generate_series(2100, 2599)",
        "INSERT INTO kts SELECT arrow_cast(value * 1500000000, 'Timestamp(Nanosecond, None)'), value \
         FROM generate_series(1200, 1500)",
        "INSERT INTO ksm SELECT CAST(value * 3 - 30000 AS SMALLINT), value FROM generate_series(1101, 1500)",
        "INSERT INTO kc3 SELECT CAST(value % 50 - 25 AS INT), 's' || CAST(value / 50 AS VARCHAR), value \
         FROM generate_series(2000, 2399)",
        "INSERT INTO kc4 SELECT CAST(CAST(value % 30 - 15 AS VARCHAR) || '.25' AS DECIMAL(12,2)), \
         's' || CAST(value / 30 AS VARCHAR), value FROM generate_series(1500, 1999)",
        "INSERT INTO kc5 SELECT CAST(value % 5 - 2 AS SMALLINT), CAST(value / 5 % 40 - 20 AS INT), \
         arrow_cast(arrow_cast(value / 200 - 3, 'Int32'), 'Date32'), value FROM generate_series(1400, 1799)",
        "INSERT INTO kts VALUES (TIMESTAMP '1960-01-01 00:00:00', -60)",
    ] {
        sides.both(sql).await;
    }
    for sql in [
        "DELETE FROM k WHERE id IN (0, 300, 9000)",
        "DELETE FROM k WHERE id BETWEEN 1000 AND 1100",
        "DELETE FROM k WHERE value % 97 = 5",
        "UPDATE k SET value = value + 100000, name = name || '_u' WHERE id IN (3, 6, 9003, 12000)",
        "UPDATE k SET value = value * 2 WHERE id = 3",
        "UPDATE k SET opt = NULL WHERE id = 30",
        "UPDATE k SET opt = 7 WHERE id = 60",
        "UPDATE k SET id = id + 100000 WHERE id = 90",
        "DELETE FROM k WHERE id = 120",
        "INSERT INTO k VALUES (120, -1, 'again', NULL)",
        "DELETE FROM other WHERE oid IN (2, 1100)",
        "UPDATE other SET note = 'changed' WHERE oid IN (3, 1200)",
        "DELETE FROM k32 WHERE id32 = 6000",
        "UPDATE k32 SET v = 0 WHERE id32 IN (5000, 2147483647)",
        "DELETE FROM ks WHERE s IN ('key43', 'key2001')",
        "UPDATE ks SET v = v + 1000 WHERE s IN ('key42', '')",
        "DELETE FROM kc WHERE a = 1 AND b = 3",
        "UPDATE kc SET c = 'changed' WHERE a = 2 AND b IN (3, 220)",
        "DELETE FROM kdec WHERE d = CAST('7.07' AS DECIMAL(12,2))",
        "UPDATE kdec SET v = 0 WHERE d = CAST('12.12' AS DECIMAL(12,2))",
        "DELETE FROM kd WHERE d = DATE '2024-03-01'",
        "UPDATE kd SET v = -v WHERE d = DATE '2024-01-02'",
        "DELETE FROM ku WHERE u = 14",
        "UPDATE ku64 SET v = 0 WHERE u = 5",
        "DELETE FROM kc2 WHERE b = 'b11' AND a = 0",
        "UPDATE kc2 SET x = -x WHERE a = 3 AND b IN ('b10', 'b299')",
        "DELETE FROM kts WHERE ts = TIMESTAMP '1970-01-01 00:00:04.5'",
        "UPDATE kts SET v = 0 WHERE ts = TIMESTAMP '1970-01-01 00:00:03'",
        "DELETE FROM ksm WHERE k = -29997",
        "UPDATE ksm SET v = 0 WHERE k IN (-26700, -25503)",
        "DELETE FROM ks WHERE s = 'a-long-string-key-a-long-string-key-a-long-string-key-a-long-string-key-300'",
    ] {
        sides.both(sql).await;
    }
    sides
}

/// Changes after the first round of queries (and a rebuild).
async fn second_round(sides: &Sides) {
    for sql in [
        "UPDATE k SET name = 'again_' || name, opt = NULL WHERE id IN (33, 100090, 6753)",
        "DELETE FROM k WHERE id IN (6, 13500)",
        "INSERT INTO k VALUES (0, 0, 'zero', 0), (1, 1, 'one', NULL)",
        "UPDATE k SET value = 1 WHERE id = 120",
        "DELETE FROM ks WHERE s = 'Key1'",
        "INSERT INTO ks VALUES ('key43', 43)",
        "UPDATE kc SET c = NULL WHERE a = 1 AND b = 2",
        "INSERT INTO kc VALUES (1, 3, 'back')",
        "UPDATE kd SET v = 7 WHERE d = DATE '2024-01-01'",
        "INSERT INTO kd VALUES (DATE '1999-01-01', 99), (DATE '1960-01-01', 60)",
        "DELETE FROM kc3 WHERE a = -25 AND s = 's0'",
        "UPDATE kc4 SET v = 0 WHERE s = 's0'",
        "UPDATE kc5 SET v = -v WHERE x = -2 AND y = -20",
    ] {
        sides.both(sql).await;
    }
}

async fn run_all(sides: &Sides, failures: &mut Failures) {
    let memory = sides.memory(&NAMES).await;
    for (sql, plan) in queries() {
        check(sides, Some(&memory), &sql, plan, failures).await;
    }
    for (sql, n, offset) in limit_queries() {
        check_limit(sides, &sql, n, offset, failures).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lookups_match_scans() {
    let sides = setup().await;
    // Many shards, some of each kind.
    let shards = sides.keyed_db.table("k").unwrap().snapshot().num_shards();
    assert!(shards >= 8, "k has {shards} shards");
    let mut failures = Failures::default();
    run_all(&sides, &mut failures).await;
    let memory = sides.memory(&["kc"]).await;
    for (sql, plan) in key_limit_queries() {
        check(&sides, Some(&memory), &sql, plan, &mut failures).await;
    }
    // Everything compacted into main, then more changes on top.
    sides.rebuild(&NAMES);
    second_round(&sides).await;
    run_all(&sides, &mut failures).await;
    failures.finish();
}

/// `EXPLAIN` shows the number of distinct keys probed (and a table without
/// a primary key never plans a lookup).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_counts_distinct_keys() {
    let sides = Sides::new();
    sides.create(&tables()[..1]).await;
    for (sql, keys) in [
        ("SELECT * FROM k WHERE id = 3", 1),
        ("SELECT * FROM k WHERE id IN (3, 3, 6, 1, 6)", 3),
        ("SELECT * FROM k WHERE id = 3 OR id = 6 OR id = 3", 2),
        ("SELECT * FROM k WHERE id IN (3, 6, 9) AND id IN (6, 9, 12)", 2),
    ] {
        let plan = physical_plan(&sides.keyed, sql).await;
        assert!(plan.contains(&format!("{LOOKUP}: table=k, keys={keys} ")), "{sql}:\n{plan}");
        // Without a primary key, the same query scans.
        let plan = physical_plan(&sides.reference, sql).await;
        assert!(!plan.contains(LOOKUP), "{sql} on the table without a key:\n{plan}");
    }
}

/// `PREPARE` / `EXECUTE` and parameters bound through the DataFrame API:
/// once bound, the parameters are literal key filters.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prepared_statements() {
    let sides = setup().await;
    let memory = sides.memory(&NAMES).await;
    let mut failures = Failures::default();
    let prepares = [
        "PREPARE q(BIGINT) AS SELECT * FROM k WHERE id = $1",
        "PREPARE qi(BIGINT, BIGINT) AS SELECT name, value FROM k WHERE id IN ($1, $2) AND value > 0",
        "PREPARE qo(BIGINT, BIGINT) AS SELECT id FROM k WHERE id = $1 OR id = $2",
        "PREPARE qc(INT, BIGINT) AS SELECT * FROM kc WHERE a = $1 AND b = $2",
        "PREPARE qs(VARCHAR) AS SELECT * FROM ks WHERE s = $1",
        "PREPARE q32(BIGINT) AS SELECT * FROM k32 WHERE id32 = $1",
        "PREPARE qd(DATE) AS SELECT * FROM kd WHERE d = $1",
        "PREPARE qj(BIGINT) AS SELECT k.id, o.note FROM k JOIN other o ON k.id = o.kid WHERE k.id = $1",
    ];
    for p in prepares {
        sides.both(p).await;
        run_plain(&memory, p).await.unwrap();
    }
    let executes = [
        ("EXECUTE q(33)", Lookup),
        ("EXECUTE q(3)", Lookup),
        ("EXECUTE q(0)", Lookup),
        ("EXECUTE q(1)", Lookup),
        ("EXECUTE q(9003)", Lookup),
        ("EXECUTE q(100090)", Lookup),
        ("EXECUTE q(90)", Lookup),
        ("EXECUTE q(-1497)", Lookup),
        ("EXECUTE q(NULL)", Any),
        ("EXECUTE qi(3, 9003)", Lookup),
        ("EXECUTE qi(3, 3)", Lookup),
        ("EXECUTE qi(0, 1)", Lookup),
        ("EXECUTE qo(33, 36)", Lookup),
        ("EXECUTE qc(1, 2)", Lookup),
        ("EXECUTE qc(1, 3)", Lookup),
        ("EXECUTE qc(2, 220)", Lookup),
        ("EXECUTE qs('key42')", Lookup),
        ("EXECUTE qs('')", Lookup),
        ("EXECUTE qs('absent')", Lookup),
        ("EXECUTE q32(5000)", Any),
        ("EXECUTE q32(3000000000)", Any),
        ("EXECUTE qd(DATE '2024-01-02')", Lookup),
        ("EXECUTE qd('2024-03-01')", Any),
        ("EXECUTE qj(33)", Lookup),
    ];
    for (sql, plan) in executes {
        let keyed = outcome(run(&sides.keyed, sql).await);
        let reference = outcome(run(&sides.reference, sql).await);
        let plain = outcome(run_plain(&memory, sql).await);
        if keyed != reference || reference != plain {
            failures.add(format!("{sql}\n  keyed: {keyed:?}\n  reference: {reference:?}\n  datafusion: {plain:?}"));
        }
        if keyed.is_ok() {
            let text = plan_of(&sides.keyed, sql).await;
            match plan {
                Lookup if !text.contains(LOOKUP) => failures.add(format!("{sql}: expected a lookup:\n{text}")),
                Scan if text.contains(LOOKUP) => failures.add(format!("{sql}: expected no lookup:\n{text}")),
                _ => {}
            }
        }
    }
    // Parameters bound through the DataFrame API.
    for id in [33i64, 3, 0, 1, 9003, 100090] {
        let sql = "SELECT * FROM k WHERE id = $1";
        let mut sides_out = Vec::new();
        for ctx in [&sides.keyed, &sides.reference] {
            let df = quiverdb::sql(ctx, sql).await.unwrap().with_param_values(vec![ScalarValue::Int64(Some(id))]);
            let df = df.unwrap();
            let plan = df.clone().create_physical_plan().await.unwrap();
            sides_out.push((sorted(&df.collect().await.unwrap()), text_of(&plan).contains(LOOKUP)));
        }
        let expected = sorted(&run_plain(&memory, &format!("SELECT * FROM k WHERE id = {id}")).await.unwrap().1);
        if sides_out[0].0 != sides_out[1].0 || sides_out[1].0 != expected {
            failures.add(format!("{sql} with $1 = {id}: {sides_out:?} vs datafusion {expected:?}"));
        }
        if !sides_out[0].1 || sides_out[1].1 {
            failures.add(format!(
                "{sql} with $1 = {id}: lookup on keyed side {}, on reference {}",
                sides_out[0].1, sides_out[1].1
            ));
        }
    }
    failures.finish();
}

fn text_of(plan: &Arc<dyn ExecutionPlan>) -> String {
    displayable(plan.as_ref()).indent(true).to_string()
}

/// The physical plan of a statement (for `EXECUTE`, which EXPLAIN does
/// not take).
async fn plan_of(ctx: &SessionContext, sql: &str) -> String {
    let plan = quiverdb::sql(ctx, sql).await.unwrap().create_physical_plan().await.unwrap();
    text_of(&plan)
}

/// Sorted rows of `sql` on `ctx`.
async fn rows(ctx: &SessionContext, sql: &str) -> Vec<String> {
    sorted(&run(ctx, sql).await.unwrap().1)
}

/// A lookup sees the session's own writes; a planned lookup and a planned
/// scan of the same statement read the same snapshot whatever happens
/// between planning and execution.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lookups_see_a_consistent_snapshot() {
    let sides = Sides::new();
    sides.create(&tables()[..1]).await;
    sides.rebuild(&["k"]);
    let ctx = &sides.keyed;
    let lookup = "SELECT * FROM k WHERE id IN (777777, 33, 36)";
    let scan = "SELECT * FROM k WHERE id + 0 IN (777777, 33, 36)";
    assert!(physical_plan(ctx, lookup).await.contains(LOOKUP));
    assert!(!physical_plan(ctx, scan).await.contains(LOOKUP));
    let same = |what: &str, a: &Vec<String>, b: &Vec<String>| assert_eq!(a, b, "{what}: lookup vs scan");

    let before = rows(ctx, lookup).await;
    same("start", &before, &rows(ctx, scan).await);
    assert_eq!(before.len(), 2);
    assert!(rows(ctx, "SELECT * FROM k WHERE id = 777777").await.is_empty());

    // INSERT, then the lookup sees the row (in this and in a new session).
    run(ctx, "INSERT INTO k VALUES (777777, 1, 'new', NULL)").await.unwrap();
    let inserted = rows(ctx, lookup).await;
    same("after INSERT", &inserted, &rows(ctx, scan).await);
    assert_eq!(inserted.len(), 3, "{inserted:?}");
    assert_eq!(rows(ctx, "SELECT name FROM k WHERE id = 777777").await, ["new"]);
    assert_eq!(rows(&session(&sides.keyed_db), "SELECT name FROM k WHERE id = 777777").await, ["new"]);

    // A duplicate key is refused, and the lookup still finds one row.
    assert!(run(ctx, "INSERT INTO k VALUES (777777, 2, 'dup', NULL)").await.is_err());
    assert_eq!(rows(ctx, "SELECT name FROM k WHERE id = 777777").await, ["new"]);

    // UPDATE of a non-key column, then of the key.
    run(ctx, "UPDATE k SET name = 'changed' WHERE id = 777777").await.unwrap();
    assert_eq!(rows(ctx, "SELECT name FROM k WHERE id = 777777").await, ["changed"]);
    same("after UPDATE", &rows(ctx, lookup).await, &rows(ctx, scan).await);
    run(ctx, "UPDATE k SET id = 888888 WHERE id = 777777").await.unwrap();
    assert!(rows(ctx, "SELECT name FROM k WHERE id = 777777").await.is_empty());
    assert_eq!(rows(ctx, "SELECT name FROM k WHERE id = 888888").await, ["changed"]);
    run(ctx, "UPDATE k SET id = 777777 WHERE id = 888888").await.unwrap();

    // DELETE, then the lookup does not see it.
    run(ctx, "DELETE FROM k WHERE id = 777777").await.unwrap();
    let deleted = rows(ctx, lookup).await;
    same("after DELETE", &deleted, &rows(ctx, scan).await);
    assert_eq!(deleted, before);
    assert!(rows(ctx, "SELECT * FROM k WHERE id = 777777").await.is_empty());
    assert_eq!(rows(ctx, "SELECT COUNT(*) FROM k WHERE id = 777777").await, ["0"]);

    // Plans made before a change read the snapshot they were planned on:
    // the lookup and the scan agree with each other.
    let task = ctx.task_ctx();
    for change in [
        "INSERT INTO k VALUES (777777, 3, 'late', NULL)",
        "DELETE FROM k WHERE id = 33",
        "UPDATE k SET value = -5 WHERE id IN (36, 777777)",
        "rebuild",
        "DELETE FROM k WHERE id IN (36, 777777)",
        "INSERT INTO k VALUES (33, 33, 'back', 33)",
    ] {
        let planned_lookup = quiverdb::sql(ctx, lookup).await.unwrap().create_physical_plan().await.unwrap();
        let planned_scan = quiverdb::sql(ctx, scan).await.unwrap().create_physical_plan().await.unwrap();
        assert!(text_of(&planned_lookup).contains(LOOKUP));
        let now = rows(ctx, lookup).await;
        if change == "rebuild" {
            sides.keyed_db.table("k").unwrap().rebuild().unwrap();
        } else {
            run(ctx, change).await.unwrap();
        }
        // A lookup of the new snapshot first (it catches the delta's index
        // up with the change), then the plans of the old one.
        same(&format!("after {change}"), &rows(ctx, lookup).await, &rows(ctx, scan).await);
        let a = sorted(&collect(planned_lookup, Arc::clone(&task)).await.unwrap());
        let b = sorted(&collect(planned_scan, Arc::clone(&task)).await.unwrap());
        same(&format!("planned before {change}"), &a, &b);
        assert_eq!(a, now, "planned before {change}: the snapshot of planning time");
    }
    let left = rows(ctx, lookup).await;
    assert_eq!(left.len(), 1, "only 33 is left: {left:?}");
}

/// A float key never takes the lookup (-0.0 and 0.0 are equal but their
/// keys differ), and its results are still right.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn float_keys_scan() {
    let sides = Sides::new();
    let def = TableDef {
        name: "kf",
        columns: "f DOUBLE NOT NULL, v BIGINT",
        key: "f",
        fill: &["INSERT INTO kf VALUES (-0.0, 1), (1.5, 2), (2.25, 3)"],
    };
    sides.create(&[def]).await;
    let memory = sides.memory(&["kf"]).await;
    let mut failures = Failures::default();
    for sql in [
        "SELECT * FROM kf WHERE f = 0.0",
        "SELECT * FROM kf WHERE f = -0.0",
        "SELECT * FROM kf WHERE f = 1.5",
        "SELECT * FROM kf WHERE f IN (1.5, 2.25, 3.0)",
    ] {
        check(&sides, Some(&memory), sql, Scan, &mut failures).await;
    }
    failures.finish();
}

/// Checks `queries` on both sides and plain DataFusion over copies of
/// `names`, failing at the end.
async fn check_all(sides: &Sides, names: &[&str], queries: &[(&str, Plan)]) {
    let memory = sides.memory(names).await;
    let mut failures = Failures::default();
    for (sql, plan) in queries {
        check(sides, Some(&memory), sql, *plan, &mut failures).await;
    }
    failures.finish();
}

/// Lookups after ALTER TABLE (a column before the key dropped, the key
/// renamed, a column added), INSERT OVERWRITE, TRUNCATE, and on an empty
/// table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lookups_after_schema_and_table_changes() {
    let sides = Sides::new();
    let def = TableDef {
        name: "ka",
        columns: "x BIGINT, id BIGINT NOT NULL, y VARCHAR",
        key: "id",
        fill: &["INSERT INTO ka SELECT value * 10, value, 'y' || CAST(value AS VARCHAR) FROM generate_series(1, 1500)"],
    };
    let empty = TableDef { name: "e", columns: "id BIGINT NOT NULL, v VARCHAR", key: "id", fill: &[] };
    sides.create(&[def, empty]).await;
    sides.rebuild(&["ka"]);
    sides
        .both("INSERT INTO ka SELECT value * 10, value, 'y' || CAST(value AS VARCHAR) FROM generate_series(1501, 1800)")
        .await;
    sides.both("DELETE FROM ka WHERE id IN (5, 1600)").await;
    let empty_queries: Vec<(&str, Plan)> = vec![
        ("SELECT * FROM e WHERE id = 1", Lookup),
        ("SELECT v FROM e WHERE id IN (1, 2)", Lookup),
        ("SELECT COUNT(*) FROM e WHERE id = 1", Lookup),
        ("SELECT COUNT(*) FROM e WHERE id IN (1, 2) AND v IS NULL", Lookup),
    ];
    check_all(&sides, &["ka", "e"], &empty_queries).await;
    let queries = |key: &'static str| -> Vec<(String, Plan)> {
        vec![
            (format!("SELECT * FROM ka WHERE {key} = 7"), Lookup),
            (format!("SELECT * FROM ka WHERE {key} IN (5, 6, 1600, 1601, 1800, 1801)"), Lookup),
            (format!("SELECT y FROM ka WHERE {key} IN (5, 6, 1600, 1601) AND y LIKE 'y1%'"), Lookup),
            (format!("SELECT COUNT(*) FROM ka WHERE {key} IN (5, 6, 1600, 1601)"), Lookup),
            (format!("SELECT * FROM ka WHERE {key} > 1795"), Scan),
        ]
    };
    let run_checks = |key: &'static str| {
        let sides = &sides;
        async move {
            let q = queries(key);
            let q: Vec<(&str, Plan)> = q.iter().map(|(s, p)| (s.as_str(), *p)).collect();
            check_all(sides, &["ka"], &q).await;
        }
    };
    run_checks("id").await;
    sides.both("ALTER TABLE ka DROP COLUMN x").await;
    run_checks("id").await;
    sides.both("ALTER TABLE ka RENAME COLUMN id TO key").await;
    run_checks("key").await;
    sides.both("ALTER TABLE ka ADD COLUMN z BIGINT DEFAULT 5").await;
    sides.both("UPDATE ka SET z = 6 WHERE key IN (6, 1601)").await;
    run_checks("key").await;
    check_all(&sides, &["ka"], &[("SELECT z FROM ka WHERE key IN (6, 7, 1601) AND z = 5", Lookup)]).await;
    sides.rebuild(&["ka"]);
    run_checks("key").await;
    sides.both("INSERT OVERWRITE ka SELECT value + 1, 'o', value FROM generate_series(1, 700)").await;
    run_checks("key").await;
    sides.both("TRUNCATE ka").await;
    run_checks("key").await;
    sides.both("INSERT INTO ka VALUES (7, 'back', NULL)").await;
    run_checks("key").await;
    // A key deleted and inserted again, over and over.
    for round in 0..6 {
        sides.both("DELETE FROM ka WHERE key = 7").await;
        sides.both(&format!("INSERT INTO ka VALUES (7, 'round {round}', {round})")).await;
        if round == 3 {
            sides.rebuild(&["ka"]);
        }
        check_all(&sides, &["ka"], &[("SELECT * FROM ka WHERE key = 7", Lookup)]).await;
    }
}

/// Statements that read through a lookup and write or define something:
/// INSERT ... SELECT, CREATE TABLE AS, and a view with a key filter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lookups_feeding_writes_and_views() {
    let sides = Sides::new();
    sides.create(&tables()[..2]).await;
    sides.rebuild(&["k", "other"]);
    sides.both("UPDATE k SET name = 'u' WHERE id IN (3, 6)").await;
    sides.both("CREATE TABLE copy (id BIGINT NOT NULL, name VARCHAR)").await;
    sides.both("INSERT INTO copy SELECT id, name FROM k WHERE id IN (3, 6, 9, 1, 4)").await;
    sides.both("CREATE TABLE made AS SELECT id, value FROM k WHERE id = 33 OR id = 36").await;
    sides.both("CREATE VIEW picked AS SELECT id, name, value FROM k WHERE id IN (3, 6, 30, 31)").await;
    sides
        .both("CREATE VIEW joined AS SELECT o.oid, k.name FROM other o JOIN k ON o.kid = k.id WHERE o.oid IN (1, 2, 3)")
        .await;
    check_all(
        &sides,
        &["k", "other", "copy", "made"],
        &[
            ("SELECT * FROM copy", Scan),
            ("SELECT * FROM made", Scan),
            ("SELECT * FROM k WHERE id IN (3, 6, 9, 1, 4)", Lookup),
        ],
    )
    .await;
    // Views are planned again at each query (plain DataFusion has none: compare the two quiverdb sides).
    let mut failures = Failures::default();
    for (sql, plan) in [
        ("SELECT * FROM picked", Lookup),
        ("SELECT name FROM picked WHERE value > 100", Lookup),
        ("SELECT * FROM picked WHERE id = 3", Lookup),
        ("SELECT * FROM joined", Lookup),
    ] {
        check(&sides, None, sql, plan, &mut failures).await;
    }
    sides.both("DELETE FROM k WHERE id = 3").await;
    sides.both("UPDATE k SET name = 'later' WHERE id = 6").await;
    for sql in ["SELECT * FROM picked", "SELECT * FROM joined"] {
        check(&sides, None, sql, Lookup, &mut failures).await;
    }
    failures.finish();
}

/// A key in a schema other than the default, a quoted mixed-case key
/// column, and a UNIQUE column beside the key (which is not looked up).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn more_key_shapes() {
    let sides = Sides::new();
    sides.both("CREATE SCHEMA s").await;
    let defs = [
        TableDef {
            name: "s.t",
            columns: "id BIGINT NOT NULL, v VARCHAR",
            key: "id",
            fill: &["INSERT INTO s.t SELECT value, 'v' || CAST(value AS VARCHAR) FROM generate_series(1, 1200)"],
        },
        TableDef {
            name: "\"Mixed\"",
            columns: "\"Key\" BIGINT NOT NULL, \"Val\" VARCHAR, plain BIGINT",
            key: "\"Key\"",
            fill: &[
                "INSERT INTO \"Mixed\" SELECT value, 'm' || CAST(value AS VARCHAR), -value FROM generate_series(1, 1200)",
            ],
        },
        TableDef {
            name: "uq",
            columns: "id BIGINT NOT NULL, code VARCHAR UNIQUE, n BIGINT",
            key: "id",
            fill: &[
                "INSERT INTO uq SELECT value, 'c' || CAST(value AS VARCHAR), value % 10 FROM generate_series(1, 1200)",
            ],
        },
    ];
    sides.create(&defs).await;
    sides.rebuild(&["s.t", "Mixed", "uq"]);
    sides.both("DELETE FROM s.t WHERE id = 7").await;
    sides.both("UPDATE \"Mixed\" SET \"Val\" = 'changed' WHERE \"Key\" = 8").await;
    sides.both("UPDATE uq SET code = 'moved' WHERE id = 9").await;
    let memory = SessionContext::new();
    memory.sql("CREATE SCHEMA s").await.unwrap();
    for (stored, sql_name) in [("s.t", "s.t"), ("Mixed", "\"Mixed\""), ("uq", "uq")] {
        let df = quiverdb::sql(&sides.reference, &format!("SELECT * FROM {sql_name}")).await.unwrap();
        let schema = Arc::new(df.schema().as_arrow().clone());
        let table = MemTable::try_new(schema, vec![df.collect().await.unwrap()]).unwrap();
        let name = if stored == "Mixed" { datafusion::common::TableReference::bare("Mixed") } else { stored.into() };
        memory.register_table(name, Arc::new(table)).unwrap();
    }
    let mut failures = Failures::default();
    for (sql, plan) in [
        ("SELECT * FROM s.t WHERE id = 5", Lookup),
        ("SELECT * FROM s.t WHERE id IN (6, 7, 8, 5000)", Lookup),
        ("SELECT * FROM \"Mixed\" WHERE \"Key\" = 8", Lookup),
        ("SELECT \"Val\" FROM \"Mixed\" WHERE \"Key\" IN (8, 9, 1300)", Lookup),
        ("SELECT * FROM \"Mixed\" WHERE plain = -8", Scan),
        ("SELECT * FROM \"Mixed\" WHERE plain = -8 AND \"Key\" = 8", Lookup),
        ("SELECT * FROM uq WHERE code = 'c9'", Scan),
        ("SELECT * FROM uq WHERE code = 'moved'", Scan),
        ("SELECT * FROM uq WHERE id = 9", Lookup),
        ("SELECT * FROM uq WHERE id IN (9, 10) AND code <> 'c10'", Lookup),
    ] {
        check(&sides, Some(&memory), sql, plan, &mut failures).await;
    }
    failures.finish();
}

/// Keys of more types: BYTEA, TINYINT, TIMESTAMP WITH TIME ZONE (literals
/// in other zones), DECIMAL(38,10) beyond 64 bits, TIME, and a BOOLEAN
/// first key column (whose filters the optimizer rewrites to `b` / `NOT b`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_key_types() {
    let sides = Sides::new();
    let defs = [
        TableDef {
            name: "kb",
            columns: "b BYTEA NOT NULL, v BIGINT",
            key: "b",
            fill: &[
                "INSERT INTO kb SELECT CAST(CAST(value AS VARCHAR) AS BYTEA) AS b, value AS v FROM generate_series(1, 600)",
                "INSERT INTO kb VALUES (X'00FF', -1), (X'', -2)",
            ],
        },
        TableDef {
            name: "kbool",
            columns: "b BOOLEAN NOT NULL, i INT NOT NULL, v BIGINT",
            key: "b, i",
            fill: &["INSERT INTO kbool SELECT value % 2 = 0 AS b, CAST(value / 2 AS INT) AS i, value AS v \
                     FROM generate_series(0, 999)"],
        },
        TableDef {
            name: "kt",
            columns: "t TINYINT NOT NULL, v BIGINT",
            key: "t",
            fill: &["INSERT INTO kt SELECT CAST(value - 128 AS TINYINT) AS t, value AS v FROM generate_series(0, 255)"],
        },
        TableDef {
            name: "ktz",
            columns: "t TIMESTAMP WITH TIME ZONE NOT NULL, v BIGINT",
            key: "t",
            fill: &[
                "INSERT INTO ktz SELECT arrow_cast(value * 1000000000, 'Timestamp(Nanosecond, Some(\"+00:00\"))') AS t, \
                     value AS v FROM generate_series(0, 700)",
            ],
        },
        TableDef {
            name: "kbig",
            columns: "d DECIMAL(38,10) NOT NULL, v BIGINT",
            key: "d",
            fill: &["INSERT INTO kbig SELECT CAST(CAST(value * 1000000007 AS VARCHAR) || '123456789.0123456789' \
                     AS DECIMAL(38,10)) * (CASE WHEN value % 2 = 0 THEN -1 ELSE 1 END) AS d, value AS v \
                     FROM generate_series(0, 700)"],
        },
        TableDef {
            name: "ktime",
            columns: "t TIME NOT NULL, v BIGINT",
            key: "t",
            fill: &["INSERT INTO ktime SELECT arrow_cast(value * 1000000000, 'Time64(Nanosecond)') AS t, value AS v \
                     FROM generate_series(0, 700)"],
        },
    ];
    let names = ["kb", "kbool", "kt", "ktz", "kbig", "ktime"];
    sides.create(&defs).await;
    sides.rebuild(&names);
    sides.both("DELETE FROM kt WHERE t = 127").await;
    sides.both("INSERT INTO kt VALUES (127, 1)").await;
    sides.both("UPDATE kb SET v = 0 WHERE b = X'00FF'").await;
    sides.both("DELETE FROM ktz WHERE t = TIMESTAMPTZ '1970-01-01 00:00:06+00:00'").await;
    let queries: Vec<(&str, Plan)> = vec![
        ("SELECT * FROM kb WHERE b = X'00FF'", Lookup),
        ("SELECT * FROM kb WHERE b = X''", Lookup),
        ("SELECT * FROM kb WHERE b = CAST('42' AS BYTEA)", Lookup),
        ("SELECT * FROM kb WHERE b IN (CAST('42' AS BYTEA), X'00FF', X'01')", Lookup),
        ("SELECT * FROM kb WHERE b = '42'", Any),
        ("SELECT * FROM kbool WHERE b = true AND i = 5", Any),
        ("SELECT * FROM kbool WHERE NOT b AND i IN (5, 6)", Any),
        ("SELECT * FROM kbool WHERE b IN (true, false) AND i IN (5, 6)", Any),
        ("SELECT * FROM kt WHERE t = -128", Lookup),
        ("SELECT * FROM kt WHERE t = 127", Lookup),
        ("SELECT * FROM kt WHERE t IN (0, 1, -1)", Lookup),
        ("SELECT * FROM kt WHERE t IN (0, 1, -1, 200, -200)", Any),
        ("SELECT * FROM ktz WHERE t = TIMESTAMPTZ '1970-01-01 00:00:05+00:00'", Lookup),
        ("SELECT * FROM ktz WHERE t = TIMESTAMPTZ '1970-01-01 01:00:05+01:00'", Lookup),
        ("SELECT * FROM ktz WHERE t = TIMESTAMPTZ '1970-01-01 00:00:06+00:00'", Lookup),
        ("SELECT * FROM ktz WHERE t = TIMESTAMP '1970-01-01 00:00:05'", Any),
        ("SELECT * FROM ktz WHERE t = '1970-01-01T00:00:05Z'", Any),
        ("SELECT * FROM ktz WHERE t = arrow_cast(5000000000, 'Timestamp(Nanosecond, Some(\"+05:00\"))')", Any),
        ("SELECT * FROM ktz WHERE t = arrow_cast(5000, 'Timestamp(Millisecond, Some(\"+00:00\"))')", Any),
        ("SELECT * FROM ktz WHERE t = arrow_cast(5001, 'Timestamp(Millisecond, Some(\"+00:00\"))')", Any),
        ("SELECT * FROM kbig WHERE d = CAST('1000000007123456789.0123456789' AS DECIMAL(38,10))", Lookup),
        ("SELECT * FROM kbig WHERE d = CAST('-2000000014123456789.0123456789' AS DECIMAL(38,10))", Lookup),
        ("SELECT * FROM kbig WHERE d = CAST('-2000000014123456789.01234567890' AS DECIMAL(38,11))", Any),
        ("SELECT * FROM kbig WHERE d = CAST('-2000000014123456789.01234567891' AS DECIMAL(38,11))", Any),
        ("SELECT * FROM kbig WHERE d = -2000000014123456789.0123456789", Any),
        ("SELECT * FROM ktime WHERE t = TIME '00:00:05'", Lookup),
        ("SELECT * FROM ktime WHERE t IN (TIME '00:00:05', TIME '00:11:40', TIME '00:11:41')", Lookup),
        ("SELECT * FROM ktime WHERE t = '00:00:05'", Any),
    ];
    check_all(&sides, &names, &queries).await;
}

/// Lookups while background rebuilds replace shards: a reader looks up
/// keys no writer touches, over and over, while a writer inserts,
/// deletes and updates others; after each write the lookup of the
/// changed keys matches the test's own model of the table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lookups_during_background_rebuilds() {
    use std::collections::BTreeMap;
    use std::sync::atomic::{AtomicBool, Ordering};

    let db = Database::new();
    let options = SessionOptions {
        table_options: TableOptions::default()
            .with_shard_capacity(200)
            .with_rebuild_dead_fraction(0.1)
            .with_background_rebuild(true),
        ..SessionOptions::default()
    };
    let ctx = quiverdb::session_context_with(&db, options.clone());
    run(&ctx, "CREATE TABLE b (id BIGINT NOT NULL, v BIGINT, PRIMARY KEY (id))").await.unwrap();
    run(&ctx, "INSERT INTO b SELECT -value, -2 * value FROM generate_series(1, 300)").await.unwrap();
    let stable = "SELECT id, v FROM b WHERE id IN (-1, -7, -50, -100, -150, -200, -299, -300, -301)";
    assert!(physical_plan(&ctx, stable).await.contains(LOOKUP));
    let expected_stable: Vec<String> = {
        let mut e: Vec<String> =
            [-1i64, -7, -50, -100, -150, -200, -299, -300].iter().map(|id| format!("{id} | {}", 2 * id)).collect();
        e.sort();
        e
    };
    let done = Arc::new(AtomicBool::new(false));
    let reader = {
        let (done, ctx) = (Arc::clone(&done), quiverdb::session_context_with(&db, options));
        let expected = expected_stable.clone();
        tokio::spawn(async move {
            let mut reads = 0;
            while !done.load(Ordering::Relaxed) || reads < 5 {
                let got = rows(&ctx, stable).await;
                assert_eq!(got, expected, "read {reads}");
                reads += 1;
            }
            reads
        })
    };
    let mut model: BTreeMap<i64, i64> = BTreeMap::new();
    for round in 0..30i64 {
        let base = round * 1000;
        run(&ctx, &format!("INSERT INTO b SELECT {base} + value, value FROM generate_series(0, 149)")).await.unwrap();
        for j in 0..150 {
            model.insert(base + j, j);
        }
        let dead: Vec<i64> = (0..150).filter(|j| j % 5 == round % 5).map(|j| base + j).collect();
        let list = |ids: &[i64]| ids.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ");
        run(&ctx, &format!("DELETE FROM b WHERE id IN ({})", list(&dead))).await.unwrap();
        dead.iter().for_each(|id| {
            model.remove(id);
        });
        if round > 0 {
            let prev = base - 1000;
            run(&ctx, &format!("UPDATE b SET v = v + 1000 WHERE id BETWEEN {prev} AND {}", prev + 40)).await.unwrap();
            for (_, v) in model.range_mut(prev..=prev + 40) {
                *v += 1000;
            }
        }
        let probe: Vec<i64> = (0..150).step_by(3).map(|j| base + j).chain((0..60).map(|j| base - 1000 + j)).collect();
        let got = rows(&ctx, &format!("SELECT id, v FROM b WHERE id IN ({})", list(&probe))).await;
        let mut expected: Vec<String> =
            probe.iter().filter_map(|id| model.get(id).map(|v| format!("{id} | {v}"))).collect();
        expected.sort();
        assert_eq!(got, expected, "round {round}");
    }
    done.store(true, Ordering::Relaxed);
    let reads = reader.await.unwrap();
    assert!(reads >= 5);
    let all = rows(&ctx, "SELECT COUNT(*) FROM b WHERE id >= 0").await;
    assert_eq!(all, [model.len().to_string()]);
}
