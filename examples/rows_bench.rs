//! Row-level access through the Rust API: the primary-key index on the
//! seed table (`id` as primary key).
//!
//! ```text
//! cargo run --release --example rows_bench -- --rows 2000000 --runs 3
//! ```
//!
//! Measured, each the median of `--runs` runs:
//! - loads of `--load` rows (default 1,000,000) into an empty table with
//!   and without a primary key, keys in order and shuffled, side by side;
//! - `Table::get` of random present keys on one thread (every column, and
//!   one), and of absent keys;
//! - `Table::multi_get` of 1,000 random keys on one thread;
//! - single-row inserts (`Table::append_row`) of new keys into the loaded
//!   table, random and in order;
//! - the index's memory per row after the table is rebuilt;
//! - SQL point lookups in-process (`WHERE id = k`, `WHERE id IN (1,000
//!   keys)`, planning included), beside the same rows in a table without
//!   a primary key (which scans).
//!
//! A `HashMap<i64, u32>` of the same keys is probed with the same keys as
//! a reference. Prints a markdown table and, as its last line, a JSON
//! object of the figures.

#[path = "common/seed.rs"]
mod seed;

use std::collections::HashMap;
use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

use arrow_array::{ArrayRef, Int64Array, RecordBatch};
use quiverdb::{Database, Table, TableOptions, Value};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

type BoxError = Box<dyn std::error::Error>;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The seed table's batches with `id` shuffled across all rows (each batch
/// keeps its other columns).
fn shuffled(batches: &[RecordBatch], rng: &mut StdRng) -> Result<Vec<RecordBatch>, BoxError> {
    let rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
    let mut ids: Vec<i64> = (0..rows as i64).collect();
    ids.shuffle(rng);
    let mut at = 0;
    batches
        .iter()
        .map(|b| {
            let mut columns = b.columns().to_vec();
            columns[0] = Arc::new(Int64Array::from(ids[at..at + b.num_rows()].to_vec()));
            at += b.num_rows();
            Ok(RecordBatch::try_new(b.schema(), columns)?)
        })
        .collect()
}

/// Milliseconds to append `batches` into a new table (one transaction per
/// batch, as an ingest does).
fn load(batches: &[RecordBatch], keyed: bool) -> Result<(f64, Database, Table), BoxError> {
    let db = Database::new();
    let mut options = TableOptions::default();
    if keyed {
        options = options.with_primary_key(["id"]);
    }
    let table = db.create_table("seed", &seed::schema(), options)?;
    let start = Instant::now();
    for b in batches {
        table.append(b)?;
    }
    let ms = start.elapsed().as_secs_f64() * 1e3;
    Ok((ms, db, table))
}

