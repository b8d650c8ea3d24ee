//! A sample of Apache DataFusion's own sqllogictest files (from the crate
//! `datafusion-sqllogictest` 55.2.0, in `tests/datafusion_slt/`), run
//! record by record through a quiverdb session and through a stock
//! DataFusion `SessionContext`, with DataFusion's conventions for printing
//! values and checking results.
//!
//! Prints, per file, how many records pass on each. Every record that
//! passes on stock DataFusion and fails on quiverdb must be listed in
//! `tests/datafusion_slt/differences.txt` (`file:line` and the reason),
//! and every listed record must still be such a difference: a new
//! difference fails the test, and so does one that went away.
//!
//! `cargo test --test datafusion_slt -- --nocapture` prints the table.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{Decimal128Type, Decimal256Type, DecimalType};
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::{DataType, Schema};
use async_trait::async_trait;
use bigdecimal::BigDecimal;
use datafusion::arrow::util::display::ArrayFormatter;
use datafusion::error::DataFusionError;
use datafusion::execution::SessionStateBuilder;
use datafusion::physical_plan::collect;
use datafusion::prelude::{SessionConfig, SessionContext};
use quiverdb::{Database, SessionOptions};
use sqllogictest::{AsyncDB, ColumnType, DBOutput, Record, Runner};

const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/datafusion_slt");
/// DataFusion's sqllogictest runs with four partitions.
const PARTITIONS: usize = 4;

/// DataFusion's column types of sqllogictest (`DFColumnType`).
#[derive(Debug, Clone, PartialEq, Eq)]
enum DfType {
    Boolean,
    DateTime,
    Integer,
    Float,
    Text,
    Timestamp,
    Another,
}

impl ColumnType for DfType {
    fn from_char(value: char) -> Option<Self> {
        Some(match value {
            'B' => Self::Boolean,
            'D' => Self::DateTime,
            'I' => Self::Integer,
            'P' => Self::Timestamp,
            'R' => Self::Float,
            'T' => Self::Text,
            _ => Self::Another,
        })
    }

    fn to_char(&self) -> char {
        match self {
            Self::Boolean => 'B',
            Self::DateTime => 'D',
            Self::Integer => 'I',
            Self::Timestamp => 'P',
            Self::Float => 'R',
            Self::Text => 'T',
            Self::Another => '?',
        }
    }
}

/// One engine: a session, run as DataFusion's sqllogictest engine runs it.
struct Engine {
    ctx: SessionContext,
}

#[async_trait]
impl AsyncDB for Engine {
    type Error = DataFusionError;
    type ColumnType = DfType;

    async fn run(&mut self, sql: &str) -> Result<DBOutput<DfType>, DataFusionError> {
        let df = self.ctx.sql(sql).await?;
        let task_ctx = Arc::new(df.task_ctx());
        let plan = df.create_physical_plan().await?;
        let schema = plan.schema();
        let batches = collect(Arc::clone(&plan), task_ctx).await?;
        let types: Vec<DfType> = schema.fields().iter().map(|f| column_type(f.data_type())).collect();
        let rows = rows_of(&schema, &batches)?;
        if rows.is_empty() && types.is_empty() {
            Ok(DBOutput::StatementComplete(0))
        } else {
            Ok(DBOutput::Rows { types, rows })
        }
    }

    fn engine_name(&self) -> &str {
        "DataFusion"
    }

    async fn sleep(dur: std::time::Duration) {
        tokio::time::sleep(dur).await;
    }

    async fn shutdown(&mut self) {}
}

fn column_type(ty: &DataType) -> DfType {
    match ty {
        DataType::Boolean => DfType::Boolean,
        t if t.is_integer() => DfType::Integer,
        DataType::Float16
        | DataType::Float32
        | DataType::Float64
        | DataType::Decimal32(..)
        | DataType::Decimal64(..)
        | DataType::Decimal128(..)
        | DataType::Decimal256(..) => DfType::Float,
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => DfType::Text,
        DataType::Date32 | DataType::Date64 | DataType::Time32(_) | DataType::Time64(_) => DfType::DateTime,
        DataType::Timestamp(..) => DfType::Timestamp,
        DataType::Dictionary(key, value)
            if key.is_integer() && matches!(**value, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View) =>
        {
            DfType::Text
        }
        _ => DfType::Another,
    }
}

