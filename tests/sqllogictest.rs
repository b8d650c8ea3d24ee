//! Runs every `tests/sql/*.slt` file three times: through a quiverdb-backed
//! DataFusion session with default settings; through one with tiny shards,
//! batches and id buffers plus a forced rebuild of every table after every
//! statement (so each statement meets main storage, deltas and shard
//! boundaries); and through a real Flight SQL server and the arrow-rs Flight
//! SQL client, as a client program sends them (each statement as a
//! `CommandStatementQuery`, its result fetched with the ticket).
//!
//! Conventions of the files: `NULL` is a NULL cell, `(empty)` an empty
//! string; floats print with at most 12 decimals; DML statements return
//! their row count (`query I`). Column types: `I` integers, `R` floats and
//! decimals, `T` everything else. EXPLAIN expectations use `<slt:ignore>`
//! for the parts that depend on the settings (shard and partition counts).

#[path = "common/flight.rs"]
mod flight;

use std::path::PathBuf;

use arrow_array::{Array, RecordBatch};
use arrow_schema::DataType;
use async_trait::async_trait;
use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
use datafusion::error::DataFusionError;
use datafusion::prelude::SessionContext;
use quiverdb::server::ScanSettings;
use quiverdb::{Database, SessionOptions, TableOptions};
use sqllogictest::{AsyncDB, DBOutput, DefaultColumnType, Runner};

/// One run's settings.
#[derive(Debug, Clone, Copy)]
enum Mode {
    /// The defaults a user gets.
    Default,
    /// Tiny shards, batches and buffers; every table rebuilt after every statement.
    Tiny,
    /// Through a Flight SQL server and client, with default settings.
    Flight,
}

struct Quiver {
    db: Database,
    ctx: SessionContext,
    mode: Mode,
    /// In [`Mode::Flight`]: the server (over `db`), a client of it, and the
    /// client's session cookie.
    flight: Option<(flight::TestServer, flight::Client, Option<String>)>,
}

impl Quiver {
    async fn new(mode: Mode) -> Self {
        if let Mode::Flight = mode {
            let server = flight::TestServer::open().await;
            let client = server.client().await;
            let db = server.db.clone();
            let ctx = quiverdb::session_context(&db);
            return Self { db, ctx, mode, flight: Some((server, client, None)) };
        }
        let db = Database::new();
        let options = match mode {
            Mode::Default | Mode::Flight => SessionOptions::default(),
            Mode::Tiny => SessionOptions {
                target_partitions: 3,
                batch_size: 5,
                table_options: TableOptions::default().with_shard_capacity(7).with_background_rebuild(false),
                scan: ScanSettings { id_buffer: 3 },
                memory_limit: None,
                max_table_memory: None,
            },
        };
        let ctx = quiverdb::session_context_with(&db, options);
        Self { db, ctx, mode, flight: None }
    }

    /// The statement's result batches: from the session, or from the
    /// Flight SQL server (an error is the message the client received).
    async fn batches(&mut self, sql: &str) -> Result<Vec<RecordBatch>, DataFusionError> {
        let Some((_, client, cookie)) = &mut self.flight else {
            return quiverdb::sql(&self.ctx, sql).await?.collect().await;
        };
        let result = flight::run(client, cookie, sql).await;
        result.map_err(|e| match e {
            arrow_flight::error::FlightError::Tonic(status) => DataFusionError::Execution(status.message().to_string()),
            other => DataFusionError::External(Box::new(other)),
        })
    }
}

#[async_trait]
impl AsyncDB for Quiver {
    type Error = DataFusionError;
    type ColumnType = DefaultColumnType;

    async fn run(&mut self, sql: &str) -> Result<DBOutput<DefaultColumnType>, DataFusionError> {
        let batches = self.batches(sql).await?;
        if let Mode::Tiny = self.mode {
            self.db.rebuild_all().map_err(|e| DataFusionError::External(Box::new(e)))?;
        }
        let Some(first) = batches.first() else { return Ok(DBOutput::StatementComplete(0)) };
        let schema = first.schema();
        if schema.fields().is_empty() {
            return Ok(DBOutput::StatementComplete(0));
        }
        let types = schema.fields().iter().map(|f| column_type(f.data_type())).collect();
        let explain = schema.fields().iter().map(|f| f.name().as_str()).eq(["plan_type", "plan"]);
        let mut rows = Vec::new();
        for batch in &batches {
            let formatted = format_rows(batch)?;
            if explain {
                rows.extend(formatted.into_iter().flat_map(plan_rows));
            } else {
                rows.extend(formatted);
            }
        }
        Ok(DBOutput::Rows { types, rows })
    }

