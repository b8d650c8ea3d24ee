#![allow(dead_code)]
//! TPC-H data for the examples, generated in-process by `tpchgen-arrow`
//! (the same rows as `dbgen`): the eight tables as Arrow batches, with
//! TPC-H's types (Int64 keys, Decimal128(15, 2) money, Date32 dates,
//! Utf8View text).

use std::sync::{Arc, Mutex};

use arrow_array::RecordBatch;
use datafusion::catalog::MemTable;
use datafusion::prelude::SessionContext;
use quiverdb::{Database, TableOptions};
use tpchgen::generators::{
    CustomerGenerator, LineItemGenerator, NationGenerator, OrderGenerator, PartGenerator, PartSuppGenerator,
    RegionGenerator, SupplierGenerator,
};
use tpchgen::q_and_a::{answers_sf1, queries};
use tpchgen_arrow::{
    CustomerArrow, LineItemArrow, NationArrow, OrderArrow, PartArrow, PartSuppArrow, RegionArrow, SupplierArrow,
};

type BoxError = Box<dyn std::error::Error>;

/// The eight tables, smallest first.
pub(crate) const TABLES: [&str; 8] =
    ["region", "nation", "supplier", "customer", "part", "partsupp", "orders", "lineitem"];

/// One table's rows.
pub(crate) struct Table {
    pub(crate) name: &'static str,
    pub(crate) batches: Vec<RecordBatch>,
}

impl Table {
    pub(crate) fn rows(&self) -> usize {
        self.batches.iter().map(RecordBatch::num_rows).sum()
    }

    pub(crate) fn arrow_bytes(&self) -> usize {
        self.batches.iter().map(RecordBatch::get_array_memory_size).sum()
    }
}

/// Parts each table is generated in (so that two threads share the big ones).
fn parts(table: &str, sf: f64) -> i32 {
    match table {
        "lineitem" => (8.0 * sf).ceil().max(1.0) as i32,
        "orders" | "partsupp" => (2.0 * sf).ceil().max(1.0) as i32,
        _ => 1,
    }
}

/// Part `part` (1-based) of `parts` of `table` at scale factor `sf`, in
/// batches of `batch_rows`.
fn generate_part(table: &str, sf: f64, part: i32, parts: i32, batch_rows: usize) -> Vec<RecordBatch> {
    fn all<I: Iterator<Item = Result<RecordBatch, arrow_schema::ArrowError>>>(it: I) -> Vec<RecordBatch> {
        it.collect::<Result<_, _>>().expect("tpchgen-arrow builds valid batches")
    }
    match table {
        "region" => all(RegionArrow::new(RegionGenerator::new(sf, part, parts)).with_batch_size(batch_rows)),
        "nation" => all(NationArrow::new(NationGenerator::new(sf, part, parts)).with_batch_size(batch_rows)),
        "supplier" => all(SupplierArrow::new(SupplierGenerator::new(sf, part, parts)).with_batch_size(batch_rows)),
        "customer" => all(CustomerArrow::new(CustomerGenerator::new(sf, part, parts)).with_batch_size(batch_rows)),
        "part" => all(PartArrow::new(PartGenerator::new(sf, part, parts)).with_batch_size(batch_rows)),
        "partsupp" => all(PartSuppArrow::new(PartSuppGenerator::new(sf, part, parts)).with_batch_size(batch_rows)),
        "orders" => all(OrderArrow::new(OrderGenerator::new(sf, part, parts)).with_batch_size(batch_rows)),
        "lineitem" => all(LineItemArrow::new(LineItemGenerator::new(sf, part, parts)).with_batch_size(batch_rows)),
        other => panic!("no TPC-H table {other}"),
    }
}

