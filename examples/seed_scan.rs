//! Runs the seed-table queries through the Rust API (map+reduce scans over
//! compressed main storage) and reports their speed and allocations.
//!
//! ```text
//! cargo run --release --example seed_scan -- --rows 2000000 --threads 1
//! ```
//!
//! Without `--threads`, every query runs with 1 thread and with all
//! available cores; `--query NAME` runs one query only. Each figure is the median of `--runs` (default 7) runs
//! after a warm-up; every answer is checked against a plain computation
//! over the same batches. The last line is a JSON list of
//! `{"query", "threads", "ms", "rows_per_s", "allocs"}`. With
//! `QUIVERDB_SEED_SCAN_TIMES=1` every run's time goes to stderr.

#[path = "common/alloc.rs"]
mod alloc;
#[path = "common/seed.rs"]
mod seed;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{Array, RecordBatch};
use quiverdb::mapreducer::{
    AggFunc, Aggregate, AggregateKernel, AggregateOutput, AggregateSpec, GatherKernel, GatherSpec, MapExpr, Scalar,
};
use quiverdb::scan::{CmpOp, OrderBy, Predicate, ScanOptions, SortKey, scan, scan_order};
use quiverdb::{Database, TableOptions, TableSnapshot};

#[global_allocator]
static ALLOC: alloc::Counting = alloc::Counting;

type BoxError = Box<dyn std::error::Error>;

/// Columns of the seed table.
const ID: usize = 0;
const VALUE: usize = 1;
const CATEGORY: usize = 2;
const NAME: usize = 3;

fn aggregate(
    snap: &TableSnapshot,
    filter: Option<&Predicate>,
    keys: Vec<MapExpr>,
    aggs: Vec<Aggregate>,
    opts: &ScanOptions,
) -> Result<AggregateOutput, BoxError> {
    let spec = Arc::new(AggregateSpec::new(keys, aggs, snap.schema())?);
    let acc = scan(snap, filter, opts, || AggregateKernel::new(Arc::clone(&spec)), || spec.new_acc())?;
    Ok(acc.finish()?)
}

fn gather(
    snap: &TableSnapshot,
    filter: Option<&Predicate>,
    cols: &[usize],
    opts: &ScanOptions,
) -> Result<Vec<RecordBatch>, BoxError> {
    let spec = Arc::new(GatherSpec::columns(snap.schema(), Some(cols), seed::BATCH_ROWS)?);
    let acc = scan(snap, filter, opts, || GatherKernel::new(Arc::clone(&spec)), || spec.new_acc())?;
    Ok(acc.finish()?)
}

fn single_i64(out: &AggregateOutput) -> i64 {
    out.values[0].as_primitive::<Int64Type>().value(0)
}

/// Σ over groups of (key checksum × aggregate): one number per grouped answer.
fn grouped_checksum(out: &AggregateOutput) -> i64 {
    let sums = out.values[0].as_primitive::<Int64Type>();
    (0..sums.len())
        .map(|g| {
            let key = match out.keys[0].data_type() {
                arrow_schema::DataType::Int64 => out.keys[0].as_primitive::<Int64Type>().value(g),
                _ => out.keys[0].as_string::<i32>().value(g)[5..].parse::<i64>().unwrap_or(-1),
            };
            key.wrapping_mul(1_000_003).wrapping_add(sums.value(g))
        })
        .fold(0i64, i64::wrapping_add)
}

fn rows_checksum(batches: &[RecordBatch]) -> i64 {
    batches
        .iter()
        .map(|b| {
            let ids = b.column(0).as_primitive::<Int64Type>();
            (0..b.num_rows()).map(|i| ids.value(i)).fold(b.num_rows() as i64, i64::wrapping_add)
        })
        .fold(0i64, i64::wrapping_add)
}

