//! TPC-H on quiverdb against DataFusion's `MemTable`, side by side in one
//! process.
//!
//! ```text
//! cargo run --release --example tpch_bench -- --sf 1 --partitions 2
//! ```
//!
//! Generates the eight TPC-H tables in-process (`tpchgen-arrow`, the same
//! rows as `dbgen`, in 8,192-row batches), loads each into quiverdb
//! (appended, then rebuilt into compressed main storage) and into a
//! `MemTable` (the same batches, round-robin over `--partitions`
//! partitions), and runs the 22 queries of `tpchgen::q_and_a` on both with
//! the same partitions and batch size, each side otherwise with its own
//! defaults (quiverdb's session raises DataFusion's hash-join thresholds
//! and key lists; handed to `MemTable` they made its SF1 sum 2.8 → 4.9 s,
//! q18 0.67 → 2.5 s, so it keeps DataFusion's): parameters substituted
//! with the specification's validation values, and the row limits qgen
//! adds (Q2, Q3, Q10, Q18, Q21) appended. Q15's `CREATE VIEW` and `DROP VIEW` run
//! around its `SELECT`, untimed. Planning (SQL → physical plan, with the
//! task context it runs in) and execution (running the plan to completion)
//! are timed separately; each figure is the median of `--runs` (default 3)
//! runs after a warm-up run. The two sides' answers are compared as
//! multisets of formatted rows and, at `--sf 1`, their row counts against
//! the answer set `tpchgen` ships.
//!
//! Prints a markdown table (each side's plan and exec ms, `exec ratio =
//! MemTable exec / quiverdb exec`, rows, same answer, rows against the
//! answer set, errors), a sum row over the queries both sides ran, the
//! load times and, as its last line, a JSON object `{"sf", "partitions",
//! "runs", "quiverdb_load_s", "memtable_load_s", "quiverdb_exec_sum_ms",
//! "memtable_exec_sum_ms", "exec_ratio_of_sums", "queries": [{"query",
//! "quiverdb_plan_ms", "quiverdb_exec_ms", "memtable_plan_ms",
//! "memtable_exec_ms", "exec_ratio", "rows", "same_answer", "answer_rows",
//! "error"}]}`. A query that fails on a side is reported in its row and the
//! run goes on; the exit code is non-zero when an answer differs, misses
//! the answer set's row count or failed. `--query q06` runs one query;
//! `--explain 1` prints each query's physical plan on both sides first,
//! `--explain 2` the plan with the metrics of one run (`EXPLAIN ANALYZE`).
//! `--memtable 0` runs quiverdb alone, generating and loading each part of
//! each table in turn so that only the compressed tables stay in memory
//! (at `--sf 10` the uncompressed batches `MemTable` holds, 18 GB, and
//! quiverdb's copy do not fit this machine's 24 GiB together).
//! `--export DIR` writes the generated tables as Parquet files and the
//! queries (as run here) as `qNN.sql` files into `DIR`, and stops: what
//! `benches/tpch_duckdb.py` runs through quiverdb's server and DuckDB.

#[path = "common/seed.rs"]
mod seed;
#[path = "common/timing.rs"]
mod timing;
#[path = "common/tpch.rs"]
mod tpch;

use std::sync::Arc;
use std::time::Instant;

use datafusion::physical_plan::display::DisplayableExecutionPlan;
use datafusion::physical_plan::{collect, displayable};
use datafusion::prelude::{SessionConfig, SessionContext};
use quiverdb::{Database, SessionOptions};
use timing::{BoxError, measure, plan, rows};

/// Runs of each query before the measured ones: one, not `seed_bench`'s
/// three, as these queries run for milliseconds to seconds rather than
/// microseconds, and each more adds minutes to a run at SF 1.
const WARM_UP: usize = 1;

/// The `MemTable` side's result with `--memtable 0`.
const NOT_RUN: &str = "not run (--memtable 0)";

/// Characters of an error shown in the table (stderr gets all of it).
const ERROR_CHARS: usize = 120;

/// The number of `--query` (`q06`, `Q6` or `6`).
fn query_number(text: &str) -> Result<i32, String> {
    text.trim_start_matches(['q', 'Q'])
        .parse::<i32>()
        .ok()
        .filter(|n| (1..=22).contains(n))
        .ok_or_else(|| format!("--query {text}: expected q01 … q22"))
}

/// One side's figures for a query, and its answer as sorted rows.
struct Answer {
    plan_ms: f64,
    exec_ms: f64,
    rows: Vec<String>,
}