/// The eight tables at scale factor `sf` (in [`TABLES`] order), generated
/// on `threads` threads, in batches of at most `batch_rows` rows.
pub(crate) fn generate(sf: f64, batch_rows: usize, threads: usize) -> Vec<Table> {
    let jobs: Vec<(usize, i32, i32)> = TABLES
        .iter()
        .enumerate()
        .flat_map(|(t, name)| {
            let n = parts(name, sf);
            (1..=n).map(move |p| (t, p, n))
        })
        .collect();
    let next = Mutex::new(jobs.into_iter().rev().collect::<Vec<_>>());
    let done: Mutex<Vec<(usize, i32, Vec<RecordBatch>)>> = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..threads.max(1) {
            s.spawn(|| {
                loop {
                    let job = next.lock().expect("no panics while held").pop();
                    let Some((t, part, parts)) = job else { break };
                    let batches = generate_part(TABLES[t], sf, part, parts, batch_rows);
                    done.lock().expect("no panics while held").push((t, part, batches));
                }
            });
        }
    });
    let mut done = done.into_inner().expect("no panics while held");
    done.sort_by_key(|(t, part, _)| (*t, *part));
    let mut tables: Vec<Table> = TABLES.iter().map(|&name| Table { name, batches: Vec::new() }).collect();
    for (t, _, batches) in done {
        tables[t].batches.extend(batches);
    }
    tables
}

/// One TPC-H query, ready to run.
pub(crate) struct TpchQuery {
    /// `q01` … `q22`.
    pub(crate) name: String,
    /// Statements run before the timed one (Q15's `CREATE VIEW`).
    pub(crate) setup: Vec<String>,
    /// The timed `SELECT`.
    pub(crate) select: String,
    /// Statements run after it (Q15's `DROP VIEW`).
    pub(crate) teardown: Vec<String>,
    /// Rows of the answer set (at scale factor 1 only).
    pub(crate) answer_rows: Option<usize>,
}

/// The values of query `number`'s parameters `:1`, `:2`, …: the
/// validation values of the TPC-H specification (section 2.4), with which
/// the SF 1 answer set was made. Q11's fraction is 0.0001 / SF.
fn parameters(number: i32, sf: f64) -> Vec<String> {
    let values: &[&str] = match number {
        1 => &["90"],
        2 => &["15", "BRASS", "EUROPE"],
        3 => &["BUILDING", "1995-03-15"],
        4 => &["1993-07-01"],
        5 => &["ASIA", "1994-01-01"],
        6 => &["1994-01-01", "0.06", "24"],
        7 => &["FRANCE", "GERMANY"],
        8 => &["BRAZIL", "AMERICA", "ECONOMY ANODIZED STEEL"],
        9 => &["green"],
        10 => &["1993-10-01"],
        11 => return vec!["GERMANY".to_string(), (0.0001 / sf).to_string()],
        12 => &["MAIL", "SHIP", "1994-01-01"],
        13 => &["special", "requests"],
        14 => &["1995-09-01"],
        15 => &["1996-01-01"],
        16 => &["Brand#45", "MEDIUM POLISHED", "49", "14", "23", "45", "19", "3", "36", "9"],
        17 => &["Brand#23", "MED BOX"],
        18 => &["300"],
        19 => &["Brand#12", "Brand#23", "Brand#34", "1", "10", "20"],
        20 => &["forest", "1994-01-01", "CANADA"],
        21 => &["SAUDI ARABIA"],
        22 => &["13", "31", "23", "29", "30", "18", "17"],
        _ => &[],
    };
    values.iter().map(|&v| v.to_string()).collect()
}

/// The rows qgen keeps of query `number` (its `:n` directive, which the
/// query texts leave out).
fn row_limit(number: i32) -> Option<usize> {
    match number {
        2 | 18 | 21 => Some(100),
        3 => Some(10),
        10 => Some(20),
        _ => None,
    }
}

/// Rows of an answer-set text: its non-blank lines but the header.
fn answer_set_rows(text: &str) -> usize {
    text.lines().filter(|l| !l.trim().is_empty()).count().saturating_sub(1)
}

