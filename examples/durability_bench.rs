//! What durability costs: ingest of the seed table into an in-memory
//! database and into data directories with each sync mode, and the time
//! to reopen the table from the log alone and from a checkpoint alone.
//!
//! ```text
//! cargo run --release --example durability_bench -- --rows 2000000 --runs 3
//! ```
//!
//! Ingest appends the seed table's 8,192-row batches (as a Flight SQL
//! ingest or `INSERT` does), from one writer or from `--writers` (default
//! 4) concurrent writers each appending every fourth batch; the clock
//! stops when the last append is acknowledged (background rebuilds
//! continue). Each figure is the median of `--runs` runs, each into a
//! fresh table (and data directory); the runs go round the modes, after
//! a warm-up round. Reopen times are measured once on
//! the 2M-row table written with `sync=always`: replaying its log (every
//! append and every background rebuild), then, after a checkpoint,
//! loading the checkpoint with an empty log. Data directories go under
//! `--dir` (default: the system temp directory) and are removed after.
//!
//! `--modes memory,off,batch,always` runs only the ingests named (the
//! ratio column is against the first one run).
//!
//! Replay of many small transactions: `--small 100000` single-row
//! commits (random keys) into a table with a primary key on `id`, then the
//! time to reopen it from the log alone, and (for reference, same rows)
//! from a checkpoint.
//!
//! Prints a markdown table and, as its last line, a JSON object of the
//! figures.

#[path = "common/seed.rs"]
mod seed;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use arrow_array::RecordBatch;
use quiverdb::storage::{DurableOptions, SyncMode};
use quiverdb::{Database, TableOptions};

type BoxError = Box<dyn std::error::Error>;

/// How an ingest run keeps its data.
#[derive(Debug, Clone, Copy)]
enum Mode {
    Memory,
    Durable(SyncMode),
}

impl Mode {
    fn label(self) -> String {
        match self {
            Mode::Memory => "in memory".into(),
            Mode::Durable(SyncMode::Always) => "sync=always".into(),
            Mode::Durable(SyncMode::Batch(every)) => format!("sync=batch ({} ms)", every.as_millis()),
            Mode::Durable(SyncMode::Off) => "sync=off".into(),
        }
    }

    fn open(self, dir: &Path) -> Result<Database, BoxError> {
        Ok(match self {
            Mode::Memory => Database::new(),
            Mode::Durable(sync) => {
                let _ = std::fs::remove_dir_all(dir);
                Database::open(dir, DurableOptions { sync, checkpoint_bytes: 0, ..DurableOptions::default() })?
            }
        })
    }
}

/// Appends `batches` to a new table `t` of `db` from `writers` threads;
/// the time until the last append returned.
fn ingest(db: &Database, batches: &[RecordBatch], writers: usize) -> Result<Duration, BoxError> {
    let table = db.create_table("t", &seed::schema(), TableOptions::default())?;
    let start = Instant::now();
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..writers)
            .map(|w| {
                let table = table.clone();
                s.spawn(move || batches.iter().skip(w).step_by(writers).try_for_each(|b| table.append(b).map(drop)))
            })
            .collect();
        handles.into_iter().try_for_each(|h| h.join().map_err(|_| "a writer panicked")?.map_err(BoxError::from))
    })?;
    Ok(start.elapsed())
}