/// The rows of `batches` as DataFusion's sqllogictest prints them.
fn rows_of(schema: &Schema, batches: &[RecordBatch]) -> Result<Vec<Vec<String>>, DataFusionError> {
    let mut rows = Vec::new();
    for batch in batches {
        if !schema.contains(&batch.schema()) {
            return Err(DataFusionError::Internal(format!(
                "schema mismatch: the plan has {schema:?}, a batch {:?}",
                batch.schema()
            )));
        }
        for row in 0..batch.num_rows() {
            let mut cells =
                batch.columns().iter().map(|column| cell(column, row)).collect::<Result<Vec<_>, DataFusionError>>()?;
            // A multi-line last cell (EXPLAIN) becomes numbered rows.
            let last = cells.pop().unwrap_or_default();
            let lines: Vec<&str> = last.split('\n').collect();
            if lines.len() < 2 {
                cells.push(last);
                rows.push(cells);
            } else {
                rows.push(cells);
                for (i, line) in lines.iter().enumerate() {
                    let content = line.trim_start();
                    let prefix = "-".repeat(line.len() - content.len());
                    rows.push(vec![format!("{:02}){prefix}{content}", i + 1)]);
                }
            }
        }
    }
    Ok(rows)
}

/// One value as DataFusion's sqllogictest prints it.
fn cell(column: &ArrayRef, row: usize) -> Result<String, DataFusionError> {
    if column.is_null(row) {
        return Ok("NULL".into());
    }
    let float = |text: String, is_nan: bool, infinite: Option<bool>| match (is_nan, infinite) {
        (true, _) => "NaN".to_string(),
        (_, Some(true)) => "Infinity".to_string(),
        (_, Some(false)) => "-Infinity".to_string(),
        _ => decimal_text(&text, 12),
    };
    let infinite = |positive: bool, infinite: bool| infinite.then_some(positive);
    Ok(match column.data_type() {
        DataType::Null => "NULL".into(),
        DataType::Boolean => column.as_boolean().value(row).to_string(),
        DataType::Float16 => {
            let v = column.as_primitive::<arrow_array::types::Float16Type>().value(row);
            float(v.to_string(), v.is_nan(), infinite(v.is_sign_positive(), v.is_infinite()))
        }
        DataType::Float32 => {
            let v = column.as_primitive::<arrow_array::types::Float32Type>().value(row);
            float(v.to_string(), v.is_nan(), infinite(v.is_sign_positive(), v.is_infinite()))
        }
        DataType::Float64 => {
            let v = column.as_primitive::<arrow_array::types::Float64Type>().value(row);
            float(v.to_string(), v.is_nan(), infinite(v.is_sign_positive(), v.is_infinite()))
        }
        DataType::Decimal128(_, scale) => {
            let v = column.as_primitive::<Decimal128Type>().value(row);
            decimal_text(&Decimal128Type::format_decimal(v, u8::MAX, *scale), i64::from(*scale))
        }
        DataType::Decimal256(_, scale) => {
            let v = column.as_primitive::<Decimal256Type>().value(row);
            decimal_text(&Decimal256Type::format_decimal(v, u8::MAX, *scale), i64::from(*scale))
        }
        DataType::Utf8 => text(column.as_string::<i32>().value(row)),
        DataType::LargeUtf8 => text(column.as_string::<i64>().value(row)),
        DataType::Utf8View => text(column.as_string_view().value(row)),
        DataType::Dictionary(..) => {
            let dictionary = column.as_any_dictionary();
            cell(dictionary.values(), dictionary.normalized_keys()[row])?
        }
        _ => {
            let options = datafusion::config::FormatOptions { null: "NULL".into(), ..Default::default() };
            let options: datafusion::arrow::util::display::FormatOptions<'_> = (&options).try_into()?;
            ArrayFormatter::try_new(column.as_ref(), &options)?.value(row).to_string()
        }
    })
}

fn text(value: &str) -> String {
    if value.is_empty() { "(empty)".into() } else { value.trim_end_matches('\n').replace('\u{0000}', "\\0") }
}

/// `value` rounded to `digits` decimals, without trailing zeros.
fn decimal_text(value: &str, digits: i64) -> String {
    match BigDecimal::from_str(value) {
        Ok(d) => d.round(digits).normalized().to_plain_string(),
        Err(_) => value.to_string(),
    }
}

/// DataFusion's result check: rows compared as space-joined lines, with
/// `<slt:ignore>` standing for any text.
fn validate(normalizer: sqllogictest::Normalizer, actual: &[Vec<String>], expected: &[String]) -> bool {
    const IGNORE: &str = "<slt:ignore>";
    let expected: Vec<String> = expected.iter().map(normalizer).collect();
    let actual: Vec<String> = actual.iter().map(|row| row.join(" ").trim_end().to_string()).collect();
    if !expected.iter().any(|line| line.contains(IGNORE)) {
        return actual == expected;
    }
    let expected = expected.join("\n");
    let actual = actual.join("\n");
    let mut pos = 0;
    for (i, fragment) in expected.split(IGNORE).enumerate() {
        if fragment.is_empty() {
            continue;
        }
        match actual[pos..].find(fragment) {
            Some(at) if i > 0 || at == 0 => pos += at + fragment.len(),
            _ => return false,
        }
    }
    true
}

