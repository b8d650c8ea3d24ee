//! Builds the seed table, appends it in 8,192-row Arrow batches, rebuilds
//! it into main storage, and reports speeds and sizes.
//!
//! ```text
//! cargo run --release --example seed_stats -- --rows 2000000
//! ```
//!
//! The seed table: `id` = 0..N-1, `value` uniform in [0, 1,000,000],
//! `category` uniform in [0, 999], `name` uniform over `name_0000` ..
//! `name_0999` (Int64, Int64, Int64, Utf8), from a fixed RNG seed. The last
//! line printed is one JSON object with the figures.

use std::time::Instant;

use quiverdb::{Database, TableOptions};

#[path = "common/seed.rs"]
mod seed;

/// Loads measured: the first into fresh memory, the rest reusing it.
const RUNS: usize = 3;

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let flags = seed::flags()?;
    let rows = seed::flag(&flags, "rows", 2_000_000)?;
    let schema = seed::schema();
    let batches = seed::batches(rows);

    // Each run loads a fresh table; the figures are medians over the runs.
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut append = Vec::new();
    let mut rebuild = Vec::new();
    let mut table = None;
    for _ in 0..RUNS {
        let db = Database::new();
        // Background rebuilds off, so the append and the rebuild are timed apart.
        let options = TableOptions::default().with_background_rebuild(false);
        let t = db.create_table("seed", &schema, options)?;
        let start = Instant::now();
        for batch in &batches {
            t.append(batch)?;
        }
        append.push(start.elapsed().as_secs_f64());
        let start = Instant::now();
        t.rebuild()?;
        rebuild.push(start.elapsed().as_secs_f64());
        table = Some(t);
    }
    let table = table.expect("RUNS > 0");
    // The first load takes fresh pages from the OS (page faults dominate);
    // later loads reuse freed memory, as a long-running server would.
    let append_secs = append[0];
    let warm_append_secs = median(&mut append[1..]);
    let rebuild_secs = median(&mut rebuild);

    let usage = table.memory_usage();
    let main_bytes = usage.main_bytes();
    println!("seed table: {rows} rows in {} shards", table.snapshot().num_shards());
    println!(
        "append : {:>8.1} ms  {:>12.0} rows/s (one thread, first load into fresh memory)",
        append_secs * 1e3,
        rows as f64 / append_secs
    );
    println!(
        "append : {:>8.1} ms  {:>12.0} rows/s (one thread, later loads reusing memory)",
        warm_append_secs * 1e3,
        rows as f64 / warm_append_secs
    );
    println!(
        "rebuild: {:>8.1} ms  {:>12.0} rows/s ({threads} threads, {:.0} rows/s per thread, median of {RUNS})",
        rebuild_secs * 1e3,
        rows as f64 / rebuild_secs,
        rows as f64 / rebuild_secs / threads as f64
    );
    println!("\n{usage}\n");
    println!("main storage: {main_bytes} bytes, {:.3} bytes/row", main_bytes as f64 / rows as f64);

    let columns: Vec<String> = usage
        .columns
        .iter()
        .map(|c| {
            format!(
                r#"{{"name":"{}","encoding":"{}","bytes":{}}}"#,
                c.name,
                c.dominant_encoding().map_or("none", |e| e.name()),
                c.main_bytes + c.dictionary_bytes + c.zone_map_bytes + c.validity_bytes
            )
        })
        .collect();
    println!(
        r#"{{"rows":{rows},"append_rows_per_s":{:.0},"append_warm_rows_per_s":{:.0},"rebuild_rows_per_s":{:.0},"rebuild_threads":{threads},"main_bytes":{main_bytes},"bytes_per_row":{:.4},"columns":[{}]}}"#,
        rows as f64 / append_secs,
        rows as f64 / warm_append_secs,
        rows as f64 / rebuild_secs,
        main_bytes as f64 / rows as f64,
        columns.join(",")
    );
    Ok(())
}