    async fn shutdown(&mut self) {}

    fn engine_name(&self) -> &str {
        "quiverdb"
    }

    async fn sleep(dur: std::time::Duration) {
        tokio::time::sleep(dur).await;
    }
}

fn column_type(t: &DataType) -> DefaultColumnType {
    if t.is_integer() {
        DefaultColumnType::Integer
    } else if t.is_floating() || matches!(t, DataType::Decimal128(..)) {
        DefaultColumnType::FloatingPoint
    } else {
        DefaultColumnType::Text
    }
}

fn format_rows(batch: &RecordBatch) -> Result<Vec<Vec<String>>, DataFusionError> {
    let options = FormatOptions::default().with_null("NULL");
    let formatters =
        batch.columns().iter().map(|c| ArrayFormatter::try_new(c.as_ref(), &options)).collect::<Result<Vec<_>, _>>()?;
    Ok((0..batch.num_rows())
        .map(|r| {
            batch
                .columns()
                .iter()
                .zip(&formatters)
                .map(|(c, f)| {
                    let text = f.value(r).to_string();
                    if c.is_null(r) {
                        text
                    } else if c.data_type().is_floating() {
                        float_text(&text)
                    } else if text.is_empty() {
                        "(empty)".to_string()
                    } else {
                        text
                    }
                })
                .collect()
        })
        .collect())
}

/// An EXPLAIN row as DataFusion's own sqllogictests print it: the plan
/// type, then one numbered line per plan node, indentation as dashes.
fn plan_rows(row: Vec<String>) -> Vec<Vec<String>> {
    let mut out = vec![vec![row[0].clone()]];
    for (i, line) in row[1].lines().filter(|l| !l.trim().is_empty()).enumerate() {
        let text = line.trim_start();
        let indent = line.len() - text.len();
        out.push(vec![format!("{:02}){}{text}", i + 1, "-".repeat(indent))]);
    }
    out
}

/// A float rounded to 12 decimals, without trailing zeros (summation order
/// changes the last bits of float aggregates between partitionings).
fn float_text(text: &str) -> String {
    match text.parse::<f64>() {
        Ok(v) if v.is_finite() => {
            let s = format!("{v:.12}");
            let s = s.trim_end_matches('0').trim_end_matches('.');
            if s == "-0" { "0".to_string() } else { s.to_string() }
        }
        _ => text.to_string(),
    }
}

fn slt_files() -> Vec<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/sql");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "slt"))
        // `QUIVERDB_SLT=nested` runs only the files whose name holds it.
        .filter(|p| std::env::var("QUIVERDB_SLT").map_or(true, |only| p.to_string_lossy().contains(&only)))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no .slt files in {}", dir.display());
    files
}

fn run_all(mode: Mode) {
    let runtime =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("tokio runtime");
    let mut failures = Vec::new();
    for file in slt_files() {
        let outcome = runtime.block_on(async {
            let mut runner = Runner::new(move || async move { Ok(Quiver::new(mode).await) });
            runner.with_column_validator(sqllogictest::strict_column_validator);
            let result = runner.run_file_async(&file).await;
            runner.shutdown_async().await;
            result
        });
        if let Err(e) = outcome {
            failures.push(format!("{} ({mode:?}):\n{e}", file.display()));
        }
    }
    assert!(failures.is_empty(), "{} sqllogictest file(s) failed:\n\n{}", failures.len(), failures.join("\n\n"));
}

#[test]
fn sqllogictest_default_settings() {
    run_all(Mode::Default);
}

#[test]
fn sqllogictest_tiny_shards_and_rebuilds() {
    run_all(Mode::Tiny);
}

#[test]
fn sqllogictest_through_flight_sql() {
    run_all(Mode::Flight);
}