fn main() -> Result<(), BoxError> {
    let flags = seed::flags()?;
    let rows = seed::flag(&flags, "rows", 2_000_000)?;
    let runs = seed::flag(&flags, "runs", 7)?.max(5);
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let threads: Vec<usize> = match flags.iter().find(|(n, _)| n == "threads") {
        Some(_) => vec![seed::flag(&flags, "threads", 1)?],
        None if cores > 1 => vec![1, cores],
        None => vec![1],
    };

    let only = flags.iter().find(|(n, _)| n == "query").map(|(_, v)| v.clone());
    let batches = seed::batches(rows);
    let db = Database::new();
    let table = db.create_table("seed", &seed::schema(), TableOptions::default().with_background_rebuild(false))?;
    for b in &batches {
        table.append(b)?;
    }
    table.rebuild()?;
    let snap = table.snapshot();

    // Reference answers, computed plainly over the batches.
    let col = |b: &RecordBatch, c: usize| b.column(c).as_primitive::<Int64Type>().values().to_vec();
    let (mut sum, mut gt, mut name42) = (0i64, 0i64, 0i64);
    let (mut by_cat, mut by_name): (HashMap<i64, i64>, HashMap<i64, i64>) = Default::default();
    let in_list: Vec<i64> = (0..1000).filter(|c| c % 10 != 3).collect(); // 900 categories
    let mut in_count = 0i64;
    let mut between = 0i64;
    let mut all_values: Vec<(i64, i64)> = Vec::with_capacity(rows);
    for b in &batches {
        let (id, v, c) = (col(b, ID), col(b, VALUE), col(b, CATEGORY));
        let n = b.column(NAME).as_string::<i32>();
        for i in 0..b.num_rows() {
            sum += v[i];
            gt += (v[i] > 500_000) as i64;
            *by_cat.entry(c[i]).or_default() += v[i];
            let name_no: i64 = n.value(i)[5..].parse().unwrap_or(-1);
            *by_name.entry(name_no).or_default() += v[i];
            name42 += (n.value(i) == "name_0042") as i64;
            in_count += (c[i] % 10 != 3) as i64;
            if (1_000_000..=1_000_100).contains(&id[i]) {
                between = between.wrapping_add(id[i]);
            }
            all_values.push((v[i], id[i]));
        }
    }
    let checksum = |m: &HashMap<i64, i64>| {
        m.iter().map(|(k, s)| k.wrapping_mul(1_000_003).wrapping_add(*s)).fold(0i64, i64::wrapping_add)
    };
    all_values.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    let top_ids: i64 = all_values.iter().take(100).map(|x| x.1).fold(100i64.min(rows as i64), i64::wrapping_add);
    let between_rows = (1_000_000..=1_000_100).filter(|&i| i < rows as i64).count() as i64;
    let all_ids: i64 = (0..rows as i64).fold(rows as i64, i64::wrapping_add);

    type Query<'a> = Box<dyn Fn(&ScanOptions) -> Result<i64, BoxError> + 'a>;
    let gt_filter = Predicate::cmp(MapExpr::col(VALUE), CmpOp::Gt, Scalar::Int(500_000));
    let in_filter = Predicate::InList {
        expr: MapExpr::col(CATEGORY),
        values: in_list.iter().map(|&c| Scalar::Int(c)).collect(),
        negated: false,
    };
    let name_filter = Predicate::cmp(MapExpr::col(NAME), CmpOp::Eq, Scalar::Bytes(b"name_0042".to_vec()));
    let between_filter = Predicate::Between {
        expr: MapExpr::col(ID),
        low: Scalar::Int(1_000_000),
        high: Scalar::Int(1_000_100),
        negated: false,
    };
    let sum_value = || vec![Aggregate::new(AggFunc::Sum, MapExpr::col(VALUE))];
    let queries: Vec<(&str, i64, Query<'_>)> = vec![
        (
            "count",
            rows as i64,
            Box::new(|o| Ok(single_i64(&aggregate(&snap, None, vec![], vec![Aggregate::count_star()], o)?))),
        ),
        ("sum_value", sum, Box::new(|o| Ok(single_i64(&aggregate(&snap, None, vec![], sum_value(), o)?)))),
        (
            "count_value_gt",
            gt,
            Box::new(|o| {
                Ok(single_i64(&aggregate(&snap, Some(&gt_filter), vec![], vec![Aggregate::count_star()], o)?))
            }),
        ),
        (
            "sum_by_category",
            checksum(&by_cat),
            Box::new(|o| Ok(grouped_checksum(&aggregate(&snap, None, vec![MapExpr::col(CATEGORY)], sum_value(), o)?))),
        ),
        (
            "sum_by_name",
            checksum(&by_name),
            Box::new(|o| Ok(grouped_checksum(&aggregate(&snap, None, vec![MapExpr::col(NAME)], sum_value(), o)?))),
        ),
        (
            "count_category_in",
            in_count,
            Box::new(|o| {
                Ok(single_i64(&aggregate(&snap, Some(&in_filter), vec![], vec![Aggregate::count_star()], o)?))
            }),
        ),
        (
            "count_name_eq",
            name42,
            Box::new(|o| {
                Ok(single_i64(&aggregate(&snap, Some(&name_filter), vec![], vec![Aggregate::count_star()], o)?))
            }),
        ),
        (
            "id_between",
            between.wrapping_add(between_rows),
            Box::new(|o| Ok(rows_checksum(&gather(&snap, Some(&between_filter), &[ID, VALUE], o)?))),
        ),
        (
            "top100_value_desc",
            top_ids,
            Box::new(|o| {
                let spec = Arc::new(GatherSpec::columns(snap.schema(), None, seed::BATCH_ROWS)?);
                let acc = scan_order(
                    &snap,
                    None,
                    OrderBy::new(&[SortKey::desc(MapExpr::col(VALUE))]),
                    &o.clone().with_limit(Some(100)),
                    || GatherKernel::new(Arc::clone(&spec)),
                    || spec.new_acc(),
                )?;
                Ok(rows_checksum(&acc.finish()?))
            }),
        ),
        (
            "gather_all",
            all_ids,
            Box::new(|o| Ok(rows_checksum(&gather(&snap, None, &[ID, VALUE, CATEGORY, NAME], o)?))),
        ),
    ];

    println!(
        "seed table: {rows} rows, {} shards, {} bytes of main storage",
        snap.num_shards(),
        table.memory_usage().main_bytes()
    );
    println!("\n| query | threads | ms (median of {runs}) | rows/s | allocs | answer |");
    println!("|---|---:|---:|---:|---:|---|");
    let mut json = Vec::new();
    for &t in &threads {
        let opts = ScanOptions::default().with_threads(t);
        for (name, expected, q) in &queries {
            if only.as_ref().is_some_and(|o| o != name) {
                continue;
            }
            let answer = q(&opts)?; // warm-up
            if answer != *expected {
                return Err(format!("{name}: answer {answer} differs from the reference {expected}").into());
            }
            let mut times = Vec::with_capacity(runs);
            let mut allocs = Vec::with_capacity(runs);
            for _ in 0..runs {
                let a0 = alloc::allocations();
                let start = Instant::now();
                let answer = q(&opts)?;
                times.push(start.elapsed().as_secs_f64() * 1e3);
                allocs.push(alloc::allocations() - a0);
                if answer != *expected {
                    return Err(format!("{name}: answer {answer} differs from the reference {expected}").into());
                }
            }
            times.sort_by(f64::total_cmp);
            if std::env::var_os("QUIVERDB_SEED_SCAN_TIMES").is_some() {
                eprintln!("{name} threads={t}: {times:.3?}");
            }
            allocs.sort_unstable();
            let ms = times[runs / 2];
            let rps = rows as f64 / (ms / 1e3);
            println!("| {name} | {t} | {ms:.3} | {rps:.3e} | {} | ok |", allocs[runs / 2]);
            json.push(format!(
                r#"{{"query":"{name}","threads":{t},"ms":{ms:.4},"rows_per_s":{rps:.0},"allocs":{}}}"#,
                allocs[runs / 2]
            ));
        }
    }
    println!("[{}]", json.join(","));
    Ok(())
}