/// `n` one-row commits with random keys into a table keyed on `id`; the
/// time to reopen it from its log alone, then from a checkpoint.
fn replay_small(dir: &Path, n: usize) -> Result<(Duration, Duration), BoxError> {
    let _ = std::fs::remove_dir_all(dir);
    let durable = DurableOptions { sync: SyncMode::Off, checkpoint_bytes: 0, ..DurableOptions::default() };
    let db = Database::open(dir, durable)?;
    let options = TableOptions::default().with_primary_key(["id"]);
    let table = db.create_table("t", &seed::schema(), options)?;
    let batch = seed::batches(n.max(1)).remove(0);
    // Keys in a random order: a multiplicative permutation of 0..n.
    let mut done = 0;
    let mut key = 0usize;
    while done < n {
        key = (key + 7_919) % n.max(1);
        let ids = arrow_array::Int64Array::from(vec![key as i64]);
        let row = batch.slice(done % batch.num_rows(), 1);
        let mut columns = row.columns().to_vec();
        columns[0] = std::sync::Arc::new(ids);
        table.append(&RecordBatch::try_new(row.schema(), columns)?)?;
        done += 1;
    }
    drop((table, db));
    let start = Instant::now();
    let db = Database::open(dir, durable)?;
    let from_log = start.elapsed();
    // The creation, the commits, and the rebuilds of the shards that filled.
    assert!(db.recovery().map_or(0, |r| r.replayed) > n);
    assert_eq!(db.table("t")?.row_count(), n);
    db.close()?;
    let start = Instant::now();
    let db = Database::open(dir, durable)?;
    let from_checkpoint = start.elapsed();
    assert_eq!(db.table("t")?.row_count(), n);
    drop(db);
    Ok((from_log, from_checkpoint))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> Result<(), BoxError> {
    let flags = seed::flags()?;
    let rows = seed::flag(&flags, "rows", 2_000_000)?;
    let runs = seed::flag(&flags, "runs", 3)?.max(1);
    let writers = seed::flag(&flags, "writers", 4)?.max(1);
    let root = flags
        .iter()
        .find(|(n, _)| n == "dir")
        .map_or_else(|| std::env::temp_dir().join("quiverdb-durability-bench"), |(_, v)| PathBuf::from(v));
    std::fs::create_dir_all(&root)?;
    let batches = seed::batches(rows);
    let bytes: usize = batches.iter().map(RecordBatch::get_array_memory_size).sum();
    eprintln!("seed table: {rows} rows, {:.0} MB as Arrow", bytes as f64 / 1e6);

    let only =
        flags.iter().find(|(n, _)| n == "modes").map(|(_, v)| v.split(',').map(str::to_owned).collect::<Vec<_>>());
    let modes = [
        ("memory", Mode::Memory, 1),
        ("memory", Mode::Memory, writers),
        ("off", Mode::Durable(SyncMode::Off), 1),
        ("batch", Mode::Durable(SyncMode::Batch(Duration::from_millis(100))), 1),
        ("always", Mode::Durable(SyncMode::Always), 1),
        ("always", Mode::Durable(SyncMode::Always), writers),
    ];
    let modes: Vec<_> =
        modes.into_iter().filter(|(name, ..)| only.as_ref().is_none_or(|o| o.iter().any(|m| m == name))).collect();
    // Runs go round the modes (a warm-up round first), so that every mode
    // meets the machine in the same states: side by side, not one after
    // the other.
    let mut times = vec![Vec::new(); modes.len()];
    let mut syncs = vec![0; modes.len()];
    for round in 0..=runs {
        for (i, (_, mode, w)) in modes.iter().enumerate() {
            let dir = root.join("ingest");
            let db = mode.open(&dir)?;
            let took = ingest(&db, &batches, *w)?.as_secs_f64();
            syncs[i] = db.log_stats().map_or(0, |s| s.syncs);
            db.wait_for_background_rebuilds();
            if round > 0 {
                times[i].push(took);
            }
        }
    }
    let mut results = Vec::new();
    for (((_, mode, w), times), syncs) in modes.iter().zip(times).zip(syncs) {
        let secs = median(times);
        results.push((mode.label(), *w, secs, rows as f64 / secs, syncs));
        eprintln!("{} × {w}: {:.0} ms", mode.label(), secs * 1e3);
    }
    let memory = results.first().map_or(f64::NAN, |r| r.3);

    // Reopen: the log alone, then a checkpoint alone.
    let dir = root.join("reopen");
    let db = Mode::Durable(SyncMode::Always).open(&dir)?;
    ingest(&db, &batches, 1)?;
    db.wait_for_background_rebuilds();
    drop(db);
    let durable = DurableOptions { sync: SyncMode::Always, checkpoint_bytes: 0, ..DurableOptions::default() };
    let log_bytes: u64 =
        std::fs::read_dir(dir.join("wal"))?.map(|e| e.map_or(0, |e| e.metadata().map_or(0, |m| m.len()))).sum();
    let start = Instant::now();
    let db = Database::open(&dir, durable)?;
    let from_log = start.elapsed();
    let replayed = db.recovery().map_or(0, |r| r.replayed);
    assert_eq!(db.table("t")?.row_count(), rows);
    db.close()?;
    let start = Instant::now();
    let db = Database::open(&dir, durable)?;
    let from_checkpoint = start.elapsed();
    let report = db.recovery().cloned().ok_or("a durable database has a recovery report")?;
    assert_eq!(db.table("t")?.row_count(), rows);
    assert_eq!(report.replayed, 0);
    let checkpoint_bytes: u64 =
        std::fs::read_dir(dir.join("shards"))?.map(|e| e.map_or(0, |e| e.metadata().map_or(0, |m| m.len()))).sum();
    drop(db);
    let small = seed::flag(&flags, "small", 100_000)?;
    let (small_log, small_checkpoint) = replay_small(&root.join("small"), small)?;
    std::fs::remove_dir_all(&root)?;

    println!(
        "| ingest of {rows} rows ({} batches) | writers | ms | rows/s | vs in memory | log syncs |",
        batches.len()
    );
    println!("|---|---|---|---|---|---|");
    for (label, w, secs, rate, syncs) in &results {
        println!("| {label} | {w} | {:.0} | {:.1}M | {:.2}× | {syncs} |", secs * 1e3, rate / 1e6, rate / memory);
    }
    println!();
    println!("| reopen | ms | read |");
    println!("|---|---|---|");
    println!(
        "| from the log alone ({replayed} records) | {:.0} | {:.0} MB of log |",
        from_log.as_secs_f64() * 1e3,
        log_bytes as f64 / 1e6
    );
    println!(
        "| from the checkpoint alone ({} shard files) | {:.0} | {:.0} MB of shard files |",
        report.shard_files,
        from_checkpoint.as_secs_f64() * 1e3,
        checkpoint_bytes as f64 / 1e6
    );
    println!(
        "| from the log alone ({small} one-row transactions, primary key) | {:.0} | |",
        small_log.as_secs_f64() * 1e3
    );
    println!("| the same from a checkpoint | {:.0} | |", small_checkpoint.as_secs_f64() * 1e3);
    let ingest_json: Vec<String> = results
        .iter()
        .map(|(label, w, secs, rate, syncs)| {
            format!(
                r#"{{"mode": "{label}", "writers": {w}, "ms": {:.1}, "rows_per_s": {rate:.0}, "syncs": {syncs}}}"#,
                secs * 1e3
            )
        })
        .collect();
    println!(
        r#"{{"rows": {rows}, "ingest": [{}], "reopen_log_ms": {:.1}, "reopen_checkpoint_ms": {:.1}, "small_transactions": {small}, "reopen_small_log_ms": {:.1}, "reopen_small_checkpoint_ms": {:.1}}}"#,
        ingest_json.join(", "),
        from_log.as_secs_f64() * 1e3,
        from_checkpoint.as_secs_f64() * 1e3,
        small_log.as_secs_f64() * 1e3,
        small_checkpoint.as_secs_f64() * 1e3
    );
    Ok(())
}