/// Runs a statement that is not timed (Q15's view).
async fn statement(ctx: &SessionContext, sql: &str) -> Result<(), BoxError> {
    ctx.sql(sql).await?.collect().await?;
    Ok(())
}

/// Runs `query` on `ctx` (the `side`): its setup, the timed `SELECT`
/// (its plan printed first when `explain` is 1, after a run with its
/// metrics when it is 2), and its teardown, which runs
/// even when the `SELECT` failed so that the next query starts clean.
async fn run_query(
    ctx: &SessionContext,
    side: &str,
    query: &tpch::TpchQuery,
    runs: usize,
    explain: usize,
) -> Result<Answer, BoxError> {
    for sql in &query.setup {
        statement(ctx, sql).await?;
    }
    let measured = async {
        if explain > 0 {
            let physical = plan(ctx, &query.select).await?;
            if explain > 1 {
                collect(Arc::clone(&physical), ctx.task_ctx()).await?;
                let shown = DisplayableExecutionPlan::with_metrics(physical.as_ref()).indent(false);
                println!("{} on {side}, with the metrics of one run:\n{shown}", query.name);
            } else {
                println!("{} on {side}:\n{}", query.name, displayable(physical.as_ref()).indent(false));
            }
        }
        let (plan_ms, exec_ms, batches) = measure(ctx, &query.select, WARM_UP, runs).await?;
        let mut rows = rows(&batches)?;
        rows.sort_unstable();
        Ok::<_, BoxError>(Answer { plan_ms, exec_ms, rows })
    }
    .await;
    let mut teardown = Ok(());
    for sql in &query.teardown {
        if let Err(e) = statement(ctx, sql).await {
            teardown = Err(e);
        }
    }
    let answer = measured?;
    teardown?;
    Ok(answer)
}

/// A query's result on both sides.
struct Outcome {
    query: tpch::TpchQuery,
    quiverdb: Result<Answer, String>,
    memtable: Result<Answer, String>,
}

impl Outcome {
    fn both(&self) -> Option<(&Answer, &Answer)> {
        Some((self.quiverdb.as_ref().ok()?, self.memtable.as_ref().ok()?))
    }

    /// Whether both sides returned the same rows (`None`: one failed).
    fn same_answer(&self) -> Option<bool> {
        self.both().map(|(q, m)| q.rows == m.rows)
    }

    fn exec_ratio(&self) -> Option<f64> {
        self.both().map(|(q, m)| m.exec_ms / q.exec_ms)
    }

    /// Rows returned: quiverdb's, else MemTable's.
    fn row_count(&self) -> Option<usize> {
        self.quiverdb.as_ref().or(self.memtable.as_ref()).ok().map(|a| a.rows.len())
    }

    /// `ok` when every side that ran returned the answer set's row count,
    /// `mismatch` when one did not, `n/a` without an answer set (or a side
    /// that ran).
    fn answer_check(&self) -> &'static str {
        let Some(expected) = self.query.answer_rows else { return "n/a" };
        let counts: Vec<usize> = [&self.quiverdb, &self.memtable]
            .into_iter()
            .filter_map(|a| a.as_ref().ok())
            .map(|a| a.rows.len())
            .collect();
        if counts.is_empty() {
            "n/a"
        } else if counts.iter().all(|&n| n == expected) {
            "ok"
        } else {
            "mismatch"
        }
    }

    /// Each failed side's error, in one line.
    fn error(&self) -> Option<String> {
        let errors: Vec<String> = [("quiverdb", &self.quiverdb), ("MemTable", &self.memtable)]
            .into_iter()
            .filter_map(|(side, result)| result.as_ref().err().map(|e| (side, e)))
            .filter(|(_, e)| *e != NOT_RUN)
            .map(|(side, e)| format!("{side}: {}", e.replace('\n', " ")))
            .collect();
        (!errors.is_empty()).then(|| errors.join("; "))
    }

    fn failed(&self) -> bool {
        if self.memtable.as_ref().is_err_and(|e| e == NOT_RUN) {
            return self.quiverdb.is_err() || self.answer_check() == "mismatch";
        }
        self.same_answer() != Some(true) || self.answer_check() == "mismatch"
    }
}

/// A side's (plan ms, exec ms), if it ran.
fn figures(side: &Result<Answer, String>) -> (Option<f64>, Option<f64>) {
    side.as_ref().map_or((None, None), |a| (Some(a.plan_ms), Some(a.exec_ms)))
}

fn cell(v: Option<f64>) -> String {
    v.map_or_else(|| "—".to_string(), |v| format!("{v:.2}"))
}