/// Query `number` at scale factor `sf`, from `tpchgen`'s template.
pub(crate) fn query(number: i32, sf: f64) -> Result<TpchQuery, BoxError> {
    let name = format!("q{number:02}");
    let template = queries::query(number).ok_or_else(|| format!("no TPC-H query {number}"))?;
    // Q15's view is named after the query stream (`revenue:s`); there is one.
    let mut sql = template.replace(":s", "0");
    // Highest first, so that `:1` does not take the start of `:10`.
    for (i, value) in parameters(number, sf).iter().enumerate().rev() {
        sql = sql.replace(&format!(":{}", i + 1), value);
    }
    if sql.contains(':') {
        return Err(format!("{name}: a parameter is left unsubstituted").into());
    }
    // Q1's `interval '90' day (3)`: DataFusion refuses a leading precision.
    let sql = sql.replace(" day (3)", " day");
    let statements: Vec<&str> = sql.split(';').map(str::trim).filter(|s| !s.is_empty()).collect();
    let main = statements
        .iter()
        .position(|s| s.to_ascii_lowercase().starts_with("select"))
        .ok_or_else(|| format!("{name} has no SELECT"))?;
    let mut select = statements[main].to_string();
    if let Some(n) = row_limit(number) {
        select = format!("{select}\nlimit {n}");
    }
    let owned = |texts: &[&str]| texts.iter().map(|&t| t.to_string()).collect::<Vec<_>>();
    let at_sf_1 = (sf - 1.0).abs() < f64::EPSILON;
    Ok(TpchQuery {
        name,
        setup: owned(&statements[..main]),
        select,
        teardown: owned(&statements[main + 1..]),
        answer_rows: if at_sf_1 { answers_sf1::answer(number).map(answer_set_rows) } else { None },
    })
}

/// Creates `table` in `db` with its batches' schema, appends them and
/// rebuilds it into main storage (as `seed::load_sql_table` does).
pub(crate) fn load_quiverdb(db: &Database, table: &Table) -> Result<(), BoxError> {
    let first = table.batches.first().ok_or_else(|| format!("TPC-H table {} has no rows", table.name))?;
    let stored = db.create_table(table.name, &first.schema(), TableOptions::default())?;
    for batch in &table.batches {
        stored.append(batch)?;
    }
    stored.rebuild()?;
    db.wait_for_background_rebuilds();
    Ok(())
}

/// Registers `table` in `ctx` as a `MemTable`, its batches round-robin
/// over `partitions` partitions.
pub(crate) fn register_memtable(ctx: &SessionContext, table: &Table, partitions: usize) -> Result<(), BoxError> {
    let first = table.batches.first().ok_or_else(|| format!("TPC-H table {} has no rows", table.name))?;
    let mut parts: Vec<Vec<RecordBatch>> = vec![Vec::new(); partitions];
    for (i, b) in table.batches.iter().enumerate() {
        parts[i % partitions].push(b.clone());
    }
    ctx.register_table(table.name, Arc::new(MemTable::try_new(first.schema(), parts)?))?;
    Ok(())
}

/// Generates the eight tables at scale factor `sf` straight into `db`,
/// one part at a time (each part's batches appended, then dropped), then
/// rebuilds them into main storage; returns the rows loaded.
pub(crate) fn generate_into(db: &Database, sf: f64, batch_rows: usize) -> Result<usize, BoxError> {
    let mut rows = 0;
    for name in TABLES {
        let n = parts(name, sf);
        let mut stored = None;
        for part in 1..=n {
            for batch in generate_part(name, sf, part, n, batch_rows) {
                if stored.is_none() {
                    stored = Some(db.create_table(name, &batch.schema(), TableOptions::default())?);
                }
                if let Some(t) = &stored {
                    rows += t.append(&batch)?;
                }
            }
        }
        if let Some(t) = &stored {
            t.rebuild()?;
        }
        db.wait_for_background_rebuilds();
    }
    Ok(rows)
}

/// Writes each table to `dir/<table>.parquet` and each query to
/// `dir/qNN.sql` (its statements, each ending in `;`), for other systems
/// to load and run the same rows and texts (`benches/tpch_duckdb.py`).
pub(crate) fn export(dir: &std::path::Path, tables: &[Table], queries: &[TpchQuery]) -> Result<(), BoxError> {
    std::fs::create_dir_all(dir)?;
    for table in tables {
        let Some(first) = table.batches.first() else { continue };
        let file = std::fs::File::create(dir.join(format!("{}.parquet", table.name)))?;
        let mut writer = parquet::arrow::ArrowWriter::try_new(file, first.schema(), None)?;
        for batch in &table.batches {
            writer.write(batch)?;
        }
        writer.close()?;
    }
    for q in queries {
        let statements: Vec<&String> = q.setup.iter().chain([&q.select]).chain(&q.teardown).collect();
        let text: String = statements.iter().map(|s| format!("{s};\n")).collect();
        std::fs::write(dir.join(format!("{}.sql", q.name)), text)?;
    }
    Ok(())
}
