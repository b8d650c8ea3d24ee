//! quiverdb against DataFusion's `MemTable`, side by side in one process,
//! on the seed table through SQL.
//!
//! ```text
//! cargo run --release --example seed_bench -- --rows 2000000 --partitions 1
//! ```
//!
//! Loads the seed table into quiverdb (rebuilt into compressed main
//! storage; `name` declared `Utf8View`, so gathered strings point into the
//! dictionary) and into a `MemTable` (the same batches, round-robin over
//! `--partitions` partitions), runs Q1–Q10 on both with the same session
//! settings, and checks the answers are equal. Planning (SQL → physical
//! plan, with the task context it runs in) and execution (running the
//! plan to completion) are timed separately; each figure is the median
//! of `--runs` (default 7) runs after three warm-up runs. Prints a
//! markdown table and, as its last line, a JSON list of `{"query",
//! "partitions", "quiverdb_ms", "memtable_ms", "quiverdb_exec_ms",
//! "memtable_exec_ms", "exec_ratio", "plan_ms", "same_answer"}` with
//! `exec_ratio = memtable_exec_ms / quiverdb_exec_ms` and `plan_ms`
//! quiverdb's planning time. `--partitions 0` runs 1 and 2.
//! `--query Q4` runs one query; `--engine quiverdb` (or `memtable`) runs
//! one side only, for profiling (no ratio, no answer check); `--explain
//! 1` prints each query's physical plan on both sides first.

#[path = "common/seed.rs"]
mod seed;
#[path = "common/timing.rs"]
mod timing;

use std::sync::Arc;

use arrow_array::RecordBatch;
use datafusion::catalog::MemTable;
use datafusion::prelude::{SessionConfig, SessionContext};
use quiverdb::{Database, SessionOptions};
use timing::{BoxError, measure, plan, rows};

/// One benchmark query.
struct Query {
    name: &'static str,
    sql: String,
    /// How answers are compared.
    check: Check,
}

#[derive(Clone, Copy)]
enum Check {
    /// Same rows (as a multiset).
    Rows,
    /// `ORDER BY value DESC LIMIT k`: the same `value` sequence, and the
    /// same rows above the last value (rows tied at the cut may differ).
    TopValue,
}

fn queries() -> Vec<Query> {
    let in_list: Vec<String> = (0..1000).filter(|v| v % 10 != 3).map(|v| v.to_string()).collect();
    let q = |name, sql: &str, check| Query { name, sql: sql.to_string(), check };
    vec![
        q("Q1", "SELECT COUNT(*) FROM t", Check::Rows),
        q("Q2", "SELECT SUM(value) FROM t", Check::Rows),
        q("Q3", "SELECT * FROM t ORDER BY value DESC LIMIT 100", Check::TopValue),
        q("Q4", "SELECT COUNT(*) FROM t WHERE value > 500000", Check::Rows),
        q("Q5", "SELECT category % 100 AS c, COUNT(*) FROM t GROUP BY category % 100", Check::Rows),
        q("Q6", "SELECT name, SUM(value) FROM t GROUP BY name", Check::Rows),
        Query {
            name: "Q7",
            sql: format!("SELECT COUNT(*) FROM t WHERE category IN ({})", in_list.join(", ")),
            check: Check::Rows,
        },
        q("Q8", "SELECT COUNT(*) FROM t WHERE name = 'name_0042'", Check::Rows),
        q("Q9", "SELECT id, value FROM t WHERE id BETWEEN 1000000 AND 1000100", Check::Rows),
        q("Q10", "SELECT * FROM t", Check::Rows),
    ]
}

/// Runs of each query before the measured ones. With one, Q1 (the same
/// plan on both sides, about 10 µs a run) came out at 0.7–0.8× in some
/// runs of the suite, the first queries after loading running slower.
const WARM_UP: usize = 3;

fn same_answer(check: Check, a: &[RecordBatch], b: &[RecordBatch]) -> Result<bool, BoxError> {
    let (mut ra, mut rb) = (rows(a)?, rows(b)?);
    match check {
        Check::Rows => {
            ra.sort_unstable();
            rb.sort_unstable();
            Ok(ra == rb)
        }
        Check::TopValue => {
            // Columns: id|value|category|name.
            let value = |r: &String| r.split('|').nth(1).and_then(|v| v.parse::<i64>().ok());
            let (va, vb): (Vec<_>, Vec<_>) = (ra.iter().map(value).collect(), rb.iter().map(value).collect());
            let cut = va.iter().flatten().min().copied();
            let above = |rows: &[String]| {
                let mut v: Vec<&String> = rows.iter().filter(|r| value(r) > cut).collect();
                v.sort_unstable();
                v.into_iter().cloned().collect::<Vec<_>>()
            };
            Ok(va == vb && above(&ra) == above(&rb))
        }
    }
}