fn main() -> Result<(), BoxError> {
    let flags = seed::flags()?;
    let flag = |name: &str, default: usize| -> Result<usize, BoxError> {
        match flags.iter().find(|(n, _)| n == name) {
            Some((_, v)) => Ok(v.parse()?),
            None => Ok(default),
        }
    };
    let (rows, runs, load_rows) = (flag("rows", 2_000_000)?, flag("runs", 3)?.max(1), flag("load", 1_000_000)?);
    let lookups = flag("lookups", 1_000_000)?;
    let mut rng = StdRng::seed_from_u64(7);
    let mut figures: Vec<(String, f64, String)> = Vec::new();

    // Loads with and without a key, side by side, in turn.
    let load_batches = seed::batches(load_rows);
    let load_shuffled = shuffled(&load_batches, &mut rng)?;
    let mut times = vec![Vec::new(); 4];
    for _ in 0..runs {
        for (i, (batches, keyed)) in
            [(&load_batches, false), (&load_batches, true), (&load_shuffled, false), (&load_shuffled, true)]
                .into_iter()
                .enumerate()
        {
            let (ms, db, _) = load(batches, keyed)?;
            times[i].push(ms);
            db.wait_for_background_rebuilds();
        }
    }
    let t: Vec<f64> = times.into_iter().map(median).collect();
    let rate = |ms: f64| format!("{:.1}M rows/s", load_rows as f64 / ms / 1e3);
    figures.push((format!("load {load_rows} rows, no key, in order (ms)"), t[0], rate(t[0])));
    figures.push((
        format!("load {load_rows} rows, primary key, in order (ms)"),
        t[1],
        format!("{} · {:.2}× without", rate(t[1]), t[1] / t[0]),
    ));
    figures.push((format!("load {load_rows} rows, no key, shuffled (ms)"), t[2], rate(t[2])));
    figures.push((
        format!("load {load_rows} rows, primary key, shuffled (ms)"),
        t[3],
        format!("{} · {:.2}× without", rate(t[3]), t[3] / t[2]),
    ));

    // The seed table with `id` as primary key, rebuilt into main.
    let (_, db, table) = load(&seed::batches(rows), true)?;
    table.rebuild()?;
    db.wait_for_background_rebuilds();
    let keys: Vec<i64> = (0..lookups).map(|_| rng.random_range(0..rows as i64)).collect();
    // Builds the index of every shard the rebuild did not (none, normally).
    for &k in keys.iter().take(1000) {
        table.get(&[Value::Int(k)], Some(&[0]))?;
    }
    let usage = table.memory_usage();
    let per_row = usage.index_bytes as f64 / table.row_count() as f64;
    figures.push(("index bytes per row".into(), per_row, format!("{} bytes", usage.index_bytes)));

    let reference: HashMap<i64, u32> = (0..rows as i64).map(|k| (k, k as u32)).collect();
    let per_second = |f: &mut dyn FnMut() -> Result<(), BoxError>, n: usize| -> Result<f64, BoxError> {
        let mut rates = Vec::new();
        for _ in 0..runs {
            let start = Instant::now();
            f()?;
            rates.push(n as f64 / start.elapsed().as_secs_f64());
        }
        Ok(median(rates))
    };
    let hash_rate = per_second(
        &mut || {
            for k in &keys {
                black_box(reference.get(k));
            }
            Ok(())
        },
        keys.len(),
    )?;
    let snapshot = table.snapshot();
    let mut found = 0usize;
    let get_all = per_second(
        &mut || {
            for &k in &keys {
                found += snapshot.get(&[Value::Int(k)], None)?.map_or(0, |b| b.num_rows());
            }
            Ok(())
        },
        keys.len(),
    )?;
    assert_eq!(found, keys.len() * runs, "every key present is found");
    let get_one = per_second(
        &mut || {
            for &k in &keys {
                black_box(snapshot.get(&[Value::Int(k)], Some(&[1]))?);
            }
            Ok(())
        },
        keys.len(),
    )?;
    let absent: Vec<i64> = keys.iter().map(|k| k + rows as i64).collect();
    let get_absent = per_second(
        &mut || {
            for &k in &absent {
                black_box(snapshot.get(&[Value::Int(k)], None)?);
            }
            Ok(())
        },
        absent.len(),
    )?;
    let table_get = per_second(
        &mut || {
            for &k in &keys {
                black_box(table.get(&[Value::Int(k)], None)?);
            }
            Ok(())
        },
        keys.len(),
    )?;
    let m = |r: f64| format!("{:.2}M/s", r / 1e6);
    figures.push(("HashMap<i64, u32> probe, reference (M lookups/s)".into(), hash_rate / 1e6, m(hash_rate)));
    figures.push(("snapshot get, every column (M lookups/s)".into(), get_all / 1e6, m(get_all)));
    figures.push(("snapshot get, one column (M lookups/s)".into(), get_one / 1e6, m(get_one)));
    figures.push(("snapshot get, absent keys (M lookups/s)".into(), get_absent / 1e6, m(get_absent)));
    figures.push(("Table::get (snapshot per call) (M lookups/s)".into(), table_get / 1e6, m(table_get)));

    let lists: Vec<ArrayRef> = keys.chunks(1000).map(|c| Arc::new(Int64Array::from(c.to_vec())) as ArrayRef).collect();
    let mut got = 0usize;
    let multi = per_second(
        &mut || {
            for list in &lists {
                got += snapshot.multi_get(std::slice::from_ref(list), None)?.num_rows();
            }
            Ok(())
        },
        keys.len(),
    )?;
    assert_eq!(got, keys.len() * runs, "every key present is found");
    figures.push(("multi_get of 1,000 keys, every column (M keys/s)".into(), multi / 1e6, m(multi)));

    // Single-row inserts of new keys: random, then in order.
    let inserts = flag("inserts", 10_000)?;
    let names = ["name_0001"; 1];
    let insert = |key: i64| -> Result<f64, BoxError> {
        let start = Instant::now();
        table.append_row(&[Value::Int(key), Value::Int(1), Value::Int(2), Value::Str(names[0])])?;
        Ok(start.elapsed().as_secs_f64() * 1e6)
    };
    let mut random_keys: Vec<i64> = (0..inserts as i64).map(|i| 3 * rows as i64 + i).collect();
    random_keys.shuffle(&mut rng);
    let random_us = median(random_keys.iter().map(|&k| insert(k)).collect::<Result<_, _>>()?);
    let ordered_us = median((0..inserts as i64).map(|i| insert(2 * rows as i64 + i)).collect::<Result<_, _>>()?);
    figures.push(("1-row insert, random new key (µs, median)".into(), random_us, String::new()));
    figures.push(("1-row insert, new keys in order (µs, median)".into(), ordered_us, String::new()));
    let dup = table.append_row(&[Value::Int(5), Value::Int(1), Value::Int(2), Value::Str(names[0])]);
    assert!(dup.is_err(), "a duplicate key is refused");

    // SQL point lookups in-process (planning included, as a client's
    // statement pays it), beside the same table without a primary key.
    let plain = db.create_table("plain", &seed::schema(), TableOptions::default())?;
    for b in &seed::batches(rows) {
        plain.append(b)?;
    }
    plain.rebuild()?;
    db.wait_for_background_rebuilds();
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let ctx = quiverdb::session_context(&db);
    let sql_us = |sql: &dyn Fn(usize) -> String, n: usize| -> Result<(f64, usize), BoxError> {
        runtime.block_on(async {
            let (mut times, mut found) = (Vec::new(), 0);
            for i in 0..n {
                let start = Instant::now();
                let batches = ctx.sql(&sql(i)).await?.collect().await?;
                times.push(start.elapsed().as_secs_f64() * 1e6);
                found += batches.iter().map(RecordBatch::num_rows).sum::<usize>();
            }
            Ok((median(times), found))
        })
    };
    let key_list = &keys;
    let point = |table: &'static str| move |i: usize| format!("SELECT * FROM {table} WHERE id = {}", key_list[i]);
    let list: String = keys[..1000].iter().map(i64::to_string).collect::<Vec<_>>().join(", ");
    let in_list = |table: &'static str| {
        let list = list.clone();
        move |_: usize| format!("SELECT * FROM {table} WHERE id IN ({list})")
    };
    let (point_key, n1) = sql_us(&point("seed"), 200)?;
    let (point_scan, n2) = sql_us(&point("plain"), 200)?;
    assert_eq!((n1, n2), (200, 200), "every key present is found");
    let (in_key, n1) = sql_us(&in_list("seed"), 20)?;
    let (in_scan, n2) = sql_us(&in_list("plain"), 20)?;
    assert_eq!(n1, n2, "the lookup and the scan agree");
    let explain = runtime.block_on(async {
        let batches = ctx.sql(&point("seed")(0)).await?.explain(false, false)?.collect().await?;
        Ok::<_, BoxError>(datafusion::arrow::util::pretty::pretty_format_batches(&batches)?.to_string())
    })?;
    assert!(explain.contains("QuiverLookupExec"), "the point query uses the index: {explain}");
    figures.push(("SQL `WHERE id = k`, index (µs, median, planning included)".into(), point_key, String::new()));
    figures.push((
        "SQL `WHERE id = k`, same table without a key: scan (µs)".into(),
        point_scan,
        format!("{:.1}× the index's time", point_scan / point_key),
    ));
    figures.push(("SQL `WHERE id IN (1,000 keys)`, index (µs)".into(), in_key, String::new()));
    figures.push((
        "SQL `WHERE id IN (1,000 keys)`, without a key: scan (µs)".into(),
        in_scan,
        format!("{:.1}× the index's time", in_scan / in_key),
    ));

    println!("| figure | value | |");
    println!("|---|---:|---|");
    for (name, value, note) in &figures {
        println!("| {name} | {value:.2} | {note} |");
    }
    let json: Vec<String> = figures.iter().map(|(n, v, _)| format!("\"{}\":{v:.3}", n.replace('"', "'"))).collect();
    println!("{{\"rows\":{rows},\"runs\":{runs},{}}}", json.join(","));
    Ok(())
}