#[expect(clippy::ptr_arg, reason = "sqllogictest's Normalizer takes a &String")]
fn trim_end(s: &String) -> String {
    s.trim_end().to_string()
}

fn runner(ctx: SessionContext) -> Runner<Engine, impl sqllogictest::MakeConnection<Conn = Engine>> {
    let mut runner = Runner::new(move || {
        let ctx = ctx.clone();
        async move { Ok(Engine { ctx }) }
    });
    runner.add_label("Datafusion");
    runner.with_column_validator(sqllogictest::strict_column_validator);
    runner.with_normalizer(trim_end);
    runner.with_validator(validate);
    runner
}

/// A stock DataFusion session as DataFusion's sqllogictest makes one.
fn stock() -> SessionContext {
    let config = SessionConfig::new().with_target_partitions(PARTITIONS);
    SessionContext::new_with_state(SessionStateBuilder::new().with_config(config).with_default_features().build())
}

fn quiver() -> SessionContext {
    let options = SessionOptions { target_partitions: PARTITIONS, ..SessionOptions::default() };
    quiverdb::session_context_with(&Database::new(), options)
}

/// Per file: records run, passed on stock, passed on quiverdb, and the
/// lines of the records that pass on stock only.
#[derive(Debug, Default)]
struct Outcome {
    records: usize,
    stock: usize,
    quiver: usize,
    stock_only: Vec<(u32, String)>,
}

async fn run_file(path: &Path) -> Outcome {
    let records = sqllogictest::parse_file::<DfType>(path).expect("a sqllogictest file");
    let mut on_stock = runner(stock());
    let mut on_quiver = runner(quiver());
    let mut outcome = Outcome::default();
    for record in records {
        let line = match &record {
            Record::Statement { loc, .. } | Record::Query { loc, .. } => Some(loc.line()),
            Record::Halt { .. } => break,
            _ => None,
        };
        let stock_passed = on_stock.run_async(record.clone()).await.is_ok();
        let quiver_run = on_quiver.run_async(record).await;
        if let Some(line) = line {
            outcome.records += 1;
            outcome.stock += usize::from(stock_passed);
            outcome.quiver += usize::from(quiver_run.is_ok());
            if let (true, Err(e)) = (stock_passed, quiver_run) {
                outcome.stock_only.push((line, e.to_string()));
            }
        }
    }
    outcome
}

/// The listed differences: `file:line` to reason.
fn listed() -> BTreeMap<String, String> {
    let text = std::fs::read_to_string(Path::new(DIR).join("differences.txt")).expect("differences.txt");
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let (at, reason) = l.split_once(char::is_whitespace).unwrap_or((l, ""));
            (at.to_string(), reason.trim().to_string())
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn datafusion_sqllogictest_sample() {
    let mut files: Vec<PathBuf> = std::fs::read_dir(DIR)
        .expect("tests/datafusion_slt")
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "slt"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no .slt files in {DIR}");
    let mut found = BTreeSet::new();
    println!("| file | records | pass on DataFusion | pass on quiverdb | pass on DataFusion only |");
    println!("|---|---:|---:|---:|---:|");
    let mut totals = Outcome::default();
    // Why each record that differs failed on quiverdb.
    let mut report = String::new();
    for path in &files {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_string();
        let outcome = run_file(path).await;
        println!(
            "| {name} | {} | {} | {} | {} |",
            outcome.records,
            outcome.stock,
            outcome.quiver,
            outcome.stock_only.len()
        );
        totals.records += outcome.records;
        totals.stock += outcome.stock;
        totals.quiver += outcome.quiver;
        for (line, error) in &outcome.stock_only {
            found.insert(format!("{name}:{line}"));
            report.push_str(&format!("== {name}:{line}\n{error}\n"));
        }
    }
    println!("| all | {} | {} | {} | {} |", totals.records, totals.stock, totals.quiver, found.len());
    let report_path = Path::new(env!("CARGO_TARGET_TMPDIR")).join("datafusion_slt_differences.txt");
    std::fs::write(&report_path, report).expect("writing the report");
    println!("why each differing record failed on quiverdb: {}", report_path.display());
    let listed = listed();
    let new: Vec<&String> = found.iter().filter(|at| !listed.contains_key(*at)).take(40).collect();
    let gone: Vec<&String> = listed.keys().filter(|at| !found.contains(*at)).take(40).collect();
    assert!(
        new.is_empty() && gone.is_empty(),
        "records passing on DataFusion and failing on quiverdb that differences.txt does not list (at most 40 \
         shown; the reasons are in the report): {new:?}; listed ones that no longer differ: {gone:?}"
    );
}