struct Row {
    query: &'static str,
    partitions: usize,
    quiverdb_plan: f64,
    quiverdb_exec: f64,
    memtable_plan: f64,
    memtable_exec: f64,
    same: bool,
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let flags = seed::flags()?;
    let rows_n = seed::flag(&flags, "rows", 2_000_000)?;
    let runs = seed::flag(&flags, "runs", 7)?.max(1);
    let partitions = match seed::flag(&flags, "partitions", 0)? {
        0 => vec![1, 2],
        p => vec![p],
    };
    let only = flags.iter().find(|(n, _)| n == "query").map(|(_, v)| v.clone());
    let engine = flags.iter().find(|(n, _)| n == "engine").map_or("both", |(_, v)| v.as_str());
    let (run_quiver, run_memtable) = match engine {
        "both" => (true, true),
        "quiverdb" => (true, false),
        "memtable" => (false, true),
        other => return Err(format!("--engine {other}: expected both, quiverdb or memtable").into()),
    };

    let batches = seed::batches(rows_n);
    // quiverdb: the seed table with `name` as Utf8View, rebuilt into main.
    let db = Database::new();
    seed::load_sql_table(&db, &batches)?;

    let mut results = Vec::new();
    for &p in &partitions {
        let quiver =
            quiverdb::session_context_with(&db, SessionOptions { target_partitions: p, ..SessionOptions::default() });
        let config = SessionConfig::new().with_target_partitions(p).with_batch_size(seed::BATCH_ROWS);
        let memtable = SessionContext::new_with_config(config);
        let mut parts: Vec<Vec<RecordBatch>> = vec![Vec::new(); p];
        for (i, b) in batches.iter().enumerate() {
            parts[i % p].push(b.clone());
        }
        memtable.register_table("t", Arc::new(MemTable::try_new(seed::schema(), parts)?))?;
        for q in queries() {
            if only.as_deref().is_some_and(|o| o != q.name) {
                continue;
            }
            if seed::flag(&flags, "explain", 0)? != 0 {
                for (side, ctx) in [("quiverdb", &quiver), ("MemTable", &memtable)] {
                    let physical = plan(ctx, &q.sql).await?;
                    let shown = datafusion::physical_plan::displayable(physical.as_ref()).indent(false);
                    println!("{} P={p} on {side}:\n{shown}", q.name);
                }
            }
            let (qp, qe, qa) = if run_quiver {
                measure(&quiver, &q.sql, WARM_UP, runs).await?
            } else {
                (f64::NAN, f64::NAN, Vec::new())
            };
            let (mp, me, ma) = if run_memtable {
                measure(&memtable, &q.sql, WARM_UP, runs).await?
            } else {
                (f64::NAN, f64::NAN, Vec::new())
            };
            let same = !(run_quiver && run_memtable) || same_answer(q.check, &qa, &ma)?;
            results.push(Row {
                query: q.name,
                partitions: p,
                quiverdb_plan: qp,
                quiverdb_exec: qe,
                memtable_plan: mp,
                memtable_exec: me,
                same,
            });
        }
    }

    println!("seed table: {rows_n} rows; medians of {runs} runs after a warm-up\n");
    println!(
        "| query | P | quiverdb plan ms | quiverdb exec ms | MemTable plan ms | MemTable exec ms | exec ratio | same answer |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for r in &results {
        println!(
            "| {} | {} | {:.3} | {:.3} | {:.3} | {:.3} | {:.1}× | {} |",
            r.query,
            r.partitions,
            r.quiverdb_plan,
            r.quiverdb_exec,
            r.memtable_plan,
            r.memtable_exec,
            r.memtable_exec / r.quiverdb_exec,
            if r.same { "yes" } else { "NO" }
        );
    }
    let json: Vec<String> = results
        .iter()
        .map(|r| {
            format!(
                "{{\"query\":\"{}\",\"partitions\":{},\"quiverdb_ms\":{:.4},\"memtable_ms\":{:.4},\"quiverdb_exec_ms\":{:.4},\"memtable_exec_ms\":{:.4},\"exec_ratio\":{:.3},\"plan_ms\":{:.4},\"same_answer\":{}}}",
                r.query,
                r.partitions,
                r.quiverdb_plan + r.quiverdb_exec,
                r.memtable_plan + r.memtable_exec,
                r.quiverdb_exec,
                r.memtable_exec,
                r.memtable_exec / r.quiverdb_exec,
                r.quiverdb_plan,
                r.same
            )
        })
        .collect();
    println!("\n[{}]", json.join(","));
    if results.iter().any(|r| !r.same) {
        return Err("some answers differ between quiverdb and MemTable".into());
    }
    Ok(())
}