fn json_number(v: Option<f64>) -> String {
    v.filter(|v| v.is_finite()).map_or_else(|| "null".to_string(), |v| format!("{v:.4}"))
}

fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if u32::from(c) < 0x20 => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let flags = seed::flags()?;
    let sf = match flags.iter().find(|(n, _)| n == "sf") {
        None => 1.0,
        Some((_, v)) => v.parse::<f64>().map_err(|e| format!("--sf {v}: {e}"))?,
    };
    if !sf.is_finite() || sf <= 0.0 {
        return Err(format!("--sf {sf}: expected a positive scale factor").into());
    }
    let partitions = seed::flag(&flags, "partitions", 2)?.max(1);
    let runs = seed::flag(&flags, "runs", 3)?.max(1);
    let explain = seed::flag(&flags, "explain", 0)?;
    let only = match flags.iter().find(|(n, _)| n == "query") {
        None => None,
        Some((_, v)) => Some(query_number(v)?),
    };
    let to_run =
        (1..=22).filter(|&n| only.is_none_or(|o| o == n)).map(|n| tpch::query(n, sf)).collect::<Result<Vec<_>, _>>()?;

    let with_memtable = seed::flag(&flags, "memtable", 1)? != 0;
    if let Some((_, dir)) = flags.iter().find(|(n, _)| n == "export") {
        let start = Instant::now();
        let threads = std::thread::available_parallelism().map_or(2, usize::from);
        let tables = tpch::generate(sf, seed::BATCH_ROWS, threads);
        tpch::export(std::path::Path::new(dir), &tables, &to_run)?;
        eprintln!(
            "wrote TPC-H SF {sf} and {} queries to {dir} in {:.1} s",
            to_run.len(),
            start.elapsed().as_secs_f64()
        );
        return Ok(());
    }

    let db = Database::new();
    let (tables, generate_s, quiverdb_load_s) = if with_memtable {
        let start = Instant::now();
        let threads = std::thread::available_parallelism().map_or(2, usize::from);
        let tables = tpch::generate(sf, seed::BATCH_ROWS, threads);
        let generate_s = start.elapsed().as_secs_f64();
        let total_rows: usize = tables.iter().map(tpch::Table::rows).sum();
        eprintln!("generated TPC-H SF {sf}: {total_rows} rows in {generate_s:.1} s");
        let start = Instant::now();
        for table in &tables {
            tpch::load_quiverdb(&db, table)?;
        }
        (tables, generate_s, start.elapsed().as_secs_f64())
    } else {
        // Each part generated, appended and dropped: only quiverdb's
        // compressed tables stay.
        let start = Instant::now();
        let total_rows = tpch::generate_into(&db, sf, seed::BATCH_ROWS)?;
        let load_s = start.elapsed().as_secs_f64();
        eprintln!("generated and loaded TPC-H SF {sf} into quiverdb alone: {total_rows} rows in {load_s:.1} s");
        // Generation is part of the load here.
        (Vec::new(), 0.0, load_s)
    };
    let quiver = quiverdb::session_context_with(
        &db,
        SessionOptions { target_partitions: partitions, batch_size: seed::BATCH_ROWS, ..SessionOptions::default() },
    );

    let start = Instant::now();
    let config = SessionConfig::new().with_target_partitions(partitions).with_batch_size(seed::BATCH_ROWS);
    let memtable = SessionContext::new_with_config(config);
    for table in &tables {
        tpch::register_memtable(&memtable, table, partitions)?;
    }
    let memtable_load_s = start.elapsed().as_secs_f64();
    eprintln!("loaded: quiverdb {quiverdb_load_s:.1} s, MemTable {memtable_load_s:.2} s");

    let mut outcomes = Vec::new();
    for query in to_run {
        let quiverdb = run_query(&quiver, "quiverdb", &query, runs, explain).await.map_err(|e| e.to_string());
        let memtable = if with_memtable {
            run_query(&memtable, "MemTable", &query, runs, explain).await.map_err(|e| e.to_string())
        } else {
            Err(NOT_RUN.to_string())
        };
        for (side, result) in [("quiverdb", &quiverdb), ("MemTable", &memtable)] {
            if let Err(e) = result
                && e != NOT_RUN
            {
                eprintln!("{} failed on {side}: {e}", query.name);
            }
        }
        let outcome = Outcome { query, quiverdb, memtable };
        let ((_, qe), (_, me)) = (figures(&outcome.quiverdb), figures(&outcome.memtable));
        eprintln!("{}: quiverdb exec {} ms, MemTable exec {} ms", outcome.query.name, cell(qe), cell(me));
        outcomes.push(outcome);
    }

    println!("TPC-H SF {sf}, {partitions} partitions; medians of {runs} runs after {WARM_UP} warm-up run\n");
    println!(
        "| query | quiverdb plan ms | quiverdb exec ms | MemTable plan ms | MemTable exec ms | exec ratio | rows | same answer | answer set rows | error |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for o in &outcomes {
        let ((qp, qe), (mp, me)) = (figures(&o.quiverdb), figures(&o.memtable));
        let same = match o.same_answer() {
            Some(true) => "yes",
            Some(false) => "NO",
            None if !with_memtable && o.quiverdb.is_ok() => "—",
            None => "ERROR",
        };
        let row_cell = match o.both() {
            Some((q, m)) if q.rows.len() != m.rows.len() => format!("{}/{}", q.rows.len(), m.rows.len()),
            _ => o.row_count().map_or_else(|| "—".to_string(), |n| n.to_string()),
        };
        let error: String = o
            .error()
            .map(|e| e.chars().map(|c| if c == '|' { '/' } else { c }).take(ERROR_CHARS).collect())
            .unwrap_or_default();
        println!(
            "| {} | {} | {} | {} | {} | {} | {row_cell} | {same} | {} | {error} |",
            o.query.name,
            cell(qp),
            cell(qe),
            cell(mp),
            cell(me),
            o.exec_ratio().map_or_else(|| "—".to_string(), |r| format!("{r:.2}×")),
            o.answer_check(),
        );
    }
    let both: Vec<(&Answer, &Answer)> = outcomes.iter().filter_map(Outcome::both).collect();
    let quiverdb_sum: f64 = both.iter().map(|(q, _)| q.exec_ms).sum();
    let memtable_sum: f64 = both.iter().map(|(_, m)| m.exec_ms).sum();
    let ratio_of_sums = memtable_sum / quiverdb_sum;
    if with_memtable {
        println!("| sum of {} | | {quiverdb_sum:.2} | | {memtable_sum:.2} | {ratio_of_sums:.2}× | | | | |", both.len());
    } else {
        let ran: Vec<f64> = outcomes.iter().filter_map(|o| o.quiverdb.as_ref().ok()).map(|a| a.exec_ms).collect();
        println!("| sum of {} | | {:.2} | | — | — | | | | |", ran.len(), ran.iter().sum::<f64>());
    }
    println!(
        "\ngenerated in {generate_s:.1} s; loaded into quiverdb (append + rebuild into main) in {quiverdb_load_s:.2} s, \
         into MemTable in {memtable_load_s:.2} s"
    );

    let json: Vec<String> = outcomes
        .iter()
        .map(|o| {
            let ((qp, qe), (mp, me)) = (figures(&o.quiverdb), figures(&o.memtable));
            format!(
                "{{\"query\":\"{}\",\"quiverdb_plan_ms\":{},\"quiverdb_exec_ms\":{},\"memtable_plan_ms\":{},\"memtable_exec_ms\":{},\"exec_ratio\":{},\"rows\":{},\"same_answer\":{},\"answer_rows\":\"{}\",\"error\":{}}}",
                o.query.name,
                json_number(qp),
                json_number(qe),
                json_number(mp),
                json_number(me),
                json_number(o.exec_ratio()),
                o.row_count().map_or_else(|| "null".to_string(), |n| n.to_string()),
                o.same_answer().map_or_else(|| "null".to_string(), |s| s.to_string()),
                o.answer_check(),
                o.error().map_or_else(|| "null".to_string(), |e| json_string(&e)),
            )
        })
        .collect();
    println!(
        "\n{{\"sf\":{sf},\"partitions\":{partitions},\"runs\":{runs},\"quiverdb_load_s\":{},\"memtable_load_s\":{},\"quiverdb_exec_sum_ms\":{},\"memtable_exec_sum_ms\":{},\"exec_ratio_of_sums\":{},\"queries\":[{}]}}",
        json_number(Some(quiverdb_load_s)),
        json_number(Some(memtable_load_s)),
        json_number(Some(quiverdb_sum)),
        json_number(Some(memtable_sum)),
        json_number(Some(ratio_of_sums)),
        json.join(",")
    );

    let failed: Vec<&str> = outcomes.iter().filter(|o| o.failed()).map(|o| o.query.name.as_str()).collect();
    if !failed.is_empty() {
        return Err(format!("answers differ, miss the answer set's row count or failed: {}", failed.join(", ")).into());
    }
    Ok(())
}
